// Writes the structured seed scripts of fuzz_ps_shard and fuzz_coordinator
// (fuzz/corpus/<target>/) and the JSON form of each job spec given:
//   make_seeds OUT_DIR SPEC.pbtxt...
// The pushes are complete, valid pushes of a real ShardCore's plan for the
// fuzz model; the coordinator scripts submit the given (real) job specs and
// walk a job through registration, step reports and completion.
// fuzz/make_seeds.sh runs it (with the other seeds' tools).
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fuzz/coordinator_fuzz.h"
#include "fuzz/fuzz_input.h"
#include "fuzz/ps_shard_fuzz.h"
#include "google/protobuf/util/json_util.h"
#include "proto/coordinator.pb.h"
#include "proto/ps.pb.h"
#include "common/cluster/job_spec.h"
#include "common/ps/chunk_codec.h"
#include "common/cluster/plan_for.h"
#include "server/ps/shard.h"

namespace bertps {
namespace fuzz {
namespace {

bool Write(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), bytes.size());
  return static_cast<bool>(out);
}

std::string Header(int worker, int64_t step, double sq = 1e-4) {
  PushHeader h;
  h.set_worker(worker);
  h.set_step(step);
  h.set_examples(2);
  h.set_grad_sq_sum(sq);
  return h.SerializeAsString();
}

// A push sent chunk by chunk (two chunks per slice when it has >= 2
// elements), as the worker streams it.
void ChunkedPush(const ps::ShardCore& core, int worker, int64_t step,
                 ScriptWriter* w) {
  w->Add(kPsBeginPush, Header(worker, step));
  for (int i : core.local_slices()) {
    const ps::SliceSpec& sl = core.plan().slices()[i];
    const int64_t half = sl.size() >= 2 ? sl.size() / 2 : sl.size();
    for (int64_t begin = 0; begin < sl.size(); begin += half) {
      const int64_t n = std::min(half, sl.size() - begin);
      TensorChunk c;
      c.set_name(sl.name);
      c.set_dtype(F32);
      c.set_offset(sl.begin + begin);
      std::string data(4 * n, '\0');
      for (int64_t k = 0; k < n; ++k) {
        const float v = 1e-3f * static_cast<float>((k % 5) - 2);
        std::memcpy(&data[4 * k], &v, 4);
      }
      c.set_data(data);
      w->Add(kPsChunk, c.SerializeAsString());
    }
  }
  w->Add(kPsFinishPush, "");
}

int PsSeeds(const std::string& dir) {
  int written = 0;
  // (mode/optimizer byte, workers/shards byte)
  const std::pair<uint8_t, uint8_t> configs[] = {
      {0, 0},  {1, 0},  {2, 0},  {6, 0},  {9, 0},   // BSP/ASP/SSP, lamb, sgd
      {0, 1},  {0, 13}, {0, 3},  {6, 3},  {1, 9},   // 2 workers, backup, 2 shards
      {2, 13}, {7, 4},
  };
  for (const auto& [b0, b1] : configs) {
    ps::ShardOptions o;
    o.config = FuzzModelConfig();
    const optim::OptimizerKind kinds[] = {
        optim::OptimizerKind::kAdamWeightDecay, optim::OptimizerKind::kAdamW,
        optim::OptimizerKind::kLamb, optim::OptimizerKind::kSgd};
    o.optimizer.kind = kinds[(b0 / 3) % 4];
    o.job_plan = PlanFor(static_cast<ConsistencyMode>(b0 % 3), 1 + b1 % 3,
                         o.optimizer);
    const ConsistencyMode mode = o.job_plan.mode;
    const int workers = o.job_plan.pushers;
    o.num_shards = 1 + (b1 / 3) % 2;
    o.shard = (b1 / 6) % o.num_shards;
    if (mode == BSP) o.backup_workers = (b1 / 12) % workers;
    if (mode == SSP) o.staleness = (b1 / 12) % 3;
    struct Null : ps::PeerLink {
      absl::Status Send(int, const ExchangeRequest&, absl::Time,
                        const std::atomic<bool>*) override {
        return absl::OkStatus();
      }
    } peers;
    auto core = ps::ShardCore::Create(o, &peers);
    if (!core.ok()) {
      std::fprintf(stderr, "%s\n", core.status().ToString().c_str());
      return -1;
    }
    ScriptWriter w;
    w.Setup(b0).Setup(b1);
    w.Add(kPsDescribe, "");
    AnnounceRequest a;
    for (int wk = 0; wk < workers; ++wk) {
      a.set_worker(wk);
      a.set_step(0);
      a.set_mlm_weight(20);
      a.set_examples(2);
      w.Add(kPsAnnounce, a.SerializeAsString());
    }
    for (int wk = 0; wk < workers; ++wk) ChunkedPush(**core, wk, 0, &w);
    PullRequest p;
    p.set_worker(0);
    p.set_min_version(1);
    p.set_step(1);
    w.Add(kPsPull, p.SerializeAsString());
    for (int wk = 0; wk < workers; ++wk) w.Add(kPsFullPush, Header(wk, 1));
    w.Add(kPsFullPush, Header(0, 1));  // a retry: duplicate
    CheckpointRequest c;
    c.set_dir("ckpt");
    c.set_version(mode == BSP ? 2 : 2 * workers);
    w.Add(kPsCheckpoint, c.SerializeAsString());
    w.Add(kPsRestore, "");
    ExchangeRequest e;
    e.set_from_shard(o.num_shards - 1);
    e.set_version(7);
    e.add_values(1.5);
    w.Add(kPsExchange, e.SerializeAsString());
    p.clear_names();
    p.add_names((*core)->plan().slices()[(*core)->local_slices()[0]].name);
    w.Add(kPsPull, p.SerializeAsString());
    if (!Write(absl::StrCat(dir, "/script-", int{b0}, "-", int{b1}), w.bytes())) {
      return -1;
    }
    ++written;
  }
  return written;
}

std::string Flatten(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!b.Dump(&slices).ok()) return out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

// Wire bytes of streamed Push / Pull messages as the shard and the worker
// encode them (chunk_codec.h), each with a few slice cuts in front.
int CodecSeeds(const std::string& dir) {
  ps::ShardOptions o;
  o.config = FuzzModelConfig();
  auto core = ps::ShardCore::Create(o, nullptr);
  if (!core.ok()) return -1;
  std::vector<std::string> messages;
  PushRequest h;
  h.mutable_header()->set_worker(1);
  h.mutable_header()->set_step(7);
  h.mutable_header()->set_examples(32);
  h.mutable_header()->set_grad_sq_sum(0.25);
  messages.push_back(Flatten(ps::EncodeMessage(h)));
  PullResponse v;
  v.set_version(12);
  messages.push_back(Flatten(ps::EncodeMessage(v)));
  int n = 0;
  for (int i : (*core)->local_slices()) {
    if (n++ % 6 != 0) continue;
    const ps::SliceSpec& sl = (*core)->plan().slices()[i];
    std::vector<float> data(std::min<int64_t>(sl.size(), 24), 0.5f);
    messages.push_back(Flatten(ps::EncodeChunk(
        sl.name, n % 2 ? F32 : BF16, sl.begin,
        grpc::Slice(data.data(), sizeof(float) * data.size()))));
  }
  // Batches (`chunks`) of a push and of a pull: a range, a row and a BF16
  // chunk each.
  for (int field : {ps::kPushChunksField, ps::kPullChunksField}) {
    std::vector<float> data(16, 0.25f);
    ps::ChunkBatch batch(field);
    batch.AddChunk("bert.pooler.dense.bias", F32, 4,
                   grpc::Slice(data.data(), sizeof(float) * 8));
    std::vector<grpc::Slice> rows;
    rows.emplace_back(data.data(), sizeof(float) * 8);
    batch.AddRowChunk("bert.embeddings.word_embeddings.weight", F32, {3},
                      std::move(rows));
    batch.AddChunk("cls.predictions.bias", BF16, 0,
                   grpc::Slice(data.data(), 8));
    messages.push_back(Flatten(batch.Take()));
  }
  int written = 0;
  for (size_t m = 0; m < messages.size(); ++m) {
    const std::string cuts = m % 2 ? std::string("\x02\x30\xa0", 3)
                                   : std::string("\x00", 1);
    if (!Write(absl::StrCat(dir, "/wire-", m), cuts + messages[m])) return -1;
    ++written;
  }
  return written;
}

int CoordinatorSeeds(const std::string& dir,
                     const std::vector<std::string>& specs) {
  int written = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    absl::StatusOr<JobSpec> spec = ParseJobSpec(specs[i]);
    const int shards = spec.ok() ? spec->num_ps_shards() : 1;
    const int workers = spec.ok() ? spec->num_workers() : 1;
    for (int variant = 0; variant < 2; ++variant) {
      ScriptWriter w;
      w.Setup(2);  // 1000 examples
      if (variant == 0 || !spec.ok()) {
        w.Add(kCoSubmitText, specs[i]);
      } else {
        w.Add(kCoSubmitProto, spec->SerializeAsString());
      }
      for (int s = 0; s < shards; ++s) {
        RegisterRequest r;
        r.set_role(PS);
        r.set_address(absl::StrCat("127.0.0.1:", 7000 + s));
        w.Add(kCoRegister, r.SerializeAsString());
      }
      for (int k = 0; k < workers; ++k) {
        RegisterRequest r;
        r.set_role(TRAIN);
        w.Add(kCoRegister, r.SerializeAsString());
      }
      // Member ids of one byte stand for the k-th registered member.
      for (int k = 0; k < shards + workers; ++k) {
        HeartbeatRequest h;
        h.set_member_id(std::string(1, static_cast<char>(k)));
        w.Add(kCoHeartbeat, h.SerializeAsString());
      }
      for (int64_t step = 0; step < 3; ++step) {
        for (int k = 0; k < workers; ++k) {
          HeartbeatRequest h;
          h.set_member_id(std::string(1, static_cast<char>(shards + k)));
          h.set_job_id(std::string(1, '\0'));
          StepReport* s = h.add_steps();
          s->set_step(step);
          s->set_first_example(step * workers * 16 + k * 16);
          s->set_examples(16);
          s->set_loss(10.5 - step);
          s->set_learning_rate(1e-4);
          s->set_tokens(16 * 128);
          s->set_version(step + 1);
          if (variant == 1 && step == 2) h.set_done(true);
          w.Add(kCoHeartbeat, h.SerializeAsString());
        }
      }
      w.Add(kCoGet, std::string(1, '\0'));
      w.Add(kCoAdvance, std::string(1, '\x0c'));  // 12 s: members expire
      w.Add(kCoHeartbeat, [&] {
        HeartbeatRequest h;
        h.set_member_id(std::string(1, static_cast<char>(shards)));
        h.set_job_id(std::string(1, '\0'));
        h.set_error("worker failed: out of memory");
        return h.SerializeAsString();
      }());
      w.Add(kCoCancel, std::string(1, '\0'));
      if (!Write(absl::StrCat(dir, "/spec-", i, "-", variant), w.bytes())) {
        return -1;
      }
      ++written;
    }
  }
  return written;
}

}  // namespace
}  // namespace fuzz
}  // namespace bertps

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: make_seeds OUT_DIR SPEC.pbtxt...\n");
    return 2;
  }
  const std::string out = argv[1];
  std::vector<std::string> specs;
  for (int i = 2; i < argc; ++i) {
    std::ifstream in(argv[i], std::ios::binary);
    specs.emplace_back(std::istreambuf_iterator<char>(in),
                       std::istreambuf_iterator<char>());
    // The JSON form of each spec too (job_spec_fuzz).
    absl::StatusOr<bertps::JobSpec> s = bertps::ParseJobSpec(specs.back());
    if (s.ok()) {
      std::string json;
      google::protobuf::util::JsonPrintOptions jo;
      jo.add_whitespace = true;
      if (google::protobuf::util::MessageToJsonString(*s, &json, jo).ok()) {
        bertps::fuzz::Write(absl::StrCat(out, "/job_spec_fuzz/json-", i - 2),
                            json);
        specs.push_back(json);
      }
    }
  }
  const int ps = bertps::fuzz::PsSeeds(out + "/ps_shard_fuzz");
  const int co = bertps::fuzz::CoordinatorSeeds(out + "/coordinator_fuzz", specs);
  const int codec = bertps::fuzz::CodecSeeds(out + "/chunk_codec_fuzz");
  if (ps < 0 || co < 0 || codec < 0) return 1;
  std::printf("%d ps_shard_fuzz seeds, %d coordinator_fuzz seeds\n", ps, co);
  return 0;
}
