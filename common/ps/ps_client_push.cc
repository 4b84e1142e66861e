// PsClient's push: a stream per shard fed by a sender thread as backward
// produces gradients, and the whole-gradient push with retries.
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
#include "common/retry.h"
#include "common/status.h"
#include "grpcpp/grpcpp.h"
#include "common/ps/checkpoint.h"
#include "common/ps/chunk_codec.h"
#include "common/ps/wire.h"

namespace bertps {

using ps::SliceSpec;

// One shard's half of a push: its stream and a sender thread.
struct PsClient::PushStream::Shard {
  int index = 0;
  grpc::ClientContext ctx;
  PushResponse resp;
  std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer;
  std::shared_ptr<absl::Notification> sender;  // its task's end
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
  // The client's stall watch and PsClientOptions::push_stall_timeout.
  ps::StallWatch* watch = nullptr;
  absl::Duration stall_timeout;
  // Written by the thread writing (BeginPush's, then the sender), read by
  // Finish once both are done.
  bool stalled = false;     // a write was cancelled by the stall watch
  int64_t written = 0;      // bytes of the messages written

  // Writes one message, timed by the stall watch while the write waits.
  bool Write(const grpc::ByteBuffer& m) {
    watch->Watch(&ctx, stall_timeout);
    const bool ok = writer->Write(m);
    if (watch->Unwatch(&ctx)) stalled = true;
    if (ok) written += static_cast<int64_t>(m.Length());
    return ok;
  }
};

absl::StatusOr<std::unique_ptr<PsClient::PushStream>> PsClient::BeginPush(
    const PushHeader& header) {
  auto ps = std::unique_ptr<PushStream>(new PushStream());
  ps->client_ = this;
  ps->header_ = header;
  for (int i = 0; i < num_shards(); ++i) {
    auto sh = std::make_unique<PushStream::Shard>();
    sh->index = i;
    sh->watch = stall_watch_.get();
    sh->stall_timeout = options_.push_stall_timeout;
    NewContext(&sh->ctx);
    canceller_->Add(&sh->ctx);
    const grpc::internal::RpcMethod method(
        ps::kPushMethod, grpc::internal::RpcMethod::CLIENT_STREAMING);
    sh->writer.reset(
        grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(
            channels_[i].get(), method, &sh->ctx, &sh->resp));
    PushRequest first;
    *first.mutable_header() = header;
    if (!sh->Write(ps::EncodeMessage(first))) sh->broken = true;
    PushStream::Shard* raw = sh.get();
    sh->sender = push_lanes_->Run(i, [this, raw] {
      std::vector<uint16_t> bf16;
      std::vector<int64_t> rows;
      // Chunks go out together while more are queued (one message up to
      // about ps::kBatchBytes): the many small tensors backward makes at
      // once cost one write, not one each.
      ps::ChunkBatch batch(ps::kPushChunksField);
      auto flush = [&] {
        return batch.empty() || raw->Write(batch.Take());
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
          if (!flush() || !raw->Write(ps::EncodeMessage(*item.message))) {
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
    sh->sender->WaitForNotification();
    sh->writer->WritesDone();
  }
}

absl::StatusOr<int64_t> PsClient::PushStream::Finish() {
  CloseWrites();
  int64_t version = -1;
  absl::Status first_error;
  for (auto& sh : shards_) {
    absl::Status st = FromGrpcStatus(sh->writer->Finish());
    if (sh->stalled) {
      ++client_->push_stalls_;
      st = absl::UnavailableError(absl::StrCat(
          "stalled: a write waited ",
          absl::FormatDuration(client_->options_.push_stall_timeout),
          " for the shard to take it after ", sh->written,
          " bytes, cancelled (its stream or connection stopped moving)"));
    }
    client_->NoteUnavailable(st);
    if (!st.ok() && first_error.ok()) {
      first_error = Annotate(
          st, absl::StrCat("push to shard ", sh->index, " (",
                           client_->options_.addresses[sh->index], ")"));
    }
    if (st.ok()) {
      version = version < 0 ? sh->resp.version()
                            : std::min(version, sh->resp.version());
      if (sh->index == 0) {
        client_->last_push_learning_rate_.store(sh->resp.learning_rate());
      }
    }
  }
  for (auto& sh : shards_) client_->canceller_->Remove(&sh->ctx);
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
    if (sh->sender != nullptr) sh->sender->WaitForNotification();
    client_->canceller_->Remove(&sh->ctx);
  }
}

namespace {
// A push lost in transport: 5 tries, 200 ms doubling (3 s of waits in all),
// time for a shard's connection to come back or a backup to take over,
// short against a step's rpc_timeout.
RetryPolicy PushRetry() {
  RetryPolicy p;
  p.initial = absl::Milliseconds(200);
  p.multiplier = 2;
  p.max = absl::Milliseconds(1600);
  p.max_attempts = 5;
  return p;
}
}  // namespace

absl::StatusOr<int64_t> PsClient::Push(const PushHeader& header,
                                       const float* grads) {
  int64_t version = -1;
  bool begun = true;  // false: BeginPush failed (not retried)
  absl::Status st = Retry(
      PushRetry(),
      [&]() -> absl::Status {
        absl::StatusOr<std::unique_ptr<PushStream>> s = BeginPush(header);
        if (!s.ok()) {
          begun = false;
          return s.status();
        }
        for (size_t t = 0; t < layout_.tensors().size(); ++t) {
          (*s)->Send(static_cast<int>(t), grads + layout_.tensors()[t].offset);
        }
        absl::StatusOr<int64_t> v = (*s)->Finish();
        if (!v.ok()) return v.status();
        version = *v;
        return absl::OkStatus();
      },
      // Only transport failures are retried; the shard recognises the retry.
      [&](const absl::Status& s) {
        return begun && s.code() == absl::StatusCode::kUnavailable;
      },
      options_.cancel);
  RETURN_IF_ERROR(st);
  return version;
}

}  // namespace bertps
