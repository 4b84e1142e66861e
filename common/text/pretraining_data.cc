#include "common/text/pretraining_data.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/io/file_util.h"
#include "common/io/tfrecord.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace bertps::text {
namespace {

// The subset of Python's `random` the reference uses, over mt19937_64 with
// portable derivations (the standard distributions are
// implementation-defined, so none are used).
class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}

  // Uniform in [0, 1): the top 53 bits.
  double Random() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }

  // Uniform in [a, b], a <= b, by rejection (unbiased).
  int64_t RandInt(int64_t a, int64_t b) {
    const uint64_t range = static_cast<uint64_t>(b - a) + 1;
    const uint64_t max = std::numeric_limits<uint64_t>::max();
    const uint64_t limit = max - (max % range + 1) % range;  // last accepted
    uint64_t x;
    do {
      x = gen_();
    } while (x > limit);
    return a + static_cast<int64_t>(x % range);
  }

  // random.shuffle: Fisher-Yates from the back.
  template <typename T>
  void Shuffle(std::vector<T>* v) {
    for (size_t i = v->size(); i > 1; --i) {
      const size_t j = static_cast<size_t>(RandInt(0, i - 1));
      std::swap((*v)[i - 1], (*v)[j]);
    }
  }

 private:
  std::mt19937_64 gen_;
};

struct SpecialIds {
  int32_t cls, sep, mask;
};

// The state create_instances_from_document and create_masked_lm_predictions
// share.
class InstanceMaker {
 public:
  InstanceMaker(const std::vector<TokenizedDocument>& docs,
                const std::vector<size_t>& order, const Vocab& vocab,
                SpecialIds ids, const PretrainingDataOptions& o, Rng* rng,
                PretrainingDataStats* st)
      : docs_(docs),
        order_(order),
        vocab_size_(vocab.size()),
        ids_(ids),
        o_(o),
        rng_(*rng),
        st_(*st) {
    if (o.do_whole_word_mask) {
      is_continuation_.resize(vocab.size());
      for (int32_t i = 0; i < vocab.size(); ++i) {
        is_continuation_[i] = absl::StartsWith(vocab.token(i), "##");
      }
    }
  }

  // create_instances_from_document for the document at shuffled index k.
  void FromDocument(size_t k, std::vector<PretrainingInstance>* out) {
    const TokenizedDocument& doc = docs_[order_[k]];
    const int64_t max_num_tokens = o_.max_seq_length - 3;
    int64_t target = max_num_tokens;
    if (rng_.Random() < o_.short_seq_prob) {
      target = rng_.RandInt(2, max_num_tokens);
    }
    // The chunk is the sentences [chunk_begin, i]; its length in tokens.
    int64_t chunk_begin = 0;
    int64_t chunk_length = 0;
    const int64_t n = static_cast<int64_t>(doc.size());
    for (int64_t i = 0; i < n; ++i) {
      chunk_length += static_cast<int64_t>(doc[i].size());
      if (i != n - 1 && chunk_length < target) continue;
      const int64_t chunk_size = i - chunk_begin + 1;
      int64_t a_end = 1;
      if (chunk_size >= 2) a_end = rng_.RandInt(1, chunk_size - 1);
      a_.clear();
      b_.clear();
      for (int64_t j = 0; j < a_end; ++j) Append(doc[chunk_begin + j], &a_);
      bool is_random_next = false;
      if (chunk_size == 1 || rng_.Random() < 0.5) {
        is_random_next = true;
        if (chunk_size == 1) ++st_.single_sentence_chunks;
        const int64_t target_b = target - static_cast<int64_t>(a_.size());
        const int64_t num_docs = static_cast<int64_t>(docs_.size());
        int64_t r = 0;
        for (int t = 0; t < 10; ++t) {
          r = rng_.RandInt(0, num_docs - 1);
          if (r != static_cast<int64_t>(k)) break;
        }
        const TokenizedDocument& rdoc = docs_[order_[r]];
        const int64_t start =
            rng_.RandInt(0, static_cast<int64_t>(rdoc.size()) - 1);
        for (size_t j = start; j < rdoc.size(); ++j) {
          Append(rdoc[j], &b_);
          if (static_cast<int64_t>(b_.size()) >= target_b) break;
        }
        i -= chunk_size - a_end;  // put the unused sentences back
      } else {
        for (int64_t j = a_end; j < chunk_size; ++j) {
          Append(doc[chunk_begin + j], &b_);
        }
      }
      Truncate(max_num_tokens);
      out->push_back(Finish(is_random_next));
      chunk_begin = i + 1;
      chunk_length = 0;
    }
  }

