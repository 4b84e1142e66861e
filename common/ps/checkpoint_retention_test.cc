#include "common/ps/checkpoint_retention.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace bertps {
namespace ps {
namespace {

namespace fs = std::filesystem;

std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  fs::path p = fs::path(base ? base : "/tmp") / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

void Touch(const fs::path& p) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << "x";
}

TEST(CheckpointRetention, KeepsTheNewestAndThePinned) {
  const std::vector<int64_t> have = {10, 20, 30, 40, 50, 60};
  EXPECT_EQ(CheckpointsToRemove(have, 2, 60, {}),
            (std::vector<int64_t>{10, 20, 30, 40}));
  // Pinned (an eval round not finished, the restart point) stay.
  EXPECT_EQ(CheckpointsToRemove(have, 2, 60, {20}),
            (std::vector<int64_t>{10, 30, 40}));
  // Newer than the newest reported: being written, stays, and does not
  // count among the kept.
  EXPECT_EQ(CheckpointsToRemove(have, 2, 40, {}),
            (std::vector<int64_t>{10, 20}));
  EXPECT_TRUE(CheckpointsToRemove(have, 0, 60, {}).empty());  // keep all
  EXPECT_TRUE(CheckpointsToRemove(have, 10, 60, {}).empty());
}

TEST(CheckpointRetention, ListsCompleteCheckpointsAndRemovesManifestFirst) {
  const std::string dir = TempDir("retention");
  for (int v : {20, 100, 3}) {
    Touch(fs::path(dir) / absl::StrCat("ckpt-", v) / "shard-0-of-1.safetensors");
    Touch(fs::path(dir) / absl::StrCat("ckpt-", v) / "manifest.json");
  }
  // Not checkpoints: no manifest (being written), odd names, a file.
  Touch(fs::path(dir) / "ckpt-200" / "shard-0-of-1.safetensors");
  Touch(fs::path(dir) / "ckpt-07" / "manifest.json");
  Touch(fs::path(dir) / "ckpt-x" / "manifest.json");
  Touch(fs::path(dir) / "LATEST");
  absl::StatusOr<std::vector<int64_t>> have = ListCheckpoints(dir);
  ASSERT_TRUE(have.ok()) << have.status();
  EXPECT_EQ(*have, (std::vector<int64_t>{3, 20, 100}));
  ASSERT_TRUE(RemoveCheckpoint(dir, 20).ok());
  EXPECT_FALSE(fs::exists(fs::path(dir) / "ckpt-20"));
  EXPECT_EQ(*ListCheckpoints(dir), (std::vector<int64_t>{3, 100}));
  EXPECT_EQ(RemoveCheckpoint(dir, 20).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(fs::exists(fs::path(dir) / "ckpt-200"));
  EXPECT_TRUE(ListCheckpoints(dir + "/absent")->empty());
}

}  // namespace
}  // namespace ps
}  // namespace bertps
