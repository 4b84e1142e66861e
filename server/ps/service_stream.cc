// ShardService's Pull and Push on gRPC's callback API: each call is a
// reactor that holds no thread while it waits (for a version, a piece of an
// update, a push's turn); the waits are the shard's (ShardCore::*Async).
// The bytes on the wire are those of proto/ps.proto's messages, written and
// read as raw byte buffers (common/ps/chunk_codec.h) without copies of the
// tensor payloads.
//
// A reactor has at most one operation outstanding at a time (a write or
// read, or a wait on the shard), so its state is touched by one thread at
// a time; only `cancelled_` is read across threads.
#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/audit.h"
#include "common/grpc_status.h"
#include "common/kernels/bf16.h"
#include "common/ps/chunk_codec.h"
#include "glog/logging.h"
#include "grpcpp/grpcpp.h"
#include "server/ps/service.h"

namespace bertps {
namespace ps {
namespace {

// A trainer's push or announce for slot `slot`: only for a slot its
// capability names (null: no capabilities checked).
absl::Status HoldsSlot(const Capability* cap, int slot, const char* what) {
  if (cap == nullptr) return absl::OkStatus();
  for (int s : cap->slots()) {
    if (s == slot) return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      what, " for worker slot ", slot, ": member ", cap->member_id(),
      "'s capability names ",
      cap->slots_size() == 0 ? std::string("no slot")
                             : absl::StrCat("slots ", absl::StrJoin(cap->slots(), ",")),
      " (a member pushes only for the slots it holds)"));
}

absl::Time DeadlineOf(const grpc::CallbackServerContext* ctx) {
  return absl::FromChrono(ctx->deadline());
}

grpc::Status Invalid(std::string message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::move(message));
}

// One pull: the snapshot's version first, then its pieces, each sent once
// final (a BSP snapshot still being made becomes final piece by piece: its
// first rows, then its slices in update order; rows asked first that it did
// not update first come at the end).
class PullReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  PullReactor(grpc::CallbackServerContext* ctx,
              std::shared_ptr<ShardCore> core, PullRequest request)
      : ctx_(ctx),
        core_(std::move(core)),
        request_(std::move(request)),
        deadline_(DeadlineOf(ctx)) {}

  void Start() {
    // Rows asked first, per tensor index (checked before anything is sent).
    const ParamLayout& layout = core_->layout();
    for (const TensorRows& tr : request_.first()) {
      const ParamSpec* spec = layout.Find(tr.name());
      if (spec == nullptr) {
        return End(Invalid(absl::StrCat("pull: unknown tensor ", tr.name())));
      }
      const int t = static_cast<int>(spec - layout.tensors().data());
      const int64_t num_rows = spec->shape.empty() ? 1 : spec->shape[0];
      if (first_.count(t) > 0) {
        return End(Invalid(
            absl::StrCat("pull: rows of ", tr.name(), " asked twice")));
      }
      for (int k = 0; k < tr.rows_size(); ++k) {
        if (tr.rows(k) < 0 || tr.rows(k) >= num_rows ||
            (k > 0 && tr.rows(k) <= tr.rows(k - 1))) {
          return End(Invalid(absl::StrCat("pull: row ", tr.rows(k), " of ",
                                          tr.name(),
                                          " is out of range or not increasing")));
        }
      }
      first_[t].assign(tr.rows().begin(), tr.rows().end());
    }
    core_->AcquireSnapshotAsync(
        request_.worker(), request_.min_version(), request_.step(), deadline_,
        [this](absl::StatusOr<std::shared_ptr<const Snapshot>> snap) {
          if (!snap.ok()) return End(ToGrpcStatus(snap.status()));
          snap_ = std::move(*snap);
          Plan();
          PullResponse head;
          head.set_version(snap_->version);
          Write(EncodeMessage(head));
        });
  }

 private:
  // What the pull sends, in order.
  struct Op {
    enum Kind {
      kWaitFirst,   // the update's first rows
      kWaitSlices,  // the first `count` slices of the update order
      kRows,        // `rows` of slice `slice`, in row chunks
      kRange,       // slice `slice` whole, in batched range chunks
      kFlush,       // the batch so far
    } kind;
    int slice = 0;
    int count = 0;
    std::vector<int64_t> rows;
  };

  void OnWriteDone(bool ok) override {
    if (!ok) return End(grpc::Status(grpc::StatusCode::CANCELLED, "client gone"));
    Advance();
  }
  void OnCancel() override { cancelled_ = true; }
  void OnDone() override { delete this; }

  void End(grpc::Status status) { Finish(std::move(status)); }
  void Write(grpc::ByteBuffer message) {
    out_ = std::move(message);
    StartWrite(&out_);
  }

