#include "common/ps/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/io/crc32c.h"
#include "common/io/file_util.h"
#include "common/io/safetensors.h"
#include "common/model/bert_config.h"
#include "common/model/weights.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace bertps {
namespace ps {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr char kShardFormat[] = "bertps-shard";
constexpr char kManifestFormat[] = "bertps-checkpoint";
// 2: a "provenance" object (release, spec_sha256). 1 is still read.
constexpr int kManifestFormatVersion = 2;
constexpr int kOldestManifestFormatVersion = 1;
constexpr char kManifestName[] = "manifest.json";
constexpr char kLatestName[] = "LATEST";
constexpr int kMaxShards = 1024;  // as PartitionPlan::Make
constexpr int kMaxStateSlots = 2;

// ---------------------------------------------------------------- files ----

std::string JoinPath(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (a.back() == '/') return a + b;
  return absl::StrCat(a, "/", b);
}

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string CheckpointDirName(int64_t version) {
  return absl::StrCat("ckpt-", version);
}

std::string ShardFileName(int shard, int num_shards) {
  return absl::StrCat("shard-", shard, "-of-", num_shards, ".safetensors");
}

// ----------------------------------------------------------------- plan ----

struct OldSlice {
  int64_t begin = 0;
  int64_t end = 0;
  int shard = 0;
};

// One tensor of a checkpoint's plan: its slices tile [0, size).
struct PlanTensor {
  std::string name;
  int64_t size = 0;
  std::vector<OldSlice> slices;  // by begin
};

// Parses PartitionPlan::ToText() lines "name begin end shard" and checks that
// each tensor's slices tile it exactly and name shards below num_shards.
// Errors are InvalidArgument (the caller adds the file).
absl::StatusOr<std::vector<PlanTensor>> ParsePlanText(absl::string_view text,
                                                      int num_shards) {
  std::vector<PlanTensor> tensors;
  std::map<std::string, size_t, std::less<>> index;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    std::vector<absl::string_view> f =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    OldSlice s;
    if (f.size() != 4 || !absl::SimpleAtoi(f[1], &s.begin) ||
        !absl::SimpleAtoi(f[2], &s.end) || !absl::SimpleAtoi(f[3], &s.shard)) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan line ", line_no, " '", line,
                       "' is not 'name begin end shard'"));
    }
    if (s.begin < 0 || s.end <= s.begin || s.shard < 0 ||
        s.shard >= num_shards) {
      return absl::InvalidArgumentError(absl::StrCat(
          "plan line ", line_no, " '", line, "': need 0 <= begin < end and ",
          "0 <= shard < ", num_shards));
    }
    auto it = index.find(f[0]);
    if (it == index.end()) {
      it = index.emplace(std::string(f[0]), tensors.size()).first;
      tensors.push_back(PlanTensor{std::string(f[0]), 0, {}});
    }
    tensors[it->second].slices.push_back(s);
  }
  if (tensors.empty()) return absl::InvalidArgumentError("the plan is empty");
  for (PlanTensor& t : tensors) {
    std::sort(
        t.slices.begin(), t.slices.end(),
        [](const OldSlice& a, const OldSlice& b) { return a.begin < b.begin; });
    int64_t next = 0;
    for (const OldSlice& s : t.slices) {
      if (s.begin != next) {
        return absl::InvalidArgumentError(
            absl::StrCat("plan: the slices of ", t.name, " do not tile it (",
                         s.begin < next ? "overlap" : "gap", " at element ",
                         std::min(s.begin, next), ")"));
      }
      next = s.end;
    }
    t.size = next;
  }
  return tensors;
}

