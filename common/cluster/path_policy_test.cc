#include "common/cluster/path_policy.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>

#include "gtest/gtest.h"

namespace bertps {
namespace {

using namespace std::string_literals;  // "\0" inside a path

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

// --- rules that hold with and without roots --------------------------------

bool Mentions(const absl::Status& st, absl::string_view text) {
  return st.message().find(std::string(text)) != std::string::npos;
}

// Every path field: (field name, setter).
std::vector<std::pair<std::string, std::function<void(JobSpec*, std::string)>>>
PathFields() {
  return {
      {"data[1]", [](JobSpec* s, std::string p) { s->add_data(p); }},
      {"eval.data[0]",
       [](JobSpec* s, std::string p) { s->mutable_eval()->add_data(p); }},
      {"model", [](JobSpec* s, std::string p) { s->set_model(p + ".json"); }},
      {"init_weights", [](JobSpec* s, std::string p) { s->set_init_weights(p); }},
      {"eval_checkpoint",
       [](JobSpec* s, std::string p) { s->set_eval_checkpoint(p); }},
      {"checkpoint.restore",
       [](JobSpec* s, std::string p) { s->mutable_checkpoint()->set_restore(p); }},
      {"preprocess.vocab",
       [](JobSpec* s, std::string p) { s->mutable_preprocess()->set_vocab(p); }},
      {"vocab", [](JobSpec* s, std::string p) { s->set_vocab(p); }},
      {"preprocess.augment.wordnet_dir",
       [](JobSpec* s, std::string p) {
         s->mutable_preprocess()->mutable_augment()->set_wordnet_dir(p);
       }},
      {"checkpoint.dir",
       [](JobSpec* s, std::string p) { s->mutable_checkpoint()->set_dir(p); }},
      {"export_path", [](JobSpec* s, std::string p) { s->set_export_path(p); }},
      {"output_dir", [](JobSpec* s, std::string p) { s->set_output_dir(p); }},
      {"tensorboard_dir",
       [](JobSpec* s, std::string p) { s->set_tensorboard_dir(p); }},
      {"eval.predictions_dir",
       [](JobSpec* s, std::string p) {
         s->mutable_eval()->set_predictions_dir(p);
       }},
      {"job_dir", [](JobSpec* s, std::string p) { s->set_job_dir(p); }},
  };
}

// A NUL byte passed the lexical check (the name ends there for the system
// calls: "/tmp/x\0/../../srv/out/j" is /srv/out/j to the check and /tmp/x to
// mkdir); no control character reaches a system call, roots or not.
TEST(PathPolicy, ControlCharactersAreRefusedInEveryPathField) {
  const PathRoots roots{"/srv/data", "/srv/out"};
  for (const auto& [field, set] : PathFields()) {
    for (const std::string& bad :
         {"/srv/out/x\0/../../../srv/out/j"s,
          std::string("/srv/out/a\nb"), std::string("/srv/out/a\x1b]0;b"),
          std::string("/srv/out/a\x7f" "b")}) {
      for (const PathRoots& r : {PathRoots{}, roots}) {
        JobSpec s = Spec();
        set(&s, bad);
        const absl::Status st = CheckJobPaths(s, r);
        EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << field;
        EXPECT_TRUE(Mentions(st, "job spec: " + field + " \""))
            << field << ": " << st;
        EXPECT_TRUE(Mentions(st, "control character")) << st;
        // Shown escaped: the message itself holds no control character.
        for (char c : st.message()) {
          EXPECT_FALSE(static_cast<unsigned char>(c) < 0x20) << st;
        }
      }
    }
  }
  JobSpec s = Spec();
  s.set_job_dir("/tmp/x\0/../../srv/out/j"s);
  EXPECT_EQ(std::string(CheckJobPaths(s, roots).message()),
            "job spec: job_dir \"/tmp/x\\x00/../../srv/out/j\" holds a control "
            "character (byte 0x00 at offset 6); a path may not");
}

// glibc's glob() matches ".?" to "..": a pattern with glob characters in a
// directory walks out of any root, so they are allowed only in the last
// component (and "\\", which unescapes "\\.\\." to "..", counts as one).
TEST(PathPolicy, GlobCharactersOnlyInTheLastComponentOfADataPattern) {
  const PathRoots roots{"/srv/data", "/srv/out"};
  for (const PathRoots& r : {PathRoots{}, roots}) {
    JobSpec s = Spec();
    s.set_data(0, "/srv/data/.?/.?/.?/.?/etc/hostname");
    absl::Status st = CheckJobPaths(s, r);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(st.message(),
              "job spec: data[0] \"/srv/data/.?/.?/.?/.?/etc/hostname\": the "
              "glob character '?' is in the directory \".?\"; only the last "
              "component of a data pattern may hold *, ?, [ or \\");
    s.set_data(0, "/srv/data/*/part-*.tfrecord");
    EXPECT_TRUE(Mentions(CheckJobPaths(s, r), "data[0]"));
    EXPECT_TRUE(Mentions(CheckJobPaths(s, r), "'*' is in the directory \"*\""));
    s.set_data(0, "/srv/data/[a-z]x/a.tfrecord");
    EXPECT_TRUE(Mentions(CheckJobPaths(s, r), "'[' is in the directory"));
    s.set_data(0, "/srv/data/\\.\\./etc/a.tfrecord");
    EXPECT_TRUE(Mentions(CheckJobPaths(s, r), "'\\' is in the directory"));
    s = Spec();
    s.mutable_eval()->add_data("/srv/data/held?out/*.tfrecord");
    EXPECT_TRUE(Mentions(CheckJobPaths(s, r), "eval.data[0]"));
    // In the last component, and in paths that are not patterns: fine.
    s = Spec();
    s.set_data(0, "/srv/data/corpus/part-[0-9]?-*.tfrecord");
    s.set_export_path("/srv/out/job1/model-*.safetensors");
    EXPECT_TRUE(CheckJobPaths(s, r).ok()) << CheckJobPaths(s, r);
  }
  JobSpec s = Spec();
  s.set_data(0, "corpus/*/a.tfrecord");  // relative, unconfined: the rule holds
  EXPECT_TRUE(Mentions(CheckJobPaths(s, {}), "'*' is in the directory"));
}

// --- links resolved ------------------------------------------------------

// A fresh directory tree per test: T/data (the data root, with a file),
// T/out (the output root), T/outside (beyond both).
class PathTree : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    top_ = std::filesystem::path(tmp ? tmp : "/tmp") /
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(top_);
    for (const char* d : {"data/corpus", "out", "outside"}) {
      std::filesystem::create_directories(top_ / d);
    }
    Write(T("data/corpus/a.tfrecord"));
    Write(T("outside/secret"));
    roots_ = {T("data"), T("out")};
  }
  std::string T(const std::string& rel) const { return (top_ / rel).string(); }
  static void Write(const std::string& path) { std::ofstream(path) << "x"; }
  static void Link(const std::string& target, const std::string& at) {
    std::filesystem::create_symlink(target, at);
  }
  JobSpec Good() const {
    JobSpec s;
    s.set_task(PRETRAIN);
    s.add_data(T("data/corpus/*.tfrecord"));
    s.mutable_checkpoint()->set_dir(T("out/job1/ckpt"));
    s.set_export_path(T("out/job1/final.safetensors"));
    return s;
  }
  std::filesystem::path top_;
  PathRoots roots_;
};

