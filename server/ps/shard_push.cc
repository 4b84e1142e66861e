// ShardCore: pushes -- a push session's validation, its chunks and rows, and the
// aggregation of a step's pushes (BSP) or their application (ASP, SSP).
#include "server/ps/shard.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "glog/logging.h"

namespace bertps {
namespace ps {

bool ShardCore::PushMayBeginLocked(int64_t step) const {
  return !CheckAlive().ok() || mode() != BSP || version_ >= step ||
         pending_ == nullptr || pending_->version < step;
}

absl::StatusOr<std::unique_ptr<ShardCore::PushSession>> ShardCore::BeginPush(
    const PushHeader& header) {
  return BeginPushUntil(header, absl::Now() + options_.wait_timeout);
}

absl::StatusOr<std::unique_ptr<ShardCore::PushSession>>
ShardCore::BeginPushUntil(const PushHeader& header, absl::Time made_deadline) {
  if (header.worker() < 0 || header.worker() >= workers()) {
    return absl::InvalidArgumentError(
        absl::StrCat("push from worker ", header.worker(), " outside [0, ",
                     workers(), ")"));
  }
  if (header.step() < 0) {
    return absl::InvalidArgumentError("push with a negative step");
  }
  // The examples' stream positions [first_example, + examples): counted in
  // the example ledger, so they must be a range of int64.
  if (header.examples() < 0 || header.first_example() < 0 ||
      header.first_example() >
          std::numeric_limits<int64_t>::max() - header.examples()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "push header's examples [", header.first_example(), ", +",
        header.examples(), ") are not a range of stream positions"));
  }
  if (!std::isfinite(header.grad_sq_sum()) || header.grad_sq_sum() < 0) {
    return absl::InvalidArgumentError(
        "push header grad_sq_sum is not finite (NaN/Inf gradient)");
  }
  auto session = std::make_unique<PushSession>();
  session->header = header;
  {
    absl::MutexLock l(&mu_);
    RETURN_IF_ERROR(CheckAlive());
    if (mode() == BSP && header.step() > version_) {
      // A push for the version being made waits until it is (its worker
      // pulled that version's last pieces just before they were counted).
      auto made = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return PushMayBeginLocked(header.step());
      };
      mu_.AwaitWithDeadline(absl::Condition(&made), made_deadline);
      RETURN_IF_ERROR(CheckAlive());
    }
    if (header.step() <= last_step_[header.worker()]) {
      session->duplicate = true;
    } else if (mode() == BSP && header.step() > version_) {
      ++pushes_rejected_;
      return absl::OutOfRangeError(
          absl::StrCat("push for step ", header.step(), " from worker ",
                       header.worker(), " is ahead of version ", version_));
    } else if (mode() == BSP && header.step() < version_) {
      ++pushes_rejected_;
      return absl::FailedPreconditionError(absl::StrCat(
          "push for step ", header.step(), " from worker ", header.worker(),
          " is stale: step already applied (version ", version_, ")"));
    }
  }
  session->grad = TakeBuffer();
  session->next.resize(local_slices().size());
  session->row_seen.resize(local_slices().size());
  session->rows_done.assign(local_slices().size(), 0);
  for (size_t i = 0; i < local_slices().size(); ++i) {
    session->next[i] = plan_.slices()[local_slices()[i]].begin;
  }
  return session;
}

AlignedVector<float> ShardCore::TakeBuffer() {
  {
    absl::MutexLock l(&mu_);
    if (!free_buffers_.empty()) {
      AlignedVector<float> b = std::move(free_buffers_.back());
      free_buffers_.pop_back();
      return b;
    }
  }
  return AlignedVector<float>(shard_size());
}

void ShardCore::ReturnBuffer(AlignedVector<float> buffer) {
  if (buffer.size() != static_cast<size_t>(shard_size())) return;
  absl::MutexLock l(&mu_);
  free_buffers_.push_back(std::move(buffer));
}

absl::Status ShardCore::AddChunk(PushSession* s, const TensorChunk& chunk) {
  return AddChunk(s, ChunkRef::Of(chunk));
}

