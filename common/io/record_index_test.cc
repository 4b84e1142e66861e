#include "common/io/record_index.h"

#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/io/tfrecord.h"
#include "gtest/gtest.h"

namespace bertps {
namespace io {
namespace {

namespace fs = std::filesystem;

class RecordIndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/",
                        ::testing::UnitTest::GetInstance()
                            ->current_test_info()
                            ->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ + "/data");
    cache_ = dir_ + "/cache";
  }
  // Writes file `name` with n records "f<file>-r<i>" padded to varying sizes.
  void WriteFile(const std::string& name, int file, int n) {
    auto w = TFRecordWriter::Open(dir_ + "/data/" + name);
    ASSERT_TRUE(w.ok()) << w.status();
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE((*w)->Write(Record(file, i)).ok());
    }
    ASSERT_TRUE((*w)->Close().ok());
  }
  static std::string Record(int file, int i) {
    return absl::StrCat("f", file, "-r", i, std::string(10 + (i * 7) % 50, 'x'));
  }
  std::string dir_, cache_;
};

TEST_F(RecordIndexTest, ReadsEveryPositionInFileOrderAcrossEpochs) {
  WriteFile("a.tfrecord", 0, 5);
  WriteFile("b.tfrecord", 1, 7);
  WriteFile("c.tfrecord", 2, 3);
  auto src = IndexedExampleSource::Open({dir_ + "/data/*.tfrecord"}, cache_);
  ASSERT_TRUE(src.ok()) << src.status();
  ASSERT_EQ((*src)->size(), 15);
  std::vector<std::string> want;
  for (int i = 0; i < 5; ++i) want.push_back(Record(0, i));
  for (int i = 0; i < 7; ++i) want.push_back(Record(1, i));
  for (int i = 0; i < 3; ++i) want.push_back(Record(2, i));
  std::string r;
  for (int64_t p = 0; p < 45; ++p) {  // three epochs, in any order
    const int64_t q = (p * 7) % 45;
    ASSERT_TRUE((*src)->Read(q, &r).ok());
    EXPECT_EQ(r, want[q % 15]) << "position " << q;
  }
  EXPECT_TRUE(fs::exists(dir_ + "/data/b.tfrecord.bertps-index"));
  // A glob matching everything leaves the indices out.
  auto again = IndexedExampleSource::Open({dir_ + "/data/*"}, cache_);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->files().size(), 3u);
}

// A worker reads only its own records: the bytes it reads are exactly its
// records' framed sizes (4 workers over a data set 20 times the global batch).
TEST_F(RecordIndexTest, AWorkerReadsOnlyItsShare) {
  WriteFile("a.tfrecord", 0, 640);
  const int64_t size = static_cast<int64_t>(fs::file_size(dir_ + "/data/a.tfrecord"));
  auto src = IndexedExampleSource::Open({dir_ + "/data/a.tfrecord"}, cache_);
  ASSERT_TRUE(src.ok());
  const int workers = 4, batch = 8;  // global batch 32; 20 global batches
  std::string r;
  int64_t mine = 0;
  for (int64_t step = 0; step < 20; ++step) {
    for (int e = 0; e < batch; ++e) {
      const int64_t p = (step * workers + 1) * batch + e;  // worker 1
      ASSERT_TRUE((*src)->Read(p, &r).ok());
      mine += 12 + static_cast<int64_t>(r.size()) + 4;
    }
  }
  EXPECT_EQ((*src)->bytes_read(), mine);
  EXPECT_EQ((*src)->records_read(), 160);
  EXPECT_LT((*src)->bytes_read(), size * 3 / 10);  // about a quarter
  // Joining at a late step reads nothing before its first record.
  auto late = IndexedExampleSource::Open({dir_ + "/data/a.tfrecord"}, cache_);
  ASSERT_TRUE((*late)->Read(639, &r).ok());
  EXPECT_EQ((*late)->records_read(), 1);
  EXPECT_EQ(r, Record(0, 639));
}

