// Every bertpsctl verb against a fake JobService served by a real gRPC server
// on 127.0.0.1.
#include "tools/bertpsctl.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace bertps {
namespace ctl {
namespace {

// Jobs in a map; WatchJob replays a scripted list of events per job.
class FakeJobService final : public JobService::Service {
 public:
  grpc::Status SubmitJob(grpc::ServerContext*, const SubmitJobRequest* req,
                         SubmitJobResponse* resp) override {
    absl::MutexLock l(&mu_);
    JobStatus s;
    s.set_id(absl::StrCat("job-", ++next_id_));
    *s.mutable_spec() = req->spec();
    s.set_state(PENDING);
    jobs_[s.id()] = s;
    resp->set_id(s.id());
    return grpc::Status::OK;
  }

  grpc::Status GetJob(grpc::ServerContext* ctx, const GetJobRequest* req,
                      JobStatus* resp) override {
    {
      absl::MutexLock l(&mu_);
      ++get_calls_;
    }
    if (Hang(ctx)) return grpc::Status(grpc::StatusCode::CANCELLED, "gone");
    absl::MutexLock l(&mu_);
    if (!fail_.ok()) return fail_;
    auto it = jobs_.find(req->id());
    if (it == jobs_.end()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("job ", req->id(), " not found"));
    }
    *resp = it->second;
    return grpc::Status::OK;
  }

  grpc::Status ListJobs(grpc::ServerContext*, const ListJobsRequest*,
                        ListJobsResponse* resp) override {
    absl::MutexLock l(&mu_);
    for (const auto& [id, s] : jobs_) *resp->add_jobs() = s;
    return grpc::Status::OK;
  }

  grpc::Status CancelJob(grpc::ServerContext*, const CancelJobRequest* req,
                         CancelJobResponse*) override {
    absl::MutexLock l(&mu_);
    auto it = jobs_.find(req->id());
    if (it == jobs_.end()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("job ", req->id(), " not found"));
    }
    it->second.set_state(CANCELLED);
    it->second.set_reason("cancelled by the user");
    return grpc::Status::OK;
  }

  grpc::Status WatchJob(grpc::ServerContext* ctx, const WatchJobRequest* req,
                        grpc::ServerWriter<JobEvent>* writer) override {
    std::vector<JobEvent> script;
    absl::Duration gap;
    {
      absl::MutexLock l(&mu_);
      if (jobs_.count(req->id()) == 0) {
        return grpc::Status(grpc::StatusCode::NOT_FOUND,
                            absl::StrCat("job ", req->id(), " not found"));
      }
      script = scripts_[req->id()];
      gap = gap_;
    }
    for (const JobEvent& e : script) {
      if (!SleepUnlessCancelled(ctx, gap)) return grpc::Status::CANCELLED;
      if (!writer->Write(e)) return grpc::Status::CANCELLED;
    }
    if (Hang(ctx)) return grpc::Status(grpc::StatusCode::CANCELLED, "gone");
    return grpc::Status::OK;
  }

  void Put(const JobStatus& s) {
    absl::MutexLock l(&mu_);
    jobs_[s.id()] = s;
  }
  void Script(const std::string& id, std::vector<JobEvent> events) {
    absl::MutexLock l(&mu_);
    scripts_[id] = std::move(events);
  }
  void SetGap(absl::Duration gap) {
    absl::MutexLock l(&mu_);
    gap_ = gap;
  }
  // A hung coordinator: GetJob and (after its script) WatchJob never answer.
  void SetHang(bool hang) {
    absl::MutexLock l(&mu_);
    hang_ = hang;
  }
  int get_calls() {
    absl::MutexLock l(&mu_);
    return get_calls_;
  }
  // GetJob answers this status (OK: as usual).
  void SetFailure(grpc::Status s) {
    absl::MutexLock l(&mu_);
    fail_ = std::move(s);
  }

