#include "common/memory_limit.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "common/io/file_util.h"
#include "gtest/gtest.h"

namespace bertps {
namespace {

std::string Root(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  return std::string(t ? t : "/tmp") + "/" + name;
}

void Write(const std::string& path, const std::string& text) {
  ASSERT_TRUE(io::MakeDirs(path.substr(0, path.rfind('/'))).ok());
  std::ofstream(path) << text;
}

TEST(MemoryLimit, CgroupV2LimitBelowTheMachine) {
  const std::string r = Root("v2");
  Write(r + "/proc/meminfo", "MemTotal:       24683548 kB\nMemFree: 1 kB\n");
  Write(r + "/proc/self/cgroup", "0::/kubepods/pod1/c1\n");
  Write(r + "/sys/fs/cgroup/kubepods/pod1/c1/memory.max", "4294967296\n");
  const MemoryLimit m = DetectMemoryLimit(r);
  EXPECT_EQ(m.bytes, int64_t{4} << 30);
  EXPECT_EQ(m.source, "cgroup memory.max");
}

TEST(MemoryLimit, UnlimitedCgroupsFallBackToMemTotal) {
  const std::string r = Root("v1");
  Write(r + "/proc/meminfo", "MemTotal:       24683548 kB\n");
  Write(r + "/proc/self/cgroup", "4:memory:/process_api/x\n0::/\n");
  Write(r + "/sys/fs/cgroup/memory/memory.limit_in_bytes",
        "9223372036854771712\n");
  Write(r + "/sys/fs/cgroup/memory.max", "max\n");
  const MemoryLimit m = DetectMemoryLimit(r);
  EXPECT_EQ(m.bytes, int64_t{24683548} * 1024);
  EXPECT_EQ(m.source, "MemTotal");
  Write(r + "/sys/fs/cgroup/memory/memory.limit_in_bytes", "1073741824\n");
  EXPECT_EQ(DetectMemoryLimit(r).bytes, int64_t{1} << 30);
  EXPECT_EQ(DetectMemoryLimit(r).source, "cgroup memory.limit_in_bytes");
}

TEST(MemoryLimit, ThisMachineHasOne) {
  const MemoryLimit m = DetectMemoryLimit();
  EXPECT_GT(m.bytes, int64_t{64} << 20) << m.source;
}

TEST(MemoryLimit, CheckFitsSaysWhy) {
  MemoryLimit m{int64_t{1} << 30, "cgroup memory.max"};
  EXPECT_TRUE(CheckFits("worker 0", 900 << 20, "", m).ok());
  absl::Status st =
      CheckFits("worker 0", int64_t{3} << 30, "batch 64 x seq 128", m);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(st.message(),
            "worker 0 needs ~3.00 GiB (batch 64 x seq 128), over 90% of this "
            "process's limit of 1.00 GiB (cgroup memory.max)");
  EXPECT_TRUE(CheckFits("x", int64_t{1} << 50, "", MemoryLimit{}).ok());
}

}  // namespace
}  // namespace bertps
