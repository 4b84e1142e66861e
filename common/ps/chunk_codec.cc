#include "common/ps/chunk_codec.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace bertps {
namespace ps {
namespace {

// Protobuf wire types.
constexpr int kVarint = 0;
constexpr int kFixed64 = 1;
constexpr int kLen = 2;
constexpr int kStartGroup = 3;
constexpr int kEndGroup = 4;
constexpr int kFixed32 = 5;

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

// Reads bytes across the slices of a received message.
class Cursor {
 public:
  explicit Cursor(const std::vector<grpc::Slice>& slices) : s_(slices) {}

  size_t pos() const { return pos_; }

  bool ReadByte(uint8_t* b) {
    while (idx_ < s_.size() && off_ == s_[idx_].size()) {
      ++idx_;
      off_ = 0;
    }
    if (idx_ == s_.size()) return false;
    *b = s_[idx_].begin()[off_++];
    ++pos_;
    return true;
  }

  bool ReadVarint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!ReadByte(&b)) return false;
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;  // longer than 10 bytes
  }

  // The next n bytes, as views into the slices (appended to out, if given).
  bool ReadPieces(size_t n, std::vector<absl::string_view>* out) {
    while (n > 0) {
      if (idx_ == s_.size()) return false;
      const size_t avail = s_[idx_].size() - off_;
      const size_t take = std::min(avail, n);
      if (take > 0 && out != nullptr) {
        out->emplace_back(
            reinterpret_cast<const char*>(s_[idx_].begin()) + off_, take);
      }
      off_ += take;
      pos_ += take;
      n -= take;
      if (off_ == s_[idx_].size()) {
        ++idx_;
        off_ = 0;
      }
    }
    return true;
  }

  bool ReadString(size_t n, std::string* out) {
    std::vector<absl::string_view> pieces;
    if (!ReadPieces(n, &pieces)) return false;
    out->clear();
    out->reserve(n);
    for (absl::string_view p : pieces) out->append(p.data(), p.size());
    return true;
  }

  // Skips the value of field `field` of the given wire type. Groups
  // (deprecated, unused by these messages, but valid protobuf) are skipped
  // through their matching end tag, nested up to protobuf's depth of 100.
  bool SkipValue(int field, int wire_type, int depth = 0) {
    uint64_t v;
    switch (wire_type) {
      case kVarint:
        return ReadVarint(&v);
      case kFixed64:
        return ReadPieces(8, nullptr);
      case kLen:
        return ReadVarint(&v) && ReadPieces(v, nullptr);
      case kFixed32:
        return ReadPieces(4, nullptr);
      case kStartGroup:
        if (depth >= 100) return false;
        for (;;) {
          uint64_t tag;
          if (!ReadVarint(&tag) || (tag >> 3) == 0 || (tag >> 3) > 0x1fffffff) {
            return false;
          }
          const int f = static_cast<int>(tag >> 3), wt = static_cast<int>(tag & 7);
          if (wt == kEndGroup) return f == field;
          if (!SkipValue(f, wt, depth + 1)) return false;
        }
      default:
        return false;  // a stray end-group tag, or wire types 6 and 7
    }
  }

 private:
  const std::vector<grpc::Slice>& s_;
  size_t idx_ = 0;  // current slice
  size_t off_ = 0;  // offset in it
  size_t pos_ = 0;  // bytes consumed
};

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed ", what, " message on the wire"));
}

// Reads a tag; false at the end of the message.
bool NextField(Cursor* c, size_t end, int* field, int* wire_type, bool* ok) {
  *ok = true;
  if (c->pos() >= end) return false;
  uint64_t tag;
  if (!c->ReadVarint(&tag) || (tag >> 3) == 0 || c->pos() > end) {
    *ok = false;
    return false;
  }
  *field = static_cast<int>(tag >> 3);
  *wire_type = static_cast<int>(tag & 7);
  return true;
}

// Appends a repeated int64 field's values: packed (kLen) or one (kVarint).
bool ReadInt64s(Cursor* c, size_t end, int wire_type, std::vector<int64_t>* out) {
  uint64_t v;
  if (wire_type == kVarint) {
    if (!c->ReadVarint(&v)) return false;
    out->push_back(static_cast<int64_t>(v));
    return true;
  }
  if (!c->ReadVarint(&v) || v > end - c->pos()) return false;
  const size_t sub_end = c->pos() + v;
  while (c->pos() < sub_end) {
    if (!c->ReadVarint(&v)) return false;
    out->push_back(static_cast<int64_t>(v));
  }
  return c->pos() == sub_end;
}