TEST_F(PathTree, ResolvePathFollowsLinksAndKeepsTheRestThatIsNotThereYet) {
  const std::string real = std::filesystem::canonical(top_).string();
  EXPECT_EQ(*ResolvePath(T("data/corpus/a.tfrecord")),
            real + "/data/corpus/a.tfrecord");
  EXPECT_EQ(*ResolvePath(T("out/new/./deeper/x")), real + "/out/new/deeper/x");
  EXPECT_EQ(*ResolvePath(T("data/corpus/../corpus/a.tfrecord")),
            real + "/data/corpus/a.tfrecord");
  EXPECT_EQ(*ResolvePath("/"), "/");
  Link(T("outside"), T("out/escape"));
  EXPECT_EQ(*ResolvePath(T("out/escape/ck/ckpt-1")), real + "/outside/ck/ckpt-1");
  // ".." after a link goes where the kernel goes: the link target's parent.
  Link(T("outside/secret"), T("data/corpus/b.tfrecord"));
  EXPECT_EQ(*ResolvePath(T("data/corpus/b.tfrecord")), real + "/outside/secret");
  Link(T("data/corpus"), T("outside/c"));
  Link(T("outside/c"), T("out/c"));
  EXPECT_EQ(*ResolvePath(T("out/c/../secret")), real + "/data/secret");
  // ".." below a part that does not exist: a link made there later would
  // decide where it goes.
  absl::StatusOr<std::string> r = ResolvePath(T("out/job9/../job1"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "\"..\" after " + T("out/job9") + ", which does not exist yet");
  // A link to nothing: writing through it would create its target.
  Link(T("outside/not-yet"), T("out/dangling"));
  r = ResolvePath(T("out/dangling"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), T("out/dangling") + " is a symbolic link to nothing");
  EXPECT_FALSE(ResolvePath(T("out/dangling/x")).ok());
}

TEST_F(PathTree, ALinkPlantedInsideARootPointingOutIsRefused) {
  EXPECT_TRUE(CheckJobPaths(Good(), roots_).ok()) << CheckJobPaths(Good(), roots_);
  const std::string real = std::filesystem::canonical(top_).string();
  Link("/etc", T("data/etc"));
  Link(T("outside"), T("out/escape"));
  // As an input.
  JobSpec s = Good();
  s.set_init_weights(T("data/etc/hostname"));
  absl::Status st = CheckJobPaths(s, roots_);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "job spec: init_weights \"" + T("data/etc/hostname") +
                              "\" resolves to /etc/hostname, outside "
                              "--data_root " + T("data") + (T("data") == real + "/data" ? "" : " (" + real + "/data)") +
                              " or --output_root " + T("out") + (T("out") == real + "/out" ? "" : " (" + real + "/out)"));
  s = Good();
  s.set_data(0, T("data/etc/host*"));
  EXPECT_TRUE(Mentions(CheckJobPaths(s, roots_), "data[0]")) << CheckJobPaths(s, roots_);
  EXPECT_TRUE(Mentions(CheckJobPaths(s, roots_), "resolves to /etc/host*"));
  // As an output, existing or below the link.
  s = Good();
  s.mutable_checkpoint()->set_dir(T("out/escape/ckpt"));
  st = CheckJobPaths(s, roots_);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Mentions(st, "job spec: checkpoint.dir \"" + T("out/escape/ckpt") +
                               "\" resolves to " + real + "/outside/ckpt, "
                               "outside --output_root " + T("out")))
      << st;
  s = Good();
  s.set_tensorboard_dir(T("out/escape"));
  EXPECT_TRUE(Mentions(CheckJobPaths(s, roots_), "tensorboard_dir"));
  // An output may not be written under the data root through a link either.
  Link(T("data"), T("out/to-data"));
  s = Good();
  s.set_output_dir(T("out/to-data/records"));
  EXPECT_TRUE(Mentions(CheckJobPaths(s, roots_), "output_dir"));
  // Links that stay inside are fine; so is a root that is itself a link.
  Link(T("data/corpus"), T("data/alias"));
  s = Good();
  s.set_data(0, T("data/alias/*.tfrecord"));
  EXPECT_TRUE(CheckJobPaths(s, roots_).ok()) << CheckJobPaths(s, roots_);
  Link(T("out"), T("out-link"));
  s = Good();
  s.mutable_checkpoint()->set_dir(T("out-link/job1/ckpt"));
  s.set_export_path(T("out-link/job1/final.safetensors"));
  EXPECT_TRUE(CheckJobPaths(s, {T("data"), T("out-link")}).ok())
      << CheckJobPaths(s, {T("data"), T("out-link")});
  // A link to nothing, and ".." below what is not there yet.
  Link(T("outside/new"), T("out/dangling"));
  s = Good();
  s.set_export_path(T("out/dangling"));
  EXPECT_EQ(CheckJobPaths(s, roots_).message(),
            "job spec: export_path \"" + T("out/dangling") + "\": " +
                T("out/dangling") + " is a symbolic link to nothing");
  s = Good();
  s.set_export_path(T("out/job9/../job1/x"));
  EXPECT_TRUE(Mentions(CheckJobPaths(s, roots_), "which does not exist yet"));
}

