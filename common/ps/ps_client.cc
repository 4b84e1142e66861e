#include "common/ps/ps_client.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

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

PsClient::PsClient(const PsClientOptions& options, const BertConfig& config,
                   BertTask task, ParamLayout layout, ps::PartitionPlan plan)
    : options_(options),
      config_(config),
      task_(task),
      layout_(std::move(layout)),
      plan_(std::move(plan)) {}

PsClient::~PsClient() = default;

namespace {
void SetIncarnation(const PsClientOptions& o, grpc::ClientContext* ctx) {
  if (o.incarnation > 0) {
    ctx->AddMetadata(ps::kIncarnationMetadata, absl::StrCat(o.incarnation));
  }
}
}  // namespace

grpc::ClientContext* PsClient::NewContext(grpc::ClientContext* ctx) const {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
  SetIncarnation(options_, ctx);
  return ctx;
}

absl::StatusOr<std::unique_ptr<PsClient>> PsClient::Connect(
    const PsClientOptions& options, const BertConfig& config, BertTask task) {
  if (options.addresses.empty()) {
    return absl::InvalidArgumentError("no parameter-server addresses");
  }
  ParamLayout layout = ParamLayout::ForBert(config, task);
  ASSIGN_OR_RETURN(ps::PartitionPlan plan,
                   ps::PartitionPlan::Make(
                       layout, static_cast<int>(options.addresses.size())));
  std::unique_ptr<PsClient> c(new PsClient(options, config, task,
                                           std::move(layout), std::move(plan)));
  c->pull_copy_thread_ = options.pull_copy_thread.value_or(
      static_cast<int>(options.addresses.size()) <=
      static_cast<int>(std::thread::hardware_concurrency()));
  c->pull_window_bytes_ = options.pull_window_bytes.value_or(
      c->pull_copy_thread_ ? 0 : kFixedPullWindowBytes);
  if (c->pull_window_bytes_ < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pull_window_bytes must be >= 0, not ", c->pull_window_bytes_));
  }
  grpc::ChannelArguments args = ps::ClientChannelArguments();
  if (c->pull_window_bytes_ > 0) {
    args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, c->pull_window_bytes_);
  }
  for (size_t i = 0; i < options.addresses.size(); ++i) {
    auto channel = MakeChannel(options.addresses[i], options.security, args);
    c->stubs_.push_back(ParameterServer::NewStub(channel));
    c->channels_.push_back(channel);
    // A shard that is starting, or has not yet taken the job from the
    // coordinator, answers UNAVAILABLE: retry until connect_timeout.
    const absl::Time until = absl::Now() + options.connect_timeout;
    DescribeResponse d;
    absl::Status st;
    for (int attempt = 0;; ++attempt) {
      if (options.cancel != nullptr && options.cancel->load()) {
        return absl::CancelledError("connecting to the shards: cancelled");
      }
      grpc::ClientContext ctx;
      // Short attempts, so a cancellation is noticed within a second.
      ctx.set_deadline(absl::ToChronoTime(
          std::min(until, absl::Now() + absl::Seconds(1))));
      ctx.set_wait_for_ready(true);
      SetIncarnation(options, &ctx);
      st = FromGrpcStatus(
          c->stubs_.back()->Describe(&ctx, DescribeRequest(), &d));
      if ((st.code() != absl::StatusCode::kUnavailable &&
           st.code() != absl::StatusCode::kDeadlineExceeded) ||
          absl::Now() + absl::Milliseconds(100) >= until) {
        break;
      }
      absl::SleepFor(absl::Milliseconds(std::min(500, 20 << std::min(attempt, 5))));
    }
    if (!st.ok()) {
      return Annotate(st, absl::StrCat("parameter-server shard ", i, " at ",
                                       options.addresses[i]));
    }
    if (d.shard_index() != static_cast<int>(i) ||
        d.num_shards() != static_cast<int>(options.addresses.size())) {
      return absl::FailedPreconditionError(absl::StrCat(
          options.addresses[i], " is shard ", d.shard_index(), " of ",
          d.num_shards(), ", expected shard ", i, " of ",
          options.addresses.size()));
    }
    if (d.task() != BertTaskName(task)) {
      return absl::FailedPreconditionError(
          absl::StrCat(options.addresses[i], " serves task ", d.task()));
    }
    ASSIGN_OR_RETURN(BertConfig sc, ParseBertConfig(d.model_config_json()));
    if (sc.ToJson() != config.ToJson()) {
      return absl::FailedPreconditionError(absl::StrCat(
          options.addresses[i], " serves a different model config"));
    }
    // The slices must be exactly our plan's.
    const auto& mine = c->plan_.shard_slices(static_cast<int>(i));
    if (static_cast<size_t>(d.slices_size()) != mine.size()) {
      return absl::FailedPreconditionError(
          absl::StrCat(options.addresses[i], " has a different partition"));
    }
    for (size_t k = 0; k < mine.size(); ++k) {
      const SliceSpec& s = c->plan_.slices()[mine[k]];
      if (d.slices(k).name() != s.name || d.slices(k).begin() != s.begin ||
          d.slices(k).end() != s.end) {
        return absl::FailedPreconditionError(
            absl::StrCat(options.addresses[i], " has a different partition"));
      }
    }
    c->described_.push_back(d);
  }
  if (options.compress_bf16) c->residual_.assign(c->layout_.total_size(), 0.f);
  return c;
}