 private:
  static bool SleepUnlessCancelled(grpc::ServerContext* ctx, absl::Duration d) {
    const absl::Time end = absl::Now() + d;
    while (absl::Now() < end) {
      if (ctx->IsCancelled()) return false;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return !ctx->IsCancelled();
  }
  bool Hang(grpc::ServerContext* ctx) {
    {
      absl::MutexLock l(&mu_);
      if (!hang_) return false;
    }
    while (!ctx->IsCancelled()) absl::SleepFor(absl::Milliseconds(5));
    return true;
  }

  absl::Mutex mu_;
  int next_id_ ABSL_GUARDED_BY(mu_) = 0;
  int get_calls_ ABSL_GUARDED_BY(mu_) = 0;
  bool hang_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status fail_ ABSL_GUARDED_BY(mu_);
  absl::Duration gap_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  std::map<std::string, JobStatus> jobs_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<JobEvent>> scripts_ ABSL_GUARDED_BY(mu_);
};

JobStatus Running(const std::string& id, int64_t step, int64_t total,
                  double loss) {
  JobStatus s;
  s.set_id(id);
  s.mutable_spec()->set_name("tiny-pretrain");
  s.mutable_spec()->set_model("tiny");
  s.mutable_spec()->set_batch_size(32);
  s.mutable_spec()->set_num_workers(2);
  s.mutable_spec()->set_num_ps_shards(1);
  s.mutable_spec()->set_task(PRETRAIN);
  s.set_state(RUNNING);
  s.mutable_progress()->set_step(step);
  s.mutable_progress()->set_total_steps(total);
  s.mutable_progress()->set_loss(loss);
  s.mutable_progress()->set_learning_rate(1e-4);
  s.mutable_progress()->set_examples_per_sec(1234);
  s.mutable_progress()->set_tokens_per_sec(157952);
  s.mutable_progress()->set_examples(step * 64);
  s.set_submit_time_ms(1700000000000);
  s.set_start_time_ms(1700000001000);
  for (int64_t i = 1; i <= step; ++i) {
    LossPoint* p = s.add_history();
    p->set_step(i);
    p->set_loss(10.0 - 0.05 * i);
    p->set_learning_rate(1e-4 * std::min<int64_t>(i, 10) / 10);
  }
  return s;
}

JobEvent Event(const JobStatus& s, const std::string& message) {
  JobEvent e;
  *e.mutable_status() = s;
  e.set_message(message);
  return e;
}

// Events of a job that runs 4 steps and ends in `final_state`.
std::vector<JobEvent> Story(const std::string& id, JobState final_state,
                            const std::string& reason) {
  std::vector<JobEvent> events;
  JobStatus s = Running(id, 0, 4, 0);
  s.set_state(PENDING);
  s.mutable_progress()->set_examples_per_sec(0);
  s.mutable_progress()->set_learning_rate(0);
  events.push_back(Event(s, "submitted"));
  for (int step = 0; step <= 3; ++step) {
    events.push_back(
        Event(Running(id, step, 4, 10.0 - step), step == 0 ? "started" : ""));
  }
  JobStatus end = Running(id, final_state == SUCCEEDED ? 4 : 3, 4, 6.0);
  end.set_state(final_state);
  end.set_reason(reason);
  end.set_end_time_ms(end.start_time_ms() + 42000);
  events.push_back(Event(end, "ended"));
  return events;
}

class BertpsctlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(&service_);
    server_ = b.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    options_.coordinator = absl::StrCat("127.0.0.1:", port);
    options_.timeout = absl::Seconds(5);
    stub_ = JobService::NewStub(grpc::CreateChannel(
        options_.coordinator, grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    service_.SetHang(false);
    server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  }

  std::string TempPath(const std::string& name) {
    const char* dir = std::getenv("TEST_TMPDIR");
    return absl::StrCat(dir ? dir : "/tmp", "/", name);
  }

  FakeJobService service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<JobService::Stub> stub_;
  CtlOptions options_;
  std::ostringstream out_, err_;
};

TEST_F(BertpsctlTest, SubmitPrintsTheIdOnly) {
  const std::string spec = TempPath("job.textproto");
  std::ofstream(spec) << "name: 'tiny-pretrain' task: PRETRAIN model: 'tiny'\n"
                         "data: 'data/*.tfrecord' steps: 100\n";
  EXPECT_EQ(CmdSubmit(stub_.get(), options_, spec, out_, err_), kExitOk)
      << err_.str();
  EXPECT_EQ(out_.str(), "job-1\n");
  EXPECT_EQ(err_.str(), "");
  // The spec went through with its defaults applied.
  JobStatus s;
  grpc::ClientContext ctx;
  GetJobRequest req;
  req.set_id("job-1");
  ASSERT_TRUE(stub_->GetJob(&ctx, req, &s).ok());
  EXPECT_EQ(s.spec().name(), "tiny-pretrain");
  EXPECT_EQ(s.spec().batch_size(), 32);
}

TEST_F(BertpsctlTest, SubmitRejectsABadSpecLocallyNamingTheField) {
  const std::string spec = TempPath("bad.textproto");
  std::ofstream(spec) << "data: 'x' steps: 10 batch_size: -4\n";
  EXPECT_EQ(CmdSubmit(stub_.get(), options_, spec, out_, err_), kExitError);
  EXPECT_EQ(out_.str(), "");
  EXPECT_TRUE(absl::StrContains(err_.str(), "batch_size")) << err_.str();
  EXPECT_TRUE(absl::StrContains(err_.str(), spec)) << err_.str();
  std::ostringstream out2, err2;
  EXPECT_EQ(CmdSubmit(stub_.get(), options_, TempPath("missing.textproto"),
                      out2, err2),
            kExitError);
  EXPECT_TRUE(absl::StrContains(err2.str(), "missing.textproto"));
}

TEST_F(BertpsctlTest, StatusTextAndJson) {
  JobStatus s = Running("job-7", 40, 100, 5.23);
  s.mutable_progress()->set_compute_ms(300);
  s.mutable_progress()->set_compute_cpu_ms(250);
  s.add_ps_addresses("10.0.0.1:7500");
  service_.Put(s);
  EXPECT_EQ(CmdStatus(stub_.get(), options_, "job-7", out_, err_), kExitOk);
  const std::string text = out_.str();
  EXPECT_TRUE(absl::StrContains(text, "job-7 (tiny-pretrain)")) << text;
  EXPECT_TRUE(absl::StrContains(text, "state      RUNNING")) << text;
  EXPECT_TRUE(absl::StrContains(text, "step       40/100 (40.0%)")) << text;
  EXPECT_TRUE(absl::StrContains(text, "loss       5.23")) << text;
  EXPECT_TRUE(absl::StrContains(text, "1234.0 ex/s")) << text;
  EXPECT_TRUE(absl::StrContains(text, "compute 300.0 ms (CPU 250.0 ms)"))
      << text;
  EXPECT_TRUE(absl::StrContains(text, "started")) << text;
  EXPECT_TRUE(absl::StrContains(text, "elapsed")) << text;
  EXPECT_TRUE(absl::StrContains(text, "10.0.0.1:7500")) << text;
  EXPECT_FALSE(absl::StrContains(text, "reason")) << text;

  CtlOptions json = options_;
  json.json = true;
  std::ostringstream out2, err2;
  EXPECT_EQ(CmdStatus(stub_.get(), json, "job-7", out2, err2), kExitOk);
  const nlohmann::json j = nlohmann::json::parse(out2.str());
  EXPECT_EQ(j["id"], "job-7");
  EXPECT_EQ(j["state"], "RUNNING");
  EXPECT_EQ(j["progress"]["step"], "40");  // protobuf JSON: int64 as string
  EXPECT_DOUBLE_EQ(j["progress"]["loss"].get<double>(), 5.23);
  EXPECT_EQ(j["spec"]["batch_size"], 32);
  EXPECT_EQ(j["history"].size(), 40u);

  std::ostringstream out3, err3;
  EXPECT_EQ(CmdStatus(stub_.get(), options_, "job-404", out3, err3),
            kExitError);
  EXPECT_EQ(err3.str(), "bertpsctl: no job job-404\n");
}

TEST_F(BertpsctlTest, StatusShowsTheReasonOfAFailedJob) {
  JobStatus s = Running("job-2", 3, 4, 6.0);
  s.set_state(FAILED);
  s.set_reason("worker 1: NaN gradient in bert.pooler.dense.weight");
  s.set_end_time_ms(s.start_time_ms() + 62000);
  service_.Put(s);
  EXPECT_EQ(CmdStatus(stub_.get(), options_, "job-2", out_, err_), kExitOk);
  EXPECT_TRUE(absl::StrContains(
      out_.str(), "reason     worker 1: NaN gradient in bert.pooler"))
      << out_.str();
  EXPECT_TRUE(absl::StrContains(out_.str(), "elapsed    1:02")) << out_.str();
}

TEST_F(BertpsctlTest, StatusShowsWhatAJobWaitsFor) {
  JobStatus s = Running("job-3", 7, 40, 5.0);
  s.set_waiting("an idle train worker for slot 1");
  s.set_waiting_since_ms(absl::ToUnixMillis(absl::Now()) - 65000);
  service_.Put(s);
  EXPECT_EQ(CmdStatus(stub_.get(), options_, "job-3", out_, err_), kExitOk);
  EXPECT_TRUE(absl::StrContains(
      out_.str(), "waiting    for an idle train worker for slot 1 (since "))
      << out_.str();
  EXPECT_TRUE(absl::StrContains(out_.str(), ", 1:05)\n")) << out_.str();
}

// gRPC's "metadata size exceeds limit" names no cause: bertpsctl says which.
TEST_F(BertpsctlTest, OversizedMetadataIsExplained) {
  service_.SetFailure(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                   "received initial metadata size exceeds "
                                   "limit"));
  EXPECT_EQ(CmdStatus(stub_.get(), options_, "job-1", out_, err_), kExitError);
  EXPECT_TRUE(absl::StrContains(
      err_.str(), "the call's metadata (its bearer token and headers) is larger "
                  "than gRPC's limit (8 KiB; tokens may be at most 4096 bytes)"))
      << err_.str();
}

