// The hand-written chunk codec against protobuf itself: what EncodeChunk
// writes parses as the same protobuf message, and whatever protobuf writes
// (any split into transport slices) parses to the same fields.
#include "common/ps/chunk_codec.h"

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
    raw.push_back(static_cast<char>((body.size() & 0x7f) | 0x80));
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

// A batch (ChunkBatch) is protobuf's encoding of `chunks` (TensorChunks):
// range, row and BF16 chunks in the order added, payloads sent from where
// they lie; both parsers find them, for any cut into transport slices.
TEST(ChunkCodecTest, ABatchIsTheProtobufEncodingOfChunks) {
  const std::vector<float> v = Values(300);
  const std::vector<uint16_t> half = {0x3f80, 0xbf80, 0x4000};
  const std::vector<int64_t> rows = {1, 4, 5};
  auto build = [&](int field) {
    ChunkBatch batch(field);
    EXPECT_TRUE(batch.empty());
    batch.AddChunk("bert.pooler.dense.bias", F32, 12,
                   grpc::Slice(v.data(), sizeof(float) * 100,
                               grpc::Slice::STATIC_SLICE));
    std::vector<grpc::Slice> pieces;
    pieces.emplace_back(v.data() + 100, sizeof(float) * 40,
                        grpc::Slice::STATIC_SLICE);
    pieces.emplace_back(v.data() + 140, sizeof(float) * 80,
                        grpc::Slice::STATIC_SLICE);
    batch.AddRowChunk("bert.embeddings.word_embeddings.weight", F32, rows,
                      std::move(pieces));
    batch.AddChunk("cls.predictions.bias", BF16, 0,
                   grpc::Slice(half.data(), 2 * half.size()));
    EXPECT_EQ(batch.payload_bytes(), sizeof(float) * 220 + 2 * half.size());
    grpc::ByteBuffer b = batch.Take();
    EXPECT_TRUE(batch.empty());
    EXPECT_EQ(batch.payload_bytes(), 0u);
    return Flatten(b);
  };
  TensorChunks want;
  TensorChunk* a = want.add_chunks();
  a->set_name("bert.pooler.dense.bias");
  a->set_dtype(F32);
  a->set_offset(12);
  a->set_data(std::string(reinterpret_cast<const char*>(v.data()), 400));
  TensorChunk* r = want.add_chunks();
  r->set_name("bert.embeddings.word_embeddings.weight");
  r->set_dtype(F32);
  r->set_data(std::string(reinterpret_cast<const char*>(v.data() + 100), 480));
  for (int64_t x : rows) r->add_rows(x);
  TensorChunk* h = want.add_chunks();
  h->set_name("cls.predictions.bias");
  h->set_dtype(BF16);
  h->set_data(std::string(reinterpret_cast<const char*>(half.data()), 6));

  const std::string push_bytes = build(kPushChunksField);
  PushRequest push_want;
  *push_want.mutable_chunks() = want;
  EXPECT_EQ(push_bytes, push_want.SerializeAsString());
  const std::string pull_bytes = build(kPullChunksField);
  PullResponse pull_want;
  *pull_want.mutable_chunks() = want;
  EXPECT_EQ(pull_bytes, pull_want.SerializeAsString());

  for (size_t cut = 1; cut < push_bytes.size(); cut += 37) {
    ParsedPushRequest p;
    ASSERT_TRUE(ParsePushRequest(Split(push_bytes, {cut}), &p).ok()) << cut;
    ASSERT_TRUE(p.has_chunks);
    EXPECT_FALSE(p.has_chunk);
    ASSERT_EQ(p.chunks.size(), 3u);
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(p.chunks[k].name, want.chunks(k).name());
      EXPECT_EQ(p.chunks[k].dtype, want.chunks(k).dtype());
      EXPECT_EQ(p.chunks[k].offset, want.chunks(k).offset());
      EXPECT_EQ(Payload(p.chunks[k]), want.chunks(k).data());
    }
    EXPECT_EQ(p.chunks[1].rows, rows);
    ParsedPullResponse q;
    ASSERT_TRUE(ParsePullResponse(Split(pull_bytes, {cut}), &q).ok()) << cut;
    ASSERT_TRUE(q.has_chunks);
    EXPECT_FALSE(q.has_version);
    ASSERT_EQ(q.chunks.size(), 3u);
    EXPECT_EQ(Payload(q.chunks[2]), want.chunks(2).data());
  }
  // Truncated anywhere: refused, never read past the end.
  for (size_t len = 1; len < push_bytes.size(); len += 29) {
    ParsedPushRequest p;
    EXPECT_TRUE(absl::IsInvalidArgument(
        ParsePushRequest(Split(push_bytes.substr(0, len), {}), &p)))
        << len;
  }
}