TEST_F(RecordIndexTest, AStaleOrCorruptIndexIsRebuiltNeverTrusted) {
  WriteFile("a.tfrecord", 0, 10);
  const std::string f = dir_ + "/data/a.tfrecord";
  IndexSource how;
  auto i1 = LoadOrBuildRecordIndex(f, cache_, &how);
  ASSERT_TRUE(i1.ok()) << i1.status();
  EXPECT_EQ(how, IndexSource::kBuilt);
  EXPECT_EQ(i1->offsets.size(), 10u);
  auto i2 = LoadOrBuildRecordIndex(f, cache_, &how);
  ASSERT_TRUE(i2.ok());
  EXPECT_EQ(how, IndexSource::kLoaded);
  EXPECT_EQ(i2->offsets, i1->offsets);
  // The file is written again with other records: stale, rebuilt.
  WriteFile("a.tfrecord", 0, 13);
  auto i3 = LoadOrBuildRecordIndex(f, cache_, &how);
  ASSERT_TRUE(i3.ok());
  EXPECT_EQ(how, IndexSource::kBuilt);
  EXPECT_EQ(i3->offsets.size(), 13u);
  // A corrupt index (one byte flipped): rebuilt.
  {
    std::fstream io(f + kRecordIndexSuffix,
                    std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(40);
    io.put('\x7f');
  }
  auto i4 = LoadOrBuildRecordIndex(f, cache_, &how);
  ASSERT_TRUE(i4.ok());
  EXPECT_EQ(how, IndexSource::kBuilt);
  EXPECT_EQ(i4->offsets, i3->offsets);
  EXPECT_EQ(DecodeRecordIndex("BPSIDX1\nshort", "x").status().code(),
            absl::StatusCode::kDataLoss);
  // An index kept in the cache (as for a read-only data directory) is used.
  const std::string cached = CachedIndexPath(f, cache_);
  fs::create_directories(cache_);
  fs::rename(f + kRecordIndexSuffix, cached);
  auto i5 = LoadOrBuildRecordIndex(f, cache_, &how);
  ASSERT_TRUE(i5.ok());
  EXPECT_EQ(how, IndexSource::kLoaded);
  EXPECT_EQ(i5->offsets, i3->offsets);
}

int OpenDescriptors() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (readdir(d) != nullptr) ++n;
  closedir(d);
  return n - 3;  // ".", "..", the directory's own
}

// RLIMIT_NOFILE's soft limit set to `soft` for the object's life.
class ScopedDescriptorLimit {
 public:
  explicit ScopedDescriptorLimit(rlim_t soft) {
    getrlimit(RLIMIT_NOFILE, &saved_);
    const rlimit low{soft, saved_.rlim_max};
    ok_ = setrlimit(RLIMIT_NOFILE, &low) == 0;
  }
  ~ScopedDescriptorLimit() { setrlimit(RLIMIT_NOFILE, &saved_); }
  bool ok() const { return ok_; }

 private:
  rlimit saved_{};
  bool ok_ = false;
};

// A data set of more files than the process may have open (the audit: a
// 1,100-file set failed at a limit of 1,024 after 48 steps, one descriptor
// kept per file read): every record of every file reads, shuffled, over two
// epochs, with 20 descriptors to spare.
TEST_F(RecordIndexTest, MoreFilesThanTheDescriptorLimitAllRead) {
  constexpr int kFiles = 300, kPerFile = 2;
  for (int f = 0; f < kFiles; ++f) {
    WriteFile(absl::StrFormat("part-%05d.tfrecord", f), f, kPerFile);
  }
  auto s = IndexedExampleSource::Open({dir_ + "/data/*.tfrecord"}, cache_);
  ASSERT_TRUE(s.ok()) << s.status();
  (*s)->set_shuffle(true, 7);
  ScopedDescriptorLimit limit(static_cast<rlim_t>(OpenDescriptors() + 20));
  ASSERT_TRUE(limit.ok());
  std::vector<int> seen(kFiles * kPerFile, 0);
  std::string record;
  for (int64_t p = 0; p < 2 * kFiles * kPerFile; ++p) {
    absl::Status st = (*s)->Read(p, &record);
    ASSERT_TRUE(st.ok()) << "position " << p << ": " << st;
    int file = -1, i = -1;
    ASSERT_EQ(std::sscanf(record.c_str(), "f%d-r%d", &file, &i), 2) << record;
    ASSERT_EQ(record, Record(file, i));
    ++seen[file * kPerFile + i];
  }
  for (int c : seen) EXPECT_EQ(c, 2);
}

