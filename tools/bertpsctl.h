// bertpsctl: the user's client of the coordinator's JobService.
//
//   bertpsctl [--coordinator HOST:PORT] [--timeout_s N] <verb> ...
//     submit SPEC            print the new job's id
//     status JOB [--json]    human summary, or the JobStatus as JSON
//     list [--json]          one line per job
//     watch JOB              follow the job until it ends (progress bar on a
//                            TTY, one line per event otherwise)
//     cancel JOB
//     drain MEMBER           the member hands its work back and leaves
//     metrics JOB [--json]   progress and loss history
//     plot JOB [-o FILE]     loss and learning-rate curves as an SVG
//     events JOB [--json]    the job's log, with times
//     resubmit JOB [--from_checkpoint]  the ended job's spec again
//     export JOB|CHECKPOINT DEST [--step N] [--vocab FILE]  the model of a
//                            checkpoint as a Hugging Face directory (or a
//                            .safetensors file), without a job
//
// Every verb is a function that takes a JobService stub and two output
// streams and returns the process exit code (see ExitCode), so the tests
// drive them against an in-process fake coordinator. Errors go to `err` as
// one "bertpsctl: ..." line naming the coordinator's address or the job.
//
// The command line is parsed here rather than with absl flags so that a bad
// command line is exit code 2 (absl's parser exits with 1) and is testable.
//
// Thread-safety: the functions keep no shared state; Watch runs one helper
// thread of its own for the duration of the call. The stub is borrowed.
#ifndef BERTPS_TOOLS_BERTPSCTL_H_
#define BERTPS_TOOLS_BERTPSCTL_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/security.h"
#include "proto/coordinator.grpc.pb.h"

