#include "common/io/tfrecord.h"

#include <unistd.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/io/crc32c.h"
#include "common/io/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bertps {
namespace io {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

void WriteRecords(const std::string& path,
                  const std::vector<std::string>& records) {
  auto w = TFRecordWriter::Open(path);
  ASSERT_TRUE(w.ok()) << w.status();
  for (const auto& r : records) ASSERT_TRUE((*w)->Write(r).ok());
  ASSERT_TRUE((*w)->Close().ok());
}

// Reads all records; returns the first error, if any.
absl::Status ReadAll(const std::string& path, std::vector<std::string>* out) {
  auto r = TFRecordReader::Open(path);
  if (!r.ok()) return r.status();
  std::string rec;
  while (true) {
    absl::StatusOr<bool> more = (*r)->Next(&rec);
    if (!more.ok()) return more.status();
    if (!*more) return absl::OkStatus();
    out->push_back(rec);
  }
}

void WriteRaw(const std::string& path, const std::string& bytes) {
  ASSERT_TRUE(WriteFileAtomically(path, bytes).ok());
}

std::string ReadRaw(const std::string& path) { return *ReadFileToString(path); }

TEST(TFRecordTest, KnownBytes) {
  // Record "abc": length 3, masked CRC-32C of the length bytes, data, masked
  // CRC-32C of the data (computed independently).
  const std::string path = TempPath("abc.tfrecord");
  WriteRecords(path, {"abc"});
  const std::string expected(
      "\x03\x00\x00\x00\x00\x00\x00\x00"
      "\xb0\x99\x49\x0e"
      "abc"
      "\x6e\x57\xf1\x21",
      19);
  EXPECT_EQ(ReadRaw(path), expected);
}

TEST(TFRecordTest, RoundTripIncludingEmptyAndLargeRecords) {
  std::mt19937 rng(11);
  std::vector<std::string> records = {"", "x", std::string(3 << 20, '\0'), "",
                                      "tail"};
  for (auto& c : records[2]) c = static_cast<char>(rng());
  for (int i = 0; i < 2000; ++i) {
    std::string r(rng() % 3000, '\0');
    for (auto& c : r) c = static_cast<char>(rng());
    records.push_back(std::move(r));
  }
  const std::string path = TempPath("roundtrip.tfrecord");
  auto w = TFRecordWriter::Open(path);
  ASSERT_TRUE(w.ok());
  for (const auto& r : records) ASSERT_TRUE((*w)->Write(r).ok());
  // Not visible under the final name before Close.
  EXPECT_NE(access(path.c_str(), F_OK), 0);
  EXPECT_EQ(access((path + ".tmp").c_str(), F_OK), 0);
  ASSERT_TRUE((*w)->Close().ok());
  ASSERT_TRUE((*w)->Close().ok());  // Idempotent.
  EXPECT_EQ(access(path.c_str(), F_OK), 0);
  EXPECT_NE(access((path + ".tmp").c_str(), F_OK), 0);
  EXPECT_EQ((*w)->num_records(), static_cast<int64_t>(records.size()));

  std::vector<std::string> back;
  ASSERT_TRUE(ReadAll(path, &back).ok());
  ASSERT_EQ(back.size(), records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    ASSERT_EQ(back[i], records[i]) << i;
  }
  EXPECT_EQ(static_cast<int64_t>(ReadRaw(path).size()), (*w)->num_bytes());
}

TEST(TFRecordTest, OffsetAdvancesByFramedSize) {
  const std::string path = TempPath("offsets.tfrecord");
  WriteRecords(path, {"ab", "", "cdef"});
  auto r = TFRecordReader::Open(path);
  ASSERT_TRUE(r.ok());
  std::string rec;
  EXPECT_EQ((*r)->offset(), 0);
  EXPECT_TRUE(*(*r)->Next(&rec));
  EXPECT_EQ((*r)->offset(), 18);
  EXPECT_TRUE(*(*r)->Next(&rec));
  EXPECT_EQ((*r)->offset(), 34);
  EXPECT_TRUE(*(*r)->Next(&rec));
  EXPECT_EQ(rec, "cdef");
  EXPECT_EQ((*r)->offset(), 54);
  EXPECT_FALSE(*(*r)->Next(&rec));
  EXPECT_FALSE(*(*r)->Next(&rec));
}

TEST(TFRecordTest, EmptyFileIsCleanEof) {
  const std::string path = TempPath("empty.tfrecord");
  WriteRecords(path, {});
  std::vector<std::string> back;
  EXPECT_TRUE(ReadAll(path, &back).ok());
  EXPECT_TRUE(back.empty());
}

TEST(TFRecordTest, WriterWithoutCloseLeavesNothing) {
  const std::string path = TempPath("abandoned.tfrecord");
  {
    auto w = TFRecordWriter::Open(path);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Write("data").ok());
  }
  EXPECT_NE(access(path.c_str(), F_OK), 0);
  EXPECT_NE(access((path + ".tmp").c_str(), F_OK), 0);
}

