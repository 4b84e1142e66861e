#include "common/init.h"

#include <malloc.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/internal/parse.h"
#include "absl/flags/internal/usage.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/descriptors.h"
#include "common/version.h"
#include "glog/logging.h"

ABSL_FLAG(std::string, log_level, "INFO",
          "Least severe log messages written: INFO, WARNING or ERROR.");

namespace bertps {
namespace {

// --help lists the flags of the binary's *_main.cc and the shared ones of
// common/ (TLS, TCP, logging); Abseil's default looks for a file named like
// the binary, which none is, and printed "No flags matched".
bool IsOurFlagFile(absl::string_view file) {
  return absl::EndsWith(file, "_main.cc") || absl::StrContains(file, "common/") ||
         absl::StrContains(file, "tools/") || absl::StrContains(file, "deploy/");
}

}  // namespace

std::vector<std::string> InitProcess(int argc, char** argv,
                                     const char* usage) {
  // --version: ours (release, commit, build), not Abseil's, which is built
  // into the system library and reports that library's assertions.
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") break;
    if (a == "--version" || a == "-version") {
      std::string program = argv[0];
      program = program.substr(program.rfind('/') + 1);
      std::printf("%s\n", VersionLine(program).c_str());
      std::exit(0);
    }
  }
  absl::SetProgramUsageMessage(usage);
  absl::FlagsUsageConfig config;
  config.contains_helpshort_flags = IsOurFlagFile;
  config.contains_help_flags = IsOurFlagFile;
  absl::SetFlagsUsageConfig(config);
  // As absl::ParseCommandLine, but --help and --helpfull print the flags to
  // stdout and exit 0 (Abseil's own handling exits 1: a request answered is
  // not an error).
  namespace fi = absl::flags_internal;
  std::vector<char*> rest = fi::ParseCommandLineImpl(
      argc, argv, fi::ArgvListAction::kRemoveParsedArgs,
      fi::UsageFlagsAction::kIgnoreUsage, fi::OnUndefinedFlag::kAbortIfUndefined);
  if (fi::HandleUsageFlags(std::cout, absl::ProgramUsageMessage()) >= 0) {
    std::cout.flush();
    std::exit(0);
  }
  const std::string level = absl::GetFlag(FLAGS_log_level);
  int min_level = -1;
  if (level == "INFO") min_level = google::GLOG_INFO;
  if (level == "WARNING") min_level = google::GLOG_WARNING;
  if (level == "ERROR") min_level = google::GLOG_ERROR;
  if (min_level < 0) {
    std::string program = argv[0];
    program = program.substr(program.rfind('/') + 1);
    std::fprintf(stderr, "%s: --log_level: '%s' is not one of INFO, WARNING, "
                 "ERROR\n", program.c_str(), level.c_str());
    std::exit(2);
  }
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = min_level;
  google::InstallFailureSignalHandler();
  // Descriptors: the soft limit up to the hard one (common/descriptors.h).
  const DescriptorLimitChange fds = RaiseDescriptorLimit();
  if (fds.raised()) {
    LOG(INFO) << "raised the descriptor limit from " << fds.before.soft
              << " to " << fds.after.soft;
  }
  if (fds.after.soft >= 0 && fds.after.soft < 1024) {
    LOG(WARNING) << "the descriptor limit is " << fds.after.soft
                 << " (hard limit " << fds.after.hard
                 << "): few connections and files fit; raise the hard "
                    "limit (ulimit -Hn, systemd LimitNOFILE=)";
  }
  // Large tensors are reused across steps and RPCs: keep freed pages instead
  // of handing them back to the kernel each time (see docs/performance.md).
  // (32 MiB is the largest mmap threshold glibc accepts on 64-bit.)
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  // Few arenas: gRPC's many threads each allocating multi-MB message buffers
  // would otherwise spread them over up to 8 arenas per core, each keeping
  // its own freed blocks, and the resident size of a busy shard creeps up
  // (tools/bench.sh soak). Small allocations stay in per-thread caches.
  mallopt(M_ARENA_MAX, 2);
  // The system's Abseil is built with assertions on, so absl::Mutex checks
  // every Lock() for lock-order cycles: a global graph updated under a
  // global lock, about 1% of a transfer's CPU in the profiles. Cycles are
  // caught by the tests, which keep the check (they do not call this).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return std::vector<std::string>(rest.begin(), rest.end());
}

absl::Status WriteAddressFile(const std::string& path,
                              const std::string& address) {
  if (path.empty()) return absl::OkStatus();
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("--address_file ", path, ": cannot write ", tmp));
  }
  const bool written = std::fprintf(f, "%s\n", address.c_str()) > 0;
  if (std::fclose(f) != 0 || !written ||
      std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::FailedPreconditionError(
        absl::StrCat("--address_file ", path, ": cannot write it"));
  }
  return absl::OkStatus();
}

}  // namespace bertps
