#include "tools/printable.h"

#include "gtest/gtest.h"

namespace bertps {
namespace {

TEST(Printable, KeepsTextAndUnicodeLetters) {
  EXPECT_EQ(Printable("tiny-pretrain 2"), "tiny-pretrain 2");
  EXPECT_EQ(Printable("caf\u00e9 \u4e2d\u6587 \U0001F600"),
            "caf\u00e9 \u4e2d\u6587 \U0001F600");
  EXPECT_EQ(Printable(""), "");
}

TEST(Printable, EscapesWhatCouldForgeLinesOrDriveTheTerminal) {
  EXPECT_EQ(Printable("a\nb\r\tc"), "a\\nb\\r\\tc");
  // ANSI colour, cursor movement, and an OSC 52 clipboard write.
  EXPECT_EQ(Printable("\x1b[31mred\x1b[0m"), "\\e[31mred\\e[0m");
  EXPECT_EQ(Printable("\x1b]52;c;ZXZpbA==\x07"), "\\e]52;c;ZXZpbA==\\x07");
  EXPECT_EQ(Printable(std::string("nul\0x\x7f", 6)), "nul\\x00x\\x7f");
  // C1 controls (a CSI in its 8-bit form), bidi overrides, separators.
  EXPECT_EQ(Printable("\xc2\x9b" "2J"), "\\u009b2J");
  EXPECT_EQ(Printable("abc\u202edcba"), "abc\\u202edcba");
  EXPECT_EQ(Printable("x\u2028y"), "x\\u2028y");
  // Not UTF-8; and the backslash itself, so that escapes are unambiguous.
  EXPECT_EQ(Printable("\xff\xc3("), "\\xff\\xc3(");
  EXPECT_EQ(Printable("a\\nb"), "a\\\\nb");
}

}  // namespace
}  // namespace bertps
