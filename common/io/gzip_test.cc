#include "common/io/gzip.h"

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace bertps {
namespace io {
namespace {

std::string Text(int seed, size_t n) {
  std::mt19937 rng(seed);
  std::string s;
  while (s.size() < n) s += absl::StrCat("word", rng() % 50, " ");
  s.resize(n);
  return s;
}

std::string WriteTemp(const std::string& name, const std::string& bytes) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/", name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// Reads the whole file through a GzipFileReader in pieces of `step`.
absl::StatusOr<std::string> ReadAll(const std::string& path, size_t step,
                                    std::vector<GzipFileReader::Member>* m) {
  const int fd = open(path.c_str(), O_RDONLY);
  GzipFileReader r(fd, path);
  std::string out, buf(step, '\0');
  absl::Status st;
  while (true) {
    absl::StatusOr<size_t> got = r.Read(buf.data(), step);
    if (!got.ok()) {
      st = got.status();
      break;
    }
    out.append(buf.data(), *got);
    if (*got < step) break;
  }
  if (m != nullptr) *m = r.members();
  close(fd);
  if (!st.ok()) return st;
  return out;
}

TEST(GzipTest, MembersRoundTripAloneAndConcatenated) {
  const std::string a = Text(1, 100000), b = Text(2, 3), c;
  std::string file;
  ASSERT_TRUE(AppendGzipMember(a, &file).ok());
  const size_t second = file.size();
  ASSERT_TRUE(AppendGzipMember(b, &file).ok());
  const size_t third = file.size();
  ASSERT_TRUE(AppendGzipMember(c, &file).ok());
  EXPECT_LT(second, a.size() / 3) << "text compresses";
  EXPECT_EQ(static_cast<unsigned char>(file[0]), 0x1f);
  EXPECT_EQ(static_cast<unsigned char>(file[second]), 0x1f);

  std::string raw;
  ASSERT_TRUE(InflateGzipMembers(file, 1 << 20, "x", &raw).ok());
  EXPECT_EQ(raw, a + b + c);
  // Each member alone.
  ASSERT_TRUE(InflateGzipMembers(absl::string_view(file).substr(second,
                                                                third - second),
                                 1 << 20, "x", &raw)
                  .ok());
  EXPECT_EQ(raw, b);

  for (size_t step : {size_t{1}, size_t{7}, size_t{65536}, size_t{1} << 20}) {
    std::vector<GzipFileReader::Member> members;
    absl::StatusOr<std::string> all =
        ReadAll(WriteTemp("three.gz", file), step, &members);
    ASSERT_TRUE(all.ok()) << all.status();
    EXPECT_EQ(*all, a + b + c) << step;
    ASSERT_EQ(members.size(), 3u) << step;
    EXPECT_EQ(members[0].compressed_offset, 0);
    EXPECT_EQ(members[1].compressed_offset, static_cast<int64_t>(second));
    EXPECT_EQ(members[1].raw_offset, static_cast<int64_t>(a.size()));
    EXPECT_EQ(members[2].compressed_offset, static_cast<int64_t>(third));
    EXPECT_EQ(members[2].raw_offset, static_cast<int64_t>(a.size() + 1 + 2));
  }
}

TEST(GzipTest, EmptyFileIsAnEmptyStream) {
  std::vector<GzipFileReader::Member> members;
  absl::StatusOr<std::string> all = ReadAll(WriteTemp("empty.gz", ""), 64,
                                            &members);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(*all, "");
  EXPECT_TRUE(members.empty());
}

TEST(GzipTest, CorruptDataIsDataLossNamingTheMember) {
  std::string file;
  ASSERT_TRUE(AppendGzipMember(Text(3, 5000), &file).ok());
  const size_t second = file.size();
  ASSERT_TRUE(AppendGzipMember(Text(4, 5000), &file).ok());
  std::string raw;

  std::string flipped = file;
  flipped[second + 30] ^= 0x55;  // inside the second member's deflate data
  absl::Status st = InflateGzipMembers(flipped, 1 << 20, "f.gz block 1", &raw);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_NE(st.message().find("f.gz block 1"), std::string::npos) << st;
  absl::StatusOr<std::string> all = ReadAll(WriteTemp("flip.gz", flipped),
                                            4096, nullptr);
  EXPECT_EQ(all.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(all.status().message().find(
                absl::StrCat("compressed offset ", second)),
            std::string::npos)
      << all.status();

  // The CRC-32 in a member's trailer.
  std::string bad_crc = file;
  bad_crc[file.size() - 6] ^= 1;
  st = InflateGzipMembers(bad_crc, 1 << 20, "x", &raw);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;

  const std::string cut = file.substr(0, file.size() - 3);
  st = InflateGzipMembers(cut, 1 << 20, "x", &raw);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_NE(st.message().find("cut short"), std::string::npos) << st;
  all = ReadAll(WriteTemp("cut.gz", cut), 4096, nullptr);
  EXPECT_EQ(all.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(all.status().message().find("cut short"), std::string::npos)
      << all.status();

  all = ReadAll(WriteTemp("plain.gz", "not gzip at all"), 4096, nullptr);
  EXPECT_EQ(all.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(all.status().message().find("not gzip"), std::string::npos)
      << all.status();
  all = ReadAll(WriteTemp("trailing.gz", file + "junk"), 4096, nullptr);
  EXPECT_EQ(all.status().code(), absl::StatusCode::kDataLoss) << all.status();

  st = InflateGzipMembers(file, 9999, "x", &raw);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_NE(st.message().find("more than 9999"), std::string::npos) << st;
}

}  // namespace
}  // namespace io
}  // namespace bertps
