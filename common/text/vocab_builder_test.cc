#include "common/text/vocab_builder.h"

#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "common/text/tokenizer.h"
#include "common/text/unicode.h"
#include "common/text/test_data.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bertps::text {
namespace {

using ::testing::HasSubstr;

std::string Part(int i) {
  return DataDir() + "/corpus/small/part-0" + std::to_string(i) + ".txt";
}

std::string TmpDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t != nullptr ? t : "/tmp";
}

#define REQUIRE_CORPUS()                                  \
  if (!std::ifstream(Part(0)) || !std::ifstream(Part(3))) \
  GTEST_FAIL() << "run tools/get_data.sh corpus_small (no " << Part(0) << ")"

// The first `n` lines of `path` as a file of their own.
std::string Slice(const std::string& path, int n, const std::string& name) {
  std::ifstream in(path);
  const std::string out_path = TmpDir() + "/" + name;
  std::ofstream out(out_path);
  std::string line;
  for (int i = 0; i < n && std::getline(in, line); ++i) out << line << '\n';
  return out_path;
}

// Word counts of files through BasicTokenizer.
std::vector<std::pair<std::string, int64_t>> CountWords(
    const std::vector<std::string>& files, bool lower) {
  BasicTokenizer basic(lower);
  std::map<std::string, int64_t> counts;
  for (const std::string& f : files) {
    std::ifstream in(f);
    std::string line;
    while (std::getline(in, line)) {
      for (const std::string& t : basic.Tokenize(line)) ++counts[t];
    }
  }
  return {counts.begin(), counts.end()};
}

std::set<char32_t> Chars(
    const std::vector<std::pair<std::string, int64_t>>& w) {
  std::set<char32_t> out;
  for (const auto& [word, n] : w) {
    for (size_t pos = 0; pos < word.size();) out.insert(DecodeUtf8(word, &pos));
  }
  return out;
}

struct UnkRate {
  int64_t words = 0, tokens = 0, unk = 0;
};

// Tokenizes held-out text with the vocabulary.
UnkRate Measure(const std::vector<std::string>& vocab, bool lower,
                const std::string& path) {
  auto tok = FullTokenizer::Create(Vocab::FromTokens(vocab), lower);
  EXPECT_TRUE(tok.ok()) << tok.status();
  UnkRate r;
  if (!tok.ok()) return r;
  const int32_t unk = (*tok)->vocab().Find("[UNK]");
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    r.words += static_cast<int64_t>((*tok)->basic().Tokenize(line).size());
    for (int32_t id : (*tok)->Encode(line)) {
      ++r.tokens;
      r.unk += id == unk;
    }
  }
  return r;
}

