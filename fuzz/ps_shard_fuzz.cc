// Fuzzes the parameter-server shard's request handling (server/ps/shard.h,
// as server/ps/service.cc drives it): scripts of push (header, chunks,
// finish), pull, announce, exchange, checkpoint and restore requests against
// a real ShardCore holding a tiny model, under every consistency mode and
// optimizer, one or two shards (a loopback PeerLink answers for the other).
// Script format: ps_shard_fuzz.h. Structured mutation: proto_mutator.h.
//
// Invariants: no crash, leak or UB; a rejected request changes nothing (the
// published parameters bitwise and the version); requests that do not push
// never change parameters; a duplicate push is not applied; the version
// only grows except by a restore; a successful checkpoint holds exactly the
// published parameters.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/io/safetensors.h"
#include "common/status.h"
#include "fuzz/fuzz_input.h"
#include "fuzz/libfuzzer.h"
#include "fuzz/ps_shard_fuzz.h"
#include "proto/ps.pb.h"
#include "common/ps/checkpoint.h"
#include "common/cluster/plan_for.h"
#include "server/ps/shard.h"

namespace bertps {
namespace fuzz {
namespace {

using ps::ShardCore;

// Answers every exchange as if the peer shard had sent the same partial
// sums (so all-reduces complete at once, in-process).
class LoopbackPeers : public ps::PeerLink {
 public:
  ShardCore* core = nullptr;
  absl::Status Send(int to_shard, const ExchangeRequest& request, absl::Time,
                    const std::atomic<bool>*) override {
    ExchangeRequest echo = request;
    echo.set_from_shard(to_shard);
    return core->ReceiveExchange(echo);
  }
};

const optim::OptimizerKind kKinds[] = {
    optim::OptimizerKind::kAdamWeightDecay, optim::OptimizerKind::kAdamW,
    optim::OptimizerKind::kLamb, optim::OptimizerKind::kSgd};

// A scratch directory for checkpoints (tmpfs when there is one).
std::string* scratch_dir = nullptr;

// Removes the scratch directory when the fuzzer exits.
void RemoveScratch() {
  std::error_code ec;
  if (scratch_dir != nullptr) std::filesystem::remove_all(*scratch_dir, ec);
}

const std::string& ScratchDir() {
  static const std::string* dir = [] {
    std::string base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    std::string t = base + "/bertps-fuzz-ps-XXXXXX";
    if (mkdtemp(&t[0]) == nullptr) std::abort();
    std::atexit(RemoveScratch);
    scratch_dir = new std::string(t);
    return scratch_dir;
  }();
  return *dir;
}

struct Observed {
  bool ok = false;  // false: the shard is broken (pulls fail)
  int64_t version = 0;
  std::vector<float> params;
};

Observed Observe(ShardCore& core) {
  Observed o;
  auto snap = core.AcquireSnapshot(0, 0, 0, absl::InfinitePast());
  if (snap.ok()) {
    o.ok = true;
    o.version = (*snap)->version;
    o.params.assign((*snap)->params.begin(), (*snap)->params.end());
  }
  o.version = core.version();
  return o;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0;
}

// Reads a pulled snapshot the way ShardService::Pull streams it.
void ReadLikePull(ShardCore& core, const PullRequest& req,
                  const ps::Snapshot& s) {
  double sum = 0;
  for (int i : core.local_slices()) {
    const ps::SliceSpec& sl = core.plan().slices()[i];
    bool wanted = req.names().empty();
    for (const std::string& n : req.names()) wanted |= n == sl.name;
    if (!wanted) continue;
    for (int64_t k = 0; k < sl.size(); ++k) sum += s.params[sl.shard_offset + k];
  }
  (void)sum;
}

// A complete push: every local slice, values that depend on the header.
absl::Status FullPush(ShardCore& core, const PushHeader& header,
                      absl::StatusOr<PushResponse>* resp) {
  auto session = core.BeginPush(header);
  if (!session.ok()) return session.status();
  const bool bf16 = header.examples() % 2 == 1;
  for (int i : core.local_slices()) {
    const ps::SliceSpec& sl = core.plan().slices()[i];
    TensorChunk c;
    c.set_name(sl.name);
    c.set_dtype(bf16 ? BF16 : F32);
    c.set_offset(sl.begin);
    std::string data;
    for (int64_t k = 0; k < sl.size(); ++k) {
      const uint64_t r = static_cast<uint64_t>(k) + static_cast<uint64_t>(header.step());
      const float v = 1e-3f * (static_cast<float>(r % 7) - 3);
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      if (bf16) {
        const uint16_t h = static_cast<uint16_t>(bits >> 16);
        data.append(reinterpret_cast<const char*>(&h), 2);
      } else {
        data.append(reinterpret_cast<const char*>(&bits), 4);
      }
    }
    c.set_data(data);
    RETURN_IF_ERROR(core.AddChunk(session->get(), c));
  }
  *resp = core.FinishPush(std::move(*session), absl::InfinitePast());
  return resp->status();
}

void RemoveTree(const std::string& path) {
  std::error_code ec;  // only ever paths under the scratch directory
  std::filesystem::remove_all(path, ec);
}

}  // namespace

int RunScript(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  const uint8_t b0 = in.Byte(), b1 = in.Byte();
  ps::ShardOptions o;
  o.config = FuzzModelConfig();
  o.optimizer.kind = kKinds[(b0 / 3) % 4];
  o.job_plan = PlanFor(static_cast<ConsistencyMode>(b0 % 3), 1 + b1 % 3,
                       o.optimizer);
  const ConsistencyMode mode = o.job_plan.mode;
  const int workers = o.job_plan.pushers;
  o.num_shards = 1 + (b1 / 3) % 2;
  o.shard = (b1 / 6) % o.num_shards;
  if (mode == BSP) o.backup_workers = (b1 / 12) % workers;
  if (mode == SSP) o.staleness = (b1 / 12) % 3;
  o.wait_timeout = absl::ZeroDuration();  // never wait for other requests
  LoopbackPeers peers;
  auto created = ShardCore::Create(o, &peers);
  BERTPS_FUZZ_CHECK(created.ok(), "%s", created.status().ToString().c_str());
  ShardCore& core = **created;
  peers.core = &core;

  const std::string dir = ScratchDir() + "/run";
  RemoveTree(dir);
  std::string manifest;  // the last manifest written
  std::unique_ptr<ShardCore::PushSession> session;
  absl::Status session_bad;
  const absl::Time now = absl::InfinitePast();  // every wait times out

  while (auto rec = in.Next()) {
    const Observed before = Observe(core);
    absl::Status st;
    bool may_change = false;  // an accepted request of this op may update
    bool restores = false;
    switch (rec->op % kPsNumOps) {
      case kPsBeginPush: {
        PushHeader h;
        if (!h.ParseFromString(std::string(rec->payload))) continue;
        session.reset();
        session_bad = absl::OkStatus();
        auto s = core.BeginPush(h);
        st = s.status();
        if (s.ok()) session = std::move(*s);
        break;
      }
      case kPsChunk: {
        TensorChunk c;
        if (!session || !c.ParseFromString(std::string(rec->payload))) continue;
        if (session_bad.ok()) session_bad = core.AddChunk(session.get(), c);
        st = session_bad;
        break;
      }
      case kPsFinishPush: {
        if (!session) continue;
        if (!session_bad.ok()) {  // the service answers the chunk's error
          session.reset();
          st = session_bad;
          break;
        }
        const bool dup = session->duplicate;
        auto r = core.FinishPush(std::move(session), now);
        st = r.status();
        may_change = !dup && !(r.ok() && r->duplicate());
        break;
      }
      case kPsFullPush: {
        PushHeader h;
        if (!h.ParseFromString(std::string(rec->payload))) continue;
        absl::StatusOr<PushResponse> r = absl::UnknownError("not finished");
        st = FullPush(core, h, &r);
        may_change = !(r.ok() && r->duplicate());
        break;
      }
      case kPsPull: {
        PullRequest p;
        if (!p.ParseFromString(std::string(rec->payload))) continue;
        auto snap = core.AcquireSnapshot(p.worker(), p.min_version(), p.step(),
                                         now);
        st = snap.status();
        if (snap.ok()) {
          BERTPS_FUZZ_CHECK(
              (*snap)->params.size() == static_cast<size_t>(core.shard_size()),
              "snapshot size");
          ReadLikePull(core, p, **snap);
        }
        break;
      }
      case kPsAnnounce: {
        AnnounceRequest a;
        if (!a.ParseFromString(std::string(rec->payload))) continue;
        auto r = core.Announce(a, now);
        st = r.status();
        if (r.ok()) {
          BERTPS_FUZZ_CHECK(r->examples_total() >= 0 &&
                                r->mlm_weight_total() >= 0,
                            "negative batch totals");
        }
        break;
      }
      case kPsExchange: {
        ExchangeRequest e;
        if (!e.ParseFromString(std::string(rec->payload))) continue;
        st = core.ReceiveExchange(e);
        break;
      }
      case kPsCheckpoint: {
        CheckpointRequest c;
        if (!c.ParseFromString(std::string(rec->payload))) continue;
        if (c.dir().empty()) continue;  // the service refuses it
        auto r = core.Checkpoint(dir, c.version(), now);
        st = r.status();
        if (!r.ok()) break;
        // The file holds exactly the published parameters.
        auto file = io::SafetensorsReader::Open(r->file());
        BERTPS_FUZZ_CHECK(file.ok(), "%s", file.status().ToString().c_str());
        BERTPS_FUZZ_CHECK(before.ok, "checkpoint of a broken shard");
        // Parameters first, one tensor per local slice in plan order.
        std::vector<float> written(core.shard_size());
        size_t k = 0;
        for (int i : core.local_slices()) {
          const ps::SliceSpec& sl = core.plan().slices()[i];
          BERTPS_FUZZ_CHECK(k < file->tensors().size(), "missing slices");
          auto raw = file->RawBytes(file->tensors()[k++].name);
          BERTPS_FUZZ_CHECK(raw.ok() && raw->size() == 4 * sl.size(),
                            "slice %s", sl.name.c_str());
          std::memcpy(written.data() + sl.shard_offset, raw->data(),
                      raw->size());
        }
        BERTPS_FUZZ_CHECK(SameBits(written, before.params),
                          "checkpoint differs from the published parameters");
        if (o.num_shards == 1) {
          ps::Manifest m;
          m.version = r->version();
          m.num_shards = 1;
          m.config_json = o.config.ToJson();
          m.task = std::string(BertTaskName(o.task));
          m.optimizer =
              std::string(optim::OptimizerKindName(o.optimizer.kind));
          m.state_slots = core.Describe().state_slots();
          m.plan_text = core.plan().ToText();
          ps::ShardFile f;
          f.shard = 0;
          f.file = r->file();
          f.crc32c = r->crc32c();
          f.bytes = r->bytes();
          m.files.push_back(f);
          auto path = ps::WriteManifest(dir, m);
          BERTPS_FUZZ_CHECK(path.ok(), "%s", path.status().ToString().c_str());
          manifest = *path;
        }
        break;
      }
      case kPsRestore: {
        if (manifest.empty()) continue;
        auto r = core.Restore(manifest);
        st = r.status();
        restores = true;
        break;
      }
      case kPsRestoreBytes: {
        const std::string base =
            manifest.empty() ? dir : manifest.substr(0, manifest.rfind('/'));
        RemoveTree(base + "/fuzz-manifest.json");
        std::error_code ec;
        std::filesystem::create_directories(base, ec);
        const std::string path = base + "/fuzz-manifest.json";
        {
          std::ofstream out(path, std::ios::binary);
          out.write(rec->payload.data(), rec->payload.size());
        }
        auto r = core.Restore(path);
        st = r.status();
        restores = true;
        break;
      }
      case kPsDescribe: {
        DescribeResponse d = core.Describe();
        StatsResponse s = core.Stats();
        BERTPS_FUZZ_CHECK(d.version() == s.version(), "describe/stats");
        continue;
      }
    }
    const Observed after = Observe(core);
    if (!st.ok() || (!may_change && !restores)) {
      BERTPS_FUZZ_CHECK(after.version == before.version,
                        "op %d changed the version %lld -> %lld (%s)",
                        rec->op % kPsNumOps,
                        static_cast<long long>(before.version),
                        static_cast<long long>(after.version),
                        st.ToString().c_str());
      if (before.ok && after.ok) {
        BERTPS_FUZZ_CHECK(SameBits(before.params, after.params),
                          "op %d changed parameters (%s)", rec->op % kPsNumOps,
                          st.ToString().c_str());
      }
    } else if (!restores) {
      BERTPS_FUZZ_CHECK(after.version >= before.version, "version went back");
    }
  }
  return 0;
}

}  // namespace fuzz
}  // namespace bertps

[[maybe_unused]] static const bool kQuiet = bertps::fuzz::QuietProtobuf();

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return bertps::fuzz::RunScript(data, size);
}

namespace {

[[maybe_unused]] bertps::fuzz::PayloadKind PsKind(uint8_t op) {
  static const bertps::PushHeader header;
  static const bertps::TensorChunk chunk;
  static const bertps::PullRequest pull;
  static const bertps::AnnounceRequest announce;
  static const bertps::ExchangeRequest exchange;
  static const bertps::CheckpointRequest checkpoint;
  using namespace bertps::fuzz;  // NOLINT: the op names
  switch (op % kPsNumOps) {
    case kPsBeginPush:
    case kPsFullPush:
      return {&header, false};
    case kPsChunk:
      return {&chunk, false};
    case kPsPull:
      return {&pull, false};
    case kPsAnnounce:
      return {&announce, false};
    case kPsExchange:
      return {&exchange, false};
    case kPsCheckpoint:
      return {&checkpoint, false};
    default:
      return {};
  }
}

}  // namespace

BERTPS_SCRIPT_MUTATOR(bertps::fuzz::kPsSetupBytes, PsKind)
