#include "worker/preprocess_item.h"

#include <unistd.h>

#include <functional>
#include <thread>
#include <vector>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/io/file_util.h"
#include "common/io/tfrecord.h"
#include "common/status.h"
#include "common/text/augment.h"
#include "common/text/classify_data.h"
#include "common/text/clean.h"
#include "common/text/documents.h"
#include "common/text/pretraining_data.h"
#include "nlohmann/json.hpp"

namespace bertps {
namespace {

// A stable 64-bit hash of bytes (FNV-1a; absl::Hash is not stable across
// processes, which the outputs must be).
uint64_t StableHash(absl::string_view s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

uint64_t Mix(uint64_t a, uint64_t b) {
  uint64_t z = a ^ (b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

text::CleanOptions CleanOptionsOf(const CleanSpec& c, uint64_t seed) {
  text::CleanOptions o;
  o.normalization = c.normalization().empty() ? "NFC" : c.normalization();
  o.strip_control = !c.keep_control();
  o.strip_email = c.strip_email();
  o.strip_html = c.strip_html();
  o.strip_dict_markup = c.strip_dict_markup();
  o.normalize_whitespace = !c.keep_whitespace();
  o.dedup_exact = c.dedup_exact();
  o.dedup_near = c.dedup_near();
  if (c.near_threshold() > 0) o.near_threshold = c.near_threshold();
  o.min_chars = c.min_chars();
  o.max_chars = c.max_chars();
  o.min_words = c.min_words();
  o.remove_stopwords = c.remove_stopwords();
  o.seed = seed;
  return o;
}

// Sentences of a document: its lines for "text" input (one sentence per
// line already), else ICU's sentence boundaries.
std::vector<std::string> SentencesOf(const text::Document& d,
                                     const std::string& format) {
  if (format == "text") {
    std::vector<std::string> out;
    for (absl::string_view line : absl::StrSplit(d.text, '\n')) {
      if (!absl::StripAsciiWhitespace(line).empty()) out.emplace_back(line);
    }
    return out;
  }
  return text::SplitSentences(d.text);
}

// Writes records to dir/name through a temporary file renamed at the end.
absl::Status WriteRecords(const std::string& dir, const std::string& name,
                          const std::vector<std::string>& records,
                          int64_t* bytes) {
  const std::string path = absl::StrCat(dir, "/", name);
  const std::string tmp = absl::StrCat(
      dir, "/.", name, ".tmp-", getpid(), "-",
      std::hash<std::thread::id>()(std::this_thread::get_id()));
  ASSIGN_OR_RETURN(auto w, io::TFRecordWriter::Open(
                               tmp, io::CompressionForPath(name)));
  for (const std::string& r : records) RETURN_IF_ERROR(w->Write(r));
  *bytes += w->num_bytes();
  RETURN_IF_ERROR(w->Close());
  return io::CommitTempFile(tmp, path);
}

}  // namespace

std::string PretrainOutputName(int index, bool gzip) {
  return absl::StrFormat("pretrain-%05d.tfrecord%s", index, gzip ? ".gz" : "");
}

std::string ClassifyOutputName(const std::string& split, int index,
                               bool gzip) {
  return absl::StrFormat("%s-%05d.tfrecord%s", split, index,
                         gzip ? ".gz" : "");
}

PreprocessItemRunner::PreprocessItemRunner() = default;
PreprocessItemRunner::~PreprocessItemRunner() = default;

absl::StatusOr<WorkResult> PreprocessItemRunner::Run(
    const JobSpec& spec, const WorkItem& item,
    const std::atomic<bool>& cancel) {
  const PreprocessSpec& p = spec.preprocess();
  const bool gzip = p.compression() == "gzip";
  if (item.parts() < 1 || item.part() < 0 || item.part() >= item.parts()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "preprocess item ", item.index(), ": part ", item.part(), " of ",
        item.parts()));
  }
  if (spec.output_dir().empty()) {
    return absl::InvalidArgumentError("preprocess: output_dir is empty");
  }
  const bool lower = !p.cased();
  if (!tokenizer_ || vocab_path_ != p.vocab() || lower_ != lower) {
    ASSIGN_OR_RETURN(tokenizer_, text::FullTokenizer::Create(p.vocab(), lower));
    vocab_path_ = p.vocab();
    lower_ = lower;
  }
  const AugmentSpec& aug = p.augment();
  if (aug.num_aug() > 0 &&
      (!wordnet_ || wordnet_dir_ != aug.wordnet_dir())) {
    ASSIGN_OR_RETURN(text::WordNet wn, text::WordNet::Load(aug.wordnet_dir()));
    wordnet_ = std::make_unique<text::WordNet>(std::move(wn));
    wordnet_dir_ = aug.wordnet_dir();
  }
  const std::string format = p.input_format().empty() ? "text" : p.input_format();

  // Read and select the item's documents.
  ASSIGN_OR_RETURN(std::vector<text::Document> all,
                   text::ReadDocuments(item.input(), format));
  std::vector<text::Document> docs;
  for (size_t k = 0; k < all.size(); ++k) {
    if (static_cast<int>(k % item.parts()) == item.part()) {
      docs.push_back(std::move(all[k]));
    }
  }
  all.clear();
  if (cancel.load()) return absl::CancelledError("preprocess item cancelled");

  const uint64_t item_seed =
      Mix(spec.seed(), StableHash(absl::StrCat(item.input(), "#", item.part(),
                                               "/", item.parts())));
  text::CleanReport clean;
  const int64_t documents_read = static_cast<int64_t>(docs.size());
  if (!p.clean().disable()) {
    ASSIGN_OR_RETURN(docs, text::CleanDocuments(
                               std::move(docs),
                               CleanOptionsOf(p.clean(), item_seed), &clean));
  }
  if (cancel.load()) return absl::CancelledError("preprocess item cancelled");

  text::EdaOptions eda;
  eda.num_aug = aug.num_aug();
  eda.alpha_sr = aug.alpha_sr();
  eda.alpha_ri = aug.alpha_ri();
  eda.alpha_rs = aug.alpha_rs();
  eda.p_rd = aug.p_rd();
  eda.seed = spec.seed();
  // The num_aug augmented copies of a document, sentence by sentence; each
  // sentence keyed by (document id, sentence number).
  auto augment = [&](const std::vector<std::string>& sentences,
                     const std::string& id) {
    std::vector<std::vector<std::string>> copies(eda.num_aug);
    for (size_t s = 0; s < sentences.size(); ++s) {
      std::vector<std::string> a =
          text::Eda(sentences[s], *wordnet_, eda, Mix(StableHash(id), s));
      for (int c = 0; c < eda.num_aug && c < static_cast<int>(a.size()); ++c) {
        if (!a[c].empty()) copies[c].push_back(std::move(a[c]));
      }
    }
    return copies;
  };

  WorkResult res;
  res.set_index(item.index());
  nlohmann::ordered_json report;
  report["documents_read"] = documents_read;
  report["clean"] = nlohmann::ordered_json::parse(clean.ToJson());
  int64_t records = 0, bytes = 0;
  RETURN_IF_ERROR(io::MakeDirs(spec.output_dir()));

  if (p.output() == "classify") {
    text::ClassifyDataOptions co;
    co.max_seq_length = p.max_seq_length();
    co.labels.assign(p.labels().begin(), p.labels().end());
    co.dev_fraction = p.dev_fraction();
    co.test_fraction = p.test_fraction();
    co.seed = spec.seed();
    RETURN_IF_ERROR(co.Validate());
    std::vector<std::string> split_records[3];
    int64_t augmented = 0, truncated_docs = 0;
    for (const text::Document& d : docs) {
      if (cancel.load()) return absl::CancelledError("preprocess item cancelled");
      const text::Split split = text::SplitOf(d.id, co);
      absl::StatusOr<io::ClassifyExample> e =
          text::MakeClassifyExample(d.text, d.label, *tokenizer_, co);
      if (!e.ok()) return Annotate(e.status(), absl::StrCat("document ", d.id));
      auto& out = split_records[static_cast<int>(split)];
      out.push_back(io::EncodeClassifyExample(*e));
      // Augmented copies go to training only (never dev or test).
      if (eda.num_aug > 0 && split == text::Split::kTrain) {
        const std::vector<std::string> sentences = SentencesOf(d, format);
        for (const auto& copy : augment(sentences, d.id)) {
          if (copy.empty()) continue;
          ASSIGN_OR_RETURN(io::ClassifyExample a,
                           text::MakeClassifyExample(absl::StrJoin(copy, " "),
                                                     d.label, *tokenizer_, co));
          out.push_back(io::EncodeClassifyExample(a));
          ++augmented;
        }
      }
      (void)truncated_docs;
    }
    // Training records shuffled (Fisher-Yates, keyed by the item's seed).
    auto& train = split_records[0];
    uint64_t state = item_seed;
    for (size_t i = train.size(); i > 1; --i) {
      state = Mix(state, i);
      std::swap(train[i - 1], train[state % i]);
    }
    nlohmann::ordered_json splits;
    for (text::Split split :
         {text::Split::kTrain, text::Split::kDev, text::Split::kTest}) {
      const auto& recs = split_records[static_cast<int>(split)];
      const std::string name = text::SplitName(split);
      RETURN_IF_ERROR(WriteRecords(spec.output_dir(),
                                   ClassifyOutputName(name, item.index(),
                                                      gzip),
                                   recs, &bytes));
      splits[name] = static_cast<int64_t>(recs.size());
      records += static_cast<int64_t>(recs.size());
    }
    report["augmented_examples"] = augmented;
    report["splits"] = splits;
    report["records"] = records;
    report["output_bytes"] = bytes;
    const std::string report_json = report.dump();
    RETURN_IF_ERROR(io::WriteFileAtomically(
        absl::StrFormat("%s/report-%05d.json", spec.output_dir(), item.index()),
        report_json + "\n"));
    res.set_records(records);
    res.set_report_json(report_json);
    return res;
  }

  // Pretraining instances.
  std::string text;
  int64_t augmented_docs = 0;
  for (const text::Document& d : docs) {
    std::vector<std::string> sentences = SentencesOf(d, format);
    if (sentences.empty()) continue;
    absl::StrAppend(&text, absl::StrJoin(sentences, "\n"), "\n\n");
    if (eda.num_aug > 0) {
      for (const auto& copy : augment(sentences, d.id)) {
        if (copy.empty()) continue;
        absl::StrAppend(&text, absl::StrJoin(copy, "\n"), "\n\n");
        ++augmented_docs;
      }
    }
  }
  if (cancel.load()) return absl::CancelledError("preprocess item cancelled");
  text::PretrainingDataOptions o;
  o.max_seq_length = p.max_seq_length();
  o.max_predictions_per_seq = p.max_predictions_per_seq();
  o.masked_lm_prob = p.masked_lm_prob();
  o.dupe_factor = p.dupe_factor();
  o.short_seq_prob = p.short_seq_prob();
  o.do_whole_word_mask = p.whole_word_mask();
  o.random_seed = item_seed;
  RETURN_IF_ERROR(o.Validate());
  text::PretrainingDataStats stats;
  std::vector<text::TokenizedDocument> documents;
  text::AppendDocuments(*tokenizer_, text, &documents, &stats);
  std::vector<std::string> out;
  if (!documents.empty()) {
    ASSIGN_OR_RETURN(std::vector<text::PretrainingInstance> instances,
                     text::CreateInstances(documents, tokenizer_->vocab(), o,
                                           &stats));
    out.reserve(instances.size());
    for (const auto& inst : instances) {
      out.push_back(io::EncodePretrainExample(text::ToPretrainExample(inst, o)));
    }
  }
  if (cancel.load()) return absl::CancelledError("preprocess item cancelled");
  RETURN_IF_ERROR(WriteRecords(spec.output_dir(),
                               PretrainOutputName(item.index(), gzip), out,
                               &bytes));
  records = static_cast<int64_t>(out.size());
  report["augmented_documents"] = augmented_docs;
  report["instances"] = nlohmann::ordered_json::parse(stats.ToJson());
  report["records"] = records;
  report["output_bytes"] = bytes;
  const std::string report_json = report.dump();
  RETURN_IF_ERROR(io::WriteFileAtomically(
      absl::StrFormat("%s/report-%05d.json", spec.output_dir(), item.index()),
      report_json + "\n"));
  res.set_records(records);
  res.set_report_json(report_json);
  return res;
}

}  // namespace bertps