// Merges the TensorChunk occupying [c->pos(), end) into out (protobuf merge
// semantics: later scalars win, repeated fields append).
bool ParseTensorChunk(Cursor* c, size_t end, ChunkRef* out) {
  int field, wt;
  bool ok;
  while (NextField(c, end, &field, &wt, &ok)) {
    uint64_t v;
    if (field == TensorChunk::kNameFieldNumber && wt == kLen) {
      if (!c->ReadVarint(&v) || v > end - c->pos() ||
          !c->ReadString(v, &out->name)) {
        return false;
      }
    } else if (field == TensorChunk::kDtypeFieldNumber && wt == kVarint) {
      if (!c->ReadVarint(&v)) return false;
      out->dtype = static_cast<DType>(static_cast<int32_t>(v));
    } else if (field == TensorChunk::kShapeFieldNumber &&
               (wt == kLen || wt == kVarint)) {
      if (!ReadInt64s(c, end, wt, &out->shape)) return false;
    } else if (field == TensorChunk::kOffsetFieldNumber && wt == kVarint) {
      if (!c->ReadVarint(&v)) return false;
      out->offset = static_cast<int64_t>(v);
    } else if (field == TensorChunk::kRowsFieldNumber &&
               (wt == kLen || wt == kVarint)) {
      if (!ReadInt64s(c, end, wt, &out->rows)) return false;
    } else if (field == TensorChunk::kDataFieldNumber && wt == kLen) {
      if (!c->ReadVarint(&v) || v > end - c->pos()) return false;
      out->data.clear();
      if (!c->ReadPieces(v, &out->data)) return false;
      out->data_bytes = v;
    } else if (!c->SkipValue(field, wt)) {
      return false;
    }
    if (c->pos() > end) return false;
  }
  return ok && c->pos() == end;
}

// Appends the chunks of the TensorChunks occupying [c->pos(), end) to out
// (each occurrence of field 1 is one more chunk).
bool ParseTensorChunks(Cursor* c, size_t end, std::vector<ChunkRef>* out) {
  int field, wt;
  bool ok;
  while (NextField(c, end, &field, &wt, &ok)) {
    if (field == TensorChunks::kChunksFieldNumber && wt == kLen) {
      uint64_t v;
      if (!c->ReadVarint(&v) || v > end - c->pos() ||
          out->size() >= kMaxChunksPerMessage) {
        return false;
      }
      out->emplace_back();
      if (!ParseTensorChunk(c, c->pos() + v, &out->back())) return false;
    } else if (!c->SkipValue(field, wt)) {
      return false;
    }
    if (c->pos() > end) return false;
  }
  return ok && c->pos() == end;
}

