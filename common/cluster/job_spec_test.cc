#include "common/cluster/job_spec.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"

namespace bertps {
namespace {

TEST(JobSpec, TextFormatWithDefaults) {
  auto s = ParseJobSpec(R"pb(
    name: "tiny-pretrain"
    task: PRETRAIN
    model: "tiny"
    data: "data/*.tfrecord"
    steps: 100
    num_ps_shards: 2
    num_workers: 2
    consistency { mode: BSP }
    optimizer { kind: "lamb" learning_rate: 1e-3 }
  )pb");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->batch_size(), 32);
  EXPECT_EQ(s->seed(), 12345u);
  EXPECT_EQ(s->optimizer().kind(), "lamb");
  EXPECT_DOUBLE_EQ(s->optimizer().weight_decay(), 0.01);
  auto oc = JobOptimizerConfig(*s);
  ASSERT_TRUE(oc.ok());
  EXPECT_EQ(oc->total_steps, 100);
}

// job_dir: the outputs left empty go under it; those given stay.
TEST(JobSpec, JobDirHoldsTheOutputsLeftEmpty) {
  JobSpec s;
  s.set_task(PRETRAIN);
  s.set_job_dir("/runs/a/");
  s.set_export_path("/elsewhere/final.safetensors");
  ApplyJobDirDefaults(&s);
  EXPECT_EQ(s.checkpoint().dir(), "/runs/a/checkpoints");
  EXPECT_EQ(s.tensorboard_dir(), "/runs/a/tensorboard");
  EXPECT_EQ(s.export_path(), "/elsewhere/final.safetensors");
  EXPECT_EQ(s.output_dir(), "");
  JobSpec p;
  p.set_task(PREPROCESS);
  p.set_job_dir("runs/p");
  ApplyJobDirDefaults(&p);
  EXPECT_EQ(p.output_dir(), "runs/p/output");
  EXPECT_EQ(p.checkpoint().dir(), "");
  JobSpec none;
  ApplyJobDirDefaults(&none);
  EXPECT_EQ(none.DebugString(), "");
}

TEST(JobSpec, Json) {
  auto s = ParseJobSpec(R"({"task": "CLASSIFY", "model": "mini", "data": ["d"],
                            "epochs": 3, "numLabels": 2,
                            "consistency": {"mode": "SSP", "staleness": 2}})");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->task(), CLASSIFY);
  EXPECT_EQ(s->consistency().mode(), SSP);
  EXPECT_EQ(JobModelConfig(*s)->num_labels, 2);
  auto b = ParseJobSpec(R"({"task": "PRETRAIN", "data": ["d"], "steps": 2,
                            "precision": "BF16"})");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->precision(), BF16);
}

