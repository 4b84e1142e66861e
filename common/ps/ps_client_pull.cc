// PsClient's pull: per shard a stream of chunks copied straight to each
// tensor's destination (checked in place and size), PendingPull's waits.
#include "common/ps/ps_client.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/handoff.h"
#include "common/io/half.h"
#include "common/model/weights.h"
#include "common/status.h"
#include "grpcpp/grpcpp.h"
#include "common/ps/checkpoint.h"
#include "common/ps/chunk_codec.h"
#include "common/ps/wire.h"

namespace bertps {

using ps::SliceSpec;

namespace {
// Received pull messages (2 MB chunks) waiting for a copy thread: enough to
// ride out a copy slower than a read, bounded so that a slow copier holds
// back the stream (and its memory) instead of queueing the whole model.
constexpr size_t kPullHandoffDepth = 4;
}  // namespace

absl::Status PsClient::PullShard(int shard, const PullRequest& shard_req,
                                 grpc::ClientContext* ctx,
                                 const std::vector<float*>& dest,
                                 int64_t* version, PendingPull* progress) {
  // The payload of each chunk is copied once, from the received slices
  // straight to its tensor's destination. A partial pull names its tensors
  // (those of this shard) and expects exactly their slices.
  const std::vector<int>& mine = plan_.shard_slices(shard);
  PullRequest req = shard_req;
  int64_t expected = 0;
  bool all = true;
  for (int si : mine) {
    const ps::SliceSpec& sl = plan_.slices()[si];
    if (dest[sl.tensor] == nullptr) {
      all = false;
      continue;
    }
    expected += sl.size();
  }
  if (!all) {
    for (int si : mine) {
      const ps::SliceSpec& sl = plan_.slices()[si];
      if (dest[sl.tensor] == nullptr) continue;
      if (req.names_size() == 0 || req.names(req.names_size() - 1) != sl.name) {
        req.add_names(sl.name);
      }
    }
    if (expected == 0) {  // nothing wanted here: not asked
      *version = -1;
      return absl::OkStatus();
    }
  }
  const grpc::internal::RpcMethod method(
      ps::kPullMethod, grpc::internal::RpcMethod::SERVER_STREAMING);
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
          channels_[shard].get(), method, ctx, req));
  // Where each of this shard's slices stands: the next element of a slice
  // sent in ranges, or the rows received of one sent in rows. Checked so
  // that no chunk writes where a reader may already be.
  std::vector<int64_t> next(mine.size());
  std::vector<std::vector<uint8_t>> seen(mine.size());
  for (size_t k = 0; k < mine.size(); ++k) next[k] = plan_.slices()[mine[k]].begin;
  grpc::ByteBuffer buf;
  ps::ParsedPullResponse msg;
  bool have_version = false;
  int64_t received = 0;
  // (Cancelling is safe from either thread; the reading thread finishes
  // the call.)
  auto bad = [&](absl::string_view what, absl::string_view name) {
    ctx->TryCancel();
    return absl::DataLossError(absl::StrCat("shard ", shard, " sent ", what,
                                            " of ", name));
  };
  // Copies one chunk into params (bad() when it does not fit).
  auto take = [&](const ps::ChunkRef& c) -> absl::Status {
    const ParamSpec* spec = layout_.Find(c.name);
    // F32, or BF16 where asked: a range chunk of a product_only tensor.
    const size_t elem = c.dtype == F32 ? 4 : c.dtype == BF16 ? 2 : 0;
    if (spec == nullptr || elem == 0 || c.data_bytes % elem != 0) {
      return bad("a malformed chunk", c.name);
    }
    if (elem == 2 &&
        !(req.bf16_products() && spec->product_only && c.rows.empty())) {
      return bad("an unasked bf16 chunk", c.name);
    }
    const int tensor = static_cast<int>(spec - layout_.tensors().data());
    float* const to = dest[tensor];
    if (to == nullptr) return bad("an unasked chunk", c.name);
    const int64_t n = static_cast<int64_t>(c.data_bytes / elem);
    // The slice of this shard holding element `at` of the tensor.
    auto slice_at = [&](int64_t at) -> int {
      for (size_t k = 0; k < mine.size(); ++k) {
        const ps::SliceSpec& sl = plan_.slices()[mine[k]];
        if (sl.tensor == tensor && at >= sl.begin && at < sl.end) {
          return static_cast<int>(k);
        }
      }
      return -1;
    };
    int64_t first_rows = 0;
    if (c.rows.empty()) {
      const int k = slice_at(c.offset);
      if (k < 0 || c.offset != next[k] || !seen[k].empty() ||
          c.offset + n > plan_.slices()[mine[k]].end) {
        return bad("an out-of-place chunk", c.name);
      }
      if (elem == 4) {
        c.CopyDataTo(to + c.offset);
      } else {
        ps::ChunkRef::Reader(c).ReadBf16(to + c.offset, n);
      }
      next[k] += n;
    } else {
      const int64_t row = ps::RowSize(*spec);
      if (c.offset != 0 ||
          n != static_cast<int64_t>(c.rows.size()) * row) {
        return bad("a malformed row chunk", c.name);
      }
      ps::ChunkRef::Reader in(c);
      for (size_t j = 0; j < c.rows.size(); ++j) {
        const int64_t r = c.rows[j];
        const int64_t num_rows = spec->shape.empty() ? 1 : spec->shape[0];
        const int k = r < 0 || r >= num_rows ? -1 : slice_at(r * row);
        if (k < 0 || next[k] != plan_.slices()[mine[k]].begin) {
          return bad("an out-of-place row", c.name);
        }
        const ps::SliceSpec& sl = plan_.slices()[mine[k]];
        if (seen[k].empty()) seen[k].assign(sl.size() / row, 0);
        uint8_t& flag = seen[k][(r * row - sl.begin) / row];
        if (flag) return bad("a repeated row", c.name);
        flag = 1;
        in.Read(to + r * row, sizeof(float) * row);
        if (tensor == progress->first_tensor_ && progress->first_mask_[r]) {
          ++first_rows;
        }
      }
    }
    received += n;
    progress->Arrived(tensor, n, first_rows,
                      static_cast<int64_t>(c.data_bytes));
    return absl::OkStatus();
  };
  auto copy = [&](ps::ParsedPullResponse& m) -> absl::Status {
    if (m.has_chunk) RETURN_IF_ERROR(take(m.chunk));
    for (const ps::ChunkRef& c : m.chunks) RETURN_IF_ERROR(take(c));
    return absl::OkStatus();
  };
  // With a copy thread, this thread only receives and parses, and the copier
  // (Handoff) takes the messages in order, so that the copy overlaps the
  // next socket read instead of taking turns with it.
  std::optional<Handoff<ps::ParsedPullResponse>> copier;
  if (pull_copy_thread_) {
    copier.emplace(kPullHandoffDepth, copy, copy_lanes_.get(), shard);
  }
  absl::Status failed;  // of this thread: a malformed message, a bad chunk
  // Once the version came, the rest must flow (StallWatch).
  bool stalled = false;
  auto unwatch = absl::MakeCleanup([&] { stalled = stall_watch_->Unwatch(ctx); });
  while (reader->Read(&buf)) {
    stall_watch_->Progress(ctx);
    absl::Status parsed = ps::ParsePullResponse(buf, &msg);
    if (parsed.ok() && msg.has_version) {
      *version = msg.version;
      if (!have_version) stall_watch_->Watch(ctx, options_.pull_stall_timeout);
      have_version = true;
      continue;
    }
    if (!parsed.ok() || (!msg.has_chunk && !msg.has_chunks)) {
      failed = bad("a malformed chunk", msg.chunk.name);
      break;
    }
    if (!copier) {
      failed = copy(msg);
      if (!failed.ok()) break;
    } else if (!copier->Push(std::move(msg))) {
      break;  // the copier failed (and cancelled the call)
    }
  }
  // An error of the copier came first (it has the earlier messages).
  absl::Status copied = copier ? copier->Close() : absl::OkStatus();
  if (!copied.ok() || !failed.ok()) {
    reader->Finish();
    return !copied.ok() ? copied : failed;
  }
  absl::Status st = FromGrpcStatus(reader->Finish());
  std::move(unwatch).Invoke();
  if (stalled) {
    ++pull_stalls_;
    return absl::UnavailableError(absl::StrCat(
        "pull from shard ", shard, " (", options_.addresses[shard],
        ") stalled: nothing for ",
        absl::FormatDuration(options_.pull_stall_timeout), " after ",
        received, " of ", expected,
        " elements, cancelled (its stream or connection stopped moving)"));
  }
  if (!st.ok()) {
    // How far it got says where it stopped: no version yet (the shard had
    // not answered: the request or the version it waits for never came),
    // or a part of the parameters (the transfer stopped).
    return Annotate(
        st, absl::StrCat("pull from shard ", shard, " (",
                         options_.addresses[shard], "; ", received, " of ",
                         expected, " elements received",
                         have_version ? "" : ", no version yet", ")"));
  }
  if (!have_version || received != expected) {
    return absl::DataLossError(absl::StrCat("pull from shard ", shard,
                                            " returned ", received, " of ",
                                            expected, " elements"));
  }
  return absl::OkStatus();
}