namespace {
// Received pull messages (2 MB chunks) waiting for a copy thread: enough to
// ride out a copy slower than a read, bounded so that a slow copier holds
// back the stream (and its memory) instead of queueing the whole model.
constexpr size_t kPullHandoffDepth = 4;
}  // namespace

absl::Status PsClient::PullShard(int shard, const PullRequest& req,
                                 grpc::ClientContext* ctx, float* params,
                                 int64_t* version, PendingPull* progress) {
  // The payload of each chunk is copied once, from the received slices
  // straight into params.
  const grpc::internal::RpcMethod method(
      ps::kPullMethod, grpc::internal::RpcMethod::SERVER_STREAMING);
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
          channels_[shard].get(), method, ctx, req));
  // Where each of this shard's slices stands: the next element of a slice
  // sent in ranges, or the rows received of one sent in rows. Checked so
  // that no chunk writes where a reader may already be.
  const std::vector<int>& mine = plan_.shard_slices(shard);
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
    if (spec == nullptr || c.dtype != F32 || c.data_bytes % sizeof(float) != 0) {
      return bad("a malformed chunk", c.name);
    }
    const int tensor = static_cast<int>(spec - layout_.tensors().data());
    const int64_t n = static_cast<int64_t>(c.data_bytes / sizeof(float));
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
      c.CopyDataTo(params + spec->offset + c.offset);
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
        in.Read(params + spec->offset + r * row, sizeof(float) * row);
        if (tensor == progress->first_tensor_ && progress->first_mask_[r]) {
          ++first_rows;
        }
      }
    }
    received += n;
    progress->Arrived(tensor, n, first_rows);
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
  if (pull_copy_thread_) copier.emplace(kPullHandoffDepth, copy);
  absl::Status failed;  // of this thread: a malformed message, a bad chunk
  while (reader->Read(&buf)) {
    absl::Status parsed = ps::ParsePullResponse(buf, &msg);
    if (parsed.ok() && msg.has_version) {
      *version = msg.version;
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
  if (!st.ok()) {
    return Annotate(st, absl::StrCat("pull from shard ", shard, " (",
                                     options_.addresses[shard], ")"));
  }
  if (!have_version || received != plan_.shard_size(shard)) {
    return absl::DataLossError(absl::StrCat(
        "pull from shard ", shard, " returned ", received, " of ",
        plan_.shard_size(shard), " elements"));
  }
  return absl::OkStatus();
}

std::unique_ptr<PsClient::PendingPull> PsClient::StartPull(
    int worker, int64_t min_version, int64_t step, float* params,
    const TensorRows* first) {
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
  }
  PendingPull* raw = p.get();
  for (int i = 0; i < s; ++i) {
    p->threads_.emplace_back([this, raw, req, i, params] {
      raw->status_[i] = PullShard(i, req, raw->contexts_[i].get(), params,
                                  &raw->versions_[i], raw);
      NoteUnavailable(raw->status_[i]);
      raw->ShardDone(raw->status_[i]);
    });
  }
  return p;
}

