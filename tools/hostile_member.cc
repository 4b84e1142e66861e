// hostile_member: a member that misbehaves, for the tests of what a valid
// worker credential can and cannot do (tests/malicious_member_test.sh,
// docs/security.md). It speaks the coordinator's and the shards' gRPC
// services directly, with the security flags of common/security.h, one call
// per run, and prints the call's outcome as one line: "OK ..." or
// "CODE: message". It exits 0 whatever the outcome (the test judges it), 2
// on a bad command line.
//
//   hostile_member [security flags] --coordinator HOST:PORT register
//       --role PREPROCESS_ROLE [--address A --instance I]
//                                          -> "OK MEMBER_ID SECRET"
//   hostile_member ... heartbeat --member ID [--secret S] [--job J]
//       [--incarnation N] [--leaving] [--error E]
//       [--result INDEX:RECORDS[:ERROR]] [--checkpoint PATH --step N]
//                                          -> "OK job=J item=K" (assignment)
//   hostile_member ... get --job J [--member ID --secret S]  -> "OK STATE"
//   hostile_member ... list [--member ID --secret S]         -> "OK N jobs"
//   hostile_member ... watch --job J [--member ID --secret S]
//   hostile_member [security flags] --shard HOST:PORT
//       {stats|checkpoint --dir D|restore --manifest M|replicate|snapshot|
//        exchange} [--job J --incarnation N --job_key K --shard_key K]
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/cluster/member_instance.h"
#include "common/grpc_status.h"
#include "common/init.h"
#include "common/ps/wire.h"
#include "common/security.h"
#include "grpcpp/grpcpp.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/ps.grpc.pb.h"
#include "server/coordinator/coordinator.h"

ABSL_FLAG(std::string, coordinator, "", "Coordinator HOST:PORT.");
ABSL_FLAG(std::string, shard, "", "Parameter-server shard HOST:PORT.");
ABSL_FLAG(std::string, role, "PREPROCESS_ROLE", "register: the role.");
ABSL_FLAG(std::string, address, "", "register: the address claimed.");
ABSL_FLAG(std::string, instance, "", "register: the instance named.");
ABSL_FLAG(std::string, member, "", "The member id to speak as.");
ABSL_FLAG(std::string, secret, "", "The member credential presented.");
ABSL_FLAG(std::string, job, "", "The job named.");
ABSL_FLAG(int64_t, incarnation, -1, "The incarnation named (-1: none).");
ABSL_FLAG(bool, leaving, false, "heartbeat: say the member leaves.");
ABSL_FLAG(std::string, error, "", "heartbeat: an error that fails the job.");
ABSL_FLAG(std::string, result, "",
          "heartbeat: a pool result INDEX:RECORDS[:ERROR].");
ABSL_FLAG(std::string, checkpoint, "", "heartbeat: a reported checkpoint.");
ABSL_FLAG(int64_t, step, 0, "heartbeat: the reported step.");
ABSL_FLAG(std::string, dir, "", "checkpoint: the directory.");
ABSL_FLAG(std::string, manifest, "", "restore: the manifest.");
ABSL_FLAG(std::string, job_key, "", "shard calls: the job key presented.");
ABSL_FLAG(std::string, shard_key, "", "shard calls: the shard key presented.");