TEST(JobSpec, BadSpecsNameTheField) {
  struct Case {
    const char* text;
    const char* field;
  };
  for (Case c : {
           Case{"data: 'x' steps: 1 batch_size: -4", "batch_size"},
           Case{"steps: 1", "data"},
           Case{"data: 'x'", "steps"},
           Case{"data: 'x' steps: 1 epochs: 2", "exclusive"},
           Case{"data: 'x' steps: 1 model: 'huge'", "model"},
           Case{"data: 'x' steps: 1 optimizer { kind: 'adagrad' }",
                "optimizer.kind"},
           Case{"data: 'x' steps: 1 name: '\xff\xfe'",
                "name is not valid UTF-8 (at byte 0)"},
           Case{"data: 'x' data: 'ok\xc3' steps: 1",
                "data[1] is not valid UTF-8 (at byte 2)"},
           Case{"data: 'x' steps: 1 num_workers: 2 consistency { backup_workers: 2 }",
                "backup_workers"},
           Case{"data: 'x' steps: 1 checkpoint { dir: 'c' keep: -1 }",
                "checkpoint.keep"},
           Case{"data: 'x' steps: 1 checkpoint { dir: 'c' restore_as: NEW_PHASE }",
                "checkpoint.restore_as NEW_PHASE needs checkpoint.restore"},
           Case{"data: 'x' steps: 1 checkpoint { dir: 'c' restore: 'r' "
                "reset_optimizer: true }",
                "checkpoint.reset_optimizer applies to restore_as: NEW_PHASE"},
           Case{"data: 'x' steps: 1 checkpoint { dir: 'c' restore: 'r' "
                "origin { update: -1 } }",
                "checkpoint.origin"},
           Case{"data: 'x' steps: 1 num_workers: 2 min_workers: 3",
                "min_workers must be in [0, num_workers]"},
           Case{"data: 'x' steps: 1 model: 'tiny' num_workers: 2 min_workers: 1 "
                "pipeline { stages: 2 micro_batches: 4 }",
                "min_workers applies to train workers, not to pipeline stages"},
           Case{"data: 'x' steps: 1 no_such_field: 3", "no_such_field"},
           Case{"data: 'x' steps: 1 accumulation_steps: -2", "accumulation_steps"},
           Case{"data: 'x' steps: 1 batch_size: 65536 accumulation_steps: 1000",
                "accumulation_steps x batch_size is 65536000 examples per push"},
           Case{"data: 'x' steps: 1 model: 'tiny' accumulation_steps: 2 "
                "pipeline { stages: 2 micro_batches: 4 }",
                "accumulation_steps does not apply to pipeline jobs"},
           Case{"data: 'x' steps: 1 task: TRAINING", "TRAINING"},
           Case{"data: 'x' steps: 1 precision: F16", "precision must be F32 or BF16"},
           Case{"data: 'x' steps: 1 precision: FP8", "FP8"},
           Case{"task: EVAL data: 'x' eval_checkpoint: 'c' output_dir: 'o' "
                "precision: BF16",
                "precision"},
           Case{"data: 'x' steps: 1 eval { predictions_dir: 'p' }",
                "eval.predictions_dir applies to classification"},
           Case{"{\"data\": [\"x\"], \"steps\": \"many\"}", "steps"},
           Case{"{\"data\": [\"x\"], \"steps\": 1, \"bogus\": 1}", "bogus"},
           Case{"{not json", "JSON"},
       }) {
    auto s = ParseJobSpec(c.text);
    ASSERT_FALSE(s.ok()) << c.text;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(s.status().message().find(c.field), std::string::npos)
        << c.text << " -> " << s.status();
  }
}

// A missing checkpoint.dir or output_dir may come from the coordinator's
// --jobs_root: a client's parse lets it pass; the coordinator's check after
// filling the defaults names the field and the ways to give it.
TEST(JobSpec, OutputsMayComeFromTheJobsRoot) {
  for (const char* text : {"data: 'x' steps: 1 checkpoint { every_steps: 10 }",
                           "data: 'x' steps: 1 checkpoint { keep: 3 }",
                           "task: PREPROCESS data: 'x' preprocess { vocab: 'v' }"}) {
    absl::StatusOr<JobSpec> s = ParseJobSpec(text);
    ASSERT_TRUE(s.ok()) << text << " -> " << s.status();
    absl::Status strict = ValidateJobSpec(*s);
    ASSERT_FALSE(strict.ok()) << text;
    EXPECT_NE(strict.message().find("or job_dir, or a coordinator with "
                                    "--jobs_root"),
              std::string::npos)
        << strict;
    JobSpec with_dir = *s;
    with_dir.set_job_dir("/runs/j");
    ApplyJobDirDefaults(&with_dir);
    EXPECT_TRUE(ValidateJobSpec(with_dir).ok()) << text;
  }
}

// A spec path that is a device or a directory is refused by name, without
// reading it (/dev/zero used to be read until memory ran out).
TEST(JobSpec, SpecialFilesAreRefused) {
  for (const char* path : {"/dev/zero", "/dev/null", "/tmp"}) {
    auto s = LoadJobSpec(path);
    ASSERT_FALSE(s.ok()) << path;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find("not a regular file"),
              std::string::npos)
        << s.status();
  }
}

