// The chunk codec's reading half: Push requests and Pull responses parsed
// in place over gRPC's slices (chunk payloads left where they arrived), and
// protobuf's own parser for what that path does not take. The writing half
// is chunk_codec.cc.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/ps/chunk_codec.h"
#include "common/ps/chunk_wire_types.h"

namespace bertps {
namespace ps {
namespace {

using wire_types::kEndGroup;
using wire_types::kFixed32;
using wire_types::kFixed64;
using wire_types::kLen;
using wire_types::kStartGroup;
using wire_types::kVarint;

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
// message, which the result owns. `fill` sets the message's oneof member
// (ViewChunks: the chunk members common to both messages).
template <typename Message, typename Parsed, typename Fill>
absl::Status ParseEitherWay(
    const grpc::ByteBuffer& buffer, Parsed* out,
    absl::Status (*fast)(const grpc::ByteBuffer&, Parsed*), Fill fill) {
  absl::Status st = fast(buffer, out);
  if (st.ok() || out->slices.empty()) return st;
  std::string bytes;
  for (const grpc::Slice& s : out->slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  auto m = std::make_shared<Message>();
  if (!m->ParseFromString(bytes) ||
      m->chunks().chunks_size() > static_cast<int>(kMaxChunksPerMessage)) {
    return st;
  }
  std::vector<grpc::Slice> slices = std::move(out->slices);
  *out = Parsed();
  out->slices = std::move(slices);
  fill(*m, out);
  out->owned = std::move(m);
  return absl::OkStatus();
}

// A parsed message's chunk or chunks (whichever it holds), as views.
template <typename Message, typename Parsed>
void ViewChunks(const Message& m, Parsed* out) {
  if (m.has_chunk()) {
    out->has_chunk = true;
    out->chunk = ChunkRef::Of(m.chunk());
  } else if (m.has_chunks()) {
    out->has_chunks = true;
    for (const TensorChunk& c : m.chunks().chunks()) {
      out->chunks.push_back(ChunkRef::Of(c));
    }
  }
}

}  // namespace

absl::Status ParsePushRequest(const grpc::ByteBuffer& buffer,
                              ParsedPushRequest* out) {
  return ParseEitherWay<PushRequest>(
      buffer, out, &FastParsePushRequest,
      [](const PushRequest& m, ParsedPushRequest* p) {
        p->has_header = m.has_header();
        if (p->has_header) p->header = m.header();
        p->has_next_first = m.has_next_first();
        if (p->has_next_first) p->next_first = m.next_first();
        ViewChunks(m, p);
      });
}

absl::Status ParsePullResponse(const grpc::ByteBuffer& buffer,
                               ParsedPullResponse* out) {
  return ParseEitherWay<PullResponse>(
      buffer, out, &FastParsePullResponse,
      [](const PullResponse& m, ParsedPullResponse* p) {
        p->has_version = m.msg_case() == PullResponse::kVersion;
        p->version = m.version();
        ViewChunks(m, p);
      });
}

}  // namespace ps
}  // namespace bertps
