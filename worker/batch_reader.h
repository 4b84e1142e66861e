// The one reader of a member's batch, for train workers and pipeline
// stages: `count` examples from stream position `first` of the job's
// example stream (wrapping around at the end of the data: epochs), each
// decoded and validated alone (its shape against the job's, token ids in
// the vocabulary, positions, segment ids, labels and masks), so that a bad
// example is named by its file and offset (file@offset), not by a row of a
// batch. Appends them to a new batch in *out whose first_position is
// `first` (what the push says it trained on).
// ReadExampleRanges: the same for several ranges of `count` examples, one
// after another in one batch (a train member computing several slots reads
// each slot's share; first_position is that of the first range).
// Thread-safety: a function; the source needs external synchronisation.
#ifndef BERTPS_WORKER_BATCH_READER_H_
#define BERTPS_WORKER_BATCH_READER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "common/io/bert_example.h"
#include "common/io/record_index.h"
#include "common/model/bert_config.h"
#include "common/model/params.h"

namespace bertps {

struct BatchShape {
  BertTask task = BertTask::kPretrain;
  int seq = 0;    // tokens per example (the job's first example's)
  int preds = 0;  // masked positions per example (pretraining)
};

absl::Status ReadExamples(io::IndexedExampleSource* source, int64_t first,
                          int64_t count, const BatchShape& shape,
                          const BertConfig& config, io::BertBatch* out);
absl::Status ReadExampleRanges(io::IndexedExampleSource* source,
                               const std::vector<int64_t>& firsts,
                               int64_t count, const BatchShape& shape,
                               const BertConfig& config, io::BertBatch* out);

}  // namespace bertps

#endif  // BERTPS_WORKER_BATCH_READER_H_
