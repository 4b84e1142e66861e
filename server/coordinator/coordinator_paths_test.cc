// The coordinator under --data_root/--output_root with real files: what a
// refused submission leaves on disk (nothing), and every file a data pattern
// matches (train data, preprocess and eval items, eval rounds made later)
// resolved and checked against the roots before it is opened or leased.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/coordinator_test_util.h"

namespace bertps {
namespace {

namespace fs = std::filesystem;
using namespace std::string_literals;  // "\0" inside a path

// T/data (the data root), T/out (the output root), T/outside (neither).
class CoordinatorPaths : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    top_ = fs::path(tmp ? tmp : "/tmp") /
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(top_);
    for (const char* d : {"data/corpus", "data/text", "out", "outside"}) {
      fs::create_directories(top_ / d);
    }
  }
  std::string T(const std::string& rel) const { return (top_ / rel).string(); }
  static void Write(const std::string& path, const std::string& text = "x\n") {
    std::ofstream(path) << text;
  }
  // A coordinator confined to T/data and T/out that counts 100 examples
  // (count_examples: null to read the data for real).
  CoordinatorOptions Options(bool fake_count = true) {
    CoordinatorOptions o;
    o.stall_threshold = absl::InfiniteDuration();
    o.roots = {T("data"), T("out")};
    if (fake_count) {
      o.count_examples = [this](const JobSpec&) -> absl::StatusOr<int64_t> {
        ++counted_;
        return count_;
      };
    }
    return o;
  }
  JobSpec Train() const {
    JobSpec s;
    s.set_task(PRETRAIN);
    s.add_data(T("data/corpus/*.tfrecord"));
    s.set_batch_size(10);
    s.set_steps(10);
    return s;
  }
  fs::path top_;
  int counted_ = 0;
  absl::StatusOr<int64_t> count_ = 100;
};

bool Mentions(const absl::Status& st, const std::string& text) {
  return st.message().find(text) != std::string::npos;
}

// The outside review's finding: a NUL in job_dir passed the lexical check
// ("T/escaped\0/../../<T>/out/j" is under T/out to it) and the coordinator
// made T/escaped, which mkdir saw; a tensorboard_dir variant was refused
// after its directory was made.
TEST_F(CoordinatorPaths, ANulInAPathIsRefusedAndNothingIsMade) {
  Coordinator c(Options());
  const std::string name = top_.filename().string();
  JobSpec s = Train();
  s.set_job_dir(T("escaped") + "\0/../../"s + name + "/out/j");
  absl::StatusOr<std::string> id = c.Submit(s);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Mentions(id.status(), "job spec: job_dir \"")) << id.status();
  EXPECT_TRUE(Mentions(id.status(), "control character (byte 0x00")) << id.status();
  EXPECT_FALSE(fs::exists(T("escaped")));
  EXPECT_FALSE(fs::exists(T("out/j")));
  s = Train();
  s.set_tensorboard_dir(T("escaped-tb") + "\0/../../"s + name + "/out/tb");
  id = c.Submit(s);
  ASSERT_FALSE(id.ok());
  EXPECT_TRUE(Mentions(id.status(), "job spec: tensorboard_dir \"")) << id.status();
  EXPECT_FALSE(fs::exists(T("escaped-tb")));
  EXPECT_FALSE(fs::exists(T("out/tb")));
  EXPECT_EQ(counted_, 0);  // refused before the data was read
}