// events: the job's log with times, progress-only events left out; --json
// one object per event. The backlog only: it returns for a running job.
TEST_F(BertpsctlTest, EventsListTheJobsLogWithTimes) {
  service_.Put(Running("job-1", 0, 4, 0));
  std::vector<JobEvent> story = Story("job-1", SUCCEEDED, "");
  const int64_t t0 = absl::ToUnixMillis(absl::Now());
  for (size_t i = 0; i < story.size(); ++i) story[i].set_time_ms(t0 + 1000 * i);
  story[2].set_message("step 2");
  story[3].set_message("worker 1 is taken over by member m-4");
  service_.Script("job-1", story);
  EXPECT_EQ(CmdEvents(stub_.get(), options_, "job-1", out_, err_), kExitOk)
      << err_.str();
  std::vector<std::string> lines =
      absl::StrSplit(out_.str(), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 4u) << out_.str();  // submitted, started, takeover, ended
  EXPECT_TRUE(absl::StartsWith(
      lines[0], absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::FromUnixMillis(t0),
                                 absl::LocalTimeZone())))
      << lines[0];
  EXPECT_TRUE(absl::StrContains(lines[0], "PENDING")) << lines[0];
  EXPECT_TRUE(absl::EndsWith(lines[0], "submitted")) << lines[0];
  EXPECT_TRUE(absl::EndsWith(lines[2], "worker 1 is taken over by member m-4"))
      << lines[2];
  EXPECT_EQ(out_.str().find("step 2\n"), std::string::npos) << out_.str();
  std::ostringstream json, err;
  CtlOptions j = options_;
  j.json = true;
  EXPECT_EQ(CmdEvents(stub_.get(), j, "job-1", json, err), kExitOk);
  const std::vector<std::string> objects =
      absl::StrSplit(json.str(), '\n', absl::SkipEmpty());
  ASSERT_EQ(objects.size(), 4u);
  const nlohmann::json first = nlohmann::json::parse(objects[0]);
  EXPECT_EQ(first["time_ms"], t0);
  EXPECT_EQ(first["message"], "submitted");
  std::ostringstream none, err2;
  EXPECT_EQ(CmdEvents(stub_.get(), options_, "job-404", none, err2), kExitError);
  EXPECT_EQ(err2.str(), "bertpsctl: no job job-404\n");
}

// resubmit never writes into the ended job's directory: outputs under it
// are cleared; a job_dir named after the job (--jobs_root) is left to the
// coordinator, another gets a sibling of its own.
TEST(BertpsctlResubmit, GetsADirectoryOfItsOwn) {
  JobSpec a;
  a.set_job_dir("/srv/jobs/job-000007");
  a.mutable_checkpoint()->set_dir("/srv/jobs/job-000007/checkpoints");
  a.mutable_checkpoint()->set_restore("/srv/jobs/job-000007/checkpoints/ckpt-4/manifest.json");
  a.set_export_path("/srv/jobs/job-000007/model.safetensors");
  a.set_tensorboard_dir("/elsewhere/tb");
  GiveOwnDirectory("job-000007", &a);
  EXPECT_EQ(a.job_dir(), "");
  EXPECT_EQ(a.checkpoint().dir(), "");
  EXPECT_EQ(a.export_path(), "");
  EXPECT_EQ(a.tensorboard_dir(), "/elsewhere/tb");  // not under it: kept
  EXPECT_EQ(a.checkpoint().restore(),
            "/srv/jobs/job-000007/checkpoints/ckpt-4/manifest.json");
  JobSpec b;
  b.set_job_dir("/srv/runs/phase1/");
  b.set_output_dir("/srv/runs/phase1/output");
  GiveOwnDirectory("job-000009", &b);
  EXPECT_TRUE(absl::StartsWith(b.job_dir(), "/srv/runs/phase1.resubmit-"))
      << b.job_dir();
  EXPECT_EQ(b.output_dir(), "");
  JobSpec c;
  c.mutable_checkpoint()->set_dir("/x/ckpt");
  GiveOwnDirectory("job-1", &c);
  EXPECT_EQ(c.checkpoint().dir(), "/x/ckpt");  // no job_dir: as it was
}

