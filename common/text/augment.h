// EDA text augmentation (Wei & Zou 2019, "EDA: Easy Data Augmentation
// Techniques for Boosting Performance on Text Classification Tasks"), with
// synonyms from WordNet (common/text/wordnet.h).
//
// Eda(sentence) cleans the sentence into words (EdaWords below) and makes
// num_aug/4 + 1 candidates with each of the four operations whose rate is
// > 0, then shuffles the candidates and returns the first num_aug (fewer
// only when every rate is 0). With L words, each operation uses
// n = max(1, int(alpha * L)):
//
//   SR  synonym replacement: up to n distinct non-stop words, in random
//       order, each replaced (every occurrence) by one random synonym
//   RI  random insertion: n times, a random synonym of a random non-stop word
//       of the sentence is inserted at a random gap (L + 1 gaps)
//   RS  random swap: n times, two different random positions are swapped
//   RD  random deletion: each word is dropped with probability p_rd; a
//       sentence of one word is kept, and if every word was dropped one
//       random word is kept
//
// Differences from the paper's eda.py, all deliberate: Eda returns only the
// augmentations (not the original sentence too); RI draws its word among the
// non-stop words that have synonyms (eda.py tries 10 random words, stop
// words included, and inserts the first synonym of an unordered set), and an
// inserted word may land after the last word; RS always finds a second
// position when L >= 2; an empty sentence gives num_aug empty strings
// (eda.py fails). The stop-word list is the project's own (IsEdaStopWord).
//
// Words (EdaWords): the text is decoded as UTF-8 (ill-formed bytes dropped)
// and lowercased (Python str.lower()); apostrophes (' and U+2019) are
// removed, so "it's" -> "its"; every other character that is not a letter or
// a combining mark (Unicode L* / M*) separates words, so digits, hyphens and
// punctuation are dropped as in eda.py's get_only_chars, but letters of any
// script are kept ("Données" -> "données"). Synonyms (EdaSynonyms) are
// WordNet lemmas cleaned the same way (multi-word lemmas keep one space
// between their words), without empty ones and without the word itself.
//
// Determinism: every random choice of Eda(sentence, o, key) comes from one
// EdaRandom seeded with (o.seed, key) alone, so the output depends only on
// (sentence, WordNet, options, key), never on the thread, process or call
// order. A corpus job uses e.g. the global line number as the key.
//
// Thread-safety: free functions are thread-safe given a const WordNet;
// an EdaRandom must not be shared between threads. No ownership.
#ifndef BERTPS_COMMON_TEXT_AUGMENT_H_
#define BERTPS_COMMON_TEXT_AUGMENT_H_

#include <cstdint>
#include <istream>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/text/wordnet.h"

namespace bertps::text {

struct EdaOptions {
  double alpha_sr = 0.1;  // synonym replacement: n = max(1, alpha * L)
  double alpha_ri = 0.1;  // random insertion
  double alpha_rs = 0.1;  // random swap
  double p_rd = 0.1;      // random deletion: probability per word
  int num_aug = 4;        // augmented sentences per input sentence
  uint64_t seed = 12345;
};

// A small counter-based generator (SplitMix64 over a counter whose start is
// a hash of (seed, key)): fully specified here, so results are the same on
// every platform and standard library.
class EdaRandom {
 public:
  EdaRandom(uint64_t seed, uint64_t key);
  uint64_t Next();
  // Uniform integer in [0, n) for n >= 1 (multiply-shift; the bias is below
  // n / 2^64).
  size_t Uniform(size_t n);
  // Uniform double in [0, 1) with 53 random bits.
  double UniformDouble();

 private:
  uint64_t state_;
};

// Cleans `text` into lowercase words (see above).
std::vector<std::string> EdaWords(absl::string_view text);
// The project's English stop words (never replaced, never the source of an
// insertion); expects a cleaned word.
bool IsEdaStopWord(absl::string_view word);
// WordNet synonyms of `word`, cleaned, sorted, without duplicates, empty
// strings or `word` itself. A synonym may contain spaces ("motor vehicle").
std::vector<std::string> EdaSynonyms(const WordNet& wn, absl::string_view word);

// The four operations on a list of cleaned words. SR and RI put a
// multi-word synonym in one element (with its spaces), so positions of the
// result line up with the input for SR; Eda splits them afterwards.
std::vector<std::string> SynonymReplacement(
    const std::vector<std::string>& words, int n, const WordNet& wn,
    EdaRandom* rng);
std::vector<std::string> RandomInsertion(const std::vector<std::string>& words,
                                         int n, const WordNet& wn,
                                         EdaRandom* rng);
std::vector<std::string> RandomSwap(const std::vector<std::string>& words,
                                    int n, EdaRandom* rng);
std::vector<std::string> RandomDeletion(const std::vector<std::string>& words,
                                        double p, EdaRandom* rng);

// n = max(1, int(alpha * num_words)), as in the paper.
int EdaCount(double alpha, size_t num_words);

// The augmentations of one sentence: num_aug cleaned sentences (words joined
// by single spaces) when any rate is > 0.
std::vector<std::string> Eda(absl::string_view sentence, const WordNet& wn,
                             const EdaOptions& o, uint64_t key);

// `bert_local augment`: for each input line, the line as it was, then its
// num_aug augmentations (one per line, key = first_key + the line's 0-based
// number). A line with no non-space character (a document break) is copied
// alone, without augmentations. *sentences_out (if set) gets the number of
// sentences augmented. Fails only on a stream error.
absl::Status AugmentLines(const WordNet& wn, const EdaOptions& o,
                          std::istream& in, std::ostream& out,
                          uint64_t first_key = 0,
                          int64_t* sentences_out = nullptr);

}  // namespace bertps::text

#endif  // BERTPS_COMMON_TEXT_AUGMENT_H_