void PsClient::PendingPull::Arrived(int tensor, int64_t elements,
                                    int64_t first_rows) {
  absl::MutexLock l(&mu_);
  received_[tensor] += elements;
  first_received_ += first_rows;
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
  for (auto& t : threads_) t.join();
  threads_.clear();
  finished_ = true;
  {
    // The first failure, not the cancellations it caused.
    absl::MutexLock l(&mu_);
    RETURN_IF_ERROR(error_);
  }
  for (const absl::Status& x : status_) RETURN_IF_ERROR(x);
  return *std::min_element(versions_.begin(), versions_.end());
}

PsClient::PendingPull::~PendingPull() {
  if (!finished_) {
    for (auto& c : contexts_) c->TryCancel();
  }
  for (auto& t : threads_) t.join();
}

absl::StatusOr<int64_t> PsClient::Pull(int worker, int64_t min_version,
                                       int64_t step, float* params) {
  return StartPull(worker, min_version, step, params)->Finish();
}

std::future<absl::StatusOr<int64_t>> PsClient::PullAsync(int worker,
                                                         int64_t min_version,
                                                         int64_t step,
                                                         float* params) {
  return std::async(std::launch::async, [=] {
    return Pull(worker, min_version, step, params);
  });
}

// One shard's half of a push: its stream and a sender thread.
struct PsClient::PushStream::Shard {
  int index = 0;
  grpc::ClientContext ctx;
  PushResponse resp;
  std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer;
  std::thread thread;
  std::mutex mu;
  std::condition_variable cv;
  struct Item {
    int tensor = 0;
    const float* grad = nullptr;
    // Rows only (all of them, or all but these, with except).
    std::shared_ptr<const std::vector<int64_t>> rows;
    bool except = false;
    std::shared_ptr<const PushRequest> message;  // sent as is instead
  };
  std::deque<Item> queue;
  bool closed = false;
  bool broken = false;
};

