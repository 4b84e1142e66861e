// The hand-written chunk codec against protobuf itself: what EncodeChunk
// writes parses as the same protobuf message, and whatever protobuf writes
// (any split into transport slices) parses to the same fields.
#include "server/ps/chunk_codec.h"

#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace bertps {
namespace ps {
namespace {

std::string Flatten(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(b.Dump(&slices).ok());
  std::string out;
  for (const auto& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

// The bytes as a buffer of slices cut at `cuts` (positions).
grpc::ByteBuffer Split(const std::string& bytes, std::vector<size_t> cuts) {
  std::vector<grpc::Slice> slices;
  size_t prev = 0;
  cuts.push_back(bytes.size());
  for (size_t c : cuts) {
    slices.emplace_back(bytes.data() + prev, c - prev);
    prev = c;
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string Payload(const ChunkRef& c) {
  std::string out(c.data_bytes, '\0');
  c.CopyDataTo(out.data());
  return out;
}

std::vector<float> Values(int n) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = 0.01f * i - 1.5f;
  return v;
}

TEST(ChunkCodecTest, EncodedChunkIsTheProtobufEncoding) {
  const std::vector<float> v = Values(1000);
  for (int64_t offset : {int64_t{0}, int64_t{7}, int64_t{23440896}}) {
    grpc::ByteBuffer b = EncodeChunk(
        "bert.embeddings.word_embeddings.weight", F32, offset,
        grpc::Slice(v.data(), sizeof(float) * v.size(),
                    grpc::Slice::STATIC_SLICE));
    const std::string bytes = Flatten(b);
    PushRequest want;
    TensorChunk* c = want.mutable_chunk();
    c->set_name("bert.embeddings.word_embeddings.weight");
    c->set_dtype(F32);
    c->set_offset(offset);
    c->set_data(v.data(), sizeof(float) * v.size());
    EXPECT_EQ(bytes, want.SerializeAsString());  // byte for byte
    PullResponse pull;
    ASSERT_TRUE(pull.ParseFromString(bytes));
    EXPECT_EQ(pull.chunk().SerializeAsString(), c->SerializeAsString());
  }
}

TEST(ChunkCodecTest, ParsesProtobufBytesSplitAnywhere) {
  const std::vector<float> v = Values(64);
  PushRequest m;
  TensorChunk* c = m.mutable_chunk();
  c->set_name("bert.encoder.layer.0.attention.self.query.weight");
  c->set_dtype(F32);
  c->add_shape(128);
  c->add_shape(128);
  c->set_offset(4096);
  c->set_data(v.data(), sizeof(float) * v.size());
  const std::string bytes = m.SerializeAsString();
  for (size_t cut = 1; cut < bytes.size(); ++cut) {
    ParsedPushRequest p;
    ASSERT_TRUE(ParsePushRequest(Split(bytes, {cut}), &p).ok()) << cut;
    ASSERT_TRUE(p.has_chunk);
    EXPECT_FALSE(p.has_header);
    EXPECT_EQ(p.chunk.name, c->name());
    EXPECT_EQ(p.chunk.dtype, F32);
    EXPECT_EQ(p.chunk.shape, (std::vector<int64_t>{128, 128}));
    EXPECT_EQ(p.chunk.offset, 4096);
    EXPECT_EQ(Payload(p.chunk), c->data());
  }
  // Many small slices.
  std::vector<size_t> cuts;
  for (size_t i = 3; i < bytes.size(); i += 5) cuts.push_back(i);
  ParsedPushRequest p;
  ASSERT_TRUE(ParsePushRequest(Split(bytes, cuts), &p).ok());
  EXPECT_EQ(Payload(p.chunk), c->data());
  EXPECT_GT(p.chunk.data.size(), 10u);
}

TEST(ChunkCodecTest, RowPiecesAreTheGatheredRowsAndReferLongRuns) {
  // A table of 4000 rows of 64 floats (256 bytes): runs of 8 or more rows
  // (2 KB) are referenced in place, shorter ones copied.
  const int64_t row = 64, n = 4000;
  const std::vector<float> table = Values(row * n);
  const grpc::Slice whole(const_cast<float*>(table.data()),
                          sizeof(float) * table.size(),
                          grpc::Slice::STATIC_SLICE);
  // A sub-table from row 100 on, as a shard's slice of a bigger tensor.
  const int64_t first = 100;
  const grpc::Slice sub =
      whole.sub(sizeof(float) * row * first, sizeof(float) * table.size());
  std::vector<int64_t> rows = {100, 102, 103};            // short runs
  for (int64_t r = 200; r < 230; ++r) rows.push_back(r);  // a long run
  rows.push_back(500);
  for (int64_t r = 3990; r < 4000; ++r) rows.push_back(r);  // long, at the end
  std::vector<float> gathered;
  for (int64_t r : rows) {
    gathered.insert(gathered.end(), table.begin() + r * row,
                    table.begin() + (r + 1) * row);
  }
  std::vector<grpc::Slice> pieces =
      RowPieces(sub, sizeof(float) * row, first, rows);
  // {100, 102, 103} copied together, {200..229} referenced, {500} copied,
  // {3990..3999} referenced.
  ASSERT_EQ(pieces.size(), 4u);
  EXPECT_EQ(pieces[0].size(), 3 * sizeof(float) * row);
  EXPECT_NE(reinterpret_cast<const float*>(pieces[0].begin()),
            table.data() + 100 * row);  // copied
  EXPECT_EQ(reinterpret_cast<const float*>(pieces[1].begin()),
            table.data() + 200 * row);  // referenced, not copied
  EXPECT_EQ(pieces[2].size(), sizeof(float) * row);
  EXPECT_EQ(reinterpret_cast<const float*>(pieces[3].begin()),
            table.data() + 3990 * row);
  const std::string bytes =
      Flatten(EncodeRowChunk("t", F32, rows, std::move(pieces)));
  const std::string want = Flatten(EncodeRowChunk(
      "t", F32, rows,
      grpc::Slice(gathered.data(), sizeof(float) * gathered.size())));
  EXPECT_EQ(bytes, want);
  // A referenced table stays alive while a piece does.
  static int released = 0;
  released = 0;
  std::vector<float> held = Values(row * 16);
  std::vector<grpc::Slice> kept;
  {
    const grpc::Slice counted(held.data(), sizeof(float) * held.size(),
                              [](void*) { ++released; });
    std::vector<int64_t> all(16);
    for (int64_t r = 0; r < 16; ++r) all[r] = r;
    kept = RowPieces(counted, sizeof(float) * row, 0, all);
  }
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(released, 0);
  kept.clear();
  EXPECT_EQ(released, 1);
}

TEST(ChunkCodecTest, RowChunksAreTheProtobufEncoding) {
  const std::vector<float> v = Values(3 * 4);  // 3 rows of 4
  const std::vector<int64_t> rows = {0, 5, 300000};
  grpc::ByteBuffer b = EncodeRowChunk(
      "bert.embeddings.word_embeddings.weight", F32, rows,
      grpc::Slice(v.data(), sizeof(float) * v.size(),
                  grpc::Slice::STATIC_SLICE));
  const std::string bytes = Flatten(b);
  PushRequest want;
  TensorChunk* c = want.mutable_chunk();
  c->set_name("bert.embeddings.word_embeddings.weight");
  c->set_dtype(F32);
  c->set_data(v.data(), sizeof(float) * v.size());
  for (int64_t r : rows) c->add_rows(r);
  EXPECT_EQ(bytes, want.SerializeAsString());  // byte for byte
  // Parsed back at every cut, unpacked rows too; the reader walks pieces.
  for (size_t cut = 1; cut < bytes.size(); cut += 7) {
    ParsedPullResponse p;
    ASSERT_TRUE(ParsePullResponse(Split(bytes, {cut}), &p).ok()) << cut;
    ASSERT_TRUE(p.has_chunk);
    EXPECT_EQ(p.chunk.rows, rows);
    EXPECT_EQ(p.chunk.offset, 0);
    std::vector<float> back(v.size());
    ChunkRef::Reader reader(p.chunk);
    for (size_t i = 0; i < back.size(); ++i) reader.Read(&back[i], sizeof(float));
    EXPECT_EQ(back, v);
  }
  // Unpacked encoding of the rows (valid protobuf) parses the same.
  std::string unpacked;
  {
    TensorChunk u;
    u.set_name(c->name());
    u.set_dtype(F32);
    u.set_data(c->data());
    std::string body = u.SerializeAsString();
    for (int64_t r : rows) {
      body.push_back(static_cast<char>(6 << 3 | 0));  // field 6, varint
      uint64_t x = static_cast<uint64_t>(r);
      while (x >= 0x80) {
        body.push_back(static_cast<char>((x & 0x7f) | 0x80));
        x >>= 7;
      }
      body.push_back(static_cast<char>(x));
    }
    PushRequest m;
    ASSERT_TRUE(m.mutable_chunk()->ParseFromString(body));
    EXPECT_EQ(std::vector<int64_t>(m.chunk().rows().begin(), m.chunk().rows().end()), rows);
    unpacked = m.SerializeAsString();  // re-packed by protobuf
    std::string raw;
    raw.push_back(static_cast<char>(2 << 3 | 2));
    raw.push_back(static_cast<char>(body.size() & 0x7f | 0x80));
    raw.push_back(static_cast<char>(body.size() >> 7));
    raw += body;
    ParsedPushRequest p;
    ASSERT_TRUE(ParsePushRequest(Split(raw, {}), &p).ok());
    EXPECT_EQ(p.chunk.rows, rows);
  }
  ParsedPushRequest p;
  ASSERT_TRUE(ParsePushRequest(Split(unpacked, {}), &p).ok());
  EXPECT_EQ(p.chunk.rows, rows);
}

TEST(ChunkCodecTest, HeadersAndVersions) {
  PushRequest h;
  h.mutable_header()->set_worker(3);
  h.mutable_header()->set_step(17);
  h.mutable_header()->set_examples(32);
  h.mutable_header()->set_grad_sq_sum(2.5);
  ParsedPushRequest p;
  ASSERT_TRUE(ParsePushRequest(EncodeMessage(h), &p).ok());
  ASSERT_TRUE(p.has_header);
  EXPECT_FALSE(p.has_chunk);
  EXPECT_EQ(p.header.SerializeAsString(), h.header().SerializeAsString());

  PullResponse v;
  v.set_version(123456789012);
  ParsedPullResponse q;
  ASSERT_TRUE(ParsePullResponse(EncodeMessage(v), &q).ok());
  EXPECT_TRUE(q.has_version);
  EXPECT_FALSE(q.has_chunk);
  EXPECT_EQ(q.version, 123456789012);

  // A pull chunk through the pull parser.
  const std::vector<float> x = Values(10);
  ASSERT_TRUE(ParsePullResponse(
                  EncodeChunk("cls.predictions.bias", F32, 30000,
                              grpc::Slice(x.data(), 40)),
                  &q)
                  .ok());
  ASSERT_TRUE(q.has_chunk);
  EXPECT_FALSE(q.has_version);
  EXPECT_EQ(q.chunk.name, "cls.predictions.bias");
  EXPECT_EQ(q.chunk.offset, 30000);
  std::vector<float> got(10);
  q.chunk.CopyDataTo(got.data());
  EXPECT_EQ(got, x);
}

TEST(ChunkCodecTest, UnknownFieldsAreSkipped) {
  // A newer sender's chunk with an extra field (number 9, varint and bytes).
  TensorChunk c;
  c.set_name("bert.pooler.dense.bias");
  c.set_dtype(BF16);
  c.set_data(std::string(6, '\x01'));
  std::string chunk = c.SerializeAsString();
  chunk += std::string("\x48\x05\x4a\x02xy", 6);
  std::string bytes = "\x12";
  bytes.push_back(static_cast<char>(chunk.size()));
  bytes += chunk;
  ParsedPushRequest p;
  ASSERT_TRUE(ParsePushRequest(Split(bytes, {}), &p).ok());
  EXPECT_EQ(p.chunk.name, "bert.pooler.dense.bias");
  EXPECT_EQ(p.chunk.dtype, BF16);
  EXPECT_EQ(Payload(p.chunk), std::string(6, '\x01'));
}

TEST(ChunkCodecTest, GroupsAreSkippedLikeProtobufDoes) {
  // Unknown fields sent as groups (field 9, holding a varint and a nested
  // group of field 10) in a chunk: protobuf accepts them, and so do we.
  TensorChunk c;
  c.set_name("w");
  c.set_data(std::string(4, '\x02'));
  const std::string group("\x4b\x08\x01\x53\x08\x02\x54\x4c", 8);
  std::string chunk = c.SerializeAsString() + group;
  std::string bytes = "\x12";
  bytes.push_back(static_cast<char>(chunk.size()));
  bytes += chunk;
  PushRequest ref;
  ASSERT_TRUE(ref.ParseFromString(bytes));
  ParsedPushRequest p;
  ASSERT_TRUE(ParsePushRequest(Split(bytes, {3, 7}), &p).ok());
  EXPECT_EQ(p.chunk.name, "w");
  EXPECT_EQ(Payload(p.chunk), ref.chunk().data());
  // An end tag with no group open, or closing another field's group: both
  // refused by protobuf and by us.
  for (const std::string& bad :
       {std::string("\x4c", 1), std::string("\x4b\x54", 2)}) {
    std::string b = "\x12";
    std::string ch = c.SerializeAsString() + bad;
    b.push_back(static_cast<char>(ch.size()));
    b += ch;
    EXPECT_FALSE(ref.ParseFromString(b));
    EXPECT_FALSE(ParsePushRequest(Split(b, {}), &p).ok());
  }
}

TEST(ChunkCodecTest, MalformedBytesAreRejected) {
  const std::vector<float> v = Values(16);
  const std::string bytes = Flatten(
      EncodeChunk("bert.pooler.dense.weight", F32, 0, grpc::Slice(v.data(), 64)));
  // Every truncation is an error, never a crash or a short chunk.
  for (size_t n = 1; n < bytes.size(); ++n) {
    ParsedPushRequest p;
    EXPECT_FALSE(ParsePushRequest(Split(bytes.substr(0, n), {}), &p).ok()) << n;
  }
  // A data length beyond the chunk, a huge length, field number 0, an
  // unterminated group (a whole group is valid protobuf: see above).
  for (std::string bad :
       {std::string("\x12\x04\x2a\x10\x00\x00", 6),
        std::string("\x12\x0b\x0a\xff\xff\xff\xff\xff\xff\xff\xff\x7f", 12),
        std::string("\x00\x01", 2), std::string("\x13\x08\x01", 3)}) {
    ParsedPushRequest p;
    EXPECT_FALSE(ParsePushRequest(Split(bad, {}), &p).ok());
    ParsedPullResponse q;
    EXPECT_FALSE(ParsePullResponse(Split(bad, {}), &q).ok());
  }
}

}  // namespace
}  // namespace ps
}  // namespace bertps
