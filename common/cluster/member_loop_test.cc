// The one member loop with a fake coordinator channel and a fake clock:
// heartbeats at the coordinator's interval (at once when the role has
// news), unanswered ones kept and retried with backoff inside the member
// timeout, the give-up (the role stops its work, the loop goes on and says
// so once the coordinator is back), re-announcement on registering again,
// the end of the loop with and without a leave.
#include "common/cluster/member_loop.h"

#include <deque>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace bertps {
namespace {

// The coordinator as the loop sees it: each heartbeat answered by the next
// scripted outcome (the last one repeats).
class FakeChannel : public MemberChannel {
 public:
  absl::StatusOr<Assignment> Heartbeat(HeartbeatRequest r) override {
    if (!gave_up_.empty()) r.set_gave_up(gave_up_);
    sent.push_back(r);
    absl::StatusOr<Assignment> out = outcomes.front();
    if (outcomes.size() > 1) outcomes.pop_front();
    if (out.ok()) {
      gave_up_.clear();
      if (register_again) {
        register_again = false;
        announced.push_back(announce_());
      }
    }
    return out;
  }
  absl::Status Leave(HeartbeatRequest r) override {
    left.push_back(r);
    return absl::OkStatus();
  }
  absl::Duration interval() const override { return absl::Milliseconds(500); }
  absl::Duration member_timeout() const override { return timeout; }
  const std::string& member_id() const override { return id; }
  void set_announce(std::function<MemberRun()> a) override {
    announce_ = std::move(a);
  }
  void set_gave_up(std::string note) override { gave_up_ = std::move(note); }

  std::deque<absl::StatusOr<Assignment>> outcomes;
  std::vector<HeartbeatRequest> sent;
  std::vector<HeartbeatRequest> left;
  std::vector<MemberRun> announced;
  bool register_again = false;
  absl::Duration timeout = absl::Seconds(10);
  std::string id = "m1";

 private:
  std::function<MemberRun()> announce_;
  std::string gave_up_;
};

// A role that counts: reports to send, what it was told, whether it works.
class FakeRole : public MemberRole {
 public:
  void Fill(HeartbeatRequest* r) override {
    for (int64_t s : to_report) r->add_steps()->set_step(s);
    to_report.clear();
  }
  void Unsent(const HeartbeatRequest& sent) override {
    for (const StepReport& s : sent.steps()) to_report.push_back(s.step());
  }
  bool Apply(const Assignment& a) override {
    applied.push_back(a);
    working = !a.stop();
    if (stop_after > 0 && static_cast<int>(applied.size()) >= stop_after) {
      loop->Stop();
    }
    return !(exit_on_stop && a.stop());
  }
  MemberRun Running() override {
    MemberRun run;
    if (working) run.set_job_id("job-1");
    return run;
  }
  void GiveUp() override {
    working = false;
    gave_up = true;
  }
  void End(HeartbeatRequest* last) override {
    ended = true;
    last->set_job_id("job-1");
  }
  bool Urgent() override { return urgent-- > 0; }

  std::vector<int64_t> to_report;
  std::vector<Assignment> applied;
  bool working = false;
  bool gave_up = false;
  bool ended = false;
  bool exit_on_stop = false;
  int stop_after = 0;
  int urgent = 0;
  MemberLoop* loop = nullptr;
};

Assignment Job() {
  Assignment a;
  a.set_job_id("job-1");
  return a;
}

struct Harness {
  FakeChannel channel;
  FakeRole role;
  absl::Time now = absl::FromUnixSeconds(1000);
  std::vector<absl::Duration> slept;
  std::unique_ptr<MemberLoop> loop;