absl::StatusOr<std::unique_ptr<PsClient::PushStream>> PsClient::BeginPush(
    const PushHeader& header) {
  auto ps = std::unique_ptr<PushStream>(new PushStream());
  ps->client_ = this;
  ps->header_ = header;
  for (int i = 0; i < num_shards(); ++i) {
    auto sh = std::make_unique<PushStream::Shard>();
    sh->index = i;
    NewContext(&sh->ctx);
    const grpc::internal::RpcMethod method(
        ps::kPushMethod, grpc::internal::RpcMethod::CLIENT_STREAMING);
    sh->writer.reset(
        grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(
            channels_[i].get(), method, &sh->ctx, &sh->resp));
    PushRequest first;
    *first.mutable_header() = header;
    if (!sh->writer->Write(ps::EncodeMessage(first))) sh->broken = true;
    PushStream::Shard* raw = sh.get();
    sh->thread = std::thread([this, raw] {
      std::vector<uint16_t> bf16;
      std::vector<int64_t> rows;
      // Chunks go out together while more are queued (one message up to
      // about ps::kBatchBytes): the many small tensors backward makes at
      // once cost one write, not one each.
      ps::ChunkBatch batch(ps::kPushChunksField);
      auto flush = [&] {
        return batch.empty() || raw->writer->Write(batch.Take());
      };
      auto added = [&] {
        return batch.payload_bytes() < ps::kBatchBytes || flush();
      };
      // Writes n elements of the gradient that lie at `g` (contiguous), as
      // a range chunk at `off`, or gathered from `rows` (row chunk).
      auto write = [&](const ParamSpec& spec, int64_t off, const float* g,
                       int64_t n, absl::Span<const int64_t> chunk_rows,
                       const float* base, int64_t row) {
        grpc::Slice payload;
        if (!chunk_rows.empty() && !options_.compress_bf16) {
          // Long runs of rows are sent from the gradient itself (valid until
          // Finish(), as below), short ones copied together.
          const grpc::Slice table(const_cast<float*>(base),
                                  sizeof(float) * spec.size,
                                  grpc::Slice::STATIC_SLICE);
          batch.AddRowChunk(
              spec.name, F32, chunk_rows,
              ps::RowPieces(table, sizeof(float) * row, 0, chunk_rows));
          return added();
        }
        if (!chunk_rows.empty()) {
          // Gathered into one payload, rounded to bf16 with error feedback.
          payload = grpc::Slice(sizeof(uint16_t) * row * chunk_rows.size());
          uint16_t* out =
              reinterpret_cast<uint16_t*>(const_cast<uint8_t*>(payload.begin()));
          for (size_t j = 0; j < chunk_rows.size(); ++j) {
            const float* src = base + chunk_rows[j] * row;
            float* r = residual_.data() + spec.offset + chunk_rows[j] * row;
            uint16_t* o = out + j * row;
            for (int64_t k = 0; k < row; ++k) {
              const float v = src[k] + r[k];
              o[k] = io::F32ToBf16(v);
              r[k] = v - io::Bf16ToF32(o[k]);
            }
          }
          std::vector<grpc::Slice> pieces;
          pieces.push_back(std::move(payload));
          batch.AddRowChunk(spec.name, BF16, chunk_rows, std::move(pieces));
          return added();
        }
        if (options_.compress_bf16) {
          // Error feedback: send bf16(g + r), keep the rounding error.
          float* r = residual_.data() + spec.offset + off;
          bf16.resize(n);
          for (int64_t k = 0; k < n; ++k) {
            const float v = g[k] + r[k];
            bf16[k] = io::F32ToBf16(v);
            r[k] = v - io::Bf16ToF32(bf16[k]);
          }
          batch.AddChunk(spec.name, BF16, off,
                         grpc::Slice(bf16.data(), 2 * n));  // a copy
          return added();
        }
        // Sent from the gradient itself, which stays valid until Finish()
        // (the batch is written before this thread ends, and a synchronous
        // Write returns once it is written).
        batch.AddChunk(
            spec.name, F32, off,
            grpc::Slice(g, sizeof(float) * n, grpc::Slice::STATIC_SLICE));
        return added();
      };
      for (;;) {
        PushStream::Shard::Item item;
        bool idle = false;  // nothing queued: what is batched goes now
        {
          std::unique_lock<std::mutex> l(raw->mu);
          if (raw->queue.empty() && !batch.empty() && !raw->broken) {
            idle = true;
          } else {
            raw->cv.wait(l, [&] { return raw->closed || !raw->queue.empty(); });
            if (raw->queue.empty()) {
              l.unlock();
              if (!raw->broken && !flush()) raw->broken = true;
              return;
            }
            item = std::move(raw->queue.front());
            raw->queue.pop_front();
          }
        }
        if (idle) {
          if (!flush()) raw->broken = true;
          continue;
        }
        if (raw->broken) continue;
        if (item.message) {
          if (!flush() || !raw->writer->Write(ps::EncodeMessage(*item.message))) {
            raw->broken = true;
          }
          continue;
        }
        const ParamSpec& spec = layout_.tensors()[item.tensor];
        const int64_t row = ps::RowSize(spec);
        for (int si : plan_.shard_slices(raw->index)) {
          const SliceSpec& sl = plan_.slices()[si];
          if (sl.tensor != item.tensor) continue;
          bool ok = true;
          if (item.rows) {
            rows = ps::RowsOfSlice(sl, row, *item.rows, item.except);
            const size_t per = std::max<int64_t>(1, ps::kChunkElements / row);
            for (size_t k = 0; ok && k < rows.size(); k += per) {
              const size_t m = std::min(per, rows.size() - k);
              ok = write(spec, 0, nullptr, 0,
                         absl::MakeConstSpan(rows.data() + k, m), item.grad,
                         row);
            }
          } else {
            for (int64_t off = sl.begin; ok && off < sl.end;
                 off += ps::kChunkElements) {
              const int64_t n = std::min(ps::kChunkElements, sl.end - off);
              ok = write(spec, off, item.grad + off, n, {}, nullptr, row);
            }
          }
          if (!ok) {
            raw->broken = true;
            break;
          }
        }
      }
    });
    ps->shards_.push_back(std::move(sh));
  }
  return ps;
}