// resubmit: an ended job's spec again, --from_checkpoint restoring the newest
// checkpoint it reported; a running job is refused.
TEST_F(BertpsctlTest, ResubmitAnEndedJobFromItsCheckpoint) {
  JobStatus failed = Running("job-7", 40, 100, 3.0);
  failed.set_state(FAILED);
  failed.mutable_spec()->set_name("long run");
  failed.mutable_spec()->mutable_checkpoint()->set_dir("/runs/ckpt");
  failed.set_last_checkpoint("/runs/ckpt/ckpt-40/manifest.json");
  failed.set_last_checkpoint_version(40);
  service_.Put(failed);
  CtlOptions o = options_;
  o.from_checkpoint = true;
  EXPECT_EQ(CmdResubmit(stub_.get(), o, "job-7", out_, err_), kExitOk)
      << err_.str();
  const std::string id(absl::StripAsciiWhitespace(out_.str()));
  EXPECT_EQ(err_.str(), "bertpsctl: resubmitted job-7 as " + id +
                            " from the checkpoint of step 40\n");
  std::ostringstream status, e1;
  CtlOptions js = options_;
  js.json = true;
  ASSERT_EQ(CmdStatus(stub_.get(), js, id, status, e1), kExitOk);
  const nlohmann::json got = nlohmann::json::parse(status.str());
  EXPECT_EQ(got["spec"]["name"], "long run");
  EXPECT_EQ(got["spec"]["checkpoint"]["restore"],
            "/runs/ckpt/ckpt-40/manifest.json");
  EXPECT_EQ(got["spec"]["checkpoint"]["dir"], "/runs/ckpt");  // its own
  service_.Put(Running("job-8", 3, 10, 5.0));
  std::ostringstream out2, err2;
  EXPECT_EQ(CmdResubmit(stub_.get(), options_, "job-8", out2, err2), kExitError);
  EXPECT_TRUE(absl::StrContains(err2.str(), "job-8 is RUNNING")) << err2.str();
  JobStatus no_ckpt = failed;
  no_ckpt.set_id("job-9");
  no_ckpt.clear_last_checkpoint();
  service_.Put(no_ckpt);
  std::ostringstream out3, err3;
  EXPECT_EQ(CmdResubmit(stub_.get(), o, "job-9", out3, err3), kExitError);
  EXPECT_TRUE(absl::StrContains(err3.str(), "no checkpoint")) << err3.str();
  // A finished job's newest checkpoint is its last step: nothing to resume.
  JobStatus done = failed;
  done.set_id("job-10");
  done.set_state(SUCCEEDED);
  done.set_last_checkpoint_version(100);
  service_.Put(done);
  std::ostringstream out4, err4;
  EXPECT_EQ(CmdResubmit(stub_.get(), o, "job-10", out4, err4), kExitError);
  EXPECT_TRUE(absl::StrContains(err4.str(), "nothing is left to train"))
      << err4.str();
}

TEST_F(BertpsctlTest, StatusShowsWhoComputesEachWorkerSlot) {
  JobStatus s = Running("job-4", 7, 40, 5.0);
  for (int k = 0; k < 4; ++k) {
    SlotHolder* h = s.add_slots();
    h->set_slot(k);
    if (k != 2) h->set_member("m-000007");
    if (k == 1) {
      h->set_shared(true);
      h->set_own_slot(0);
      h->set_since_ms(absl::ToUnixMillis(absl::Now()));
    }
    h->set_done(k == 3);
  }
  service_.Put(s);
  EXPECT_EQ(CmdStatus(stub_.get(), options_, "job-4", out_, err_), kExitOk);
  EXPECT_TRUE(absl::StrContains(
      out_.str(), "workers    0 m-000007, 1 m-000007 (taken over beside slot "
                  "0 since "))
      << out_.str();
  EXPECT_TRUE(absl::StrContains(out_.str(), "), 2 free, 3 m-000007 (done)\n"))
      << out_.str();
}

TEST_F(BertpsctlTest, StatusShowsEachShardsPrimaryAndBackups) {
  JobStatus s = Running("job-5", 7, 40, 5.0);
  s.mutable_spec()->set_replicas(2);
  ShardReplicas* r0 = s.add_shards();
  r0->set_shard(0);
  r0->set_primary("m1");
  r0->set_applied(91);
  r0->add_backups("m3");
  r0->add_backups_applied(90);
  ShardReplicas* r1 = s.add_shards();
  r1->set_shard(1);
  r1->set_primary("m4");
  r1->set_term(1);
  r1->set_applied(91);
  s.set_failovers(1);
  service_.Put(s);
  EXPECT_EQ(CmdStatus(stub_.get(), options_, "job-5", out_, err_), kExitOk);
  EXPECT_TRUE(absl::StrContains(
      out_.str(), "replicas   0 m1 @ 91, backup m3 @ 90; 1 m4 @ 91 (term 1), "
                  "no backup\n"))
      << out_.str();
  EXPECT_TRUE(absl::StrContains(out_.str(), "failovers  1 (primaries replaced"))
      << out_.str();
}

TEST_F(BertpsctlTest, StatusNamesTheDaemonsOfSlices) {
  JobStatus s = Running("job-6", 7, 40, 5.0);
  s.mutable_spec()->set_replicas(2);
  ShardReplicas* r0 = s.add_shards();
  r0->set_shard(0);
  r0->set_primary("m1");
  r0->set_primary_daemon("10.0.0.1:7000");
  r0->set_applied(12);
  r0->add_backups("m4");
  r0->add_backups_applied(12);
  r0->add_backup_daemons("10.0.0.2:7000");
  service_.Put(s);
  EXPECT_EQ(CmdStatus(stub_.get(), options_, "job-6", out_, err_), kExitOk);
  EXPECT_TRUE(absl::StrContains(
      out_.str(), "replicas   0 m1 [10.0.0.1:7000] @ 12, backup m4 "
                  "[10.0.0.2:7000] @ 12\n"))
      << out_.str();
}

