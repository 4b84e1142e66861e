#include "server/ps/service.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/process_cpu.h"
#include "glog/logging.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/method_handler.h"
#include "common/ps/chunk_codec.h"

namespace bertps {
namespace ps {
namespace {

absl::Time DeadlineOf(const grpc::ServerContext* ctx) {
  return absl::FromChrono(ctx->deadline());
}

}  // namespace

ShardService::ShardService(std::shared_ptr<ShardCore> core)
    : core_(std::move(core)) {
  // Method indices in proto/ps.proto: 1 Pull, 2 Push. Their protobuf
  // handlers are replaced by byte-buffer ones; the method names, and the
  // bytes on the wire, stay the same.
  MarkMethodStreamed(
      1, new grpc::internal::BidiStreamingHandler<ShardService, PullRequest,
                                                  grpc::ByteBuffer>(
             [](ShardService* s, grpc::ServerContext* ctx,
                grpc::ServerReaderWriter<grpc::ByteBuffer, PullRequest>* rw) {
               return s->PullRaw(ctx, rw);
             },
             this));
  MarkMethodStreamed(
      2, new grpc::internal::BidiStreamingHandler<ShardService,
                                                  grpc::ByteBuffer,
                                                  PushResponse>(
             [](ShardService* s, grpc::ServerContext* ctx,
                grpc::ServerReaderWriter<PushResponse, grpc::ByteBuffer>* rw) {
               return s->PushRaw(ctx, rw);
             },
             this));
}

absl::StatusOr<std::shared_ptr<ShardCore>> ShardService::Current(
    const grpc::ServerContext* ctx) const {
  std::shared_ptr<ShardCore> c = core();
  if (!c) {
    return absl::UnavailableError(
        "this parameter-server shard has no job assigned");
  }
  // A request naming a job incarnation is served only by that install (a
  // worker of a job's earlier start must not reach its restart).
  const auto& md = ctx->client_metadata();
  auto it = md.find(kIncarnationMetadata);
  if (it != md.end()) {
    int64_t inc = 0;
    if (!absl::SimpleAtoi(absl::string_view(it->second.data(), it->second.size()),
                          &inc)) {
      return absl::InvalidArgumentError(
          absl::StrCat(kIncarnationMetadata, " metadata is not a number"));
    }
    if (inc != c->options().incarnation) {
      return absl::AbortedError(absl::StrCat(
          "request of job incarnation ", inc, "; this shard serves incarnation ",
          c->options().incarnation, " (the job was started again)"));
    }
  }
  return c;
}

void ShardService::Install(std::shared_ptr<ShardCore> core) {
  std::shared_ptr<ShardCore> old;
  {
    absl::MutexLock l(&mu_);
    old = std::move(core_);
    core_ = std::move(core);
  }
  // Calls still waiting on the previous install fail now rather than at
  // their deadline.
  if (old) {
    old->Abort(absl::AbortedError(
        "the job left this shard or was installed again"));
  }
}

#define BERTPS_CORE_OR_RETURN(var)                              \
  absl::StatusOr<std::shared_ptr<ShardCore>> var##_or = Current(ctx); \
  if (!var##_or.ok()) return ToGrpcStatus(var##_or.status());   \
  ShardCore* var = var##_or->get()

grpc::Status ShardService::Describe(grpc::ServerContext* ctx,
                                    const DescribeRequest*,
                                    DescribeResponse* resp) {
  BERTPS_CORE_OR_RETURN(shard);
  *resp = shard->Describe();
  return grpc::Status::OK;
}

grpc::Status ShardService::PullRaw(
    grpc::ServerContext* ctx,
    grpc::ServerReaderWriter<grpc::ByteBuffer, PullRequest>* writer) {
  BERTPS_CORE_OR_RETURN(shard);
  PullRequest request;
  if (!writer->Read(&request)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "a pull needs its request");
  }
  const PullRequest* req = &request;
  absl::StatusOr<std::shared_ptr<const Snapshot>> snap = shard->AcquireSnapshot(
      req->worker(), req->min_version(), req->step(), DeadlineOf(ctx));
  if (!snap.ok()) return ToGrpcStatus(snap.status());
  PullResponse head;
  head.set_version((*snap)->version);
  if (!writer->Write(EncodeMessage(head))) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "client gone");
  }
  std::vector<std::string> names(req->names().begin(), req->names().end());
  auto wanted = [&](const std::string& name) {
    return names.empty() ||
           std::find(names.begin(), names.end(), name) != names.end();
  };
  const PartitionPlan& plan = shard->plan();
  const ParamLayout& layout = shard->layout();
  // Rows asked first, per tensor index (checked before anything is sent).
  std::map<int, std::vector<int64_t>> first;
  for (const TensorRows& tr : req->first()) {
    const ParamSpec* spec = layout.Find(tr.name());
    if (spec == nullptr) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("pull: unknown tensor ", tr.name()));
    }
    const int t = static_cast<int>(spec - layout.tensors().data());
    const int64_t num_rows = spec->shape.empty() ? 1 : spec->shape[0];
    if (first.count(t) > 0) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("pull: rows of ", tr.name(),
                                       " asked twice"));
    }
    for (int k = 0; k < tr.rows_size(); ++k) {
      if (tr.rows(k) < 0 || tr.rows(k) >= num_rows ||
          (k > 0 && tr.rows(k) <= tr.rows(k - 1))) {
        return grpc::Status(
            grpc::StatusCode::INVALID_ARGUMENT,
            absl::StrCat("pull: row ", tr.rows(k), " of ", tr.name(),
                         " is out of range or not increasing"));
      }
    }
    first[t].assign(tr.rows().begin(), tr.rows().end());
  }
  const std::shared_ptr<const Snapshot>& sp = *snap;
  const absl::Time deadline = DeadlineOf(ctx);
  // A snapshot still being made (BSP) becomes final piece by piece: its
  // first rows, then its slices in update order. Each piece is sent once
  // final; rows asked first that it did not update first come at the end.
  const bool partial = !sp->Complete();
  const std::vector<int>& order = shard->update_order();
  auto position = [&](int slice) {
    return static_cast<int>(std::find(order.begin(), order.end(), slice) -
                            order.begin());
  };
  auto cancelled = [&] {
    return grpc::Status(grpc::StatusCode::CANCELLED, "pull cancelled");
  };
  auto row_size = [&](const SliceSpec& sl) {
    return RowSize(layout.tensors()[sl.tensor]);
  };
  // The snapshot's parameters as one slice that holds the snapshot until
  // the transport dropped every piece that refers to it.
  grpc::Slice whole;
  auto snapshot_bytes = [&]() -> const grpc::Slice& {
    if (whole.size() == 0 && !sp->params.empty()) {
      auto* hold = new std::shared_ptr<const Snapshot>(sp);
      whole = grpc::Slice(
          const_cast<float*>(sp->params.data()),
          sizeof(float) * sp->params.size(),
          [](void* p) { delete static_cast<std::shared_ptr<const Snapshot>*>(p); },
          hold);
    }
    return whole;
  };
  // Rows of a slice in row chunks: long runs of rows are sent from the
  // snapshot itself, short ones copied together (RowPieces).
  auto send_rows = [&](const SliceSpec& sl, const std::vector<int64_t>& rows) {
    const int64_t row = row_size(sl);
    const int64_t per_chunk = std::max<int64_t>(1, kChunkElements / row);
    const size_t at = sizeof(float) * sl.shard_offset;
    const grpc::Slice table =
        snapshot_bytes().sub(at, at + sizeof(float) * sl.size());
    for (size_t k = 0; k < rows.size(); k += per_chunk) {
      const size_t m = std::min<size_t>(per_chunk, rows.size() - k);
      const auto chunk_rows = absl::MakeConstSpan(rows.data() + k, m);
      if (!writer->Write(EncodeRowChunk(
              sl.name, F32, chunk_rows,
              RowPieces(table, sizeof(float) * row, sl.begin / row,
                        chunk_rows)))) {
        return false;
      }
      if (ctx->IsCancelled()) return false;
    }
    return true;
  };
  // Rows of each slice of the tensors asked first, sent so far.
  std::map<int, std::vector<int64_t>> sent;
  if (!first.empty() && partial) {
    absl::Status st = sp->WaitFirst(deadline);
    if (!st.ok()) return ToGrpcStatus(st);
  }
  for (const auto& [t, rows] : first) {
    for (int i : order) {
      const SliceSpec& sl = plan.slices()[i];
      if (sl.tensor != t || !wanted(sl.name)) continue;
      std::vector<int64_t> now;
      for (int64_t r : RowsOfSlice(sl, row_size(sl), rows, false)) {
        // While the update runs, only the rows it made final first.
        if (!partial || (sp->first_tensor == t &&
                         std::binary_search(sp->first_rows.begin(),
                                            sp->first_rows.end(), r))) {
          now.push_back(r);
        }
      }
      if (!send_rows(sl, now)) return cancelled();
      sent[i] = std::move(now);
    }
  }
  // Then every other slice in update order, and the other rows of the
  // tensors asked first at the end (the word embedding's: forward reads
  // them last, in the tied decoder).
  // Chunks that are final together go out together (one message up to
  // kBatchBytes): a batch is written once it is large enough, or before
  // waiting for a slice the update has not made yet.
  ChunkBatch batch(kPullChunksField);
  auto flush = [&] { return batch.empty() || writer->Write(batch.Take()); };
  for (int i : order) {
    const SliceSpec& sl = plan.slices()[i];
    if (!wanted(sl.name) || first.count(sl.tensor) > 0) continue;
    if (partial) {
      if (!sp->SlicesReady(position(i) + 1) && !flush()) return cancelled();
      absl::Status st = sp->WaitSlices(position(i) + 1, deadline);
      if (!st.ok()) return ToGrpcStatus(st);
    }
    for (int64_t off = sl.begin; off < sl.end; off += kChunkElements) {
      const int64_t n = std::min(kChunkElements, sl.end - off);
      // The payload is sent from the snapshot itself (a sub-slice of the
      // slice that holds it).
      const size_t at = sizeof(float) * (sl.shard_offset + (off - sl.begin));
      batch.AddChunk(sl.name, F32, off,
                     snapshot_bytes().sub(at, at + sizeof(float) * n));
      if (batch.payload_bytes() >= kBatchBytes && !flush()) {
        return cancelled();
      }
      if (ctx->IsCancelled()) return cancelled();
    }
  }
  if (!flush()) return cancelled();
  for (const auto& [t, rows] : first) {
    (void)rows;
    for (int i : order) {
      const SliceSpec& sl = plan.slices()[i];
      if (sl.tensor != t || !wanted(sl.name)) continue;
      if (partial) {
        absl::Status st = sp->WaitSlices(position(i) + 1, deadline);
        if (!st.ok()) return ToGrpcStatus(st);
      }
      if (!send_rows(sl, RowsOfSlice(sl, row_size(sl), sent[i], true))) {
        return cancelled();
      }
    }
  }
  return grpc::Status::OK;
}