namespace bertps {
namespace ctl {

enum ExitCode : int {
  kExitOk = 0,
  kExitError = 1,         // RPC failed, job not found, unreadable spec, ...
  kExitUsage = 2,         // bad command line
  kExitJobFailed = 3,     // watch: the job FAILED
  kExitJobCancelled = 4,  // watch: the job was CANCELLED
};

constexpr char kDefaultCoordinator[] = "127.0.0.1:7400";

struct CtlOptions {
  std::string coordinator = kDefaultCoordinator;  // for messages and dialing
  absl::Duration timeout = absl::Seconds(30);     // deadline of each RPC
  // watch: after this long without an event, ask GetJob whether the
  // coordinator is still alive (that call has `timeout` as its deadline).
  absl::Duration watch_probe_after = absl::Seconds(30);
  // status, list, metrics, events: JSON or YAML instead of the table
  // (`-o json|yaml|table`, kubectl's style; --json is -o json).
  bool json = false;
  bool yaml = false;
  bool from_checkpoint = false;  // resubmit: restore the newest checkpoint
  bool force = false;  // drain: even when the job is left short of members
  std::optional<int64_t> step;   // export: the checkpoint of this step
  std::string vocab;             // export: the vocabulary to copy beside it
  bool tty = false;              // watch: redraw one progress line in place
  // watch, not on a terminal (logs, CI): progress alone prints at most one
  // line this often; state changes and events with a message always print.
  absl::Duration watch_line_every = absl::Seconds(5);
  std::string out = "loss.svg";  // plot
  // TLS and bearer token: --tls_ca, --tls_cert, --tls_key, --token_file,
  // --tls_server_name, as in the daemons (common/security.h).
  SecurityFiles security;
};

struct CommandLine {
  CtlOptions options;
  std::string verb;               // empty with help
  std::vector<std::string> args;  // positional arguments after the verb
  bool help = false;
};

// Parses argv[1..]. Flags may come before or after the verb, as --name=value
// or --name value; "--" ends the flags. `env_coordinator` (may be null or
// empty) is the default address, overridden by --coordinator.
// INVALID_ARGUMENT describes what is wrong.
absl::StatusOr<CommandLine> ParseCommandLine(
    const std::vector<std::string>& args, const char* env_coordinator);
std::string Usage();

// The verbs. Each returns an ExitCode.
int CmdSubmit(JobService::StubInterface* stub, const CtlOptions& o,
              const std::string& spec_path, std::ostream& out,
              std::ostream& err);
int CmdStatus(JobService::StubInterface* stub, const CtlOptions& o,
              const std::string& job, std::ostream& out, std::ostream& err);
int CmdList(JobService::StubInterface* stub, const CtlOptions& o,
            std::ostream& out, std::ostream& err);
int CmdWatch(JobService::StubInterface* stub, const CtlOptions& o,
             const std::string& job, std::ostream& out, std::ostream& err);
int CmdCancel(JobService::StubInterface* stub, const CtlOptions& o,
              const std::string& job, std::ostream& out, std::ostream& err);
int CmdMetrics(JobService::StubInterface* stub, const CtlOptions& o,
               const std::string& job, std::ostream& out, std::ostream& err);
int CmdPlot(JobService::StubInterface* stub, const CtlOptions& o,
            const std::string& job, std::ostream& out, std::ostream& err);
// The job's log: its events kept by the coordinator (the newest 2000), with
// their times, progress-only ones ("step N") left out; --json: one object
// per event.
int CmdEvents(JobService::StubInterface* stub, const CtlOptions& o,
              const std::string& job, std::ostream& out, std::ostream& err);
// Submits the spec of an ended job again (its name, data, outputs);
// --from_checkpoint restores the newest checkpoint it reported, so the new
// job continues from that step. Prints the new job's id.
// resubmit's spec writes into a directory of its own: outputs under the
// ended job's job_dir are cleared (derived again from the new job_dir), and
// job_dir is cleared when the coordinator named it after the job (its
// --jobs_root), else it becomes JOB_DIR.resubmit-<UTC time>. The old one is
// only read (checkpoint.restore).
void GiveOwnDirectory(const std::string& id, JobSpec* spec);
int CmdResubmit(JobService::StubInterface* stub, const CtlOptions& o,
                const std::string& job, std::ostream& out, std::ostream& err);
// Tells a member to hand its work back and leave (admin); asking again is
// no error.
int CmdDrain(JobService::StubInterface* stub, const CtlOptions& o,
             const std::string& member, std::ostream& out, std::ostream& err);
// RevokeMember: the member is dropped and its credential refused.
int CmdRevoke(JobService::StubInterface* stub, const CtlOptions& o,
              const std::string& member, std::ostream& out, std::ostream& err);
// Writes the model of a checkpoint to `dest` without a job: `source` is a
// job id (its checkpoint.dir, the newest complete checkpoint or --step's;
// its label names and vocabulary go with it) or, with no coordinator asked,
// a checkpoint directory or a manifest.json (a path: it has a '/').
// `dest` must not exist. Prints "exported step N of SOURCE to DEST".
int CmdExport(JobService::StubInterface* stub, const CtlOptions& o,
              const std::string& source, const std::string& dest,
              std::ostream& out, std::ostream& err);

// Checks the verb's arguments and runs it (kExitUsage for a bad verb or
// argument count).
int RunCommand(JobService::StubInterface* stub, const CommandLine& cmd,
               std::ostream& out, std::ostream& err);

// The whole program: parse, dial the coordinator, run.
int Main(const std::vector<std::string>& args, const char* env_coordinator,
         bool stdout_is_tty, std::ostream& out, std::ostream& err);

// --- Formatting pieces, exposed for tests. ---

// "0:42", "12:05", "1:02:03".
std::string FormatClock(absl::Duration d);

// Steps per second over a sliding window of observations, for the ETA.
class StepRate {
 public:
  void Observe(absl::Time now, int64_t step);
  // Remaining time to `total` steps, if a rate is known.
  std::optional<absl::Duration> Eta(int64_t step, int64_t total) const;

 private:
  std::deque<std::pair<absl::Time, int64_t>> window_;
};

// "[#####.....] step 40/100 loss 5.2300 1234 ex/s ETA 0:42" (bar = true), or
// "RUNNING step 40/100 loss 5.2300 lr 1.00e-04 1234 ex/s ETA 0:42".
std::string ProgressLine(const JobStatus& s, bool bar,
                         std::optional<absl::Duration> eta);

}  // namespace ctl
}  // namespace bertps

#endif  // BERTPS_TOOLS_BERTPSCTL_H_