void PsClient::PushStream::Send(int tensor, const float* grad) {
  SendRows(tensor, grad, nullptr, false);
}

void PsClient::PushStream::SendRows(
    int tensor, const float* grad,
    std::shared_ptr<const std::vector<int64_t>> rows, bool except) {
  for (auto& sh : shards_) {
    bool has = false;
    for (int si : client_->plan_.shard_slices(sh->index)) {
      if (client_->plan_.slices()[si].tensor == tensor) has = true;
    }
    if (!has) continue;
    std::lock_guard<std::mutex> l(sh->mu);
    sh->queue.push_back({tensor, grad, rows, except});
    sh->cv.notify_one();
  }
}

void PsClient::PushStream::SendNextFirst(const TensorRows& rows) {
  auto m = std::make_shared<PushRequest>();
  *m->mutable_next_first() = rows;
  for (auto& sh : shards_) {
    std::lock_guard<std::mutex> l(sh->mu);
    PushStream::Shard::Item item;
    item.message = m;
    sh->queue.push_back(std::move(item));
    sh->cv.notify_one();
  }
}

void PsClient::PushStream::CloseWrites() {
  if (closed_) return;
  closed_ = true;
  // Close every stream before waiting for any answer: under BSP a shard
  // answers only once the step is applied, which needs every shard's data.
  for (auto& sh : shards_) {
    {
      std::lock_guard<std::mutex> l(sh->mu);
      sh->closed = true;
      sh->cv.notify_one();
    }
    sh->thread.join();
    sh->writer->WritesDone();
  }
}

absl::StatusOr<int64_t> PsClient::PushStream::Finish() {
  CloseWrites();
  int64_t version = -1;
  absl::Status first_error;
  for (auto& sh : shards_) {
    absl::Status st = FromGrpcStatus(sh->writer->Finish());
    client_->NoteUnavailable(st);
    if (!st.ok() && first_error.ok()) {
      first_error = Annotate(
          st, absl::StrCat("push to shard ", sh->index, " (",
                           client_->options_.addresses[sh->index], ")"));
    }
    if (st.ok()) {
      version = version < 0 ? sh->resp.version()
                            : std::min(version, sh->resp.version());
    }
  }
  shards_.clear();
  RETURN_IF_ERROR(first_error);
  return version;
}

PsClient::PushStream::~PushStream() {
  for (auto& sh : shards_) {
    {
      std::lock_guard<std::mutex> l(sh->mu);
      sh->closed = true;
      sh->cv.notify_one();
    }
    sh->ctx.TryCancel();
    if (sh->thread.joinable()) sh->thread.join();
  }
}