// FailedPrecondition unless the checkpoint's tensors (from its plan) are
// exactly the layout's, names and sizes; the message says the first
// difference.
absl::Status CheckSameModel(const std::vector<PlanTensor>& plan,
                            const ParamLayout& layout) {
  std::set<std::string> seen;
  for (const PlanTensor& t : plan) {
    const ParamSpec* p = layout.Find(t.name);
    if (p == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint tensor ", t.name, " is not in the model"));
    }
    if (p->size != t.size) {
      return absl::FailedPreconditionError(absl::StrCat(
          "tensor ", t.name, " has ", t.size,
          " elements in the checkpoint and ", p->size, " in the model"));
    }
    seen.insert(t.name);
  }
  for (const ParamSpec& p : layout.tensors()) {
    if (seen.count(p.name) == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("model tensor ", p.name, " is not in the checkpoint"));
    }
  }
  return absl::OkStatus();
}

// CheckSameModel for a checkpoint being loaded: the message names the
// checkpoint and its model.
absl::Status CheckCheckpointModel(const std::string& manifest_path,
                                  const Manifest& m,
                                  const std::vector<PlanTensor>& plan,
                                  const ParamLayout& layout) {
  absl::Status s = CheckSameModel(plan, layout);
  if (s.ok()) return s;
  std::string model = m.task;
  auto c = ParseBertConfig(m.config_json);
  if (c.ok()) {
    model = absl::StrCat(m.task, ", vocab ", c->vocab_size, ", hidden ",
                         c->hidden_size, ", ", c->num_hidden_layers,
                         " layers, intermediate ", c->intermediate_size);
  }
  return absl::FailedPreconditionError(
      absl::StrCat("checkpoint ", manifest_path, " (", model,
                   ") is of a different model: ", s.message()));
}

absl::StatusOr<BertTask> ParseTask(absl::string_view task) {
  if (task == BertTaskName(BertTask::kPretrain)) return BertTask::kPretrain;
  if (task == BertTaskName(BertTask::kClassify)) return BertTask::kClassify;
  return absl::InvalidArgumentError(
      absl::StrCat("task '", task, "' is not pretrain or classify"));
}

// ------------------------------------------------------------- manifest ----

// A path relative to the manifest directory that stays inside it.
bool IsSafeRelativePath(absl::string_view p) {
  if (p.empty() || p.front() == '/') return false;
  for (absl::string_view part : absl::StrSplit(p, '/')) {
    if (part.empty() || part == "." || part == "..") return false;
  }
  return true;
}

// Every field of a manifest, its plan and its model; InvalidArgument.
absl::Status CheckManifest(const Manifest& m) {
  if (m.version < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("version must be >= 0, got ", m.version));
  }
  if (m.num_shards < 1 || m.num_shards > kMaxShards) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_shards must be in [1, ", kMaxShards, "], got ", m.num_shards));
  }
  auto config = ParseBertConfig(m.config_json);
  if (!config.ok()) return Annotate(config.status(), "config");
  auto task = ParseTask(m.task);
  if (!task.ok()) return task.status();
  if (m.optimizer.empty()) {
    return absl::InvalidArgumentError("optimizer is empty");
  }
  if (m.state_slots < 0 || m.state_slots > kMaxStateSlots) {
    return absl::InvalidArgumentError(
        absl::StrCat("state_slots must be in [0, ", kMaxStateSlots, "], got ",
                     m.state_slots));
  }
  auto plan = ParsePlanText(m.plan_text, m.num_shards);
  if (!plan.ok()) return plan.status();
  const ParamLayout layout = ParamLayout::ForBert(*config, *task);
  {
    absl::Status same = CheckSameModel(*plan, layout);
    if (!same.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the plan does not match the config and task: ", same.message()));
    }
  }
  if (static_cast<int>(m.files.size()) != m.num_shards) {
    return absl::InvalidArgumentError(
        absl::StrCat("files lists ", m.files.size(), " shard files for ",
                     m.num_shards, " shards"));
  }
  std::vector<bool> have(m.num_shards, false);
  for (const ShardFile& f : m.files) {
    if (f.shard < 0 || f.shard >= m.num_shards || have[f.shard]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "files: shard ", f.shard, " is out of range or listed twice"));
    }
    have[f.shard] = true;
    if (!IsSafeRelativePath(f.file)) {
      return absl::InvalidArgumentError(
          absl::StrCat("files: shard ", f.shard, " file '", f.file,
                       "' is not a relative path inside the checkpoint"));
    }
    if (f.bytes < 8) {
      return absl::InvalidArgumentError(absl::StrCat(
          "files: shard ", f.shard, " size ", f.bytes, " is too small"));
    }
  }
  return absl::OkStatus();
}