TEST(VocabBuilderTest, RealCorpusVocabTokenizesHeldOutText) {
  REQUIRE_CORPUS();
  VocabBuilderOptions o;
  o.vocab_size = 8000;
  VocabBuilderStats stats;
  auto vocab = BuildWordPieceVocab({Part(0), Part(1)}, o, &stats);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  std::printf(
      "stats: %lld bytes, %lld words, %lld distinct, %lld skipped, "
      "alphabet %lld, merges %lld, count %.2f s, merge %.2f s\n",
      static_cast<long long>(stats.bytes), static_cast<long long>(stats.words),
      static_cast<long long>(stats.distinct_words),
      static_cast<long long>(stats.skipped_words),
      static_cast<long long>(stats.alphabet),
      static_cast<long long>(stats.merges), stats.count_seconds,
      stats.merge_seconds);
  ASSERT_EQ(vocab->size(), 8000u);
  EXPECT_FALSE(stats.exhausted);
  // Specials first, in order; no token twice.
  for (size_t i = 0; i < o.special_tokens.size(); ++i) {
    EXPECT_EQ((*vocab)[i], o.special_tokens[i]);
  }
  std::set<std::string> distinct(vocab->begin(), vocab->end());
  EXPECT_EQ(distinct.size(), vocab->size());
  // Every character of the training text (fewer than limit_alphabet) is a
  // token, and "##c" for each that can continue a word.
  const auto words = CountWords({Part(0), Part(1)}, true);
  const std::set<char32_t> chars = Chars(words);
  ASSERT_LT(chars.size(), 1000u);
  EXPECT_EQ(stats.alphabet, static_cast<int64_t>(chars.size()));
  for (char32_t cp : chars) {
    std::string s;
    AppendUtf8(cp, &s);
    EXPECT_TRUE(distinct.count(s)) << s;
    if (!IsPunctuation(cp) && !IsCjk(cp)) {
      EXPECT_TRUE(distinct.count("##" + s)) << s;
    }
  }
  // FullTokenizer loads the written file; held-out text has few [UNK].
  const std::string path = TmpDir() + "/vocab.txt";
  ASSERT_TRUE(WriteVocabFile(path, *vocab).ok());
  auto loaded = FullTokenizer::Create(path, true);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->vocab().size(), 8000);
  const UnkRate r = Measure(*vocab, true, Part(3));
  const double unk_rate = static_cast<double>(r.unk) / r.tokens;
  const double pieces_per_word = static_cast<double>(r.tokens) / r.words;
  std::printf(
      "held-out part-03: %lld words, %lld tokens (%.3f per word), "
      "%lld [UNK] (%.4f%%)\n",
      static_cast<long long>(r.words), static_cast<long long>(r.tokens),
      pieces_per_word, static_cast<long long>(r.unk), 100 * unk_rate);
  // Measured: 17 [UNK] in 417k tokens (0.004%), 2.7 pieces per word: the
  // score favours rare pairs, so with min_frequency 2 and a vocabulary
  // smaller than the word list, rare words take most entries.
  EXPECT_LT(unk_rate, 0.0005);
  EXPECT_LT(pieces_per_word, 3.2);

  // A higher min_frequency keeps the rare pairs out: frequent words become
  // whole tokens and held-out text needs far fewer pieces (measured 1.26
  // pieces per word with part-00..02; it stops below 8000, exhausted).
  o.min_frequency = 20;
  auto frequent = BuildWordPieceVocab({Part(0), Part(1)}, o, &stats);
  ASSERT_TRUE(frequent.ok()) << frequent.status();
  std::set<std::string> f(frequent->begin(), frequent->end());
  for (const char* w : {"the", "package", "library", "files", "python"}) {
    EXPECT_TRUE(f.count(w)) << w;
  }
  const UnkRate rf = Measure(*frequent, true, Part(3));
  std::printf(
      "min_frequency 20: %zu entries (exhausted %d), %.3f pieces "
      "per word, %.4f%% [UNK]\n",
      frequent->size(), stats.exhausted,
      static_cast<double>(rf.tokens) / rf.words, 100.0 * rf.unk / rf.tokens);
  EXPECT_LT(static_cast<double>(rf.tokens) / rf.words, 1.4);
  EXPECT_LT(static_cast<double>(rf.unk) / rf.tokens, 0.0005);
}

