// Fuzzes SafetensorsReader (common/io/safetensors.h) on arbitrary file
// contents. Invariants: no crash; an accepted file's tensors lie inside the
// data section without overlap and with byte sizes matching dtype x shape,
// every read of an accepted tensor succeeds (or fails with InvalidArgument
// for an unsupported conversion) and never reads outside the buffer; an
// accepted file survives a write/read round trip unchanged.
#include <cstdint>
#include <string>

#include "common/io/safetensors.h"
#include "fuzz/fuzz_input.h"

using bertps::io::DType;
using bertps::io::SafetensorsReader;
using bertps::io::SafetensorsWriter;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<SafetensorsReader> r = SafetensorsReader::FromBuffer(
      std::string(reinterpret_cast<const char*>(data), size), "fuzz");
  if (!r.ok()) {
    BERTPS_FUZZ_CHECK(absl::IsDataLoss(r.status()) ||
                          absl::IsInvalidArgument(r.status()),
                      "%s", r.status().ToString().c_str());
    return 0;
  }
  SafetensorsWriter w;
  for (const auto& [k, v] : r->metadata()) w.SetMetadata(k, v);
  int64_t last_end = 0;
  for (const bertps::io::TensorInfo& t : r->tensors()) {
    BERTPS_FUZZ_CHECK(t.data_begin >= last_end && t.data_end >= t.data_begin,
                      "%s: [%lld, %lld) after %lld", t.name.c_str(),
                      static_cast<long long>(t.data_begin),
                      static_cast<long long>(t.data_end),
                      static_cast<long long>(last_end));
    last_end = t.data_end;
    BERTPS_FUZZ_CHECK(
        t.num_bytes() == t.num_elements() * bertps::io::DTypeSize(t.dtype),
        "%s: %lld bytes for %lld elements", t.name.c_str(),
        static_cast<long long>(t.num_bytes()),
        static_cast<long long>(t.num_elements()));
    BERTPS_FUZZ_CHECK(r->Find(t.name) != nullptr, "Find(%s)", t.name.c_str());
    absl::StatusOr<absl::string_view> raw = r->RawBytes(t.name);
    BERTPS_FUZZ_CHECK(raw.ok() && static_cast<int64_t>(raw->size()) == t.num_bytes(),
                      "RawBytes(%s)", t.name.c_str());
    if (t.num_elements() <= (1 << 20)) {
      absl::StatusOr<std::vector<float>> f = r->ReadF32(t.name);
      BERTPS_FUZZ_CHECK(f.ok() || absl::IsInvalidArgument(f.status()), "%s",
                        f.status().ToString().c_str());
      absl::StatusOr<std::vector<int32_t>> i = r->ReadI32(t.name);
      BERTPS_FUZZ_CHECK(i.ok() || absl::IsInvalidArgument(i.status()), "%s",
                        i.status().ToString().c_str());
    }
    w.AddRaw(t.name, t.dtype, t.shape, raw->data());
  }
  // Round trip: what the writer makes of the tensors reads back the same.
  absl::StatusOr<std::string> bytes = w.Serialize();
  BERTPS_FUZZ_CHECK(bytes.ok(), "re-serialize: %s",
                    bytes.status().ToString().c_str());
  absl::StatusOr<SafetensorsReader> back =
      SafetensorsReader::FromBuffer(*bytes, "round trip");
  BERTPS_FUZZ_CHECK(back.ok(), "round trip: %s",
                    back.status().ToString().c_str());
  BERTPS_FUZZ_CHECK(back->tensors().size() == r->tensors().size() &&
                        back->metadata() == r->metadata(),
                    "round trip changed the header");
  for (const bertps::io::TensorInfo& t : r->tensors()) {
    const bertps::io::TensorInfo* u = back->Find(t.name);
    BERTPS_FUZZ_CHECK(u != nullptr && u->dtype == t.dtype && u->shape == t.shape &&
                          *back->RawBytes(t.name) == *r->RawBytes(t.name),
                      "round trip changed %s", t.name.c_str());
  }
  return 0;
}