// Keys in the order written here, for readers of the file.
nlohmann::ordered_json ManifestToJson(const Manifest& m) {
  using OJson = nlohmann::ordered_json;
  OJson j;
  j["format"] = kManifestFormat;
  j["format_version"] = kManifestFormatVersion;
  j["version"] = m.version;
  j["num_shards"] = m.num_shards;
  j["task"] = m.task;
  j["optimizer"] = m.optimizer;
  j["state_slots"] = m.state_slots;
  j["config"] = OJson::parse(m.config_json);  // checked by CheckManifest
  OJson plan = OJson::array();
  for (absl::string_view line : absl::StrSplit(m.plan_text, '\n')) {
    if (!absl::StripAsciiWhitespace(line).empty()) {
      plan.push_back(std::string(line));
    }
  }
  j["plan"] = std::move(plan);
  OJson files = OJson::array();
  for (const ShardFile& f : m.files) {
    files.push_back(OJson{{"shard", f.shard},
                          {"file", f.file},
                          {"crc32c", f.crc32c},
                          {"bytes", f.bytes}});
  }
  j["files"] = std::move(files);
  if (!m.example_ledger.empty()) j["example_ledger"] = m.example_ledger;
  j["provenance"] =
      OJson{{"release", m.release}, {"spec_sha256", m.spec_sha256}};
  return j;
}

template <typename T>
absl::Status GetInt(const Json& j, const char* key, T* out) {
  auto it = j.find(key);
  if (it == j.end()) {
    return absl::InvalidArgumentError(absl::StrCat("missing '", key, "'"));
  }
  if (!it->is_number_integer()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", key, "' must be an integer"));
  }
  if (it->is_number_unsigned()) {
    const uint64_t v = it->get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", key, "' is out of range"));
    }
    *out = static_cast<T>(v);
  } else {
    const int64_t v = it->get<int64_t>();
    if (v < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
        (v > 0 && static_cast<uint64_t>(v) >
                      static_cast<uint64_t>(std::numeric_limits<T>::max()))) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", key, "' is out of range"));
    }
    *out = static_cast<T>(v);
  }
  return absl::OkStatus();
}

absl::Status GetString(const Json& j, const char* key, std::string* out) {
  auto it = j.find(key);
  if (it == j.end()) {
    return absl::InvalidArgumentError(absl::StrCat("missing '", key, "'"));
  }
  if (!it->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", key, "' must be a string"));
  }
  *out = it->get<std::string>();
  return absl::OkStatus();
}

