// The chunk codec's writing half: tensor chunks and batches of them encoded
// as protobuf writes them, the payload sent from where it lies (no copy).
// The reading half is chunk_parse.cc.
#include "common/ps/chunk_codec.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/ps/chunk_wire_types.h"

namespace bertps {
namespace ps {
namespace {

using wire_types::kLen;
using wire_types::kVarint;

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

void PutTag(int field, int wire_type, std::string* out) {
  PutVarint(static_cast<uint64_t>(field) << 3 | wire_type, out);
}

}  // namespace

namespace {

// Appends field `field` holding a TensorChunk to `out` (its first slice the
// encoded prefix, then the payload pieces as given, then the rows); returns
// the bytes appended.
size_t AppendChunk(int field, absl::string_view name, DType dtype,
                   int64_t offset, absl::Span<const int64_t> rows,
                   std::vector<grpc::Slice> pieces,
                   std::vector<grpc::Slice>* out) {
  size_t data_size = 0;
  for (const grpc::Slice& s : pieces) data_size += s.size();
  // Fields in number order, defaults left out: what protobuf itself writes.
  size_t rows_bytes = 0;
  for (int64_t r : rows) rows_bytes += VarintSize(static_cast<uint64_t>(r));
  size_t body = 1 + VarintSize(name.size()) + name.size();
  if (dtype != 0) body += 1 + VarintSize(static_cast<int64_t>(dtype));
  if (offset != 0) body += 1 + VarintSize(static_cast<uint64_t>(offset));
  if (data_size > 0) body += 1 + VarintSize(data_size) + data_size;
  if (!rows.empty()) body += 1 + VarintSize(rows_bytes) + rows_bytes;
  std::string prefix;
  prefix.reserve(32 + name.size());
  PutTag(field, kLen, &prefix);
  PutVarint(body, &prefix);
  const size_t total = prefix.size() + body;
  PutTag(TensorChunk::kNameFieldNumber, kLen, &prefix);
  PutVarint(name.size(), &prefix);
  prefix.append(name.data(), name.size());
  if (dtype != 0) {
    PutTag(TensorChunk::kDtypeFieldNumber, kVarint, &prefix);
    PutVarint(static_cast<uint64_t>(static_cast<int64_t>(dtype)), &prefix);
  }
  if (offset != 0) {
    PutTag(TensorChunk::kOffsetFieldNumber, kVarint, &prefix);
    PutVarint(static_cast<uint64_t>(offset), &prefix);
  }
  std::string suffix;  // the rows come after the data
  if (!rows.empty()) {
    suffix.reserve(8 + rows_bytes);
    PutTag(TensorChunk::kRowsFieldNumber, kLen, &suffix);
    PutVarint(rows_bytes, &suffix);
    for (int64_t r : rows) PutVarint(static_cast<uint64_t>(r), &suffix);
  }
  if (data_size == 0) {
    out->emplace_back(prefix + suffix);
    return total;
  }
  PutTag(TensorChunk::kDataFieldNumber, kLen, &prefix);
  PutVarint(data_size, &prefix);
  out->emplace_back(prefix);
  for (grpc::Slice& s : pieces) {
    if (s.size() > 0) out->push_back(std::move(s));
  }
  if (!suffix.empty()) out->emplace_back(suffix);
  return total;
}

// A message holding one chunk (PushRequest / PullResponse field 2).
grpc::ByteBuffer Encode(absl::string_view name, DType dtype, int64_t offset,
                        absl::Span<const int64_t> rows,
                        std::vector<grpc::Slice> pieces) {
  std::vector<grpc::Slice> slices;
  slices.reserve(pieces.size() + 2);
  AppendChunk(2, name, dtype, offset, rows, std::move(pieces), &slices);
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::vector<grpc::Slice> One(grpc::Slice data) {
  std::vector<grpc::Slice> v;
  v.push_back(std::move(data));
  return v;
}

}  // namespace

grpc::ByteBuffer EncodeChunk(absl::string_view name, DType dtype,
                             int64_t offset, grpc::Slice data) {
  return Encode(name, dtype, offset, {}, One(std::move(data)));
}

grpc::ByteBuffer EncodeRowChunk(absl::string_view name, DType dtype,
                                absl::Span<const int64_t> rows,
                                grpc::Slice data) {
  return Encode(name, dtype, 0, rows, One(std::move(data)));
}

grpc::ByteBuffer EncodeRowChunk(absl::string_view name, DType dtype,
                                absl::Span<const int64_t> rows,
                                std::vector<grpc::Slice> pieces) {
  return Encode(name, dtype, 0, rows, std::move(pieces));
}

std::vector<grpc::Slice> RowPieces(const grpc::Slice& table, size_t row_bytes,
                                   int64_t first_row,
                                   absl::Span<const int64_t> rows) {
  // Runs of consecutive rows: [begin, end) indices into `rows`.
  std::vector<std::pair<size_t, size_t>> runs;
  size_t copied = 0;  // bytes of the short runs
  for (size_t k = 0; k < rows.size();) {
    size_t e = k + 1;
    while (e < rows.size() && rows[e] == rows[e - 1] + 1) ++e;
    runs.emplace_back(k, e);
    if ((e - k) * row_bytes < kMinReferencedRun) copied += (e - k) * row_bytes;
    k = e;
  }
  grpc::Slice gathered(copied);  // one buffer for every short run
  uint8_t* out = const_cast<uint8_t*>(gathered.begin());
  size_t at = 0, copied_from = 0;  // [copied_from, at): copied, not yet a piece
  std::vector<grpc::Slice> pieces;
  pieces.reserve(runs.size());
  auto flush_copied = [&] {
    if (at > copied_from) pieces.push_back(gathered.sub(copied_from, at));
    copied_from = at;
  };
  for (const auto& [k, e] : runs) {
    const size_t begin = static_cast<size_t>(rows[k] - first_row) * row_bytes;
    const size_t len = (e - k) * row_bytes;
    if (len >= kMinReferencedRun) {
      flush_copied();
      pieces.push_back(table.sub(begin, begin + len));
    } else {
      std::memcpy(out + at, table.begin() + begin, len);
      at += len;  // short runs between two long ones make one piece
    }
  }
  flush_copied();
  return pieces;
}

void ChunkBatch::AddChunk(absl::string_view name, DType dtype, int64_t offset,
                          grpc::Slice data) {
  Add(name, dtype, offset, {}, One(std::move(data)));
}

void ChunkBatch::AddRowChunk(absl::string_view name, DType dtype,
                             absl::Span<const int64_t> rows,
                             std::vector<grpc::Slice> pieces) {
  Add(name, dtype, 0, rows, std::move(pieces));
}

void ChunkBatch::Add(absl::string_view name, DType dtype, int64_t offset,
                     absl::Span<const int64_t> rows,
                     std::vector<grpc::Slice> pieces) {
  Pending p;
  p.name = std::string(name);
  p.dtype = dtype;
  p.offset = offset;
  p.rows.assign(rows.begin(), rows.end());
  for (const grpc::Slice& s : pieces) bytes_ += s.size();
  p.pieces = std::move(pieces);
  pending_.push_back(std::move(p));
}

grpc::ByteBuffer ChunkBatch::Take() {
  std::vector<Pending> pending = std::move(pending_);
  pending_.clear();
  bytes_ = 0;
  if (pending.size() == 1) {
    Pending& p = pending[0];
    return Encode(p.name, p.dtype, p.offset, p.rows, std::move(p.pieces));
  }
  // Field `field_` holding TensorChunks {chunks ...}.
  std::vector<grpc::Slice> slices(1);
  size_t body = 0;
  for (Pending& p : pending) {
    body += AppendChunk(TensorChunks::kChunksFieldNumber, p.name, p.dtype, p.offset, p.rows,
                        std::move(p.pieces), &slices);
  }
  std::string head;
  PutTag(field_, kLen, &head);
  PutVarint(body, &head);
  slices[0] = grpc::Slice(head);
  return grpc::ByteBuffer(slices.data(), slices.size());
}

grpc::ByteBuffer EncodeMessage(const google::protobuf::MessageLite& message) {
  grpc::Slice s(message.SerializeAsString());
  return grpc::ByteBuffer(&s, 1);
}

}  // namespace ps
}  // namespace bertps
