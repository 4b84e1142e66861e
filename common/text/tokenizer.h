// BERT's WordPiece tokenizer, token for token the same as google-research/bert
// tokenization.py (FullTokenizer = BasicTokenizer then WordpieceTokenizer)
// running on CPython 3:
//
//   Vocab               vocab.txt: line i (stripped) is token i
//   BasicTokenizer      clean (drop U+0000, U+FFFD, Cc/Cf except \t\n\r;
//                       whitespace -> space), a space around each CJK
//                       ideograph, split on whitespace, then per word: if
//                       do_lower_case, str.lower() + NFD + drop Mn; every
//                       punctuation character becomes a token of its own
//   WordpieceTokenizer  words over 200 code points -> [UNK]; else greedy
//                       longest-match-first, later pieces prefixed "##";
//                       a word with any unmatched position -> one [UNK]
//   FullTokenizer       both; Tokenize() gives strings, Encode() ids
//
// Input is UTF-8. Ill-formed bytes are dropped, as tokenization.py's
// convert_to_unicode (bytes.decode("utf-8", "ignore")) does, so
// "a\xFFb" is the single word "ab". Never fails on any input.
// Unicode data (categories, case mapping, decomposition) come from utf8proc;
// where str.lower() differs from the simple mapping utf8proc has (U+0130 and
// final sigma) Python's behaviour is reproduced, see unicode.h.
//
// Speed: one pass over the bytes with an ASCII fast path; no allocation per
// character or per word (scratch buffers are per call). Outside ASCII, the
// per-code-point facts of the Basic Multilingual Plane (class, punctuation,
// str.lower() + NFD without Mn, as UTF-8) come from a table computed once per
// process from unicode.h (utf8proc) on first use (~1 MiB, immutable); words
// whose result depends on context (capital sigma, reorderable marks that
// survive accent stripping, code points above U+FFFF) take the general path.
// Vocabulary lookups in flat hash maps keyed by string_view (a direct table
// for pieces of one non-ASCII BMP code point); candidate pieces longer than
// the longest vocabulary entry with the same first two bytes are never looked
// up.
//
// Thread-safety: all classes are immutable after construction; const methods
// may be called concurrently. Ownership: WordpieceTokenizer points at a Vocab
// it does not own (which must outlive it); FullTokenizer owns its Vocab.
#ifndef BERTPS_COMMON_TEXT_TOKENIZER_H_
#define BERTPS_COMMON_TEXT_TOKENIZER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace bertps::text {

// Token <-> id. Ids are line numbers: a vocabulary of N lines has ids
// 0..N-1. As in tokenization.py load_vocab: each line is stripped of
// Python whitespace (str.strip()), an empty line is the token "" (it still
// takes an id), and a token that occurs twice maps to its LAST id (both
// ids map back to it). Lines end at '\n'; a last line without '\n' counts;
// ill-formed UTF-8 bytes are dropped.
class Vocab {
 public:
  static constexpr int32_t kNotFound = -1;

  // Reads a vocab.txt. NotFound if the file is missing, an error if it
  // cannot be read or has no lines.
  static absl::StatusOr<Vocab> Load(const std::string& path);
  // Parses the contents of a vocab.txt (same rules as Load; may be empty).
  static Vocab FromText(absl::string_view text);
  // Token i has id i (no stripping).
  static Vocab FromTokens(const std::vector<std::string>& tokens);

  // Number of ids (lines); larger than the number of distinct tokens when
  // there are duplicates.
  int32_t size() const { return static_cast<int32_t>(tokens_.size()); }
  // The id of `token`, or kNotFound.
  int32_t Find(absl::string_view token) const;
  // The id of "##" + `suffix`, or kNotFound (no concatenation needed).
  int32_t FindContinuation(absl::string_view suffix) const;
  // Token of `id` (0 <= id < size()).
  const std::string& token(int32_t id) const { return tokens_[id]; }
  // Longest token in bytes (for both maps): longer pieces never match.
  size_t max_token_bytes() const { return max_token_bytes_; }
  // A bound on the length of a token (continuation: of a "##" token's
  // suffix) of two or more bytes that starts with the two bytes `b0 b1`:
  // longer prefixes of a word starting with them never match.
  size_t max_token_bytes_from(uint8_t b0, uint8_t b1, bool continuation) const {
    return max_bytes_by_start_[(continuation ? 0x10000 : 0) | b0 << 8 | b1];
  }

 private:
  Vocab()
      : max_bytes_by_start_(2 * 0x10000, 0), bmp_ids_(2 * 0x10000, kNotFound) {}
  void Add(std::string token);