TEST_F(BertpsctlTest, ListTextAndJson) {
  service_.Put(Running("job-1", 40, 100, 5.23));
  JobStatus p = Running("job-2", 0, 50, 0);
  p.set_state(PENDING);
  p.mutable_spec()->set_name("second");
  service_.Put(p);
  EXPECT_EQ(CmdList(stub_.get(), options_, out_, err_), kExitOk);
  std::vector<std::string> lines =
      absl::StrSplit(out_.str(), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u) << out_.str();
  EXPECT_TRUE(absl::StartsWith(lines[0], "ID")) << lines[0];
  std::vector<std::string> f1 =
      absl::StrSplit(lines[1], ' ', absl::SkipEmpty());
  EXPECT_EQ(f1, (std::vector<std::string>{"job-1", "tiny-pretrain", "RUNNING",
                                          "40/100", "5.23"}));
  std::vector<std::string> f2 =
      absl::StrSplit(lines[2], ' ', absl::SkipEmpty());
  EXPECT_EQ(f2, (std::vector<std::string>{"job-2", "second", "PENDING", "0/50",
                                          "-"}));

  CtlOptions json = options_;
  json.json = true;
  std::ostringstream out2, err2;
  EXPECT_EQ(CmdList(stub_.get(), json, out2, err2), kExitOk);
  const nlohmann::json j = nlohmann::json::parse(out2.str());
  ASSERT_EQ(j["jobs"].size(), 2u);
  EXPECT_EQ(j["jobs"][1]["state"], "PENDING");
}

// A job named, and failed, with newlines and escape sequences prints as one
// line each in status and list: nothing reaches the terminal raw.
TEST_F(BertpsctlTest, ControlCharactersFromTheServerAreEscaped) {
  JobStatus s = Running("job-7", 1, 4, 6.0);
  s.mutable_spec()->set_name("evil\nstate     SUCCEEDED\x1b]0;pwned\x07\x1b[2J");
  s.set_state(FAILED);
  s.set_reason("bad \xc2\x9b" "31m \u202eenil");
  service_.Put(s);
  EXPECT_EQ(CmdStatus(stub_.get(), options_, "job-7", out_, err_), kExitOk);
  const std::string text = out_.str();
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
  EXPECT_EQ(text.find('\x07'), std::string::npos) << text;
  EXPECT_EQ(text.find("\xc2\x9b"), std::string::npos) << text;
  EXPECT_TRUE(absl::StrContains(
      text, "job        job-7 (evil\\nstate     SUCCEEDED\\e]0;pwned\\x07"
            "\\e[2J)\n"))
      << text;
  EXPECT_TRUE(absl::StrContains(text, "reason     bad \\u009b31m \\u202eenil\n"))
      << text;
  std::ostringstream list, err;
  EXPECT_EQ(CmdList(stub_.get(), options_, list, err), kExitOk);
  EXPECT_EQ(list.str().find('\x1b'), std::string::npos) << list.str();
  std::vector<std::string> lines =
      absl::StrSplit(list.str(), '\n', absl::SkipEmpty());
  EXPECT_EQ(lines.size(), 2u) << list.str();  // the header and one job
}

TEST_F(BertpsctlTest, WatchPlainOutputAndExitCodes) {
  struct Case {
    JobState state;
    const char* reason;
    int code;
  };
  for (const Case& c :
       {Case{SUCCEEDED, "", kExitOk},
        Case{FAILED, "worker 0 lost its lease", kExitJobFailed},
        Case{CANCELLED, "cancelled by the user", kExitJobCancelled}}) {
    const std::string id = absl::StrCat("job-", JobState_Name(c.state));
    service_.Put(Running(id, 0, 4, 0));
    service_.Script(id, Story(id, c.state, c.reason));
    std::ostringstream out, err;
    CtlOptions every_event = options_;
    every_event.watch_line_every = absl::ZeroDuration();
    EXPECT_EQ(CmdWatch(stub_.get(), every_event, id, out, err), c.code)
        << err.str();
    std::vector<std::string> lines =
        absl::StrSplit(out.str(), '\n', absl::SkipEmpty());
    ASSERT_EQ(lines.size(), 7u) << out.str();  // 6 events + the final line
    EXPECT_EQ(lines[0], "PENDING step 0/4 loss - (submitted)");
    EXPECT_TRUE(absl::StartsWith(lines[2],
                                 "RUNNING step 1/4 loss 9 lr 0.0001 "
                                 "1234 ex/s ETA "))
        << lines[2];
    EXPECT_TRUE(absl::StartsWith(lines[5], JobState_Name(c.state))) << lines[5];
    EXPECT_TRUE(absl::StartsWith(
        lines[6], absl::StrCat("job ", id, " ", JobState_Name(c.state))))
        << lines[6];
    EXPECT_TRUE(absl::StrContains(lines[6], c.reason)) << lines[6];
    EXPECT_TRUE(absl::StrContains(lines[6], "ran 0:42")) << lines[6];
    EXPECT_EQ(out.str().find('\r'), std::string::npos);
    EXPECT_EQ(err.str(), "");
  }
}