 private:
  static void Append(const std::vector<int32_t>& s, std::vector<int32_t>* v) {
    v->insert(v->end(), s.begin(), s.end());
  }

  // truncate_seq_pair. a_ and b_ hold at least one token each; a front trim
  // advances an offset instead of erasing.
  void Truncate(int64_t max_num_tokens) {
    a_front_ = b_front_ = 0;
    size_t a_len = a_.size(), b_len = b_.size();
    while (static_cast<int64_t>(a_len + b_len) > max_num_tokens) {
      const bool trim_a = a_len > b_len;
      size_t& front = trim_a ? a_front_ : b_front_;
      size_t& len = trim_a ? a_len : b_len;
      if (rng_.Random() < 0.5) ++front;
      --len;
    }
    a_len_ = a_len;
    b_len_ = b_len;
  }

  PretrainingInstance Finish(bool is_random_next) {
    PretrainingInstance inst;
    inst.is_random_next = is_random_next;
    inst.segment_a_length = static_cast<int32_t>(a_len_);
    std::vector<int32_t>& t = inst.tokens;
    t.reserve(a_len_ + b_len_ + 3);
    t.push_back(ids_.cls);
    t.insert(t.end(), a_.begin() + a_front_, a_.begin() + a_front_ + a_len_);
    t.push_back(ids_.sep);
    t.insert(t.end(), b_.begin() + b_front_, b_.begin() + b_front_ + b_len_);
    t.push_back(ids_.sep);
    Mask(&inst);
    ++st_.instances;
    st_.tokens += static_cast<int64_t>(t.size());
    ++(is_random_next ? st_.random_next : st_.is_next);
    return inst;
  }

  // create_masked_lm_predictions.
  void Mask(PretrainingInstance* inst) {
    std::vector<int32_t>& t = inst->tokens;
    const int32_t len = static_cast<int32_t>(t.size());
    // Candidate groups: group g is cand_[group_begin_[g] .. group_begin_[g+1]).
    cand_.clear();
    group_begin_.clear();
    for (int32_t i = 0; i < len; ++i) {
      if (t[i] == ids_.cls || t[i] == ids_.sep) continue;
      if (!(o_.do_whole_word_mask && !group_begin_.empty() &&
            is_continuation_[t[i]])) {
        group_begin_.push_back(static_cast<int32_t>(cand_.size()));
      }
      cand_.push_back(i);
    }
    const int32_t num_groups = static_cast<int32_t>(group_begin_.size());
    group_begin_.push_back(static_cast<int32_t>(cand_.size()));
    group_order_.resize(num_groups);
    std::iota(group_order_.begin(), group_order_.end(), 0);
    rng_.Shuffle(&group_order_);

    const int64_t uncapped = std::max<int64_t>(
        1, static_cast<int64_t>(std::nearbyint(len * o_.masked_lm_prob)));
    const int64_t num_to_predict =
        std::min<int64_t>(o_.max_predictions_per_seq, uncapped);
    st_.num_to_predict += num_to_predict;
    if (uncapped > o_.max_predictions_per_seq) ++st_.capped;

    // Groups never overlap here, so the reference's covered-index check
    // never fires.
    std::vector<std::pair<int32_t, int32_t>> masked;  // (position, label)
    for (int32_t g : group_order_) {
      if (static_cast<int64_t>(masked.size()) >= num_to_predict) break;
      const int32_t size = group_begin_[g + 1] - group_begin_[g];
      if (static_cast<int64_t>(masked.size()) + size > num_to_predict) continue;
      for (int32_t c = group_begin_[g]; c < group_begin_[g + 1]; ++c) {
        const int32_t pos = cand_[c];
        masked.emplace_back(pos, t[pos]);
        if (rng_.Random() < 0.8) {
          t[pos] = ids_.mask;
          ++st_.masked_as_mask;
        } else if (rng_.Random() < 0.5) {
          ++st_.masked_kept;
        } else {
          t[pos] = static_cast<int32_t>(rng_.RandInt(0, vocab_size_ - 1));
          ++st_.masked_random;
        }
      }
    }
    std::sort(masked.begin(), masked.end());
    st_.masked += static_cast<int64_t>(masked.size());
    inst->masked_positions.reserve(masked.size());
    inst->masked_labels.reserve(masked.size());
    for (const auto& [pos, label] : masked) {
      inst->masked_positions.push_back(pos);
      inst->masked_labels.push_back(label);
    }
  }

