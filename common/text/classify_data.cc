#include "common/text/classify_data.h"

#include <algorithm>
#include <memory>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/io/file_util.h"
#include "common/io/tfrecord.h"
#include "common/status.h"
#include "nlohmann/json.hpp"
#include "common/splitmix.h"

namespace bertps::text {
namespace {

// FNV-1a 64 over seed (8 bytes, little-endian) then the id, mixed.
uint64_t IdHash(uint64_t seed, absl::string_view id) {
  uint64_t h = 0xCBF29CE484222325ull;
  auto add = [&h](uint8_t b) {
    h ^= b;
    h *= 0x100000001B3ull;
  };
  for (int i = 0; i < 8; ++i) add(static_cast<uint8_t>(seed >> (8 * i)));
  for (char c : id) add(static_cast<uint8_t>(c));
  return SplitMix64(h);
}

absl::StatusOr<int32_t> SpecialId(const Vocab& vocab, absl::string_view t) {
  const int32_t id = vocab.Find(t);
  if (id == Vocab::kNotFound) {
    return absl::InvalidArgumentError(
        absl::StrCat("classify data: the vocab has no ", t, " token"));
  }
  return id;
}

absl::StatusOr<int32_t> LabelId(absl::string_view label,
                                const ClassifyDataOptions& o) {
  for (size_t i = 0; i < o.labels.size(); ++i) {
    if (o.labels[i] == label) return static_cast<int32_t>(i);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("classify data: unknown label '", label,
                   "' (labels: ", absl::StrJoin(o.labels, ","), ")"));
}

// The example and the number of text tokens before truncation.
absl::StatusOr<io::ClassifyExample> MakeExample(absl::string_view text,
                                                absl::string_view label,
                                                const FullTokenizer& tokenizer,
                                                const ClassifyDataOptions& o,
                                                std::vector<int32_t>* scratch,
                                                int64_t* num_tokens) {
  ASSIGN_OR_RETURN(const int32_t label_id, LabelId(label, o));
  ASSIGN_OR_RETURN(const int32_t cls, SpecialId(tokenizer.vocab(), "[CLS]"));
  ASSIGN_OR_RETURN(const int32_t sep, SpecialId(tokenizer.vocab(), "[SEP]"));
  const size_t s = static_cast<size_t>(o.max_seq_length);
  scratch->clear();
  tokenizer.EncodeAppend(text, scratch);
  *num_tokens = static_cast<int64_t>(scratch->size());
  if (scratch->size() > s - 2) scratch->resize(s - 2);
  io::ClassifyExample e;
  e.input_ids.assign(s, 0);
  e.input_mask.assign(s, 0);
  e.segment_ids.assign(s, 0);
  e.input_ids[0] = cls;
  std::copy(scratch->begin(), scratch->end(), e.input_ids.begin() + 1);
  e.input_ids[scratch->size() + 1] = sep;
  std::fill(e.input_mask.begin(), e.input_mask.begin() + scratch->size() + 2,
            1);
  e.label_id = label_id;
  return e;
}

}  // namespace

absl::Status ClassifyDataOptions::Validate() const {
  if (max_seq_length < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("classify data: max_seq_length ", max_seq_length,
                     " leaves no room for [CLS] and [SEP]"));
  }
  if (labels.empty()) {
    return absl::InvalidArgumentError("classify data: no labels given");
  }
  std::set<absl::string_view> seen;
  for (const std::string& l : labels) {
    if (l.empty()) {
      return absl::InvalidArgumentError("classify data: an empty label");
    }
    if (!seen.insert(l).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("classify data: label '", l, "' given twice"));
    }
  }
  auto bad = [](double f) { return !(f >= 0.0 && f <= 1.0); };
  if (bad(dev_fraction) || bad(test_fraction) ||
      dev_fraction + test_fraction > 1.0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "classify data: dev_fraction ", dev_fraction, " and test_fraction ",
        test_fraction, " must be in [0, 1] with a sum <= 1"));
  }
  return absl::OkStatus();
}

const char* SplitName(Split split) {
  switch (split) {
    case Split::kTrain:
      return "train";
    case Split::kDev:
      return "dev";
    case Split::kTest:
      return "test";
  }
  return "?";
}

Split SplitOf(absl::string_view doc_id, const ClassifyDataOptions& options) {
  const double u = static_cast<double>(IdHash(options.seed, doc_id) >> 11) *
                   (1.0 / 9007199254740992.0);  // 2^-53
  if (u < options.test_fraction) return Split::kTest;
  if (u < options.test_fraction + options.dev_fraction) return Split::kDev;
  return Split::kTrain;
}

absl::StatusOr<io::ClassifyExample> MakeClassifyExample(
    absl::string_view text, absl::string_view label,
    const FullTokenizer& tokenizer, const ClassifyDataOptions& options) {
  RETURN_IF_ERROR(options.Validate());
  std::vector<int32_t> scratch;
  int64_t n = 0;
  return MakeExample(text, label, tokenizer, options, &scratch, &n);
}

