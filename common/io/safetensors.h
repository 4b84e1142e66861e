// Reader and writer for the Hugging Face safetensors checkpoint format.
//
// File layout:
//   u64 (little-endian) N
//   N bytes of UTF-8 JSON, possibly padded with trailing spaces:
//     {"__metadata__": {"key": "value", ...},            (optional)
//      "<tensor name>": {"dtype": "F32", "shape": [d0, d1, ...],
//                        "data_offsets": [begin, end]}, ...}
//   the data: each tensor's raw little-endian, row-major elements at
//   [begin, end) counted from the first byte after the header.
//
// SafetensorsReader loads the whole file into memory with one read and
// validates everything up front (header length, JSON, every entry's dtype,
// shape and offsets, sizes, overlaps), so later reads cannot fail on
// corruption. Errors about the file are DataLossError naming the file and the
// tensor; caller errors (wrong element count, unsupported conversion) are
// InvalidArgumentError; an unknown tensor name is NotFoundError.
//
// SafetensorsWriter collects tensors (copying their data) and writes them in
// insertion order with 8-byte aligned data, the header padded with spaces as
// the reference implementation does.
//
// Thread-safety: a SafetensorsReader is immutable after Open and safe to
// share across threads. A SafetensorsWriter needs external synchronisation.
#ifndef BERTPS_COMMON_IO_SAFETENSORS_H_
#define BERTPS_COMMON_IO_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace bertps {
namespace io {

enum class DType { kF32, kF16, kBF16, kI32, kI64, kF64, kU8, kI8, kBool };

// "F32", "F16", "BF16", "I32", "I64", "F64", "U8", "I8", "BOOL".
absl::string_view DTypeName(DType dtype);
// Inverse of DTypeName; InvalidArgument for anything else.
absl::StatusOr<DType> ParseDType(absl::string_view name);
// Bytes per element.
int DTypeSize(DType dtype);

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // Empty for a scalar.
  // Byte range of the data, relative to the start of the data section.
  int64_t data_begin = 0;
  int64_t data_end = 0;

  int64_t num_elements() const;
  int64_t num_bytes() const { return data_end - data_begin; }
};

class SafetensorsReader {
 public:
  // Reads and validates the file.
  static absl::StatusOr<SafetensorsReader> Open(const std::string& path);
  // Validates `bytes` (the content of a file); `name_for_errors` stands for
  // the file name in messages.
  static absl::StatusOr<SafetensorsReader> FromBuffer(
      std::string bytes, std::string name_for_errors);

  SafetensorsReader(SafetensorsReader&&) = default;
  SafetensorsReader& operator=(SafetensorsReader&&) = default;

  // All tensors, in the order of their data in the file.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // nullptr if there is no tensor of that name.
  const TensorInfo* Find(absl::string_view name) const;
  const std::map<std::string, std::string>& metadata() const {
    return metadata_;
  }

  // Copies the tensor into dst[0, n) as float, converting F16/BF16/F64.
  // n must equal the tensor's element count.
  absl::Status ReadF32(absl::string_view name, float* dst, int64_t n) const;
  absl::StatusOr<std::vector<float>> ReadF32(absl::string_view name) const;
  // Accepts I32, or I64 whose values all fit in int32.
  absl::StatusOr<std::vector<int32_t>> ReadI32(absl::string_view name) const;
  // The raw little-endian bytes of the tensor (a view into this reader).
  absl::StatusOr<absl::string_view> RawBytes(absl::string_view name) const;

 private:
  SafetensorsReader() = default;
  absl::StatusOr<const TensorInfo*> Lookup(absl::string_view name) const;
  absl::string_view Bytes(const TensorInfo& t) const;

  std::string file_;    // For messages.
  std::string buffer_;  // The whole file.
  size_t data_start_ = 0;
  std::vector<TensorInfo> tensors_;
  absl::flat_hash_map<std::string, size_t> index_;  // name -> tensors_ index.
  std::map<std::string, std::string> metadata_;
};

class SafetensorsWriter {
 public:
  // Each Add copies num_elements(shape) elements from `data`. A negative
  // dimension or a repeated name makes Serialize/Write fail with
  // InvalidArgument.
  void AddF32(std::string name, std::vector<int64_t> shape, const float* data);
  // Stores float data as BF16 (round to nearest even).
  void AddBF16FromF32(std::string name, std::vector<int64_t> shape,
                      const float* data);
  // Stores float data as F16 (round to nearest even).
  void AddF16FromF32(std::string name, std::vector<int64_t> shape,
                     const float* data);
  void AddI32(std::string name, std::vector<int64_t> shape,
              const int32_t* data);
  // Any dtype: copies num_elements(shape) * DTypeSize(dtype) bytes, which
  // must already be little-endian elements of that dtype.
  void AddRaw(std::string name, DType dtype, std::vector<int64_t> shape,
              const void* data);
  // F32 data by reference: nothing is copied now; `data` must stay valid
  // and unchanged until the last Serialize/SerializeTo/Write.
  void AddF32Ref(std::string name, std::vector<int64_t> shape,
                 const float* data);
  void SetMetadata(std::string key, std::string value);

  // The complete file content.
  absl::StatusOr<std::string> Serialize() const;
  // The same into *out, replacing its content but keeping its capacity: a
  // buffer reused across files of one size allocates (and faults in) its
  // pages once. On error *out is unspecified.
  absl::Status SerializeTo(std::string* out) const;
  // Writes atomically: path.tmp, fsync, rename, fsync of the directory.
  absl::Status Write(const std::string& path) const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::string bytes;
    const char* ref = nullptr;  // AddF32Ref: the data, ref_size bytes
    size_t ref_size = 0;
    size_t size() const { return ref != nullptr ? ref_size : bytes.size(); }
  };
  // Checks the shape and returns the element count, or -1 (recording the
  // error) if invalid.
  int64_t CheckShape(const std::string& name,
                     const std::vector<int64_t>& shape);

  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
  absl::Status error_;  // First error of an Add, reported by Serialize.
};

}  // namespace io
}  // namespace bertps

#endif  // BERTPS_COMMON_IO_SAFETENSORS_H_