// A length-delimited field's end position (after reading its length).
bool ReadLength(Cursor* c, size_t limit, size_t* end) {
  uint64_t v;
  if (!c->ReadVarint(&v) || v > limit - c->pos()) return false;
  *end = c->pos() + v;
  return true;
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
  PutTag(1, kLen, &prefix);
  PutVarint(name.size(), &prefix);
  prefix.append(name.data(), name.size());
  if (dtype != 0) {
    PutTag(2, kVarint, &prefix);
    PutVarint(static_cast<uint64_t>(static_cast<int64_t>(dtype)), &prefix);
  }
  if (offset != 0) {
    PutTag(4, kVarint, &prefix);
    PutVarint(static_cast<uint64_t>(offset), &prefix);
  }
  std::string suffix;  // the rows come after the data (field 6)
  if (!rows.empty()) {
    suffix.reserve(8 + rows_bytes);
    PutTag(6, kLen, &suffix);
    PutVarint(rows_bytes, &suffix);
    for (int64_t r : rows) PutVarint(static_cast<uint64_t>(r), &suffix);
  }
  if (data_size == 0) {
    out->emplace_back(prefix + suffix);
    return total;
  }
  PutTag(5, kLen, &prefix);
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
  // Field `field_` holding TensorChunks {chunks (field 1) ...}.
  std::vector<grpc::Slice> slices(1);
  size_t body = 0;
  for (Pending& p : pending) {
    body += AppendChunk(1, p.name, p.dtype, p.offset, p.rows,
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

namespace {

absl::Status FastParsePushRequest(const grpc::ByteBuffer& buffer,
                                  ParsedPushRequest* out) {
  *out = ParsedPushRequest();
  if (!buffer.Valid()) return Malformed("push");
  if (!buffer.Dump(&out->slices).ok()) return Malformed("push");
  const size_t total = buffer.Length();
  Cursor c(out->slices);
  int field, wt;
  bool ok;
  // The oneof: each member read ends the others (protobuf's merge).
  auto only = [&](int field) {
    using R = PushRequest;
    if (field != R::kHeaderFieldNumber && out->has_header) out->header.Clear();
    if (field != R::kChunkFieldNumber && out->has_chunk) out->chunk = ChunkRef();
    if (field != R::kNextFirstFieldNumber && out->has_next_first) {
      out->next_first.Clear();
    }
    if (field != R::kChunksFieldNumber && out->has_chunks) out->chunks.clear();
    out->has_header = field == R::kHeaderFieldNumber;
    out->has_chunk = field == R::kChunkFieldNumber;
    out->has_next_first = field == R::kNextFirstFieldNumber;
    out->has_chunks = field == R::kChunksFieldNumber;
  };
  // An embedded message, merged by protobuf (small: no payload).
  auto merge = [&](google::protobuf::MessageLite* m) {
    size_t end;
    std::string bytes;
    return ReadLength(&c, total, &end) &&
           c.ReadString(end - c.pos(), &bytes) && m->MergeFromString(bytes);
  };
  while (NextField(&c, total, &field, &wt, &ok)) {
    size_t end;
    if (field == PushRequest::kHeaderFieldNumber && wt == kLen) {
      only(PushRequest::kHeaderFieldNumber);
      if (!merge(&out->header)) return Malformed("push header");
    } else if (field == PushRequest::kNextFirstFieldNumber && wt == kLen) {
      only(PushRequest::kNextFirstFieldNumber);
      if (!merge(&out->next_first)) return Malformed("push next_first");
    } else if (field == PushRequest::kChunkFieldNumber && wt == kLen) {
      only(PushRequest::kChunkFieldNumber);
      if (!ReadLength(&c, total, &end) ||
          !ParseTensorChunk(&c, end, &out->chunk)) {
        return Malformed("push chunk");
      }
    } else if (field == PushRequest::kChunksFieldNumber && wt == kLen) {
      only(PushRequest::kChunksFieldNumber);
      if (!ReadLength(&c, total, &end) ||
          !ParseTensorChunks(&c, end, &out->chunks)) {
        return Malformed("push chunks");
      }
    } else if (!c.SkipValue(field, wt)) {
      return Malformed("push");
    }
  }
  if (!ok || c.pos() != total) return Malformed("push");
  return absl::OkStatus();
}

absl::Status FastParsePullResponse(const grpc::ByteBuffer& buffer,
                                   ParsedPullResponse* out) {
  *out = ParsedPullResponse();
  if (!buffer.Valid()) return Malformed("pull");
  if (!buffer.Dump(&out->slices).ok()) return Malformed("pull");
  const size_t total = buffer.Length();
  Cursor c(out->slices);
  int field, wt;
  bool ok;
  // The oneof: each member read ends the others (protobuf's merge).
  auto only = [&](int field) {
    using R = PullResponse;
    if (field != R::kVersionFieldNumber) out->version = 0;
    if (field != R::kChunkFieldNumber && out->has_chunk) out->chunk = ChunkRef();
    if (field != R::kChunksFieldNumber && out->has_chunks) out->chunks.clear();
    out->has_version = field == R::kVersionFieldNumber;
    out->has_chunk = field == R::kChunkFieldNumber;
    out->has_chunks = field == R::kChunksFieldNumber;
  };
  while (NextField(&c, total, &field, &wt, &ok)) {
    uint64_t v;
    size_t end;
    if (field == PullResponse::kVersionFieldNumber && wt == kVarint) {
      if (!c.ReadVarint(&v)) return Malformed("pull");
      only(PullResponse::kVersionFieldNumber);
      out->version = static_cast<int64_t>(v);
    } else if (field == PullResponse::kChunkFieldNumber && wt == kLen) {
      only(PullResponse::kChunkFieldNumber);
      if (!ReadLength(&c, total, &end) ||
          !ParseTensorChunk(&c, end, &out->chunk)) {
        return Malformed("pull chunk");
      }
    } else if (field == PullResponse::kChunksFieldNumber && wt == kLen) {
      only(PullResponse::kChunksFieldNumber);
      if (!ReadLength(&c, total, &end) ||
          !ParseTensorChunks(&c, end, &out->chunks)) {
        return Malformed("pull chunks");
      }
    } else if (!c.SkipValue(field, wt)) {
      return Malformed("pull");
    }
  }
  if (!ok || c.pos() != total) return Malformed("pull");
  return absl::OkStatus();
}

// What the copy-free parser does not take (protobuf groups, a chunk count
// over kMaxChunksPerMessage aside, or an encoding it does not expect) goes
// to protobuf's own parser over the flattened bytes: whatever protobuf
// accepts is accepted, with its meaning; the chunks then view the parsed
// message, which the result owns.
template <typename Message>
std::shared_ptr<Message> ParseWithProtobuf(
    const std::vector<grpc::Slice>& slices) {
  std::string bytes;
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  auto m = std::make_shared<Message>();
  if (!m->ParseFromString(bytes)) return nullptr;
  return m;
}

bool WithinChunkLimit(const TensorChunks& c) {
  return c.chunks_size() <= static_cast<int>(kMaxChunksPerMessage);
}

}  // namespace

absl::Status ParsePushRequest(const grpc::ByteBuffer& buffer,
                              ParsedPushRequest* out) {
  absl::Status fast = FastParsePushRequest(buffer, out);
  if (fast.ok() || out->slices.empty()) return fast;
  std::shared_ptr<PushRequest> m = ParseWithProtobuf<PushRequest>(out->slices);
  if (m == nullptr || !WithinChunkLimit(m->chunks())) return fast;
  std::vector<grpc::Slice> slices = std::move(out->slices);
  *out = ParsedPushRequest();
  out->slices = std::move(slices);
  switch (m->msg_case()) {
    case PushRequest::kHeader:
      out->has_header = true;
      out->header = m->header();
      break;
    case PushRequest::kNextFirst:
      out->has_next_first = true;
      out->next_first = m->next_first();
      break;
    case PushRequest::kChunk:
      out->has_chunk = true;
      out->chunk = ChunkRef::Of(m->chunk());
      break;
    case PushRequest::kChunks:
      out->has_chunks = true;
      for (const TensorChunk& c : m->chunks().chunks()) {
        out->chunks.push_back(ChunkRef::Of(c));
      }
      break;
    case PushRequest::MSG_NOT_SET:
      break;
  }
  out->owned = std::move(m);
  return absl::OkStatus();
}

absl::Status ParsePullResponse(const grpc::ByteBuffer& buffer,
                               ParsedPullResponse* out) {
  absl::Status fast = FastParsePullResponse(buffer, out);
  if (fast.ok() || out->slices.empty()) return fast;
  std::shared_ptr<PullResponse> m =
      ParseWithProtobuf<PullResponse>(out->slices);
  if (m == nullptr || !WithinChunkLimit(m->chunks())) return fast;
  std::vector<grpc::Slice> slices = std::move(out->slices);
  *out = ParsedPullResponse();
  out->slices = std::move(slices);
  switch (m->msg_case()) {
    case PullResponse::kVersion:
      out->has_version = true;
      out->version = m->version();
      break;
    case PullResponse::kChunk:
      out->has_chunk = true;
      out->chunk = ChunkRef::Of(m->chunk());
      break;
    case PullResponse::kChunks:
      out->has_chunks = true;
      for (const TensorChunk& c : m->chunks().chunks()) {
        out->chunks.push_back(ChunkRef::Of(c));
      }
      break;
    case PullResponse::MSG_NOT_SET:
      break;
  }
  out->owned = std::move(m);
  return absl::OkStatus();
}

}  // namespace ps
}  // namespace bertps
