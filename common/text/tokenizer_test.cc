#include "common/text/tokenizer.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/text/unicode.h"
#include "common/text/test_data.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bertps::text {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// ------------------------------------------------------------- helpers

// Every token the tests below need, for when the real vocab is absent.
const std::vector<std::string>& TinyTokens() {
  static const auto* t = new std::vector<std::string>{
      "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a",     "new",
      "test",  "[",     "]",     "una",   "##ffa",  "##ble", "john",
      "johan", "##son", "'",     "s",     "house",  "hello", ",",
      "world", "!",     "un",    "##aff", "##able"};
  return *t;
}

// The real bert-base-uncased vocab if tools/get_data.sh fetched it.
const FullTokenizer* RealUncased() {
  static const FullTokenizer* tok = [] {
    auto t = FullTokenizer::Create(
        DataDir() + "/vocab/bert-base-uncased-vocab.txt", true);
    return t.ok() ? t->release() : nullptr;
  }();
  return tok;
}

std::unique_ptr<FullTokenizer> Make(std::vector<std::string> tokens,
                                    bool lower = true) {
  auto t = FullTokenizer::Create(Vocab::FromTokens(tokens), lower);
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(t).value();
}

std::vector<std::string> Basic(absl::string_view text, bool lower = true) {
  return BasicTokenizer(lower).Tokenize(text);
}

// ----------------------------------------------------------------- Vocab

TEST(VocabTest, LineNumbersAreIdsAndLinesAreStripped) {
  const Vocab v = Vocab::FromText("a\n b \n\n##c\r\nd");
  ASSERT_EQ(v.size(), 5);
  EXPECT_EQ(v.Find("a"), 0);
  EXPECT_EQ(v.Find("b"), 1);
  EXPECT_EQ(v.Find(""), 2);  // an empty line is a token and takes an id
  EXPECT_EQ(v.Find("##c"), 3);
  EXPECT_EQ(v.FindContinuation("c"), 3);
  EXPECT_EQ(v.Find("d"), 4);  // last line without '\n'
  EXPECT_EQ(v.Find("c"), Vocab::kNotFound);
  EXPECT_EQ(v.token(3), "##c");
  EXPECT_EQ(v.max_token_bytes(), 3u);
  EXPECT_EQ(Vocab::FromText("a\nb\n").size(), 2);
  EXPECT_EQ(Vocab::FromText("").size(), 0);
}

TEST(VocabTest, UnicodeWhitespaceIsStrippedAndBadBytesDropped) {
  // U+3000 and U+00A0 are str.strip() whitespace; \xFF is dropped.
  const Vocab v = Vocab::FromText("\xE3\x80\x80tok\xC2\xA0\nx\xFFy\n");
  EXPECT_EQ(v.Find("tok"), 0);
  EXPECT_EQ(v.Find("xy"), 1);
}

TEST(VocabTest, DuplicateTokenKeepsItsLastId) {
  // load_vocab assigns vocab[token] = index per line: the last one wins.
  const Vocab v = Vocab::FromText("x\ny\nx\n##y\n##y\n");
  EXPECT_EQ(v.size(), 5);
  EXPECT_EQ(v.Find("x"), 2);
  EXPECT_EQ(v.FindContinuation("y"), 4);
  EXPECT_EQ(v.token(0), "x");
  EXPECT_EQ(v.token(2), "x");
  // Single non-ASCII code points (looked up in a direct table) too.
  const Vocab u =
      Vocab::FromText("\u00e9\n##\u4e2d\n\u00e9\n##\u4e2d\n\u4e2d\n\u00e9x\n");
  EXPECT_EQ(u.Find("\u00e9"), 2);
  EXPECT_EQ(u.FindContinuation("\u4e2d"), 3);
  EXPECT_EQ(u.Find("\u4e2d"), 4);
  EXPECT_EQ(u.FindContinuation("\u00e9"), Vocab::kNotFound);
  EXPECT_EQ(u.Find("\u00e9x"), 5);
  EXPECT_EQ(u.Find("\u00ea"), Vocab::kNotFound);
  // Ill-formed or other byte strings never hit the table.
  const Vocab raw = Vocab::FromTokens({"\xC3", "\xC3\xA9", "\xE0\x80\x80"});
  EXPECT_EQ(raw.Find("\xC3"), 0);
  EXPECT_EQ(raw.Find("\xC3\xA9"), 1);
  EXPECT_EQ(raw.Find("\xE0\x80\x80"), 2);
  EXPECT_EQ(raw.Find("\xC3\xA8"), Vocab::kNotFound);
}

