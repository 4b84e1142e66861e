// Classification records from labelled text, as google-research/bert
// run_classifier.py's convert_single_example builds them for a single text
// (no text_b), with deterministic train/dev/test splits:
//
//   input       JSON lines {"id": ..., "label": ..., "text": ...} (what
//               `bert_local extract-labelled` writes); ids should be unique
//   example     tokens = FullTokenizer(text), cut to max_seq_length - 2;
//               input_ids [CLS] tokens [SEP] then 0s up to S, input_mask 1 on
//               the real positions, segment_ids all 0, label_id the label's
//               index in options.labels (io::ClassifyExample)
//   split       SplitOf(id): u = a 64-bit hash of (seed, id) mapped to [0, 1);
//               test if u < test_fraction, dev if u < test_fraction +
//               dev_fraction, else train. A pure function of (seed, id): the
//               same document lands in the same split whatever the order of
//               the input and however it is sharded
//   output      <dir>/train.tfrecord, dev.tfrecord, test.tfrecord
//               (io::EncodeClassifyExample), each ordered by a second hash of
//               (seed, id) (then id, label, text): a shuffled order that does
//               not depend on the input order, so the bytes are a function of
//               the set of documents, the vocab and the options; plus
//               <dir>/labels.txt (label i on line i)
//
// The hash is FNV-1a 64 over the seed's 8 little-endian bytes and the id's
// bytes, finished with the SplitMix64 mixer: fixed, platform-independent.
//
// Thread-safety: the functions are stateless; the tokenizer is only read.
#ifndef BERTPS_COMMON_TEXT_CLASSIFY_DATA_H_
#define BERTPS_COMMON_TEXT_CLASSIFY_DATA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/io/bert_example.h"
#include "common/text/tokenizer.h"

namespace bertps::text {

struct ClassifyDataOptions {
  int max_seq_length = 128;         // S
  std::vector<std::string> labels;  // label i has label_id i
  double dev_fraction = 0.1, test_fraction = 0.1;
  uint64_t seed = 12345;

  // InvalidArgument unless S >= 2, labels are non-empty, distinct and at
  // least one, and the fractions are in [0, 1] with a sum <= 1.
  absl::Status Validate() const;
};

enum class Split { kTrain, kDev, kTest };
// "train", "dev", "test".
const char* SplitName(Split split);

// The split of the document with this id (see above).
Split SplitOf(absl::string_view doc_id, const ClassifyDataOptions& options);

// One record. InvalidArgument for an unknown label (naming it and the known
// ones), invalid options, or a vocab without [CLS] or [SEP].
absl::StatusOr<io::ClassifyExample> MakeClassifyExample(
    absl::string_view text, absl::string_view label,
    const FullTokenizer& tokenizer, const ClassifyDataOptions& options);

// One labelled document of the input.
struct LabelledText {
  std::string id;
  std::string label;
  std::string text;
};

// Parses JSON lines {"id","label","text"} (other keys ignored; blank lines
// skipped). InvalidArgument naming `name` and the line for malformed JSON or
// a missing / non-string field.
absl::StatusOr<std::vector<LabelledText>> ParseLabelledJsonl(
    absl::string_view data, const std::string& name);
// Reads and parses a file (NotFound if missing).
absl::StatusOr<std::vector<LabelledText>> ReadLabelledJsonl(
    const std::string& path);

struct ClassifyDataStats {
  int64_t documents = 0;
  int64_t examples[3] = {0, 0, 0};  // by Split
  int64_t truncated = 0;            // texts of more than S - 2 tokens
  int64_t tokens = 0;               // text tokens before truncation
  // Per label (options.labels order), per split.
  std::vector<std::vector<int64_t>> label_counts;  // (labels, 3)
  int64_t output_bytes = 0;                        // framed TFRecord bytes

  // One line of JSON with every field above (label counts by name).
  std::string ToJson(const ClassifyDataOptions& options) const;
};

// <output_dir>/<SplitName(split)>.tfrecord.
std::string ClassifySplitPath(const std::string& output_dir, Split split);

// Writes the three split files and labels.txt under `output_dir` (created
// if needed; each file appears under its final name only when complete).
// Errors: invalid options, an unknown label (naming the document id), I/O
// errors naming the file. *stats (may be null) receives every field.
absl::Status WriteClassifyData(const std::vector<LabelledText>& documents,
                               const FullTokenizer& tokenizer,
                               const ClassifyDataOptions& options,
                               const std::string& output_dir,
                               ClassifyDataStats* stats);

}  // namespace bertps::text

#endif  // BERTPS_COMMON_TEXT_CLASSIFY_DATA_H_