// A message of more than kMaxChunksPerMessage chunks (empty ones cost two
// bytes each on the wire) is refused before it costs much memory.
TEST(ChunkCodecTest, TooManyChunksInOneMessageAreRefused) {
  PushRequest ok;
  PullResponse too_many;
  for (size_t k = 0; k < kMaxChunksPerMessage; ++k) {
    ok.mutable_chunks()->add_chunks();
    too_many.mutable_chunks()->add_chunks();
  }
  too_many.mutable_chunks()->add_chunks();
  ParsedPushRequest p;
  ASSERT_TRUE(ParsePushRequest(Split(ok.SerializeAsString(), {}), &p).ok());
  EXPECT_EQ(p.chunks.size(), kMaxChunksPerMessage);
  ParsedPullResponse q;
  EXPECT_TRUE(absl::IsInvalidArgument(
      ParsePullResponse(Split(too_many.SerializeAsString(), {}), &q)));
  // Split over two `chunks` fields (merged by protobuf): the same limit.
  PullResponse half;
  for (size_t k = 0; k <= kMaxChunksPerMessage / 2; ++k) {
    half.mutable_chunks()->add_chunks();
  }
  const std::string twice = half.SerializeAsString() + half.SerializeAsString();
  EXPECT_TRUE(absl::IsInvalidArgument(ParsePullResponse(Split(twice, {}), &q)));
}

// A batch of one chunk goes out as a plain `chunk` message.
TEST(ChunkCodecTest, ABatchOfOneIsAPlainChunk) {
  const std::vector<float> v = Values(10);
  ChunkBatch batch(kPushChunksField);
  batch.AddChunk("bert.pooler.dense.bias", F32, 3,
                 grpc::Slice(v.data(), sizeof(float) * v.size(),
                             grpc::Slice::STATIC_SLICE));
  const std::string bytes = Flatten(batch.Take());
  EXPECT_EQ(bytes, Flatten(EncodeChunk("bert.pooler.dense.bias", F32, 3,
                                       grpc::Slice(v.data(), 40))));
  PushRequest m;
  ASSERT_TRUE(m.ParseFromString(bytes));
  EXPECT_TRUE(m.has_chunk());
}

// The oneof as protobuf merges it: a later member replaces an earlier one,
// repeated `chunks` fields add up.
TEST(ChunkCodecTest, ChunksFollowTheOneofRules) {
  PushRequest one;
  one.mutable_chunk()->set_name("a");
  one.mutable_chunk()->set_data("abcd");
  PushRequest two;
  two.mutable_chunks()->add_chunks()->set_name("b");
  two.mutable_chunks()->add_chunks()->set_name("c");
  PushRequest three;
  three.mutable_chunks()->add_chunks()->set_name("d");
  const std::string s1 = one.SerializeAsString();
  const std::string s2 = two.SerializeAsString();
  const std::string s3 = three.SerializeAsString();
  ParsedPushRequest p;
  // chunk, then chunks: the chunks only.
  ASSERT_TRUE(ParsePushRequest(Split(s1 + s2, {}), &p).ok());
  EXPECT_FALSE(p.has_chunk);
  ASSERT_TRUE(p.has_chunks);
  ASSERT_EQ(p.chunks.size(), 2u);
  // chunks twice: merged, in order.
  ASSERT_TRUE(ParsePushRequest(Split(s2 + s3, {}), &p).ok());
  ASSERT_EQ(p.chunks.size(), 3u);
  EXPECT_EQ(p.chunks[2].name, "d");
  // chunks, then chunk: the chunk only.
  ASSERT_TRUE(ParsePushRequest(Split(s2 + s1, {}), &p).ok());
  EXPECT_TRUE(p.has_chunk);
  EXPECT_FALSE(p.has_chunks);
  EXPECT_TRUE(p.chunks.empty());
  EXPECT_EQ(p.chunk.name, "a");
  PushRequest ref;
  ASSERT_TRUE(ref.ParseFromString(s2 + s1));
  EXPECT_TRUE(ref.has_chunk());
  // Pull: version, then chunks; chunks, then version.
  PullResponse v;
  v.set_version(7);
  PullResponse c;
  c.mutable_chunks()->add_chunks()->set_name("x");
  ParsedPullResponse q;
  ASSERT_TRUE(ParsePullResponse(
      Split(v.SerializeAsString() + c.SerializeAsString(), {}), &q).ok());
  EXPECT_FALSE(q.has_version);
  ASSERT_TRUE(q.has_chunks);
  EXPECT_EQ(q.chunks.size(), 1u);
  ASSERT_TRUE(ParsePullResponse(
      Split(c.SerializeAsString() + v.SerializeAsString(), {}), &q).ok());
  EXPECT_TRUE(q.has_version);
  EXPECT_EQ(q.version, 7);
  EXPECT_FALSE(q.has_chunks);
  EXPECT_TRUE(q.chunks.empty());
  // A chunk inside a batch that is itself malformed (a bad wire type for
  // its name): the whole message is refused.
  std::string bad = two.SerializeAsString();
  const size_t at = bad.find('b') - 2;  // the tag of the first name
  ASSERT_EQ(bad[at], 0x0a);
  bad[at] = 0x0f;  // field 1, wire type 7
  EXPECT_TRUE(absl::IsInvalidArgument(ParsePushRequest(Split(bad, {}), &p)));
}

}  // namespace
}  // namespace ps
}  // namespace bertps