std::vector<float*> PsClient::AllTensorsIn(float* params) const {
  std::vector<float*> dest(layout_.tensors().size());
  for (size_t t = 0; t < dest.size(); ++t) {
    dest[t] = params + layout_.tensors()[t].offset;
  }
  return dest;
}

std::unique_ptr<PsClient::PendingPull> PsClient::StartPull(
    int worker, int64_t min_version, int64_t step, float* params,
    const TensorRows* first) {
  return StartPullInto(worker, min_version, step, AllTensorsIn(params), first,
                       options_.pull_bf16_products);
}

absl::StatusOr<int64_t> PsClient::PullInto(int worker, int64_t min_version,
                                           int64_t step,
                                           const std::vector<float*>& dest,
                                           int64_t* payload_bytes) {
  if (dest.size() != layout_.tensors().size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PullInto: ", dest.size(), " destinations for ",
        layout_.tensors().size(), " tensors"));
  }
  std::unique_ptr<PendingPull> pull = StartPullInto(
      worker, min_version, step, dest, nullptr, options_.pull_bf16_products);
  absl::StatusOr<int64_t> version = pull->Finish();
  if (payload_bytes != nullptr) *payload_bytes = pull->payload_bytes();
  return version;
}

std::unique_ptr<PsClient::PendingPull> PsClient::StartPullInto(
    int worker, int64_t min_version, int64_t step, std::vector<float*> dest,
    const TensorRows* first, bool bf16) {
  std::unique_ptr<PendingPull> p(new PendingPull());
  const int s = num_shards();
  p->layout_ = &layout_;
  {
    absl::MutexLock l(&p->mu_);
    p->received_.assign(layout_.tensors().size(), 0);
    p->shards_left_ = s;
  }
  PullRequest req;
  req.set_worker(worker);
  req.set_min_version(min_version);
  req.set_step(step);
  req.set_bf16_products(bf16);
  if (first != nullptr && layout_.Find(first->name()) != nullptr) {
    const ParamSpec* spec = layout_.Find(first->name());
    p->first_tensor_ = static_cast<int>(spec - layout_.tensors().data());
    p->first_mask_.assign(spec->shape.empty() ? 1 : spec->shape[0], 0);
    for (int64_t r : first->rows()) {
      if (r >= 0 && r < static_cast<int64_t>(p->first_mask_.size()) &&
          !p->first_mask_[r]) {
        p->first_mask_[r] = 1;
        ++p->first_wanted_;
      }
    }
    *req.add_first() = *first;
  }
  p->status_.assign(s, absl::OkStatus());
  p->versions_.assign(s, 0);
  for (int i = 0; i < s; ++i) {
    p->contexts_.push_back(std::make_unique<grpc::ClientContext>());
    NewContext(p->contexts_.back().get());
    canceller_->Add(p->contexts_.back().get());
  }
  p->canceller_ = canceller_.get();
  PendingPull* raw = p.get();
  raw->dest_ = std::move(dest);
  for (int i = 0; i < s; ++i) {
    p->done_.push_back(pull_lanes_->Run(i, [this, raw, req, i] {
      raw->status_[i] = PullShard(i, req, raw->contexts_[i].get(), raw->dest_,
                                  &raw->versions_[i], raw);
      NoteUnavailable(raw->status_[i]);
      raw->ShardDone(raw->status_[i]);
    }));
  }
  return p;
}

