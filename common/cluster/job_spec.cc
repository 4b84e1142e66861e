#include "common/cluster/job_spec.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/io/file_util.h"
#include "common/status.h"
#include "utf8proc.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"

namespace bertps {
namespace {

absl::Status Bad(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("job spec: ", field, " ", what));
}

// Every string field of `m` (recursively) within its bound: the job's name
// kMaxJobNameBytes, every other string (globs, paths, labels)
// kMaxSpecStringBytes; every repeated field at most kMaxSpecListEntries.
absl::Status CheckBounds(const google::protobuf::Message& m,
                         const std::string& prefix) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* r = m.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(m, &fields);
  for (const FieldDescriptor* f : fields) {
    const std::string name = prefix + f->name();
    const int n = f->is_repeated() ? r->FieldSize(m, f) : 1;
    if (f->is_repeated() && n > kMaxSpecListEntries) {
      return Bad(name, absl::StrCat("has ", n, " entries, over the limit of ",
                                    kMaxSpecListEntries));
    }
    for (int i = 0; i < n; ++i) {
      if (f->type() == FieldDescriptor::TYPE_STRING) {
        std::string scratch;
        const std::string& v =
            f->is_repeated() ? r->GetRepeatedStringReference(m, f, i, &scratch)
                             : r->GetStringReference(m, f, &scratch);
        const size_t limit =
            prefix.empty() && f->name() == "name" ? kMaxJobNameBytes
                                                  : kMaxSpecStringBytes;
        if (v.size() > limit) {
          return Bad(f->is_repeated() ? absl::StrCat(name, "[", i, "]") : name,
                     absl::StrCat("is ", v.size(), " bytes, over the limit of ",
                                  limit));
        }
        // proto3 strings are UTF-8: a spec that is not cannot be sent.
        for (size_t at = 0; at < v.size();) {
          utf8proc_int32_t c;
          const utf8proc_ssize_t k = utf8proc_iterate(
              reinterpret_cast<const utf8proc_uint8_t*>(v.data() + at),
              static_cast<utf8proc_ssize_t>(v.size() - at), &c);
          if (k <= 0) {
            return Bad(
                f->is_repeated() ? absl::StrCat(name, "[", i, "]") : name,
                absl::StrCat("is not valid UTF-8 (at byte ", at, ")"));
          }
          at += static_cast<size_t>(k);
        }
      } else if (f->type() == FieldDescriptor::TYPE_MESSAGE) {
        const google::protobuf::Message& sub =
            f->is_repeated() ? r->GetRepeatedMessage(m, f, i)
                             : r->GetMessage(m, f);
        RETURN_IF_ERROR(CheckBounds(sub, name + "."));
      }
    }
  }
  return absl::OkStatus();
}

// Collects text-format parse errors with their line and column.
class Errors : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (first_.empty()) {
      first_ = absl::StrCat("line ", line + 1, " column ", column + 1, ": ",
                            message);
    }
  }
  const std::string& first() const { return first_; }

 private:
  std::string first_;
};

}  // namespace

void ApplyJobDirDefaults(JobSpec* s) {
  if (s->job_dir().empty()) return;
  std::string dir = s->job_dir();
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  auto under = [&dir](const char* name) { return absl::StrCat(dir, "/", name); };
  if (s->task() == PRETRAIN || s->task() == CLASSIFY) {
    if (s->checkpoint().dir().empty()) {
      s->mutable_checkpoint()->set_dir(under("checkpoints"));
    }
    if (s->export_path().empty()) s->set_export_path(under("model.safetensors"));
    if (s->tensorboard_dir().empty()) s->set_tensorboard_dir(under("tensorboard"));
  } else if (s->output_dir().empty()) {
    s->set_output_dir(under("output"));
  }
}