// Not on a terminal, progress alone prints a line at most every few
// seconds: a log of a long job is not a line per step. Events with a
// message and state changes always print.
TEST_F(BertpsctlTest, WatchPlainOutputThrottlesProgressLines) {
  service_.Put(Running("job-1", 0, 4, 0));
  std::vector<JobEvent> story = Story("job-1", SUCCEEDED, "");
  story[2].set_message("step 2");    // progress, as the coordinator says it
  story[3].set_message("worker 1 is taken over by member m-000004");
  service_.Script("job-1", story);
  EXPECT_EQ(CmdWatch(stub_.get(), options_, "job-1", out_, err_), kExitOk);
  std::vector<std::string> lines =
      absl::StrSplit(out_.str(), '\n', absl::SkipEmpty());
  // submitted, started, the takeover, SUCCEEDED, the final line.
  ASSERT_EQ(lines.size(), 5u) << out_.str();
  EXPECT_TRUE(absl::StrContains(lines[1], "(started)")) << lines[1];
  EXPECT_TRUE(absl::StrContains(lines[2], "(worker 1 is taken over")) << lines[2];
  EXPECT_TRUE(absl::StartsWith(lines[3], "SUCCEEDED")) << lines[3];
  EXPECT_EQ(out_.str().find("(step 2)"), std::string::npos) << out_.str();
}

TEST_F(BertpsctlTest, WatchOnATtyRedrawsOneProgressLine) {
  service_.Put(Running("job-1", 0, 4, 0));
  service_.Script("job-1", Story("job-1", SUCCEEDED, ""));
  CtlOptions tty = options_;
  tty.tty = true;
  EXPECT_EQ(CmdWatch(stub_.get(), tty, "job-1", out_, err_), kExitOk);
  const std::string s = out_.str();
  EXPECT_TRUE(absl::StrContains(s,
                                "\r\x1b[K[##########..........] step 2/4 "
                                "loss 8 1234 ex/s ETA "))
      << s;
  EXPECT_TRUE(absl::StrContains(s, "[####################] SUCCEEDED step 4/4"))
      << s;
  // State changes scroll; progress does not.
  std::vector<std::string> lines = absl::StrSplit(s, '\n', absl::SkipEmpty());
  EXPECT_EQ(lines.size(), 5u) << s;  // PENDING, RUNNING, SUCCEEDED, bar, final
  EXPECT_TRUE(absl::StartsWith(lines.back(), "job job-1 SUCCEEDED"));
}

TEST_F(BertpsctlTest, WatchUnknownJob) {
  EXPECT_EQ(CmdWatch(stub_.get(), options_, "job-9", out_, err_), kExitError);
  EXPECT_EQ(err_.str(), "bertpsctl: no job job-9\n");
}

TEST_F(BertpsctlTest, WatchSurvivesASilentButLiveCoordinator) {
  service_.Put(Running("job-1", 0, 4, 0));
  service_.Script("job-1", Story("job-1", SUCCEEDED, ""));
  service_.SetGap(absl::Milliseconds(150));
  CtlOptions o = options_;
  o.watch_probe_after = absl::Milliseconds(40);
  EXPECT_EQ(CmdWatch(stub_.get(), o, "job-1", out_, err_), kExitOk)
      << err_.str();
  EXPECT_GE(service_.get_calls(), 3);  // probes answered: the watch went on
}

TEST_F(BertpsctlTest, WatchNoticesAHungCoordinator) {
  service_.Put(Running("job-1", 0, 4, 0));
  service_.Script("job-1", {Event(Running("job-1", 1, 4, 9.0), "")});
  service_.SetHang(true);
  CtlOptions o = options_;
  o.watch_probe_after = absl::Milliseconds(200);
  o.timeout = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  EXPECT_EQ(CmdWatch(stub_.get(), o, "job-1", out_, err_), kExitError);
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_TRUE(absl::StrContains(err_.str(), "lost the coordinator"))
      << err_.str();
  EXPECT_TRUE(absl::StrContains(err_.str(), options_.coordinator))
      << err_.str();
  EXPECT_TRUE(absl::StrContains(out_.str(), "step 1/4")) << out_.str();
}

TEST_F(BertpsctlTest, WatchAStreamThatEndsEarlyAsksGetJob) {
  // The stream closes after one RUNNING event; GetJob says SUCCEEDED.
  JobStatus done = Running("job-1", 4, 4, 5.0);
  done.set_state(SUCCEEDED);
  service_.Put(done);
  service_.Script("job-1", {Event(Running("job-1", 1, 4, 9.0), "")});
  EXPECT_EQ(CmdWatch(stub_.get(), options_, "job-1", out_, err_), kExitOk);
  EXPECT_TRUE(absl::StrContains(out_.str(), "job job-1 SUCCEEDED"));
  // ... and a job still running then is an error, not a hang.
  service_.Put(Running("job-2", 1, 4, 9.0));
  service_.Script("job-2", {Event(Running("job-2", 1, 4, 9.0), "")});
  std::ostringstream out, err;
  EXPECT_EQ(CmdWatch(stub_.get(), options_, "job-2", out, err), kExitError);
  EXPECT_TRUE(absl::StrContains(err.str(), "while it is RUNNING")) << err.str();
}

TEST_F(BertpsctlTest, CancelKnownAndUnknownJob) {
  service_.Put(Running("job-1", 1, 4, 9.0));
  EXPECT_EQ(CmdCancel(stub_.get(), options_, "job-1", out_, err_), kExitOk);
  EXPECT_EQ(out_.str(), "cancelled job-1\n");
  std::ostringstream out, err;
  EXPECT_EQ(CmdCancel(stub_.get(), options_, "job-x", out, err), kExitError);
  EXPECT_EQ(err.str(), "bertpsctl: no job job-x\n");
  EXPECT_EQ(out.str(), "");
}