// Every string and list has a bound (a 4 MiB name once made ListJobs fail
// for everyone); the refusal names the field and the limit.
TEST(JobSpec, StringsAndListsAreBounded) {
  JobSpec s;
  s.set_task(PRETRAIN);
  s.add_data("data/*.tfrecord");
  s.set_steps(10);
  s.set_name(std::string(256, 'n'));
  ApplyJobDefaults(&s);
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << ValidateJobSpec(s);
  s.set_name(std::string(257, 'n'));
  absl::Status st = ValidateJobSpec(s);
  EXPECT_EQ(st.message(),
            "job spec: name is 257 bytes, over the limit of 256");
  s.set_name("ok");
  s.add_data(std::string(4097, '*'));
  EXPECT_EQ(ValidateJobSpec(s).message(),
            "job spec: data[1] is 4097 bytes, over the limit of 4096");
  s.mutable_data()->RemoveLast();
  s.mutable_checkpoint()->set_dir(std::string(5000, 'd'));
  EXPECT_EQ(ValidateJobSpec(s).message(),
            "job spec: checkpoint.dir is 5000 bytes, over the limit of 4096");
  s.mutable_checkpoint()->clear_dir();
  for (int i = 0; i < 10000; ++i) s.add_data("x");
  EXPECT_EQ(ValidateJobSpec(s).message(),
            "job spec: data has 10001 entries, over the limit of 10000");
}

// Stop-word removal and EDA copies harm pretraining text: refused for
// pretrain output unless forced; classify output keeps them.
TEST(JobSpec, PretrainingTextRefusesStopwordRemovalAndAugmentation) {
  const char* base = R"pb(
    task: PREPROCESS
    data: "in/*.txt"
    output_dir: "out"
    preprocess { vocab: "vocab.txt" %s }
  )pb";
  auto parse = [&](const char* extra) {
    return ParseJobSpec(absl::StrFormat(base, extra));
  };
  EXPECT_TRUE(parse("").ok()) << parse("").status();
  auto sw = parse("clean { remove_stopwords: true }");
  ASSERT_FALSE(sw.ok());
  EXPECT_NE(sw.status().message().find(
                "preprocess.clean.remove_stopwords would strip the function "
                "words"),
            std::string::npos)
      << sw.status();
  auto eda = parse("augment { num_aug: 4 }");
  ASSERT_FALSE(eda.ok());
  EXPECT_NE(eda.status().message().find("preprocess.augment.num_aug"),
            std::string::npos)
      << eda.status();
  EXPECT_TRUE(parse("augment { num_aug: 4 } clean { remove_stopwords: true } "
                    "force_pretraining_edits: true")
                  .ok());
  auto cls = parse(
      "output: \"classify\" labels: \"a\" labels: \"b\" input_format: "
      "\"jsonl\" augment { num_aug: 4 } clean { remove_stopwords: true }");
  EXPECT_TRUE(cls.ok()) << cls.status();
}

TEST(JobSpec, MoreStagesThanLayersCanNeverRun) {
  auto s = ParseJobSpec(R"pb(
    task: PRETRAIN data: "d/*.tfrecord" steps: 5 model: "tiny"
    batch_size: 64 pipeline { stages: 64 micro_batches: 4 }
  )pb");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(),
            "job spec: pipeline.stages is 64 but the model has 2 encoder "
            "layers (one at least per stage)");
}

// Layers given per stage must cover the model's layers exactly.
TEST(JobSpec, LayersPerStageCoverTheModel) {
  for (const char* layers : {"layers_per_stage: [5, 5]",
                             "layers_per_stage: [2, 0]"}) {
    auto s = ParseJobSpec(absl::StrCat(R"pb(
      task: PRETRAIN data: "d/*.tfrecord" steps: 5 model: "tiny"
      batch_size: 8 pipeline { stages: 2 micro_batches: 4 )pb",
                                       layers, "}"));
    ASSERT_FALSE(s.ok()) << layers;
    EXPECT_NE(s.status().message().find("pipeline.layers_per_stage"),
              std::string::npos)
        << s.status();
  }
  EXPECT_TRUE(ParseJobSpec(R"pb(
    task: PRETRAIN data: "d/*.tfrecord" steps: 5 model: "tiny"
    batch_size: 8 pipeline { stages: 2 micro_batches: 4 layers_per_stage: [1, 1] }
  )pb").ok());
}

}  // namespace
}  // namespace bertps
