// bertpsctl's command line: the usage text, and flags (anywhere among the
// arguments) and the verb with its arguments parsed into a CommandLine.
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "tools/bertpsctl.h"

namespace bertps {
namespace ctl {
namespace {

// Each verb and the number of arguments it takes.
struct VerbInfo {
  const char* name;
  int args;
};
constexpr VerbInfo kVerbs[] = {{"submit", 1}, {"status", 1}, {"list", 0},
                               {"watch", 1},  {"cancel", 1}, {"metrics", 1},
                               {"plot", 1},   {"events", 1},
                               {"resubmit", 1}, {"export", 2}, {"drain", 1}, {"revoke", 1},
                               {"help", 0}};

}  // namespace

// ---------------------------------------------------------------- parsing

std::string Usage() {
  return absl::StrCat(
      "usage: bertpsctl [--coordinator HOST:PORT] [--timeout_s N] <verb> ...\n"
      "  submit SPEC            submit a job spec (text format or JSON); "
      "prints the job id\n"
      "  status JOB [-o FMT]    state, progress, loss, throughput, times\n"
      "  list [-o FMT]          one line per job\n"
      "  watch JOB              follow the job until it ends; exit 0 "
      "SUCCEEDED, 3 FAILED, 4 CANCELLED\n"
      "  cancel JOB             cancel a job\n"
      "  drain MEMBER [--force] a member hands its work back and leaves "
      "(maintenance; admin; --force: even when that leaves its job short)\n"
      "  revoke MEMBER          drop a member and refuse its credential at "
      "once (cluster admin)\n"
      "  metrics JOB [-o FMT]   progress and loss history\n"
      "  plot JOB [-o FILE]     loss and learning rate as an SVG (default "
      "loss.svg)\n"
      "  events JOB [-o FMT]    the job's log: its events with their times\n"
      "  (FMT: table, json or yaml; --json is -o json)\n"
      "  resubmit JOB [--from_checkpoint]  submit an ended job's spec again "
      "(from its newest checkpoint); prints the new id\n"
      "  export JOB|CHECKPOINT DEST [--step N] [--vocab FILE]\n"
      "                         write the model of a job's newest checkpoint "
      "(or of step N; or of\n"
      "                         a checkpoint directory or manifest.json) as "
      "a Hugging Face directory,\n"
      "                         or DEST.safetensors alone; DEST must not "
      "exist\n"
      "flags:\n"
      "  --coordinator HOST:PORT  default $BERTPS_COORDINATOR or ",
      kDefaultCoordinator,
      "\n"
      "  --timeout_s N            deadline of each RPC (default 30)\n"
      "  --watch_probe_s N        watch: check the coordinator after N s "
      "without events (default 30)\n"
      "  --tls_ca FILE            TLS: the CA that signed the coordinator's "
      "certificate\n"
      "  --token_file FILE        bearer token (admin to submit and cancel)\n"
      "  --tls_cert FILE --tls_key FILE  client certificate (mutual TLS)\n"
      "  --tls_server_name NAME   name checked in the coordinator's "
      "certificate\n"
      "exit codes: 0 ok, 1 error, 2 bad command line, 3 job failed, 4 job "
      "cancelled\n");
}

absl::StatusOr<CommandLine> ParseCommandLine(
    const std::vector<std::string>& args, const char* env_coordinator) {
  CommandLine cmd;
  if (env_coordinator != nullptr && env_coordinator[0] != '\0') {
    cmd.options.coordinator = env_coordinator;
  }
  std::vector<std::string> positional;
  bool out_given = false;
  bool flags_done = false;
  auto seconds = [](const std::string& flag, const std::string& v,
                    absl::Duration* d) -> absl::Status {
    double s;
    if (!absl::SimpleAtod(v, &s) || !(s > 0) || !std::isfinite(s)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag, " must be a positive number of seconds, got '", v, "'"));
    }
    *d = absl::Seconds(s);
    return absl::OkStatus();
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (flags_done || a.size() < 2 || a[0] != '-') {
      positional.push_back(a);
      continue;
    }
    if (a == "--") {
      flags_done = true;
      continue;
    }
    std::string name = a.substr(a[1] == '-' ? 2 : 1);
    std::optional<std::string> value;
    const size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    }
    auto take_value = [&]() -> absl::StatusOr<std::string> {
      if (value) return *value;
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("flag ", a, " needs a value"));
      }
      return args[++i];
    };
    if (name == "json" || name == "help" || name == "h" ||
        name == "from_checkpoint" || name == "force") {
      bool b = true;
      if (value && !absl::SimpleAtob(*value, &b)) {
        return absl::InvalidArgumentError(
            absl::StrCat("flag --", name, " takes true or false"));
      }
      (name == "json"              ? cmd.options.json
       : name == "from_checkpoint" ? cmd.options.from_checkpoint
       : name == "force"           ? cmd.options.force
                                   : cmd.help) = b;
    } else if (name == "coordinator") {
      ASSIGN_OR_RETURN(cmd.options.coordinator, take_value());
      if (cmd.options.coordinator.empty()) {
        return absl::InvalidArgumentError("--coordinator must not be empty");
      }
    } else if (name == "timeout_s") {
      ASSIGN_OR_RETURN(std::string v, take_value());
      RETURN_IF_ERROR(seconds(name, v, &cmd.options.timeout));
    } else if (name == "watch_probe_s") {
      ASSIGN_OR_RETURN(std::string v, take_value());
      RETURN_IF_ERROR(seconds(name, v, &cmd.options.watch_probe_after));
    } else if (name == "tls_ca" || name == "tls_cert" || name == "tls_key" ||
               name == "token_file" || name == "tls_server_name") {
      ASSIGN_OR_RETURN(std::string v, take_value());
      if (v.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, " must not be empty"));
      }
      SecurityFiles& f = cmd.options.security;
      (name == "tls_ca"       ? f.tls_ca
       : name == "tls_cert"   ? f.tls_cert
       : name == "tls_key"    ? f.tls_key
       : name == "token_file" ? f.token_file
                              : f.tls_server_name) = v;
    } else if (name == "step") {
      ASSIGN_OR_RETURN(std::string v, take_value());
      int64_t step;
      if (!absl::SimpleAtoi(v, &step) || step < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--step must be a step number (0 or more), got '", v, "'"));
      }
      cmd.options.step = step;
    } else if (name == "vocab") {
      ASSIGN_OR_RETURN(cmd.options.vocab, take_value());
      if (cmd.options.vocab.empty()) {
        return absl::InvalidArgumentError("--vocab must not be empty");
      }
    } else if (name == "o" || name == "out" || name == "output") {
      ASSIGN_OR_RETURN(cmd.options.out, take_value());
      if (cmd.options.out.empty()) {
        return absl::InvalidArgumentError(
            "-o needs a value (plot: a file; else json, yaml or table)");
      }
      out_given = true;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", a));
    }
  }
  if (cmd.help) return cmd;
  if (positional.empty()) return absl::InvalidArgumentError("no verb given");
  cmd.verb = positional[0];
  if (out_given && cmd.verb != "plot") {
    // -o is the plot's file, and every other verb's output format.
    const std::string& f = cmd.options.out;
    if (f != "json" && f != "yaml" && f != "table") {
      return absl::InvalidArgumentError(absl::StrCat(
          "-o ", f, ": the output format is json, yaml or table"));
    }
    cmd.options.json = f == "json";
    cmd.options.yaml = f == "yaml";
    cmd.options.out = CtlOptions().out;
  }
  cmd.args.assign(positional.begin() + 1, positional.end());
  for (const VerbInfo& v : kVerbs) {
    if (cmd.verb != v.name) continue;
    if (static_cast<int>(cmd.args.size()) != v.args) {
      return absl::InvalidArgumentError(absl::StrCat(
          cmd.verb, " takes ",
          v.args == 0   ? "no arguments"
          : v.args == 1 ? "one argument"
                        : "two arguments",
          ", got ", cmd.args.size()));
    }
    if (cmd.verb == "help") cmd.help = true;
    return cmd;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown verb '", cmd.verb, "'"));
}

}  // namespace ctl
}  // namespace bertps