// No directory is made until every check that can refuse the job passed:
// the data, the eval data, the outputs of running jobs.
TEST_F(CoordinatorPaths, ARefusedJobLeavesNoDirectory) {
  CoordinatorOptions o = Options();
  o.jobs_root = T("out/jobs");
  Coordinator c(o);
  JobSpec s = Train();
  s.set_job_dir(T("out/a"));
  s.set_tensorboard_dir(T("out/a-tb"));
  count_ = absl::NotFoundError("input pattern matches no files");
  absl::StatusOr<std::string> id = c.Submit(s);
  ASSERT_FALSE(id.ok());
  EXPECT_TRUE(Mentions(id.status(), "job spec: data: input pattern")) << id.status();
  EXPECT_FALSE(fs::exists(T("out/a")));
  EXPECT_FALSE(fs::exists(T("out/a-tb")));
  // A job_dir from --jobs_root: its id is taken, its directory not made.
  s.clear_job_dir();
  s.clear_tensorboard_dir();
  id = c.Submit(s);
  ASSERT_FALSE(id.ok());
  EXPECT_FALSE(fs::exists(T("out/jobs"))) << "made for a refused job";
  // Refused once the data was counted: eval data that matches nothing.
  count_ = 100;
  s = Train();
  s.set_job_dir(T("out/b"));
  s.mutable_eval()->add_data(T("data/corpus/*.none"));
  id = c.Submit(s);
  ASSERT_FALSE(id.ok());
  EXPECT_TRUE(Mentions(id.status(), "job spec: eval.data: ")) << id.status();
  EXPECT_FALSE(fs::exists(T("out/b")));
  // Refused because a pending job writes there.
  s = Train();
  s.set_job_dir(T("out/c"));
  ASSERT_TRUE(c.Submit(s).ok());
  EXPECT_TRUE(fs::is_directory(T("out/c")));
  JobSpec other = Train();
  other.set_job_dir(T("out/d"));
  other.set_tensorboard_dir(T("out/d-tb"));
  other.set_export_path(T("out/c/model.safetensors"));  // c's export
  id = c.Submit(other);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(fs::exists(T("out/d")));
  EXPECT_FALSE(fs::exists(T("out/d-tb")));
  // Accepted: both made (tensorboard_dir written by the coordinator).
  other.clear_export_path();
  ASSERT_TRUE(c.Submit(other).ok());
  EXPECT_TRUE(fs::is_directory(T("out/d")));
  EXPECT_TRUE(fs::is_directory(T("out/d-tb")));
}

// The review's other finding: "<data_root>/.?/.?/.?/.?/etc/hostname" was
// accepted and the coordinator opened /etc/hostname (glibc's glob matches
// ".?" to ".."). Now refused before anything is read, as is a data file
// inside the root that is a link to /etc/hostname.
TEST_F(CoordinatorPaths, DataMatchesStayInTheirRoots) {
  Coordinator c(Options(/*fake_count=*/false));
  std::string up;
  for (const auto& part : fs::path(T("data"))) {
    if (part != "/") up += "/.?";
  }
  JobSpec s = Train();
  s.set_data(0, T("data") + up + "/etc/hostname");
  absl::StatusOr<std::string> id = c.Submit(s);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Mentions(id.status(), "job spec: data[0] \"" + T("data") + up +
                                        "/etc/hostname\": the glob character "
                                        "'?' is in the directory \".?\""))
      << id.status();
  s.set_data(0, T("da*/corpus/*.tfrecord"));
  EXPECT_TRUE(Mentions(c.Submit(s).status(), "'*' is in the directory \"da*\""));
  // A link inside the data root to a file outside: refused naming it, not
  // opened (the error is not a TFRecord one).
  fs::create_symlink("/etc/hostname", T("data/corpus/b.tfrecord"));
  id = c.Submit(Train());
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().message(),
            "job spec: data: input file \"" + T("data/corpus/b.tfrecord") +
                "\" resolves to /etc/hostname, outside --data_root " + T("data") +
                " or --output_root " + T("out"));
  // ".?" as the last component matches "..": the parent, outside.
  s = Train();
  s.set_data(0, T("data/.?"));
  id = c.Submit(s);
  ASSERT_FALSE(id.ok());
  EXPECT_TRUE(Mentions(id.status(), "input file \"" + T("data/..") +
                                        "\" resolves to " +
                                        fs::canonical(top_).string() + ", outside"))
      << id.status();
}

