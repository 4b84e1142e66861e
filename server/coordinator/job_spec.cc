#include "server/coordinator/job_spec.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"

namespace bertps {
namespace {

absl::Status Bad(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("job spec: ", field, " ", what));
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

void ApplyJobDefaults(JobSpec* s) {
  if (s->task() == TASK_UNSPECIFIED) s->set_task(PRETRAIN);
  if (s->model().empty()) s->set_model("tiny");
  if (s->batch_size() == 0) s->set_batch_size(32);
  if (s->num_ps_shards() == 0) s->set_num_ps_shards(1);
  if (s->num_workers() == 0) s->set_num_workers(1);
  if (s->seed() == 0) s->set_seed(12345);
  OptimizerSpec* o = s->mutable_optimizer();
  if (o->kind().empty()) o->set_kind("adam_weight_decay");
  if (o->learning_rate() == 0) o->set_learning_rate(1e-4);
  if (o->weight_decay() == 0) o->set_weight_decay(0.01);
  if (o->clip_norm() == 0) o->set_clip_norm(1.0);
  if (s->task() == CLASSIFY && s->num_labels() == 0) s->set_num_labels(2);
}

absl::Status ValidateJobSpec(const JobSpec& s) {
  if (s.task() == TASK_UNSPECIFIED) return Bad("task", "is required");
  if (s.data().empty()) return Bad("data", "needs at least one glob");
  for (const std::string& d : s.data()) {
    if (d.empty()) return Bad("data", "has an empty glob");
  }
  if (s.batch_size() <= 0 || s.batch_size() > 65536) {
    return Bad("batch_size", absl::StrCat("must be in [1, 65536], got ",
                                          s.batch_size()));
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
  if (s.num_workers() < 1 || s.num_workers() > 4096) {
    return Bad("num_workers", "must be in [1, 4096]");
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
  if (s.checkpoint().every_steps() > 0 && s.checkpoint().dir().empty()) {
    return Bad("checkpoint.dir", "is required with checkpoint.every_steps");
  }
  if (s.eval().every_steps() < 0) return Bad("eval.every_steps", "must be >= 0");
  if (s.task() == CLASSIFY && s.num_labels() < 2) {
    return Bad("num_labels", "must be >= 2 for classification");
  }
  absl::StatusOr<BertConfig> config = JobModelConfig(s);
  if (!config.ok()) return Bad("model", config.status().message());
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
  RETURN_IF_ERROR(ValidateJobSpec(spec));
  return spec;
}

absl::StatusOr<JobSpec> LoadJobSpec(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  absl::StatusOr<JobSpec> spec = ParseJobSpec(ss.str());
  if (!spec.ok()) return Annotate(spec.status(), path);
  return spec;
}

}  // namespace bertps
