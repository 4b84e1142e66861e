#include "common/memory_limit.h"

#include <sys/resource.h>

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

constexpr char kLimits[] =
    "Limit                     Soft Limit           Hard Limit           Units\n"
    "Max cpu time              unlimited            unlimited            seconds\n"
    "Max data size             unlimited            unlimited            bytes\n"
    "Max address space         1073741824           unlimited            bytes\n";

// `ulimit -v` / prlimit --as: the limit counts what the process maps
// before any job; what is left is the job's.
TEST(MemoryLimit, AddressSpaceLimitLessWhatIsMapped) {
  const std::string r = Root("as");
  Write(r + "/proc/meminfo", "MemTotal:       24683548 kB\n");
  Write(r + "/proc/self/cgroup", "0::/\n");
  Write(r + "/proc/self/limits", kLimits);
  Write(r + "/proc/self/status",
        "Name:\tbertps_worker\nVmPeak:\t  400000 kB\nVmSize:\t  307200 kB\n"
        "VmData:\t  102400 kB\n");
  MemoryLimit m = DetectMemoryLimit(r);
  EXPECT_EQ(m.bytes, (int64_t{1024} - 300 - 128) << 20);
  EXPECT_EQ(m.source,
            "RLIMIT_AS 1.00 GiB less 300.0 MiB mapped and 128.0 MiB kept for "
            "thread stacks and allocator arenas");
  // A cgroup below it wins.
  Write(r + "/sys/fs/cgroup/memory.max", "268435456\n");
  m = DetectMemoryLimit(r);
  EXPECT_EQ(m.bytes, int64_t{256} << 20);
  EXPECT_EQ(m.source, "cgroup memory.max");
  Write(r + "/sys/fs/cgroup/memory.max", "max\n");
  // RLIMIT_DATA, against VmData.
  std::string limits = kLimits;
  limits.replace(limits.find("Max data size             unlimited"),
                 std::string("Max data size             unlimited").size(),
                 "Max data size             536870912");
  Write(r + "/proc/self/limits", limits);
  m = DetectMemoryLimit(r);
  EXPECT_EQ(m.bytes, (int64_t{512} - 100 - 128) << 20);
  EXPECT_EQ(m.source.substr(0, 28), "RLIMIT_DATA 512.0 MiB less 1");
  // A limit below what is mapped leaves nothing: every need is refused.
  Write(r + "/proc/self/status", "VmSize:\t 2097152 kB\nVmData:\t 1 kB\n");
  Write(r + "/proc/self/limits", kLimits);
  m = DetectMemoryLimit(r);
  EXPECT_EQ(m.bytes, 1);
  EXPECT_FALSE(CheckFits("worker 0", 1 << 20, "", m).ok());
}

// The real process under setrlimit(RLIMIT_AS).
TEST(MemoryLimit, ThisProcessUnderAnAddressSpaceLimit) {
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_AS, &saved), 0);
  const MemoryLimit before = DetectMemoryLimit();
  std::ifstream status("/proc/self/status");
  std::string line;
  int64_t vm_kb = -1;
  while (std::getline(status, line)) {
    if (line.rfind("VmSize:", 0) == 0) vm_kb = std::atoll(line.c_str() + 7);
  }
  ASSERT_GT(vm_kb, 0);
  const rlimit low{static_cast<rlim_t>((vm_kb << 10) + (int64_t{512} << 20)),
                   saved.rlim_max};
  ASSERT_EQ(setrlimit(RLIMIT_AS, &low), 0);
  const MemoryLimit m = DetectMemoryLimit();
  ASSERT_EQ(setrlimit(RLIMIT_AS, &saved), 0);
  EXPECT_EQ(m.source.substr(0, 10), "RLIMIT_AS ") << m.source;
  // 512 MiB above what was mapped, less the reserve (give or take what the
  // test itself mapped meanwhile).
  EXPECT_NEAR(static_cast<double>(m.bytes), double{384 << 20}, double{16 << 20});
  EXPECT_LT(m.bytes, before.bytes);
  EXPECT_EQ(DetectMemoryLimit().source, before.source);
}

TEST(MemoryLimit, OutOfMemoryErrorNamesTheNeedAndTheLimit) {
  const absl::Status st = OutOfMemoryError(
      "train worker 0", "oneDNN: out of memory", int64_t{3} << 29,
      "batch 8 x seq 128", MemoryLimit{int64_t{1} << 30, "cgroup memory.max"});
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(st.message(),
            "train worker 0 ran out of memory (oneDNN: out of memory): it "
            "needs ~1.50 GiB (batch 8 x seq 128) and this process may use "
            "1.00 GiB (cgroup memory.max); give it more memory or make the "
            "job smaller");
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