grpc::Status ShardService::PushRaw(
    grpc::ServerContext* ctx,
    grpc::ServerReaderWriter<PushResponse, grpc::ByteBuffer>* reader) {
  BERTPS_CORE_OR_RETURN(shard);
  grpc::ByteBuffer buf;
  ParsedPushRequest msg;
  if (!reader->Read(&buf) || !ParsePushRequest(buf, &msg).ok() ||
      !msg.has_header) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "a push must start with its header");
  }
  absl::StatusOr<std::unique_ptr<ShardCore::PushSession>> session =
      shard->BeginPush(msg.header);
  if (!session.ok()) return ToGrpcStatus(session.status());
  absl::Status bad;
  while (reader->Read(&buf)) {
    if (!bad.ok()) continue;  // drain, nothing more is taken
    bad = ParsePushRequest(buf, &msg);
    if (!bad.ok()) continue;
    if (msg.has_next_first) {
      // A hint only (it changes no value): a bad one is dropped, not the
      // push (a bad id of the next batch fails that step, naming it).
      absl::Status hint = shard->SetNextFirst(session->get(), msg.next_first);
      if (!hint.ok()) {
        LOG_EVERY_N(WARNING, 100) << "push: " << hint;
      }
      continue;
    }
    if (msg.has_chunks) {  // several chunks, in order
      for (const ChunkRef& c : msg.chunks) {
        bad = shard->AddChunk(session->get(), c);
        if (!bad.ok()) break;
      }
      continue;
    }
    if (!msg.has_chunk) {
      bad = absl::InvalidArgumentError("a push carries one header only");
      continue;
    }
    bad = shard->AddChunk(session->get(), msg.chunk);
  }
  if (ctx->IsCancelled()) {
    return grpc::Status(grpc::StatusCode::CANCELLED,
                        "push stream cancelled; nothing applied");
  }
  if (!bad.ok()) return ToGrpcStatus(bad);
  absl::StatusOr<PushResponse> r =
      shard->FinishPush(std::move(*session), DeadlineOf(ctx));
  if (!r.ok()) return ToGrpcStatus(r.status());
  if (!reader->Write(*r)) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "client gone");
  }
  return grpc::Status::OK;
}

