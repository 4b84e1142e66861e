#include "server/coordinator/job_spec.h"

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

TEST(JobSpec, Json) {
  auto s = ParseJobSpec(R"({"task": "CLASSIFY", "model": "mini", "data": ["d"],
                            "epochs": 3, "numLabels": 2,
                            "consistency": {"mode": "SSP", "staleness": 2}})");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->task(), CLASSIFY);
  EXPECT_EQ(s->consistency().mode(), SSP);
  EXPECT_EQ(JobModelConfig(*s)->num_labels, 2);
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
           Case{"data: 'x' steps: 1 optimizer { kind: 'adagrad' }", "optimizer"},
           Case{"data: 'x' steps: 1 num_workers: 2 consistency { backup_workers: 2 }",
                "backup_workers"},
           Case{"data: 'x' steps: 1 checkpoint { every_steps: 10 }",
                "checkpoint.dir"},
           Case{"data: 'x' steps: 1 no_such_field: 3", "no_such_field"},
           Case{"data: 'x' steps: 1 task: TRAINING", "TRAINING"},
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

}  // namespace
}  // namespace bertps