absl::StatusOr<int64_t> PsClient::Push(const PushHeader& header,
                                       const float* grads) {
  absl::Status last;
  for (int attempt = 0; attempt < 5; ++attempt) {
    ASSIGN_OR_RETURN(std::unique_ptr<PushStream> s, BeginPush(header));
    for (size_t t = 0; t < layout_.tensors().size(); ++t) {
      s->Send(static_cast<int>(t), grads + layout_.tensors()[t].offset);
    }
    absl::StatusOr<int64_t> v = s->Finish();
    if (v.ok()) return v;
    last = v.status();
    // Only transport failures are retried; the shard recognises the retry.
    if (last.code() != absl::StatusCode::kUnavailable) return last;
    absl::SleepFor(absl::Milliseconds(200 << attempt));
  }
  return last;
}

absl::StatusOr<AnnounceResponse> PsClient::Announce(
    const AnnounceRequest& request) {
  grpc::ClientContext ctx;
  NewContext(&ctx);
  AnnounceResponse resp;
  absl::Status st =
      FromGrpcStatus(stubs_[0]->Announce(&ctx, request, &resp));
  NoteUnavailable(st);
  if (!st.ok()) return Annotate(st, "batch totals from shard 0");
  return resp;
}

absl::StatusOr<std::string> PsClient::Checkpoint(const std::string& dir,
                                                 int64_t version) {
  ps::Manifest m;
  m.version = version;
  m.num_shards = num_shards();
  m.config_json = config_.ToJson();
  m.task = std::string(BertTaskName(task_));
  m.optimizer = described_[0].optimizer();
  m.plan_text = plan_.ToText();
  std::vector<absl::Status> st(num_shards());
  std::vector<CheckpointResponse> resp(num_shards());
  std::vector<std::thread> threads;
  for (int i = 0; i < num_shards(); ++i) {
    threads.emplace_back([&, i] {
      grpc::ClientContext ctx;
      NewContext(&ctx);
      CheckpointRequest req;
      req.set_dir(dir);
      req.set_version(version);
      st[i] = FromGrpcStatus(stubs_[i]->Checkpoint(&ctx, req, &resp[i]));
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < num_shards(); ++i) {
    if (!st[i].ok()) {
      return Annotate(st[i], absl::StrCat("checkpoint of shard ", i));
    }
  }
  for (int i = 0; i < num_shards(); ++i) {
    ps::ShardFile f;
    f.shard = i;
    f.file = resp[i].file();  // WriteManifest stores it relative to itself
    f.crc32c = resp[i].crc32c();
    f.bytes = resp[i].bytes();
    m.files.push_back(f);
  }
  m.state_slots = described_[0].state_slots();
  m.example_ledger = resp[0].example_ledger();
  return ps::WriteManifest(dir, m);
}

absl::Status PsClient::Restore(const std::string& manifest) {
  for (int i = 0; i < num_shards(); ++i) {
    grpc::ClientContext ctx;
    NewContext(&ctx);
    RestoreRequest req;
    req.set_manifest(manifest);
    RestoreResponse resp;
    absl::Status st = FromGrpcStatus(stubs_[i]->Restore(&ctx, req, &resp));
    if (!st.ok()) return Annotate(st, absl::StrCat("restore of shard ", i));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<StatsResponse>> PsClient::Stats() {
  std::vector<StatsResponse> out(num_shards());
  for (int i = 0; i < num_shards(); ++i) {
    grpc::ClientContext ctx;
    NewContext(&ctx);
    absl::Status st =
        FromGrpcStatus(stubs_[i]->Stats(&ctx, StatsRequest(), &out[i]));
    if (!st.ok()) return Annotate(st, absl::StrCat("stats of shard ", i));
  }
  return out;
}

absl::Status PsClient::Export(const std::string& path) {
  std::vector<float> params(layout_.total_size());
  ASSIGN_OR_RETURN(int64_t v, Pull(0, 0, 0, params.data()));
  (void)v;
  return SaveBertWeights(path, layout_, params.data(), &config_);
}

}  // namespace bertps