// The bound: never more than max_open_files() open, the least recently read
// closed first, a file read again reopened; a file changed while closed is
// refused when it opens again.
TEST_F(RecordIndexTest, OpenFilesStayWithinTheBound) {
  constexpr int kFiles = 40;
  for (int f = 0; f < kFiles; ++f) {
    WriteFile(absl::StrFormat("part-%05d.tfrecord", f), f, 3);
  }
  auto s = IndexedExampleSource::Open({dir_ + "/data/*.tfrecord"}, cache_);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->max_open_files(), IndexedExampleSource::kDefaultMaxOpenFiles);
  (*s)->set_max_open_files(8);
  const int before = OpenDescriptors();
  std::string record;
  int max_open = 0;
  for (int64_t p = 0; p < 3 * kFiles; ++p) {  // file order: each file once
    ASSERT_TRUE((*s)->Read(p, &record).ok()) << p;
    ASSERT_EQ(record, Record(static_cast<int>(p / 3), static_cast<int>(p % 3)));
    max_open = std::max(max_open, (*s)->open_files());
  }
  EXPECT_EQ(max_open, 8);
  EXPECT_EQ((*s)->files_opened(), kFiles);
  EXPECT_EQ(OpenDescriptors() - before, 8);
  // Files 32..39 are open: reading them opens nothing; file 0 opens again.
  for (int64_t p = 3 * 32; p < 3 * kFiles; ++p) {
    ASSERT_TRUE((*s)->Read(p, &record).ok());
  }
  EXPECT_EQ((*s)->files_opened(), kFiles);
  ASSERT_TRUE((*s)->Read(0, &record).ok());
  EXPECT_EQ((*s)->files_opened(), kFiles + 1);
  // Lowering the bound closes the least recently read.
  (*s)->set_max_open_files(2);
  EXPECT_EQ((*s)->open_files(), 2);
  EXPECT_EQ(OpenDescriptors() - before, 2);
  // File 5 (closed) grows: refused when it is opened again, naming it.
  {
    std::ofstream out(dir_ + "/data/part-00005.tfrecord", std::ios::app);
    out << "more";
  }
  absl::Status st = (*s)->Read(3 * 5, &record);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("part-00005.tfrecord changed"),
            std::string::npos) << st;
  EXPECT_EQ((*s)->open_files(), 1);  // one closed to make room, 5 not kept
  s->reset();
  EXPECT_EQ(OpenDescriptors(), before);
}

TEST(EpochPermutation, IsABijectionDifferentInEveryEpoch) {
  for (int64_t n : {1, 2, 3, 7, 64, 100, 1000, 4097}) {
    std::vector<int64_t> first;
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      EpochPermutation perm(12345, epoch, n);
      std::vector<int> seen(n, 0);
      std::vector<int64_t> order;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t j = perm(i);
        ASSERT_GE(j, 0);
        ASSERT_LT(j, n);
        ++seen[j];
        order.push_back(j);
      }
      for (int64_t j = 0; j < n; ++j) ASSERT_EQ(seen[j], 1) << n;
      // Deterministic: the same (seed, epoch, n), the same order.
      EpochPermutation again(12345, epoch, n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(again(i), order[i]);
      if (epoch == 0) {
        first = order;
      } else if (n >= 7) {
        EXPECT_NE(order, first) << "epoch " << epoch << " of " << n;
      }
    }
    if (n >= 64) {
      // Not the identity, nor close to it; another seed, another order.
      EpochPermutation p(12345, 0, n), q(54321, 0, n);
      int64_t fixed = 0, same = 0;
      for (int64_t i = 0; i < n; ++i) {
        fixed += p(i) == i;
        same += p(i) == q(i);
      }
      EXPECT_LT(fixed, n / 8) << n;
      EXPECT_LT(same, n / 8) << n;
    }
  }
}

// Shuffled: each epoch reads every record once, in a new order, and the
// global batches are the same for 1, 2 and 4 workers (positions map to
// records the same way whoever reads them).
TEST_F(RecordIndexTest, ShuffledEpochsReadEveryRecordOnceInANewOrder) {
  WriteFile("a.tfrecord", 0, 30);
  WriteFile("b.tfrecord", 1, 34);
  std::vector<std::vector<std::string>> epochs;
  for (int workers : {1, 2, 4}) {
    std::vector<std::unique_ptr<IndexedExampleSource>> src;
    for (int w = 0; w < workers; ++w) {
      auto s = IndexedExampleSource::Open({dir_ + "/data/*.tfrecord"}, cache_);
      ASSERT_TRUE(s.ok());
      (*s)->set_shuffle(true, 7);
      src.push_back(std::move(*s));
    }
    const int64_t global = 16, per = global / workers;
    std::vector<std::string> seq;
    for (int64_t step = 0; step < 8; ++step) {  // two epochs of 64
      for (int w = 0; w < workers; ++w) {
        for (int64_t e = 0; e < per; ++e) {
          std::string r;
          ASSERT_TRUE(src[w]->Read((step * workers + w) * per + e, &r).ok());
          seq.push_back(r);
        }
      }
    }
    if (workers == 1) {
      std::vector<std::string> e1(seq.begin(), seq.begin() + 64);
      std::vector<std::string> e2(seq.begin() + 64, seq.end());
      EXPECT_NE(e1, e2);
      std::sort(e1.begin(), e1.end());
      std::sort(e2.begin(), e2.end());
      EXPECT_EQ(e1, e2);
      EXPECT_EQ(std::unique(e1.begin(), e1.end()), e1.end());  // each once
      epochs.push_back(seq);
    } else {
      EXPECT_EQ(seq, epochs[0]) << workers << " workers";
    }
  }
}