void PsClient::PendingPull::Arrived(int tensor, int64_t elements,
                                    int64_t first_rows, int64_t bytes) {
  absl::MutexLock l(&mu_);
  received_[tensor] += elements;
  first_received_ += first_rows;
  payload_bytes_ += bytes;
}

int64_t PsClient::PendingPull::payload_bytes() const {
  absl::MutexLock l(&mu_);
  return payload_bytes_;
}

void PsClient::PendingPull::ShardDone(const absl::Status& status) {
  absl::MutexLock l(&mu_);
  --shards_left_;
  if (!status.ok() && error_.ok()) {
    error_ = status;
    // The pull has failed: the other shards' halves stop now rather than
    // wait out a version that may never come (a shard gone stalls its
    // peers' updates).
    for (auto& c : contexts_) c->TryCancel();
  }
}

absl::Status PsClient::PendingPull::Wait(const std::vector<int>& tensors,
                                         bool first_rows) {
  absl::MutexLock l(&mu_);
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!error_.ok() || shards_left_ == 0) return true;
    if (first_rows && first_received_ < first_wanted_) return false;
    for (int t : tensors) {
      if (received_[t] < layout_->tensors()[t].size) return false;
    }
    return true;
  };
  mu_.Await(absl::Condition(&ready));
  // Without an error, every shard that ended delivered all of its part
  // (each checks its count).
  return error_;
}

