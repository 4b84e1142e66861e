#include "common/descriptors.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "gtest/gtest.h"

namespace bertps {
namespace {

TEST(DescriptorsTest, RaisesTheSoftLimitToTheHardOne) {
  rlimit r{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &r), 0);
  // A soft limit below the hard one (as Linux's usual 1024 under 524288).
  const rlim_t soft = r.rlim_max == RLIM_INFINITY ? 128 : std::min<rlim_t>(128, r.rlim_max / 2);
  ASSERT_GT(soft, 16u);
  const rlimit low{soft, r.rlim_max};
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  // At the low limit, opening more fails with EMFILE.
  std::vector<int> fds;
  for (int i = 0; i < 200; ++i) {
    const int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) break;
    fds.push_back(fd);
  }
  EXPECT_LT(fds.size(), soft);
  for (int fd : fds) close(fd);

  const DescriptorLimitChange c = RaiseDescriptorLimit();
  EXPECT_TRUE(c.raised());
  EXPECT_EQ(c.before.soft, static_cast<int64_t>(soft));
  if (r.rlim_max != RLIM_INFINITY) {
    EXPECT_EQ(c.after.soft, static_cast<int64_t>(r.rlim_max));
  }
  EXPECT_GT(c.after.soft, c.before.soft);
  EXPECT_EQ(c.after.hard, c.before.hard);
  fds.clear();
  for (rlim_t i = 0; i < soft + 32; ++i) {
    const int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0) << i;
    fds.push_back(fd);
  }
  for (int fd : fds) close(fd);

  // Already at the hard limit: nothing to do.
  const DescriptorLimitChange again = RaiseDescriptorLimit();
  EXPECT_FALSE(again.raised());
  EXPECT_EQ(again.after.soft, again.before.soft);
}

}  // namespace
}  // namespace bertps
