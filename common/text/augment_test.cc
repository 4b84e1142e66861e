#include "common/text/augment.h"

#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/text/unicode.h"
#include "common/text/test_data.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bertps::text {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using ::testing::StartsWith;

// The first n elements of v (all of v if shorter).
std::vector<std::string> Head(std::vector<std::string> v, size_t n) {
  if (v.size() > n) v.resize(n);
  return v;
}

const WordNet* SharedWordNet() {
  static const WordNet* wn = [] {
    auto w = WordNet::Load(WordNetDir());
    if (!w.ok()) {
      std::fprintf(stderr, "%s\n", w.status().ToString().c_str());
      return static_cast<WordNet*>(nullptr);
    }
    return new WordNet(std::move(*w));
  }();
  return wn;
}

// Lines of the package-description corpus (tools/get_data.sh corpus_small).
const std::vector<std::string>* CorpusLines() {
  static const std::vector<std::string>* lines = [] {
    std::ifstream in(DataDir() + "/corpus/small/part-00.txt");
    if (!in) return static_cast<std::vector<std::string>*>(nullptr);
    auto* v = new std::vector<std::string>;
    std::string line;
    while (std::getline(in, line)) v->push_back(line);
    return v;
  }();
  return lines;
}

// The first `count` corpus lines of at least 4 words.
std::vector<std::string> Sentences(size_t count) {
  std::vector<std::string> out;
  for (const std::string& l : *CorpusLines()) {
    if (EdaWords(l).size() >= 4) out.push_back(l);
    if (out.size() == count) break;
  }
  return out;
}

std::string LineContaining(const std::string& needle) {
  for (const std::string& l : *CorpusLines()) {
    if (l.find(needle) != std::string::npos) return l;
  }
  return "";
}

#define REQUIRE_DATA()                                                     \
  const WordNet* wn = SharedWordNet();                                     \
  if (wn == nullptr) GTEST_FAIL() << "run tools/get_data.sh wordnet";       \
  if (CorpusLines() == nullptr)                                            \
    GTEST_FAIL() << "run tools/get_data.sh corpus_small (no " << DataDir() \
                 << "/corpus/small)";                                      \
  (void)wn

// True if `sub` is a subsequence of `seq`.
bool IsSubsequence(const std::vector<std::string>& sub,
                   const std::vector<std::string>& seq) {
  size_t i = 0;
  for (const std::string& s : seq) {
    if (i < sub.size() && sub[i] == s) ++i;
  }
  return i == sub.size();
}

bool IsValidUtf8(absl::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    if (DecodeUtf8(s, &pos) == kInvalidCodePoint) return false;
  }
  return true;
}

TEST(EdaWordsTest, CleansLikeGetOnlyChars) {
  REQUIRE_DATA();
  const std::string thus = LineContaining("Thus it's a free alternative");
  ASSERT_FALSE(thus.empty());
  EXPECT_THAT(EdaWords(thus), testing::IsSupersetOf({"its", "nokias"}));
  EXPECT_THAT(
      Head(EdaWords(thus), 7),
      ElementsAre("thus", "its", "a", "free", "alternative", "to", "nokias"));
  // Digits, hyphens and quotes separate words: "0xFFFF" -> "xffff".
  const std::string first = (*CorpusLines())[1];
  ASSERT_THAT(first, StartsWith("The ‘Open Free Fiasco"));
  EXPECT_THAT(Head(EdaWords(first), 9),
              ElementsAre("the", "open", "free", "fiasco", "firmware",
                          "flasher", "aka", "xffff", "utility"));
  // Letters of any script are kept and lowercased.
  const std::string felix = LineContaining("Félix Gaffiot (1870-1937)");
  ASSERT_FALSE(felix.empty());
  EXPECT_THAT(Head(EdaWords(felix), 5),
              ElementsAre("félix", "gaffiot", "was", "a", "philologist"));
  EXPECT_THAT(EdaWords(felix), testing::Contains("latin"));
  EXPECT_THAT(EdaWords("ÉCOLE Москва"), ElementsAre("école", "москва"));
  EXPECT_THAT(EdaWords("a\xFF"
                       "b c"),
              ElementsAre("ab", "c"));
  EXPECT_THAT(EdaWords(""), IsEmpty());
  EXPECT_THAT(EdaWords(" 1970 -- !? "), IsEmpty());
}

