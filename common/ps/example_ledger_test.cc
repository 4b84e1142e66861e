#include "common/ps/example_ledger.h"

#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bertps {
namespace ps {
namespace {

using Ranges = std::vector<std::pair<int64_t, int64_t>>;

TEST(ExampleLedger, RangesMergeAsTheyFillIn) {
  ExampleLedger l;
  // ASP-like: worker 1's batch before worker 0's, then the gap fills.
  EXPECT_EQ(l.Add(8, 8), 0);
  EXPECT_EQ(l.Add(24, 8), 0);
  EXPECT_EQ(l.ranges(), (Ranges{{8, 16}, {24, 32}}));
  EXPECT_EQ(l.Add(0, 8), 0);
  EXPECT_EQ(l.Add(16, 8), 0);
  EXPECT_EQ(l.ranges(), (Ranges{{0, 32}}));
  EXPECT_EQ(l.applied(), 32);
  EXPECT_EQ(l.twice(), 0);
  EXPECT_EQ(l.Covered(4, 12), 8);
  EXPECT_EQ(l.Covered(30, 40), 2);
}

// A batch applied twice is counted, not absorbed (a plain count would show
// the total right when another batch is missing).
TEST(ExampleLedger, DuplicatesAreCounted) {
  ExampleLedger l;
  l.Add(0, 10);
  EXPECT_EQ(l.Add(5, 10), 5);
  EXPECT_EQ(l.Add(0, 20), 15);
  EXPECT_EQ(l.applied(), 20);
  EXPECT_EQ(l.twice(), 20);
  EXPECT_EQ(l.ranges(), (Ranges{{0, 20}}));
}

TEST(ExampleLedger, SerializesAndRefusesGarbage) {
  ExampleLedger l;
  l.Add(0, 10);
  l.Add(20, 5);
  l.Add(3, 2);
  const std::string text = l.Serialize();
  EXPECT_EQ(text, "2;0-10,20-25");
  auto back = ExampleLedger::Parse(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == l);
  EXPECT_EQ(back->applied(), 15);
  EXPECT_TRUE(ExampleLedger::Parse("0;").ok());
  for (const char* bad : {"", "x;0-1", "0;5-3", "0;0-4,2-6", "-1;0-1", "0;0-1;"}) {
    EXPECT_FALSE(ExampleLedger::Parse(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace ps
}  // namespace bertps
