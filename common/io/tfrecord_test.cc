#include "common/io/tfrecord.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/io/crc32c.h"
#include "common/io/file_util.h"
#include "common/io/gzip.h"
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

// GZIP TFRecord files: written in members, read as a stream and by block.
std::vector<std::string> Records(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(absl::StrCat("record ", i, " ", std::string(i % 97, 'x')));
  }
  return out;
}

void Write(const std::string& path, const std::vector<std::string>& records,
           TFRecordCompression c) {
  auto w = TFRecordWriter::Open(path, c);
  ASSERT_TRUE(w.ok()) << w.status();
  for (const std::string& r : records) ASSERT_TRUE((*w)->Write(r).ok());
  ASSERT_TRUE((*w)->Close().ok());
}

TEST(TFRecordGzipTest, WrittenInMembersAndReadBack) {
  const std::vector<std::string> records = Records(300);
  const std::string gz = TempPath("gz-a.tfrecord.gz"), plain = TempPath("gz-a.tfrecord");
  EXPECT_EQ(CompressionForPath(gz), TFRecordCompression::kGzip);
  EXPECT_EQ(CompressionForPath(plain), TFRecordCompression::kNone);
  Write(gz, records, CompressionForPath(gz));
  Write(plain, records, TFRecordCompression::kNone);

  std::vector<std::string> back;
  ASSERT_TRUE(ReadAll(gz, &back).ok());
  EXPECT_EQ(back, records);
  // Standard gzip: gzip(1) inflates the members into the plain file's bytes.
  const std::string inflated = TempPath("gz-inflated.tfrecord");
  ASSERT_EQ(std::system(absl::StrCat("gzip -dc ", gz, " > ", inflated).c_str()),
            0);
  EXPECT_EQ(*ReadFileToString(inflated), *ReadFileToString(plain));
  EXPECT_LT(ReadFileToString(gz)->size(), ReadFileToString(plain)->size() / 2);

  absl::StatusOr<TFRecordLayout> layout = ScanTFRecordFile(gz);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_TRUE(layout->gzip);
  EXPECT_EQ(layout->offsets, *TFRecordOffsets(plain));
  EXPECT_EQ(layout->raw_size,
            static_cast<int64_t>(ReadFileToString(plain)->size()));
  ASSERT_EQ(kGzipMemberRecords, 32);
  ASSERT_EQ(layout->block_first.size(), 10u);  // 300 records, 32 per member
  const std::string file = *ReadFileToString(gz);
  for (size_t b = 0; b < 10; ++b) {
    EXPECT_EQ(layout->block_first[b], static_cast<int64_t>(b) * 32);
    // Each block inflates alone and holds its records.
    const int64_t end =
        b + 1 < 10 ? layout->block_offsets[b + 1]
                  : static_cast<int64_t>(file.size());
    std::string raw, rec;
    ASSERT_TRUE(InflateGzipMembers(
                    absl::string_view(file).substr(
                        layout->block_offsets[b],
                        end - layout->block_offsets[b]),
                    kMaxGzipBlockBytes, "block", &raw)
                    .ok());
    const int64_t base = layout->offsets[layout->block_first[b]];
    for (int64_t r = layout->block_first[b];
         r < std::min<int64_t>(300, layout->block_first[b] + 32); ++r) {
      ASSERT_TRUE(ParseTFRecordAt(raw, layout->offsets[r] - base, "x", &rec)
                      .ok());
      EXPECT_EQ(rec, records[r]);
    }
  }
  EXPECT_EQ(*CountTFRecords(gz), 300);
}

TEST(TFRecordGzipTest, OneStreamIsOneBlockAndTooLargeOneIsRefused) {
  const std::string plain = TempPath("gz-b.tfrecord"), gz = TempPath("gz-b.tfrecord.gz");
  Write(plain, Records(100), TFRecordCompression::kNone);
  ASSERT_EQ(std::system(absl::StrCat("gzip -c ", plain, " > ", gz).c_str()), 0);
  absl::StatusOr<TFRecordLayout> layout = ScanTFRecordFile(gz);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->offsets.size(), 100u);
  EXPECT_EQ(layout->block_first, std::vector<int64_t>{0});

  // 66 records of 1 MiB as one gzip member: over kMaxGzipBlockBytes.
  std::string stream;
  {
    const std::string big = TempPath("gz-big.tfrecord");
    Write(big, std::vector<std::string>(66, std::string(1 << 20, 'z')),
          TFRecordCompression::kNone);
    std::string member;
    ASSERT_TRUE(AppendGzipMember(*ReadFileToString(big), &member).ok());
    ASSERT_TRUE(WriteFileAtomically(TempPath("gz-big.tfrecord.gz"), member).ok());
  }
  layout = ScanTFRecordFile(TempPath("gz-big.tfrecord.gz"));
  EXPECT_EQ(layout.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(layout.status().message().find("66 MiB of records in one gzip"),
            std::string::npos)
      << layout.status();
  EXPECT_NE(layout.status().message().find("gunzip"), std::string::npos);
}

TEST(TFRecordGzipTest, CorruptionIsNamed) {
  const std::string gz = TempPath("gz-c.tfrecord.gz");
  Write(gz, Records(200), TFRecordCompression::kGzip);
  std::string file = *ReadFileToString(gz);
  // A cut file: the stream reader and the scan both say where.
  ASSERT_TRUE(WriteFileAtomically(gz, file.substr(0, file.size() - 10)).ok());
  std::vector<std::string> back;
  absl::Status st = ReadAll(gz, &back);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_NE(st.message().find("cut short"), std::string::npos) << st;
  EXPECT_EQ(ScanTFRecordFile(gz).status().code(), absl::StatusCode::kDataLoss);
  // A plain TFRecord file named .gz.
  const std::string liar = TempPath("gz-liar.tfrecord.gz");
  Write(liar, Records(3), TFRecordCompression::kNone);
  st = ScanTFRecordFile(liar).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_NE(st.message().find("not gzip"), std::string::npos) << st;
  // Whole gzip holding a record cut short: the framing says where.
  std::string framed;
  {
    const std::string p = TempPath("gz-d.tfrecord");
    Write(p, Records(5), TFRecordCompression::kNone);
    const std::string bytes = *ReadFileToString(p);
    ASSERT_TRUE(AppendGzipMember(bytes.substr(0, bytes.size() - 2), &framed)
                    .ok());
  }
  ASSERT_TRUE(WriteFileAtomically(gz, framed).ok());
  st = ScanTFRecordFile(gz).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_NE(st.message().find("at uncompressed offset"), std::string::npos)
      << st;
  back.clear();
  st = ReadAll(gz, &back);
  EXPECT_NE(st.message().find("uncompressed byte offset"), std::string::npos)
      << st;
}

}  // namespace
}  // namespace io
}  // namespace bertps