// Preprocess and eval items are files too: each match checked at submit,
// and again when an eval round's items are made later.
TEST_F(CoordinatorPaths, ItemsStayInTheirRoots) {
  Coordinator c(Options());
  Write(T("data/text/a.txt"));
  fs::create_symlink("/etc/hostname", T("data/text/b.txt"));
  JobSpec pre;
  pre.set_task(PREPROCESS);
  pre.add_data(T("data/text/*.txt"));
  pre.set_output_dir(T("out/records"));
  pre.mutable_preprocess()->set_vocab(T("data/vocab.txt"));
  absl::StatusOr<std::string> id = c.Submit(pre);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().message(),
            "job spec: data: input file \"" + T("data/text/b.txt") +
                "\" resolves to /etc/hostname, outside --data_root " + T("data") +
                " or --output_root " + T("out"));
  EXPECT_FALSE(fs::exists(T("out/records")));
  // A train job's eval data.
  JobSpec train = Train();
  train.set_job_dir(T("out/t"));
  train.mutable_eval()->add_data(T("data/text/*.txt"));
  id = c.Submit(train);
  ASSERT_FALSE(id.ok());
  EXPECT_TRUE(Mentions(id.status(), "job spec: eval.data: input file \"" +
                                        T("data/text/b.txt") + "\" resolves to "
                                        "/etc/hostname"))
      << id.status();
  EXPECT_FALSE(fs::exists(T("out/t")));
  // An eval job accepted, then a file swapped for a link before its round
  // is made (when an eval worker comes): the round fails the job, no item
  // is leased.
  fs::remove(T("data/text/b.txt"));
  Write(T("data/text/b.txt"));
  JobSpec eval;
  eval.set_task(EVAL);
  eval.add_data(T("data/text/*.txt"));
  eval.set_eval_checkpoint(T("out/ckpt/ckpt-7/manifest.json"));
  id = c.Submit(eval);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(c.Get(*id)->state(), PENDING);  // no eval worker yet
  fs::remove(T("data/text/b.txt"));
  fs::create_symlink("/etc/hostname", T("data/text/b.txt"));
  const std::string e = JoinAs(c, EVAL_ROLE);
  HeartbeatRequest r;
  r.set_member_id(e);
  absl::StatusOr<HeartbeatResponse> beat = SignedHeartbeat(c, r);
  ASSERT_TRUE(beat.ok()) << beat.status();
  EXPECT_FALSE(beat->assignment().has_item());
  const JobStatus st = *c.Get(*id);
  EXPECT_EQ(st.state(), FAILED);
  EXPECT_EQ(st.reason(), "eval round final: input file \"" + T("data/text/b.txt") +
                             "\" resolves to /etc/hostname, outside --data_root " +
                             T("data") + " or --output_root " + T("out"));
}

// MakeWorkItems itself: with roots every match is checked; without, none.
TEST_F(CoordinatorPaths, MakeWorkItemsChecksEveryMatch) {
  Write(T("data/text/a.txt"));
  fs::create_symlink(T("outside"), T("data/text/dir"));
  Write(T("outside/c.txt"));
  const PathRoots roots{T("data"), T("out")};
  EXPECT_EQ(MakeWorkItems({T("data/text/*.txt")}, 0, roots)->size(), 1u);
  fs::create_symlink(T("outside/c.txt"), T("data/text/c.txt"));
  absl::StatusOr<std::vector<WorkItem>> w =
      MakeWorkItems({T("data/text/*.txt")}, 0, roots);
  ASSERT_FALSE(w.ok());
  EXPECT_TRUE(Mentions(w.status(), "input file \"" + T("data/text/c.txt") + "\""));
  EXPECT_EQ(MakeWorkItems({T("data/text/*.txt")}, 0)->size(), 2u);  // no roots
}

}  // namespace
}  // namespace bertps
