#include "common/text/pretraining_data.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/io/bert_example.h"
#include "common/io/file_util.h"
#include "common/io/tfrecord.h"
#include "common/text/test_data.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace bertps::text {
namespace {

// ------------------------------------------------------------- helpers

// Real English text present on every Debian machine: the license texts
// under /usr/share/common-licenses (regular files only; several names are
// symlinks to the same text). Lines are sentences, blank lines separate
// documents (paragraphs), as the input format wants.
constexpr char kLicenseDir[] = "/usr/share/common-licenses";

struct Corpus {
  std::vector<std::string> files;  // copies in TEST_TMPDIR, sorted
  std::string all_text;
};

const Corpus& LicenseCorpus() {
  static const Corpus* corpus = [] {
    auto* c = new Corpus;
    std::vector<std::string> names;
    if (DIR* d = opendir(kLicenseDir)) {
      while (dirent* e = readdir(d)) {
        const std::string path = absl::StrCat(kLicenseDir, "/", e->d_name);
        struct stat st;
        if (e->d_name[0] != '.' && lstat(path.c_str(), &st) == 0 &&
            S_ISREG(st.st_mode)) {
          names.push_back(e->d_name);
        }
      }
      closedir(d);
    }
    std::sort(names.begin(), names.end());
    const std::string dir = testing::TempDir() + "/corpus";
    mkdir(dir.c_str(), 0755);
    for (const std::string& n : names) {
      auto text = io::ReadFileToString(absl::StrCat(kLicenseDir, "/", n));
      if (!text.ok()) continue;
      const std::string out = absl::StrCat(dir, "/", n, ".txt");
      if (!io::WriteFileAtomically(out, *text).ok()) continue;
      c->files.push_back(out);
      absl::StrAppend(&c->all_text, *text, "\n");
    }
    return c;
  }();
  return *corpus;
}

// Word-initial pieces of up to 4 bytes and "##" for the rest, so long words
// give two pieces and whole-word masking has groups to form.
std::unique_ptr<FullTokenizer> TinyTokenizerFor(const std::string& text) {
  std::set<std::string> pieces;
  for (const std::string& w : BasicTokenizer(true).Tokenize(text)) {
    if (w.size() <= 4) {
      pieces.insert(w);
    } else {
      pieces.insert(w.substr(0, 4));
      pieces.insert("##" + w.substr(4));
    }
  }
  std::vector<std::string> tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]",
                                     "[MASK]"};
  tokens.insert(tokens.end(), pieces.begin(), pieces.end());
  auto t = FullTokenizer::Create(Vocab::FromTokens(tokens), true);
  return t.ok() ? std::move(t).value() : nullptr;
}

// The real bert-base-uncased vocab if tools/get_data.sh fetched it, else a
// vocab built from the corpus.
const FullTokenizer& Tokenizer() {
  static const FullTokenizer* tok = [] {
    auto t = FullTokenizer::Create(
        DataDir() + "/vocab/bert-base-uncased-vocab.txt", true);
    if (t.ok()) return t->release();
    std::printf(
        "note: real vocab missing (run tools/get_data.sh); tiny vocab\n");
    return TinyTokenizerFor(LicenseCorpus().all_text).release();
  }();
  return *tok;
}

std::vector<TokenizedDocument> CorpusDocuments(PretrainingDataStats* st) {
  std::vector<TokenizedDocument> docs;
  for (const std::string& f : LicenseCorpus().files) {
    auto text = io::ReadFileToString(f);
    EXPECT_TRUE(text.ok()) << text.status();
    AppendDocuments(Tokenizer(), *text, &docs, st);
  }
  return docs;
}

std::vector<std::string> ReadRecords(const std::string& path) {
  std::vector<std::string> out;
  auto r = io::TFRecordReader::Open(path);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return out;
  std::string rec;
  while (true) {
    auto more = (*r)->Next(&rec);
    EXPECT_TRUE(more.ok()) << more.status();
    if (!more.ok() || !*more) break;
    out.push_back(rec);
  }
  return out;
}