// The data a job was submitted with is checked at every open: a resume over
// changed files is refused, naming the difference.
TEST_F(RecordIndexTest, DataChangedSinceSubmitIsRefused) {
  WriteFile("a.tfrecord", 0, 6);
  WriteFile("b.tfrecord", 1, 4);
  const std::string a = dir_ + "/data/a.tfrecord", b = dir_ + "/data/b.tfrecord";
  const std::string glob = dir_ + "/data/*.tfrecord";
  std::vector<ExpectedFile> plan = {
      {a, static_cast<int64_t>(fs::file_size(a)), 6},
      {b, static_cast<int64_t>(fs::file_size(b)), 4}};
  auto src = IndexedExampleSource::Open({glob}, cache_, plan);
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ((*src)->size(), 10);
  WriteFile("b.tfrecord", 1, 5);  // one more record
  src = IndexedExampleSource::Open({glob}, cache_, plan);
  ASSERT_FALSE(src.ok());
  EXPECT_EQ(src.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(src.status().message().find("b.tfrecord had"), std::string::npos)
      << src.status();
  EXPECT_NE(src.status().message().find("data changed since the job was "
                                        "submitted"),
            std::string::npos);
  WriteFile("b.tfrecord", 1, 4);
  WriteFile("c.tfrecord", 2, 1);  // a new file
  src = IndexedExampleSource::Open({glob}, cache_, plan);
  ASSERT_FALSE(src.ok());
  EXPECT_NE(src.status().message().find("c.tfrecord was not among its 2"),
            std::string::npos) << src.status();
  fs::remove(dir_ + "/data/c.tfrecord");
  fs::remove(b);  // a file gone
  src = IndexedExampleSource::Open({glob}, cache_, plan);
  ASSERT_FALSE(src.ok());
  EXPECT_NE(src.status().message().find("b.tfrecord is gone"),
            std::string::npos) << src.status();
}

TEST_F(RecordIndexTest, BadDataGivesClearErrors) {
  WriteFile("a.tfrecord", 0, 4);
  const std::string f = dir_ + "/data/a.tfrecord";
  const auto size = fs::file_size(f);
  // A truncated file: the record cut short is named by file and offset.
  fs::copy_file(f, dir_ + "/data/b.tfrecord");
  fs::resize_file(dir_ + "/data/b.tfrecord", size - 3);
  auto src = IndexedExampleSource::Open({dir_ + "/data/*.tfrecord"}, cache_);
  ASSERT_FALSE(src.ok());
  EXPECT_EQ(src.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(src.status().message().find("b.tfrecord at offset"),
            std::string::npos) << src.status();
  fs::remove(dir_ + "/data/b.tfrecord");
  // An empty file alone: no record.
  { std::ofstream(dir_ + "/data/empty.tfrecord"); }
  src = IndexedExampleSource::Open({dir_ + "/data/empty.tfrecord"}, cache_);
  ASSERT_FALSE(src.ok());
  EXPECT_NE(src.status().message().find("empty"), std::string::npos);
  // A glob that matches nothing.
  src = IndexedExampleSource::Open({dir_ + "/data/*.none"}, cache_);
  ASSERT_FALSE(src.ok());
  EXPECT_NE(src.status().message().find("matches no files"), std::string::npos);
  // A file changed under a running job: refused, not read at stale offsets.
  src = IndexedExampleSource::Open({f}, cache_);
  ASSERT_TRUE(src.ok());
  fs::resize_file(f, size - 20);
  std::string r;
  absl::Status st = (*src)->Read(3, &r);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("changed"), std::string::npos) << st;
  // A corrupt record: DataLoss naming file and offset.
  WriteFile("c.tfrecord", 0, 4);
  const std::string c = dir_ + "/data/c.tfrecord";
  src = IndexedExampleSource::Open({c}, cache_);
  ASSERT_TRUE(src.ok());
  {
    std::fstream io(c, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(14);  // inside record 0's data
    io.put('!');
  }
  st = (*src)->Read(0, &r);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("c.tfrecord at offset 0: data CRC"),
            std::string::npos) << st;
}

}  // namespace
}  // namespace io
}  // namespace bertps
