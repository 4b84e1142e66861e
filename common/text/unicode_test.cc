#include "common/text/unicode.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bertps::text {
namespace {

using ::testing::ElementsAre;

std::vector<char32_t> DecodeAll(absl::string_view s) {
  std::vector<char32_t> out;
  for (size_t i = 0; i < s.size();) out.push_back(DecodeUtf8(s, &i));
  return out;
}

constexpr char32_t kBad = kInvalidCodePoint;

TEST(DecodeUtf8Test, WellFormed) {
  EXPECT_THAT(DecodeAll("a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x81"),
              ElementsAre(U'a', 0xE9, 0x20AC, 0x1F601));
  EXPECT_THAT(DecodeAll("\xF4\x8F\xBF\xBF\xEF\xBF\xBD"),
              ElementsAre(0x10FFFF, 0xFFFD));
}

TEST(DecodeUtf8Test, IllFormedBytesAreSkippedOneByOne) {
  // Stray continuation, invalid lead bytes.
  EXPECT_THAT(DecodeAll("\x80\xBF\xC0\xC1\xF5\xFF"),
              ElementsAre(kBad, kBad, kBad, kBad, kBad, kBad));
  // Overlong "/" (C0 AF): both bytes bad.
  EXPECT_THAT(DecodeAll("\xC0\xAFx"), ElementsAre(kBad, kBad, U'x'));
  // Overlong 3-byte (E0 80 80) and surrogate (ED A0 80).
  EXPECT_THAT(DecodeAll("\xE0\x80\x80"), ElementsAre(kBad, kBad, kBad));
  EXPECT_THAT(DecodeAll("\xED\xA0\x80"), ElementsAre(kBad, kBad, kBad));
  // Above U+10FFFF (F4 90 80 80).
  EXPECT_THAT(DecodeAll("\xF4\x90\x80\x80"),
              ElementsAre(kBad, kBad, kBad, kBad));
  // Truncated sequences: the lead byte goes, what follows is decoded anew
  // (what Python's errors="ignore" keeps).
  EXPECT_THAT(DecodeAll("\xE2\x82x"), ElementsAre(kBad, kBad, U'x'));
  EXPECT_THAT(DecodeAll("\xE2\x82\xE2\x82\xAC"),
              ElementsAre(kBad, kBad, 0x20AC));
  EXPECT_THAT(DecodeAll("caf\xC3"), ElementsAre(U'c', U'a', U'f', kBad));
}

TEST(Utf8Test, AppendRoundTripsAndCounts) {
  std::string s;
  for (char32_t cp : {0x24u, 0xA2u, 0x939u, 0x20ACu, 0xD55Cu, 0x10348u}) {
    AppendUtf8(cp, &s);
  }
  EXPECT_EQ(s, "$\xC2\xA2\xE0\xA4\xB9\xE2\x82\xAC\xED\x95\x9C\xF0\x90\x8D\x88");
  EXPECT_THAT(DecodeAll(s),
              ElementsAre(0x24, 0xA2, 0x939, 0x20AC, 0xD55C, 0x10348));
  EXPECT_EQ(CountCodePoints(s), 6u);
}

TEST(ClassifyCharTest, CleaningAndSplitting) {
  EXPECT_EQ(ClassifyChar(0), CharClass::kDrop);
  EXPECT_EQ(ClassifyChar(0xFFFD), CharClass::kDrop);
  EXPECT_EQ(ClassifyChar(0x01), CharClass::kDrop);  // Cc
  EXPECT_EQ(ClassifyChar(0x0B), CharClass::kDrop);  // \v is Cc, not space
  EXPECT_EQ(ClassifyChar(0x0C), CharClass::kDrop);  // \f too
  EXPECT_EQ(ClassifyChar(0x1F), CharClass::kDrop);
  EXPECT_EQ(ClassifyChar(0x7F), CharClass::kDrop);
  EXPECT_EQ(ClassifyChar(0x85), CharClass::kDrop);    // NEL is Cc
  EXPECT_EQ(ClassifyChar(0xAD), CharClass::kDrop);    // soft hyphen, Cf
  EXPECT_EQ(ClassifyChar(0x200B), CharClass::kDrop);  // zero width space, Cf
  EXPECT_EQ(ClassifyChar(0xFEFF), CharClass::kDrop);  // BOM, Cf
  for (char32_t c : {U'\t', U'\n', U'\r', U' '}) {
    EXPECT_EQ(ClassifyChar(c), CharClass::kSpace);
  }
  EXPECT_EQ(ClassifyChar(0xA0), CharClass::kSpace);    // Zs
  EXPECT_EQ(ClassifyChar(0x3000), CharClass::kSpace);  // Zs
  EXPECT_EQ(ClassifyChar(0x2028), CharClass::kSpace);  // Zl: str.split()
  EXPECT_EQ(ClassifyChar(0x2029), CharClass::kSpace);  // Zp: str.split()
  EXPECT_EQ(ClassifyChar(0x4E2D), CharClass::kCjk);
  EXPECT_EQ(ClassifyChar(0x3400), CharClass::kCjk);
  EXPECT_EQ(ClassifyChar(0x20000), CharClass::kCjk);
  EXPECT_EQ(ClassifyChar(0xF900), CharClass::kCjk);
  EXPECT_EQ(ClassifyChar(0xD55C), CharClass::kOther);  // Hangul
  EXPECT_EQ(ClassifyChar(0x3042), CharClass::kOther);  // Hiragana
  EXPECT_EQ(ClassifyChar(U'a'), CharClass::kOther);
  EXPECT_EQ(ClassifyChar(U','), CharClass::kOther);
  EXPECT_EQ(ClassifyChar(0xE000), CharClass::kOther);  // private use
}

TEST(IsPunctuationTest, AsciiRangesAndUnicodeP) {
  std::string ascii;
  for (char32_t c = 0; c < 128; ++c) {
    if (IsPunctuation(c)) ascii.push_back(static_cast<char>(c));
  }
  EXPECT_EQ(ascii, "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~");
  EXPECT_TRUE(IsPunctuation(0x2014));   // em dash, Pd
  EXPECT_TRUE(IsPunctuation(0x201C));   // left double quote, Pi
  EXPECT_TRUE(IsPunctuation(0xAB));     // guillemet, Pi
  EXPECT_TRUE(IsPunctuation(0x3002));   // ideographic full stop, Po
  EXPECT_TRUE(IsPunctuation(0xFF08));   // fullwidth (, Ps
  EXPECT_FALSE(IsPunctuation(0xA9));    // copyright, So
  EXPECT_FALSE(IsPunctuation(0x20AC));  // euro, Sc
  EXPECT_FALSE(IsPunctuation(0xB4));    // acute accent, Sk
  EXPECT_FALSE(IsPunctuation(U'a'));
}

TEST(IsPythonSpaceTest, MatchesStrIsspace) {
  for (char32_t c : {0x09u, 0x0Au, 0x0Bu, 0x0Cu, 0x0Du, 0x1Cu, 0x1Fu, 0x20u,
                     0x85u, 0xA0u, 0x1680u, 0x2000u, 0x200Au, 0x2028u, 0x2029u,
                     0x202Fu, 0x205Fu, 0x3000u}) {
    EXPECT_TRUE(IsPythonSpace(c)) << std::hex << c;
  }
  for (char32_t c : {0x00u, 0x08u, 0x1Bu, 0x21u, 0x200Bu, 0xFEFFu, 0x180Eu}) {
    EXPECT_FALSE(IsPythonSpace(c)) << std::hex << c;
  }
}

std::vector<char32_t> Lower(std::vector<char32_t> in) {
  std::vector<char32_t> out;
  PythonLower(in, &out);
  return out;
}

TEST(PythonLowerTest, SimpleMappingAndDottedI) {
  EXPECT_THAT(Lower({U'A', U'z', 0xC9, 0x410, 0x1C5, 0x2160}),
              ElementsAre(U'a', U'z', 0xE9, 0x430, 0x1C6, 0x2170));
  // str.lower() uses the full mapping: U+0130 -> "i" + COMBINING DOT ABOVE.
  EXPECT_THAT(Lower({0x130, U'S'}), ElementsAre(U'i', 0x307, U's'));
}

TEST(PythonLowerTest, FinalSigma) {
  // 'ΟΔΟΣ'.lower() == 'οδος'; 'Σ'.lower() == 'σ'; 'ΣΑ'.lower() == 'σα'.
  EXPECT_THAT(Lower({0x39F, 0x394, 0x39F, 0x3A3}),
              ElementsAre(0x3BF, 0x3B4, 0x3BF, 0x3C2));
  EXPECT_THAT(Lower({0x3A3}), ElementsAre(0x3C3));
  EXPECT_THAT(Lower({0x3A3, 0x391}), ElementsAre(0x3C3, 0x3B1));
  // Case-ignorable characters are skipped on both sides: 'Α.Σ' -> 'α.ς',
  // 'ΑΣ.Β' -> 'ασ.β', 'ΑΣ,' -> 'ας,', 'ΑΣ1' -> 'ας1'.
  EXPECT_THAT(Lower({0x391, U'.', 0x3A3}), ElementsAre(0x3B1, U'.', 0x3C2));
  EXPECT_THAT(Lower({0x391, 0x3A3, U'.', 0x392}),
              ElementsAre(0x3B1, 0x3C3, U'.', 0x3B2));
  EXPECT_THAT(Lower({0x391, 0x3A3, U','}), ElementsAre(0x3B1, 0x3C2, U','));
  EXPECT_THAT(Lower({0x391, 0x3A3, U'1'}), ElementsAre(0x3B1, 0x3C2, U'1'));
  // Preceded by a non-cased character: plain sigma.
  EXPECT_THAT(Lower({U'1', 0x3A3}), ElementsAre(U'1', 0x3C3));
}

std::vector<char32_t> Decompose(std::vector<char32_t> in) {
  std::vector<char32_t> out;
  Nfd(in, &out);
  return out;
}

TEST(NfdTest, CanonicalDecompositionAndOrdering) {
  EXPECT_THAT(Decompose({U'a', 0xE9}), ElementsAre(U'a', U'e', 0x301));
  // U+1E69 s with dot below and dot above: s + 0323 + 0307.
  EXPECT_THAT(Decompose({0x1E69}), ElementsAre(U's', 0x323, 0x307));
  // Marks out of canonical order are reordered (230 after 220).
  EXPECT_THAT(Decompose({U'a', 0x301, 0x323}), ElementsAre(U'a', 0x323, 0x301));
  // Hangul syllable -> conjoining jamo.
  EXPECT_THAT(Decompose({0xD55C}), ElementsAre(0x1112, 0x1161, 0x11AB));
  // Compatibility-only decompositions are left alone (NFD, not NFKD).
  EXPECT_THAT(Decompose({0xFB01, 0xB2, 0xFF21}),
              ElementsAre(0xFB01, 0xB2, 0xFF21));
  // Singleton canonical decomposition: CJK compatibility ideograph.
  EXPECT_THAT(Decompose({0xF900}), ElementsAre(0x8C48));
  EXPECT_TRUE(IsNonspacingMark(0x301));
  EXPECT_FALSE(IsNonspacingMark(U'e'));
  EXPECT_FALSE(IsNonspacingMark(0x903));  // Mc: kept
}

}  // namespace
}  // namespace bertps::text
