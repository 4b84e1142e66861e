// Writes the golden fixtures (tests/fixtures_gen.h) into a directory:
//
//   bazel run //tests:make_fixtures -- tests/fixtures
//
// A relative directory is taken from the workspace (bazel run sets
// BUILD_WORKSPACE_DIRECTORY). A fixture directory that exists already is
// left as it is and named: a fixture is never rewritten. A format whose
// version is bumped gets a new directory name in tests/fixtures_gen.h
// (e.g. checkpoint-v2), which this then writes beside the old one
// (docs/formats.md).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/io/file_util.h"
#include "tests/fixtures_gen.h"

namespace {

namespace fs = std::filesystem;
using namespace bertps::fixtures;  // NOLINT: a small tool

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "make_fixtures: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || std::string(argv[1]) == "--help") {
    std::fprintf(stderr,
                 "usage: make_fixtures OUT_DIR   (e.g. tests/fixtures)\n"
                 "Writes each fixture directory of tests/fixtures_gen.h that "
                 "OUT_DIR lacks; never rewrites one.\n");
    return argc == 2 ? 0 : 2;
  }
  const char* workspace = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  fs::path out = argv[1];
  if (out.is_relative() && workspace != nullptr) out = fs::path(workspace) / out;
  const std::string dashboard =
      (workspace != nullptr ? std::string(workspace) : std::string("."))
      + "/deploy/grafana/bertps-dashboard.json";
  const fs::path scratch = out / ".make_fixtures-scratch";
  int wrote = 0;
  auto fresh = [&](const char* name) {
    if (fs::exists(out / name)) {
      std::printf("%s exists: left as it is (a fixture is never rewritten)\n",
                  (out / name).c_str());
      return false;
    }
    ++wrote;
    std::printf("writing %s\n", (out / name).c_str());
    return true;
  };
  absl::Status st;
  const std::string checkpoint = (out / kCheckpointDir).string();
  if (fresh(kCheckpointDir)) {
    st = WriteCheckpointFixture(checkpoint, scratch.string());
    if (!st.ok()) return Fail(st);
  }
  if (fresh(kExportDir)) {
    st = WriteExportFixture(
        absl::StrCat(checkpoint, "/ckpt-", kSteps, "/manifest.json"),
                            (out / kExportDir).string(), scratch.string());
    if (!st.ok()) return Fail(st);
  }
  if (fresh(kJobStoreDir)) {
    st = bertps::io::MakeDirs((out / kJobStoreDir).string());
    if (st.ok()) st = WriteJobStoreFixture((out / kJobStoreDir / kJobStoreFile).string());
    if (!st.ok()) return Fail(st);
  }
  if (fresh(kEventsDir)) {
    st = WriteEventsFixture((out / kEventsDir).string());
    if (st.ok()) {
      st = bertps::io::WriteFileAtomically(
          (out / kEventsDir / kTagsFile).string(), TensorBoardTags());
    }
    if (!st.ok()) return Fail(st);
  }
  if (fresh(kMetricsDir)) {
    absl::StatusOr<std::string> names = DashboardMetricNames(dashboard);
    st = names.status();
    if (st.ok()) st = bertps::io::MakeDirs((out / kMetricsDir).string());
    if (st.ok()) {
      st = bertps::io::WriteFileAtomically(
          (out / kMetricsDir / kMetricsFile).string(), *names);
    }
    if (!st.ok()) return Fail(st);
  }
  std::error_code ec;
  fs::remove_all(scratch, ec);
  std::printf("%d fixture directories written\n", wrote);
  return 0;
}
