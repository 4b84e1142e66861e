#include "server/ps/shard.h"
#include "server/ps/shard_test_util.h"

#include <cstring>
#include <cmath>
#include <algorithm>
#include <limits>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "common/io/half.h"
#include "common/status.h"
#include "common/io/fault_file_system.h"
#include "common/ps/checkpoint.h"
#include "gtest/gtest.h"

namespace bertps {
namespace ps {
namespace {

ShardOptions Opts(ConsistencyMode mode, int workers, int shards = 1,
                  int shard = 0) {
  ShardOptions o;
  o.config = Small();
  o.num_shards = shards;
  o.shard = shard;
  o.optimizer.learning_rate = 0.01;
  o.job_plan = PlanFor(mode, workers, o.optimizer);
  o.wait_timeout = absl::Seconds(5);
  return o;
}

std::vector<float> Params(ShardCore* core) {
  auto snap = core->AcquireSnapshot(0, 0, 0, absl::Now() + absl::Seconds(1));
  return std::vector<float>((*snap)->params.begin(), (*snap)->params.end());
}

// A slice that cannot fit in the shard's memory is refused with the figures
// before anything is allocated; absurd configs are refused by their bounds.
TEST(ShardCore, AModelThatCannotFitIsRefusedWithTheFigures) {
  ShardOptions o = Opts(BSP, 2);
  o.config.vocab_size = 1 << 22;
  o.config.hidden_size = 4096;
  o.config.num_attention_heads = 64;
  o.config.intermediate_size = 16384;
  o.memory_limit = MemoryLimit{int64_t{1} << 30, "test limit"};
  auto core = ShardCore::Create(o, nullptr);
  ASSERT_FALSE(core.ok());
  EXPECT_EQ(core.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(core.status().message().find("parameter-server shard 0 needs ~"),
            std::string::npos)
      << core.status();
  EXPECT_NE(core.status().message().find("of this process's limit of 1.00 "
                                         "GiB (test limit)"),
            std::string::npos)
      << core.status();
  o = Opts(BSP, 2);
  o.config.hidden_size = 1048576;
  core = ShardCore::Create(o, nullptr);
  ASSERT_FALSE(core.ok());
  EXPECT_EQ(core.status().message(),
            "config: hidden_size must be in [1, 16384], got 1048576");
  o = Opts(BSP, 2);
  o.config.num_hidden_layers = 1000000;
  EXPECT_FALSE(ShardCore::Create(o, nullptr).ok());
}

TEST(ShardCore, AspAppliesEveryPushExactlyOnce) {
  auto core = *ShardCore::Create(Opts(ASP, 2), nullptr);
  for (int step = 0; step < 5; ++step) {
    for (int w = 0; w < 2; ++w) ASSERT_TRUE(PushConst(core.get(), w, step, 0.1f).ok());
  }
  EXPECT_EQ(core->version(), 10);
  StatsResponse s = core->Stats();
  EXPECT_EQ(s.pushes_applied(), 10);
  EXPECT_EQ(s.worker_clock(0), 5);
  EXPECT_EQ(s.worker_clock(1), 5);
}

// A checkpoint that cannot be written (a full disk, a failed fsync) fails
// with the file named and changes nothing: the shard stays at its version,
// serves on, and the same checkpoint written again succeeds; pushes held for
// the ASP cut then go on.
TEST(ShardCore, AFailedCheckpointWriteChangesNothing) {
  using F = io::FaultFileSystem;
  for (F::Fault fault : {F::kNoSpace, F::kFsyncFails, F::kCrash}) {
    F faulty;
    ShardOptions o = Opts(ASP, 2);
    o.job_plan = PlanFor(ASP, 2, o.optimizer, /*checkpoint_every=*/2);
    o.fs = &faulty;
    auto core = *ShardCore::Create(o, nullptr);
    const std::string dir = ::testing::TempDir() + "/failed-ckpt-" +
                            std::to_string(static_cast<int>(fault));
    ASSERT_TRUE(PushConst(core.get(), 0, 0, 0.1f).ok());
    ASSERT_TRUE(PushConst(core.get(), 1, 0, 0.1f).ok());
    EXPECT_EQ(core->version(), 2);
    const std::vector<float> before = Params(core.get());
    faulty.Arm(fault, "shard-0-of-1");
    auto c = core->Checkpoint(dir, 2, absl::Now() + absl::Seconds(5));
    ASSERT_TRUE(faulty.hit());
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.status().message().find("shard-0-of-1"), std::string::npos)
        << c.status();
    EXPECT_EQ(core->version(), 2);
    const std::vector<float> after = Params(core.get());
    EXPECT_EQ(0, std::memcmp(before.data(), after.data(), 4 * before.size()));
    c = core->Checkpoint(dir, 2, absl::Now() + absl::Seconds(5));
    ASSERT_TRUE(c.ok()) << c.status();
    ASSERT_TRUE(PushConst(core.get(), 0, 1, 0.1f).ok());
    EXPECT_EQ(core->version(), 3);
  }
}

// checkpoint.restore_as NEW_PHASE: the parameters and, unless
// reset_optimizer, the optimizer state are the checkpoint's; the version,
// the workers' clocks and the ledger start at 0. A continued restore keeps
// the checkpoint's version.
TEST(ShardCore, ANewPhaseKeepsTheStateAndCountsFromZero) {
  const ShardOptions o = Opts(BSP, 1);
  auto core = *ShardCore::Create(o, nullptr);
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(PushConst(core.get(), 0, step, 0.1f * (step + 1)).ok());
  }
  const std::string dir = ::testing::TempDir() + "/new-phase";
  const DescribeResponse d = core->Describe();
  ASSERT_GT(d.state_slots(), 0);  // moments to keep or reset
  Manifest m;
  m.version = 3;
  m.num_shards = 1;
  m.config_json = o.config.ToJson();
  m.task = "pretrain";
  m.optimizer = d.optimizer();
  m.plan_text = core->plan().ToText();
  m.state_slots = d.state_slots();
  auto r = core->Checkpoint(dir, 3, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(r.ok()) << r.status();
  m.files.push_back({0, r->file(), r->crc32c(), r->bytes()});
  m.example_ledger = r->example_ledger();
  auto manifest = WriteManifest(dir, m);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  const std::vector<float> trained = Params(core.get());

  auto continued = *ShardCore::Create(o, nullptr);
  EXPECT_EQ(*continued->Restore(*manifest), 3);
  EXPECT_EQ(continued->Stats().worker_clock(0), 3);

  auto next = [&](bool reset) {
    auto phase = *ShardCore::Create(o, nullptr);
    absl::StatusOr<int64_t> v = phase->Restore(*manifest, true, reset);
    EXPECT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(*v, 0);
    EXPECT_EQ(phase->version(), 0);
    EXPECT_EQ(phase->Stats().worker_clock(0), 0);
    const std::vector<float> got = Params(phase.get());
    EXPECT_EQ(0, std::memcmp(got.data(), trained.data(), 4 * got.size()));
    // Its first update is update 0 of the new phase.
    EXPECT_TRUE(PushConst(phase.get(), 0, 0, 0.1f).ok());
    EXPECT_EQ(phase->version(), 1);
    return Params(phase.get());
  };
  const std::vector<float> kept = next(false), reset = next(true);
  // The moments carried over make the first step another one than moments
  // from zero.
  EXPECT_NE(0, std::memcmp(kept.data(), reset.data(), 4 * kept.size()));
}

TEST(ShardCore, UpdateThreadsDoNotChangeTheResult) {
  // BSP with two workers: the shard computes the gradient norm itself and
  // clips; the same bits with 1 and with 3 update threads.
  std::vector<std::vector<float>> out;
  for (int threads : {1, 3}) {
    ShardOptions o = Opts(BSP, 2);
    o.update_threads = threads;
    o.optimizer.clip_norm = 0.5;
    auto core = ShardCore::Create(o, nullptr);
    ASSERT_TRUE(core.ok()) << core.status();
    for (int64_t step = 0; step < 3; ++step) {
      std::thread other([&] { ASSERT_TRUE(PushConst(core->get(), 1, step, 0.3f).ok()); });
      ASSERT_TRUE(PushConst(core->get(), 0, step, -0.7f + step).ok());
      other.join();
    }
    out.push_back(Params(core->get()));
  }
  ASSERT_EQ(out[0].size(), out[1].size());
  EXPECT_EQ(0, std::memcmp(out[0].data(), out[1].data(), 4 * out[0].size()));
}

TEST(ShardCore, RetriedPushIsNotAppliedTwice) {
  for (ConsistencyMode mode : {BSP, ASP}) {
    auto core = *ShardCore::Create(Opts(mode, 1), nullptr);
    ASSERT_TRUE(PushConst(core.get(), 0, 0, 0.5f).ok());
    std::vector<float> after = Params(core.get());
    auto again = PushConst(core.get(), 0, 0, 0.5f);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_TRUE(again->duplicate());
    EXPECT_EQ(core->version(), 1);
    EXPECT_EQ(Params(core.get()), after);
    EXPECT_EQ(core->Stats().pushes_duplicate(), 1);
  }
}

TEST(ShardCore, BspWaitsForAllWorkersAndSumsInWorkerOrder) {
  auto core = *ShardCore::Create(Opts(BSP, 2), nullptr);
  std::vector<float> before = Params(core.get());
  ASSERT_TRUE(PushConst(core.get(), 1, 0, 0.25f).ok());
  EXPECT_EQ(core->version(), 0);  // worker 0 missing
  auto early = core->AcquireSnapshot(0, 1, 1, absl::Now() + absl::Milliseconds(50));
  EXPECT_EQ(early.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(early.status().message().find("1 of 2 pushes"), std::string::npos)
      << early.status();
  ASSERT_TRUE(PushConst(core.get(), 0, 0, 0.25f).ok());
  EXPECT_EQ(core->version(), 1);
  EXPECT_NE(Params(core.get()), before);
  // A push for a step already applied, and one from the future.
  EXPECT_EQ(PushConst(core.get(), 0, 5, 0.1f).status().code(),
            absl::StatusCode::kOutOfRange);
}

TEST(ShardCore, BackupWorkersCompleteAStepWithTheFirstPushes) {
  ShardOptions o = Opts(BSP, 3);
  o.backup_workers = 1;
  auto core = *ShardCore::Create(o, nullptr);
  ASSERT_TRUE(PushConst(core.get(), 2, 0, 0.2f).ok());
  EXPECT_EQ(core->version(), 0);
  ASSERT_TRUE(PushConst(core.get(), 0, 0, 0.2f).ok());
  EXPECT_EQ(core->version(), 1);  // 2 of 3 suffice
  auto late = PushConst(core.get(), 1, 0, 0.2f);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(core->version(), 1);
  // The late worker goes on with the next step.
  ASSERT_TRUE(PushConst(core.get(), 1, 1, 0.2f).ok());
  ASSERT_TRUE(PushConst(core.get(), 0, 1, 0.2f).ok());
  EXPECT_EQ(core->version(), 2);
}

TEST(ShardCore, SspBoundsTheFastestWorker) {
  ShardOptions o = Opts(SSP, 2);
  o.staleness = 1;
  auto core = *ShardCore::Create(o, nullptr);
  // Worker 0 runs ahead: steps 0 and 1 pushed; worker 1 has pushed nothing.
  auto ok0 = core->AcquireSnapshot(0, 0, 0, absl::Now() + absl::Seconds(1));
  ASSERT_TRUE(ok0.ok());
  ASSERT_TRUE(PushConst(core.get(), 0, 0, 0.1f).ok());
  ASSERT_TRUE(core->AcquireSnapshot(0, 0, 1, absl::Now() + absl::Seconds(1)).ok());
  ASSERT_TRUE(PushConst(core.get(), 0, 1, 0.1f).ok());
  // Step 2 is 2 ahead of the slowest (clock 0): blocked.
  auto blocked = core->AcquireSnapshot(0, 0, 2, absl::Now() + absl::Milliseconds(100));
  EXPECT_EQ(blocked.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(blocked.status().message().find("slowest worker (1"), std::string::npos)
      << blocked.status();
  // A pull that waits is released as soon as the slow worker pushes.
  std::thread slow([&] {
    absl::SleepFor(absl::Milliseconds(100));
    ASSERT_TRUE(PushConst(core.get(), 1, 0, 0.1f).ok());
  });
  auto released = core->AcquireSnapshot(0, 0, 2, absl::Now() + absl::Seconds(5));
  slow.join();
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_EQ((*released)->version, 3);
}

// Each bad push is rejected with a clear error and changes nothing.
TEST(ShardCore, BadPushesChangeNothing) {
  auto core = *ShardCore::Create(Opts(BSP, 1), nullptr);
  std::vector<float> before = Params(core.get());
  const SliceSpec& first = core->plan().slices()[core->local_slices()[0]];
  auto try_chunk = [&](TensorChunk c, const char* what) {
    PushHeader h;
    h.set_worker(0);
    h.set_step(0);
    auto s = core->BeginPush(h);
    ASSERT_TRUE(s.ok());
    absl::Status st = core->AddChunk(s->get(), c);
    ASSERT_FALSE(st.ok()) << what;
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(what), std::string::npos) << st;
  };
  std::vector<float> g(first.size(), 1.0f);
  TensorChunk c;
  c.set_name(first.name);
  c.set_dtype(F32);
  c.set_offset(first.begin);
  c.set_data(g.data(), 4 * g.size());
  TensorChunk unknown = c;
  unknown.set_name("bert.nope");
  try_chunk(unknown, "unknown tensor");
  TensorChunk dtype = c;
  dtype.set_dtype(I32);
  try_chunk(dtype, "F32 or BF16");
  TensorChunk nan = c;
  g[3] = std::nanf("");
  nan.set_data(g.data(), 4 * g.size());
  try_chunk(nan, "NaN or Inf");
  g[3] = 1.0f;
  TensorChunk shape = c;
  shape.add_shape(7);
  try_chunk(shape, "wrong shape");
  TensorChunk ragged = c;
  ragged.set_data(std::string(5, 'x'));
  try_chunk(ragged, "multiple of 4");
  TensorChunk later = c;
  later.set_offset(first.begin + 1);
  later.set_data(g.data(), 4);
  try_chunk(later, "out of order");
  // Incomplete push.
  PushHeader h;
  h.set_worker(0);
  h.set_step(0);
  auto s = core->BeginPush(h);
  ASSERT_TRUE(core->AddChunk(s->get(), c).ok());
  auto fin = core->FinishPush(std::move(*s), absl::Now() + absl::Seconds(1));
  EXPECT_EQ(fin.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(fin.status().message().find("incomplete"), std::string::npos);
  // Bad workers and a NaN norm.
  h.set_worker(3);
  EXPECT_FALSE(core->BeginPush(h).ok());
  h.set_worker(0);
  h.set_grad_sq_sum(std::nan(""));
  EXPECT_FALSE(core->BeginPush(h).ok());
  h.set_grad_sq_sum(0);
  // Example ranges that are no range of stream positions (one overflowed
  // the ledger's arithmetic: found by ps_shard_fuzz).
  for (auto [first, n] : std::vector<std::pair<int64_t, int64_t>>{
           {std::numeric_limits<int64_t>::max() - 1, 2}, {-1, 2}, {0, -3}}) {
    h.set_first_example(first);
    h.set_examples(n);
    auto bad = core->BeginPush(h);
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << first;
    EXPECT_NE(bad.status().message().find("not a range of stream positions"),
              std::string::npos)
        << bad.status();
  }
  h.set_first_example(0);
  h.set_examples(0);
  EXPECT_EQ(core->version(), 0);
  EXPECT_EQ(Params(core.get()), before);
  // A good push still works afterwards.
  ASSERT_TRUE(PushConst(core.get(), 0, 0, 0.5f).ok());
  EXPECT_EQ(core->version(), 1);
}

// A gradient pushed as row chunks (the word embedding: all rows but some
// early, those last; the other tensors in ranges) is the same push.
absl::StatusOr<PushResponse> PushRows(ShardCore* core, int64_t step,
                                      const std::vector<float>& full,
                                      const std::vector<int64_t>& late) {
  PushHeader h;
  h.set_worker(0);
  h.set_step(step);
  auto s = core->BeginPush(h);
  if (!s.ok()) return s.status();
  const ParamSpec* word = core->layout().Find("bert.embeddings.word_embeddings.weight");
  const int64_t row = word->shape[1];
  auto rows_chunk = [&](const std::vector<int64_t>& rows) {
    TensorChunk c;
    c.set_name(word->name);
    c.set_dtype(F32);
    std::string data;
    for (int64_t r : rows) {
      c.add_rows(r);
      data.append(reinterpret_cast<const char*>(full.data() + word->offset + r * row),
                  4 * row);
    }
    c.set_data(data);
    return c;
  };
  std::vector<int64_t> early;
  for (int64_t r = 0; r < word->shape[0]; ++r) {
    if (std::find(late.begin(), late.end(), r) == late.end()) early.push_back(r);
  }
  RETURN_IF_ERROR(core->AddChunk(s->get(), rows_chunk(early)));
  for (int i : core->local_slices()) {
    const SliceSpec& sl = core->plan().slices()[i];
    if (sl.name == word->name) continue;
    const ParamSpec* spec = core->layout().Find(sl.name);
    TensorChunk c;
    c.set_name(sl.name);
    c.set_dtype(F32);
    c.set_offset(sl.begin);
    c.set_data(full.data() + spec->offset + sl.begin, 4 * sl.size());
    RETURN_IF_ERROR(core->AddChunk(s->get(), c));
  }
  RETURN_IF_ERROR(core->AddChunk(s->get(), rows_chunk(late)));
  return core->FinishPush(std::move(*s), absl::Now() + absl::Seconds(5));
}

class NonFiniteLate : public ::testing::TestWithParam<bool> {};

TEST_P(NonFiniteLate, InALongChunkIsRefused) {
  // A NaN or Inf late in a chunk (elements past the first few thousand, in
  // F32 and in BF16) is refused like one at the start, and nothing is
  // applied; with the staging written by streaming stores too (a shard
  // whose share of the model is large).
  ShardOptions o = Opts(BSP, 1);
  o.config.vocab_size = 1000;  // word embedding: 8,000 elements, 2 blocks
                               // (the second one partial)
  if (GetParam()) o.stream_staging_bytes = 0;
  auto core = *ShardCore::Create(o, nullptr);
  EXPECT_EQ(core->StreamStaging(), GetParam());
  ShardOptions ro = o;
  ro.stream_staging_bytes = ShardOptions().stream_staging_bytes;
  auto reference = *ShardCore::Create(ro, nullptr);  // staged as usual
  ASSERT_FALSE(reference->StreamStaging());
  const std::vector<float> before = Params(core.get());
  const std::string word = "bert.embeddings.word_embeddings.weight";
  int word_slice = -1;
  for (int i : core->local_slices()) {
    if (core->plan().slices()[i].name == word) word_slice = i;
  }
  ASSERT_GE(word_slice, 0);
  const SliceSpec& sl = core->plan().slices()[word_slice];
  ASSERT_GT(sl.size(), 4096 + 8);
  for (float bad : {std::nanf(""), INFINITY}) {
    for (DType dtype : {F32, BF16}) {
      PushHeader h;
      h.set_worker(0);
      h.set_step(0);
      auto s = core->BeginPush(h);
      ASSERT_TRUE(s.ok());
      std::vector<float> g(sl.size(), 0.5f);
      g[sl.size() - 3] = bad;
      TensorChunk c;
      c.set_name(sl.name);
      c.set_dtype(dtype);
      c.set_offset(sl.begin);
      if (dtype == F32) {
        c.set_data(g.data(), 4 * g.size());
      } else {
        std::vector<uint16_t> h16(g.size());
        for (size_t i = 0; i < g.size(); ++i) h16[i] = io::F32ToBf16(g[i]);
        c.set_data(h16.data(), 2 * h16.size());
      }
      absl::Status st = core->AddChunk(s->get(), c);
      EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
      EXPECT_NE(st.message().find("NaN or Inf"), std::string::npos) << st;
    }
  }
  EXPECT_EQ(core->version(), 0);
  EXPECT_EQ(Params(core.get()), before);
  // The next, clean push is the whole step, as on a core that never saw
  // the bad ones.
  ASSERT_TRUE(PushConst(core.get(), 0, 0, 0.25f).ok());
  ASSERT_TRUE(PushConst(reference.get(), 0, 0, 0.25f).ok());
  EXPECT_EQ(Params(core.get()), Params(reference.get()));
}

INSTANTIATE_TEST_SUITE_P(Staging, NonFiniteLate, ::testing::Bool());

TEST(ShardCore, RowChunksAreTheSamePush) {
  ShardOptions o = Opts(BSP, 1);
  o.optimizer.clip_norm = 0.5;
  auto a = *ShardCore::Create(o, nullptr);
  auto b = *ShardCore::Create(o, nullptr);
  std::vector<float> g(a->layout().total_size());
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.01f * static_cast<float>(i % 13) - 0.05f;
  for (int64_t step = 0; step < 2; ++step) {
    ASSERT_TRUE(PushConst(a.get(), 0, step, 0).ok());  // warm the same way
    ASSERT_TRUE(PushConst(b.get(), 0, step, 0).ok());
  }
  // a: range chunks of g; b: row chunks of the same g.
  {
    PushHeader h;
    h.set_worker(0);
    h.set_step(2);
    auto s = *a->BeginPush(h);
    for (int i : a->local_slices()) {
      const SliceSpec& sl = a->plan().slices()[i];
      const ParamSpec* spec = a->layout().Find(sl.name);
      TensorChunk c;
      c.set_name(sl.name);
      c.set_dtype(F32);
      c.set_offset(sl.begin);
      c.set_data(g.data() + spec->offset + sl.begin, 4 * sl.size());
      ASSERT_TRUE(a->AddChunk(s.get(), c).ok());
    }
    ASSERT_TRUE(a->FinishPush(std::move(s), absl::Now() + absl::Seconds(5)).ok());
  }
  auto r = PushRows(b.get(), 2, g, {0, 3, 7, 29});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(b->version(), 3);
  const std::vector<float> pa = Params(a.get()), pb = Params(b.get());
  ASSERT_EQ(pa.size(), pb.size());
  EXPECT_EQ(0, std::memcmp(pa.data(), pb.data(), 4 * pa.size()));
}

TEST(ShardCore, BadRowChunksChangeNothing) {
  auto core = *ShardCore::Create(Opts(BSP, 1), nullptr);
  const std::vector<float> before = Params(core.get());
  const ParamSpec* word = core->layout().Find("bert.embeddings.word_embeddings.weight");
  const int64_t row = word->shape[1];
  auto chunk = [&](std::vector<int64_t> rows, float value = 1.0f) {
    TensorChunk c;
    c.set_name(word->name);
    c.set_dtype(F32);
    for (int64_t r : rows) c.add_rows(r);
    std::vector<float> d(rows.size() * row, value);
    c.set_data(d.data(), 4 * d.size());
    return c;
  };
  auto expect_bad = [&](std::vector<TensorChunk> chunks, const char* what) {
    PushHeader h;
    h.set_worker(0);
    h.set_step(0);
    auto s = core->BeginPush(h);
    ASSERT_TRUE(s.ok());
    absl::Status st;
    for (const TensorChunk& c : chunks) {
      st = core->AddChunk(s->get(), c);
      if (!st.ok()) break;
    }
    ASSERT_FALSE(st.ok()) << what;
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(what), std::string::npos) << st;
  };
  expect_bad({chunk({3, 2})}, "not increasing");
  expect_bad({chunk({-1})}, "out of range");
  expect_bad({chunk({30})}, "out of range");
  expect_bad({chunk({4}), chunk({1, 4})}, "already received");
  expect_bad({chunk({5}, std::numeric_limits<float>::infinity())}, "NaN or Inf in row 5");
  TensorChunk wrong = chunk({1, 2});
  wrong.set_data(std::string(4 * row, '\0'));
  expect_bad({wrong}, "bytes for 2 rows");
  TensorChunk offset = chunk({1});
  offset.set_offset(8);
  expect_bad({offset}, "with an offset");
  TensorChunk range;
  range.set_name(word->name);
  range.set_dtype(F32);
  std::vector<float> d(row, 1.0f);
  range.set_data(d.data(), 4 * d.size());
  expect_bad({range, chunk({5})}, "after range chunks");
  expect_bad({chunk({5}), range}, "after row chunks");
  // Rows missing at the end: incomplete, nothing applied.
  PushHeader h;
  h.set_worker(0);
  h.set_step(0);
  auto s = core->BeginPush(h);
  ASSERT_TRUE(core->AddChunk(s->get(), chunk({0, 1, 2})).ok());
  auto fin = core->FinishPush(std::move(*s), absl::Now() + absl::Seconds(1));
  EXPECT_EQ(fin.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(fin.status().message().find("received 3 of 30 rows"), std::string::npos)
      << fin.status();
  EXPECT_EQ(core->version(), 0);
  EXPECT_EQ(Params(core.get()), before);
}

// With the workers' next rows (next_first) a BSP step is answered at once
// and published piece by piece: the same bits as without, readable by a
// pull that waits for each piece, and the next push waits for the version.
TEST(ShardCore, StepMadeInPiecesIsTheSameStep) {
  for (int workers : {1, 2}) {
    ShardOptions o = Opts(BSP, workers);
    o.optimizer.clip_norm = 0.5;
    auto plain = *ShardCore::Create(o, nullptr);
    auto pieces = *ShardCore::Create(o, nullptr);
    TensorRows hint;
    hint.set_name("bert.embeddings.word_embeddings.weight");
    for (int64_t r : {1, 2, 3, 9, 28}) hint.add_rows(r);
    // A pull holding version 1 while later steps are made (out of place,
    // reading the version before theirs) keeps reading version 1's values.
    std::shared_ptr<const Snapshot> held;
    std::vector<float> held_values;
    for (int64_t step = 0; step < 3; ++step) {
      for (int w = 0; w < workers; ++w) {
        ASSERT_TRUE(PushConst(plain.get(), w, step, 0.2f * (w + 1) - step).ok());
        PushHeader h;
        h.set_worker(w);
        h.set_step(step);
        auto s = pieces->BeginPush(h);  // waits for the version being made
        ASSERT_TRUE(s.ok()) << s.status();
        for (int i : pieces->local_slices()) {
          const SliceSpec& sl = pieces->plan().slices()[i];
          std::vector<float> g(sl.size(), 0.2f * (w + 1) - step);
          TensorChunk c;
          c.set_name(sl.name);
          c.set_dtype(F32);
          c.set_offset(sl.begin);
          c.set_data(g.data(), 4 * g.size());
          ASSERT_TRUE(pieces->AddChunk(s->get(), c).ok());
        }
        ASSERT_TRUE(pieces->SetNextFirst(s->get(), hint).ok());
        auto r = pieces->FinishPush(std::move(*s), absl::Now() + absl::Seconds(5));
        ASSERT_TRUE(r.ok()) << r.status();
      }
      // The version being made: first rows, then every slice, then whole.
      auto snap = pieces->AcquireSnapshot(0, step + 1, step + 1,
                                          absl::Now() + absl::Seconds(5));
      ASSERT_TRUE(snap.ok()) << snap.status();
      EXPECT_EQ((*snap)->version, step + 1);
      ASSERT_TRUE((*snap)->WaitFirst(absl::Now() + absl::Seconds(5)).ok());
      ASSERT_TRUE((*snap)
                      ->WaitSlices(static_cast<int>(pieces->update_order().size()),
                                   absl::Now() + absl::Seconds(5))
                      .ok());
      const std::vector<float> want = Params(plain.get());
      ASSERT_EQ((*snap)->params.size(), want.size());
      EXPECT_EQ(0, std::memcmp((*snap)->params.data(), want.data(), 4 * want.size()))
          << "step " << step;
      if (step == 0) {
        held = *snap;
        held_values.assign(want.begin(), want.end());
      }
    }
    ASSERT_NE(held, nullptr);
    EXPECT_EQ(held->version, 1);
    EXPECT_EQ(0, std::memcmp(held->params.data(), held_values.data(),
                             4 * held_values.size()));
    // A push of the next step waits until the version being made is made
    // (the update thread may still be finishing it).
    PushHeader next;
    next.set_worker(0);
    next.set_step(3);
    ASSERT_TRUE(pieces->BeginPush(next).ok());
    auto last = pieces->AcquireSnapshot(0, 3, 3, absl::Now() + absl::Seconds(5));
    ASSERT_TRUE(last.ok());
    EXPECT_TRUE((*last)->Complete());
    EXPECT_EQ(pieces->version(), 3);
    const std::vector<float> a = Params(plain.get()), b = Params(pieces.get());
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), 4 * a.size()));
    // A step made in pieces is made out of place (into the next snapshot):
    // a checkpoint then writes the snapshot's values, and a later step in
    // place (no next_first) starts from them.
    const std::string dir = ::testing::TempDir() + "/pieces-" +
                            std::to_string(workers);
    auto ca = plain->Checkpoint(dir + "-plain", 3, absl::Now() + absl::Seconds(5));
    auto cb = pieces->Checkpoint(dir + "-pieces", 3, absl::Now() + absl::Seconds(5));
    ASSERT_TRUE(ca.ok()) << ca.status();
    ASSERT_TRUE(cb.ok()) << cb.status();
    EXPECT_EQ(ca->crc32c(), cb->crc32c());
    EXPECT_EQ(ca->bytes(), cb->bytes());
    for (int w = 0; w < workers; ++w) {
      ASSERT_TRUE(PushConst(plain.get(), w, 3, 0.3f * (w + 1)).ok());
      if (w > 0) {
        ASSERT_TRUE(PushConst(pieces.get(), w, 3, 0.3f * (w + 1)).ok());
      }
    }
    {
      // Worker 0's push of step 3 (the session begun above, to wait, was
      // dropped unfinished).
      auto r = PushConst(pieces.get(), 0, 3, 0.3f);
      ASSERT_TRUE(r.ok()) << r.status();
    }
    EXPECT_EQ(pieces->version(), 4);
    const std::vector<float> a4 = Params(plain.get()), b4 = Params(pieces.get());
    EXPECT_EQ(0, std::memcmp(a4.data(), b4.data(), 4 * a4.size()));
    EXPECT_NE(0, std::memcmp(a.data(), a4.data(), 4 * a.size()));
    // The word embedding is made last.
    const auto& order = pieces->update_order();
    EXPECT_EQ(pieces->plan().slices()[order.back()].name,
              "bert.embeddings.word_embeddings.weight");
  }
}

TEST(ShardCore, BadNextFirstIsRefused) {
  auto core = *ShardCore::Create(Opts(BSP, 1), nullptr);
  PushHeader h;
  h.set_worker(0);
  h.set_step(0);
  auto s = *core->BeginPush(h);
  TensorRows r;
  r.set_name("bert.nope");
  EXPECT_NE(core->SetNextFirst(s.get(), r).message().find("unknown tensor"),
            std::string::npos);
  r.set_name("bert.embeddings.word_embeddings.weight");
  r.add_rows(4);
  r.add_rows(4);
  EXPECT_NE(core->SetNextFirst(s.get(), r).message().find("not increasing"),
            std::string::npos);
  r.clear_rows();
  r.add_rows(30);
  EXPECT_NE(core->SetNextFirst(s.get(), r).message().find("out of range"),
            std::string::npos);
  r.clear_rows();
  r.add_rows(3);
  EXPECT_TRUE(core->SetNextFirst(s.get(), r).ok());
  EXPECT_NE(core->SetNextFirst(s.get(), r).message().find("one next_first"),
            std::string::npos);
}

// LAMB and clipping over 3 shards equal 1 shard: the shards agree on the
// global norm and on per-tensor norms of the word embeddings split by rows.
TEST(ShardCore, ShardsAgreeOnNormsLikeOneShard) {
  for (auto kind : {optim::OptimizerKind::kLamb,
                    optim::OptimizerKind::kAdamWeightDecay}) {
    ShardOptions one = Opts(BSP, 1);
    one.optimizer.kind = kind;
    one.optimizer.clip_norm = 0.5;  // the constant gradient is clipped
    auto single = *ShardCore::Create(one, nullptr);
    LocalLink link;
    std::vector<std::unique_ptr<ShardCore>> cores;
    for (int s = 0; s < 3; ++s) {
      ShardOptions o = one;
      o.num_shards = 3;
      o.shard = s;
      cores.push_back(*ShardCore::Create(o, &link));
      link.Add(cores.back().get());
    }
    ASSERT_GT(cores[0]->plan().pieces(0), 1);  // word embeddings are split
    for (int step = 0; step < 2; ++step) {
      ASSERT_TRUE(PushConst(single.get(), 0, step, 0.3f).ok());
      std::vector<std::thread> ts;
      for (auto& c : cores) {
        ts.emplace_back([&, step] { ASSERT_TRUE(PushConst(c.get(), 0, step, 0.3f).ok()); });
      }
      for (auto& t : ts) t.join();
    }
    // Compare every slice with the single shard's buffer.
    std::vector<float> whole = Params(single.get());
    for (auto& c : cores) {
      std::vector<float> part = Params(c.get());
      for (int i : c->local_slices()) {
        const SliceSpec& sl = c->plan().slices()[i];
        const int64_t base =
            single->plan().slices()[single->plan().shard_slices(0)[sl.tensor]].shard_offset;
        for (int64_t k = 0; k < sl.size(); ++k) {
          ASSERT_NEAR(part[sl.shard_offset + k], whole[base + sl.begin + k], 1e-6)
              << sl.name << " " << k;
        }
      }
    }
  }
}

}  // namespace
}  // namespace ps
}  // namespace bertps