  bool Wanted(const std::string& name) const {
    return request_.names().empty() ||
           std::find(request_.names().begin(), request_.names().end(),
                     name) != request_.names().end();
  }
  int64_t RowSizeOf(const SliceSpec& sl) const {
    return RowSize(core_->layout().tensors()[sl.tensor]);
  }

  void Plan() {
    const PartitionPlan& plan = core_->plan();
    const std::vector<int>& order = core_->update_order();
    const bool partial = !snap_->Complete();
    auto position = [&](int slice) {
      return static_cast<int>(std::find(order.begin(), order.end(), slice) -
                              order.begin());
    };
    // Rows of each slice of the tensors asked first, sent up front.
    std::map<int, std::vector<int64_t>> sent;
    if (!first_.empty() && partial) ops_.push_back({Op::kWaitFirst});
    for (const auto& [t, rows] : first_) {
      for (int i : order) {
        const SliceSpec& sl = plan.slices()[i];
        if (sl.tensor != t || !Wanted(sl.name)) continue;
        std::vector<int64_t> now;
        for (int64_t r : RowsOfSlice(sl, RowSizeOf(sl), rows, false)) {
          // While the update runs, only the rows it made final first.
          if (!partial || (snap_->first_tensor == t &&
                           std::binary_search(snap_->first_rows.begin(),
                                              snap_->first_rows.end(), r))) {
            now.push_back(r);
          }
        }
        sent[i] = now;
        ops_.push_back({Op::kRows, i, 0, std::move(now)});
      }
    }
    // Then every other slice in update order, and the other rows of the
    // tensors asked first at the end (the word embedding's: forward reads
    // them last, in the tied decoder).
    for (int i : order) {
      const SliceSpec& sl = plan.slices()[i];
      if (!Wanted(sl.name) || first_.count(sl.tensor) > 0) continue;
      if (partial) ops_.push_back({Op::kWaitSlices, i, position(i) + 1});
      ops_.push_back({Op::kRange, i});
    }
    ops_.push_back({Op::kFlush});
    for (const auto& [t, rows] : first_) {
      (void)rows;
      for (int i : order) {
        const SliceSpec& sl = plan.slices()[i];
        if (sl.tensor != t || !Wanted(sl.name)) continue;
        if (partial) ops_.push_back({Op::kWaitSlices, i, position(i) + 1});
        ops_.push_back({Op::kRows, i, 0,
                        RowsOfSlice(sl, RowSizeOf(sl), sent[i], true)});
      }
    }
  }

  // The snapshot's parameters as one slice that holds the snapshot until
  // the transport dropped every piece that refers to it.
  const grpc::Slice& SnapshotBytes() {
    if (whole_.size() == 0 && !snap_->params.empty()) {
      auto* hold = new std::shared_ptr<const Snapshot>(snap_);
      whole_ = grpc::Slice(
          const_cast<float*>(snap_->params.data()),
          sizeof(float) * snap_->params.size(),
          [](void* p) {
            delete static_cast<std::shared_ptr<const Snapshot>*>(p);
          },
          hold);
    }
    return whole_;
  }