absl::Status ShardCore::AddChunk(PushSession* s, const ChunkRef& chunk) {
  auto it = by_name_.find(chunk.name);
  if (it == by_name_.end()) {
    const bool known = layout_.Find(chunk.name) != nullptr;
    return absl::InvalidArgumentError(absl::StrCat(
        "shard ", options_.shard, ": ",
        known ? "tensor has no slice on this shard: " : "unknown tensor: ",
        chunk.name));
  }
  const ParamSpec& spec = *layout_.Find(chunk.name);
  if (!chunk.shape.empty() && chunk.shape != spec.shape) {
    return absl::InvalidArgumentError(
        absl::StrCat("wrong shape for ", chunk.name));
  }
  int elem = 0;
  if (chunk.dtype == F32) {
    elem = 4;
  } else if (chunk.dtype == BF16) {
    elem = 2;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "gradient chunk of ", chunk.name, " must be F32 or BF16"));
  }
  if (chunk.data_bytes % elem != 0 || chunk.data_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk of ", chunk.name, " has ", chunk.data_bytes,
        " bytes, not a positive multiple of ", elem));
  }
  if (!chunk.rows.empty()) {
    return AddRowChunk(s, chunk, spec, it->second, elem);
  }
  const int64_t n = static_cast<int64_t>(chunk.data_bytes) / elem;
  const int64_t off = chunk.offset;
  // Find the local slice containing [off, off + n).
  for (int idx : it->second) {
    const SliceSpec& sl = plan_.slices()[idx];
    if (off < sl.begin || off >= sl.end) continue;
    if (off + n > sl.end) {
      return absl::InvalidArgumentError(absl::StrCat(
          "chunk of ", chunk.name, " [", off, ", ", off + n,
          ") crosses the slice end ", sl.end));
    }
    const size_t local = std::find(local_slices().begin(),
                                   local_slices().end(), idx) -
                         local_slices().begin();
    if (s->rows_done[local] > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "range chunk of ", chunk.name, " after row chunks of the same slice"));
    }
    if (off != s->next[local]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "chunk of ", chunk.name, " at element ", off,
          " is out of order or overlapping (expected ", s->next[local], ")"));
    }
    float* dst = s->grad.data() + sl.shard_offset + (off - sl.begin);
    // F32: checked as it is copied, in one pass. BF16: widened and checked
    // block by block, each block while it is in cache.
    ChunkRef::Reader reader(chunk);
    bool finite = true;
    if (elem == 4) {
      finite = reader.ReadFinite(dst, n, StreamStaging());
    } else {
      constexpr int64_t kBlock = 4096;  // elements
      for (int64_t at = 0; at < n && finite; at += kBlock) {
        const int64_t len = std::min(kBlock, n - at);
        reader.ReadBf16(dst + at, len);
        finite = optim::AllFinite(dst + at, len);
      }
    }
    if (!finite) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gradient of ", chunk.name, " has NaN or Inf in elements [", off,
          ", ", off + n, ")"));
    }
    s->next[local] = off + n;
    s->bytes += static_cast<int64_t>(chunk.data_bytes);
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("chunk of ", chunk.name, " at element ", off,
                   " is outside this shard's slices of the tensor"));
}

absl::Status ShardCore::SetNextFirst(PushSession* s, const TensorRows& r) {
  const ParamSpec* spec = layout_.Find(r.name());
  if (spec == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("next_first of unknown tensor ", r.name()));
  }
  if (s->next_first_tensor >= 0) {
    return absl::InvalidArgumentError("a push carries one next_first");
  }
  const int64_t num_rows = spec->shape.empty() ? 1 : spec->shape[0];
  for (int k = 0; k < r.rows_size(); ++k) {
    if (r.rows(k) < 0 || r.rows(k) >= num_rows ||
        (k > 0 && r.rows(k) <= r.rows(k - 1))) {
      return absl::InvalidArgumentError(
          absl::StrCat("next_first row ", r.rows(k), " of ", r.name(),
                       " is out of range or not increasing"));
    }
  }
  s->next_first_tensor = static_cast<int>(spec - layout_.tensors().data());
  s->next_first_rows.assign(r.rows().begin(), r.rows().end());
  return absl::OkStatus();
}

