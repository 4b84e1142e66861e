// BERT pretraining instances from raw text, the algorithm of
// google-research/bert create_pretraining_data.py:
//
//   input       UTF-8 text files, one sentence per line, a blank line between
//               documents; each line is tokenized with FullTokenizer and
//               lines that give no tokens are skipped
//   documents   shuffled; then dupe_factor passes over them, each document
//               giving instances as below
//   instances   per document, a target length of max_num_tokens
//               (= max_seq_length - 3), or with probability short_seq_prob
//               randint(2, max_num_tokens); sentences are accumulated into a
//               chunk until it reaches the target (or the document ends);
//               A = the first randint(1, len(chunk) - 1) sentences (1 if the
//               chunk has one); B is a random next (label 1: from another
//               document, a random start sentence, filled up to target -
//               len(A); the chunk's unused sentences are put back) when the
//               chunk has one sentence or with probability 0.5, otherwise the
//               actual next (label 0: the rest of the chunk);
//               truncate_seq_pair trims the longer of A and B, at the front
//               or back with probability 0.5 each, to max_num_tokens;
//               layout [CLS] A [SEP] B [SEP], segment ids 0 then 1
//   masking     candidates: every position but [CLS]/[SEP] (whole-word mask:
//               a "##" piece joins the previous candidate's group, as the
//               reference does, even across a [SEP]); groups shuffled;
//               num_to_predict = min(max_predictions_per_seq,
//               max(1, round(len(tokens) * masked_lm_prob))) with Python 3
//               round (half to even); groups taken in order while they fit;
//               each position: 80% [MASK], 10% kept, 10% a uniformly random id
//               of the whole vocabulary; positions sorted
//   output      all instances shuffled, written round-robin into
//               num_output_files TFRecord files of tf.train.Example
//               (io::EncodePretrainExample), ids/mask/segments padded to
//               max_seq_length, predictions padded to max_predictions_per_seq
//               with position 0, id 0, weight 0
//
// Randomness: one std::mt19937_64 seeded with random_seed drives every choice
// in the reference's order, with Python-like helpers (random() from 53 bits,
// randint by rejection, Fisher-Yates shuffle from the back). The output is a
// pure function of (input bytes, vocab, options), byte for byte, on any
// platform. Bit parity with Python's `random` module (a 32-bit Mersenne
// Twister with its own seeding) is not attempted: the algorithm and its
// statistics are the reference's, the particular draws are not.
//
// Differences from the reference, on purpose: each input file starts a new
// document (the reference carries a document across files that lack a
// trailing blank line); a line is blank when it is empty after stripping
// ASCII whitespace; token ids are used throughout, so a vocabulary with a
// duplicated token keeps each line's id where the reference maps the token to
// its last id.
//
// Memory: every document's token ids and every instance are held in memory
// until written (as the reference does), about 4 bytes per input token plus
// ~(4 * max_seq_length + 8 * max_predictions_per_seq) bytes per instance.
//
// Thread-safety: the functions are stateless; the tokenizer is only read.
#ifndef BERTPS_COMMON_TEXT_PRETRAINING_DATA_H_
#define BERTPS_COMMON_TEXT_PRETRAINING_DATA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/io/bert_example.h"
#include "common/text/tokenizer.h"

namespace bertps::text {

// The reference's flags and defaults.
struct PretrainingDataOptions {
  int max_seq_length = 128;          // S
  int max_predictions_per_seq = 20;  // P
  double masked_lm_prob = 0.15;
  int dupe_factor = 10;
  double short_seq_prob = 0.1;
  uint64_t random_seed = 12345;
  bool do_whole_word_mask = false;

  // InvalidArgument unless 5 <= S (room for one token in A and in B),
  // P >= 1, dupe_factor >= 1 and both probabilities are in [0, 1].
  absl::Status Validate() const;
};

struct PretrainingDataStats {
  // Input.
  int64_t input_files = 0;
  int64_t input_bytes = 0;
  int64_t documents = 0;     // non-empty documents
  int64_t sentences = 0;     // lines with at least one token
  int64_t input_tokens = 0;  // WordPiece tokens of those lines
  // Instances (over all dupe_factor passes).
  int64_t instances = 0;
  int64_t tokens = 0;          // real tokens, [CLS]/[SEP] included (sum of L)
  int64_t num_to_predict = 0;  // sum of num_to_predict (the masking target)
  int64_t capped = 0;          // instances where max_predictions_per_seq bound
  int64_t masked = 0;          // masked positions (weight-1 predictions)
  int64_t masked_as_mask = 0;  // replaced by [MASK]
  int64_t masked_kept = 0;     // left as they were
  int64_t masked_random = 0;   // replaced by a random id
  int64_t random_next = 0;     // next_sentence_label 1
  int64_t is_next = 0;         // next_sentence_label 0
  int64_t single_sentence_chunks = 0;  // chunks of one sentence: random next
  // Output.
  int64_t output_files = 0;
  int64_t output_bytes = 0;  // framed TFRecord bytes

  // One line of JSON with every field above.
  std::string ToJson() const;
};

// A tokenized document: sentences of token ids.
using TokenizedDocument = std::vector<std::vector<int32_t>>;

// One instance before padding. L = tokens.size() <= S, M <= P.
struct PretrainingInstance {
  std::vector<int32_t> tokens;            // (L) [CLS] A [SEP] B [SEP], masked
  int32_t segment_a_length = 0;           // len(A): ids 0 on the first
                                          // len(A) + 2 positions, then 1
  std::vector<int32_t> masked_positions;  // (M) sorted
  std::vector<int32_t> masked_labels;     // (M) the original ids there
  bool is_random_next = false;
};

// Splits `text` (one file's contents) into documents and appends them to
// *documents: a new document at the start and after each blank line; lines
// without tokens are dropped, as are empty documents. Updates stats
// (input_bytes, documents, sentences, input_tokens) if not null.
void AppendDocuments(const FullTokenizer& tokenizer, absl::string_view text,
                     std::vector<TokenizedDocument>* documents,
                     PretrainingDataStats* stats);

// Every instance of the reference's create_training_instances over
// `documents` (shuffled as the reference does, through an index), in the
// final shuffled order. Errors: invalid options; `vocab` lacks [CLS], [SEP]
// or [MASK]; no documents. Updates the instance fields of stats if not null.
absl::StatusOr<std::vector<PretrainingInstance>> CreateInstances(
    const std::vector<TokenizedDocument>& documents, const Vocab& vocab,
    const PretrainingDataOptions& options, PretrainingDataStats* stats);

// The instance padded to the options' S and P.
io::PretrainExample ToPretrainExample(const PretrainingInstance& instance,
                                      const PretrainingDataOptions& options);

// Output file i of n: "<prefix>-<i>-of-<n>.tfrecord", numbers 5 digits wide.
std::string PretrainingOutputPath(const std::string& prefix, int i, int n);

// The whole pipeline: reads `input_files` in the given order, creates the
// instances and writes them round-robin into num_output_files files named by
// PretrainingOutputPath (the parent directory is created). Each file is
// written under a temporary name and renamed when complete. *stats (may be
// null) receives every field. Errors name the file at fault; nothing is left
// under a final name on error, though files completed before it remain.
absl::Status CreatePretrainingData(const FullTokenizer& tokenizer,
                                   const std::vector<std::string>& input_files,
                                   const PretrainingDataOptions& options,
                                   const std::string& output_prefix,
                                   int num_output_files,
                                   PretrainingDataStats* stats);

}  // namespace bertps::text

#endif  // BERTPS_COMMON_TEXT_PRETRAINING_DATA_H_
