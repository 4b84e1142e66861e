#include "common/io/file_util.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace bertps::io {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

TEST(ReadFileToString, ReadsARegularFileWhole) {
  const std::string path = TempPath("whole.txt");
  ASSERT_TRUE(WriteFileAtomically(path, std::string("a\0b", 3)).ok());
  auto data = ReadFileToString(path);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(*data, std::string("a\0b", 3));
  int64_t size = -1;
  auto fd = OpenRegularFile(path, &size);
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_EQ(size, 3);
  close(*fd);
}

// A FIFO is refused at once (no writer: a plain open would block forever).
TEST(ReadFileToString, RefusesAFifoWithoutBlocking) {
  const std::string path = TempPath("fifo");
  unlink(path.c_str());
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  const auto start = std::chrono::steady_clock::now();
  auto data = ReadFileToString(path);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(data.status().message(), path + " is a FIFO, not a regular file");
}

TEST(ReadFileToString, RefusesDevicesAndDirectories) {
  auto zero = ReadFileToString("/dev/zero");
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.status().message(),
            "/dev/zero is a character device, not a regular file");
  const std::string dir = TempPath("adir");
  ASSERT_TRUE(MakeDirs(dir).ok());
  auto d = ReadFileToString(dir);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().message(), dir + " is a directory, not a regular file");
}

TEST(ReadFileToString, RefusesAFileOverTheLimitBeforeReadingIt) {
  const std::string path = TempPath("big.txt");
  ASSERT_TRUE(WriteFileAtomically(path, std::string(1001, 'x')).ok());
  EXPECT_TRUE(ReadFileToString(path, 1001).ok());
  auto data = ReadFileToString(path, 1000);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(data.status().message(),
            path + " is 1001 bytes, over the limit of 1000 bytes for this file");
}

TEST(ReadFileToString, MissingFileIsNotFound) {
  auto data = ReadFileToString(TempPath("no-such-file"));
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace bertps::io