// The fields of a manifest JSON object (InvalidArgument).
absl::StatusOr<Manifest> ManifestFromJson(const Json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError("not a JSON object");
  Manifest m;
  std::string format;
  RETURN_IF_ERROR(GetString(j, "format", &format));
  if (format != kManifestFormat) {
    return absl::InvalidArgumentError(absl::StrCat(
        "format is '", format, "', expected '", kManifestFormat, "'"));
  }
  int format_version = 0;
  RETURN_IF_ERROR(GetInt(j, "format_version", &format_version));
  if (format_version < kOldestManifestFormatVersion ||
      format_version > kManifestFormatVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        "format_version ", format_version, " is not supported (this release "
        "reads ", kOldestManifestFormatVersion, " to ", kManifestFormatVersion,
        ")"));
  }
  if (format_version >= 2) {
    auto p = j.find("provenance");
    if (p == j.end() || !p->is_object()) {
      return absl::InvalidArgumentError("'provenance' must be a JSON object");
    }
    RETURN_IF_ERROR(Annotate(GetString(*p, "release", &m.release),
                             "provenance"));
    RETURN_IF_ERROR(Annotate(GetString(*p, "spec_sha256", &m.spec_sha256),
                             "provenance"));
  }
  RETURN_IF_ERROR(GetInt(j, "version", &m.version));
  RETURN_IF_ERROR(GetInt(j, "num_shards", &m.num_shards));
  RETURN_IF_ERROR(GetString(j, "task", &m.task));
  RETURN_IF_ERROR(GetString(j, "optimizer", &m.optimizer));
  RETURN_IF_ERROR(GetInt(j, "state_slots", &m.state_slots));
  if (j.contains("example_ledger")) {
    RETURN_IF_ERROR(GetString(j, "example_ledger", &m.example_ledger));
  }
  auto config = j.find("config");
  if (config == j.end() || !config->is_object()) {
    return absl::InvalidArgumentError("'config' must be a JSON object");
  }
  m.config_json = config->dump(2);
  auto plan = j.find("plan");
  if (plan == j.end() || !plan->is_array()) {
    return absl::InvalidArgumentError("'plan' must be an array of strings");
  }
  for (const Json& line : *plan) {
    if (!line.is_string()) {
      return absl::InvalidArgumentError("'plan' must be an array of strings");
    }
    absl::StrAppend(&m.plan_text, line.get<std::string>(), "\n");
  }
  auto files = j.find("files");
  if (files == j.end() || !files->is_array()) {
    return absl::InvalidArgumentError("'files' must be an array");
  }
  for (const Json& fj : *files) {
    if (!fj.is_object()) {
      return absl::InvalidArgumentError("'files' entries must be objects");
    }
    ShardFile f;
    absl::Status s = GetInt(fj, "shard", &f.shard);
    if (s.ok()) s = GetString(fj, "file", &f.file);
    if (s.ok()) s = GetInt(fj, "crc32c", &f.crc32c);
    if (s.ok()) s = GetInt(fj, "bytes", &f.bytes);
    if (!s.ok()) {
      return Annotate(s, absl::StrCat("files[", m.files.size(), "]"));
    }
    m.files.push_back(std::move(f));
  }
  return m;
}

// ---------------------------------------------------------- shard files ----

