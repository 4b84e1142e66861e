// WatchJob over a real gRPC server on 127.0.0.1: many watchers hold no
// thread of the coordinator while they wait, each gets every event in
// order and the job's end; a cancelled watch ends at once.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/process_cpu.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/service.h"

namespace bertps {
namespace {

// A watch on the client's callback API: the events' messages, the end.
class Watch final : public grpc::ClientReadReactor<JobEvent> {
 public:
  Watch(JobService::Stub* stub, const std::string& id, int seconds) {
    ctx_.set_deadline(std::chrono::system_clock::now() +
                      std::chrono::seconds(seconds));
    req_.set_id(id);
    stub->async()->WatchJob(&ctx_, &req_, this);
    StartRead(&event_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    messages_.push_back(event_.message());
    StartRead(&event_);
  }
  void OnDone(const grpc::Status& s) override {
    status_ = s;
    done_.Notify();
  }
  grpc::ClientContext ctx_;
  WatchJobRequest req_;
  JobEvent event_;
  std::vector<std::string> messages_;
  grpc::Status status_;
  absl::Notification done_;
};

class WatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions o;
    o.count_examples = [](const JobSpec&) -> absl::StatusOr<int64_t> {
      return 100;
    };
    coordinator_ = std::make_unique<Coordinator>(o);
    service_ = std::make_unique<JobServiceImpl>(coordinator_.get());
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(service_.get());
    server_ = b.BuildAndStart();
    ASSERT_NE(port, 0);
    stub_ = JobService::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
    JobSpec s;
    s.set_task(PRETRAIN);
    s.add_data("data/*.tfrecord");
    s.set_batch_size(10);
    s.set_steps(10);
    s.set_num_ps_shards(1);
    s.set_num_workers(1);
    absl::StatusOr<std::string> id = coordinator_->Submit(s);
    ASSERT_TRUE(id.ok()) << id.status();
    id_ = *id;
  }
  void TearDown() override { server_->Shutdown(); }

  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<JobServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<JobService::Stub> stub_;
  std::string id_;
};

TEST_F(WatchTest, ManyWatchersShareOneThreadAndSeeTheEnd) {
  {  // connected, the transport's threads started
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    GetJobRequest req;
    req.set_id(id_);
    JobStatus st;
    ASSERT_TRUE(stub_->GetJob(&ctx, req, &st).ok());
  }
  const int before = ProcessThreadCount();
  constexpr int kWatchers = 64;
  std::vector<std::unique_ptr<Watch>> watches;
  for (int i = 0; i < kWatchers; ++i) {
    watches.push_back(std::make_unique<Watch>(stub_.get(), id_, 60));
  }
  for (int k = 0; k < 1000 && coordinator_->watchers() < kWatchers; ++k) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(coordinator_->watchers(), kWatchers);
  const int during = ProcessThreadCount();
  EXPECT_LE(during - before, 8) << before << " threads before, " << during
                                << " with " << kWatchers << " watching";
  ASSERT_TRUE(coordinator_->Cancel(id_).ok());
  for (auto& w : watches) {
    ASSERT_TRUE(w->done_.WaitForNotificationWithTimeout(absl::Seconds(30)));
    EXPECT_TRUE(w->status_.ok()) << w->status_.error_message();
    ASSERT_GE(w->messages_.size(), 2u);
    EXPECT_EQ(w->messages_.back(), "CANCELLED: cancelled by request");
    EXPECT_EQ(w->messages_, watches[0]->messages_);  // all the same, in order
  }
  EXPECT_EQ(coordinator_->watchers(), 0);
}

TEST_F(WatchTest, ACancelledWatchEndsAtOnceAndAnUnknownJobIsNotFound) {
  Watch w(stub_.get(), id_, 60);
  for (int k = 0; k < 1000 && coordinator_->watchers() < 1; ++k) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(coordinator_->watchers(), 1);
  const absl::Time start = absl::Now();
  w.ctx_.TryCancel();
  ASSERT_TRUE(w.done_.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(w.status_.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  for (int k = 0; k < 500 && coordinator_->watchers() > 0; ++k) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(coordinator_->watchers(), 0);
  Watch unknown(stub_.get(), "no-such-job", 10);
  ASSERT_TRUE(unknown.done_.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(unknown.status_.error_code(), grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace bertps