  void Make(absl::Duration give_up = absl::ZeroDuration()) {
    MemberLoopOptions o;
    o.give_up = give_up;
    o.now = [this] { return now; };
    o.sleep = [this](absl::Duration d) {
      slept.push_back(d);
      now += d;
    };
    loop = std::make_unique<MemberLoop>(&channel, &role, o);
    role.loop = loop.get();
  }
};

TEST(MemberLoop, HeartbeatsAtTheIntervalAndSoonerWithNews) {
  Harness h;
  h.channel.outcomes = {Job()};
  h.role.stop_after = 4;
  h.role.urgent = 1;  // the first answer brings news: the next goes at once
  h.Make();
  ASSERT_TRUE(h.loop->Run().ok());
  EXPECT_EQ(h.channel.sent.size(), 4u);
  ASSERT_EQ(h.slept.size(), 2u);  // none after the urgent one, none at stop
  EXPECT_EQ(h.slept[0], absl::Milliseconds(500));
  EXPECT_TRUE(h.role.ended);
  ASSERT_EQ(h.channel.left.size(), 1u);  // Stop(): it leaves
  EXPECT_EQ(h.channel.left[0].job_id(), "job-1");
}

TEST(MemberLoop, UnansweredHeartbeatsKeepTheirReportsAndBackOff) {
  Harness h;
  h.channel.timeout = absl::Milliseconds(900);
  h.channel.outcomes = {absl::UnavailableError("down"),
                        absl::UnavailableError("down"),
                        absl::UnavailableError("down"),
                        absl::UnavailableError("down"), Job()};
  h.role.to_report = {7};
  h.role.stop_after = 1;
  h.Make();
  ASSERT_TRUE(h.loop->Run().ok());
  ASSERT_EQ(h.channel.sent.size(), 5u);
  // The report rode every attempt until one was answered.
  for (const HeartbeatRequest& r : h.channel.sent) {
    ASSERT_EQ(r.steps_size(), 1);
    EXPECT_EQ(r.steps(0).step(), 7);
  }
  // 100, 200, then capped at a third of the member timeout (300 ms).
  ASSERT_GE(h.slept.size(), 4u);
  EXPECT_EQ(h.slept[0], absl::Milliseconds(100));
  EXPECT_EQ(h.slept[1], absl::Milliseconds(200));
  EXPECT_EQ(h.slept[2], absl::Milliseconds(300));
  EXPECT_EQ(h.slept[3], absl::Milliseconds(300));
}

TEST(MemberLoop, GivesUpItsWorkButNotTheCoordinator) {
  Harness h;
  h.channel.outcomes = {Job()};
  for (int i = 0; i < 200; ++i) {
    h.channel.outcomes.push_back(absl::UnavailableError("down"));
  }
  h.channel.outcomes.push_back(Job());
  h.role.stop_after = 2;
  h.Make(/*give_up=*/absl::Seconds(30));
  ASSERT_TRUE(h.loop->Run().ok());
  EXPECT_TRUE(h.role.gave_up);
  // It kept trying after the give-up, and the heartbeat that got through
  // said why its work stopped.
  EXPECT_EQ(h.channel.sent.size(), 202u);
  const HeartbeatRequest& back = h.channel.sent.back();
  EXPECT_TRUE(absl::StrContains(back.gave_up(), "stopped its work"))
      << back.gave_up();
  EXPECT_FALSE(h.loop->gave_up());
  // Only once.
  EXPECT_EQ(h.channel.sent[1].gave_up(), "");
}

TEST(MemberLoop, NoGiveUpByDefault) {
  Harness h;
  h.channel.outcomes = {Job()};
  for (int i = 0; i < 5000; ++i) {
    h.channel.outcomes.push_back(absl::UnavailableError("down"));
  }
  h.channel.outcomes.push_back(Job());
  h.role.stop_after = 2;
  h.Make();
  ASSERT_TRUE(h.loop->Run().ok());
  EXPECT_GT(h.now - absl::FromUnixSeconds(1000), absl::Minutes(30));
  EXPECT_FALSE(h.role.gave_up);
}

TEST(MemberLoop, RegisteringAgainAnnouncesWhatItRuns) {
  Harness h;
  h.channel.outcomes = {Job()};
  h.role.stop_after = 2;
  h.Make();
  h.role.working = true;
  h.channel.register_again = true;  // the coordinator restarted
  ASSERT_TRUE(h.loop->Run().ok());
  ASSERT_EQ(h.channel.announced.size(), 1u);
  EXPECT_EQ(h.channel.announced[0].job_id(), "job-1");
}

TEST(MemberLoop, AJobThatEndsEndsTheLoopWithoutALeave) {
  Harness h;
  Assignment stop;
  stop.set_stop(true);
  h.channel.outcomes = {Job(), stop};
  h.role.exit_on_stop = true;  // --exit_when_job_ends
  h.Make();
  ASSERT_TRUE(h.loop->Run().ok());
  EXPECT_TRUE(h.role.ended);
  EXPECT_TRUE(h.channel.left.empty());
}

}  // namespace
}  // namespace bertps