// The token ids before masking: input ids with the labels put back.
std::vector<int32_t> Original(const PretrainingInstance& inst) {
  std::vector<int32_t> t = inst.tokens;
  for (size_t m = 0; m < inst.masked_positions.size(); ++m) {
    t[inst.masked_positions[m]] = inst.masked_labels[m];
  }
  return t;
}

#define REQUIRE_CORPUS()                               \
  do {                                                 \
    if (LicenseCorpus().files.empty())                 \
      GTEST_FAIL() << "no text under " << kLicenseDir; \
  } while (0)

// ------------------------------------------------------------- tests

TEST(AppendDocumentsTest, BlankLinesSeparateDocumentsAndEmptyLinesDrop) {
  const FullTokenizer& tok = Tokenizer();
  std::vector<TokenizedDocument> docs;
  PretrainingDataStats st;
  // Line 3 is whitespace only (blank); "\x01" tokenizes to nothing.
  AppendDocuments(tok, "the license.\nfree software\n \t\n\n\x01\nthe program",
                  &docs, &st);
  AppendDocuments(tok, "copyright", &docs, &st);  // a new file: a new doc
  ASSERT_EQ(docs.size(), 3u);
  EXPECT_EQ(docs[0].size(), 2u);
  EXPECT_EQ(docs[0][0], tok.Encode("the license."));
  EXPECT_EQ(docs[1].size(), 1u);
  EXPECT_EQ(docs[1][0], tok.Encode("the program"));
  EXPECT_EQ(docs[2][0], tok.Encode("copyright"));
  EXPECT_EQ(st.documents, 3);
  EXPECT_EQ(st.sentences, 4);
}

