// The worker's pull against a shard that sends wrong data: a real gRPC
// server on 127.0.0.1 whose Pull is scripted. Every malformed or misplaced
// chunk is a DataLoss error naming the problem, with and without the pull's
// copy thread (PsClientOptions::pull_copy_thread), and a good pull delivers
// every element exactly.
#include "common/cluster/plan_for.h"
#include "common/ps/ps_client.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/io/half.h"
#include "common/model/test_util.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "common/ps/partition.h"
#include "server/ps/server.h"
#include "server/ps/shard.h"

namespace bertps {
namespace {

// The shared small test model (common/model/test_util.h).
BertConfig Small() { return testing::TinyTestConfig(); }

// What the scripted shard does wrong.
enum class Fault {
  kNone,
  kOutOfPlace,     // a chunk starting one element past where it should
  kUnknownTensor,  // a chunk of a tensor the model does not have
  kOddBytes,       // a chunk whose data is not whole floats
  kRepeatedRow,    // two row chunks of the same row (sent first)
  kShort,          // the last slice left out
  kStall,          // 100 chunks, then nothing until the call is cancelled
  kUnaskedBf16,    // a BF16 chunk to a pull that did not ask for bf16
};

// Element e of layout tensor t holds spec.offset + e: every value says
// where it belongs.
std::string Values(const ParamSpec& spec, int64_t begin, int64_t n) {
  std::string out(n * sizeof(float), '\0');
  for (int64_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(spec.offset + begin + i);
    std::memcpy(&out[i * sizeof(float)], &v, sizeof(float));
  }
  return out;
}

class ScriptedShard final : public ParameterServer::Service {
 public:
  explicit ScriptedShard(Fault fault, BertConfig config = Small())
      : fault_(fault) {
    ps::ShardOptions o;
    o.config = config;
    described_ = (*ps::ShardCore::Create(o, nullptr))->Describe();
  }

  // A push's header is taken, then nothing more until the call is
  // cancelled: a push stream that stops moving (the client's writes wait
  // once the flow-control windows are full).
  grpc::Status Push(grpc::ServerContext* ctx,
                    grpc::ServerReader<PushRequest>* reader,
                    PushResponse*) override {
    PushRequest header;
    reader->Read(&header);
    while (!ctx->IsCancelled()) absl::SleepFor(absl::Milliseconds(20));
    return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
  }

  grpc::Status Describe(grpc::ServerContext*, const DescribeRequest*,
                        DescribeResponse* out) override {
    *out = described_;
    return grpc::Status::OK;
  }

  // Version 7, then every slice in chunks of 7 elements (many messages, so
  // that a fault lands mid-stream with more to come after it).
  grpc::Status Pull(grpc::ServerContext* ctx, const PullRequest*,
                    grpc::ServerWriter<PullResponse>* w) override {
    const ParamLayout layout = ParamLayout::ForBert(Small(), BertTask::kPretrain);
    const ps::PartitionPlan plan = *ps::PartitionPlan::Make(layout, 1);
    PullResponse version;
    version.set_version(7);
    w->Write(version);
    if (fault_ == Fault::kRepeatedRow) {
      // First, while rows are still allowed for the word embeddings; in two
      // chunks (one chunk's rows must increase, or it is malformed).
      PullResponse m;
      Spoil(layout, &m);
      w->Write(m);
      w->Write(m);
    }
    const std::vector<int>& mine = plan.shard_slices(0);
    const size_t slices = fault_ == Fault::kShort ? mine.size() - 1 : mine.size();
    int sent = 0;
    for (size_t k = 0; k < slices; ++k) {
      const ps::SliceSpec& sl = plan.slices()[mine[k]];
      const ParamSpec& spec = layout.tensors()[sl.tensor];
      for (int64_t at = sl.begin; at < sl.end; at += 7) {
        const int64_t n = std::min<int64_t>(7, sl.end - at);
        PullResponse m;
        TensorChunk* c = m.mutable_chunk();
        c->set_name(sl.name);
        c->set_dtype(F32);
        c->set_offset(at);
        c->set_data(Values(spec, at, n));
        if (sent == 100 && fault_ == Fault::kStall) {
          // A stream that stops moving, its connection alive.
          while (!ctx->IsCancelled()) absl::SleepFor(absl::Milliseconds(20));
          return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
        }
        if (++sent == 100 && fault_ != Fault::kRepeatedRow) Spoil(layout, &m);
        w->Write(m);
      }
    }
    return grpc::Status::OK;
  }

