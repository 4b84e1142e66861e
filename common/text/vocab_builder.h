// WordPiece vocabulary training: a vocab.txt for new corpora that BERT's
// FullTokenizer (common/text/tokenizer.h) then uses as it uses Google's.
//
// 1. Words: every line of every input file goes through the project's
//    BasicTokenizer (same do_lower_case as the model will use), so each word
//    is what WordpieceTokenizer will later see; words are counted.
// 2. Alphabet: the limit_alphabet most frequent characters (code points;
//    ties by code point). Words with another character, or longer than
//    FullTokenizer's 200 characters, take no part in training (they would be
//    [UNK] anyway).
// 3. Initial vocabulary: special_tokens, then "[unused0]".."[unusedN-1]"
//    (num_unused), then every alphabet character in code-point order, then
//    "##c" for every alphabet character that can continue a word (not
//    punctuation or a CJK ideograph, which BasicTokenizer always splits
//    off), so every word over the alphabet has a WordPiece cover.
// 4. Merges: each word is a sequence of pieces, first "c", then "##c".
//    Repeatedly the adjacent pair (a, b) of highest
//        score = count(ab) / (count(a) * count(b))
//    (counts weighted by word frequency) with count(ab) >= min_frequency is
//    merged everywhere into "a" + b without its "##" and, if that string is
//    new, appended to the vocabulary; until vocab_size entries or no pair is
//    left ("exhausted"). Scores are compared exactly (integer cross
//    products). Ties: the larger count(ab), then the smaller (id(a), id(b)),
//    where ids number the initial pieces in the order above and merged pieces
//    in order of creation. So the result depends only on the multiset of
//    words: not on file order, hash order or the machine.
//
// Cost: counting streams the files (one line in memory at a time); merging
// keeps every distinct word and updates pair counts incrementally (only the
// words that contain the merged pair are revisited).
//
// Thread-safety: the functions are thread-safe (no shared state). No
// ownership.
#ifndef BERTPS_COMMON_TEXT_VOCAB_BUILDER_H_
#define BERTPS_COMMON_TEXT_VOCAB_BUILDER_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace bertps::text {

struct VocabBuilderOptions {
  int vocab_size = 30522;  // entries in the result (fewer if exhausted)
  int min_frequency = 2;   // smallest weighted count of a pair to merge
  bool do_lower_case = true;
  int limit_alphabet = 1000;  // most characters kept (by frequency)
  std::vector<std::string> special_tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]",
                                             "[MASK]"};
  int num_unused = 0;  // "[unused0]".. after the special tokens
};

struct VocabBuilderStats {
  int64_t bytes = 0;           // input bytes read
  int64_t words = 0;           // word occurrences (BasicTokenizer tokens)
  int64_t distinct_words = 0;  // before the alphabet filter
  int64_t skipped_words = 0;   // distinct words left out (alphabet, length)
  int64_t alphabet = 0;        // characters kept
  int64_t dropped_chars = 0;   // distinct characters beyond limit_alphabet
  int64_t merges = 0;          // merges done (some repeat a string)
  bool exhausted = false;      // stopped below vocab_size: no pair left
  double count_seconds = 0;    // reading + BasicTokenizer
  double merge_seconds = 0;    // alphabet + merges
};

// Trains on text files (UTF-8; one or more sentences a line). NotFound if a
// file is missing, InvalidArgument for no files or bad options (vocab_size
// below the initial vocabulary, which the message sizes; duplicate or
// empty special tokens; limit_alphabet < 1; min_frequency < 1).
absl::StatusOr<std::vector<std::string>> BuildWordPieceVocab(
    const std::vector<std::string>& files, const VocabBuilderOptions& o,
    VocabBuilderStats* stats = nullptr);

// Steps 2-4 on words already counted (BasicTokenizer output, any order;
// a repeated word adds up). The same errors as above, except for files.
absl::StatusOr<std::vector<std::string>> BuildWordPieceVocabFromCounts(
    const std::vector<std::pair<std::string, int64_t>>& word_counts,
    const VocabBuilderOptions& o, VocabBuilderStats* stats = nullptr);

// Writes `tokens` as vocab.txt (token i on line i, '\n' after each),
// atomically. InvalidArgument for a token with whitespace or an empty one.
absl::Status WriteVocabFile(const std::string& path,
                            const std::vector<std::string>& tokens);

}  // namespace bertps::text

#endif  // BERTPS_COMMON_TEXT_VOCAB_BUILDER_H_