void ApplyJobDefaults(JobSpec* s) {
  if (s->task() == TASK_UNSPECIFIED) s->set_task(PRETRAIN);
  if (s->model().empty()) s->set_model("tiny");
  if (s->batch_size() == 0) s->set_batch_size(32);
  if (s->num_ps_shards() == 0) s->set_num_ps_shards(1);
  if (s->num_workers() == 0) s->set_num_workers(1);
  if (s->replicas() == 0) s->set_replicas(1);
  if (s->seed() == 0) s->set_seed(12345);
  OptimizerSpec* o = s->mutable_optimizer();
  if (o->kind().empty()) o->set_kind("adam_weight_decay");
  if (o->learning_rate() == 0) o->set_learning_rate(1e-4);
  if (o->weight_decay() == 0) o->set_weight_decay(0.01);
  if (o->clip_norm() == 0) o->set_clip_norm(1.0);
  if (s->task() == CLASSIFY && s->num_labels() == 0) {
    s->set_num_labels(s->label_names_size() > 0 ? s->label_names_size() : 2);
  }
  if (s->task() == PREPROCESS) {
    PreprocessSpec* p = s->mutable_preprocess();
    if (p->input_format().empty()) p->set_input_format("text");
    if (p->output().empty()) p->set_output("pretrain");
    if (p->compression().empty()) p->set_compression("none");
    if (p->max_seq_length() == 0) p->set_max_seq_length(128);
    if (p->max_predictions_per_seq() == 0) p->set_max_predictions_per_seq(20);
    if (p->masked_lm_prob() == 0) p->set_masked_lm_prob(0.15);
    if (p->dupe_factor() == 0) p->set_dupe_factor(10);
    if (p->short_seq_prob() == 0) p->set_short_seq_prob(0.1);
    if (p->dev_fraction() == 0) p->set_dev_fraction(0.1);
    if (p->test_fraction() == 0) p->set_test_fraction(0.1);
    if (p->clean().normalization().empty()) {
      p->mutable_clean()->set_normalization("NFC");
    }
    if (p->clean().near_threshold() == 0) p->mutable_clean()->set_near_threshold(0.8);
    AugmentSpec* a = p->mutable_augment();
    if (a->num_aug() > 0) {
      if (a->alpha_sr() == 0) a->set_alpha_sr(0.1);
      if (a->alpha_ri() == 0) a->set_alpha_ri(0.1);
      if (a->alpha_rs() == 0) a->set_alpha_rs(0.1);
      if (a->p_rd() == 0) a->set_p_rd(0.1);
      if (a->wordnet_dir().empty()) a->set_wordnet_dir("/usr/share/wordnet");
    }
  }
  if (s->pipeline().stages() > 1) {
    PipelineSpec* p = s->mutable_pipeline();
    if (p->micro_batches() == 0) p->set_micro_batches(4);
    if (p->schedule().empty()) p->set_schedule("1f1b");
  }
  // Eval during training reads worker 0's checkpoints.
  if ((s->task() == PRETRAIN || s->task() == CLASSIFY) &&
      s->eval().data_size() > 0 && s->eval().every_steps() > 0 &&
      s->checkpoint().every_steps() == 0) {
    s->mutable_checkpoint()->set_every_steps(s->eval().every_steps());
  }
}