absl::StatusOr<int64_t> PsClient::PendingPull::Finish() {
  for (auto& d : done_) d->WaitForNotification();
  finished_ = true;
  {
    // The first failure, not the cancellations it caused.
    absl::MutexLock l(&mu_);
    RETURN_IF_ERROR(error_);
  }
  for (const absl::Status& x : status_) RETURN_IF_ERROR(x);
  // The smallest version of the shards asked (-1: a partial pull's shard
  // holding none of its tensors).
  int64_t v = -1;
  for (int64_t x : versions_) {
    if (x >= 0 && (v < 0 || x < v)) v = x;
  }
  return v;
}

PsClient::PendingPull::~PendingPull() {
  if (!finished_) {
    for (auto& c : contexts_) c->TryCancel();
  }
  for (auto& d : done_) d->WaitForNotification();
  for (auto& c : contexts_) canceller_->Remove(c.get());
}

absl::StatusOr<int64_t> PsClient::Pull(int worker, int64_t min_version,
                                       int64_t step, float* params) {
  return StartPullInto(worker, min_version, step, AllTensorsIn(params),
                       nullptr, /*bf16=*/false)
      ->Finish();
}

std::future<absl::StatusOr<int64_t>> PsClient::PullAsync(int worker,
                                                         int64_t min_version,
                                                         int64_t step,
                                                         float* params) {
  return std::async(std::launch::async, [=] {
    return Pull(worker, min_version, step, params);
  });
}

}  // namespace bertps
