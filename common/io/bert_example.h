// BERT's training examples stored as tf.train.Example records in TFRecord
// files, with the feature names of google-research/bert:
//
//   pretraining (create_pretraining_data.py), S = max_seq_length,
//   P = max_predictions_per_seq:
//     input_ids, input_mask, segment_ids        int64_list (S)
//     masked_lm_positions, masked_lm_ids        int64_list (P)
//     masked_lm_weights                         float_list (P)
//     next_sentence_labels                      int64_list (1)
//   classification (run_classifier.py):
//     input_ids, input_mask, segment_ids        int64_list (S)
//     label_ids                                 int64_list (1)
//     is_real_example                           int64_list (1), written as 1,
//                                               ignored when read
//
// Decoding checks every feature's presence, kind, lengths and int32 range
// (InvalidArgument naming the feature); BertBatch::Validate then checks the
// values against the model's sizes, so bad data never reaches the model.
//
// ExampleStream reads the records of a sorted, optionally sharded list of
// files in order; FillPretrainBatch / FillClassifyBatch decode B examples
// into a BertBatch, wrapping around to the first file at the end (counting
// epochs).
//
// Thread-safety: the functions are thread-safe; an ExampleStream and a
// BertBatch need external synchronisation.
#ifndef BERTPS_COMMON_IO_BERT_EXAMPLE_H_
#define BERTPS_COMMON_IO_BERT_EXAMPLE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/io/tfrecord.h"

namespace bertps {
namespace io {

// S: sequence length, P: masked positions per sequence, B: batch size.

struct PretrainExample {
  std::vector<int32_t> input_ids;            // (S)
  std::vector<int32_t> input_mask;           // (S)
  std::vector<int32_t> segment_ids;          // (S)
  std::vector<int32_t> masked_lm_positions;  // (P)
  std::vector<int32_t> masked_lm_ids;        // (P)
  std::vector<float> masked_lm_weights;      // (P)
  int32_t next_sentence_label = 0;           // 1 = random next, 0 = IsNext
};

struct ClassifyExample {
  std::vector<int32_t> input_ids;    // (S)
  std::vector<int32_t> input_mask;   // (S)
  std::vector<int32_t> segment_ids;  // (S)
  int32_t label_id = 0;
};

// Serialized tf.train.Example (deterministic bytes for equal input).
std::string EncodePretrainExample(const PretrainExample& example);
absl::StatusOr<PretrainExample> DecodePretrainExample(
    absl::string_view serialized);

std::string EncodeClassifyExample(const ClassifyExample& example);
absl::StatusOr<ClassifyExample> DecodeClassifyExample(
    absl::string_view serialized);

// One batch in flat row-major arrays.
struct BertBatch {
  int batch = 0;                              // B
  int seq = 0;                                // S
  int preds = 0;                              // P (0 for classification)
  std::vector<int32_t> input_ids;             // (B, S)
  std::vector<int32_t> input_mask;            // (B, S)
  std::vector<int32_t> segment_ids;           // (B, S)
  std::vector<int32_t> masked_lm_positions;   // (B, P)
  std::vector<int32_t> masked_lm_ids;         // (B, P)
  std::vector<float> masked_lm_weights;       // (B, P)
  std::vector<int32_t> next_sentence_labels;  // (B), pretraining; else empty
  std::vector<int32_t> label_ids;             // (B), classification; else empty
  // Read from a stream of the job's data: the stream position (examples
  // before it, epochs included) of the first example; -1 otherwise.
  int64_t first_position = -1;

  // Checks sizes and values: B, S > 0, S <= max_positions; ids in
  // [0, vocab_size); mask 0/1; segment ids in [0, type_vocab); masked
  // positions in [0, S); weights finite and >= 0; next sentence labels 0/1;
  // label ids in [0, num_labels) (num_labels 0: no labels allowed).
  // InvalidArgument naming the field and the (row, column).
  absl::Status Validate(int vocab_size, int max_positions, int type_vocab,
                        int num_labels) const;
};

// Appends one example as the next row of `batch` (batch->batch grows by 1;
// the caller checks that S and P match batch->seq and batch->preds).
void AppendExample(const PretrainExample& example, BertBatch* batch);
void AppendExample(const ClassifyExample& example, BertBatch* batch);

// The sorted, de-duplicated union of the files matching `patterns` (glob(3);
// record indices, *.bertps-index, left out), keeping those whose index i
// satisfies i % num_shards == shard.
// NotFound if a pattern matches nothing or the shard gets no file. `check`
// (if set) sees every match first, before anything else is done with it
// (stat included); its error is returned (the coordinator's roots:
// common/cluster/path_policy.h, CheckInputFile).
absl::StatusOr<std::vector<std::string>> MatchShardFiles(
    const std::vector<std::string>& patterns, int shard = 0,
    int num_shards = 1,
    const std::function<absl::Status(const std::string&)>& check = nullptr);

class ExampleStream {
 public:
  // Files as MatchShardFiles; nothing is opened until the first Next().
  static absl::StatusOr<std::unique_ptr<ExampleStream>> Open(
      const std::vector<std::string>& patterns, int shard = 0,
      int num_shards = 1);
  // A stream over exactly these files, in this order.
  explicit ExampleStream(std::vector<std::string> files);

  // Next record in file order; false after the last record of the last file.
  absl::StatusOr<bool> Next(std::string* record);
  // Starts again at the first file and increments epoch().
  void Reset();
  // Number of Reset() calls: completed passes when used by Fill*Batch.
  int64_t epoch() const { return epoch_; }
  const std::vector<std::string>& files() const { return files_; }
  // "file@offset" of the last record returned by Next (for messages).
  std::string last_position() const;

 private:
  std::vector<std::string> files_;
  size_t file_index_ = 0;  // File being read (or to open next).
  std::unique_ptr<TFRecordReader> reader_;
  int64_t epoch_ = 0;
  std::string last_file_;
  int64_t last_offset_ = -1;
};

// Reads B examples (wrapping around to the first file at the end, which
// increments stream.epoch()), checks that each has S tokens and P
// predictions, and fills *out (resizing its arrays; label_ids left empty).
absl::Status FillPretrainBatch(ExampleStream& stream, int batch, int seq,
                               int preds, BertBatch* out);
// Same for classification examples: preds = 0, masked_lm_* and
// next_sentence_labels left empty, label_ids filled.
absl::Status FillClassifyBatch(ExampleStream& stream, int batch, int seq,
                               BertBatch* out);

}  // namespace io
}  // namespace bertps

#endif  // BERTPS_COMMON_IO_BERT_EXAMPLE_H_
