#include "common/io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/io/file_util.h"
#include "common/io/half.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace bertps {
namespace io {
namespace {

using Json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // 100 MB, as the reference.
constexpr char kMetadataKey[] = "__metadata__";

struct DTypeEntry {
  DType dtype;
  const char* name;
  int size;
};
constexpr DTypeEntry kDTypes[] = {
    {DType::kF32, "F32", 4}, {DType::kF16, "F16", 2}, {DType::kBF16, "BF16", 2},
    {DType::kI32, "I32", 4}, {DType::kI64, "I64", 8}, {DType::kF64, "F64", 8},
    {DType::kU8, "U8", 1},   {DType::kI8, "I8", 1},   {DType::kBool, "BOOL", 1},
};

const DTypeEntry& EntryOf(DType dtype) {
  for (const DTypeEntry& e : kDTypes) {
    if (e.dtype == dtype) return e;
  }
  return kDTypes[0];  // Unreachable for valid enum values.
}

// Product of dims, or -1 if a dim is negative or the product (times
// elem_size) overflows int64.
int64_t CheckedBytes(const std::vector<int64_t>& shape, int64_t elem_size) {
  int64_t n = elem_size;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) return -1;
    n *= d;
  }
  return n;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

template <typename T>
T LoadLe(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // x86-64 is little-endian.
  return v;
}

}  // namespace

absl::string_view DTypeName(DType dtype) { return EntryOf(dtype).name; }

int DTypeSize(DType dtype) { return EntryOf(dtype).size; }

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  for (const DTypeEntry& e : kDTypes) {
    if (name == e.name) return e.dtype;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown safetensors dtype \"", name, "\""));
}

int64_t TensorInfo::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// ---------------------------------------------------------------------------
// Reader

absl::StatusOr<SafetensorsReader> SafetensorsReader::Open(
    const std::string& path) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path));
  return FromBuffer(std::move(bytes), path);
}