namespace {

// Where an output path is required: the hint when it is missing.
constexpr char kOrJobDir[] = " (or job_dir, or a coordinator with --jobs_root)";

absl::Status ValidatePreprocess(const JobSpec& s, bool outputs_may_default) {
  const PreprocessSpec& p = s.preprocess();
  if (s.output_dir().empty() && !outputs_may_default) {
    return Bad("output_dir", absl::StrCat("is required for preprocess", kOrJobDir));
  }
  if (p.vocab().empty()) return Bad("preprocess.vocab", "is required");
  static const char* kFormats[] = {"text", "paragraphs", "jsonl", "fortunes"};
  if (std::find(std::begin(kFormats), std::end(kFormats), p.input_format()) ==
      std::end(kFormats)) {
    return Bad("preprocess.input_format",
               absl::StrCat("must be text, paragraphs, jsonl or fortunes, got '",
                            p.input_format(), "'"));
  }
  if (p.output() != "pretrain" && p.output() != "classify") {
    return Bad("preprocess.output",
               absl::StrCat("must be pretrain or classify, got '", p.output(), "'"));
  }
  if (!p.compression().empty() && p.compression() != "none" &&
      p.compression() != "gzip") {
    return Bad("preprocess.compression",
               absl::StrCat("must be none or gzip, got '", p.compression(),
                            "'"));
  }
  if (p.output() == "pretrain" && !p.force_pretraining_edits()) {
    if (p.clean().remove_stopwords()) {
      return Bad("preprocess.clean.remove_stopwords",
                 "would strip the function words from pretraining text "
                 "(BERT learns from them); set "
                 "preprocess.force_pretraining_edits to insist");
    }
    if (p.augment().num_aug() > 0) {
      return Bad("preprocess.augment.num_aug",
                 "would add edited copies (EDA) to pretraining text; EDA is "
                 "for small classification sets; set "
                 "preprocess.force_pretraining_edits to insist");
    }
  }
  if (p.output() == "classify" && p.labels_size() < 2) {
    return Bad("preprocess.labels", "needs at least two labels for classify");
  }
  if (p.max_seq_length() < 8 || p.max_seq_length() > 8192) {
    return Bad("preprocess.max_seq_length", "must be in [8, 8192]");
  }
  if (p.max_predictions_per_seq() < 1 ||
      p.max_predictions_per_seq() > p.max_seq_length()) {
    return Bad("preprocess.max_predictions_per_seq",
               "must be in [1, max_seq_length]");
  }
  if (p.masked_lm_prob() <= 0 || p.masked_lm_prob() >= 1) {
    return Bad("preprocess.masked_lm_prob", "must be in (0, 1)");
  }
  if (p.short_seq_prob() < 0 || p.short_seq_prob() > 1) {
    return Bad("preprocess.short_seq_prob", "must be in [0, 1]");
  }
  if (p.dupe_factor() < 1 || p.dupe_factor() > 1000) {
    return Bad("preprocess.dupe_factor", "must be in [1, 1000]");
  }
  if (p.shards() < 0 || p.shards() > 100000) {
    return Bad("preprocess.shards", "must be in [0, 100000]");
  }
  if (p.dev_fraction() < 0 || p.test_fraction() < 0 ||
      p.dev_fraction() + p.test_fraction() >= 1) {
    return Bad("preprocess.dev_fraction",
               "and test_fraction must be >= 0 with a sum below 1");
  }
  const std::string& n = p.clean().normalization();
  if (n != "NFC" && n != "NFKC" && n != "none") {
    return Bad("preprocess.clean.normalization",
               absl::StrCat("must be NFC, NFKC or none, got '", n, "'"));
  }
  if (p.clean().near_threshold() <= 0 || p.clean().near_threshold() > 1) {
    return Bad("preprocess.clean.near_threshold", "must be in (0, 1]");
  }
  if (p.clean().min_chars() < 0 || p.clean().max_chars() < 0 ||
      p.clean().min_words() < 0) {
    return Bad("preprocess.clean", "length limits must be >= 0");
  }
  const AugmentSpec& a = p.augment();
  if (a.num_aug() < 0 || a.num_aug() > 64) {
    return Bad("preprocess.augment.num_aug", "must be in [0, 64]");
  }
  for (double v : {a.alpha_sr(), a.alpha_ri(), a.alpha_rs(), a.p_rd()}) {
    if (v < 0 || v > 1) return Bad("preprocess.augment", "alphas must be in [0, 1]");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateJobSpec(const JobSpec& s, bool outputs_may_default) {
  RETURN_IF_ERROR(CheckBounds(s, ""));
  if (s.task() == TASK_UNSPECIFIED) return Bad("task", "is required");
  if (s.data().empty()) return Bad("data", "needs at least one glob");
  for (const std::string& d : s.data()) {
    if (d.empty()) return Bad("data", "has an empty glob");
  }
  if (s.batch_size() <= 0 || s.batch_size() > 65536) {
    return Bad("batch_size", absl::StrCat("must be in [1, 65536], got ",
                                          s.batch_size()));
  }
  if (s.accumulation_steps() < 0 || s.accumulation_steps() > 1024) {
    return Bad("accumulation_steps",
               absl::StrCat("must be in [0, 1024] (0: 1), got ",
                            s.accumulation_steps()));
  }
  if (s.accumulation_steps() > 1 &&
      static_cast<int64_t>(s.batch_size()) * s.accumulation_steps() > 1 << 20) {
    return Bad("accumulation_steps",
               absl::StrCat("x batch_size is ",
                            static_cast<int64_t>(s.batch_size()) *
                                s.accumulation_steps(),
                            " examples per push, over the limit of 1048576"));
  }
  if (s.task() != PREPROCESS && s.task() != EVAL) {
    if (s.steps() < 0) return Bad("steps", "must be >= 0");
    if (s.epochs() < 0) return Bad("epochs", "must be >= 0");
    if (s.steps() == 0 && s.epochs() == 0) {
      return Bad("steps", "or epochs must be set");
    }
    if (s.steps() > 0 && s.epochs() > 0) {
      return Bad("steps", "and epochs are exclusive");
    }
  }
  if (s.num_ps_shards() < 1 || s.num_ps_shards() > 1024) {
    return Bad("num_ps_shards", "must be in [1, 1024]");
  }
  if (s.replicas() < 1 || s.replicas() > 8) {
    return Bad("replicas", "must be in [1, 8]");
  }
  if (s.precision() != DTYPE_UNSPECIFIED && s.precision() != F32 &&
      s.precision() != BF16) {
    return Bad("precision", absl::StrCat("must be F32 or BF16, got ",
                                         DType_Name(s.precision())));
  }
  if (s.precision() == BF16 && (s.task() == PREPROCESS || s.task() == EVAL)) {
    return Bad("precision", "BF16 is for train jobs (eval computes in F32)");
  }
  if (s.num_workers() < 1 || s.num_workers() > 4096) {
    return Bad("num_workers", "must be in [1, 4096]");
  }
  if (s.min_workers() < 0 || s.min_workers() > s.num_workers()) {
    return Bad("min_workers",
               absl::StrCat("must be in [0, num_workers] (0: num_workers), got ",
                            s.min_workers(), " with num_workers ",
                            s.num_workers()));
  }
  if (s.min_workers() > 0 && s.min_workers() < s.num_workers() &&
      s.pipeline().stages() > 1) {
    return Bad("min_workers",
               "applies to train workers, not to pipeline stages (a pipeline "
               "job runs on all its replicas' stages)");
  }
  const ConsistencySpec& c = s.consistency();
  if (c.staleness() < 0) return Bad("consistency.staleness", "must be >= 0");
  if (c.backup_workers() < 0 || c.backup_workers() >= s.num_workers()) {
    return Bad("consistency.backup_workers",
               "must be in [0, num_workers)");
  }
  if (c.mode() != BSP && c.backup_workers() > 0) {
    return Bad("consistency.backup_workers", "applies to BSP only");
  }
  if (s.checkpoint().every_steps() < 0) {
    return Bad("checkpoint.every_steps", "must be >= 0");
  }
  if (s.checkpoint().restore_as() != CheckpointSpec::CONTINUE &&
      s.checkpoint().restore().empty()) {
    return Bad("checkpoint.restore_as",
               "NEW_PHASE needs checkpoint.restore (the checkpoint the new "
               "phase starts from)");
  }
  if (s.checkpoint().reset_optimizer() &&
      s.checkpoint().restore_as() != CheckpointSpec::NEW_PHASE) {
    return Bad("checkpoint.reset_optimizer",
               "applies to restore_as: NEW_PHASE (a continued run keeps its "
               "optimizer state)");
  }
  if (s.checkpoint().origin().update() < 0 ||
      s.checkpoint().origin().position() < 0) {
    return Bad("checkpoint.origin", "must be >= 0 (the coordinator sets it)");
  }
  if (s.checkpoint().origin().update() > s.steps() && s.steps() > 0) {
    return Bad("checkpoint.origin",
               absl::StrCat("the restored checkpoint is of update ",
                            s.checkpoint().origin().update(),
                            ", past the job's steps (", s.steps(),
                            "): nothing is left to train (restore_as: "
                            "NEW_PHASE starts the step count at 0)"));
  }
  if (s.checkpoint().keep() < 0 || s.checkpoint().keep() > 1000000) {
    return Bad("checkpoint.keep", "must be in [0, 1000000] (0: keep all)");
  }
  const bool no_ckpt_dir = s.checkpoint().dir().empty() && !outputs_may_default;
  if (s.checkpoint().keep() > 0 && no_ckpt_dir) {
    return Bad("checkpoint.dir",
               absl::StrCat("is required with checkpoint.keep", kOrJobDir));
  }
  if (s.checkpoint().every_steps() > 0 && no_ckpt_dir) {
    return Bad("checkpoint.dir",
               absl::StrCat("is required with checkpoint.every_steps", kOrJobDir));
  }
  if (s.eval().every_steps() < 0) return Bad("eval.every_steps", "must be >= 0");
  if (s.eval().shards() < 0) return Bad("eval.shards", "must be >= 0");
  for (const std::string& d : s.eval().data()) {
    if (d.empty()) return Bad("eval.data", "has an empty glob");
  }
  if (!s.eval().predictions_dir().empty() &&
      (s.task() == PRETRAIN || s.task() == PREPROCESS)) {
    return Bad("eval.predictions_dir",
               "applies to classification (CLASSIFY jobs' eval rounds, EVAL "
               "jobs of a classifier)");
  }
  if (s.task() == PREPROCESS) return ValidatePreprocess(s, outputs_may_default);
  if (s.task() == EVAL && s.eval_checkpoint().empty()) {
    return Bad("eval_checkpoint", "is required for an eval job");
  }
  if ((s.task() == PRETRAIN || s.task() == CLASSIFY) &&
      s.eval().data_size() > 0) {
    if (no_ckpt_dir) {
      return Bad("checkpoint.dir",
                 absl::StrCat("is required with eval.data (eval reads "
                              "checkpoints)", kOrJobDir));
    }
    if (s.eval().every_steps() > 0 &&
        s.eval().every_steps() % s.checkpoint().every_steps() != 0) {
      return Bad("eval.every_steps", "must be a multiple of checkpoint.every_steps");
    }
  }
  const PipelineSpec& pl = s.pipeline();
  if (pl.stages() < 0 || pl.stages() > 64) {
    return Bad("pipeline.stages", "must be in [0, 64]");
  }
  if (pl.stages() > 1) {
    if (s.accumulation_steps() > 1) {
      return Bad("accumulation_steps",
                 "does not apply to pipeline jobs (their micro_batches "
                 "already split each batch)");
    }
    if (s.task() != PRETRAIN && s.task() != CLASSIFY) {
      return Bad("pipeline.stages", "applies to PRETRAIN and CLASSIFY jobs");
    }
    if (pl.micro_batches() < 1 || pl.micro_batches() > s.batch_size()) {
      return Bad("pipeline.micro_batches", "must be in [1, batch_size]");
    }
    if (pl.schedule() != "gpipe" && pl.schedule() != "1f1b") {
      return Bad("pipeline.schedule",
                 absl::StrCat("must be gpipe or 1f1b, got '", pl.schedule(), "'"));
    }
    if (pl.layers_per_stage_size() != 0 && pl.layers_per_stage_size() != pl.stages()) {
      return Bad("pipeline.layers_per_stage",
                 absl::StrCat("has ", pl.layers_per_stage_size(),
                              " entries for ", pl.stages(), " stages"));
    }
    for (int n : pl.layers_per_stage()) {
      if (n < 1) {
        return Bad("pipeline.layers_per_stage",
                   absl::StrCat("has an entry of ", n,
                                " (every stage needs a layer at least)"));
      }
    }
    if (s.consistency().mode() != BSP || s.consistency().backup_workers() > 0) {
      return Bad("consistency", "pipeline jobs run BSP without backup workers");
    }
  }
  if (s.label_names_size() > 0 && s.label_names_size() != s.num_labels()) {
    return Bad("label_names", absl::StrCat("has ", s.label_names_size(),
                                           " names for ", s.num_labels(),
                                           " labels"));
  }
  if (s.task() == CLASSIFY && s.num_labels() < 2) {
    return Bad("num_labels", "must be >= 2 for classification");
  }
  absl::StatusOr<BertConfig> config = JobModelConfig(s);
  if (!config.ok()) return Bad("model", config.status().message());
  if (pl.stages() > 1 && pl.layers_per_stage_size() > 0) {
    int64_t sum = 0;
    for (int n : pl.layers_per_stage()) sum += n;
    if (sum != config->num_hidden_layers) {
      return Bad("pipeline.layers_per_stage",
                 absl::StrCat("adds up to ", sum, " layers but the model has ",
                              config->num_hidden_layers));
    }
  }
  if (pl.stages() > config->num_hidden_layers) {
    return Bad("pipeline.stages",
               absl::StrCat("is ", pl.stages(), " but the model has ",
                            config->num_hidden_layers,
                            " encoder layers (one at least per stage)"));
  }
  if (absl::StatusOr<optim::OptimizerKind> kind =
          optim::ParseOptimizerKind(s.optimizer().kind());
      !kind.ok()) {
    return Bad("optimizer.kind", kind.status().message());
  }
  absl::StatusOr<optim::OptimizerConfig> opt = JobOptimizerConfig(s);
  if (!opt.ok()) return Bad("optimizer", opt.status().message());
  return absl::OkStatus();
}

absl::StatusOr<BertConfig> JobModelConfig(const JobSpec& s) {
  ASSIGN_OR_RETURN(BertConfig c, ResolveBertConfig(s.model()));
  if (s.task() == CLASSIFY) c.num_labels = s.num_labels();
  RETURN_IF_ERROR(c.Validate());
  return c;
}

absl::StatusOr<optim::OptimizerConfig> JobOptimizerConfig(const JobSpec& s) {
  optim::OptimizerConfig o;
  ASSIGN_OR_RETURN(o.kind, optim::ParseOptimizerKind(s.optimizer().kind()));
  o.learning_rate = s.optimizer().learning_rate();
  o.weight_decay = s.optimizer().weight_decay();
  o.clip_norm = s.optimizer().clip_norm() < 0 ? 0 : s.optimizer().clip_norm();
  o.warmup_steps = s.optimizer().warmup_steps();
  o.total_steps = s.steps();
  if (s.optimizer().momentum() != 0) o.momentum = s.optimizer().momentum();
  RETURN_IF_ERROR(optim::ValidateConfig(o));
  return o;
}

absl::StatusOr<JobSpec> ParseJobSpec(absl::string_view text) {
  JobSpec spec;
  absl::string_view t = absl::StripLeadingAsciiWhitespace(text);
  if (!t.empty() && t.front() == '{') {
    google::protobuf::util::JsonParseOptions opts;
    opts.ignore_unknown_fields = false;
    auto st = google::protobuf::util::JsonStringToMessage(
        std::string(text), &spec, opts);
    if (!st.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("job spec (JSON): ", st.message().as_string()));
    }
  } else {
    google::protobuf::TextFormat::Parser parser;
    Errors errors;
    parser.RecordErrorsTo(&errors);
    if (!parser.ParseFromString(std::string(text), &spec)) {
      return absl::InvalidArgumentError(
          absl::StrCat("job spec (text format): ", errors.first()));
    }
  }
  ApplyJobDefaults(&spec);
  ApplyJobDirDefaults(&spec);
  // Outputs left empty may still come from the coordinator's --jobs_root,
  // which it checks after filling them.
  RETURN_IF_ERROR(ValidateJobSpec(spec, /*outputs_may_default=*/true));
  return spec;
}

absl::StatusOr<JobSpec> LoadJobSpec(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text,
                   io::ReadFileToString(path, kMaxJobSpecFileBytes));
  absl::StatusOr<JobSpec> spec = ParseJobSpec(text);
  if (!spec.ok()) return Annotate(spec.status(), path);
  return spec;
}

}  // namespace bertps