  // Sends what comes next: one message written (OnWriteDone comes back
  // here), a wait started (its end comes back here), or the call finished.
  void Advance() {
    const PartitionPlan& plan = core_->plan();
    for (;;) {
      if (cancelled_.load() || ctx_->IsCancelled()) {
        return End(grpc::Status(grpc::StatusCode::CANCELLED, "pull cancelled"));
      }
      if (at_ == ops_.size()) return End(grpc::Status::OK);
      Op& op = ops_[at_];
      switch (op.kind) {
        case Op::kWaitFirst:
        case Op::kWaitSlices: {
          const int count = op.kind == Op::kWaitFirst ? -1 : op.count;
          const bool ready = count < 0 ? snap_->FirstReady()
                                       : snap_->SlicesReady(count);
          if (ready) {
            absl::Status st =
                count < 0 ? snap_->WaitFirst(absl::InfinitePast())
                          : snap_->WaitSlices(count, absl::InfinitePast());
            if (!st.ok()) return End(ToGrpcStatus(st));
            ++at_;
            continue;
          }
          // Chunks final together go out together, before the wait.
          if (!batch_.empty()) return Write(batch_.Take());
          ++at_;
          core_->WaitSnapshotAsync(snap_, count, deadline_,
                                   [this](absl::Status st) {
                                     if (!st.ok()) return End(ToGrpcStatus(st));
                                     Advance();
                                   });
          return;
        }
        case Op::kRows: {
          // Long runs of rows are sent from the snapshot itself, short ones
          // copied together (RowPieces).
          const SliceSpec& sl = plan.slices()[op.slice];
          const int64_t row = RowSizeOf(sl);
          const int64_t per_chunk = std::max<int64_t>(1, kChunkElements / row);
          if (pos_ >= static_cast<int64_t>(op.rows.size())) {
            pos_ = 0;
            ++at_;
            continue;
          }
          const size_t at = sizeof(float) * sl.shard_offset;
          const grpc::Slice table =
              SnapshotBytes().sub(at, at + sizeof(float) * sl.size());
          const size_t m = std::min<size_t>(per_chunk, op.rows.size() - pos_);
          const auto chunk_rows = absl::MakeConstSpan(op.rows.data() + pos_, m);
          pos_ += static_cast<int64_t>(m);
          return Write(EncodeRowChunk(
              sl.name, F32, chunk_rows,
              RowPieces(table, sizeof(float) * row, sl.begin / row,
                        chunk_rows)));
        }
        case Op::kRange: {
          const SliceSpec& sl = plan.slices()[op.slice];
          const bool bf16 = request_.bf16_products() &&
                            core_->layout().tensors()[sl.tensor].product_only;
          if (pos_ == 0) pos_ = sl.begin;
          while (pos_ < sl.end) {
            const int64_t n = std::min(kChunkElements, sl.end - pos_);
            const int64_t local = sl.shard_offset + (pos_ - sl.begin);
            if (bf16) {
              // Rounded into a buffer of its own (the snapshot stays fp32).
              grpc::Slice half(sizeof(uint16_t) * static_cast<size_t>(n));
              kernels::FloatToBf16On(
                  kernels::ActiveConvertIsa(), snap_->params.data() + local, n,
                  reinterpret_cast<uint16_t*>(const_cast<uint8_t*>(half.begin())));
              batch_.AddChunk(sl.name, BF16, pos_, std::move(half));
            } else {
              // The payload is sent from the snapshot itself.
              const size_t at = sizeof(float) * local;
              batch_.AddChunk(sl.name, F32, pos_,
                              SnapshotBytes().sub(at, at + sizeof(float) * n));
            }
            pos_ += n;
            if (batch_.payload_bytes() >= kBatchBytes) {
              if (pos_ >= sl.end) {
                pos_ = 0;
                ++at_;
              }
              return Write(batch_.Take());
            }
          }
          pos_ = 0;
          ++at_;
          continue;
        }
        case Op::kFlush:
          ++at_;
          if (!batch_.empty()) return Write(batch_.Take());
          continue;
      }
    }
  }

  grpc::CallbackServerContext* const ctx_;
  const std::shared_ptr<ShardCore> core_;
  const PullRequest request_;
  const absl::Time deadline_;
  std::atomic<bool> cancelled_{false};
  std::map<int, std::vector<int64_t>> first_;  // tensor -> rows asked first
  std::shared_ptr<const Snapshot> snap_;
  grpc::Slice whole_;
  std::vector<Op> ops_;
  size_t at_ = 0;    // the op being sent
  int64_t pos_ = 0;  // within it: the row index (kRows) or element (kRange)
  ChunkBatch batch_{kPullChunksField};
  grpc::ByteBuffer out_;  // the message being written
};