// Counting reads the framing only; a bad length CRC or a record cut short is
// DataLoss naming the file and the offset; only regular files.
TEST(TFRecordTest, CountFromTheFraming) {
  const std::string path = TempPath("count.tfrecord");
  std::vector<std::string> records;
  for (int i = 0; i < 50; ++i) records.push_back(std::string(i * 7, 'x'));
  WriteRecords(path, records);
  auto n = CountTFRecords(path);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 50);
  WriteRecords(TempPath("empty.tfrecord"), {});
  EXPECT_EQ(*CountTFRecords(TempPath("empty.tfrecord")), 0);
  // Cut inside the last record's data.
  ASSERT_EQ(truncate(path.c_str(), 16 * 50 + 7 * 49 * 50 / 2 - 3), 0);
  auto cut = CountTFRecords(path);
  ASSERT_FALSE(cut.ok());
  EXPECT_TRUE(absl::IsDataLoss(cut.status())) << cut.status();
  EXPECT_NE(cut.status().message().find(path + " at offset "),
            std::string::npos)
      << cut.status();
  EXPECT_NE(cut.status().message().find("cut short"), std::string::npos);
  // A flipped length CRC.
  WriteRecords(path, {"abc", "defg"});
  {
    FILE* f = fopen(path.c_str(), "r+b");
    fseek(f, 16 + 3 + 9, SEEK_SET);
    fputc(0x5a, f);
    fclose(f);
  }
  auto bad = CountTFRecords(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("at offset 19: length CRC mismatch"),
            std::string::npos)
      << bad.status();
  EXPECT_FALSE(CountTFRecords("/dev/zero").ok());
}

TEST(TFRecordTest, OpenErrors) {
  EXPECT_TRUE(
      absl::IsNotFound(TFRecordReader::Open(TempPath("missing")).status()));
  EXPECT_FALSE(TFRecordWriter::Open(TempPath("no/such/dir/x")).ok());
}

// --- Corruption. Three records: "first" at 0 (21 bytes), "second" at 21
// (22 bytes), "third" at 43. Damage to the second must name offset 21 after
// the first record is returned intact.

class TFRecordCorruptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = TempPath("corrupt.tfrecord");
    WriteRecords(path_, {"first", "second", "third"});
    good_ = ReadRaw(path_);
    ASSERT_EQ(good_.size(), 21u + 22u + 21u);
  }

  // Writes `bytes` and expects: "first", then DataLoss naming offset 21.
  void ExpectErrorAtSecond(const std::string& bytes,
                           const std::string& needle) {
    WriteRaw(path_, bytes);
    auto r = TFRecordReader::Open(path_);
    ASSERT_TRUE(r.ok());
    std::string rec;
    auto first = (*r)->Next(&rec);
    ASSERT_TRUE(first.ok() && *first);
    EXPECT_EQ(rec, "first");
    auto second = (*r)->Next(&rec);
    ASSERT_FALSE(second.ok());
    const absl::Status s = second.status();
    EXPECT_TRUE(absl::IsDataLoss(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr(path_));
    EXPECT_THAT(s.message(), HasSubstr("byte offset 21"));
    EXPECT_THAT(s.message(), HasSubstr(needle));
    // The error sticks.
    EXPECT_EQ((*r)->Next(&rec).status(), s);
  }

  std::string Flip(size_t pos) const {
    std::string b = good_;
    b[pos] ^= 0x01;
    return b;
  }

  std::string path_;
  std::string good_;
};

TEST_F(TFRecordCorruptionTest, FlippedLengthByte) {
  ExpectErrorAtSecond(Flip(21 + 0), "length CRC");
}

TEST_F(TFRecordCorruptionTest, FlippedLengthCrc) {
  ExpectErrorAtSecond(Flip(21 + 9), "length CRC");
}

TEST_F(TFRecordCorruptionTest, FlippedDataByte) {
  ExpectErrorAtSecond(Flip(21 + 12 + 3), "data CRC");
}

TEST_F(TFRecordCorruptionTest, FlippedDataCrc) {
  ExpectErrorAtSecond(Flip(21 + 12 + 6 + 1), "data CRC");
}

TEST_F(TFRecordCorruptionTest, TruncatedMidRecord) {
  ExpectErrorAtSecond(good_.substr(0, 21 + 5), "truncated header");
  ExpectErrorAtSecond(good_.substr(0, 21 + 12 + 2), "truncated data");
  ExpectErrorAtSecond(good_.substr(0, 21 + 12 + 6 + 2), "truncated data CRC");
}

TEST_F(TFRecordCorruptionTest, AbsurdLength) {
  // A length of 1 GB with a valid length CRC.
  std::string bytes = good_.substr(0, 21);
  std::string header(12, '\0');
  const uint64_t len = 1ull << 30;
  std::memcpy(&header[0], &len, 8);
  const uint32_t crc = MaskCrc(Crc32c(header.data(), 8));
  std::memcpy(&header[8], &crc, 4);
  bytes += header + "whatever";
  ExpectErrorAtSecond(bytes, "exceeds the limit");
}

TEST(TFRecordTest, RandomCorruptionNeverCrashes) {
  const std::string path = TempPath("fuzz.tfrecord");
  std::vector<std::string> records;
  for (int i = 0; i < 20; ++i) records.push_back(std::string(i * 7, 'a' + i));
  WriteRecords(path, records);
  const std::string good = ReadRaw(path);
  std::mt19937 rng(9);
  for (int trial = 0; trial < 300; ++trial) {
    std::string b = good;
    b[rng() % b.size()] ^= static_cast<char>(1 + rng() % 255);
    WriteRaw(path, b);
    std::vector<std::string> back;
    const absl::Status s = ReadAll(path, &back);
    // A single flipped byte is always caught by one of the CRCs.
    EXPECT_TRUE(absl::IsDataLoss(s)) << s;
    for (size_t i = 0; i < back.size(); ++i) ASSERT_EQ(back[i], records[i]);
  }
}

}  // namespace
}  // namespace io
}  // namespace bertps
