// Malformed RPCs against a real gRPC shard on 127.0.0.1: each gets a clear
// status and nothing is applied. And the shard's threads do not grow with
// the calls waiting on it.
#include "server/ps/service.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/process_cpu.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/ps/server.h"
#include "server/ps/shard_test_util.h"

namespace bertps {
namespace ps {
namespace {

// The chunks of a pull's message: one, or several batched (`chunks`).
std::vector<const TensorChunk*> ChunksOf(const PullResponse& m) {
  std::vector<const TensorChunk*> out;
  if (m.has_chunk()) out.push_back(&m.chunk());
  for (const TensorChunk& c : m.chunks().chunks()) out.push_back(&c);
  return out;
}

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ShardOptions o;
    o.config = Small();
    o.wait_timeout = absl::Seconds(5);
    server_ = *ShardServer::Start(o, "127.0.0.1:0", {});
    stub_ = ParameterServer::NewStub(grpc::CreateCustomChannel(
        server_->address(), grpc::InsecureChannelCredentials(),
        ClientChannelArguments()));
  }
  grpc::Status PushMessages(const std::vector<PushRequest>& msgs) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    PushResponse resp;
    auto w = stub_->Push(&ctx, &resp);
    for (const auto& m : msgs) {
      if (!w->Write(m)) break;
    }
    w->WritesDone();
    return w->Finish();
  }
  // A pull of version 5 (not there yet) read to its end within `deadline`.
  grpc::Status PullOfVersion5(std::chrono::milliseconds deadline) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + deadline);
    PullRequest req;
    req.set_min_version(5);
    auto r = stub_->Pull(&ctx, req);
    PullResponse msg;
    while (r->Read(&msg)) {
    }
    return r->Finish();
  }
  PushRequest Header(int worker, int64_t step) {
    PushRequest r;
    r.mutable_header()->set_worker(worker);
    r.mutable_header()->set_step(step);
    return r;
  }
  std::unique_ptr<ShardServer> server_;
  std::unique_ptr<ParameterServer::Stub> stub_;
};

TEST_F(ServiceTest, MalformedPushesAreRejectedAndApplyNothing) {
  PushRequest chunk;
  chunk.mutable_chunk()->set_name("bert.unknown");
  chunk.mutable_chunk()->set_dtype(F32);
  chunk.mutable_chunk()->set_data(std::string(8, '\0'));
  // No header first.
  grpc::Status st = PushMessages({chunk});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("header"), std::string::npos);
  // Unknown tensor.
  st = PushMessages({Header(0, 0), chunk});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("unknown tensor: bert.unknown"),
            std::string::npos);
  // Truncated push: the header and nothing else.
  st = PushMessages({Header(0, 0)});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("incomplete push"), std::string::npos);
  // Unknown worker; a step from the future.
  EXPECT_EQ(PushMessages({Header(9, 0)}).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(PushMessages({Header(0, 3)}).error_code(),
            grpc::StatusCode::OUT_OF_RANGE);
  // Oversized message: refused by the transport's explicit limit.
  PushRequest big;
  big.mutable_chunk()->set_name("bert.pooler.dense.weight");
  big.mutable_chunk()->set_dtype(F32);
  big.mutable_chunk()->set_data(std::string(kMaxMessageBytes + 1024, '\0'));
  st = PushMessages({Header(0, 0), big});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_EQ(server_->core()->version(), 0);
  EXPECT_EQ(server_->core()->Stats().pushes_applied(), 0);
}

TEST_F(ServiceTest, PullOfAMissingVersionHitsItsDeadline) {
  grpc::Status st = PullOfVersion5(std::chrono::milliseconds(200));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
}

// A call waiting on an install that ends is answered at once: UNAVAILABLE
// when the job left the shard (a primary drops a backup that left, a worker
// tries again), ABORTED when another install replaced it (a primary
// replicating to it is of a stale incarnation and stops).
TEST_F(ServiceTest, CallsWaitingOnAnEndedInstallSayHowItEnded) {
  for (const bool reinstall : {true, false}) {
    grpc::Status st;
    std::thread pull([&] { st = PullOfVersion5(std::chrono::seconds(20)); });
    absl::SleepFor(absl::Milliseconds(300));  // the pull waits for version 5
    if (reinstall) {
      ShardOptions o;
      o.config = Small();
      o.wait_timeout = absl::Seconds(5);
      ASSERT_TRUE(server_->Install(o, {}).ok());
    } else {
      server_->Uninstall();
    }
    pull.join();
    const grpc::StatusCode code = st.error_code();
    const std::string message = st.error_message();
    if (reinstall) {
      EXPECT_EQ(code, grpc::StatusCode::ABORTED) << message;
      EXPECT_NE(message.find("installed again"), std::string::npos) << message;
    } else {
      EXPECT_EQ(code, grpc::StatusCode::UNAVAILABLE) << message;
      EXPECT_NE(message.find("the job left this shard"), std::string::npos)
          << message;
    }
  }
}