TEST(EdaSynonymsTest, AreCleanedWordNetLemmas) {
  REQUIRE_DATA();
  std::vector<std::string> car = EdaSynonyms(*wn, "car");
  EXPECT_THAT(car, testing::IsSupersetOf({"automobile", "cable car"}));
  for (const std::string& s : car) {
    EXPECT_EQ(s, absl::StrJoin(EdaWords(s), " "));
    EXPECT_NE(s, "car");
  }
  // Every cleaned synonym comes from a WordNet lemma.
  std::set<std::string> from_wordnet;
  for (const std::string& l : wn->Synonyms("car")) {
    from_wordnet.insert(absl::StrJoin(EdaWords(l), " "));
  }
  for (const std::string& s : car) EXPECT_TRUE(from_wordnet.count(s)) << s;
  EXPECT_THAT(EdaSynonyms(*wn, "félix"), IsEmpty());
}

TEST(EdaOpsTest, SynonymReplacementChangesNDistinctWords) {
  REQUIRE_DATA();
  int64_t changed_total = 0, expected_total = 0;
  for (int alpha10 : {1, 3}) {
    const std::vector<std::string> sentences = Sentences(300);
    for (size_t k = 0; k < sentences.size(); ++k) {
      const std::vector<std::string> words = EdaWords(sentences[k]);
      const int n = EdaCount(alpha10 / 10.0, words.size());
      EdaRandom rng(1, k);
      const std::vector<std::string> out =
          SynonymReplacement(words, n, *wn, &rng);
      ASSERT_EQ(out.size(), words.size());
      std::set<std::string> replaceable, changed;
      for (const std::string& w : words) {
        if (!IsEdaStopWord(w) && !EdaSynonyms(*wn, w).empty()) {
          replaceable.insert(w);
        }
      }
      for (size_t i = 0; i < words.size(); ++i) {
        if (out[i] == words[i]) continue;
        changed.insert(words[i]);
        EXPECT_FALSE(IsEdaStopWord(words[i])) << words[i];
        const std::vector<std::string> syn = EdaSynonyms(*wn, words[i]);
        EXPECT_TRUE(std::binary_search(syn.begin(), syn.end(), out[i]))
            << out[i] << " is not a WordNet synonym of " << words[i];
        // Every occurrence of a replaced word gets the same synonym.
        for (size_t j = 0; j < words.size(); ++j) {
          if (words[j] == words[i]) {
            EXPECT_EQ(out[j], out[i]);
          }
        }
      }
      const size_t expected =
          std::min(static_cast<size_t>(n), replaceable.size());
      EXPECT_EQ(changed.size(), expected) << sentences[k];
      changed_total += changed.size();
      expected_total += expected;
    }
  }
  EXPECT_GT(changed_total, 300);
  EXPECT_EQ(changed_total, expected_total);
}

TEST(EdaOpsTest, RandomInsertionAddsNSynonyms) {
  REQUIRE_DATA();
  const std::vector<std::string> sentences = Sentences(300);
  int64_t inserted_total = 0;
  for (size_t k = 0; k < sentences.size(); ++k) {
    const std::vector<std::string> words = EdaWords(sentences[k]);
    const int n = EdaCount(0.2, words.size());
    EdaRandom rng(2, k);
    const std::vector<std::string> out = RandomInsertion(words, n, *wn, &rng);
    std::set<std::string> pool(words.begin(), words.end());
    bool any_source = false;
    for (const std::string& w : words) {
      if (IsEdaStopWord(w)) continue;
      for (const std::string& s : EdaSynonyms(*wn, w)) {
        pool.insert(s);
        any_source = true;
      }
    }
    ASSERT_EQ(out.size(), words.size() + (any_source ? n : 0));
    EXPECT_TRUE(IsSubsequence(words, out));
    for (const std::string& o : out) EXPECT_TRUE(pool.count(o)) << o;
    inserted_total += out.size() - words.size();
  }
  EXPECT_GT(inserted_total, 300);
}

TEST(EdaOpsTest, RandomSwapPermutesAtMost2NPositions) {
  REQUIRE_DATA();
  const std::vector<std::string> sentences = Sentences(300);
  int64_t moved_total = 0;
  for (size_t k = 0; k < sentences.size(); ++k) {
    const std::vector<std::string> words = EdaWords(sentences[k]);
    const int n = EdaCount(0.1, words.size());
    EdaRandom rng(3, k);
    const std::vector<std::string> out = RandomSwap(words, n, &rng);
    ASSERT_EQ(out.size(), words.size());
    EXPECT_TRUE(std::is_permutation(out.begin(), out.end(), words.begin()));
    int moved = 0;
    for (size_t i = 0; i < words.size(); ++i) moved += out[i] != words[i];
    EXPECT_LE(moved, 2 * n);
    moved_total += moved;
  }
  // Distinct positions always swap; only equal words swap invisibly.
  EXPECT_GT(moved_total, 2 * 300 * 9 / 10);
  EdaRandom rng(3, 0);
  EXPECT_THAT(RandomSwap({"firmware"}, 3, &rng), ElementsAre("firmware"));
  EXPECT_THAT(RandomSwap({}, 3, &rng), IsEmpty());
}