// Reads one shard file of a checkpoint and checks it against the manifest:
// size, CRC-32C, then its metadata. Errors name the file.
absl::StatusOr<io::SafetensorsReader> OpenShardFile(const std::string& dir,
                                                    const Manifest& m,
                                                    const ShardFile& f) {
  const std::string path = JoinPath(dir, f.file);
  auto bytes = io::ReadFileToString(path);
  if (!bytes.ok()) {
    return Annotate(bytes.status(),
                    absl::StrCat("checkpoint shard ", f.shard, " file"));
  }
  if (static_cast<int64_t>(bytes->size()) != f.bytes) {
    return absl::DataLossError(
        absl::StrCat("checkpoint file ", path, " has ", bytes->size(),
                     " bytes, the manifest says ", f.bytes));
  }
  const uint32_t crc = io::Crc32c(bytes->data(), bytes->size());
  if (crc != f.crc32c) {
    return absl::DataLossError(absl::StrFormat(
        "checkpoint file %s is corrupt: CRC-32C 0x%08x, the manifest says "
        "0x%08x",
        path, crc, f.crc32c));
  }
  ASSIGN_OR_RETURN(io::SafetensorsReader reader,
                   io::SafetensorsReader::FromBuffer(std::move(*bytes), path));
  const auto& meta = reader.metadata();
  auto check = [&](const char* key, int64_t want) -> absl::Status {
    auto it = meta.find(key);
    int64_t got = 0;
    if (it == meta.end() || !absl::SimpleAtoi(it->second, &got) ||
        got != want) {
      return absl::DataLossError(absl::StrCat(
          "checkpoint file ", path, ": metadata ", key, " is '",
          it == meta.end() ? "(missing)" : it->second, "', expected ", want));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(check("version", m.version));
  RETURN_IF_ERROR(check("shard", f.shard));
  RETURN_IF_ERROR(check("num_shards", m.num_shards));
  RETURN_IF_ERROR(check("state_slots", m.state_slots));
  return reader;
}

std::string SliceTensorName(int part, absl::string_view name, int64_t begin) {
  // part 0: parameters; part k >= 1: state slot k - 1.
  if (part == 0) return absl::StrCat("param/", name, "/", begin);
  return absl::StrCat("state", part - 1, "/", name, "/", begin);
}

// A range [begin, end) of a tensor to be filled at dst (elements into each
// part of the staging buffer).
struct Target {
  std::string name;
  int64_t begin = 0;
  int64_t end = 0;
  int64_t dst = 0;
};

// Fills staging (parts, stride) from the checkpoint: part 0 the parameters,
// part k the state slot k - 1 (parts - 1 slots). Reads only the shard files
// that overlap the targets, one at a time.
absl::Status Gather(const std::string& manifest_path, const Manifest& m,
                    const std::vector<PlanTensor>& plan,
                    const std::vector<Target>& targets, int parts,
                    int64_t stride, float* staging) {
  struct Copy {
    const std::string* name;
    int64_t old_begin, old_size;  // the old slice
    int64_t src, dst, n;          // src: elements into the old slice
  };
  std::map<std::string, const PlanTensor*, std::less<>> by_name;
  for (const PlanTensor& t : plan) by_name[t.name] = &t;
  std::map<int, std::vector<Copy>> by_shard;  // old shard -> copies
  int64_t wanted = 0, planned = 0;
  for (const Target& tg : targets) {
    wanted += tg.end - tg.begin;
    auto it = by_name.find(tg.name);
    if (it == by_name.end()) {
      return absl::InternalError(absl::StrCat("no tensor ", tg.name));
    }
    for (const OldSlice& s : it->second->slices) {
      const int64_t lo = std::max(s.begin, tg.begin);
      const int64_t hi = std::min(s.end, tg.end);
      if (lo >= hi) continue;
      by_shard[s.shard].push_back(Copy{&it->second->name, s.begin,
                                       s.end - s.begin, lo - s.begin,
                                       tg.dst + (lo - tg.begin), hi - lo});
      planned += hi - lo;
    }
  }
  if (planned != wanted) {
    return absl::InternalError(absl::StrCat("checkpoint ", manifest_path,
                                            " covers ", planned, " of ", wanted,
                                            " elements"));
  }
  std::map<int, const ShardFile*> files;
  for (const ShardFile& f : m.files) files[f.shard] = &f;
  const std::string dir = DirName(manifest_path);
  for (const auto& [shard, copies] : by_shard) {
    ASSIGN_OR_RETURN(io::SafetensorsReader reader,
                     OpenShardFile(dir, m, *files.at(shard)));
    for (const Copy& c : copies) {
      for (int part = 0; part < parts; ++part) {
        const std::string tname = SliceTensorName(part, *c.name, c.old_begin);
        const io::TensorInfo* info = reader.Find(tname);
        if (info == nullptr || info->dtype != io::DType::kF32 ||
            info->num_elements() != c.old_size) {
          return absl::DataLossError(absl::StrCat(
              "checkpoint file ", JoinPath(dir, files.at(shard)->file),
              ": tensor ", tname,
              info == nullptr ? " is missing"
                              : absl::StrCat(" is not F32 with ", c.old_size,
                                             " elements")));
        }
        ASSIGN_OR_RETURN(absl::string_view raw, reader.RawBytes(tname));
        std::memcpy(staging + part * stride + c.dst,
                    raw.data() + c.src * sizeof(float), c.n * sizeof(float));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

// ----------------------------------------------------------------- API -----

absl::Status SerializeShardCheckpoint(const ShardSnapshot& snap,
                                      std::string* bytes) {
  if (snap.plan == nullptr) {
    return absl::InvalidArgumentError("shard snapshot without a plan");
  }
  const PartitionPlan& plan = *snap.plan;
  if (snap.num_shards != plan.num_shards() || snap.shard < 0 ||
      snap.shard >= snap.num_shards) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shard snapshot: shard ", snap.shard, " of ", snap.num_shards,
        " does not fit the plan of ", plan.num_shards(), " shards"));
  }
  if (snap.version < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard snapshot: version ", snap.version, " < 0"));
  }
  if (snap.state_slots < 0 || snap.state_slots > kMaxStateSlots) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard snapshot: state_slots must be in [0, ",
                     kMaxStateSlots, "], got ", snap.state_slots));
  }
  if (snap.params == nullptr ||
      (snap.state_slots > 0 && snap.state == nullptr)) {
    return absl::InvalidArgumentError("shard snapshot: null buffer");
  }
  const int64_t n = plan.shard_size(snap.shard);
  io::SafetensorsWriter writer;
  for (int part = 0; part <= snap.state_slots; ++part) {
    for (int i : plan.shard_slices(snap.shard)) {
      const SliceSpec& s = plan.slices()[i];
      const float* data =
          part == 0 ? snap.params + s.shard_offset
          : snap.state_per_slice
              ? snap.state + snap.state_slots * s.shard_offset +
                    (part - 1) * s.size()
              : snap.state + (part - 1) * n + s.shard_offset;
      writer.AddF32Ref(SliceTensorName(part, s.name, s.begin), {s.size()},
                       data);
    }
  }
  writer.SetMetadata("format", kShardFormat);
  writer.SetMetadata("version", absl::StrCat(snap.version));
  writer.SetMetadata("shard", absl::StrCat(snap.shard));
  writer.SetMetadata("num_shards", absl::StrCat(snap.num_shards));
  writer.SetMetadata("state_slots", absl::StrCat(snap.state_slots));
  return writer.SerializeTo(bytes);
}

std::string ShardFilePath(const std::string& dir, int shard, int num_shards,
                          int64_t version) {
  return JoinPath(JoinPath(dir, CheckpointDirName(version)),
                  ShardFileName(shard, num_shards));
}

absl::StatusOr<ShardFile> WriteShardFile(const std::string& dir, int shard,
                                         int num_shards, int64_t version,
                                         absl::string_view bytes,
                                         io::FileSystem* fs,
                                         const io::WriteStages& stages) {
  if (fs == nullptr) fs = io::DefaultFileSystem();
  const std::string ckpt_dir = JoinPath(dir, CheckpointDirName(version));
  RETURN_IF_ERROR(fs->MakeDirs(ckpt_dir));
  ShardFile out;
  out.shard = shard;
  out.file = JoinPath(ckpt_dir, ShardFileName(shard, num_shards));
  out.crc32c = io::Crc32c(bytes.data(), bytes.size());
  out.bytes = static_cast<int64_t>(bytes.size());
  RETURN_IF_ERROR(fs->WriteFileAtomically(out.file, bytes, stages));
  return out;
}

absl::StatusOr<ShardFile> WriteShardCheckpoint(const std::string& dir,
                                               const ShardSnapshot& snap,
                                               io::FileSystem* fs) {
  std::string bytes;
  RETURN_IF_ERROR(SerializeShardCheckpoint(snap, &bytes));
  return WriteShardFile(dir, snap.shard, snap.num_shards, snap.version, bytes,
                        fs);
}

absl::StatusOr<std::string> WriteManifest(const std::string& dir,
                                          const Manifest& manifest,
                                          io::FileSystem* fs) {
  if (fs == nullptr) fs = io::DefaultFileSystem();
  Manifest m = manifest;
  const std::string ckpt_dir = JoinPath(dir, CheckpointDirName(m.version));
  const std::string prefix = ckpt_dir + "/";
  for (ShardFile& f : m.files) {
    if (absl::StartsWith(f.file, prefix)) f.file.erase(0, prefix.size());
  }
  {
    absl::Status s = CheckManifest(m);
    if (!s.ok()) return Annotate(s, "manifest");
  }
  for (const ShardFile& f : m.files) {
    const std::string path = JoinPath(ckpt_dir, f.file);
    absl::StatusOr<int64_t> size = fs->FileSize(path);
    if (!size.ok()) {
      return Annotate(size.status(),
                      absl::StrCat("manifest: shard ", f.shard, " file"));
    }
    if (*size != f.bytes) {
      return absl::FailedPreconditionError(
          absl::StrCat("manifest: shard file ", path, " has ", *size,
                       " bytes, the manifest says ", f.bytes));
    }
  }
  const std::string path = JoinPath(ckpt_dir, kManifestName);
  RETURN_IF_ERROR(fs->WriteFileAtomically(path, ManifestToJson(m).dump(2) + "\n"));
  RETURN_IF_ERROR(
      fs->WriteFileAtomically(JoinPath(dir, kLatestName),
                          absl::StrCat(CheckpointDirName(m.version), "\n")));
  return path;
}

absl::StatusOr<Manifest> ReadManifest(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, io::ReadFileToString(path));
  const Json j = Json::parse(text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::DataLossError(
        absl::StrCat("manifest ", path, " is not valid JSON"));
  }
  auto m = ManifestFromJson(j);
  absl::Status s = m.ok() ? CheckManifest(*m) : m.status();
  if (!s.ok()) {
    return absl::DataLossError(
        absl::StrCat("manifest ", path, ": ", s.message()));
  }
  return m;
}