// Rows asked first come first, the rest of their tensor last; the pull is
// the same parameters. A bad request is refused with a clear status.
TEST_F(ServiceTest, PullSendsTheRowsAskedFirstFirst) {
  auto pull = [&](const PullRequest& req, std::vector<PullResponse>* out) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    auto r = stub_->Pull(&ctx, req);
    PullResponse msg;
    while (r->Read(&msg)) out->push_back(msg);
    return r->Finish();
  };
  const ParamLayout& layout = server_->core()->layout();
  auto assemble = [&](const std::vector<PullResponse>& msgs) {
    std::vector<float> p(layout.total_size(), -99.0f);
    for (const PullResponse& m : msgs) {
      for (const TensorChunk* c : ChunksOf(m)) {
        const ParamSpec* spec = layout.Find(c->name());
        const float* d = reinterpret_cast<const float*>(c->data().data());
        if (c->rows_size() == 0) {
          std::copy(d, d + c->data().size() / 4,
                    p.begin() + spec->offset + c->offset());
        } else {
          const int64_t row = spec->shape[1];
          for (int k = 0; k < c->rows_size(); ++k) {
            std::copy(d + k * row, d + (k + 1) * row,
                      p.begin() + spec->offset + c->rows(k) * row);
          }
        }
      }
    }
    return p;
  };
  std::vector<PullResponse> plain, ordered;
  ASSERT_TRUE(pull(PullRequest(), &plain).ok());
  // Every element once; the small tensors came batched, several chunks per
  // message (kBatchBytes), not one message each.
  std::vector<float> all = assemble(plain);
  EXPECT_EQ(std::count(all.begin(), all.end(), -99.0f), 0);
  size_t chunks = 0, batches = 0;
  for (const PullResponse& m : plain) {
    chunks += ChunksOf(m).size();
    if (m.has_chunks()) ++batches;
  }
  EXPECT_GE(batches, 1u);
  EXPECT_LT(plain.size(), chunks / 2);
  PullRequest req;
  TensorRows* first = req.add_first();
  first->set_name("bert.embeddings.word_embeddings.weight");
  for (int64_t r : {2, 5, 17}) first->add_rows(r);
  ASSERT_TRUE(pull(req, &ordered).ok());
  EXPECT_EQ(assemble(plain), assemble(ordered));
  ASSERT_GE(ordered.size(), 3u);
  EXPECT_TRUE(ordered[0].has_version());
  const TensorChunk& head = ordered[1].chunk();
  EXPECT_EQ(head.name(), first->name());
  EXPECT_EQ(std::vector<int64_t>(head.rows().begin(), head.rows().end()),
            (std::vector<int64_t>{2, 5, 17}));
  const TensorChunk& tail = ordered.back().chunk();
  EXPECT_EQ(tail.name(), first->name());
  EXPECT_EQ(tail.rows_size(), 30 - 3);
  // Bad requests.
  std::vector<PullResponse> ignored;
  PullRequest unknown;
  unknown.add_first()->set_name("bert.nope");
  grpc::Status st = pull(unknown, &ignored);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("unknown tensor bert.nope"), std::string::npos);
  PullRequest unsorted = req;
  unsorted.mutable_first(0)->set_rows(1, 1);
  st = pull(unsorted, &ignored);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("not increasing"), std::string::npos);
  PullRequest twice = req;
  *twice.add_first() = req.first(0);
  EXPECT_EQ(pull(twice, &ignored).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ServiceTest, ABadNextFirstHintIsDroppedNotThePush) {
  std::vector<PushRequest> msgs = {Header(0, 0)};
  for (int i : server_->core()->local_slices()) {
    const SliceSpec& sl = server_->core()->plan().slices()[i];
    PushRequest c;
    c.mutable_chunk()->set_name(sl.name);
    c.mutable_chunk()->set_dtype(F32);
    c.mutable_chunk()->set_offset(sl.begin);
    c.mutable_chunk()->set_data(std::string(4 * sl.size(), '\0'));
    msgs.push_back(c);
  }
  PushRequest hint;
  hint.mutable_next_first()->set_name("bert.embeddings.word_embeddings.weight");
  hint.mutable_next_first()->add_rows(999);  // outside the vocabulary
  msgs.push_back(hint);
  grpc::Status st = PushMessages(msgs);
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(server_->core()->version(), 1);
}