grpc::Status ShardService::Announce(grpc::ServerContext* ctx,
                                    const AnnounceRequest* req,
                                    AnnounceResponse* resp) {
  BERTPS_CORE_OR_RETURN(shard);
  absl::StatusOr<AnnounceResponse> r = shard->Announce(*req, DeadlineOf(ctx));
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = *r;
  return grpc::Status::OK;
}

grpc::Status ShardService::Exchange(grpc::ServerContext* ctx,
                                    const ExchangeRequest* req,
                                    ExchangeResponse*) {
  BERTPS_CORE_OR_RETURN(shard);
  return ToGrpcStatus(shard->ReceiveExchange(*req));
}

grpc::Status ShardService::Checkpoint(grpc::ServerContext* ctx,
                                      const CheckpointRequest* req,
                                      CheckpointResponse* resp) {
  BERTPS_CORE_OR_RETURN(shard);
  if (req->dir().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "checkpoint needs a directory");
  }
  absl::StatusOr<CheckpointResponse> r =
      shard->Checkpoint(req->dir(), req->version(), DeadlineOf(ctx));
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = *r;
  return grpc::Status::OK;
}

grpc::Status ShardService::Restore(grpc::ServerContext* ctx,
                                   const RestoreRequest* req,
                                   RestoreResponse* resp) {
  BERTPS_CORE_OR_RETURN(shard);
  absl::StatusOr<int64_t> v = shard->Restore(req->manifest());
  if (!v.ok()) return ToGrpcStatus(v.status());
  resp->set_version(*v);
  return grpc::Status::OK;
}