absl::StatusOr<SafetensorsReader> SafetensorsReader::FromBuffer(
    std::string bytes, std::string name_for_errors) {
  SafetensorsReader r;
  r.file_ = std::move(name_for_errors);
  r.buffer_ = std::move(bytes);
  const std::string& file = r.file_;
  auto corrupt = [&file](absl::string_view what) {
    return absl::DataLossError(absl::StrCat("safetensors ", file, ": ", what));
  };
  auto corrupt_tensor = [&file](absl::string_view tensor,
                                absl::string_view what) {
    return absl::DataLossError(absl::StrCat("safetensors ", file, ": tensor \"",
                                            tensor, "\": ", what));
  };

  const uint64_t file_size = r.buffer_.size();
  if (file_size < 8) {
    return corrupt(absl::StrCat("file is ", file_size,
                                " bytes, too short for the 8-byte header "
                                "length"));
  }
  const uint64_t header_len = LoadLe<uint64_t>(r.buffer_.data());
  if (header_len > file_size - 8) {
    return corrupt(absl::StrCat("header length ", header_len,
                                " runs past the end of the file (", file_size,
                                " bytes)"));
  }
  if (header_len > kMaxHeaderBytes) {
    return corrupt(absl::StrCat("header length ", header_len,
                                " exceeds the limit of ", kMaxHeaderBytes));
  }
  if (header_len < 2) return corrupt("header is too short to be a JSON object");
  r.data_start_ = 8 + header_len;
  const int64_t data_size = static_cast<int64_t>(file_size - r.data_start_);

  const char* hbegin = r.buffer_.data() + 8;
  if (hbegin[0] != '{') return corrupt("header does not start with '{'");
  // JSON text never holds a raw NUL; the parser would stop at one silently.
  if (std::memchr(hbegin, '\0', header_len) != nullptr) {
    return corrupt("header contains a NUL byte");
  }
  Json header = Json::parse(hbegin, hbegin + header_len, /*cb=*/nullptr,
                            /*allow_exceptions=*/false);
  if (header.is_discarded()) return corrupt("header is not valid JSON");
  if (!header.is_object()) return corrupt("header is not a JSON object");

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const Json& v = it.value();
    if (name == kMetadataKey) {
      if (!v.is_object()) return corrupt("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) {
          return corrupt(absl::StrCat("__metadata__ value of \"", m.key(),
                                      "\" is not a string"));
        }
        r.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!v.is_object()) return corrupt_tensor(name, "entry is not an object");
    TensorInfo t;
    t.name = name;

    auto dt = v.find("dtype");
    if (dt == v.end() || !dt->is_string()) {
      return corrupt_tensor(name, "missing or non-string \"dtype\"");
    }
    absl::StatusOr<DType> dtype = ParseDType(dt->get<std::string>());
    if (!dtype.ok()) return corrupt_tensor(name, dtype.status().message());
    t.dtype = *dtype;

    auto sh = v.find("shape");
    if (sh == v.end() || !sh->is_array()) {
      return corrupt_tensor(name, "missing or non-array \"shape\"");
    }
    for (const Json& d : *sh) {
      if (!d.is_number_integer()) {
        return corrupt_tensor(name, "shape has a non-integer dimension");
      }
      if (d.is_number_unsigned()
              ? d.get<uint64_t>() >
                    static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
              : d.get<int64_t>() < 0) {
        return corrupt_tensor(name, absl::StrCat("shape has a negative or "
                                                 "oversized dimension ",
                                                 d.dump()));
      }
      t.shape.push_back(d.get<int64_t>());
    }

    auto off = v.find("data_offsets");
    if (off == v.end() || !off->is_array() || off->size() != 2 ||
        !(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned()) {
      return corrupt_tensor(name,
                            "\"data_offsets\" is not a pair of non-negative "
                            "integers");
    }
    const uint64_t begin = (*off)[0].get<uint64_t>();
    const uint64_t end = (*off)[1].get<uint64_t>();
    if (begin > end || end > static_cast<uint64_t>(data_size)) {
      return corrupt_tensor(
          name,
          absl::StrCat("data_offsets [", begin, ", ", end,
                       "] outside the data section of ", data_size, " bytes"));
    }
    t.data_begin = static_cast<int64_t>(begin);
    t.data_end = static_cast<int64_t>(end);

    const int64_t expected = CheckedBytes(t.shape, DTypeSize(t.dtype));
    if (expected < 0) {
      return corrupt_tensor(
          name, absl::StrCat("shape ", ShapeString(t.shape), " is too large"));
    }
    if (t.num_bytes() != expected) {
      return corrupt_tensor(
          name, absl::StrCat("data_offsets [", begin, ", ", end, "] hold ",
                             t.num_bytes(), " bytes but ", DTypeName(t.dtype),
                             " ", ShapeString(t.shape), " needs ", expected));
    }
    r.tensors_.push_back(std::move(t));
  }

  std::sort(r.tensors_.begin(), r.tensors_.end(),
            [](const TensorInfo& a, const TensorInfo& b) {
              if (a.data_begin != b.data_begin) {
                return a.data_begin < b.data_begin;
              }
              if (a.data_end != b.data_end) return a.data_end < b.data_end;
              return a.name < b.name;
            });
  const TensorInfo* prev = nullptr;  // Last tensor with data.
  for (const TensorInfo& t : r.tensors_) {
    if (t.num_bytes() == 0) continue;
    if (prev != nullptr && t.data_begin < prev->data_end) {
      return corrupt_tensor(
          t.name, absl::StrCat("data [", t.data_begin, ", ", t.data_end,
                               ") overlaps tensor \"", prev->name, "\" [",
                               prev->data_begin, ", ", prev->data_end, ")"));
    }
    prev = &t;
  }
  for (size_t i = 0; i < r.tensors_.size(); ++i) {
    r.index_.emplace(r.tensors_[i].name, i);
  }
  return r;
}

const TensorInfo* SafetensorsReader::Find(absl::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

absl::StatusOr<const TensorInfo*> SafetensorsReader::Lookup(
    absl::string_view name) const {
  const TensorInfo* t = Find(name);
  if (t == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("safetensors ", file_, ": no tensor \"", name, "\""));
  }
  return t;
}