absl::Status ShardCore::AddRowChunk(PushSession* s, const ChunkRef& chunk,
                                    const ParamSpec& spec,
                                    const std::vector<int>& slices, int elem) {
  const int64_t num_rows = spec.shape.empty() ? 1 : spec.shape[0];
  const int64_t row = num_rows > 0 ? spec.size / num_rows : 0;
  const std::vector<int64_t>& rows = chunk.rows;
  if (chunk.offset != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "row chunk of ", chunk.name, " with an offset (", chunk.offset, ")"));
  }
  if (chunk.data_bytes != rows.size() * static_cast<size_t>(row) * elem) {
    return absl::InvalidArgumentError(absl::StrCat(
        "row chunk of ", chunk.name, " has ", chunk.data_bytes, " bytes for ",
        rows.size(), " rows of ", row, " elements"));
  }
  // Every row: in range, increasing, in one of this shard's slices (slices
  // are row ranges), not yet received. Checked before anything is copied.
  std::vector<std::pair<size_t, float*>> dst(rows.size());  // (local, at)
  size_t local = 0;
  const SliceSpec* sl = nullptr;
  for (size_t k = 0; k < rows.size(); ++k) {
    const int64_t r = rows[k];
    if (r < 0 || r >= num_rows || (k > 0 && r <= rows[k - 1])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "row chunk of ", chunk.name, ": row ", r,
          " is out of range or not increasing"));
    }
    const int64_t at = r * row;
    if (sl == nullptr || at < sl->begin || at >= sl->end) {
      sl = nullptr;
      for (int idx : slices) {
        const SliceSpec& c = plan_.slices()[idx];
        if (at >= c.begin && at < c.end) {
          sl = &c;
          local = std::find(local_slices().begin(), local_slices().end(),
                            idx) -
                  local_slices().begin();
          break;
        }
      }
      if (sl == nullptr || sl->begin % row != 0 || sl->end % row != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "row chunk of ", chunk.name, ": row ", r,
            " is outside this shard's slices of the tensor"));
      }
      if (s->next[local] != sl->begin) {
        return absl::InvalidArgumentError(absl::StrCat(
            "row chunk of ", chunk.name, " after range chunks of the same slice"));
      }
      if (s->row_seen[local].empty()) {
        s->row_seen[local].assign(sl->size() / row, 0);
      }
    }
    if (s->row_seen[local][(at - sl->begin) / row]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "row chunk of ", chunk.name, ": row ", r, " was already received"));
    }
    dst[k] = {local, s->grad.data() + sl->shard_offset + (at - sl->begin)};
  }
  ChunkRef::Reader reader(chunk);
  const bool stream = StreamStaging();
  for (size_t k = 0; k < rows.size(); ++k) {
    float* d = dst[k].second;
    bool finite;
    if (elem == 4) {
      finite = reader.ReadFinite(d, row, stream);
    } else {
      reader.ReadBf16(d, row);
      finite = optim::AllFinite(d, row);
    }
    if (!finite) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gradient of ", chunk.name, " has NaN or Inf in row ", rows[k]));
    }
  }
  for (size_t k = 0; k < rows.size(); ++k) {
    const size_t l = dst[k].first;
    const SliceSpec& c = plan_.slices()[local_slices()[l]];
    const int64_t at = rows[k] * row;
    s->row_seen[l][(at - c.begin) / row] = 1;
    ++s->rows_done[l];
  }
  s->bytes += static_cast<int64_t>(chunk.data_bytes);
  return absl::OkStatus();
}