// Every file a data pattern matched is resolved and checked before it is
// opened: a linked file inside the data root pointing out, and what ".?"
// matches ("..").
TEST_F(PathTree, AMatchThatResolvesOutsideIsRefused) {
  EXPECT_TRUE(CheckInputFile("input file", T("data/corpus/a.tfrecord"), roots_).ok());
  Link("/etc/hostname", T("data/corpus/b.tfrecord"));
  absl::Status st = CheckInputFile("input file", T("data/corpus/b.tfrecord"), roots_);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Mentions(st, "input file \"" + T("data/corpus/b.tfrecord") +
                               "\" resolves to /etc/hostname, outside --data_root"))
      << st;
  EXPECT_FALSE(CheckInputFile("input file", T("data/.."), roots_).ok());
  EXPECT_FALSE(CheckInputFile("input file", T("data/corpus/../../outside/secret"),
                              roots_).ok());
  // Earlier jobs' outputs may be read.
  Write(T("out/records.tfrecord"));
  EXPECT_TRUE(CheckInputFile("input file", T("out/records.tfrecord"), roots_).ok());
  // Unconfined: anything.
  EXPECT_TRUE(CheckInputFile("input file", "/etc/hostname", {}).ok());
}

// A member checks its assignment again before it opens or creates
// anything: links may have changed since the submit.
TEST_F(PathTree, AMemberChecksItsAssignmentWithTheRootsItIsSent) {
  Assignment a;
  *a.mutable_spec() = Good();
  a.add_data_files()->set_path(T("data/corpus/a.tfrecord"));
  a.mutable_item()->set_input(T("data/corpus/a.tfrecord"));
  a.mutable_item()->set_checkpoint(T("out/job1/ckpt/ckpt-4/manifest.json"));
  EXPECT_TRUE(CheckAssignmentPaths(a).ok());  // no roots: nothing checked
  a.set_data_root(T("data"));
  a.set_output_root(T("out"));
  EXPECT_TRUE(CheckAssignmentPaths(a).ok()) << CheckAssignmentPaths(a);
  // The export's directory became a link out after the submit.
  Link(T("outside"), T("out/job1"));
  absl::Status st = CheckAssignmentPaths(a);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Mentions(st, "job spec: checkpoint.dir")) << st;
  std::filesystem::remove(T("out/job1"));
  std::filesystem::create_directories(T("out/job1/ckpt"));
  EXPECT_TRUE(CheckAssignmentPaths(a).ok()) << CheckAssignmentPaths(a);
  // A data file swapped for a link out.
  Link("/etc/hostname", T("data/corpus/b.tfrecord"));
  Assignment b = a;
  b.add_data_files()->set_path(T("data/corpus/b.tfrecord"));
  EXPECT_TRUE(Mentions(CheckAssignmentPaths(b), "data file 1 \"" +
                                                     T("data/corpus/b.tfrecord") +
                                                     "\" resolves to /etc/hostname"))
      << CheckAssignmentPaths(b);
  // An item's input, an item's checkpoint.
  b = a;
  b.mutable_item()->set_input(T("data/corpus/b.tfrecord"));
  EXPECT_TRUE(Mentions(CheckAssignmentPaths(b), "item input")) << CheckAssignmentPaths(b);
  b = a;
  b.mutable_item()->set_checkpoint("/etc/hostname");
  EXPECT_TRUE(Mentions(CheckAssignmentPaths(b), "item checkpoint"));
  // The spec is checked whole: a control character, a glob in a directory.
  b = a;
  b.mutable_spec()->set_init_weights("/x\0"s);
  EXPECT_TRUE(Mentions(CheckAssignmentPaths(b), "init_weights"));
  b = a;
  b.mutable_spec()->set_data(0, T("data/.?/.?/etc/hostname"));
  EXPECT_TRUE(Mentions(CheckAssignmentPaths(b), "data[0]"));
  // One root is enough to confine.
  b = a;
  b.clear_data_root();
  b.mutable_item()->set_checkpoint("/etc/hostname");
  EXPECT_FALSE(CheckAssignmentPaths(b).ok());
}

}  // namespace
}  // namespace bertps