TEST_F(BertpsctlTest, MetricsJsonAndText) {
  service_.Put(Running("job-1", 25, 100, 8.75));
  CtlOptions json = options_;
  json.json = true;
  EXPECT_EQ(CmdMetrics(stub_.get(), json, "job-1", out_, err_), kExitOk);
  const std::string text = out_.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1);  // one object
  const nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_EQ(j["id"], "job-1");
  EXPECT_EQ(j["state"], "RUNNING");
  EXPECT_EQ(j["progress"]["step"], 25);  // a number, not a string
  EXPECT_EQ(j["progress"]["total_steps"], 100);
  EXPECT_DOUBLE_EQ(j["progress"]["loss"].get<double>(), 8.75);
  EXPECT_DOUBLE_EQ(j["progress"]["examples_per_sec"].get<double>(), 1234);
  ASSERT_EQ(j["history"].size(), 25u);
  EXPECT_EQ(j["history"][24]["step"], 25);
  EXPECT_DOUBLE_EQ(j["history"][24]["loss"].get<double>(), 10.0 - 0.05 * 25);
  EXPECT_DOUBLE_EQ(j["history"][24]["learning_rate"].get<double>(), 1e-4);

  std::ostringstream out, err;
  EXPECT_EQ(CmdMetrics(stub_.get(), options_, "job-1", out, err), kExitOk);
  std::vector<std::string> lines =
      absl::StrSplit(out.str(), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 27u);  // comment, header, 25 rows
  EXPECT_EQ(lines[1], "step\tloss\tlearning_rate");
  EXPECT_EQ(lines[2], "1\t9.95\t1e-05");
}

TEST_F(BertpsctlTest, PlotWritesAnSvgWithEveryPoint) {
  service_.Put(Running("job-1", 60, 100, 7.0));
  CtlOptions o = options_;
  o.out = TempPath("loss.svg");
  std::remove(o.out.c_str());
  EXPECT_EQ(CmdPlot(stub_.get(), o, "job-1", out_, err_), kExitOk)
      << err_.str();
  EXPECT_EQ(out_.str(),
            absl::StrCat("wrote ", o.out, " (60 points, steps 1-60)\n"));
  std::ifstream in(o.out);
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string svg = buf.str();
  EXPECT_TRUE(absl::StartsWith(svg, "<?xml"));
  EXPECT_TRUE(absl::StrContains(svg, "</svg>"));
  EXPECT_TRUE(absl::StrContains(svg,
                                "data-name=\"training loss\" "
                                "data-points=\"60\""))
      << svg;
  EXPECT_TRUE(absl::StrContains(svg,
                                "data-name=\"learning rate\" "
                                "data-points=\"60\""));
  EXPECT_TRUE(absl::StrContains(svg, "job job-1 (tiny-pretrain)"));

  // Eval rounds: points on the loss axis, and a line per round in status.
  JobStatus with_eval = Running("job-3", 60, 100, 7.0);
  for (int step : {20, 40}) {
    EvalMetrics* e = with_eval.add_evals();
    e->set_round(absl::StrCat("step-", step));
    e->set_step(step);
    e->set_examples(500);
    e->set_mlm_loss(6.0 - step / 20.0);
    e->set_nsp_loss(0.5);
    e->set_mlm_accuracy(0.1 * step / 20);
  }
  service_.Put(with_eval);
  o.out = TempPath("eval.svg");
  std::ostringstream out3, err3;
  EXPECT_EQ(CmdPlot(stub_.get(), o, "job-3", out3, err3), kExitOk) << err3.str();
  std::ifstream in3(o.out);
  std::stringstream buf3;
  buf3 << in3.rdbuf();
  EXPECT_TRUE(absl::StrContains(buf3.str(),
                                "data-name=\"eval loss (held out)\" "
                                "data-points=\"2\""))
      << buf3.str();
  std::ostringstream out4, err4;
  EXPECT_EQ(CmdStatus(stub_.get(), options_, "job-3", out4, err4), kExitOk);
  EXPECT_TRUE(absl::StrContains(out4.str(), "step-40 (step 40, 500 examples): "
                                            "MLM accuracy 0.2000"))
      << out4.str();
  CtlOptions jo = options_;
  jo.json = true;
  std::ostringstream out5, err5;
  EXPECT_EQ(CmdMetrics(stub_.get(), jo, "job-3", out5, err5), kExitOk) << err5.str();
  auto mj = nlohmann::json::parse(out5.str());
  ASSERT_EQ(mj["evals"].size(), 2u) << out5.str();
  EXPECT_EQ(mj["evals"][1]["round"], "step-40");
  // -o yaml: the same document as YAML, strings quoted.
  CtlOptions yo = options_;
  yo.yaml = true;
  std::ostringstream out6, err6;
  EXPECT_EQ(CmdMetrics(stub_.get(), yo, "job-3", out6, err6), kExitOk) << err6.str();
  EXPECT_TRUE(absl::StrContains(out6.str(), "id: \"job-3\"")) << out6.str();
  EXPECT_TRUE(absl::StrContains(out6.str(), "round: \"step-40\"")) << out6.str();
  std::ostringstream out7, err7;
  EXPECT_EQ(CmdStatus(stub_.get(), yo, "job-3", out7, err7), kExitOk);
  EXPECT_TRUE(absl::StrContains(out7.str(), "state: \"")) << out7.str();
  EXPECT_FALSE(absl::StrContains(out7.str(), "{")) << out7.str();

  // No history yet: a clear error, no file.
  service_.Put(Running("job-2", 0, 100, 0));
  std::ostringstream out2, err2;
  o.out = TempPath("empty.svg");
  EXPECT_EQ(CmdPlot(stub_.get(), o, "job-2", out2, err2), kExitError);
  EXPECT_TRUE(absl::StrContains(err2.str(), "no loss history")) << err2.str();
  EXPECT_FALSE(std::ifstream(o.out).good());
}

// A port nothing listens on: bind an ephemeral port, then close it.
int DeadPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