TEST(PretrainingDataTest, EveryInstanceDecodesAndIsWellFormed) {
  REQUIRE_CORPUS();
  const FullTokenizer& tok = Tokenizer();
  const int32_t cls = tok.vocab().Find("[CLS]");
  const int32_t sep = tok.vocab().Find("[SEP]");
  const int32_t mask = tok.vocab().Find("[MASK]");
  PretrainingDataOptions o;
  o.dupe_factor = 2;
  const std::string prefix = testing::TempDir() + "/wellformed/out";
  PretrainingDataStats st;
  ASSERT_TRUE(
      CreatePretrainingData(tok, LicenseCorpus().files, o, prefix, 3, &st)
          .ok());
  std::printf("stats: %s\n", st.ToJson().c_str());
  EXPECT_EQ(st.input_files, static_cast<int64_t>(LicenseCorpus().files.size()));
  EXPECT_EQ(st.output_files, 3);
  EXPECT_GT(st.documents, 100);
  EXPECT_EQ(st.instances, st.random_next + st.is_next);

  int64_t instances = 0, masked = 0, random_next = 0, tokens = 0;
  int64_t bytes = 0;
  std::vector<size_t> per_file;
  for (int f = 0; f < 3; ++f) {
    const std::string path = PretrainingOutputPath(prefix, f, 3);
    struct stat sb;
    ASSERT_EQ(stat(path.c_str(), &sb), 0) << path;
    bytes += sb.st_size;
    const std::vector<std::string> records = ReadRecords(path);
    per_file.push_back(records.size());
    for (const std::string& rec : records) {
      auto ex = io::DecodePretrainExample(rec);
      ASSERT_TRUE(ex.ok()) << ex.status();
      ++instances;
      ASSERT_EQ(ex->input_ids.size(), 128u);
      ASSERT_EQ(ex->masked_lm_positions.size(), 20u);
      // Real length L: the mask is 1s then 0s.
      int len = 0;
      while (len < 128 && ex->input_mask[len] == 1) ++len;
      for (int i = len; i < 128; ++i) {
        ASSERT_EQ(ex->input_mask[i], 0);
        ASSERT_EQ(ex->input_ids[i], 0);
        ASSERT_EQ(ex->segment_ids[i], 0);
      }
      ASSERT_GE(len, 5);
      tokens += len;
      // Masked positions: weights 1 then 0, sorted, inside, padding zero.
      int m = 0;
      while (m < 20 && ex->masked_lm_weights[m] == 1.0f) ++m;
      ASSERT_GE(m, 1);
      masked += m;
      std::vector<int32_t> orig(ex->input_ids.begin(),
                                ex->input_ids.begin() + len);
      for (int k = 0; k < 20; ++k) {
        if (k >= m) {
          ASSERT_EQ(ex->masked_lm_weights[k], 0.0f);
          ASSERT_EQ(ex->masked_lm_positions[k], 0);
          ASSERT_EQ(ex->masked_lm_ids[k], 0);
          continue;
        }
        const int32_t pos = ex->masked_lm_positions[k];
        ASSERT_GT(pos, 0);
        ASSERT_LT(pos, len - 1);
        if (k > 0) ASSERT_GT(pos, ex->masked_lm_positions[k - 1]);
        orig[pos] = ex->masked_lm_ids[k];
      }
      // [CLS] A [SEP] B [SEP] before masking; no label is [CLS]/[SEP].
      ASSERT_EQ(orig[0], cls);
      ASSERT_EQ(ex->input_ids[0], cls);
      ASSERT_EQ(ex->input_ids[len - 1], sep);
      std::vector<int> seps;
      for (int i = 0; i < len; ++i) {
        if (orig[i] == sep) seps.push_back(i);
        if (i > 0) ASSERT_NE(orig[i], cls);
        ASSERT_NE(orig[i], mask);  // real text has no [MASK]
      }
      ASSERT_EQ(seps.size(), 2u);
      ASSERT_GE(seps[0], 2);            // A has a token
      ASSERT_GE(seps[1], seps[0] + 2);  // B has a token
      ASSERT_EQ(seps[1], len - 1);
      ASSERT_EQ(ex->input_ids[seps[0]], sep);
      for (int i = 0; i < len; ++i) {
        ASSERT_EQ(ex->segment_ids[i], i <= seps[0] ? 0 : 1) << i;
      }
      ASSERT_TRUE(ex->next_sentence_label == 0 || ex->next_sentence_label == 1);
      random_next += ex->next_sentence_label;
    }
  }
  EXPECT_EQ(instances, st.instances);
  EXPECT_EQ(masked, st.masked);
  EXPECT_EQ(tokens, st.tokens);
  EXPECT_EQ(random_next, st.random_next);
  EXPECT_EQ(bytes, st.output_bytes);
  // Round-robin sharding.
  EXPECT_LE(*std::max_element(per_file.begin(), per_file.end()) -
                *std::min_element(per_file.begin(), per_file.end()),
            1u);
  auto json = nlohmann::json::parse(st.ToJson());
  EXPECT_EQ(json["instances"].get<int64_t>(), st.instances);
}

// The reference's statistics over many instances (in memory, dupe_factor
// 200: ~90k instances, ~1.7M masked positions).
class StatisticsTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (LicenseCorpus().files.empty()) return;
    PretrainingDataStats st;
    std::vector<TokenizedDocument> docs = CorpusDocuments(&st);
    PretrainingDataOptions o;
    o.dupe_factor = 200;
    auto inst = CreateInstances(docs, Tokenizer().vocab(), o, &st);
    ASSERT_TRUE(inst.ok()) << inst.status();
    instances_ = new std::vector<PretrainingInstance>(std::move(inst).value());
    stats_ = new PretrainingDataStats(st);
    std::printf("stats: %s\n", st.ToJson().c_str());
  }
  static void TearDownTestSuite() {
    delete instances_;
    delete stats_;
  }
  void SetUp() override { REQUIRE_CORPUS(); }

  static std::vector<PretrainingInstance>* instances_;
  static PretrainingDataStats* stats_;
};
std::vector<PretrainingInstance>* StatisticsTest::instances_ = nullptr;
PretrainingDataStats* StatisticsTest::stats_ = nullptr;