absl::StatusOr<std::string> LatestManifest(const std::string& dir) {
  // A manifest counts only if it reads and validates: a torn or lost write
  // (a disk that acknowledged it) never becomes the newest checkpoint.
  auto exists = [](const std::string& p) {
    std::error_code ec;
    return fs::is_regular_file(p, ec) && ReadManifest(p).ok();
  };
  auto version_of = [](absl::string_view name, int64_t* v) {
    return absl::ConsumePrefix(&name, "ckpt-") && !name.empty() &&
           absl::SimpleAtoi(name, v) && *v >= 0 &&
           name == absl::StrCat(*v);  // canonical digits only
  };
  auto latest = io::ReadFileToString(JoinPath(dir, kLatestName));
  if (latest.ok()) {
    const std::string name(absl::StripAsciiWhitespace(*latest));
    int64_t v = 0;
    if (version_of(name, &v)) {
      const std::string path = JoinPath(JoinPath(dir, name), kManifestName);
      if (exists(path)) return path;
    }
  } else if (!absl::IsNotFound(latest.status())) {
    return latest.status();
  }
  // No usable LATEST: the highest version with a valid manifest.
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) {
    return absl::NotFoundError(
        absl::StrCat("no checkpoint under ", dir, ": ", ec.message()));
  }
  std::vector<std::pair<int64_t, std::string>> found;
  for (const fs::directory_entry& e : it) {
    const std::string name = e.path().filename().string();
    int64_t v = 0;
    if (version_of(name, &v)) found.emplace_back(v, name);
  }
  std::sort(found.rbegin(), found.rend());
  int64_t best = -1;
  std::string best_path;
  for (const auto& [v, name] : found) {
    const std::string path = JoinPath(JoinPath(dir, name), kManifestName);
    if (!exists(path)) continue;
    best = v;
    best_path = path;
    break;
  }
  if (best < 0) {
    return absl::NotFoundError(absl::StrCat("no checkpoint under ", dir,
                                            " (no LATEST, no ckpt-*/",
                                            kManifestName, ")"));
  }
  return best_path;
}