 private:
  void Spoil(const ParamLayout& layout, PullResponse* m) const {
    TensorChunk* c = m->mutable_chunk();
    switch (fault_) {
      case Fault::kOutOfPlace:
        c->set_offset(c->offset() + 1);
        break;
      case Fault::kUnknownTensor:
        c->set_name("no.such.tensor");
        break;
      case Fault::kOddBytes:
        c->mutable_data()->resize(6);
        break;
      case Fault::kUnaskedBf16:
        c->set_dtype(BF16);
        c->mutable_data()->resize(c->data().size() / 2);
        break;
      case Fault::kRepeatedRow: {
        const ParamSpec& words = layout.tensors()[0];
        const int64_t row = ps::RowSize(words);
        c->set_name(words.name);
        c->set_dtype(F32);
        c->set_offset(0);
        c->clear_rows();
        c->add_rows(3);
        c->set_data(Values(words, 3 * row, row));
        break;
      }
      case Fault::kNone:
      case Fault::kShort:
      case Fault::kStall:
        break;
    }
  }

  const Fault fault_;
  DescribeResponse described_;
};

// A scripted shard served on 127.0.0.1 (server null when it could not
// start), shut down when this goes.
struct Serving {
  explicit Serving(ScriptedShard* shard) {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                       &port);
    b.RegisterService(shard);
    server = b.BuildAndStart();
  }
  ~Serving() {
    if (server != nullptr) server->Shutdown();
  }
  // Client options that reach it.
  PsClientOptions Options() const {
    PsClientOptions o;
    o.addresses = {"127.0.0.1:" + std::to_string(port)};
    o.rpc_timeout = absl::Seconds(30);
    return o;
  }
  int port = 0;
  std::unique_ptr<grpc::Server> server;
};

// Two real shards of the small model (initial values from `seed`) on
// 127.0.0.1; `shards` holds fewer when one could not start.
struct RealShards {
  explicit RealShards(uint64_t seed, int workers = 1) {
    ps::ShardOptions so;
    so.config = Small();
    so.init_seed = seed;
    so.num_shards = 2;
    so.job_plan = PlanFor(BSP, workers, so.optimizer);
    for (int i = 0; i < 2; ++i) {
      so.shard = i;
      auto server = ps::ShardServer::Start(so, "127.0.0.1:0", {});
      EXPECT_TRUE(server.ok()) << server.status();
      if (!server.ok()) return;
      addresses.push_back((*server)->address());
      shards.push_back(std::move(*server));
    }
    for (auto& s : shards) s->SetPeers(addresses);
  }
  PsClientOptions Options() const {
    PsClientOptions o;
    o.addresses = addresses;
    o.rpc_timeout = absl::Seconds(30);
    return o;
  }
  std::vector<std::unique_ptr<ps::ShardServer>> shards;
  std::vector<std::string> addresses;
};

struct Case {
  Fault fault;
  const char* message;  // in the error ("" : none)
};

class PullFromScriptedShard
    : public ::testing::TestWithParam<std::tuple<Case, bool>> {};

TEST_P(PullFromScriptedShard, DeliversOrFailsNamingTheProblem) {
  const Case c = std::get<0>(GetParam());
  const bool copy_thread = std::get<1>(GetParam());
  ScriptedShard shard(c.fault);
  Serving serving(&shard);
  ASSERT_NE(serving.server, nullptr);
  PsClientOptions o = serving.Options();
  o.pull_copy_thread = copy_thread;
  auto client = PsClient::Connect(o, Small(), BertTask::kPretrain);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ((*client)->pull_copy_thread(), copy_thread);
  // A reading thread that copies gets fixed windows; one with a copier,
  // gRPC's.
  EXPECT_EQ((*client)->pull_window_bytes(),
            copy_thread ? 0 : kFixedPullWindowBytes);
  const ParamLayout& layout = (*client)->layout();
  std::vector<float> params(layout.total_size(), -1.f);
  absl::StatusOr<int64_t> v = (*client)->Pull(0, 0, 0, params.data());
  if (c.fault == Fault::kNone) {
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(*v, 7);
    for (size_t i = 0; i < params.size(); ++i) {
      ASSERT_EQ(params[i], static_cast<float>(i)) << "element " << i;
    }
  } else {
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.status().code(), absl::StatusCode::kDataLoss) << v.status();
    EXPECT_NE(v.status().message().find(c.message), absl::string_view::npos)
        << v.status();
  }
}