TEST_F(StatisticsTest, MaskedFractionIsFifteenPercent) {
  const PretrainingDataStats& st = *stats_;
  ASSERT_GT(st.instances, 50000);
  // At S = 128 the target round(128 * 0.15) = 19 never exceeds P = 20: the
  // cap never binds, and without whole-word masking every target is met.
  EXPECT_EQ(st.capped, 0);
  EXPECT_EQ(st.masked, st.num_to_predict);
  // Python 3 round(): halves to even (L * 0.15 is an exact half at L = 10,
  // 30, 50, ...: round(4.5) == 4 at L = 30).
  auto py_round = [](double x) {
    const double f = std::floor(x);
    if (x - f != 0.5) return static_cast<int64_t>(std::floor(x + 0.5));
    return static_cast<int64_t>(std::fmod(f, 2.0) == 0 ? f : f + 1);
  };
  int64_t expected = 0, masked = 0, tokens = 0;
  for (const PretrainingInstance& inst : *instances_) {
    const int64_t len = static_cast<int64_t>(inst.tokens.size());
    const int64_t target = std::max<int64_t>(1, py_round(len * 0.15));
    ASSERT_EQ(static_cast<int64_t>(inst.masked_positions.size()), target)
        << "L = " << len;
    expected += target;
    masked += static_cast<int64_t>(inst.masked_positions.size());
    tokens += len;
  }
  EXPECT_EQ(masked, st.masked);
  EXPECT_EQ(tokens, st.tokens);
  EXPECT_EQ(expected, masked);
  const double frac = static_cast<double>(masked) / tokens;
  std::printf("masked fraction %.4f of %lld tokens\n", frac,
              static_cast<long long>(tokens));
  EXPECT_NEAR(frac, 0.15, 0.005);
}

TEST_F(StatisticsTest, MaskKeepRandomIs80_10_10) {
  const PretrainingDataStats& st = *stats_;
  const int32_t mask = Tokenizer().vocab().Find("[MASK]");
  int64_t as_mask = 0, same = 0, other = 0;
  for (const PretrainingInstance& inst : *instances_) {
    for (size_t m = 0; m < inst.masked_positions.size(); ++m) {
      const int32_t now = inst.tokens[inst.masked_positions[m]];
      if (now == mask) {
        ++as_mask;
      } else if (now == inst.masked_labels[m]) {
        ++same;
      } else {
        ++other;
      }
    }
  }
  EXPECT_EQ(st.masked_as_mask + st.masked_kept + st.masked_random, st.masked);
  // A random id equals [MASK] or the label with probability 1/|vocab| each.
  EXPECT_NEAR(as_mask, st.masked_as_mask, 1e-3 * st.masked_random + 3);
  EXPECT_NEAR(same, st.masked_kept, 1e-3 * st.masked_random + 3);
  EXPECT_NEAR(other, st.masked_random, 2e-3 * st.masked_random + 6);
  const double n = static_cast<double>(st.masked);
  std::printf("mask %.4f keep %.4f random %.4f of %.0f\n",
              st.masked_as_mask / n, st.masked_kept / n, st.masked_random / n,
              n);
  EXPECT_NEAR(st.masked_as_mask / n, 0.8, 0.005);
  EXPECT_NEAR(st.masked_kept / n, 0.1, 0.005);
  EXPECT_NEAR(st.masked_random / n, 0.1, 0.005);
}

TEST_F(StatisticsTest, RandomNextIsHalfOfMultiSentenceChunks) {
  const PretrainingDataStats& st = *stats_;
  int64_t random_next = 0;
  for (const PretrainingInstance& inst : *instances_) {
    random_next += inst.is_random_next;
  }
  EXPECT_EQ(random_next, st.random_next);
  // A one-sentence chunk is always a random next; the others are with
  // probability 0.5. So P(random) = (single + 0.5 * multi) / instances.
  ASSERT_LE(st.single_sentence_chunks, st.random_next);
  const double multi = st.instances - st.single_sentence_chunks;
  ASSERT_GT(multi, 50000);
  const double frac = (st.random_next - st.single_sentence_chunks) / multi;
  const double expected =
      (st.single_sentence_chunks + 0.5 * multi) / st.instances;
  std::printf(
      "random next: %.4f of multi-sentence chunks, %.4f overall "
      "(implied %.4f; %lld single-sentence chunks)\n",
      frac, static_cast<double>(st.random_next) / st.instances, expected,
      static_cast<long long>(st.single_sentence_chunks));
  EXPECT_NEAR(frac, 0.5, 0.005);
  EXPECT_NEAR(static_cast<double>(st.random_next) / st.instances, expected,
              0.005);
}

