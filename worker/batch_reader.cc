#include "worker/batch_reader.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace bertps {

absl::Status ReadExamples(io::IndexedExampleSource* source, int64_t first,
                          int64_t count, const BatchShape& shape,
                          const BertConfig& config, io::BertBatch* out) {
  return ReadExampleRanges(source, {first}, count, shape, config, out);
}

absl::Status ReadExampleRanges(io::IndexedExampleSource* source,
                               const std::vector<int64_t>& firsts,
                               int64_t count, const BatchShape& shape,
                               const BertConfig& config, io::BertBatch* out) {
  io::BertBatch& b = *out;
  b = io::BertBatch();
  b.seq = shape.seq;
  b.preds = shape.preds;
  b.first_position = firsts.empty() ? -1 : firsts[0];
  std::string record;
  auto check = [&](size_t s, size_t p) -> absl::Status {
    if (static_cast<int>(s) != shape.seq || static_cast<int>(p) != shape.preds) {
      return absl::InvalidArgumentError(absl::StrCat(
          source->last_position(), ": example shape (", s, ", ", p,
          ") differs from the first example's (", shape.seq, ", ",
          shape.preds, ")"));
    }
    return absl::OkStatus();
  };
  const bool classify = shape.task == BertTask::kClassify;
  for (int64_t k = 0; k < count * static_cast<int64_t>(firsts.size()); ++k) {
    RETURN_IF_ERROR(source->Read(firsts[k / count] + k % count, &record));
    // Each example checked alone, so that an error names it.
    io::BertBatch one;
    one.seq = shape.seq;
    one.preds = shape.preds;
    if (!classify) {
      absl::StatusOr<io::PretrainExample> e = io::DecodePretrainExample(record);
      if (!e.ok()) return Annotate(e.status(), source->last_position());
      RETURN_IF_ERROR(check(e->input_ids.size(), e->masked_lm_ids.size()));
      io::AppendExample(*e, &one);
      io::AppendExample(*e, &b);
    } else {
      absl::StatusOr<io::ClassifyExample> e = io::DecodeClassifyExample(record);
      if (!e.ok()) return Annotate(e.status(), source->last_position());
      RETURN_IF_ERROR(check(e->input_ids.size(), 0));
      io::AppendExample(*e, &one);
      io::AppendExample(*e, &b);
    }
    absl::Status valid = one.Validate(
        static_cast<int>(config.vocab_size),
        static_cast<int>(config.max_position_embeddings),
        static_cast<int>(config.type_vocab_size),
        classify ? static_cast<int>(config.num_labels) : 0);
    if (!valid.ok()) return Annotate(valid, source->last_position());
  }
  return absl::OkStatus();
}

}  // namespace bertps
