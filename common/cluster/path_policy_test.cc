#include "common/cluster/path_policy.h"

#include "gtest/gtest.h"

namespace bertps {
namespace {

TEST(PathPolicy, LexicalNormal) {
  EXPECT_EQ(LexicalNormal("/a/./b//c/"), "/a/b/c");
  EXPECT_EQ(LexicalNormal("/data/../etc/passwd"), "/etc/passwd");
  EXPECT_EQ(LexicalNormal("/../../x"), "/x");
  EXPECT_EQ(LexicalNormal("a/../../b"), "../b");
  EXPECT_EQ(LexicalNormal("/data/*/part-*.tfrecord"), "/data/*/part-*.tfrecord");
}

JobSpec Spec() {
  JobSpec s;
  s.set_task(PRETRAIN);
  s.add_data("/srv/data/corpus/*.tfrecord");
  s.set_model("/srv/data/models/bert.json");
  s.mutable_checkpoint()->set_dir("/srv/out/job1/ckpt");
  s.set_export_path("/srv/out/job1/final.safetensors");
  return s;
}

TEST(PathPolicy, UnconfinedTakesEveryPath) {
  JobSpec s = Spec();
  s.set_export_path("../../etc/cron.d/x");
  EXPECT_TRUE(CheckJobPaths(s, {}).ok());
}

TEST(PathPolicy, ConfinedPathsStayUnderTheirRoots) {
  const PathRoots roots{"/srv/data", "/srv/out"};
  EXPECT_TRUE(CheckJobPaths(Spec(), roots).ok());
  JobSpec s = Spec();
  s.set_export_path("/srv/out/job1/../../../etc/cron.d/x");
  absl::Status st = CheckJobPaths(s, roots);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "job spec: export_path \"/srv/out/job1/../../../etc/cron.d/x\" "
            "(/etc/cron.d/x) is outside --output_root /srv/out");
  s = Spec();
  s.add_data("/srv/database/*.tfrecord");  // a sibling sharing the prefix
  EXPECT_NE(CheckJobPaths(s, roots).message().find("data[1]"),
            std::string::npos);
  s = Spec();
  s.mutable_checkpoint()->set_dir("out/ckpt");
  EXPECT_EQ(CheckJobPaths(s, roots).message(),
            "job spec: checkpoint.dir \"out/ckpt\" must be an absolute path "
            "under --output_root /srv/out");
  // Outputs are never written under the data root; earlier outputs may be
  // read (a restore, an init from another job's checkpoint).
  s = Spec();
  s.set_output_dir("/srv/data/records");
  EXPECT_FALSE(CheckJobPaths(s, roots).ok());
  s = Spec();
  s.mutable_checkpoint()->set_restore("/srv/out/job0/ckpt/ckpt-100/manifest.json");
  EXPECT_TRUE(CheckJobPaths(s, roots).ok());
  s = Spec();
  s.set_model("tiny");  // a preset: no path
  EXPECT_TRUE(CheckJobPaths(s, roots).ok());
  s.set_init_weights("/root/.ssh/id_rsa");
  EXPECT_FALSE(CheckJobPaths(s, roots).ok());
}

}  // namespace
}  // namespace bertps