TEST_F(StatisticsTest, SequenceLengthsWithinBounds) {
  // Target lengths: max_num_tokens = 125 with probability 0.9, else
  // randint(2, 125); chunks also end at document ends (here paragraphs of
  // ~60 tokens), so most sequences are short; none exceeds S.
  int64_t full = 0;
  for (const PretrainingInstance& inst : *instances_) {
    ASSERT_LE(inst.tokens.size(), 128u);
    ASSERT_GE(inst.tokens.size(), 5u);
    full += inst.tokens.size() == 128u;
  }
  EXPECT_GT(full, 1000);
}

TEST(PretrainingDataTest, SameSeedSameBytesOtherSeedOtherBytes) {
  REQUIRE_CORPUS();
  PretrainingDataOptions o;
  o.dupe_factor = 2;
  const std::string dir = testing::TempDir() + "/det";
  auto files = [&](const std::string& prefix) {
    std::string all;
    for (int i = 0; i < 2; ++i) {
      auto s = io::ReadFileToString(PretrainingOutputPath(prefix, i, 2));
      EXPECT_TRUE(s.ok()) << s.status();
      absl::StrAppend(&all, s.ok() ? *s : "", "|");
    }
    return all;
  };
  const auto& in = LicenseCorpus().files;
  ASSERT_TRUE(
      CreatePretrainingData(Tokenizer(), in, o, dir + "/a", 2, nullptr).ok());
  ASSERT_TRUE(
      CreatePretrainingData(Tokenizer(), in, o, dir + "/b", 2, nullptr).ok());
  o.random_seed = 7;
  ASSERT_TRUE(
      CreatePretrainingData(Tokenizer(), in, o, dir + "/c", 2, nullptr).ok());
  EXPECT_GT(files(dir + "/a").size(), 1000u);
  EXPECT_TRUE(files(dir + "/a") == files(dir + "/b"));
  EXPECT_FALSE(files(dir + "/a") == files(dir + "/c"));
}

// Candidate groups as the reference forms them for whole-word masking.
std::vector<std::vector<int>> WordGroups(const std::vector<int32_t>& orig,
                                         const Vocab& vocab) {
  const int32_t cls = vocab.Find("[CLS]"), sep = vocab.Find("[SEP]");
  std::vector<std::vector<int>> groups;
  for (int i = 0; i < static_cast<int>(orig.size()); ++i) {
    if (orig[i] == cls || orig[i] == sep) continue;
    if (!groups.empty() && absl::StartsWith(vocab.token(orig[i]), "##")) {
      groups.back().push_back(i);
    } else {
      groups.push_back({i});
    }
  }
  return groups;
}

// Counts over instances: groups of 2+ pieces fully masked, and partly masked.
void CountGroupMasking(const std::vector<PretrainingInstance>& instances,
                       int64_t* full_multi, int64_t* partial) {
  const Vocab& vocab = Tokenizer().vocab();
  *full_multi = *partial = 0;
  for (const PretrainingInstance& inst : instances) {
    std::set<int> masked(inst.masked_positions.begin(),
                         inst.masked_positions.end());
    for (const auto& g : WordGroups(Original(inst), vocab)) {
      size_t n = 0;
      for (int p : g) n += masked.count(p);
      if (n == g.size() && g.size() >= 2) ++*full_multi;
      if (n > 0 && n < g.size()) ++*partial;
    }
  }
}