  const std::vector<TokenizedDocument>& docs_;
  const std::vector<size_t>& order_;  // shuffled index -> document
  const int32_t vocab_size_;
  const SpecialIds ids_;
  const PretrainingDataOptions& o_;
  Rng& rng_;
  PretrainingDataStats& st_;
  std::vector<bool> is_continuation_;  // (vocab) whole-word mask only

  // Scratch reused across instances.
  std::vector<int32_t> a_, b_;
  size_t a_front_ = 0, b_front_ = 0, a_len_ = 0, b_len_ = 0;
  std::vector<int32_t> cand_;         // candidate positions, grouped
  std::vector<int32_t> group_begin_;  // (groups + 1) offsets into cand_
  std::vector<int32_t> group_order_;  // shuffled group ids
};

absl::StatusOr<int32_t> SpecialId(const Vocab& vocab, absl::string_view t) {
  const int32_t id = vocab.Find(t);
  if (id == Vocab::kNotFound) {
    return absl::InvalidArgumentError(
        absl::StrCat("pretraining data: the vocabulary lacks ", t));
  }
  return id;
}

}  // namespace

absl::Status PretrainingDataOptions::Validate() const {
  auto bad = [](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("pretraining data options: ", what));
  };
  if (max_seq_length < 5) return bad("max_seq_length must be >= 5");
  if (max_predictions_per_seq < 1) {
    return bad("max_predictions_per_seq must be >= 1");
  }
  if (dupe_factor < 1) return bad("dupe_factor must be >= 1");
  if (!(masked_lm_prob >= 0 && masked_lm_prob <= 1)) {
    return bad("masked_lm_prob must be in [0, 1]");
  }
  if (!(short_seq_prob >= 0 && short_seq_prob <= 1)) {
    return bad("short_seq_prob must be in [0, 1]");
  }
  return absl::OkStatus();
}

std::string PretrainingDataStats::ToJson() const {
  nlohmann::ordered_json j;
  j["input_files"] = input_files;
  j["input_bytes"] = input_bytes;
  j["documents"] = documents;
  j["sentences"] = sentences;
  j["input_tokens"] = input_tokens;
  j["instances"] = instances;
  j["tokens"] = tokens;
  j["num_to_predict"] = num_to_predict;
  j["capped"] = capped;
  j["masked"] = masked;
  j["masked_as_mask"] = masked_as_mask;
  j["masked_kept"] = masked_kept;
  j["masked_random"] = masked_random;
  j["random_next"] = random_next;
  j["is_next"] = is_next;
  j["single_sentence_chunks"] = single_sentence_chunks;
  j["output_files"] = output_files;
  j["output_bytes"] = output_bytes;
  return j.dump();
}

void AppendDocuments(const FullTokenizer& tokenizer, absl::string_view text,
                     std::vector<TokenizedDocument>* documents,
                     PretrainingDataStats* stats) {
  PretrainingDataStats local;
  PretrainingDataStats& st = stats != nullptr ? *stats : local;
  st.input_bytes += static_cast<int64_t>(text.size());
  TokenizedDocument doc;
  auto finish = [&] {
    if (doc.empty()) return;
    ++st.documents;
    documents->push_back(std::move(doc));
    doc.clear();
  };
  std::vector<int32_t> ids;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    if (nl == absl::string_view::npos) nl = text.size();
    const absl::string_view line =
        absl::StripAsciiWhitespace(text.substr(0, nl));
    text.remove_prefix(std::min(text.size(), nl + 1));
    if (line.empty()) {
      finish();
      continue;
    }
    ids.clear();
    tokenizer.EncodeAppend(line, &ids);
    if (ids.empty()) continue;
    ++st.sentences;
    st.input_tokens += static_cast<int64_t>(ids.size());
    doc.push_back(ids);
  }
  finish();
}

