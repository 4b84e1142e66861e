#include "common/flag_checks.h"

#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bertps {
namespace {

using ::testing::ElementsAre;

TEST(FlagChecks, InRangeValuesPass) {
  FlagChecks c("prog");
  c.Range("threads", 1, 1, 256)
      .Range("threads", 256, 1, 256)
      .RealRange("lr", 1e-4, 0, 1e3)
      .Port("port", 0)
      .Port("port", 65535)
      .Port("metrics_port", -1, /*allow_off=*/true)
      .Require(true, "ps", "unused")
      .Check(absl::OkStatus());
  EXPECT_TRUE(c.ok());
  EXPECT_TRUE(c.errors().empty());
}

TEST(FlagChecks, EveryBadValueIsNamed) {
  FlagChecks c("prog");
  c.Port("port", 99999)
      .Port("metrics_port", -1)
      .Port("health_port", -2, /*allow_off=*/true)
      .Range("member_timeout_s", -5, 1, 86400)
      .Range("batch", 2000000000, 1, 65536)
      .RealRange("lr", std::numeric_limits<double>::quiet_NaN(), 0, 1e3)
      .RealRange("lr", 1e30, 0, 1e3)
      .Require(false, "worker_index", "must be below --num_workers (2)")
      .Check(absl::InvalidArgumentError(
          "--stage_recv_timeout_s: 30s must be at least --rpc_timeout_s, 2m"));
  EXPECT_FALSE(c.ok());
  EXPECT_THAT(
      c.errors(),
      ElementsAre("--port: 99999 is not a port (0 to 65535, 0: any free port)",
                  "--metrics_port: -1 is not a port (0 to 65535, 0: any free "
                  "port)",
                  "--health_port: -2 is not a port (0 to 65535, 0: any free "
                  "port, -1: off)",
                  "--member_timeout_s: -5 is outside [1, 86400]",
                  "--batch: 2000000000 is outside [1, 65536]",
                  "--lr: nan is outside [0, 1000]",
                  "--lr: 1e+30 is outside [0, 1000]",
                  "--worker_index: must be below --num_workers (2)",
                  "--stage_recv_timeout_s: 30s must be at least "
                  "--rpc_timeout_s, 2m"));
  EXPECT_EQ(c.Fail(), 2);
}

}  // namespace
}  // namespace bertps