  std::vector<std::string> tokens_;                     // (size())
  absl::flat_hash_map<std::string, int32_t> ids_;       // token -> last id
  absl::flat_hash_map<std::string, int32_t> cont_ids_;  // "##x": x -> id
  size_t max_token_bytes_ = 0;
  // (2, 65536): word-initial, continuation; by the first two bytes; 255
  // stands for 255 or more.
  std::vector<uint8_t> max_bytes_by_start_;
  // (2, 65536): word-initial, continuation; the id of the token that is
  // exactly one code point U+0080..U+FFFF (the same as the maps give).
  std::vector<int32_t> bmp_ids_;
};

// tokenization.py BasicTokenizer.
class BasicTokenizer {
 public:
  explicit BasicTokenizer(bool do_lower_case = true)
      : do_lower_case_(do_lower_case) {}

  bool do_lower_case() const { return do_lower_case_; }

  std::vector<std::string> Tokenize(absl::string_view text) const;
  // Calls fn(token) for each token in order; `token` is never empty and is
  // valid only during the call (scratch is per call, so fn may itself use
  // any tokenizer).
  void ForEachToken(absl::string_view text,
                    absl::FunctionRef<void(absl::string_view)> fn) const;

 private:
  friend class FullTokenizer;
  template <typename Fn>
  void Run(absl::string_view text, Fn&& fn) const;

  bool do_lower_case_;
};

// tokenization.py WordpieceTokenizer over a Vocab it does not own.
class WordpieceTokenizer {
 public:
  static constexpr int kDefaultMaxInputCharsPerWord = 200;

  // InvalidArgument if `unk_token` is not in `vocab`.
  static absl::StatusOr<WordpieceTokenizer> Create(
      const Vocab* vocab, absl::string_view unk_token = "[UNK]",
      int max_input_chars_per_word = kDefaultMaxInputCharsPerWord);

  // Like tokenization.py: splits `text` on Python whitespace first, then
  // gives the pieces of each word ("##" on continuation pieces, the unk
  // token for a word that cannot be covered).
  std::vector<std::string> Tokenize(absl::string_view text) const;
  // Appends the ids of one word (no whitespace, well-formed UTF-8; empty
  // appends nothing).
  void EncodeWord(absl::string_view word, std::vector<int32_t>* ids) const;
  // Appends the pieces (strings) of one word.
  void TokenizeWord(absl::string_view word,
                    std::vector<std::string>* tokens) const;

  const Vocab& vocab() const { return *vocab_; }
  int32_t unk_id() const { return unk_id_; }

 private:
  WordpieceTokenizer(const Vocab* vocab, int32_t unk_id, int max_chars)
      : vocab_(vocab), unk_id_(unk_id), max_chars_(max_chars) {}
  // Greedy longest-match-first: calls piece(id, begin, end) per piece and
  // returns true, or returns false (the word is [UNK]) after possibly some
  // calls for a prefix that the caller must discard.
  template <typename PieceFn>
  bool Split(absl::string_view word, PieceFn&& piece) const;

  const Vocab* vocab_;
  int32_t unk_id_;
  int max_chars_;
};

// tokenization.py FullTokenizer.
class FullTokenizer {
 public:
  // Loads vocab.txt; errors if it cannot be read or lacks "[UNK]".
  static absl::StatusOr<std::unique_ptr<FullTokenizer>> Create(
      const std::string& vocab_path, bool do_lower_case = true);
  static absl::StatusOr<std::unique_ptr<FullTokenizer>> Create(
      Vocab vocab, bool do_lower_case = true);

  std::vector<std::string> Tokenize(absl::string_view text) const;
  std::vector<int32_t> Encode(absl::string_view text) const;
  // Appends the ids of `text` to *ids (reuse *ids to avoid allocations).
  void EncodeAppend(absl::string_view text, std::vector<int32_t>* ids) const;

  const Vocab& vocab() const { return *vocab_; }
  const BasicTokenizer& basic() const { return basic_; }
  const WordpieceTokenizer& wordpiece() const { return wordpiece_; }

 private:
  FullTokenizer(std::unique_ptr<Vocab> vocab, bool do_lower_case,
                WordpieceTokenizer wordpiece)
      : vocab_(std::move(vocab)),
        basic_(do_lower_case),
        wordpiece_(std::move(wordpiece)) {}

  std::unique_ptr<Vocab> vocab_;  // owned; wordpiece_ points at it
  BasicTokenizer basic_;
  WordpieceTokenizer wordpiece_;
};

}  // namespace bertps::text

#endif  // BERTPS_COMMON_TEXT_TOKENIZER_H_
