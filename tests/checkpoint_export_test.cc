// bertpsctl export: the model of any checkpoint written without a job. The
// golden checkpoint (tests/fixtures/checkpoint-v1) exported this way must
// give the golden export (tests/fixtures/export-v1, what a train job's
// export_path holds for those weights) byte for byte; a step is picked by
// number; an existing destination, a missing step and a corrupt shard file
// are refused with nothing written.
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/model/bert_config.h"
#include "common/model/hf_export.h"
#include "common/model/params.h"
#include "common/model/weights.h"
#include "common/ps/checkpoint.h"
#include "common/ps/checkpoint_export.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"
#include "tools/bertpsctl.h"

namespace bertps {
namespace {

namespace fs = std::filesystem;

std::string Fixture(const std::string& name) {
  return absl::StrCat("tests/fixtures/", name);
}

std::string Tmp(const std::string& name) {
  const std::string d =
      absl::StrCat(::testing::TempDir(), "/export-",
                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::create_directories(d);
  return absl::StrCat(d, "/", name);
}

std::string Bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A copy of the golden checkpoint that a test may damage.
std::string CopyOfCheckpoint() {
  const std::string dir = Tmp("ckpt");
  fs::copy(Fixture("checkpoint-v1"), dir, fs::copy_options::recursive);
  return dir;
}

TEST(CheckpointExport, TheGoldenCheckpointGivesTheGoldenExport) {
  const std::string out = Tmp("model");
  HfExportOptions hf;
  hf.vocab_path = Fixture("export-v1/vocab.txt");
  hf.do_lower_case = true;
  absl::StatusOr<std::string> manifest =
      ps::FindManifest(Fixture("checkpoint-v1"), std::nullopt);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  absl::StatusOr<int64_t> step = ps::ExportCheckpointModel(*manifest, out, hf);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(*step, 3);
  int files = 0;
  for (const auto& e : fs::directory_iterator(Fixture("export-v1"))) {
    const std::string name = e.path().filename().string();
    if (name == "README.md") continue;
    ++files;
    EXPECT_EQ(Bytes(out + "/" + name), Bytes(e.path().string())) << name;
  }
  EXPECT_EQ(files, 4);
  // Nothing else was written beside it.
  int entries = 0;
  for (const auto& e : fs::directory_iterator(fs::path(out).parent_path())) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 1);

  // The weights file alone.
  const std::string file = Tmp("model.safetensors");
  step = ps::ExportCheckpointModel(*manifest, file, HfExportOptions());
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(Bytes(file), Bytes(Fixture("export-v1/model.safetensors")));
}

TEST(CheckpointExport, AStepIsPickedByNumberAndAMissingOneIsNamed) {
  absl::StatusOr<std::string> m = ps::FindManifest(Fixture("checkpoint-v1"), 3);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(absl::EndsWith(*m, "/ckpt-3/manifest.json")) << *m;
  m = ps::FindManifest(Fixture("checkpoint-v1"), 7);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(m.status().message(), "it holds steps 3"))
      << m.status();
  // A manifest named directly, and the step it is of.
  const std::string path = Fixture("checkpoint-v1/ckpt-3/manifest.json");
  EXPECT_TRUE(ps::FindManifest(path, std::nullopt).ok());
  EXPECT_TRUE(ps::FindManifest(path, 3).ok());
  EXPECT_FALSE(ps::FindManifest(path, 4).ok());
  EXPECT_FALSE(ps::FindManifest(Tmp("nothing-here"), std::nullopt).ok());
}

TEST(CheckpointExport, NothingIsOverwrittenOrLeftHalfWritten) {
  const absl::StatusOr<std::string> manifest =
      ps::FindManifest(Fixture("checkpoint-v1"), std::nullopt);
  ASSERT_TRUE(manifest.ok());
  // An existing destination: refused, untouched.
  const std::string existing = Tmp("existing");
  fs::create_directories(existing);
  std::ofstream(existing + "/keep") << "mine";
  absl::StatusOr<int64_t> st =
      ps::ExportCheckpointModel(*manifest, existing, HfExportOptions());
  EXPECT_EQ(st.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(Bytes(existing + "/keep"), "mine");
  // A shard file damaged (one byte flipped): its CRC-32C fails, and no
  // directory appears at the destination.
  const std::string copy = CopyOfCheckpoint();
  const std::string shard = copy + "/ckpt-3/shard-1-of-2.safetensors";
  std::string bytes = Bytes(shard);
  bytes[bytes.size() / 2] ^= 0x10;
  std::ofstream(shard, std::ios::binary | std::ios::trunc) << bytes;
  const std::string out = Tmp("from-damaged");
  st = ps::ExportCheckpointModel(copy + "/ckpt-3/manifest.json", out,
                                 HfExportOptions());
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(absl::StrContains(st.status().message(), "shard-1-of-2"))
      << st.status();
  EXPECT_FALSE(fs::exists(out));
  for (const auto& e : fs::directory_iterator(fs::path(out).parent_path())) {
    EXPECT_FALSE(absl::StrContains(e.path().string(), ".tmp")) << e.path();
  }
  // A vocabulary of the wrong size: refused before anything is written.
  HfExportOptions hf;
  hf.vocab_path = Tmp("short-vocab.txt");
  std::ofstream(hf.vocab_path) << "[PAD]\n[UNK]\n";
  st = ps::ExportCheckpointModel(*manifest, out, hf);
  EXPECT_FALSE(st.ok());
  EXPECT_FALSE(fs::exists(out));
}

// The job's coordinator, as bertpsctl sees it: GetJob only.
class OneJob final : public JobService::Service {
 public:
  explicit OneJob(JobStatus job) : job_(std::move(job)) {}
  grpc::Status GetJob(grpc::ServerContext*, const GetJobRequest* req,
                      JobStatus* resp) override {
    if (req->id() != job_.id()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such job");
    }
    *resp = job_;
    return grpc::Status::OK;
  }

 private:
  const JobStatus job_;
};

TEST(CheckpointExport, BertpsctlExportsAJobsCheckpointOrAPath) {
  JobStatus job;
  job.set_id("job-000007-abc");
  job.set_state(SUCCEEDED);
  job.mutable_spec()->mutable_checkpoint()->set_dir(CopyOfCheckpoint());
  job.mutable_spec()->set_vocab(Fixture("export-v1/vocab.txt"));
  OneJob service(job);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(port, 0);
  auto stub = JobService::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  ctl::CtlOptions o;
  std::ostringstream out, err;
  const std::string dest = Tmp("job-model");
  ASSERT_EQ(ctl::CmdExport(stub.get(), o, job.id(), dest, out, err),
            ctl::kExitOk)
      << err.str();
  EXPECT_EQ(out.str(),
            absl::StrCat("exported step 3 of ", job.id(), " to ", dest, "\n"));
  EXPECT_EQ(Bytes(dest + "/model.safetensors"),
            Bytes(Fixture("export-v1/model.safetensors")));
  EXPECT_EQ(Bytes(dest + "/vocab.txt"), Bytes(Fixture("export-v1/vocab.txt")));
  // --step of a checkpoint that is not there: the steps that are.
  out.str(""), err.str("");
  o.step = 9;
  EXPECT_EQ(ctl::CmdExport(stub.get(), o, job.id(), Tmp("x"), out, err),
            ctl::kExitError);
  EXPECT_TRUE(absl::StrContains(err.str(), "no checkpoint of step 9"))
      << err.str();
  // A path needs no coordinator.
  out.str(""), err.str("");
  o.step.reset();
  const std::string file = Tmp("alone.safetensors");
  ASSERT_EQ(ctl::CmdExport(nullptr, o, Fixture("checkpoint-v1"), file, out,
                           err),
            ctl::kExitOk)
      << err.str();
  EXPECT_EQ(Bytes(file), Bytes(Fixture("export-v1/model.safetensors")));
  // The command line.
  absl::StatusOr<ctl::CommandLine> cmd = ctl::ParseCommandLine(
      {"export", "job-1", "/tmp/out", "--step", "40", "--vocab", "v.txt"},
      nullptr);
  ASSERT_TRUE(cmd.ok()) << cmd.status();
  EXPECT_EQ(cmd->options.step, 40);
  EXPECT_EQ(cmd->options.vocab, "v.txt");
  EXPECT_FALSE(ctl::ParseCommandLine({"export", "job-1"}, nullptr).ok());
  EXPECT_FALSE(
      ctl::ParseCommandLine({"export", "job-1", "d", "--step", "-1"}, nullptr)
          .ok());
}

}  // namespace
}  // namespace bertps
