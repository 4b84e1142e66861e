// A BertBatchView (what the model reads) over an io::BertBatch (what the
// data readers fill). Thread-safety: pure function; the view borrows.
#ifndef BERTPS_COMMON_MODEL_BATCH_VIEW_H_
#define BERTPS_COMMON_MODEL_BATCH_VIEW_H_

#include "common/io/bert_example.h"
#include "common/model/bert.h"

namespace bertps {

inline BertBatchView ViewOf(const io::BertBatch& b) {
  BertBatchView v;
  v.batch = b.batch;
  v.seq = b.seq;
  v.preds = b.preds;
  v.input_ids = b.input_ids.data();
  v.input_mask = b.input_mask.data();
  v.segment_ids = b.segment_ids.data();
  v.masked_lm_positions = b.masked_lm_positions.data();
  v.masked_lm_ids = b.masked_lm_ids.data();
  v.masked_lm_weights = b.masked_lm_weights.data();
  v.next_sentence_labels =
      b.next_sentence_labels.empty() ? nullptr : b.next_sentence_labels.data();
  v.label_ids = b.label_ids.empty() ? nullptr : b.label_ids.data();
  return v;
}

// Examples [first, first + n) of a view (a micro-batch of it).
inline BertBatchView SliceOf(const BertBatchView& v, int64_t first,
                             int64_t n) {
  BertBatchView s = v;
  s.batch = n;
  const int64_t t = first * v.seq, p = first * v.preds;
  s.input_ids += t;
  s.input_mask += t;
  s.segment_ids += t;
  if (s.masked_lm_positions != nullptr) s.masked_lm_positions += p;
  if (s.masked_lm_ids != nullptr) s.masked_lm_ids += p;
  if (s.masked_lm_weights != nullptr) s.masked_lm_weights += p;
  if (s.next_sentence_labels != nullptr) s.next_sentence_labels += first;
  if (s.label_ids != nullptr) s.label_ids += first;
  return s;
}

}  // namespace bertps

#endif  // BERTPS_COMMON_MODEL_BATCH_VIEW_H_
