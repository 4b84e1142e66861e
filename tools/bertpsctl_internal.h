// What the files of bertpsctl share (bertpsctl.cc: formatting, the job
// verbs; bertpsctl_args.cc: the command line; bertpsctl_history.cc: metrics,
// plot, events, resubmit; bertpsctl_yaml.cc: -o yaml): RPC
// helpers and the formatting of times, steps and messages. Private to
// //tools:bertpsctl_lib.
#ifndef BERTPS_TOOLS_BERTPSCTL_INTERNAL_H_
#define BERTPS_TOOLS_BERTPSCTL_INTERNAL_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "proto/coordinator.grpc.pb.h"
#include "tools/bertpsctl.h"

namespace bertps {
namespace ctl {
namespace internal {

// An event that only says a step was made ("step N", or no message).
bool IsProgressOnly(const std::string& message);
// Status rows of who holds what in a running job: each shard index's
// primary and backups (replicas > 1), each worker slot's member
// (bertpsctl_holders.cc).
std::vector<std::pair<std::string, std::string>> HolderRows(
    const JobStatus& s);
bool IsTerminal(JobState s);
// The RPC deadline of the options.
void SetDeadline(grpc::ClientContext* ctx, const CtlOptions& o);
// One sentence for a failed RPC, naming the coordinator or the job.
std::string RpcError(const CtlOptions& o, absl::string_view rpc,
                     const grpc::Status& s, absl::string_view job);
// Writes "bertpsctl: MESSAGE" to err; returns `code`.
int Fail(std::ostream& err, absl::string_view message, int code = kExitError);
grpc::Status GetJob(JobService::StubInterface* stub, const CtlOptions& o,
                    const std::string& job, JobStatus* status);
std::string PrintJson(const google::protobuf::Message& m, bool pretty);
// A message as JSON, with 64-bit integers as numbers.
nlohmann::json MessageToObject(const google::protobuf::Message& m);
// Prints a JSON document as is (o.json) or as YAML (o.yaml): block style,
// keys in their order, every string double-quoted (no value changes type).
void PrintStructured(const CtlOptions& o, const std::string& json_text,
                     std::ostream& out);
// JSON text as a YAML document.
std::string JsonToYaml(const std::string& json_text);
std::string TimeText(int64_t ms);  // local time, "-" for 0
std::string StepText(const JobProgress& p);

}  // namespace internal
}  // namespace ctl
}  // namespace bertps

#endif  // BERTPS_TOOLS_BERTPSCTL_INTERNAL_H_