absl::StatusOr<int64_t> RestoreShard(const std::string& manifest_path,
                                     const ParamLayout& layout,
                                     const PartitionPlan& new_plan, int shard,
                                     int state_slots, float* params,
                                     float* state) {
  if (shard < 0 || shard >= new_plan.num_shards()) {
    return absl::InvalidArgumentError(absl::StrCat("restore: shard ", shard,
                                                   " is not in [0, ",
                                                   new_plan.num_shards(), ")"));
  }
  if (state_slots < 0 || state_slots > kMaxStateSlots) {
    return absl::InvalidArgumentError(
        absl::StrCat("restore: state_slots must be in [0, ", kMaxStateSlots,
                     "], got ", state_slots));
  }
  if (params == nullptr || (state_slots > 0 && state == nullptr)) {
    return absl::InvalidArgumentError("restore: null buffer");
  }
  for (int i : new_plan.shard_slices(shard)) {
    const SliceSpec& s = new_plan.slices()[i];
    const ParamSpec* p = layout.Find(s.name);
    if (p == nullptr || s.begin < 0 || s.end > p->size || s.begin >= s.end) {
      return absl::InvalidArgumentError(
          absl::StrCat("restore: the new plan's slice ", s.name, " [", s.begin,
                       ", ", s.end, ") does not fit the model"));
    }
  }
  ASSIGN_OR_RETURN(Manifest m, ReadManifest(manifest_path));
  if (m.state_slots != state_slots) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint ", manifest_path, " has ", m.state_slots,
                     " optimizer state slots (", m.optimizer,
                     "), the shard expects ", state_slots));
  }
  ASSIGN_OR_RETURN(std::vector<PlanTensor> plan,
                   ParsePlanText(m.plan_text, m.num_shards));
  RETURN_IF_ERROR(CheckCheckpointModel(manifest_path, m, plan, layout));

  std::vector<Target> targets;
  for (int i : new_plan.shard_slices(shard)) {
    const SliceSpec& s = new_plan.slices()[i];
    targets.push_back(Target{s.name, s.begin, s.end, s.shard_offset});
  }
  const int64_t n = new_plan.shard_size(shard);
  std::vector<float> staging((1 + state_slots) * n);  // (1 + slots, n)
  RETURN_IF_ERROR(Gather(manifest_path, m, plan, targets, 1 + state_slots, n,
                         staging.data()));
  std::memcpy(params, staging.data(), n * sizeof(float));
  if (state_slots > 0) {
    std::memcpy(state, staging.data() + n, state_slots * n * sizeof(float));
  }
  return m.version;
}