// Chunks batched in one message (`chunks`) are the same push as chunks sent
// one by one; a bad chunk inside a batch refuses the whole push.
TEST_F(ServiceTest, BatchedChunksAreOnePushAndABadOneRefusesIt) {
  const auto& local = server_->core()->local_slices();
  auto batched = [&](float value, int bad_index) {
    std::vector<PushRequest> msgs = {Header(0, server_->core()->version())};
    PushRequest batch;
    int k = 0;
    for (int i : local) {
      const SliceSpec& sl = server_->core()->plan().slices()[i];
      TensorChunk* c = batch.mutable_chunks()->add_chunks();
      c->set_name(sl.name);
      c->set_dtype(F32);
      c->set_offset(sl.begin);
      std::vector<float> v(sl.size(), value);
      if (k++ == bad_index) v.back() = std::nanf("");
      c->set_data(std::string(reinterpret_cast<const char*>(v.data()),
                              4 * v.size()));
      if (batch.chunks().chunks_size() == 3) {  // batches of 3
        msgs.push_back(batch);
        batch.Clear();
      }
    }
    if (batch.has_chunks()) msgs.push_back(batch);
    return msgs;
  };
  ASSERT_GT(local.size(), 4u);
  grpc::Status st = PushMessages(batched(0.5f, /*bad_index=*/-1));
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(server_->core()->version(), 1);
  // A NaN in the fifth chunk (second batch): refused, nothing applied.
  st = PushMessages(batched(0.5f, /*bad_index=*/4));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("NaN or Inf"), std::string::npos)
      << st.error_message();
  EXPECT_EQ(server_->core()->version(), 1);
  EXPECT_EQ(server_->core()->Stats().pushes_applied(), 1);
}

TEST_F(ServiceTest, DescribeListsTheSlices) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  DescribeResponse d;
  ASSERT_TRUE(stub_->Describe(&ctx, DescribeRequest(), &d).ok());
  EXPECT_EQ(d.num_shards(), 1);
  EXPECT_EQ(d.slices_size(), static_cast<int>(server_->core()->local_slices().size()));
  EXPECT_EQ(d.task(), "pretrain");
  EXPECT_EQ(d.state_slots(), 2);
  EXPECT_EQ(d.protocol_version(), kPsProtocolVersion);
}

// The first exchange carries the protocol: a client of another version is
// refused with both named; one of before versions (0) speaks version 1.
TEST_F(ServiceTest, AClientOfAnotherProtocolIsRefusedNamingBoth) {
  for (int v : {0, kPsProtocolVersion, kPsProtocolVersion + 1}) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    DescribeRequest hello;
    hello.set_protocol_version(v);
    DescribeResponse d;
    grpc::Status st = stub_->Describe(&ctx, hello, &d);
    if (v <= kPsProtocolVersion) {
      EXPECT_TRUE(st.ok()) << v << ": " << st.error_message();
      continue;
    }
    EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_EQ(st.error_message(),
              absl::StrCat("this shard speaks parameter-server protocol ",
                           kPsProtocolVersion, ", the client ", v,
                           ": run members of one release"));
  }
}

// Stats carries the serving process's CPU (here this test's process): at
// least what getrusage counted before the call.
TEST_F(ServiceTest, StatsReportTheProcessCpu) {
  volatile double burn = 0;
  for (int i = 0; i < 20000000; ++i) burn = burn + 1e-9 * i;
  const double before = ProcessCpuSeconds();
  ASSERT_GT(before, 0);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  StatsResponse resp;
  ASSERT_TRUE(stub_->Stats(&ctx, StatsRequest(), &resp).ok());
  EXPECT_GE(resp.process_cpu_seconds(), before);
}

