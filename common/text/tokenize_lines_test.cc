#include "common/text/tokenize_lines.h"

#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace bertps::text {
namespace {

std::unique_ptr<FullTokenizer> Tiny() {
  // ids: [UNK]=0 hello=1 world=2 ,=3 !=4 ##s=5
  auto t = FullTokenizer::Create(
      Vocab::FromTokens({"[UNK]", "hello", "world", ",", "!", "##s"}));
  EXPECT_TRUE(t.ok());
  return std::move(t).value();
}

std::string TokenizeText(const std::string& input,
                         TokenizeLinesStats* st = nullptr) {
  auto tok = Tiny();
  std::istringstream in(input);
  std::ostringstream out;
  absl::Status s = TokenizeLines(*tok, in, out, st);
  EXPECT_TRUE(s.ok()) << s;
  return out.str();
}

TEST(TokenizeLinesTest, OneOutputLinePerInputLine) {
  TokenizeLinesStats st;
  EXPECT_EQ(TokenizeText("Hello, world!\n\nworlds xyz\n", &st),
            "1 3 2 4\n\n2 5 0\n");
  EXPECT_EQ(st.lines, 3);
  EXPECT_EQ(st.tokens, 7);
  EXPECT_EQ(st.bytes, 26);
}

TEST(TokenizeLinesTest, LastLineWithoutNewlineAndCrLf) {
  EXPECT_EQ(TokenizeText("hello\r\nworld"), "1\n2\n");
  EXPECT_EQ(TokenizeText(""), "");
  EXPECT_EQ(TokenizeText("\n"), "\n");
  EXPECT_EQ(TokenizeText("   \n"), "\n");
}

TEST(TokenizeLinesTest, LinesAcrossReadChunks) {
  // More than one 1 MiB read, with lines straddling chunk boundaries.
  std::string input, expect;
  for (int i = 0; i < 150000; ++i) {
    input += (i % 3 == 0) ? "hello world!\n" : "worlds\n";
    expect += (i % 3 == 0) ? "1 2 4\n" : "2 5\n";
  }
  input += std::string(3 << 20, 'x');  // one long last line -> [UNK]
  expect += "0\n";
  EXPECT_EQ(TokenizeText(input), expect);
}

}  // namespace
}  // namespace bertps::text
