// Fuzzes LoadBertWeights (common/model/weights.h) for a small BERT, in two
// modes chosen by the first byte:
//   even: the rest is a safetensors file, loaded as given;
//   odd:  the rest fills the model's values as raw float bits (NaN and Inf
//         patterns included), written as a proper file and loaded back.
// Invariants: no crash; a refused file writes nothing (the parameters keep
// their sentinel); an accepted one leaves only finite values, and in the
// second mode exactly the values written (non-finite ones are refused by the
// name of their tensor).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/io/safetensors.h"
#include "common/model/bert_config.h"
#include "common/model/params.h"
#include "common/model/weights.h"
#include "fuzz/fuzz_input.h"

namespace {

bertps::BertConfig Config() {
  bertps::BertConfig c;
  c.vocab_size = 11;
  c.hidden_size = 4;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.intermediate_size = 8;
  c.max_position_embeddings = 6;
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const bertps::ParamLayout layout =
      bertps::ParamLayout::ForBert(Config(), bertps::BertTask::kPretrain);
  const int64_t n = layout.total_size();
  constexpr float kSentinel = -12345.0f;
  std::vector<float> params(n, kSentinel);
  std::string file;
  std::vector<float> written;
  bool all_finite = true;
  if (data[0] % 2 == 0) {
    file.assign(reinterpret_cast<const char*>(data) + 1, size - 1);
  } else {
    written.assign(n, 0.25f);
    const size_t bytes = std::min<size_t>(size - 1, sizeof(float) * n);
    std::memcpy(written.data(), data + 1, bytes);
    for (float v : written) all_finite &= std::isfinite(v);
    bertps::io::SafetensorsWriter w;
    for (const bertps::ParamSpec& p : layout.tensors()) {
      w.AddF32(p.name, p.shape, written.data() + p.offset);
    }
    auto s = w.Serialize();
    BERTPS_FUZZ_CHECK(s.ok(), "serialize: %s", s.status().ToString().c_str());
    file = std::move(*s);
  }
  auto reader = bertps::io::SafetensorsReader::FromBuffer(file, "fuzz");
  if (!reader.ok()) return 0;
  auto report = bertps::LoadBertWeights(*reader, "fuzz", layout,
                                        bertps::AllowMissing::kNone,
                                        params.data());
  if (!report.ok()) {
    for (int64_t i = 0; i < n; ++i) {
      BERTPS_FUZZ_CHECK(params[i] == kSentinel,
                        "refused (%s) but element %lld was written",
                        report.status().ToString().c_str(),
                        static_cast<long long>(i));
    }
    BERTPS_FUZZ_CHECK(data[0] % 2 == 0 || !all_finite,
                      "a finite model was refused: %s",
                      report.status().ToString().c_str());
    return 0;
  }
  for (int64_t i = 0; i < n; ++i) {
    BERTPS_FUZZ_CHECK(std::isfinite(params[i]), "element %lld is %g",
                      static_cast<long long>(i), params[i]);
    if (data[0] % 2 == 1) {
      BERTPS_FUZZ_CHECK(params[i] == written[i], "element %lld changed",
                        static_cast<long long>(i));
    }
  }
  return 0;
}