TEST(VocabTest, LoadErrors) {
  auto missing = Vocab::Load("/nonexistent/vocab.txt");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  const std::string empty = testing::TempDir() + "/empty_vocab.txt";
  std::ofstream(empty).close();
  EXPECT_EQ(Vocab::Load(empty).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto no_unk = FullTokenizer::Create(Vocab::FromTokens({"a", "b"}));
  EXPECT_EQ(no_unk.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(VocabTest, LoadFile) {
  const std::string path = testing::TempDir() + "/vocab.txt";
  std::ofstream(path) << "[PAD]\n[UNK]\nhello\n";
  auto v = Vocab::Load(path);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->size(), 3);
  EXPECT_EQ(v->Find("hello"), 2);
}

// -------------------------------------------------------- BasicTokenizer

TEST(BasicTokenizerTest, EmptyAndWhitespaceOnly) {
  EXPECT_THAT(Basic(""), IsEmpty());
  EXPECT_THAT(Basic(" \t\r\n  "), IsEmpty());
  EXPECT_THAT(Basic(std::string("\0\x01", 2)), IsEmpty());
}

TEST(BasicTokenizerTest, LowercaseAndPunctuation) {
  EXPECT_THAT(Basic(" \tHeLLo!how  \n Are yoU?  "),
              ElementsAre("hello", "!", "how", "are", "you", "?"));
  EXPECT_THAT(Basic("John Johanson's house"),
              ElementsAre("john", "johanson", "'", "s", "house"));
  EXPECT_THAT(Basic("HeLLo", false), ElementsAre("HeLLo"));
  // ASCII symbols are punctuation too: $ + < = > ^ ` | ~ ...
  EXPECT_THAT(Basic("a$b+c<d=e>f^g`h|i~j"),
              ElementsAre("a", "$", "b", "+", "c", "<", "d", "=", "e", ">", "f",
                          "^", "g", "`", "h", "|", "i", "~", "j"));
  EXPECT_THAT(Basic("...a"), ElementsAre(".", ".", ".", "a"));
}

TEST(BasicTokenizerTest, UnicodePunctuationButNotSymbols) {
  EXPECT_THAT(Basic("x\u2014y \u00abq\u00bb"),
              ElementsAre("x", "\u2014", "y", "\u00ab", "q", "\u00bb"));
  EXPECT_THAT(Basic("a\u00a9b c\u20acd"), ElementsAre("a\u00a9b", "c\u20acd"));
  EXPECT_THAT(Basic("\u201cHi\u201d", false),
              ElementsAre("\u201c", "Hi", "\u201d"));
}

TEST(BasicTokenizerTest, EveryAsciiCharacterAsBetweenTwoLetters) {
  for (int c = 0; c < 128; ++c) {
    const std::string text = std::string("a") + static_cast<char>(c) + "b";
    const std::vector<std::string> got = Basic(text, false);
    switch (ClassifyChar(c)) {
      case CharClass::kDrop:
        EXPECT_THAT(got, ElementsAre("ab")) << c;
        break;
      case CharClass::kSpace:
        EXPECT_THAT(got, ElementsAre("a", "b")) << c;
        break;
      default:
        if (IsPunctuation(c)) {
          EXPECT_THAT(got, ElementsAre("a", std::string(1, c), "b")) << c;
        } else {
          EXPECT_THAT(got, ElementsAre(text)) << c;
        }
    }
  }
}

TEST(BasicTokenizerTest, ControlCharactersAreDroppedNotSpaces) {
  EXPECT_THAT(Basic("a\x01"
                    "b a\vb a\fb"),
              ElementsAre("ab", "ab", "ab"));
  EXPECT_THAT(Basic(std::string("a\0b", 3)), ElementsAre("ab"));
  EXPECT_THAT(Basic("a\u200bb a\u00adb a\ufeffb a\u0085b a\ufffdb"),
              ElementsAre("ab", "ab", "ab", "ab", "ab"));
  EXPECT_THAT(Basic("a\tb\nc\rd e"), ElementsAre("a", "b", "c", "d", "e"));
  // Zs and the str.split() separators U+2028/U+2029.
  EXPECT_THAT(Basic("a\u00a0b\u3000c\u2028d\u2029e"),
              ElementsAre("a", "b", "c", "d", "e"));
}

TEST(BasicTokenizerTest, CjkIdeographsAreWordsOfTheirOwn) {
  EXPECT_THAT(Basic("ab\u4e2d\u6587cd"),
              ElementsAre("ab", "\u4e2d", "\u6587", "cd"));
  EXPECT_THAT(Basic("\U00020000x"), ElementsAre("\U00020000", "x"));
  // Hiragana and Hangul are not padded.
  EXPECT_THAT(Basic("\u3053\u3093\u306b\u3061\u306f", false),
              ElementsAre("\u3053\u3093\u306b\u3061\u306f"));
  // Lowercasing decomposes Hangul syllables into jamo (NFD).
  EXPECT_THAT(Basic("\ud55c", true), ElementsAre("\u1112\u1161\u11ab"));
  EXPECT_THAT(Basic("\ud55c", false), ElementsAre("\ud55c"));
  // A compatibility ideograph is padded, then NFD maps it to U+8C48.
  EXPECT_THAT(Basic("a\uf900b"), ElementsAre("a", "\u8c48", "b"));
}

TEST(BasicTokenizerTest, AccentsStrippedOnlyWhenLowercasing) {
  EXPECT_THAT(Basic("H\u00e9llo \u00c7a NA\u00cfVE"),
              ElementsAre("hello", "ca", "naive"));
  EXPECT_THAT(Basic("H\u00e9llo \u00c7a", false),
              ElementsAre("H\u00e9llo", "\u00c7a"));
  // Decomposed input: the combining mark goes too.
  EXPECT_THAT(Basic("e\u0301t\u00e9"), ElementsAre("ete"));
  // Mc marks stay; a lone Mn word vanishes.
  EXPECT_THAT(Basic("\u0915\u093e \u0301"), ElementsAre("\u0915\u093e"));
}

TEST(BasicTokenizerTest, PythonLowerSpecialCases) {
  // 'İ'.lower() is 'i̇'; the dot is then stripped as an accent.
  EXPECT_THAT(Basic("\u0130STANBUL"), ElementsAre("istanbul"));
  // Final sigma, within each whitespace-separated word.
  EXPECT_THAT(Basic("\u039f\u0394\u039f\u03a3 \u03a3\u0391"),
              ElementsAre("\u03bf\u03b4\u03bf\u03c2", "\u03c3\u03b1"));
  // The word includes its punctuation: 'ΑΣ.Β' keeps a medial sigma.
  EXPECT_THAT(Basic("\u0391\u03a3.\u0392"),
              ElementsAre("\u03b1\u03c3", ".", "\u03b2"));
  // Accent stripping can create ASCII punctuation: U+1FEF GREEK VARIA
  // decomposes to '`', which is then split off.
  EXPECT_THAT(Basic("x\u1fefy"), ElementsAre("x", "`", "y"));
  EXPECT_THAT(Basic("x\u1fefy", false), ElementsAre("x\u1fefy"));
}

TEST(BasicTokenizerTest, InvalidUtf8BytesAreDropped) {
  EXPECT_THAT(Basic("a\xff"
                    "b"),
              ElementsAre("ab"));
  EXPECT_THAT(Basic("caf\xc3 x"), ElementsAre("caf", "x"));
  EXPECT_THAT(Basic("\xed\xa0\x80x \xc0\xafy"), ElementsAre("x", "y"));
  EXPECT_THAT(Basic("\xe2\x82 \xe2\x82\xe2\x82\xac", false),
              ElementsAre("\u20ac"));
  EXPECT_THAT(Basic("\x80\x81\xfe"), IsEmpty());
}

TEST(BasicTokenizerTest, ArbitraryBytesNeverCrashAndGiveValidUtf8) {
  std::mt19937 rng(7);
  const BasicTokenizer lower(true), cased(false);
  for (int iter = 0; iter < 20000; ++iter) {
    std::string s(rng() % 24, '\0');
    for (char& c : s) {
      // Bias towards the interesting bytes.
      const uint32_t r = rng();
      c = static_cast<char>((r & 3) == 0   ? 0x80 | (r >> 8 & 0x3F)
                            : (r & 3) == 1 ? 0xC0 | (r >> 8 & 0x3F)
                                           : r >> 8);
    }
    for (const BasicTokenizer* t : {&lower, &cased}) {
      t->ForEachToken(s, [&](absl::string_view tok) {
        ASSERT_FALSE(tok.empty());
        for (size_t i = 0; i < tok.size();) {
          const char32_t cp = DecodeUtf8(tok, &i);
          ASSERT_NE(cp, kInvalidCodePoint);
          ASSERT_NE(ClassifyChar(cp), CharClass::kSpace);
          ASSERT_NE(ClassifyChar(cp), CharClass::kDrop);
        }
      });
    }
  }
}

// The BasicTokenizer algorithm written plainly from unicode.h, code point by
// code point, with no table and no fast path: the reference that the
// tokenizer's per-code-point table and fast paths must reproduce.
std::vector<std::string> ReferenceBasic(absl::string_view text, bool lower) {
  std::vector<std::vector<char32_t>> words(1);
  for (size_t i = 0; i < text.size();) {
    const char32_t cp = DecodeUtf8(text, &i);
    if (cp == kInvalidCodePoint) continue;
    switch (ClassifyChar(cp)) {
      case CharClass::kDrop:
        break;
      case CharClass::kSpace:
        words.emplace_back();
        break;
      case CharClass::kCjk:
        words.push_back({cp});
        words.emplace_back();
        break;
      case CharClass::kOther:
        words.back().push_back(cp);
    }
  }
  std::vector<std::string> out;
  for (const std::vector<char32_t>& w : words) {
    std::vector<char32_t> cps = w;
    if (lower) {
      std::vector<char32_t> lowered, nfd;
      PythonLower(w, &lowered);
      Nfd(lowered, &nfd);
      cps.clear();
      for (char32_t c : nfd) {
        if (!IsNonspacingMark(c)) cps.push_back(c);
      }
    }
    std::string piece;
    for (char32_t c : cps) {
      if (IsPunctuation(c)) {
        if (!piece.empty()) out.push_back(piece);
        piece.clear();
        AppendUtf8(c, &piece);
        out.push_back(piece);
        piece.clear();
      } else {
        AppendUtf8(c, &piece);
      }
    }
    if (!piece.empty()) out.push_back(piece);
  }
  return out;
}

TEST(BasicTokenizerTest, EveryBmpCodePointAsTheReference) {
  // Each code point alone, between letters, after a capital letter, before
  // a combining mark and next to a capital sigma (context-dependent cases).
  for (char32_t cp = 0x80; cp < 0x10000; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    std::string c;
    AppendUtf8(cp, &c);
    for (const std::string& text :
         {c, "a" + c + "b", "\xC3\x89" + c + "x", c + "\xCC\x81\xCC\xA3",
          "\xCE\xA3" + c, c + "\xCE\xA3", "A" + c + "\xCE\xA3 " + c + c}) {
      for (bool lower : {true, false}) {
        ASSERT_EQ(Basic(text, lower), ReferenceBasic(text, lower))
            << "U+" << std::hex << static_cast<uint32_t>(cp)
            << " lower=" << lower;
      }
    }
  }
}

TEST(BasicTokenizerTest, RandomMixedScriptTextAsTheReference) {
  // Code points from blocks with marks, case pairs, punctuation, Hangul,
  // CJK (and beyond the BMP), plus ASCII and ill-formed bytes.
  const std::vector<std::pair<char32_t, char32_t>> blocks = {
      {0x20, 0x7F},       {0x80, 0x250},      {0x300, 0x370},
      {0x370, 0x530},     {0x590, 0x700},     {0x900, 0xE80},
      {0x1E00, 0x2070},   {0x3000, 0x3100},   {0x4E00, 0x4E40},
      {0xAC00, 0xAC40},   {0xF900, 0xFB50},   {0xFE00, 0x10000},
      {0x1D160, 0x1D170}, {0x1F600, 0x1F650}, {0x20000, 0x20010}};
  std::mt19937 rng(11);
  for (int iter = 0; iter < 20000; ++iter) {
    std::string text;
    for (int n = rng() % 30; n > 0; --n) {
      const auto& [lo, hi] = blocks[rng() % blocks.size()];
      const char32_t cp = lo + rng() % (hi - lo);
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      AppendUtf8(cp, &text);
      if (rng() % 50 == 0) text.push_back(static_cast<char>(0x80 | rng() % 64));
    }
    for (bool lower : {true, false}) {
      ASSERT_EQ(Basic(text, lower), ReferenceBasic(text, lower))
          << text << " lower=" << lower;
    }
  }
}

// ---------------------------------------------------- WordpieceTokenizer

TEST(WordpieceTokenizerTest, GreedyLongestMatchFirst) {
  const Vocab v = Vocab::FromTokens(TinyTokens());
  auto wp = WordpieceTokenizer::Create(&v);
  ASSERT_TRUE(wp.ok());
  // The tokenization.py docstring example, with {un, ##aff, ##able}.
  const Vocab v2 = Vocab::FromTokens({"[UNK]", "un", "##aff", "##able"});
  auto wp2 = WordpieceTokenizer::Create(&v2);
  EXPECT_THAT(wp2->Tokenize("unaffable"), ElementsAre("un", "##aff", "##able"));
  // "una" is longer than "un": taken first when present.
  EXPECT_THAT(wp->Tokenize("unaffable"), ElementsAre("una", "##ffa", "##ble"));
  EXPECT_THAT(wp->Tokenize(" johanson  house\n"),
              ElementsAre("johan", "##son", "house"));
  std::vector<int32_t> ids;
  wp->EncodeWord("johanson", &ids);
  EXPECT_THAT(ids, ElementsAre(v.Find("johan"), v.Find("##son")));
}

TEST(WordpieceTokenizerTest, AnyGapMakesTheWholeWordUnknown) {
  const Vocab v = Vocab::FromTokens(TinyTokens());
  auto wp = WordpieceTokenizer::Create(&v);
  EXPECT_THAT(wp->Tokenize("unaffablez house"), ElementsAre("[UNK]", "house"));
  EXPECT_THAT(wp->Tokenize("zjohan"), ElementsAre("[UNK]"));
  std::vector<int32_t> ids = {42};
  wp->EncodeWord("johanz", &ids);  // partial pieces are rolled back
  EXPECT_THAT(ids, ElementsAre(42, v.Find("[UNK]")));
  ids.clear();
  wp->EncodeWord("", &ids);
  EXPECT_THAT(ids, IsEmpty());
}

TEST(WordpieceTokenizerTest, WordsOverTheLimitAreUnknown) {
  const Vocab v =
      Vocab::FromTokens({"[UNK]", "a", "##a", "\u00e9", "##\u00e9"});
  auto wp = WordpieceTokenizer::Create(&v);
  EXPECT_EQ(wp->Tokenize(std::string(200, 'a')).size(), 200u);
  EXPECT_THAT(wp->Tokenize(std::string(201, 'a')), ElementsAre("[UNK]"));
  // The limit counts code points, not bytes: 150 x U+00E9 is 300 bytes.
  std::string e150;
  for (int i = 0; i < 150; ++i) e150 += "\u00e9";
  EXPECT_EQ(wp->Tokenize(e150).size(), 150u);
  std::string e201 = e150;
  for (int i = 0; i < 51; ++i) e201 += "\u00e9";
  EXPECT_THAT(wp->Tokenize(e201), ElementsAre("[UNK]"));
  // A custom limit.
  auto wp3 = WordpieceTokenizer::Create(&v, "[UNK]", 3);
  EXPECT_THAT(wp3->Tokenize("aaa aaaa"),
              ElementsAre("a", "##a", "##a", "[UNK]"));
}

TEST(WordpieceTokenizerTest, MultiByteCandidatesEndOnCodePoints) {
  // Only whole-code-point prefixes are tried: "\u00e9" is 2 bytes and the
  // vocab holds a token that is its first byte.
  const Vocab v = Vocab::FromTokens(
      {"[UNK]", std::string("\xc3"), "x\u00e9", "##\u00e9", "x"});
  auto wp = WordpieceTokenizer::Create(&v);
  EXPECT_THAT(wp->Tokenize("x\u00e9\u00e9"),
              ElementsAre("x\u00e9", "##\u00e9"));
  EXPECT_THAT(wp->Tokenize("\u00e9"), ElementsAre("[UNK]"));
}

TEST(WordpieceTokenizerTest, LongestMatchAcrossTokenLengths) {
  // Candidates are bounded by the longest token with the same first two
  // bytes; a longer token with other first bytes must not hide a match, and
  // a one-byte token is always tried.
  const Vocab v =
      Vocab::FromTokens({"[UNK]", "abcdefghij", "ab", "x", "##yz", "##y", "##z",
                         "\xD0\xB4", "##\xD0\xB6\xD0\xB8", "##\xD0\xB8"});
  EXPECT_EQ(v.max_token_bytes_from('a', 'b', false), 10u);
  EXPECT_EQ(v.max_token_bytes_from('y', 'z', true), 2u);
  EXPECT_EQ(v.max_token_bytes_from('x', 'y', false), 0u);
  auto wp = WordpieceTokenizer::Create(&v);
  ASSERT_TRUE(wp.ok());
  std::vector<std::string> t;
  wp->TokenizeWord("abcdefghijyz", &t);
  wp->TokenizeWord("abyzy", &t);
  wp->TokenizeWord("xyzz", &t);
  wp->TokenizeWord("\xD0\xB4\xD0\xB6\xD0\xB8\xD0\xB8", &t);
  wp->TokenizeWord("\xD0\xB4\xD0\xB6", &t);
  EXPECT_THAT(t, ElementsAre("abcdefghij", "##yz", "ab", "##yz", "##y", "x",
                             "##yz", "##z", "\xD0\xB4", "##\xD0\xB6\xD0\xB8",
                             "##\xD0\xB8", "[UNK]"));
}

TEST(WordpieceTokenizerTest, UnknownTokenMustBeInVocab) {
  const Vocab v = Vocab::FromTokens({"a"});
  EXPECT_FALSE(WordpieceTokenizer::Create(&v).ok());
  EXPECT_TRUE(WordpieceTokenizer::Create(&v, "a").ok());
}

// --------------------------------------------------------- FullTokenizer

// The BERT README and tokenization.py examples, with the real vocab when
// tools/get_data.sh has fetched it, else with the tiny one.
TEST(FullTokenizerTest, ReadmeExamples) {
  std::unique_ptr<FullTokenizer> tiny = Make(TinyTokens());
  const FullTokenizer* tok = RealUncased() ? RealUncased() : tiny.get();
  if (!RealUncased()) {
    std::printf("note: %s/vocab missing (run tools/get_data.sh); tiny vocab\n",
                DataDir().c_str());
  }
  EXPECT_THAT(tok->Tokenize("unaffable"), ElementsAre("una", "##ffa", "##ble"));
  EXPECT_THAT(tok->Tokenize("John Johanson's house"),
              ElementsAre("john", "johan", "##son", "'", "s", "house"));
  EXPECT_THAT(tok->Tokenize("Hello, World!"),
              ElementsAre("hello", ",", "world", "!"));
  const std::vector<int32_t> ids = tok->Encode("John Johanson's house");
  std::vector<int32_t> expect;
  for (const char* t : {"john", "johan", "##son", "'", "s", "house"}) {
    expect.push_back(tok->vocab().Find(t));
  }
  EXPECT_EQ(ids, expect);
}

TEST(FullTokenizerTest, RealVocabIds) {
  const FullTokenizer* tok = RealUncased();
  if (tok == nullptr) GTEST_FAIL() << "run tools/get_data.sh for the vocab";
  EXPECT_EQ(tok->vocab().size(), 30522);
  EXPECT_THAT(tok->Encode("a new test"), ElementsAre(1037, 2047, 3231));
  EXPECT_THAT(tok->Encode("a new [test]"),
              ElementsAre(1037, 2047, 1031, 3231, 1033));
  // \b and \v are control characters: dropped, so "new" stays whole.
  EXPECT_THAT(tok->Encode("a new\b\v [test]"),
              ElementsAre(1037, 2047, 1031, 3231, 1033));
  // Special tokens in text are plain text: "[", "cl", "##s", "]".
  EXPECT_THAT(tok->Encode("[CLS]"), ElementsAre(1031, 18856, 2015, 1033));
  EXPECT_THAT(tok->Encode(""), IsEmpty());
  // Accents go with lowercasing: "Café" == "cafe".
  EXPECT_EQ(tok->Encode("Caf\u00e9"), tok->Encode("cafe"));
  EXPECT_EQ(tok->Encode("\u4e2d\u6587"),
            std::vector<int32_t>(
                {tok->vocab().Find("\u4e2d"), tok->vocab().Find("\u6587")}));
  EXPECT_THAT(tok->Encode(std::string(201, 'a')), ElementsAre(100));
}

TEST(FullTokenizerTest, CasedKeepsCaseAndAccents) {
  auto tok = Make({"[UNK]", "Caf\u00e9", "caf", "##\u00e9", "!", "Hello"},
                  /*lower=*/false);
  EXPECT_THAT(tok->Tokenize("Caf\u00e9! cafe Hello hello"),
              ElementsAre("Caf\u00e9", "!", "[UNK]", "Hello", "[UNK]"));
  EXPECT_THAT(tok->Encode("caf\u00e9"), ElementsAre(2, 3));
  auto lower = Make({"[UNK]", "Caf\u00e9", "cafe", "##\u00e9", "!"}, true);
  EXPECT_THAT(lower->Tokenize("Caf\u00e9!"), ElementsAre("cafe", "!"));
}

TEST(FullTokenizerTest, EncodeAppendAndTokenizeAgree) {
  auto tok = Make(TinyTokens());
  const std::string text = "Hello, world! unaffable xyz [test] a\u00a0new";
  const std::vector<std::string> toks = tok->Tokenize(text);
  std::vector<int32_t> ids = {7};
  tok->EncodeAppend(text, &ids);
  ASSERT_EQ(ids.size(), toks.size() + 1);
  for (size_t i = 0; i < toks.size(); ++i) {
    EXPECT_EQ(tok->vocab().Find(toks[i]), ids[i + 1]) << toks[i];
  }
}

}  // namespace
}  // namespace bertps::text
