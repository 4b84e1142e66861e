// GZIP TFRecord files through the record index: read by block, shuffled by
// block, a worker inflating only the blocks its share is in.
#include <fcntl.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/io/record_index.h"
#include "common/io/tfrecord.h"
#include "gtest/gtest.h"

namespace bertps {
namespace io {
namespace {

namespace fs = std::filesystem;

class RecordIndexGzipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(
        ::testing::TempDir(), "/",
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ + "/data");
    cache_ = dir_ + "/cache";
  }
  std::string WriteFile(const std::string& name, int file, int n) {
    const std::string path = dir_ + "/data/" + name;
    auto w = TFRecordWriter::Open(path);
    EXPECT_TRUE(w.ok()) << w.status();
    for (int i = 0; i < n; ++i) EXPECT_TRUE((*w)->Write(Record(file, i)).ok());
    EXPECT_TRUE((*w)->Close().ok());
    return path;
  }
  static std::string Record(int file, int i) {
    return absl::StrCat("f", file, "-r", i, std::string(40 + (i * 7) % 90, 'q'));
  }
  std::string dir_, cache_;
};

TEST_F(RecordIndexGzipTest, ReadInFileOrderAndShuffledByBlock) {
  WriteFile("a.tfrecord.gz", 0, 200);  // 6 blocks of 32, one of 8
  WriteFile("b.tfrecord", 1, 30);      // plain: 30 units of one record
  WriteFile("c.tfrecord.gz", 2, 90);   // blocks of 32, 32, 26
  auto src = IndexedExampleSource::Open({dir_ + "/data/*.tfrecord*"}, cache_);
  ASSERT_TRUE(src.ok()) << src.status();
  ASSERT_EQ((*src)->size(), 320);
  std::vector<std::string> want;
  for (int i = 0; i < 200; ++i) want.push_back(Record(0, i));
  for (int i = 0; i < 30; ++i) want.push_back(Record(1, i));
  for (int i = 0; i < 90; ++i) want.push_back(Record(2, i));
  std::string r;
  for (int64_t p = 0; p < 320; ++p) {
    ASSERT_TRUE((*src)->Read(p, &r).ok()) << p;
    ASSERT_EQ(r, want[p]) << p;
  }
  EXPECT_EQ((*src)->blocks_inflated(), 10);

  (*src)->set_shuffle(true, 42);
  std::vector<std::vector<std::string>> epochs(2);
  for (int e = 0; e < 2; ++e) {
    const int64_t before = (*src)->blocks_inflated();
    for (int64_t p = 0; p < 320; ++p) {
      ASSERT_TRUE((*src)->Read(e * 320 + p, &r).ok());
      epochs[e].push_back(r);
    }
    // Each block once: the epoch reads a block's records one after another.
    EXPECT_EQ((*src)->blocks_inflated() - before, 10) << "epoch " << e;
    EXPECT_EQ(std::set<std::string>(epochs[e].begin(), epochs[e].end()),
              std::set<std::string>(want.begin(), want.end()));
    EXPECT_NE(epochs[e], want);
  }
  EXPECT_NE(epochs[0], epochs[1]);
  // The order is a pure function of (seed, epoch, files).
  auto again = IndexedExampleSource::Open({dir_ + "/data/*.tfrecord*"}, cache_);
  ASSERT_TRUE(again.ok());
  (*again)->set_shuffle(true, 42);
  for (int64_t p = 639; p >= 320; p -= 3) {
    ASSERT_TRUE((*again)->Read(p, &r).ok());
    EXPECT_EQ(r, epochs[1][p - 320]) << p;
  }
}

// 4 workers, a share of 64 records each (global batch 256) over 40 blocks:
// a worker inflates only its own blocks, a quarter of the file.
TEST_F(RecordIndexGzipTest, AWorkerInflatesOnlyItsBlocks) {
  const std::string path = WriteFile("a.tfrecord.gz", 0, 1280);
  const int64_t size = static_cast<int64_t>(fs::file_size(path));
  for (bool shuffle : {false, true}) {
    auto src = IndexedExampleSource::Open({path}, cache_);
    ASSERT_TRUE(src.ok()) << src.status();
    (*src)->set_shuffle(shuffle, 7);
    std::string r;
    for (int64_t step = 0; step < 5; ++step) {
      for (int e = 0; e < 64; ++e) {
        ASSERT_TRUE((*src)->Read(step * 256 + 64 + e, &r).ok());
      }
    }
    EXPECT_EQ((*src)->records_read(), 320);
    EXPECT_EQ((*src)->blocks_inflated(), 10) << shuffle;
    EXPECT_GT((*src)->bytes_read(), size * 2 / 10) << shuffle;
    EXPECT_LT((*src)->bytes_read(), size * 3 / 10) << shuffle;
  }
}

TEST_F(RecordIndexGzipTest, IndexRoundTripsAndABadBlockIsNamed) {
  const std::string path = WriteFile("a.tfrecord.gz", 0, 150);
  IndexSource how;
  auto index = LoadOrBuildRecordIndex(path, cache_, &how);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(how, IndexSource::kBuilt);
  EXPECT_EQ(index->block_first, (std::vector<int64_t>{0, 32, 64, 96, 128}));
  auto decoded = DecodeRecordIndex(EncodeRecordIndex(*index), "x");
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->offsets, index->offsets);
  EXPECT_EQ(decoded->block_offsets, index->block_offsets);
  EXPECT_EQ(decoded->raw_size, index->raw_size);
  ASSERT_TRUE(LoadOrBuildRecordIndex(path, cache_, &how).ok());
  EXPECT_EQ(how, IndexSource::kLoaded);

  // A byte of the second block's deflate data flipped, the file's size and
  // time kept (the index still matches it): the read fails naming the block.
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  {
    std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(index->block_offsets[1] + 40);
    io.put('\x55');
  }
  const struct timespec times[2] = {st.st_atim, st.st_mtim};
  ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  auto src = IndexedExampleSource::Open({path}, cache_);
  ASSERT_TRUE(src.ok()) << src.status();
  std::string r;
  ASSERT_TRUE((*src)->Read(3, &r).ok());
  absl::Status bad = (*src)->Read(40, &r);
  EXPECT_EQ(bad.code(), absl::StatusCode::kDataLoss) << bad;
  EXPECT_NE(bad.message().find(absl::StrCat(
                path, " (the gzip block at compressed offset ",
                index->block_offsets[1])),
            std::string::npos)
      << bad;
  // Once its time differs, the index is stale: the scan finds it instead.
  ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), nullptr, 0), 0);
  auto rescanned = IndexedExampleSource::Open({path}, cache_);
  EXPECT_EQ(rescanned.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(rescanned.status().message().find(path), std::string::npos)
      << rescanned.status();
}

}  // namespace
}  // namespace io
}  // namespace bertps