// A pull on the client's callback API (no thread of this test per call).
class PullCall final : public grpc::ClientReadReactor<PullResponse> {
 public:
  PullCall(ParameterServer::Stub* stub, int worker, int64_t min_version) {
    ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    req_.set_worker(worker);
    req_.set_min_version(min_version);
    stub->async()->Pull(&ctx_, &req_, this);
    StartRead(&msg_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    if (msg_.has_version()) version_ = msg_.version();
    for (const TensorChunk* c : ChunksOf(msg_)) elements_ += c->data().size() / 4;
    StartRead(&msg_);
  }
  void OnDone(const grpc::Status& s) override {
    status_ = s;
    done_.Notify();
  }
  grpc::ClientContext ctx_;
  PullRequest req_;
  PullResponse msg_;
  int64_t version_ = -1;
  int64_t elements_ = 0;
  grpc::Status status_;
  absl::Notification done_;
};

// Calls that wait (BSP pulls of the next version, announces of a step not
// all workers announced) hold no thread of the shard: 95 of them add a few
// threads at most (gRPC's own), not one each; then the step completes and
// every one of them is answered.
TEST(ShardThreadsTest, WaitingCallsHoldNoThreadOfTheShard) {
  constexpr int kWorkers = 48;
  ShardOptions o;
  o.config = Small();
  o.job_plan = PlanFor(BSP, kWorkers, o.optimizer);
  o.wait_timeout = absl::Seconds(60);
  std::unique_ptr<ShardServer> server = *ShardServer::Start(o, "127.0.0.1:0", {});
  std::unique_ptr<ParameterServer::Stub> stub =
      ParameterServer::NewStub(grpc::CreateCustomChannel(
          server->address(), grpc::InsecureChannelCredentials(),
          ClientChannelArguments()));
  {  // connected, the transport's threads started
    grpc::ClientContext ctx;
    DescribeResponse d;
    ASSERT_TRUE(stub->Describe(&ctx, DescribeRequest(), &d).ok());
  }
  const int before = ProcessThreadCount();
  struct Announced {
    grpc::ClientContext ctx;
    AnnounceRequest req;
    AnnounceResponse resp;
    grpc::Status status;
    absl::Notification done;
  };
  std::vector<std::unique_ptr<Announced>> announces;
  auto announce = [&](int w) {
    auto a = std::make_unique<Announced>();
    a->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    a->req.set_worker(w);
    a->req.set_step(0);
    a->req.set_examples(w + 1);
    a->req.set_mlm_weight(1.0);
    Announced* p = a.get();
    stub->async()->Announce(&p->ctx, &p->req, &p->resp, [p](grpc::Status st) {
      p->status = st;
      p->done.Notify();
    });
    announces.push_back(std::move(a));
  };
  for (int w = 0; w + 1 < kWorkers; ++w) announce(w);
  std::vector<std::unique_ptr<PullCall>> pulls;
  for (int w = 0; w < kWorkers; ++w) {
    pulls.push_back(std::make_unique<PullCall>(stub.get(), w, 1));
  }
  const int64_t waiting = 2 * kWorkers - 1;
  for (int k = 0; k < 1000 && server->core()->waiting_calls() < waiting; ++k) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(server->core()->waiting_calls(), waiting);
  const int during = ProcessThreadCount();
  std::printf("threads: %d before, %d with %lld calls waiting\n", before,
              during, static_cast<long long>(waiting));
  EXPECT_LE(during - before, 8) << before << " threads before, " << during
                                << " with " << waiting << " calls waiting";
  // The last announce completes all of them, in worker order.
  announce(kWorkers - 1);
  for (auto& a : announces) {
    ASSERT_TRUE(a->done.WaitForNotificationWithTimeout(absl::Seconds(30)));
    ASSERT_TRUE(a->status.ok()) << a->status.error_message();
    EXPECT_EQ(a->resp.examples_total(), kWorkers * (kWorkers + 1) / 2);
  }
  // Every worker's push of step 0 makes version 1, which every pull gets.
  for (int w = 0; w < kWorkers; ++w) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    PushResponse resp;
    auto writer = stub->Push(&ctx, &resp);
    PushRequest header;
    header.mutable_header()->set_worker(w);
    header.mutable_header()->set_step(0);
    ASSERT_TRUE(writer->Write(header));
    for (int i : server->core()->local_slices()) {
      const SliceSpec& sl = server->core()->plan().slices()[i];
      PushRequest c;
      c.mutable_chunk()->set_name(sl.name);
      c.mutable_chunk()->set_dtype(F32);
      c.mutable_chunk()->set_offset(sl.begin);
      c.mutable_chunk()->set_data(std::string(4 * sl.size(), '\0'));
      ASSERT_TRUE(writer->Write(c));
    }
    writer->WritesDone();
    grpc::Status st = writer->Finish();
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  const int64_t total = server->core()->layout().total_size();
  for (auto& p : pulls) {
    ASSERT_TRUE(p->done_.WaitForNotificationWithTimeout(absl::Seconds(30)));
    ASSERT_TRUE(p->status_.ok()) << p->status_.error_message();
    EXPECT_EQ(p->version_, 1);
    EXPECT_EQ(p->elements_, total);
  }
  EXPECT_EQ(server->core()->version(), 1);
  EXPECT_EQ(server->core()->waiting_calls(), 0);
  EXPECT_EQ(server->core()->missed_pokes(), 0);
}

// The shards' partial sums go to every peer at once; a peer's refusal and an
// unreachable peer are errors that name the shard.
TEST(GrpcPeerLinkTest, SendAllReachesEveryPeerAndNamesTheOneThatFails) {
  std::vector<std::unique_ptr<ShardServer>> servers;
  for (int i = 1; i <= 2; ++i) {
    ShardOptions o;
    o.config = Small();
    o.shard = i;
    o.num_shards = 3;
    servers.push_back(*ShardServer::Start(o, "127.0.0.1:0", {}));
  }
  GrpcPeerLink link({"127.0.0.1:1", servers[0]->address(),
                     servers[1]->address()});
  ExchangeRequest req;
  req.set_from_shard(0);
  req.set_version(5);
  req.add_values(1.5);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  ASSERT_TRUE(link.SendAll({1, 2}, req, deadline, nullptr).ok());
  // Delivered to both: the same values again are taken, other ones refused.
  EXPECT_TRUE(link.SendAll({1, 2}, req, deadline, nullptr).ok());
  req.set_values(0, 2.5);
  absl::Status st = link.SendAll({1, 2}, req, deadline, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("shard 1: "), std::string::npos) << st;
  EXPECT_NE(st.message().find("conflicting partial sums"), std::string::npos)
      << st;
  // Nobody listens at shard 0's address: its deadline, naming it.
  req.set_version(6);
  st = link.SendAll({0, 2}, req, absl::Now() + absl::Seconds(1), nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
  EXPECT_NE(st.message().find("shard 0 at 127.0.0.1:1 unreachable"),
            std::string::npos)
      << st;
  std::atomic<bool> stop{true};
  EXPECT_EQ(link.SendAll({1}, req, deadline, &stop).code(),
            absl::StatusCode::kAborted);
}

// A primary and its backup, each a gRPC server on 127.0.0.1: every step
// reaches the backup over Replicate; malformed Replicate calls are refused
// and change nothing; a backup gone is dropped and the primary goes on.
absl::Status PushOnCore(ShardCore* core, int worker, int64_t step) {
  PushHeader h;
  h.set_worker(worker);
  h.set_step(step);
  h.set_examples(2);
  h.set_first_example(step * 2);
  const int64_t n = core->shard_size();
  h.set_grad_sq_sum(1e-4 * n);
  auto s = core->BeginPush(h);
  if (!s.ok()) return s.status();
  for (int i : core->local_slices()) {
    const SliceSpec& sl = core->plan().slices()[i];
    std::vector<float> g(sl.size(), 0.01f * (step + 1));
    TensorChunk c;
    c.set_name(sl.name);
    c.set_dtype(F32);
    c.set_offset(sl.begin);
    c.set_data(g.data(), 4 * g.size());
    if (absl::Status st = core->AddChunk(s->get(), c); !st.ok()) return st;
  }
  return core->FinishPush(std::move(*s), absl::Now() + absl::Seconds(5))
      .status();
}

TEST(ReplicationTest, StepsReachTheBackupOverGrpc) {
  ShardOptions o;
  o.config = Small();
  o.wait_timeout = absl::Seconds(5);
  o.incarnation = 3;
  ShardOptions bo = o;
  bo.backup = true;
  auto backup = *ShardServer::Start(bo, "127.0.0.1:0", {});
  auto primary = *ShardServer::StartIdle("127.0.0.1:0");
  ASSERT_TRUE(primary->Install(o, {}, {backup->address()}).ok());
  for (int64_t step = 0; step < 3; ++step) {
    ASSERT_TRUE(PushOnCore(primary->core(), 0, step).ok());
    ASSERT_TRUE(primary->core()
                    ->AcquireSnapshot(0, step + 1, 0,
                                      absl::Now() + absl::Seconds(5))
                    .ok());
  }
  // Published once the backup has it (the step runs after the push's answer).
  ASSERT_TRUE(primary->core()
                  ->AcquireSnapshot(0, 3, 0, absl::Now() + absl::Seconds(5))
                  .ok());
  EXPECT_EQ(backup->core()->version(), 3);
  EXPECT_EQ(primary->core()->Stats().steps_replicated(), 3);
  EXPECT_EQ(primary->core()->Stats().live_backups(), 1);
  EXPECT_EQ(backup->core()->Stats().example_ledger(),
            primary->core()->Stats().example_ledger());
  // Malformed calls straight to the backup.
  auto stub = ParameterServer::NewStub(grpc::CreateCustomChannel(
      backup->address(), grpc::InsecureChannelCredentials(),
      ClientChannelArguments()));
  const int64_t n = backup->core()->shard_size();
  auto call = [&](const std::vector<ReplicateRequest>& msgs,
                  const std::string& incarnation = "3") {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    ctx.AddMetadata(kIncarnationMetadata, incarnation);
    ReplicateResponse resp;
    auto w = stub->Replicate(&ctx, &resp);
    for (const auto& m : msgs) {
      if (!w->Write(m)) break;
    }
    w->WritesDone();
    return w->Finish();
  };
  ReplicateRequest head;
  ReplicaStep* st = head.mutable_step();
  st->set_kind(ReplicaStep::STAGE);
  st->set_incarnation(3);
  st->set_version(3);
  st->set_grad_scale(1);
  st->add_workers(0);
  st->add_steps(3);
  st->add_first_examples(6);
  st->add_examples(2);
  st->set_grad_elements(n);
  ReplicateRequest bytes;
  bytes.set_grad(std::string(4 * n - 4, '\0'));
  ReplicateRequest more;
  more.set_grad(std::string(8, '\0'));
  auto expect = [&](grpc::Status s, grpc::StatusCode code,
                    const std::string& text) {
    EXPECT_EQ(s.error_code(), code) << s.error_message();
    EXPECT_NE(s.error_message().find(text), std::string::npos)
        << s.error_message();
  };
  expect(call({bytes}), grpc::StatusCode::INVALID_ARGUMENT,
         "the first message must be the step");
  expect(call({head, bytes}), grpc::StatusCode::INVALID_ARGUMENT,
         "came with " + std::to_string(4 * n - 4));
  expect(call({head, bytes, more}), grpc::StatusCode::INVALID_ARGUMENT,
         "more than the");
  expect(call({head, head}), grpc::StatusCode::INVALID_ARGUMENT,
         "only gradient bytes follow");
  expect(call({head}, "2"), grpc::StatusCode::ABORTED, "incarnation 2");
  ReplicateRequest commit = head;
  commit.mutable_step()->set_kind(ReplicaStep::COMMIT);
  commit.mutable_step()->set_grad_elements(0);
  expect(call({commit, more}), grpc::StatusCode::INVALID_ARGUMENT,
         "a commit carries no gradient");
  expect(call({commit}), grpc::StatusCode::FAILED_PRECONDITION,
         "came without its stage");
  EXPECT_EQ(backup->core()->version(), 3);
  // The backup goes away: the next step drops it and is published.
  backup->Shutdown();
  backup.reset();
  ASSERT_TRUE(PushOnCore(primary->core(), 0, 3).ok());
  ASSERT_TRUE(primary->core()
                  ->AcquireSnapshot(0, 4, 0, absl::Now() + absl::Seconds(10))
                  .ok());
  EXPECT_EQ(primary->core()->Stats().live_backups(), 0);
  std::vector<std::string> dropped = primary->replica_link().TakeDropped();
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(primary->core()->Stats().steps_replicated(), 3);
}

}  // namespace
}  // namespace ps
}  // namespace bertps