TEST(BertpsctlMainTest, UnreachableCoordinatorFailsQuicklyNamingTheAddress) {
  const std::string addr = absl::StrCat("127.0.0.1:", DeadPort());
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"--coordinator", addr, "status", "job-1"},
           {"list", "--coordinator=" + addr},
           {"--coordinator", addr, "watch", "job-1"},
           {"--coordinator", addr, "cancel", "job-1"}}) {
    std::ostringstream out, err;
    const absl::Time start = absl::Now();
    EXPECT_EQ(Main(args, nullptr, false, out, err), kExitError)
        << absl::StrJoin(args, " ");
    EXPECT_LT(absl::Now() - start, absl::Seconds(5));
    EXPECT_TRUE(absl::StrContains(
        err.str(), absl::StrCat("cannot reach the coordinator at ", addr)))
        << err.str();
  }
  // The address also comes from the environment.
  std::ostringstream out, err;
  EXPECT_EQ(Main({"list"}, addr.c_str(), false, out, err), kExitError);
  EXPECT_TRUE(absl::StrContains(err.str(), addr)) << err.str();
}

TEST(BertpsctlMainTest, BadCommandLinesExitWith2) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{},
                                             {"frobnicate"},
                                             {"status"},
                                             {"status", "a", "b"},
                                             {"list", "extra"},
                                             {"--bogus", "list"},
                                             {"--timeout_s", "0", "list"},
                                             {"--timeout_s=abc", "list"},
                                             {"plot", "job-1", "-o"},
                                             {"--json=maybe", "list"}}) {
    std::ostringstream out, err;
    EXPECT_EQ(Main(args, nullptr, false, out, err), kExitUsage)
        << absl::StrJoin(args, " ");
    EXPECT_TRUE(absl::StrContains(err.str(), "usage: bertpsctl")) << err.str();
  }
  std::ostringstream out, err;
  EXPECT_EQ(Main({"--help"}, nullptr, false, out, err), kExitOk);
  EXPECT_TRUE(absl::StrContains(out.str(), "watch JOB"));
}

// -o is the output format (kubectl's style) for every verb but plot, whose
// -o is its file; --json is -o json; anything else is refused.
TEST(BertpsctlParseTest, OutputFormats) {
  auto c = ParseCommandLine({"status", "j", "-o", "yaml"}, "coord:1");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->options.yaml);
  EXPECT_FALSE(c->options.json);
  c = ParseCommandLine({"list", "-o", "json"}, "coord:1");
  ASSERT_TRUE(c.ok() && c->options.json && !c->options.yaml);
  c = ParseCommandLine({"events", "j", "-o=table"}, "coord:1");
  ASSERT_TRUE(c.ok() && !c->options.json && !c->options.yaml);
  c = ParseCommandLine({"plot", "j", "-o", "yaml"}, "coord:1");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->options.out, "yaml");  // a file named yaml
  EXPECT_FALSE(c->options.yaml);
  c = ParseCommandLine({"status", "j", "-o", "xml"}, "coord:1");
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(absl::StrContains(c.status().message(), "json, yaml or table"))
      << c.status();
}

TEST(BertpsctlParseTest, FlagsAnywhereAndDefaults) {
  auto c = ParseCommandLine({"plot", "job-3", "-o", "x.svg", "--timeout_s=2.5"},
                            "coord:1");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->verb, "plot");
  EXPECT_EQ(c->args, std::vector<std::string>{"job-3"});
  EXPECT_EQ(c->options.out, "x.svg");
  EXPECT_EQ(c->options.timeout, absl::Milliseconds(2500));
  EXPECT_EQ(c->options.coordinator, "coord:1");
  c = ParseCommandLine({"--coordinator", "h:2", "status", "--json", "j"},
                       "coord:1");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->options.coordinator, "h:2");
  EXPECT_TRUE(c->options.json);
  EXPECT_EQ(c->args, std::vector<std::string>{"j"});
  c = ParseCommandLine({"list"}, nullptr);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->options.coordinator, kDefaultCoordinator);
  EXPECT_EQ(c->options.timeout, absl::Seconds(30));
  c = ParseCommandLine({"status", "--", "-weird-id"}, nullptr);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->args, std::vector<std::string>{"-weird-id"});
}

TEST(BertpsctlParseTest, SecurityFlags) {
  auto c = ParseCommandLine({"--tls_ca", "ca.crt", "--token_file=admin.token",
                             "list", "--tls_server_name", "bertps",
                             "--tls_cert=c.crt", "--tls_key", "c.key"},
                            nullptr);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->options.security.tls_ca, "ca.crt");
  EXPECT_EQ(c->options.security.token_file, "admin.token");
  EXPECT_EQ(c->options.security.tls_server_name, "bertps");
  EXPECT_EQ(c->options.security.tls_cert, "c.crt");
  EXPECT_EQ(c->options.security.tls_key, "c.key");
  EXPECT_FALSE(ParseCommandLine({"--tls_ca=", "list"}, nullptr).ok());
  // A token without TLS is refused before anything is dialed.
  std::ostringstream out, err;
  EXPECT_EQ(Main({"--token_file", "/nonexistent/admin.token", "list"}, nullptr,
                 false, out, err),
            kExitError);
  EXPECT_TRUE(absl::StrContains(err.str(), "token_file")) << err.str();
}

TEST(BertpsctlFormatTest, ProgressLineAndEta) {
  JobStatus s = Running("j", 40, 100, 5.23);
  EXPECT_EQ(ProgressLine(s, true, absl::Seconds(42)),
            "[########............] step 40/100 loss 5.23 1234 ex/s ETA 0:42");
  EXPECT_EQ(ProgressLine(s, false, std::nullopt),
            "RUNNING step 40/100 loss 5.23 lr 0.0001 1234 ex/s ETA ?");
  EXPECT_EQ(FormatClock(absl::Seconds(3723)), "1:02:03");
  EXPECT_EQ(FormatClock(absl::Seconds(-5)), "0:00");
  StepRate r;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  EXPECT_FALSE(r.Eta(0, 100).has_value());
  r.Observe(t0, 10);
  r.Observe(t0 + absl::Seconds(1), 10);  // no progress: ignored
  r.Observe(t0 + absl::Seconds(5), 20);
  ASSERT_TRUE(r.Eta(20, 100).has_value());
  EXPECT_EQ(*r.Eta(20, 100), absl::Seconds(40));
}

}  // namespace
}  // namespace ctl
}  // namespace bertps