TEST(EdaOpsTest, RandomDeletionDropsAboutPOfTheWords) {
  REQUIRE_DATA();
  const std::vector<std::string> sentences = Sentences(500);
  for (double p : {0.1, 0.5}) {
    int64_t in_words = 0, out_words = 0;
    for (size_t k = 0; k < sentences.size(); ++k) {
      const std::vector<std::string> words = EdaWords(sentences[k]);
      EdaRandom rng(4, k);
      const std::vector<std::string> out = RandomDeletion(words, p, &rng);
      ASSERT_FALSE(out.empty());
      EXPECT_TRUE(IsSubsequence(out, words));
      in_words += words.size();
      out_words += out.size();
    }
    const double rate = 1.0 - static_cast<double>(out_words) / in_words;
    EXPECT_NEAR(rate, p, 0.02) << in_words << " words";
  }
  EdaRandom rng(4, 0);
  EXPECT_THAT(RandomDeletion({"firmware"}, 1.0, &rng), ElementsAre("firmware"));
  EXPECT_THAT(RandomDeletion({"free", "firmware"}, 1.0, &rng), SizeIs(1));
}

TEST(EdaTest, ReturnsNumAugSentencesOfSourceWords) {
  REQUIRE_DATA();
  const std::vector<std::string> sentences = Sentences(100);
  for (int num_aug : {1, 4, 9}) {
    EdaOptions o;
    o.num_aug = num_aug;
    for (size_t k = 0; k < sentences.size(); ++k) {
      const std::vector<std::string> words = EdaWords(sentences[k]);
      std::set<std::string> pool(words.begin(), words.end());
      for (const std::string& w : words) {
        for (const std::string& s : EdaSynonyms(*wn, w)) {
          for (absl::string_view part : absl::StrSplit(s, ' ')) {
            pool.emplace(part);
          }
        }
      }
      const std::vector<std::string> aug = Eda(sentences[k], *wn, o, k);
      ASSERT_THAT(aug, SizeIs(num_aug));
      for (const std::string& a : aug) {
        ASSERT_FALSE(a.empty());
        for (const std::string& w : EdaWords(a)) {
          EXPECT_TRUE(pool.count(w)) << w << " in " << a;
        }
        EXPECT_EQ(a, absl::StrJoin(EdaWords(a), " "));  // already clean
      }
    }
  }
  EdaOptions none;
  none.alpha_sr = none.alpha_ri = none.alpha_rs = none.p_rd = 0;
  EXPECT_THAT(Eda(sentences[0], *wn, none, 0), IsEmpty());
  EdaOptions zero;
  zero.num_aug = 0;
  EXPECT_THAT(Eda(sentences[0], *wn, zero, 0), IsEmpty());
}

TEST(EdaTest, OneOperationAtATime) {
  REQUIRE_DATA();
  const std::vector<std::string> sentences = Sentences(50);
  EdaOptions rs;
  rs.alpha_sr = rs.alpha_ri = rs.p_rd = 0;
  rs.num_aug = 3;
  EdaOptions rd = rs;
  rd.alpha_rs = 0;
  rd.p_rd = 0.3;
  for (size_t k = 0; k < sentences.size(); ++k) {
    const std::vector<std::string> words = EdaWords(sentences[k]);
    for (const std::string& a : Eda(sentences[k], *wn, rs, k)) {
      std::vector<std::string> w = EdaWords(a);
      EXPECT_TRUE(std::is_permutation(w.begin(), w.end(), words.begin()));
    }
    for (const std::string& a : Eda(sentences[k], *wn, rd, k)) {
      EXPECT_TRUE(IsSubsequence(EdaWords(a), words));
    }
  }
}