// The training algorithm written the slow, obvious way: every round counts
// all pairs again and scans them for the best (same score, same ties).
std::vector<std::string> NaiveWordPiece(
    const std::vector<std::pair<std::string, int64_t>>& words,
    const VocabBuilderOptions& o) {
  std::set<char32_t> chars = Chars(words);  // small corpus: all kept
  std::vector<std::string> vocab = o.special_tokens;
  for (char32_t cp : chars) {
    std::string s;
    AppendUtf8(cp, &s);
    vocab.push_back(s);
  }
  for (char32_t cp : chars) {
    if (IsPunctuation(cp) || IsCjk(cp)) continue;
    std::string s = "##";
    AppendUtf8(cp, &s);
    vocab.push_back(s);
  }
  std::map<std::string, int> id;
  for (size_t i = 0; i < vocab.size(); ++i) id[vocab[i]] = i;
  std::vector<std::vector<std::string>> seg;
  for (const auto& [w, n] : words) {
    std::vector<std::string> pieces;
    for (size_t pos = 0; pos < w.size();) {
      std::string s = pieces.empty() ? "" : "##";
      AppendUtf8(DecodeUtf8(w, &pos), &s);
      pieces.push_back(s);
    }
    seg.push_back(pieces);
  }
  while (static_cast<int>(vocab.size()) < o.vocab_size) {
    std::map<std::string, int64_t> unit;
    std::map<std::pair<int, int>, int64_t> pair;
    for (size_t i = 0; i < seg.size(); ++i) {
      const int64_t n = words[i].second;
      for (size_t j = 0; j < seg[i].size(); ++j) {
        unit[seg[i][j]] += n;
        if (j + 1 < seg[i].size()) {
          pair[{id[seg[i][j]], id[seg[i][j + 1]]}] += n;
        }
      }
    }
    bool found = false;
    std::pair<int, int> best;
    long double best_score = -1;
    int64_t best_n = 0;
    for (const auto& [p, n] : pair) {  // (a, b) ascending: first wins ties
      if (n < o.min_frequency) continue;
      const long double score =
          static_cast<long double>(n) /
          (static_cast<long double>(unit[vocab[p.first]]) *
           unit[vocab[p.second]]);
      if (!found || score > best_score || (score == best_score && n > best_n)) {
        found = true;
        best = p;
        best_score = score;
        best_n = n;
      }
    }
    if (!found) break;
    const std::string& a = vocab[best.first];
    const std::string& b = vocab[best.second];
    const std::string merged = a + b.substr(2);
    for (auto& pieces : seg) {
      std::vector<std::string> out;
      for (size_t j = 0; j < pieces.size(); ++j) {
        if (j + 1 < pieces.size() && pieces[j] == a && pieces[j + 1] == b) {
          out.push_back(merged);
          ++j;
        } else {
          out.push_back(pieces[j]);
        }
      }
      pieces = out;
    }
    if (!id.count(merged)) {
      id[merged] = vocab.size();
      vocab.push_back(merged);
    }
  }
  return vocab;
}

TEST(VocabBuilderTest, SameAsTheNaiveAlgorithm) {
  REQUIRE_CORPUS();
  const auto words = CountWords({Slice(Part(1), 150, "naive.txt")}, true);
  for (int min_frequency : {1, 2, 3}) {
    VocabBuilderOptions o;
    o.vocab_size = 1200;
    o.min_frequency = min_frequency;
    auto fast = BuildWordPieceVocabFromCounts(words, o);
    ASSERT_TRUE(fast.ok()) << fast.status();
    EXPECT_EQ(*fast, NaiveWordPiece(words, o)) << min_frequency;
  }
}

TEST(VocabBuilderTest, FirstMergeHasTheBestScore) {
  REQUIRE_CORPUS();
  const auto words = CountWords({Slice(Part(2), 400, "slice400.txt")}, true);
  VocabBuilderOptions o;
  o.vocab_size = 100000;
  VocabBuilderStats stats;
  auto vocab = BuildWordPieceVocabFromCounts(words, o, &stats);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  // Independent count of the initial pairs.
  std::map<std::string, int64_t> unit;
  std::map<std::pair<std::string, std::string>, int64_t> pair;
  for (const auto& [w, n] : words) {
    std::vector<std::string> pieces;
    for (size_t pos = 0; pos < w.size();) {
      std::string s = pieces.empty() ? "" : "##";
      AppendUtf8(DecodeUtf8(w, &pos), &s);
      pieces.push_back(s);
    }
    for (size_t i = 0; i < pieces.size(); ++i) {
      unit[pieces[i]] += n;
      if (i + 1 < pieces.size()) pair[{pieces[i], pieces[i + 1]}] += n;
    }
  }
  double best = 0;
  for (const auto& [p, n] : pair) {
    if (n >= o.min_frequency) {
      best = std::max(best, double(n) / (unit[p.first] * unit[p.second]));
    }
  }
  std::set<std::string> best_merges;
  for (const auto& [p, n] : pair) {
    if (n >= o.min_frequency &&
        double(n) / (unit[p.first] * unit[p.second]) == best) {
      best_merges.insert(p.first + p.second.substr(2));
    }
  }
  const size_t first_merge =
      5 + stats.alphabet +
      std::count_if(vocab->begin(), vocab->end(), [](const std::string& t) {
        return t.size() > 2 && t.rfind("##", 0) == 0 && CountCodePoints(t) == 3;
      });
  ASSERT_LT(first_merge, vocab->size());
  EXPECT_TRUE(best_merges.count((*vocab)[first_merge]))
      << (*vocab)[first_merge] << " (best score " << best << ")";
  // Exhausted: every word of >= min_frequency... is one token; it stopped
  // short of the requested size.
  EXPECT_TRUE(stats.exhausted);
  EXPECT_LT(vocab->size(), 100000u);
  std::set<std::string> distinct(vocab->begin(), vocab->end());
  for (const auto& [w, n] : words) {
    if (n >= 2) EXPECT_TRUE(distinct.count(w)) << w;
  }
}