TEST(PretrainingDataTest, WholeWordMaskingGroupsContinuationPieces) {
  REQUIRE_CORPUS();
  std::vector<TokenizedDocument> docs = CorpusDocuments(nullptr);
  PretrainingDataOptions o;
  o.dupe_factor = 3;
  o.do_whole_word_mask = true;
  PretrainingDataStats st;
  auto whole = CreateInstances(docs, Tokenizer().vocab(), o, &st);
  ASSERT_TRUE(whole.ok()) << whole.status();
  int64_t full_multi = 0, partial = 0;
  CountGroupMasking(*whole, &full_multi, &partial);
  EXPECT_EQ(partial, 0);
  EXPECT_GT(full_multi, 100);
  // A group may not fit the remaining budget, so fewer than the target.
  EXPECT_LE(st.masked, st.num_to_predict);
  EXPECT_GT(st.masked, st.num_to_predict * 9 / 10);
  for (const PretrainingInstance& inst : *whole) {
    ASSERT_TRUE(std::is_sorted(inst.masked_positions.begin(),
                               inst.masked_positions.end()));
  }

  // Without the flag, pieces are masked one by one: some words partly.
  o.do_whole_word_mask = false;
  auto pieces = CreateInstances(docs, Tokenizer().vocab(), o, nullptr);
  ASSERT_TRUE(pieces.ok()) << pieces.status();
  CountGroupMasking(*pieces, &full_multi, &partial);
  EXPECT_GT(partial, 100);
}

TEST(PretrainingDataTest, BadInputIsAnError) {
  const FullTokenizer& tok = Tokenizer();
  PretrainingDataOptions o;
  const std::string prefix = testing::TempDir() + "/bad/out";
  EXPECT_EQ(
      CreatePretrainingData(tok, {"/nonexistent/x.txt"}, o, prefix, 1, nullptr)
          .code(),
      absl::StatusCode::kNotFound);
  EXPECT_EQ(CreatePretrainingData(tok, {}, o, prefix, 1, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  const std::string blank = testing::TempDir() + "/blank.txt";
  ASSERT_TRUE(io::WriteFileAtomically(blank, "\n \n\n").ok());
  EXPECT_EQ(CreatePretrainingData(tok, {blank}, o, prefix, 1, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreatePretrainingData(tok, {blank}, o, prefix, 0, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  for (auto bad :
       {+[](PretrainingDataOptions* p) { p->max_seq_length = 4; },
        +[](PretrainingDataOptions* p) { p->max_predictions_per_seq = 0; },
        +[](PretrainingDataOptions* p) { p->dupe_factor = 0; },
        +[](PretrainingDataOptions* p) { p->masked_lm_prob = 2; },
        +[](PretrainingDataOptions* p) { p->short_seq_prob = -0.1; }}) {
    PretrainingDataOptions b;
    bad(&b);
    EXPECT_EQ(b.Validate().code(), absl::StatusCode::kInvalidArgument);
  }
  // A vocabulary without [MASK].
  auto no_mask = FullTokenizer::Create(
      Vocab::FromTokens({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "a"}), true);
  ASSERT_TRUE(no_mask.ok());
  std::vector<TokenizedDocument> docs = {{{4}}};
  auto r = CreateInstances(docs, (*no_mask)->vocab(), o, nullptr);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), testing::HasSubstr("[MASK]"));
  // Nothing was written under a final name.
  struct stat sb;
  EXPECT_NE(stat(PretrainingOutputPath(prefix, 0, 1).c_str(), &sb), 0);
}

TEST(PretrainingDataTest, SingleDocumentSingleSentenceStillWorks) {
  // One document: the random next comes from the same document after ten
  // tries, as in the reference.
  const FullTokenizer& tok = Tokenizer();
  std::vector<TokenizedDocument> docs = {{tok.Encode("free software foundation")}};
  PretrainingDataOptions o;
  o.dupe_factor = 5;
  PretrainingDataStats st;
  auto r = CreateInstances(docs, tok.vocab(), o, &st);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->size(), 5u);
  EXPECT_EQ(st.random_next, 5);
  EXPECT_EQ(st.single_sentence_chunks, 5);
  for (const auto& inst : *r) {
    const io::PretrainExample ex = ToPretrainExample(inst, o);
    EXPECT_EQ(ex.input_ids.size(), 128u);
    EXPECT_EQ(ex.next_sentence_label, 1);
  }
}

}  // namespace
}  // namespace bertps::text
