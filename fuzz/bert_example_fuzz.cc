// Fuzzes the tf.train.Example decoders of BERT examples
// (common/io/bert_example.h) on arbitrary record bytes. Invariants: no
// crash; errors are InvalidArgument; a decoded example re-encodes to bytes
// that decode to the same example; a decoded example appended to a batch
// passes or fails BertBatch::Validate cleanly.
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "common/io/bert_example.h"
#include "fuzz/fuzz_input.h"
#include "fuzz/proto_mutator.h"

using bertps::io::BertBatch;
using bertps::io::ClassifyExample;
using bertps::io::PretrainExample;

namespace {

bool Same(const PretrainExample& a, const PretrainExample& b) {
  return a.input_ids == b.input_ids && a.input_mask == b.input_mask &&
         a.segment_ids == b.segment_ids &&
         a.masked_lm_positions == b.masked_lm_positions &&
         a.masked_lm_ids == b.masked_lm_ids &&
         // Bitwise: NaN weights must survive too.
         std::string(reinterpret_cast<const char*>(a.masked_lm_weights.data()),
                     4 * a.masked_lm_weights.size()) ==
             std::string(
                 reinterpret_cast<const char*>(b.masked_lm_weights.data()),
                 4 * b.masked_lm_weights.size()) &&
         a.next_sentence_label == b.next_sentence_label;
}

}  // namespace

[[maybe_unused]] static const bool kQuiet = bertps::fuzz::QuietProtobuf();

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<PretrainExample> p = bertps::io::DecodePretrainExample(bytes);
  if (p.ok()) {
    absl::StatusOr<PretrainExample> again = bertps::io::DecodePretrainExample(
        bertps::io::EncodePretrainExample(*p));
    BERTPS_FUZZ_CHECK(again.ok() && Same(*p, *again),
                      "pretrain example does not survive a round trip");
    BertBatch batch;
    batch.seq = static_cast<int>(p->input_ids.size());
    batch.preds = static_cast<int>(p->masked_lm_positions.size());
    if (p->input_mask.size() == p->input_ids.size() &&
        p->segment_ids.size() == p->input_ids.size() &&
        p->masked_lm_ids.size() == p->masked_lm_positions.size() &&
        p->masked_lm_weights.size() == p->masked_lm_positions.size()) {
      bertps::io::AppendExample(*p, &batch);
      absl::Status v = batch.Validate(30522, 512, 2, 0);
      BERTPS_FUZZ_CHECK(v.ok() || absl::IsInvalidArgument(v), "%s",
                        v.ToString().c_str());
    }
  } else {
    BERTPS_FUZZ_CHECK(absl::IsInvalidArgument(p.status()), "%s",
                      p.status().ToString().c_str());
  }
  absl::StatusOr<ClassifyExample> c = bertps::io::DecodeClassifyExample(bytes);
  if (c.ok()) {
    absl::StatusOr<ClassifyExample> again = bertps::io::DecodeClassifyExample(
        bertps::io::EncodeClassifyExample(*c));
    BERTPS_FUZZ_CHECK(again.ok() && again->input_ids == c->input_ids &&
                          again->input_mask == c->input_mask &&
                          again->segment_ids == c->segment_ids &&
                          again->label_id == c->label_id,
                      "classify example does not survive a round trip");
    if (c->input_mask.size() == c->input_ids.size() &&
        c->segment_ids.size() == c->input_ids.size()) {
      BertBatch batch;
      batch.seq = static_cast<int>(c->input_ids.size());
      bertps::io::AppendExample(*c, &batch);
      absl::Status v = batch.Validate(30522, 512, 2, 2);
      BERTPS_FUZZ_CHECK(v.ok() || absl::IsInvalidArgument(v), "%s",
                        v.ToString().c_str());
    }
  } else {
    BERTPS_FUZZ_CHECK(absl::IsInvalidArgument(c.status()), "%s",
                      c.status().ToString().c_str());
  }
  return 0;
}