absl::string_view SafetensorsReader::Bytes(const TensorInfo& t) const {
  return absl::string_view(buffer_.data() + data_start_ + t.data_begin,
                           static_cast<size_t>(t.num_bytes()));
}

absl::StatusOr<absl::string_view> SafetensorsReader::RawBytes(
    absl::string_view name) const {
  ASSIGN_OR_RETURN(const TensorInfo* t, Lookup(name));
  return Bytes(*t);
}

absl::Status SafetensorsReader::ReadF32(absl::string_view name, float* dst,
                                        int64_t n) const {
  ASSIGN_OR_RETURN(const TensorInfo* t, Lookup(name));
  const int64_t numel = t->num_elements();
  if (n != numel) {
    return absl::InvalidArgumentError(absl::StrCat(
        "safetensors ", file_, ": tensor \"", name, "\" has ", numel,
        " elements ", ShapeString(t->shape), ", caller expects ", n));
  }
  const char* src = Bytes(*t).data();
  switch (t->dtype) {
    case DType::kF32:
      if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return absl::OkStatus();
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        dst[i] = Bf16ToF32(LoadLe<uint16_t>(src + 2 * i));
      }
      return absl::OkStatus();
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        dst[i] = F16ToF32(LoadLe<uint16_t>(src + 2 * i));
      }
      return absl::OkStatus();
    case DType::kF64:
      for (int64_t i = 0; i < n; ++i) {
        dst[i] = static_cast<float>(LoadLe<double>(src + 8 * i));
      }
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors ", file_, ": tensor \"", name, "\" is ",
                       DTypeName(t->dtype), ", not a floating-point dtype"));
  }
}

absl::StatusOr<std::vector<float>> SafetensorsReader::ReadF32(
    absl::string_view name) const {
  ASSIGN_OR_RETURN(const TensorInfo* t, Lookup(name));
  std::vector<float> out(static_cast<size_t>(t->num_elements()));
  RETURN_IF_ERROR(ReadF32(name, out.data(), t->num_elements()));
  return out;
}

absl::StatusOr<std::vector<int32_t>> SafetensorsReader::ReadI32(
    absl::string_view name) const {
  ASSIGN_OR_RETURN(const TensorInfo* t, Lookup(name));
  const int64_t n = t->num_elements();
  std::vector<int32_t> out(static_cast<size_t>(n));
  const char* src = Bytes(*t).data();
  if (t->dtype == DType::kI32) {
    if (n > 0) std::memcpy(out.data(), src, static_cast<size_t>(n) * 4);
    return out;
  }
  if (t->dtype == DType::kI64) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = LoadLe<int64_t>(src + 8 * i);
      if (v < std::numeric_limits<int32_t>::min() ||
          v > std::numeric_limits<int32_t>::max()) {
        return absl::InvalidArgumentError(
            absl::StrCat("safetensors ", file_, ": tensor \"", name,
                         "\" element ", i, " = ", v, " does not fit in int32"));
      }
      out[i] = static_cast<int32_t>(v);
    }
    return out;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("safetensors ", file_, ": tensor \"", name, "\" is ",
                   DTypeName(t->dtype), ", not I32 or I64"));
}

// ---------------------------------------------------------------------------
// Writer

int64_t SafetensorsWriter::CheckShape(const std::string& name,
                                      const std::vector<int64_t>& shape) {
  const int64_t n = CheckedBytes(shape, 8);
  if (n < 0) {
    if (error_.ok()) {
      error_ = absl::InvalidArgumentError(
          absl::StrCat("safetensors writer: tensor \"", name,
                       "\" has invalid "
                       "shape ",
                       ShapeString(shape)));
    }
    return -1;
  }
  return n / 8;
}

void SafetensorsWriter::AddRaw(std::string name, DType dtype,
                               std::vector<int64_t> shape, const void* data) {
  const int64_t n = CheckShape(name, shape);
  if (n < 0) return;
  Entry e{std::move(name), dtype, std::move(shape), std::string()};
  e.bytes.assign(static_cast<const char*>(data),
                 static_cast<size_t>(n) * DTypeSize(dtype));
  entries_.push_back(std::move(e));
}