TEST(EdaTest, DeterministicGivenSeedAndKey) {
  REQUIRE_DATA();
  const std::vector<std::string> sentences = Sentences(200);
  EdaOptions o;
  std::vector<std::vector<std::string>> serial;
  for (size_t k = 0; k < sentences.size(); ++k) {
    serial.push_back(Eda(sentences[k], *wn, o, 1000 + k));
    EXPECT_EQ(Eda(sentences[k], *wn, o, 1000 + k), serial.back());
  }
  // Two threads, reverse order, same keys: same results.
  std::vector<std::vector<std::string>> par(sentences.size());
  auto work = [&](size_t parity) {
    for (size_t k = sentences.size(); k-- > 0;) {
      if (k % 2 == parity) par[k] = Eda(sentences[k], *wn, o, 1000 + k);
    }
  };
  std::thread t0(work, 0), t1(work, 1);
  t0.join();
  t1.join();
  EXPECT_EQ(par, serial);
  // Other keys or seeds give other augmentations.
  int differ_key = 0, differ_seed = 0;
  EdaOptions o2 = o;
  o2.seed = 54321;
  for (size_t k = 0; k < sentences.size(); ++k) {
    differ_key += Eda(sentences[k], *wn, o, 5000 + k) != serial[k];
    differ_seed += Eda(sentences[k], *wn, o2, 1000 + k) != serial[k];
  }
  EXPECT_GT(differ_key, 190);
  EXPECT_GT(differ_seed, 190);
  // The generator itself is fixed: its first output for (12345, 0).
  EdaRandom a(12345, 0), b(12345, 0), c(12345, 1);
  const uint64_t first = a.Next();
  EXPECT_EQ(first, b.Next());
  EXPECT_NE(first, c.Next());
}

TEST(EdaTest, EmptyOneWordAndNonAsciiSentences) {
  REQUIRE_DATA();
  EdaOptions o;
  EXPECT_THAT(Eda("", *wn, o, 0), ElementsAre("", "", "", ""));
  EXPECT_THAT(Eda(" -- 1.0 ", *wn, o, 0), ElementsAre("", "", "", ""));
  // One word: SR may replace it, RI adds one synonym, RS and RD keep it.
  std::set<std::string> seen;
  for (uint64_t key = 0; key < 20; ++key) {
    for (const std::string& a : Eda("Firmware", *wn, o, key)) {
      seen.insert(a);
      EXPECT_LE(EdaWords(a).size(), 2u) << a;
    }
  }
  EXPECT_TRUE(seen.count("firmware"));
  EXPECT_GT(seen.size(), 1u);  // "microcode" is firmware's synonym
  for (const std::string& a : Eda("Débogueur", *wn, o, 0)) {
    EXPECT_EQ(a, "débogueur");  // no synonyms, one word
  }
  // A real sentence with non-ASCII letters stays valid UTF-8, lowercase.
  const std::string felix = LineContaining("Félix Gaffiot (1870-1937)");
  const std::string politecnica = LineContaining("Politècnica");
  for (const std::string& line : {felix, politecnica}) {
    ASSERT_FALSE(line.empty());
    for (uint64_t key = 0; key < 10; ++key) {
      for (const std::string& a : Eda(line, *wn, o, key)) {
        EXPECT_TRUE(IsValidUtf8(a)) << a;
        EXPECT_EQ(a, absl::StrJoin(EdaWords(a), " "));
      }
    }
  }
  bool kept_accent = false;
  for (const std::string& a : Eda(felix, *wn, o, 0)) {
    kept_accent |= a.find("félix") != std::string::npos;
  }
  EXPECT_TRUE(kept_accent);
}

TEST(AugmentLinesTest, EachLineThenItsAugmentations) {
  REQUIRE_DATA();
  const std::vector<std::string> s = Sentences(3);
  const std::string input = s[0] + "\n" + s[1] + "\n\n" + s[2] + "\n";
  std::istringstream in(input);
  std::ostringstream out;
  EdaOptions o;
  o.num_aug = 2;
  int64_t n = 0;
  ASSERT_TRUE(AugmentLines(*wn, o, in, out, 7, &n).ok());
  EXPECT_EQ(n, 3);
  std::vector<std::string> expected = {s[0]};
  for (auto& a : Eda(s[0], *wn, o, 7)) expected.push_back(a);
  expected.push_back(s[1]);
  for (auto& a : Eda(s[1], *wn, o, 8)) expected.push_back(a);
  expected.push_back("");
  expected.push_back(s[2]);
  for (auto& a : Eda(s[2], *wn, o, 10)) expected.push_back(a);
  EXPECT_EQ(out.str(), absl::StrJoin(expected, "\n") + "\n");
}

}  // namespace
}  // namespace bertps::text