grpc::Status ShardService::Stats(grpc::ServerContext* ctx, const StatsRequest*,
                                 StatsResponse* resp) {
  BERTPS_CORE_OR_RETURN(shard);
  *resp = shard->Stats();
  // The process's, not the core's: the transport's threads are most of it.
  resp->set_process_cpu_seconds(ProcessCpuSeconds());
  return grpc::Status::OK;
}

GrpcPeerLink::GrpcPeerLink(std::vector<std::string> addresses,
                           SecurityConfig security)
    : security_(std::move(security)) {
  SetAddresses(std::move(addresses));
}

void GrpcPeerLink::SetAddresses(std::vector<std::string> addresses) {
  absl::MutexLock l(&mu_);
  addresses_ = std::move(addresses);
  stubs_.clear();
  stubs_.resize(addresses_.size());
}

absl::Status GrpcPeerLink::Send(int to_shard, const ExchangeRequest& request,
                                absl::Time deadline,
                                const std::atomic<bool>* stop) {
  std::shared_ptr<ParameterServer::Stub> stub;
  std::string address;
  {
    absl::MutexLock l(&mu_);
    if (to_shard < 0 || to_shard >= static_cast<int>(addresses_.size())) {
      return absl::InvalidArgumentError(absl::StrCat("no shard ", to_shard));
    }
    address = addresses_[to_shard];
    if (!stubs_[to_shard]) {
      stubs_[to_shard] = ParameterServer::NewStub(MakeChannel(
          addresses_[to_shard], security_, ClientChannelArguments()));
    }
    stub = stubs_[to_shard];
  }
  // Retry while the peer is starting or briefly unreachable; any answer of
  // the peer itself (refused, another incarnation) is final.
  absl::Status last;
  for (int attempt = 0; absl::Now() < deadline; ++attempt) {
    if (stop != nullptr && stop->load()) {
      return absl::AbortedError("this shard's install ended");
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(std::min(
        deadline, absl::Now() + absl::Seconds(2))));
    ctx.set_wait_for_ready(true);
    ExchangeResponse resp;
    last = FromGrpcStatus(stub->Exchange(&ctx, request, &resp));
    if (last.code() != absl::StatusCode::kUnavailable &&
        last.code() != absl::StatusCode::kDeadlineExceeded) {
      return last;
    }
    absl::SleepFor(absl::Milliseconds(std::min(1000, 50 << std::min(attempt, 4))));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "shard ", to_shard, " at ", address, " unreachable: ", last.message()));
}

}  // namespace ps
}  // namespace bertps