void SafetensorsWriter::AddF32(std::string name, std::vector<int64_t> shape,
                               const float* data) {
  AddRaw(std::move(name), DType::kF32, std::move(shape), data);
}

void SafetensorsWriter::AddF32Ref(std::string name,
                                  std::vector<int64_t> shape,
                                  const float* data) {
  const int64_t n = CheckShape(name, shape);
  if (n < 0) return;
  Entry e{std::move(name), DType::kF32, std::move(shape), std::string()};
  e.ref = reinterpret_cast<const char*>(data);
  e.ref_size = static_cast<size_t>(n) * sizeof(float);
  entries_.push_back(std::move(e));
}

void SafetensorsWriter::AddI32(std::string name, std::vector<int64_t> shape,
                               const int32_t* data) {
  AddRaw(std::move(name), DType::kI32, std::move(shape), data);
}

void SafetensorsWriter::AddBF16FromF32(std::string name,
                                       std::vector<int64_t> shape,
                                       const float* data) {
  const int64_t n = CheckShape(name, shape);
  if (n < 0) return;
  std::vector<uint16_t> h(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) h[i] = F32ToBf16(data[i]);
  AddRaw(std::move(name), DType::kBF16, std::move(shape), h.data());
}

void SafetensorsWriter::AddF16FromF32(std::string name,
                                      std::vector<int64_t> shape,
                                      const float* data) {
  const int64_t n = CheckShape(name, shape);
  if (n < 0) return;
  std::vector<uint16_t> h(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) h[i] = F32ToF16(data[i]);
  AddRaw(std::move(name), DType::kF16, std::move(shape), h.data());
}

void SafetensorsWriter::SetMetadata(std::string key, std::string value) {
  metadata_[std::move(key)] = std::move(value);
}

absl::StatusOr<std::string> SafetensorsWriter::Serialize() const {
  std::string out;
  RETURN_IF_ERROR(SerializeTo(&out));
  return out;
}

absl::Status SafetensorsWriter::SerializeTo(std::string* out) const {
  RETURN_IF_ERROR(error_);
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& kv : metadata_) meta[kv.first] = kv.second;
    header[kMetadataKey] = std::move(meta);
  }
  absl::flat_hash_set<absl::string_view> names;
  uint64_t offset = 0;
  for (const Entry& e : entries_) {
    if (e.name == kMetadataKey) {
      return absl::InvalidArgumentError(
          "safetensors writer: \"__metadata__\" is reserved, not a tensor "
          "name");
    }
    if (!names.insert(e.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "safetensors writer: tensor \"", e.name, "\" added twice"));
    }
    nlohmann::ordered_json t = nlohmann::ordered_json::object();
    t["dtype"] = std::string(DTypeName(e.dtype));
    t["shape"] = e.shape;
    t["data_offsets"] = {offset, offset + e.size()};
    header[e.name] = std::move(t);
    offset += e.size();
  }
  std::string json;
  try {
    json = header.dump();
  } catch (const nlohmann::json::exception& e) {
    // Only invalid UTF-8 in a tensor name or metadata string gets here.
    return absl::InvalidArgumentError(absl::StrCat(
        "safetensors writer: cannot encode the header: ", e.what()));
  }
  // Pad with spaces so that the data starts 8-byte aligned.
  json.append((8 - json.size() % 8) % 8, ' ');
  out->clear();
  out->reserve(8 + json.size() + offset);
  const uint64_t n = json.size();
  out->append(reinterpret_cast<const char*>(&n), 8);  // Little-endian host.
  *out += json;
  for (const Entry& e : entries_) {
    if (e.ref != nullptr) {
      out->append(e.ref, e.ref_size);
    } else {
      *out += e.bytes;
    }
  }
  return absl::OkStatus();
}

absl::Status SafetensorsWriter::Write(const std::string& path) const {
  ASSIGN_OR_RETURN(std::string bytes, Serialize());
  return WriteFileAtomically(path, bytes);
}

}  // namespace io
}  // namespace bertps
