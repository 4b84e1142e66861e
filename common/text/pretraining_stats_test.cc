// Statistics of create-pretraining-data (pretraining_data.h) on a real
// corpus: the Debian package descriptions of tools/get_data.sh corpus_small
// (data/corpus/small), tokenized with the real bert-base-uncased vocab. With
// and without whole-word masking: 15% of the tokens masked, 80% of those
// [MASK], 10% kept, 10% random, and 50% random next among the chunks that
// can have an actual next, each within 0.5 points; whole-word groups masked
// together or not at all.
#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/io/file_util.h"
#include "common/text/pretraining_data.h"
#include "common/text/test_data.h"
#include "common/text/tokenizer.h"
#include "gtest/gtest.h"

namespace bertps::text {
namespace {

// Documents of sentences of ids (pretraining_data.h's document type).
using Documents = std::vector<std::vector<std::vector<int32_t>>>;

struct Corpus {
  std::unique_ptr<FullTokenizer> tokenizer;
  Documents docs;
  PretrainingDataStats input;
  std::string missing;  // why the corpus is unavailable
};

const Corpus& SmallCorpus() {
  static const Corpus* corpus = [] {
    auto* c = new Corpus;
    const std::string dir = DataDir();
    auto tok =
        FullTokenizer::Create(dir + "/vocab/bert-base-uncased-vocab.txt", true);
    if (!tok.ok()) {
      c->missing = tok.status().ToString();
      return c;
    }
    c->tokenizer = std::move(tok).value();
    for (int i = 0; i < 4; ++i) {
      const std::string path =
          absl::StrCat(dir, "/corpus/small/part-0", i, ".txt");
      auto text = io::ReadFileToString(path);
      if (!text.ok()) {
        c->missing = text.status().ToString();
        return c;
      }
      AppendDocuments(*c->tokenizer, *text, &c->docs, &c->input);
    }
    return c;
  }();
  return *corpus;
}

// What the instances of one run show.
struct Observed {
  PretrainingDataStats stats;
  int64_t tokens = 0, masked = 0, as_mask = 0, kept = 0, random = 0;
  int64_t multi_chunks = 0, multi_random_next = 0;
  int64_t groups = 0, multi_piece_groups_masked = 0, partly_masked = 0;
};

// Whole-word groups as the reference forms them: every position but
// [CLS]/[SEP]; a "##" piece joins the previous group.
Observed MaskAll(bool whole_word) {
  const Corpus& c = SmallCorpus();
  const Vocab& vocab = c.tokenizer->vocab();
  const int32_t cls = vocab.Find("[CLS]"), sep = vocab.Find("[SEP]"),
                mask = vocab.Find("[MASK]");
  PretrainingDataOptions o;
  o.dupe_factor = 10;
  o.do_whole_word_mask = whole_word;
  Observed r;
  auto instances = CreateInstances(c.docs, vocab, o, &r.stats);
  EXPECT_TRUE(instances.ok()) << instances.status();
  if (!instances.ok()) return r;
  for (const PretrainingInstance& inst : *instances) {
    r.tokens += static_cast<int64_t>(inst.tokens.size());
    std::vector<int32_t> orig = inst.tokens;
    for (size_t m = 0; m < inst.masked_positions.size(); ++m) {
      const int32_t now = inst.tokens[inst.masked_positions[m]];
      const int32_t label = inst.masked_labels[m];
      ++r.masked;
      if (now == mask) {
        ++r.as_mask;
      } else if (now == label) {
        ++r.kept;
      } else {
        ++r.random;
      }
      orig[inst.masked_positions[m]] = label;
    }
    const std::set<int32_t> masked(inst.masked_positions.begin(),
                                   inst.masked_positions.end());
    std::vector<std::vector<int>> groups;
    for (int i = 0; i < static_cast<int>(orig.size()); ++i) {
      if (orig[i] == cls || orig[i] == sep) continue;
      if (!groups.empty() && absl::StartsWith(vocab.token(orig[i]), "##")) {
        groups.back().push_back(i);
      } else {
        groups.push_back({i});
      }
    }
    for (const std::vector<int>& g : groups) {
      size_t n = 0;
      for (int p : g) n += masked.count(p);
      ++r.groups;
      if (g.size() >= 2 && n == g.size()) ++r.multi_piece_groups_masked;
      if (n > 0 && n < g.size()) ++r.partly_masked;
    }
  }
  r.multi_chunks = r.stats.instances - r.stats.single_sentence_chunks;
  r.multi_random_next = r.stats.random_next - r.stats.single_sentence_chunks;
  std::printf(
      "whole_word=%d: %lld instances, %lld tokens; masked %.4f "
      "(mask %.4f keep %.4f random %.4f); random next %.4f of %lld "
      "multi-sentence chunks (%.4f of all); %lld multi-piece words masked "
      "whole, %lld partly\n",
      whole_word, static_cast<long long>(r.stats.instances),
      static_cast<long long>(r.tokens),
      static_cast<double>(r.masked) / r.tokens,
      static_cast<double>(r.as_mask) / r.masked,
      static_cast<double>(r.kept) / r.masked,
      static_cast<double>(r.random) / r.masked,
      static_cast<double>(r.multi_random_next) / r.multi_chunks,
      static_cast<long long>(r.multi_chunks),
      static_cast<double>(r.stats.random_next) / r.stats.instances,
      static_cast<long long>(r.multi_piece_groups_masked),
      static_cast<long long>(r.partly_masked));
  return r;
}

void ExpectReferenceStatistics(const Observed& r) {
  ASSERT_GT(r.stats.instances, 100000);
  ASSERT_GT(r.multi_chunks, 100000);
  EXPECT_EQ(r.tokens, r.stats.tokens);
  EXPECT_EQ(r.masked, r.stats.masked);
  // A random id can equal [MASK] or the original id (1 in |vocab| each).
  EXPECT_NEAR(r.random, r.stats.masked_random, 2e-3 * r.random + 6);
  const double m = static_cast<double>(r.masked);
  EXPECT_NEAR(m / r.tokens, 0.15, 0.005);
  EXPECT_NEAR(r.as_mask / m, 0.80, 0.005);
  EXPECT_NEAR(r.kept / m, 0.10, 0.005);
  EXPECT_NEAR(r.random / m, 0.10, 0.005);
  EXPECT_NEAR(static_cast<double>(r.multi_random_next) / r.multi_chunks, 0.5,
              0.005);
}

#define REQUIRE_CORPUS()                                           \
  do {                                                             \
    if (!SmallCorpus().missing.empty())                            \
      GTEST_FAIL() << "run tools/get_data.sh vocab corpus_small: " \
                   << SmallCorpus().missing;                       \
  } while (0)

TEST(PretrainingStatsTest, CorpusIsReal) {
  REQUIRE_CORPUS();
  const PretrainingDataStats& in = SmallCorpus().input;
  std::printf(
      "corpus: %lld bytes, %lld documents, %lld sentences, %lld "
      "tokens\n",
      static_cast<long long>(in.input_bytes),
      static_cast<long long>(in.documents),
      static_cast<long long>(in.sentences),
      static_cast<long long>(in.input_tokens));
  EXPECT_GT(in.input_bytes, 2000000);
  EXPECT_GT(in.documents, 5000);
}

TEST(PretrainingStatsTest, PieceMasking) {
  REQUIRE_CORPUS();
  const Observed r = MaskAll(false);
  ExpectReferenceStatistics(r);
  // Every target met (S = 128: round(L * 0.15) <= 19 < P, never capped).
  EXPECT_EQ(r.stats.capped, 0);
  EXPECT_EQ(r.masked, r.stats.num_to_predict);
  // Pieces are masked one by one: words get split.
  EXPECT_GT(r.partly_masked, 1000);
}

TEST(PretrainingStatsTest, WholeWordMasking) {
  REQUIRE_CORPUS();
  const Observed r = MaskAll(true);
  ExpectReferenceStatistics(r);
  EXPECT_EQ(r.partly_masked, 0);
  EXPECT_GT(r.multi_piece_groups_masked, 10000);
  // A group that does not fit the remaining budget is skipped, so a target
  // can be missed, but barely.
  EXPECT_LE(r.masked, r.stats.num_to_predict);
  EXPECT_GT(r.masked, r.stats.num_to_predict * 99 / 100);
}

}  // namespace
}  // namespace bertps::text