// How a stalled call ends: with the watch on, UNAVAILABLE saying `says`,
// well before the 3 s deadline, counted once in `stalls`; without it, at
// the deadline.
void ExpectStallEnd(const absl::Status& st, absl::Duration took, bool watched,
                    int64_t stalls, const std::string& says) {
  if (watched) {
    EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
    EXPECT_NE(st.message().find(says), std::string::npos) << st;
    EXPECT_LT(took, absl::Seconds(2.5));
    EXPECT_EQ(stalls, 1);
  } else {
    EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
    EXPECT_GE(took, absl::Seconds(2.5));
    EXPECT_EQ(stalls, 0);
  }
}

// A pull whose stream stops after part of the parameters (a shard's
// connection half-open, a stream window that never reopened) fails
// UNAVAILABLE once it was silent for pull_stall_timeout, naming how far it
// got, instead of holding the worker until rpc_timeout; with the watch off
// it waits out the deadline.
TEST(PsClientStall, AStreamThatStopsIsCancelledAndNamed) {
  ScriptedShard shard(Fault::kStall);
  Serving serving(&shard);
  ASSERT_NE(serving.server, nullptr);
  const ParamLayout layout = ParamLayout::ForBert(Small(), BertTask::kPretrain);
  std::vector<float> params(layout.total_size());
  for (const bool watched : {true, false}) {
    PsClientOptions o = serving.Options();
    o.rpc_timeout = absl::Seconds(3);
    o.pull_stall_timeout = watched ? absl::Milliseconds(500) : absl::ZeroDuration();
    auto client = PsClient::Connect(o, Small(), BertTask::kPretrain);
    ASSERT_TRUE(client.ok()) << client.status();
    const absl::Time t0 = absl::Now();
    absl::StatusOr<int64_t> v = (*client)->Pull(0, 0, 0, params.data());
    const absl::Duration took = absl::Now() - t0;
    ASSERT_FALSE(v.ok());
    ExpectStallEnd(v.status(), took, watched, (*client)->pull_stalls(),
                   "stalled: nothing for 500ms after ");
  }
}

// A push whose writes stop being taken fails UNAVAILABLE once a write has
// waited push_stall_timeout, naming how far it got (the caller retries, and
// the shard applies the retry once); with the watch off it waits out the
// deadline.
TEST(PsClientStall, APushWhoseWritesStopIsCancelledAndNamed) {
  // A word table of 32 MB: far more than the windows and socket buffers
  // between the two.
  BertConfig big = Small();
  big.vocab_size = 1 << 20;
  ScriptedShard shard(Fault::kNone, big);
  Serving serving(&shard);
  ASSERT_NE(serving.server, nullptr);
  const ParamLayout layout = ParamLayout::ForBert(big, BertTask::kPretrain);
  std::vector<float> grads(layout.total_size(), 1e-3f);
  for (const bool watched : {true, false}) {
    PsClientOptions o = serving.Options();
    o.rpc_timeout = absl::Seconds(3);
    o.push_stall_timeout =
        watched ? absl::Milliseconds(500) : absl::ZeroDuration();
    auto client = PsClient::Connect(o, big, BertTask::kPretrain);
    ASSERT_TRUE(client.ok()) << client.status();
    PushHeader h;
    h.set_worker(0);
    h.set_step(0);
    h.set_examples(1);
    const absl::Time t0 = absl::Now();
    auto push = (*client)->BeginPush(h);
    ASSERT_TRUE(push.ok()) << push.status();
    for (size_t t = 0; t < layout.tensors().size(); ++t) {
      (*push)->Send(static_cast<int>(t), grads.data() + layout.tensors()[t].offset);
    }
    absl::StatusOr<int64_t> v = (*push)->Finish();
    const absl::Duration took = absl::Now() - t0;
    ASSERT_FALSE(v.ok());
    ExpectStallEnd(v.status(), took, watched, (*client)->push_stalls(),
                   "push to shard 0");
    ExpectStallEnd(v.status(), took, watched, (*client)->push_stalls(),
                   "stalled: a write waited 500ms for the shard to take it "
                   "after ");
    EXPECT_EQ((*client)->pull_stalls(), 0);
  }
}