TEST(VocabBuilderTest, Deterministic) {
  REQUIRE_CORPUS();
  const std::string a = Slice(Part(1), 3000, "a.txt");
  const std::string b = Slice(Part(2), 3000, "b.txt");
  VocabBuilderOptions o;
  o.vocab_size = 3000;
  auto v1 = BuildWordPieceVocab({a, b}, o);
  auto v2 = BuildWordPieceVocab({a, b}, o);
  auto v3 = BuildWordPieceVocab({b, a}, o);  // file order does not matter
  ASSERT_TRUE(v1.ok() && v2.ok() && v3.ok());
  EXPECT_EQ(*v1, *v2);
  EXPECT_EQ(*v1, *v3);
  auto words = CountWords({a, b}, true);
  std::reverse(words.begin(), words.end());
  auto v4 = BuildWordPieceVocabFromCounts(words, o);
  ASSERT_TRUE(v4.ok());
  EXPECT_EQ(*v1, *v4);
}

TEST(VocabBuilderTest, CasedAlphabetLimitAndUnused) {
  REQUIRE_CORPUS();
  const std::string a = Slice(Part(0), 2000, "cased.txt");
  VocabBuilderOptions o;
  o.vocab_size = 2000;
  o.min_frequency = 10;
  o.do_lower_case = false;
  o.num_unused = 10;
  o.limit_alphabet = 60;
  VocabBuilderStats stats;
  auto vocab = BuildWordPieceVocab({a}, o, &stats);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  EXPECT_EQ(vocab->size(), 2000u);
  EXPECT_EQ((*vocab)[5], "[unused0]");
  EXPECT_EQ((*vocab)[14], "[unused9]");
  EXPECT_EQ(stats.alphabet, 60);
  EXPECT_GT(stats.dropped_chars, 0);
  EXPECT_GT(stats.skipped_words, 0);
  std::set<std::string> distinct(vocab->begin(), vocab->end());
  EXPECT_TRUE(distinct.count("T"));
  EXPECT_TRUE(distinct.count("The"));
  // The 60 most frequent characters, nothing else, as single characters.
  int single = 0;
  for (const std::string& t : *vocab) single += CountCodePoints(t) == 1;
  EXPECT_EQ(single, 60);
  auto tok = FullTokenizer::Create(Vocab::FromTokens(*vocab), false);
  ASSERT_TRUE(tok.ok());
  // With only 60 characters, words with a rarer one are [UNK]: measured
  // 2.05% of held-out tokens.
  const UnkRate r = Measure(*vocab, false, Part(3));
  EXPECT_LT(static_cast<double>(r.unk) / r.tokens, 0.03);
}

TEST(VocabBuilderTest, BadInputIsAClearError) {
  REQUIRE_CORPUS();
  VocabBuilderOptions o;
  auto missing = BuildWordPieceVocab({DataDir() + "/no-such-file.txt"}, o);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("no-such-file.txt"));
  EXPECT_EQ(BuildWordPieceVocab({}, o).status().code(),
            absl::StatusCode::kInvalidArgument);
  VocabBuilderOptions small = o;
  small.vocab_size = 50;
  auto too_small = BuildWordPieceVocab({Part(0)}, small);
  EXPECT_EQ(too_small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_small.status().message(), HasSubstr("vocab_size 50"));
  VocabBuilderOptions dup = o;
  dup.special_tokens.push_back("[PAD]");
  EXPECT_EQ(BuildWordPieceVocab({Part(0)}, dup).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteVocabFile(TmpDir() + "/v.txt", {"[PAD]", "a b"}).code(),
            absl::StatusCode::kInvalidArgument);
  // An empty corpus gives just the special tokens.
  auto empty = BuildWordPieceVocabFromCounts({}, o);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, o.special_tokens);
}

}  // namespace
}  // namespace bertps::text