absl::StatusOr<PushResponse> ShardCore::FinishPush(
    std::unique_ptr<PushSession> s, absl::Time deadline) {
  deadline = std::min(deadline, absl::Now() + options_.wait_timeout);
  for (size_t i = 0; i < local_slices().size(); ++i) {
    const SliceSpec& sl = plan_.slices()[local_slices()[i]];
    if (s->rows_done[i] > 0) {
      const int64_t rows = static_cast<int64_t>(s->row_seen[i].size());
      if (s->rows_done[i] == rows) continue;
      ReturnBuffer(std::move(s->grad));
      absl::MutexLock l(&mu_);
      ++pushes_rejected_;
      return absl::InvalidArgumentError(absl::StrCat(
          "incomplete push from worker ", s->header.worker(), ": ", sl.name,
          " received ", s->rows_done[i], " of ", rows, " rows"));
    }
    if (s->next[i] != sl.end) {
      ReturnBuffer(std::move(s->grad));
      absl::MutexLock l(&mu_);
      ++pushes_rejected_;
      return absl::InvalidArgumentError(absl::StrCat(
          "incomplete push from worker ", s->header.worker(), ": ", sl.name,
          " received ", s->next[i] - sl.begin, " of ", sl.size(),
          " elements"));
    }
  }
  const int w = s->header.worker();
  const int64_t step = s->header.step();
  PushResponse resp;
  if (mode() == BSP) {
    // The push takes part in update `step`, at the plan's rate.
    resp.set_learning_rate(job_plan().LearningRateAt(step));
    absl::MutexLock l(&mu_);
    bytes_in_ += s->bytes;
    if (step <= last_step_[w] || s->duplicate) {
      ++pushes_duplicate_;
      resp.set_duplicate(true);
      resp.set_version(version_);
      free_buffers_.push_back(std::move(s->grad));
      return resp;
    }
    if (step != version_ || updating_) {
      ++pushes_rejected_;
      free_buffers_.push_back(std::move(s->grad));
      return absl::FailedPreconditionError(absl::StrCat(
          "push for step ", step, " from worker ", w,
          " arrived after the step completed (version ", version_, ")"));
    }
    last_step_[w] = step;
    staged_[w] = std::move(s->grad);
    staged_examples_[w] = {s->header.first_example(), s->header.examples()};
    if (s->next_first_tensor >= 0 &&
        (hint_tensor_ < 0 || hint_tensor_ == s->next_first_tensor)) {
      hint_tensor_ = s->next_first_tensor;
      std::vector<int64_t> merged;
      std::set_union(hint_rows_.begin(), hint_rows_.end(),
                     s->next_first_rows.begin(), s->next_first_rows.end(),
                     std::back_inserter(merged));
      hint_rows_ = std::move(merged);
    }
    ++pushes_applied_;
    const int needed = workers() - options_.backup_workers;
    if (static_cast<int>(staged_.size()) < needed && replicas_ != nullptr &&
        replicas_->Active()) {
      CrashPoint("push", step, options_.shard);
    }
    if (static_cast<int>(staged_.size()) >= needed) {
      RETURN_IF_ERROR(ApplyBspLocked(deadline));
    }
    resp.set_version(version_);
    return resp;
  }
  // ASP / SSP: apply this push now (after a checkpoint cut it must wait
  // for, see ShardOptions::job_plan).
  {
    absl::MutexLock l(&mu_);
    bytes_in_ += s->bytes;
    if (step <= last_step_[w] || s->duplicate) {
      ++pushes_duplicate_;
      resp.set_duplicate(true);
      resp.set_version(version_);
      free_buffers_.push_back(std::move(s->grad));
      return resp;
    }
    const int64_t ticket = job_plan().Ticket(w, step);
    auto below_cut = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return !broken_.ok() || !JobPlan::HeldByCut(ticket, next_cut_);
    };
    if (!mu_.AwaitWithDeadline(absl::Condition(&below_cut), deadline)) {
      free_buffers_.push_back(std::move(s->grad));
      return absl::DeadlineExceededError(absl::StrCat(
          "shard ", options_.shard, ": the push of update ticket ", ticket,
          " (worker ", w, ", step ", step, ") waited for the checkpoint of "
          "version ", next_cut_, ", which nobody wrote (at version ", version_,
          ")"));
    }
    if (!broken_.ok()) {
      free_buffers_.push_back(std::move(s->grad));
      return broken_;
    }
    last_step_[w] = step;
  }
  absl::Status st;
  {
    absl::MutexLock ul(&update_mu_);
    int64_t v;
    {
      absl::MutexLock l(&mu_);
      v = version_;
    }
    StepNorms norms;
    norms.grad_sq = s->header.grad_sq_sum();
    st = ApplyStep(v, s->grad.data(), 1.0f, &norms, deadline);
    if (st.ok() && replicas_ != nullptr) {
      st = ReplicateStep(
          ReplicaStep::FULL, v, s->grad.data(), 1.0f, &norms, {w}, {step},
          {{s->header.first_example(), s->header.examples()}}, deadline);
    }
    absl::MutexLock l(&mu_);
    if (st.ok()) {
      resp.set_learning_rate(job_plan().LearningRateAt(v));  // ApplyStep's
      ++version_;
      ++clock_[w];
      ++pushes_applied_;
      ledger_.Add(s->header.first_example(), s->header.examples());
      PublishLocked();
    } else {
      broken_ = st;
      waits_->Poke();
    }
    resp.set_version(version_);
  }
  ReturnBuffer(std::move(s->grad));
  RETURN_IF_ERROR(st);
  return resp;
}

}  // namespace ps
}  // namespace bertps
