#include "common/model/params.h"

#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace bertps {

absl::string_view BertTaskName(BertTask task) {
  return task == BertTask::kPretrain ? "pretrain" : "classify";
}

absl::StatusOr<BertTask> ParseBertTask(absl::string_view name) {
  if (name == "pretrain") return BertTask::kPretrain;
  if (name == "classify") return BertTask::kClassify;
  return absl::InvalidArgumentError(
      absl::StrCat("task must be pretrain or classify, got '", name, "'"));
}

void ParamLayout::Add(std::string name, std::vector<int64_t> shape) {
  ParamSpec spec;
  spec.name = std::move(name);
  spec.shape = std::move(shape);
  spec.size = 1;
  for (int64_t d : spec.shape) spec.size *= d;
  spec.offset = total_;
  spec.decay = !(absl::StrContains(spec.name, "LayerNorm") ||
                 absl::StrContains(spec.name, "layer_norm") ||
                 absl::EndsWith(spec.name, "bias"));
  // Every 2-D ".weight" but the embedding tables is a dense layer's
  // (ForBert below; the model's layers read them through Linear* only).
  spec.product_only = spec.shape.size() == 2 &&
                      absl::EndsWith(spec.name, ".weight") &&
                      !absl::StrContains(spec.name, "embeddings");
  total_ += spec.size;
  index_[spec.name] = tensors_.size();
  tensors_.push_back(std::move(spec));
}

const ParamSpec* ParamLayout::Find(absl::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

int64_t ParamLayout::Offset(absl::string_view name) const {
  const ParamSpec* p = Find(name);
  CHECK(p != nullptr) << "no parameter " << name;
  return p->offset;
}

int ParamLayout::Index(absl::string_view name) const {
  auto it = index_.find(name);
  CHECK(it != index_.end()) << "no parameter " << name;
  return static_cast<int>(it->second);
}

ParamLayout ParamLayout::ForBert(const BertConfig& c, BertTask task) {
  ParamLayout l;
  const int64_t h = c.hidden_size, inter = c.intermediate_size;
  l.Add("bert.embeddings.word_embeddings.weight", {c.vocab_size, h});
  l.Add("bert.embeddings.position_embeddings.weight",
        {c.max_position_embeddings, h});
  l.Add("bert.embeddings.token_type_embeddings.weight", {c.type_vocab_size, h});
  l.Add("bert.embeddings.LayerNorm.weight", {h});
  l.Add("bert.embeddings.LayerNorm.bias", {h});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = absl::StrCat("bert.encoder.layer.", i, ".");
    l.Add(p + "attention.self.query.weight", {h, h});
    l.Add(p + "attention.self.key.weight", {h, h});
    l.Add(p + "attention.self.value.weight", {h, h});
    l.Add(p + "attention.self.query.bias", {h});
    l.Add(p + "attention.self.key.bias", {h});
    l.Add(p + "attention.self.value.bias", {h});
    l.Add(p + "attention.output.dense.weight", {h, h});
    l.Add(p + "attention.output.dense.bias", {h});
    l.Add(p + "attention.output.LayerNorm.weight", {h});
    l.Add(p + "attention.output.LayerNorm.bias", {h});
    l.Add(p + "intermediate.dense.weight", {inter, h});
    l.Add(p + "intermediate.dense.bias", {inter});
    l.Add(p + "output.dense.weight", {h, inter});
    l.Add(p + "output.dense.bias", {h});
    l.Add(p + "output.LayerNorm.weight", {h});
    l.Add(p + "output.LayerNorm.bias", {h});
  }
  l.Add("bert.pooler.dense.weight", {h, h});
  l.Add("bert.pooler.dense.bias", {h});
  if (task == BertTask::kPretrain) {
    l.Add("cls.predictions.transform.dense.weight", {h, h});
    l.Add("cls.predictions.transform.dense.bias", {h});
    l.Add("cls.predictions.transform.LayerNorm.weight", {h});
    l.Add("cls.predictions.transform.LayerNorm.bias", {h});
    l.Add("cls.predictions.bias", {c.vocab_size});
    l.Add("cls.seq_relationship.weight", {2, h});
    l.Add("cls.seq_relationship.bias", {2});
  } else {
    l.Add("classifier.weight", {c.num_labels, h});
    l.Add("classifier.bias", {c.num_labels});
  }
  return l;
}

template <typename T>
void InitBertParams(const ParamLayout& layout, const BertConfig& config,
                    uint64_t seed, T* params) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (const ParamSpec& p : layout.tensors()) {
    T* w = params + p.offset;
    const bool is_ln = absl::StrContains(p.name, "LayerNorm");
    if (absl::EndsWith(p.name, "bias")) {
      std::fill(w, w + p.size, T(0));
    } else if (is_ln) {
      std::fill(w, w + p.size, T(1));
    } else {
      for (int64_t i = 0; i < p.size; ++i) {
        double z;
        do {
          z = normal(rng);
        } while (z < -2.0 || z > 2.0);
        w[i] = static_cast<T>(z * config.initializer_range);
      }
    }
  }
}

template void InitBertParams<float>(const ParamLayout&, const BertConfig&,
                                    uint64_t, float*);
template void InitBertParams<double>(const ParamLayout&, const BertConfig&,
                                     uint64_t, double*);

}  // namespace bertps