absl::Status ExportCheckpoint(const std::string& manifest_path,
                              const std::string& out_path) {
  ASSIGN_OR_RETURN(Manifest m, ReadManifest(manifest_path));
  ASSIGN_OR_RETURN(BertConfig config, ParseBertConfig(m.config_json));
  ASSIGN_OR_RETURN(BertTask task, ParseTask(m.task));
  const ParamLayout layout = ParamLayout::ForBert(config, task);
  ASSIGN_OR_RETURN(std::vector<PlanTensor> plan,
                   ParsePlanText(m.plan_text, m.num_shards));
  RETURN_IF_ERROR(CheckCheckpointModel(manifest_path, m, plan, layout));
  std::vector<Target> targets;
  for (const ParamSpec& p : layout.tensors()) {
    targets.push_back(Target{p.name, 0, p.size, p.offset});
  }
  std::vector<float> values(layout.total_size());  // (total)
  RETURN_IF_ERROR(Gather(manifest_path, m, plan, targets, /*parts=*/1,
                         layout.total_size(), values.data()));
  return Annotate(SaveBertWeights(out_path, layout, values.data(), &config),
                  "export");
}

absl::StatusOr<int64_t> LoadCheckpointParams(const std::string& manifest_path,
                                             const ParamLayout& layout,
                                             float* params) {
  ASSIGN_OR_RETURN(Manifest m, ReadManifest(manifest_path));
  ASSIGN_OR_RETURN(std::vector<PlanTensor> plan,
                   ParsePlanText(m.plan_text, m.num_shards));
  RETURN_IF_ERROR(CheckCheckpointModel(manifest_path, m, plan, layout));
  std::vector<Target> targets;
  for (const ParamSpec& p : layout.tensors()) {
    targets.push_back(Target{p.name, 0, p.size, p.offset});
  }
  std::vector<float> values(layout.total_size());  // (total)
  RETURN_IF_ERROR(Gather(manifest_path, m, plan, targets, /*parts=*/1,
                         layout.total_size(), values.data()));
  std::copy(values.begin(), values.end(), params);
  return m.version;
}

}  // namespace ps
}  // namespace bertps