absl::StatusOr<std::vector<LabelledText>> ParseLabelledJsonl(
    absl::string_view data, const std::string& name) {
  std::vector<LabelledText> out;
  int64_t line_no = 0;
  size_t pos = 0;
  while (pos < data.size()) {
    size_t nl = data.find('\n', pos);
    if (nl == absl::string_view::npos) nl = data.size();
    const absl::string_view line = data.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == absl::string_view::npos) continue;
    auto where = [&] { return absl::StrCat(name, ":", line_no); };
    nlohmann::json j = nlohmann::json::parse(line.begin(), line.end(), nullptr,
                                             /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), ": not a JSON object"));
    }
    LabelledText t;
    for (auto [key, field] : {std::pair<const char*, std::string*>{"id", &t.id},
                              {"label", &t.label},
                              {"text", &t.text}}) {
      auto it = j.find(key);
      if (it == j.end() || !it->is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(
            where(), ": field \"", key, "\" missing or not a string"));
      }
      *field = it->get<std::string>();
    }
    out.push_back(std::move(t));
  }
  return out;
}

absl::StatusOr<std::vector<LabelledText>> ReadLabelledJsonl(
    const std::string& path) {
  ASSIGN_OR_RETURN(const std::string data, io::ReadFileToString(path));
  return ParseLabelledJsonl(data, path);
}

std::string ClassifyDataStats::ToJson(
    const ClassifyDataOptions& options) const {
  nlohmann::json j;
  j["documents"] = documents;
  for (Split s : {Split::kTrain, Split::kDev, Split::kTest}) {
    j[SplitName(s)] = examples[static_cast<int>(s)];
  }
  j["truncated"] = truncated;
  j["tokens"] = tokens;
  j["output_bytes"] = output_bytes;
  nlohmann::json labels = nlohmann::json::object();
  for (size_t i = 0; i < label_counts.size() && i < options.labels.size();
       ++i) {
    labels[options.labels[i]] = label_counts[i];  // [train, dev, test]
  }
  j["label_counts_train_dev_test"] = labels;
  return j.dump();
}

std::string ClassifySplitPath(const std::string& output_dir, Split split) {
  return absl::StrCat(output_dir, "/", SplitName(split), ".tfrecord");
}

absl::Status WriteClassifyData(const std::vector<LabelledText>& documents,
                               const FullTokenizer& tokenizer,
                               const ClassifyDataOptions& options,
                               const std::string& output_dir,
                               ClassifyDataStats* stats) {
  RETURN_IF_ERROR(options.Validate());
  ClassifyDataStats st;
  st.documents = static_cast<int64_t>(documents.size());
  st.label_counts.assign(options.labels.size(), std::vector<int64_t>(3, 0));

  // (order key, document index) per split; the key ties are broken by the
  // document's contents so that the order never depends on the input's.
  std::vector<std::pair<uint64_t, size_t>> order[3];
  for (size_t i = 0; i < documents.size(); ++i) {
    const LabelledText& d = documents[i];
    const int s = static_cast<int>(SplitOf(d.id, options));
    order[s].emplace_back(SplitMix64(IdHash(options.seed, d.id) ^ 1), i);
  }
  RETURN_IF_ERROR(io::MakeDirs(output_dir));
  std::vector<int32_t> scratch;
  for (Split split : {Split::kTrain, Split::kDev, Split::kTest}) {
    auto& o = order[static_cast<int>(split)];
    std::sort(o.begin(), o.end(), [&](const auto& a, const auto& b) {
      const LabelledText& x = documents[a.second];
      const LabelledText& y = documents[b.second];
      return std::tie(a.first, x.id, x.label, x.text) <
             std::tie(b.first, y.id, y.label, y.text);
    });
    const std::string path = ClassifySplitPath(output_dir, split);
    ASSIGN_OR_RETURN(auto writer, io::TFRecordWriter::Open(path));
    for (const auto& [key, i] : o) {
      const LabelledText& d = documents[i];
      int64_t n = 0;
      auto e = MakeExample(d.text, d.label, tokenizer, options, &scratch, &n);
      if (!e.ok())
        return Annotate(e.status(), absl::StrCat("document '", d.id, "'"));
      RETURN_IF_ERROR(writer->Write(io::EncodeClassifyExample(*e)));
      st.tokens += n;
      st.truncated += n > options.max_seq_length - 2 ? 1 : 0;
      ++st.examples[static_cast<int>(split)];
      ++st.label_counts[e->label_id][static_cast<int>(split)];
    }
    RETURN_IF_ERROR(writer->Close());
    st.output_bytes += writer->num_bytes();
  }
  RETURN_IF_ERROR(io::WriteFileAtomically(
      output_dir + "/labels.txt",
      absl::StrCat(absl::StrJoin(options.labels, "\n"), "\n")));
  if (stats != nullptr) *stats = std::move(st);
  return absl::OkStatus();
}

}  // namespace bertps::text