namespace bertps {
namespace {

void Print(const grpc::Status& st, const std::string& ok_text) {
  if (st.ok()) {
    std::printf("OK %s\n", ok_text.c_str());
  } else {
    std::printf("%s: %s\n",
                absl::StatusCodeToString(
                    static_cast<absl::StatusCode>(st.error_code()))
                    .c_str(),
                st.error_message().c_str());
  }
}

void Deadline(grpc::ClientContext* ctx) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
}

void MemberMetadata(grpc::ClientContext* ctx) {
  if (!absl::GetFlag(FLAGS_member).empty()) {
    ctx->AddMetadata(kMemberMetadata, absl::GetFlag(FLAGS_member));
    ctx->AddMetadata(kMemberSecretMetadata, absl::GetFlag(FLAGS_secret));
  }
}

void ShardMetadata(grpc::ClientContext* ctx) {
  if (!absl::GetFlag(FLAGS_job).empty()) {
    ctx->AddMetadata(ps::kJobMetadata, absl::GetFlag(FLAGS_job));
  }
  if (absl::GetFlag(FLAGS_incarnation) >= 0) {
    ctx->AddMetadata(ps::kIncarnationMetadata,
                     absl::StrCat(absl::GetFlag(FLAGS_incarnation)));
  }
  if (!absl::GetFlag(FLAGS_job_key).empty()) {
    ctx->AddMetadata(ps::kJobKeyMetadata, absl::GetFlag(FLAGS_job_key));
  }
  if (!absl::GetFlag(FLAGS_shard_key).empty()) {
    ctx->AddMetadata(ps::kShardKeyMetadata, absl::GetFlag(FLAGS_shard_key));
  }
}

int CoordinatorCall(const std::string& cmd, const SecurityConfig& security) {
  auto channel = MakeChannel(absl::GetFlag(FLAGS_coordinator), security);
  auto cluster = ClusterService::NewStub(channel);
  auto jobs = JobService::NewStub(channel);
  grpc::ClientContext ctx;
  Deadline(&ctx);
  if (cmd == "register") {
    RegisterRequest req;
    Role role;
    if (!Role_Parse(absl::GetFlag(FLAGS_role), &role)) {
      std::fprintf(stderr, "hostile_member: unknown --role\n");
      return 2;
    }
    req.set_role(role);
    req.set_protocol_version(kMemberProtocolVersion);
    req.set_address(absl::GetFlag(FLAGS_address));
    req.set_instance(absl::GetFlag(FLAGS_instance));
    RegisterResponse resp;
    grpc::Status st = cluster->Register(&ctx, req, &resp);
    Print(st, absl::StrCat(resp.member_id(), " ", resp.member_secret()));
    return 0;
  }
  if (cmd == "heartbeat") {
    HeartbeatRequest req;
    req.set_member_id(absl::GetFlag(FLAGS_member));
    req.set_member_secret(absl::GetFlag(FLAGS_secret));
    req.set_job_id(absl::GetFlag(FLAGS_job));
    if (absl::GetFlag(FLAGS_incarnation) >= 0) {
      req.set_incarnation(absl::GetFlag(FLAGS_incarnation));
    }
    req.set_leaving(absl::GetFlag(FLAGS_leaving));
    req.set_error(absl::GetFlag(FLAGS_error));
    if (!absl::GetFlag(FLAGS_result).empty()) {
      std::vector<std::string> f =
          absl::StrSplit(absl::GetFlag(FLAGS_result), absl::MaxSplits(':', 2));
      WorkResult* r = req.add_results();
      int index = 0;
      int64_t records = 0;
      if (f.size() < 2 || !absl::SimpleAtoi(f[0], &index) ||
          !absl::SimpleAtoi(f[1], &records)) {
        std::fprintf(stderr, "hostile_member: --result INDEX:RECORDS[:ERROR]\n");
        return 2;
      }
      r->set_index(index);
      r->set_records(records);
      r->set_report_json("{}");
      if (f.size() == 3) r->set_error(f[2]);
    }
    if (!absl::GetFlag(FLAGS_checkpoint).empty()) {
      StepReport* s = req.add_steps();
      s->set_step(absl::GetFlag(FLAGS_step));
      s->set_version(absl::GetFlag(FLAGS_step) + 1);
      s->set_checkpoint(absl::GetFlag(FLAGS_checkpoint));
      s->set_checkpoint_version(absl::GetFlag(FLAGS_step) + 1);
    }
    HeartbeatResponse resp;
    grpc::Status st = cluster->Heartbeat(&ctx, req, &resp);
    Print(st, absl::StrCat("job=", resp.assignment().job_id(), " item=",
                           resp.assignment().has_item()
                               ? absl::StrCat(resp.assignment().item().index())
                               : std::string("none"),
                           " stop=", resp.assignment().stop()));
    return 0;
  }
  if (cmd == "get") {
    MemberMetadata(&ctx);
    GetJobRequest req;
    req.set_id(absl::GetFlag(FLAGS_job));
    JobStatus resp;
    grpc::Status st = jobs->GetJob(&ctx, req, &resp);
    Print(st, JobState_Name(resp.state()));
    return 0;
  }
  if (cmd == "list") {
    MemberMetadata(&ctx);
    ListJobsResponse resp;
    grpc::Status st = jobs->ListJobs(&ctx, ListJobsRequest(), &resp);
    Print(st, absl::StrCat(resp.jobs_size(), " jobs"));
    return 0;
  }
  if (cmd == "watch") {
    MemberMetadata(&ctx);
    WatchJobRequest req;
    req.set_id(absl::GetFlag(FLAGS_job));
    req.set_backlog_only(true);
    auto reader = jobs->WatchJob(&ctx, req);
    JobEvent e;
    int n = 0;
    while (reader->Read(&e)) ++n;
    Print(reader->Finish(), absl::StrCat(n, " events"));
    return 0;
  }
  std::fprintf(stderr, "hostile_member: unknown command %s\n", cmd.c_str());
  return 2;
}

int ShardCall(const std::string& cmd, const SecurityConfig& security) {
  auto stub = ParameterServer::NewStub(MakeChannel(
      absl::GetFlag(FLAGS_shard), security, ps::ClientChannelArguments()));
  grpc::ClientContext ctx;
  Deadline(&ctx);
  ShardMetadata(&ctx);
  if (cmd == "stats") {
    StatsResponse resp;
    grpc::Status st = stub->Stats(&ctx, StatsRequest(), &resp);
    Print(st, absl::StrCat("version=", resp.version()));
    return 0;
  }
  if (cmd == "checkpoint") {
    CheckpointRequest req;
    req.set_dir(absl::GetFlag(FLAGS_dir));
    CheckpointResponse resp;
    Print(stub->Checkpoint(&ctx, req, &resp), resp.file());
    return 0;
  }
  if (cmd == "restore") {
    RestoreRequest req;
    req.set_manifest(absl::GetFlag(FLAGS_manifest));
    RestoreResponse resp;
    Print(stub->Restore(&ctx, req, &resp), absl::StrCat(resp.version()));
    return 0;
  }
  if (cmd == "replicate") {
    ReplicateResponse resp;
    auto w = stub->Replicate(&ctx, &resp);
    ReplicateRequest m;
    m.mutable_step()->set_kind(ReplicaStep::COMMIT);
    m.mutable_step()->set_term(1 << 30);
    m.mutable_step()->set_incarnation(absl::GetFlag(FLAGS_incarnation));
    w->Write(m);
    w->WritesDone();
    Print(w->Finish(), absl::StrCat(resp.version()));
    return 0;
  }
  if (cmd == "snapshot") {
    InstallSnapshotResponse resp;
    auto w = stub->InstallSnapshot(&ctx, &resp);
    SnapshotChunk m;
    m.mutable_header()->set_term(1 << 30);
    m.mutable_header()->set_incarnation(absl::GetFlag(FLAGS_incarnation));
    w->Write(m);
    w->WritesDone();
    Print(w->Finish(), absl::StrCat(resp.version()));
    return 0;
  }
  if (cmd == "exchange") {
    ExchangeRequest req;
    req.set_incarnation(absl::GetFlag(FLAGS_incarnation));
    req.set_from_shard(0);
    req.add_values(1e30);
    ExchangeResponse resp;
    Print(stub->Exchange(&ctx, req, &resp), "");
    return 0;
  }
  std::fprintf(stderr, "hostile_member: unknown command %s\n", cmd.c_str());
  return 2;
}

}  // namespace
}  // namespace bertps

int main(int argc, char** argv) {
  std::vector<std::string> args = bertps::InitProcess(
      argc, argv, "hostile_member [flags] COMMAND (see the file's header)");
  if (args.size() != 2) {
    std::fprintf(stderr, "hostile_member: one command, please\n");
    return 2;
  }
  absl::StatusOr<bertps::SecurityConfig> security =
      bertps::SecurityConfigFromFlags();
  if (!security.ok()) {
    std::fprintf(stderr, "hostile_member: %s\n",
                 security.status().ToString().c_str());
    return 2;
  }
  if (!absl::GetFlag(FLAGS_shard).empty()) {
    return bertps::ShardCall(args[1], *security);
  }
  if (absl::GetFlag(FLAGS_coordinator).empty()) {
    std::fprintf(stderr, "hostile_member: --coordinator or --shard\n");
    return 2;
  }
  return bertps::CoordinatorCall(args[1], *security);
}