// One push: the header (its turn may wait for the version being made), then
// its chunks staged as they come (nothing applied if any is bad), then the
// push finished on the shard's own thread.
class PushReactor final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  PushReactor(grpc::CallbackServerContext* ctx,
              std::shared_ptr<ShardCore> core, grpc::ByteBuffer* response,
              std::shared_ptr<const Capability> cap)
      : ctx_(ctx),
        core_(std::move(core)),
        response_(response),
        deadline_(DeadlineOf(ctx)),
        cap_(std::move(cap)) {}

  void Start() { StartRead(&in_); }

 private:
  void OnReadDone(bool ok) override {
    if (!ok) return EndOfStream();
    ParsedPushRequest msg;
    if (!session_) {
      if (!ParsePushRequest(in_, &msg).ok() || !msg.has_header) {
        return End(Invalid("a push must start with its header"));
      }
      // Only for a slot the caller's capability names (nothing is taken).
      if (absl::Status st = HoldsSlot(cap_.get(), msg.header.worker(), "push");
          !st.ok()) {
        AuditRefusal(kRefusedCapability, ctx_->peer(), st.message());
        return End(ToGrpcStatus(st));
      }
      core_->BeginPushAsync(
          msg.header,
          [this](absl::StatusOr<std::unique_ptr<ShardCore::PushSession>> s) {
            if (!s.ok()) return End(ToGrpcStatus(s.status()));
            session_ = std::move(*s);
            StartRead(&in_);
          });
      return;
    }
    if (bad_.ok()) Take(msg);  // after an error: drained, nothing taken
    StartRead(&in_);
  }
  void OnDone() override { delete this; }

  void End(grpc::Status status) { Finish(std::move(status)); }

  void Take(ParsedPushRequest& msg) {
    bad_ = ParsePushRequest(in_, &msg);
    if (!bad_.ok()) return;
    if (msg.has_next_first) {
      // A hint only (it changes no value): a bad one is dropped, not the
      // push (a bad id of the next batch fails that step, naming it).
      absl::Status hint = core_->SetNextFirst(session_.get(), msg.next_first);
      if (!hint.ok()) {
        LOG_EVERY_N(WARNING, 100) << "push: " << hint;
      }
      return;
    }
    if (msg.has_chunks) {  // several chunks, in order
      for (const ChunkRef& c : msg.chunks) {
        bad_ = core_->AddChunk(session_.get(), c);
        if (!bad_.ok()) return;
      }
      return;
    }
    if (!msg.has_chunk) {
      bad_ = absl::InvalidArgumentError("a push carries one header only");
      return;
    }
    bad_ = core_->AddChunk(session_.get(), msg.chunk);
  }

  void EndOfStream() {
    if (!session_) return End(Invalid("a push must start with its header"));
    if (ctx_->IsCancelled()) {
      return End(grpc::Status(grpc::StatusCode::CANCELLED,
                              "push stream cancelled; nothing applied"));
    }
    if (!bad_.ok()) return End(ToGrpcStatus(bad_));
    core_->FinishPushAsync(std::move(session_), deadline_,
                           [this](absl::StatusOr<PushResponse> r) {
                             if (!r.ok()) return End(ToGrpcStatus(r.status()));
                             *response_ = EncodeMessage(*r);
                             End(grpc::Status::OK);
                           });
  }

  grpc::CallbackServerContext* const ctx_;
  const std::shared_ptr<ShardCore> core_;
  grpc::ByteBuffer* const response_;
  const absl::Time deadline_;
  // The caller's capability (null: none checked, a shard on its own).
  const std::shared_ptr<const Capability> cap_;
  grpc::ByteBuffer in_;
  std::unique_ptr<ShardCore::PushSession> session_;
  absl::Status bad_;
};

// A reactor that only finishes, with `status`.
template <typename Reactor>
class FailedReactor final : public Reactor {
 public:
  explicit FailedReactor(grpc::Status status) { this->Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* ShardService::Pull(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request) {
  absl::StatusOr<std::shared_ptr<ShardCore>> core = Current(ctx);
  if (!core.ok()) {
    return new FailedReactor<grpc::ServerWriteReactor<grpc::ByteBuffer>>(
        ToGrpcStatus(core.status()));
  }
  PullRequest req;
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (request->Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices) {
      bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  if (!req.ParseFromString(bytes)) {
    return new FailedReactor<grpc::ServerWriteReactor<grpc::ByteBuffer>>(
        Invalid("a pull needs its request"));
  }
  auto* r = new PullReactor(ctx, std::move(*core), std::move(req));
  r->Start();
  return r;
}

grpc::ServerReadReactor<grpc::ByteBuffer>* ShardService::Push(
    grpc::CallbackServerContext* ctx, grpc::ByteBuffer* response) {
  std::shared_ptr<const Capability> cap;
  absl::StatusOr<std::shared_ptr<ShardCore>> core =
      Current(ctx, CallScope::kMember, &cap);
  if (!core.ok()) {
    return new FailedReactor<grpc::ServerReadReactor<grpc::ByteBuffer>>(
        ToGrpcStatus(core.status()));
  }
  auto* r = new PushReactor(ctx, std::move(*core), response, std::move(cap));
  r->Start();
  return r;
}

grpc::ServerUnaryReactor* ShardService::Announce(
    grpc::CallbackServerContext* ctx, const AnnounceRequest* req,
    AnnounceResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  std::shared_ptr<const Capability> cap;
  absl::StatusOr<std::shared_ptr<ShardCore>> core =
      Current(ctx, CallScope::kMember, &cap);
  if (!core.ok()) {
    reactor->Finish(ToGrpcStatus(core.status()));
    return reactor;
  }
  if (absl::Status st = HoldsSlot(cap.get(), req->worker(), "announce");
      !st.ok()) {
    AuditRefusal(kRefusedCapability, ctx->peer(), st.message());
    reactor->Finish(ToGrpcStatus(st));
    return reactor;
  }
  // The core outlives the wait: a core being replaced answers its waiting
  // calls before it is destroyed (ShardCore::~ShardCore).
  (*core)->AnnounceAsync(*req, DeadlineOf(ctx),
                         [reactor, resp](absl::StatusOr<AnnounceResponse> r) {
                           if (!r.ok()) {
                             return reactor->Finish(ToGrpcStatus(r.status()));
                           }
                           *resp = *std::move(r);
                           reactor->Finish(grpc::Status::OK);
                         });
  return reactor;
}

}  // namespace ps
}  // namespace bertps