absl::StatusOr<std::vector<PretrainingInstance>> CreateInstances(
    const std::vector<TokenizedDocument>& documents, const Vocab& vocab,
    const PretrainingDataOptions& options, PretrainingDataStats* stats) {
  RETURN_IF_ERROR(options.Validate());
  SpecialIds ids;
  ASSIGN_OR_RETURN(ids.cls, SpecialId(vocab, "[CLS]"));
  ASSIGN_OR_RETURN(ids.sep, SpecialId(vocab, "[SEP]"));
  ASSIGN_OR_RETURN(ids.mask, SpecialId(vocab, "[MASK]"));
  if (documents.empty()) {
    return absl::InvalidArgumentError(
        "pretraining data: no documents (no input line gave a token)");
  }
  for (const TokenizedDocument& d : documents) {
    if (d.empty()) {
      return absl::InvalidArgumentError("pretraining data: empty document");
    }
  }
  PretrainingDataStats local;
  PretrainingDataStats& st = stats != nullptr ? *stats : local;
  Rng rng(options.random_seed);
  std::vector<size_t> order(documents.size());
  std::iota(order.begin(), order.end(), size_t{0});
  rng.Shuffle(&order);

  std::vector<PretrainingInstance> instances;
  InstanceMaker maker(documents, order, vocab, ids, options, &rng, &st);
  for (int d = 0; d < options.dupe_factor; ++d) {
    for (size_t k = 0; k < order.size(); ++k) maker.FromDocument(k, &instances);
  }
  rng.Shuffle(&instances);
  return instances;
}

io::PretrainExample ToPretrainExample(const PretrainingInstance& instance,
                                      const PretrainingDataOptions& options) {
  const size_t s = static_cast<size_t>(options.max_seq_length);
  const size_t p = static_cast<size_t>(options.max_predictions_per_seq);
  const size_t len = instance.tokens.size();
  const size_t seg0 = static_cast<size_t>(instance.segment_a_length) + 2;
  io::PretrainExample ex;
  ex.input_ids.assign(s, 0);
  ex.input_mask.assign(s, 0);
  ex.segment_ids.assign(s, 0);
  std::copy(instance.tokens.begin(), instance.tokens.end(),
            ex.input_ids.begin());
  std::fill_n(ex.input_mask.begin(), len, 1);
  std::fill(ex.segment_ids.begin() + seg0, ex.segment_ids.begin() + len, 1);
  ex.masked_lm_positions.assign(p, 0);
  ex.masked_lm_ids.assign(p, 0);
  ex.masked_lm_weights.assign(p, 0.0f);
  const size_t m = instance.masked_positions.size();
  std::copy_n(instance.masked_positions.begin(), m,
              ex.masked_lm_positions.begin());
  std::copy_n(instance.masked_labels.begin(), m, ex.masked_lm_ids.begin());
  std::fill_n(ex.masked_lm_weights.begin(), m, 1.0f);
  ex.next_sentence_label = instance.is_random_next ? 1 : 0;
  return ex;
}

std::string PretrainingOutputPath(const std::string& prefix, int i, int n) {
  return absl::StrFormat("%s-%05d-of-%05d.tfrecord", prefix, i, n);
}

absl::Status CreatePretrainingData(const FullTokenizer& tokenizer,
                                   const std::vector<std::string>& input_files,
                                   const PretrainingDataOptions& options,
                                   const std::string& output_prefix,
                                   int num_output_files,
                                   PretrainingDataStats* stats) {
  RETURN_IF_ERROR(options.Validate());
  if (num_output_files < 1) {
    return absl::InvalidArgumentError(
        "pretraining data: num_output_files must be >= 1");
  }
  if (input_files.empty()) {
    return absl::InvalidArgumentError("pretraining data: no input files");
  }
  PretrainingDataStats st;
  std::vector<TokenizedDocument> documents;
  for (const std::string& f : input_files) {
    ASSIGN_OR_RETURN(std::string text, io::ReadFileToString(f));
    AppendDocuments(tokenizer, text, &documents, &st);
    ++st.input_files;
  }
  ASSIGN_OR_RETURN(std::vector<PretrainingInstance> instances,
                   CreateInstances(documents, tokenizer.vocab(), options, &st));
  documents = {};

  const size_t slash = output_prefix.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    RETURN_IF_ERROR(io::MakeDirs(output_prefix.substr(0, slash)));
  }
  std::vector<std::unique_ptr<io::TFRecordWriter>> writers;
  for (int i = 0; i < num_output_files; ++i) {
    ASSIGN_OR_RETURN(auto w, io::TFRecordWriter::Open(PretrainingOutputPath(
                                 output_prefix, i, num_output_files)));
    writers.push_back(std::move(w));
  }
  for (size_t k = 0; k < instances.size(); ++k) {
    const std::string record =
        io::EncodePretrainExample(ToPretrainExample(instances[k], options));
    RETURN_IF_ERROR(writers[k % writers.size()]->Write(record));
  }
  for (auto& w : writers) {
    RETURN_IF_ERROR(w->Close());
    st.output_bytes += w->num_bytes();
  }
  st.output_files = num_output_files;
  if (stats != nullptr) *stats = st;
  return absl::OkStatus();
}

}  // namespace bertps::text