TEST(PsClientOptionsTest, PullWindowIsKeptOrRefused) {
  ScriptedShard shard(Fault::kNone);
  Serving serving(&shard);
  ASSERT_NE(serving.server, nullptr);
  PsClientOptions o = serving.Options();
  o.pull_copy_thread = true;
  o.pull_window_bytes = 4 << 20;  // fixed windows with a copier too
  auto client = PsClient::Connect(o, Small(), BertTask::kPretrain);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ((*client)->pull_window_bytes(), 4 << 20);
  std::vector<float> params((*client)->layout().total_size(), -1.f);
  absl::StatusOr<int64_t> v = (*client)->Pull(0, 0, 0, params.data());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(params.back(), static_cast<float>(params.size() - 1));
  o.pull_window_bytes = -1;
  auto bad = PsClient::Connect(o, Small(), BertTask::kPretrain);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("pull_window_bytes"),
            absl::string_view::npos)
      << bad.status();
}

// A partial pull (PsClient::PullInto): only the named tensors, each into a
// place of its own, with the values a whole pull gets; a shard sending a
// tensor not asked for is refused; a wrong number of destinations too.
TEST(PsClientPullInto, FetchesOnlyTheTensorsAskedForWhereTheyGo) {
  RealShards real(3);
  ASSERT_EQ(real.shards.size(), 2u);
  PsClientOptions o = real.Options();
  auto client = PsClient::Connect(o, Small(), BertTask::kPretrain);
  ASSERT_TRUE(client.ok()) << client.status();
  const ParamLayout& layout = (*client)->layout();
  std::vector<float> whole(layout.total_size());
  ASSERT_TRUE((*client)->Pull(0, 0, 0, whole.data()).ok());
  // Encoder layer 1's tensors, packed one after the other.
  std::vector<float*> dest(layout.tensors().size(), nullptr);
  std::vector<float> mine(layout.total_size(), -7.f);
  int64_t at = 0;
  std::vector<std::pair<int, int64_t>> placed;
  for (size_t t = 0; t < layout.tensors().size(); ++t) {
    if (layout.tensors()[t].name.rfind("bert.encoder.layer.1.", 0) != 0) continue;
    dest[t] = mine.data() + at;
    placed.push_back({static_cast<int>(t), at});
    at += layout.tensors()[t].size;
  }
  ASSERT_FALSE(placed.empty());
  absl::StatusOr<int64_t> v = (*client)->PullInto(0, 0, 0, dest);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, 0);
  for (auto [t, off] : placed) {
    const ParamSpec& p = layout.tensors()[t];
    for (int64_t i = 0; i < p.size; ++i) {
      ASSERT_EQ(mine[off + i], whole[p.offset + i]) << p.name << "[" << i << "]";
    }
  }
  EXPECT_EQ(mine[at], -7.f);  // nothing past them
  dest.pop_back();
  EXPECT_EQ((*client)->PullInto(0, 0, 0, dest).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A shard that sends everything whatever was asked: refused.
  ScriptedShard scripted(Fault::kNone);
  Serving serving(&scripted);
  auto one = PsClient::Connect(serving.Options(), Small(), BertTask::kPretrain);
  ASSERT_TRUE(one.ok()) << one.status();
  std::vector<float*> first_only((*one)->layout().tensors().size(), nullptr);
  std::vector<float> buf((*one)->layout().tensors()[0].size);
  first_only[0] = buf.data();
  absl::StatusOr<int64_t> unasked = (*one)->PullInto(0, 0, 0, first_only);
  ASSERT_FALSE(unasked.ok());
  EXPECT_NE(unasked.status().message().find("sent an unasked chunk"),
            absl::string_view::npos)
      << unasked.status();
}

