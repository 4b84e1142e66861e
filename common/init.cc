#include "common/init.h"

#include <malloc.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/version.h"
#include "glog/logging.h"

namespace bertps {

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
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  google::InstallFailureSignalHandler();
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
