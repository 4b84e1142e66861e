// GZIP TFRecord files: written in members, read as a stream and by block.
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/io/file_util.h"
#include "common/io/gzip.h"
#include "common/io/tfrecord.h"
#include "gtest/gtest.h"

namespace bertps {
namespace io {
namespace {

std::string TempPath(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "/", name);
}

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

TEST(TFRecordGzipTest, WrittenInMembersAndReadBack) {
  const std::vector<std::string> records = Records(300);
  const std::string gz = TempPath("a.tfrecord.gz"), plain = TempPath("a.tfrecord");
  EXPECT_EQ(CompressionForPath(gz), TFRecordCompression::kGzip);
  EXPECT_EQ(CompressionForPath(plain), TFRecordCompression::kNone);
  Write(gz, records, CompressionForPath(gz));
  Write(plain, records, TFRecordCompression::kNone);

  std::vector<std::string> back;
  ASSERT_TRUE(ReadAll(gz, &back).ok());
  EXPECT_EQ(back, records);
  // Standard gzip: gzip(1) inflates the members into the plain file's bytes.
  const std::string inflated = TempPath("inflated.tfrecord");
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
  const std::string plain = TempPath("b.tfrecord"), gz = TempPath("b.tfrecord.gz");
  Write(plain, Records(100), TFRecordCompression::kNone);
  ASSERT_EQ(std::system(absl::StrCat("gzip -c ", plain, " > ", gz).c_str()), 0);
  absl::StatusOr<TFRecordLayout> layout = ScanTFRecordFile(gz);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->offsets.size(), 100u);
  EXPECT_EQ(layout->block_first, std::vector<int64_t>{0});

  // 66 records of 1 MiB as one gzip member: over kMaxGzipBlockBytes.
  std::string stream;
  {
    const std::string big = TempPath("big.tfrecord");
    Write(big, std::vector<std::string>(66, std::string(1 << 20, 'z')),
          TFRecordCompression::kNone);
    std::string member;
    ASSERT_TRUE(AppendGzipMember(*ReadFileToString(big), &member).ok());
    ASSERT_TRUE(WriteFileAtomically(TempPath("big.tfrecord.gz"), member).ok());
  }
  layout = ScanTFRecordFile(TempPath("big.tfrecord.gz"));
  EXPECT_EQ(layout.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(layout.status().message().find("66 MiB of records in one gzip"),
            std::string::npos)
      << layout.status();
  EXPECT_NE(layout.status().message().find("gunzip"), std::string::npos);
}

TEST(TFRecordGzipTest, CorruptionIsNamed) {
  const std::string gz = TempPath("c.tfrecord.gz");
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
  const std::string liar = TempPath("liar.tfrecord.gz");
  Write(liar, Records(3), TFRecordCompression::kNone);
  st = ScanTFRecordFile(liar).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_NE(st.message().find("not gzip"), std::string::npos) << st;
  // Whole gzip holding a record cut short: the framing says where.
  std::string framed;
  {
    const std::string p = TempPath("d.tfrecord");
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