// PsClientOptions::pull_bf16_products: a step's pull (StartPull, PullInto)
// gets the dense layers' weights rounded to bf16 (nearest even) in half
// their bytes and every other tensor exact; Pull stays fp32 throughout.
TEST(PsClientBf16Pull, DenseWeightsComeRoundedTheRestExact) {
  RealShards real(5);
  ASSERT_EQ(real.shards.size(), 2u);
  PsClientOptions o = real.Options();
  auto f32 = PsClient::Connect(o, Small(), BertTask::kPretrain);
  ASSERT_TRUE(f32.ok()) << f32.status();
  o.pull_bf16_products = true;
  auto bf16 = PsClient::Connect(o, Small(), BertTask::kPretrain);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  const ParamLayout& layout = (*f32)->layout();
  std::vector<float> exact(layout.total_size()), half(layout.total_size());
  auto p = (*f32)->StartPull(0, 0, 0, exact.data());
  ASSERT_TRUE(p->Finish().ok());
  EXPECT_EQ(p->payload_bytes(), 4 * layout.total_size());
  auto q = (*bf16)->StartPull(0, 0, 0, half.data());
  ASSERT_TRUE(q->Finish().ok());
  int64_t products = 0, rounded = 0;
  for (const ParamSpec& t : layout.tensors()) {
    if (t.product_only) products += t.size;
    for (int64_t i = t.offset; i < t.offset + t.size; ++i) {
      const float want =
          t.product_only ? io::Bf16ToF32(io::F32ToBf16(exact[i])) : exact[i];
      ASSERT_EQ(half[i], want) << t.name << "[" << i - t.offset << "]";
      rounded += half[i] != exact[i];
    }
  }
  EXPECT_GT(products, 0);
  EXPECT_GT(rounded, products / 2);  // random weights: most change
  EXPECT_EQ(q->payload_bytes(), 4 * layout.total_size() - 2 * products);
  for (const char* name : {"bert.embeddings.word_embeddings.weight",
                           "bert.encoder.layer.0.attention.output.dense.bias",
                           "bert.encoder.layer.0.output.LayerNorm.weight"}) {
    EXPECT_FALSE(layout.Find(name)->product_only) << name;
  }
  EXPECT_TRUE(layout.Find("bert.encoder.layer.0.intermediate.dense.weight")
                  ->product_only);
  // Pull (as Export uses) is exact whatever the option says.
  std::vector<float> again(layout.total_size());
  ASSERT_TRUE((*bf16)->Pull(0, 0, 0, again.data()).ok());
  EXPECT_EQ(again, exact);
}

// A part started again at a checkpoint's step writes that checkpoint only
// if no shard holds its push of the step (CheckpointUnlessPast with a
// pusher; StatsResponse.last_step): the member that pushed it wrote it
// first, and a shard holding it may be inside the step after a failover,
// where the checkpoint would wait for a push that only this part makes.
TEST(PsClientCheckpointUnlessPast, SkippedWhereAShardHoldsThePush) {
  RealShards real(7, /*workers=*/2);
  ASSERT_EQ(real.shards.size(), 2u);
  auto client = PsClient::Connect(real.Options(), Small(), BertTask::kPretrain);
  ASSERT_TRUE(client.ok()) << client.status();
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/unless_pushed");
  // Worker 0's push of step 0, staged (the step waits for worker 1).
  std::vector<float> grad((*client)->layout().total_size(), 1e-3f);
  PushHeader h;
  h.set_worker(0);
  h.set_step(0);
  h.set_examples(4);
  ASSERT_TRUE((*client)->Push(h, grad.data()).ok());
  absl::StatusOr<std::vector<StatsResponse>> stats = (*client)->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  for (const StatsResponse& s : *stats) {
    EXPECT_EQ(s.version(), 0);
    ASSERT_EQ(s.last_step_size(), 2);
    EXPECT_EQ(s.last_step(0), 0);
    EXPECT_EQ(s.last_step(1), -1);
  }
  // Worker 0's push is held: nothing written.
  absl::StatusOr<std::optional<std::string>> m =
      (*client)->CheckpointUnlessPast(dir, 0, /*pusher=*/0);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_FALSE(m->has_value());
  EXPECT_FALSE(std::filesystem::exists(dir + "/ckpt-0/manifest.json"));
  // Worker 1's is not, nor is any pusher named: written.
  for (int pusher : {1, -1}) {
    m = (*client)->CheckpointUnlessPast(dir, 0, pusher);
    ASSERT_TRUE(m.ok()) << m.status();
    ASSERT_TRUE(m->has_value()) << pusher;
    EXPECT_TRUE(std::filesystem::exists(**m)) << **m;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Faults, PullFromScriptedShard,
    ::testing::Combine(
        ::testing::Values(
            Case{Fault::kNone, ""},
            Case{Fault::kOutOfPlace, "sent an out-of-place chunk"},
            Case{Fault::kUnknownTensor, "sent a malformed chunk of no.such.tensor"},
            Case{Fault::kOddBytes, "sent a malformed chunk"},
            Case{Fault::kUnaskedBf16, "sent an unasked bf16 chunk"},
            Case{Fault::kRepeatedRow, "sent a repeated row"},
            Case{Fault::kShort, "elements"}),
        ::testing::Bool()));

}  // namespace
}  // namespace bertps
