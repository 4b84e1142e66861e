#include "deploy/probe/probe.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "gtest/gtest.h"

namespace bertps {
namespace {

// A server with gRPC's default health service, as every daemon runs (a
// server needs one service of its own besides it: here a generic one that
// answers UNIMPLEMENTED).
struct HealthServer {
  HealthServer() {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder b;
    b.RegisterCallbackGenericService(&generic);
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    server = b.BuildAndStart();
  }
  ~HealthServer() { server->Shutdown(); }
  std::string target() const { return absl::StrCat("127.0.0.1:", port); }
  std::shared_ptr<grpc::Channel> channel() const {
    return grpc::CreateChannel(target(), grpc::InsecureChannelCredentials());
  }
  grpc::CallbackGenericService generic;
  int port = 0;
  std::unique_ptr<grpc::Server> server;
};

TEST(CheckHealthTest, ServingServerIsOk) {
  HealthServer s;
  ASSERT_NE(s.port, 0);
  EXPECT_TRUE(CheckHealth(s.channel(), s.target(), "", absl::Seconds(5)).ok());
}

TEST(CheckHealthTest, NotServingIsUnavailable) {
  HealthServer s;
  s.server->GetHealthCheckService()->SetServingStatus(false);
  absl::Status st = CheckHealth(s.channel(), s.target(), "", absl::Seconds(5));
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_NE(st.message().find("NOT_SERVING"), std::string::npos) << st;
  EXPECT_NE(st.message().find(s.target()), std::string::npos) << st;
}

TEST(CheckHealthTest, UnknownServiceIsNotFound) {
  HealthServer s;
  absl::Status st =
      CheckHealth(s.channel(), s.target(), "no.such.Service", absl::Seconds(5));
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound) << st;
  EXPECT_NE(st.message().find("no.such.Service"), std::string::npos) << st;
}

TEST(CheckHealthTest, NobodyListeningFailsWithinTheDeadline) {
  int port;
  {
    HealthServer s;  // a port that was free a moment ago
    port = s.port;
  }
  const std::string target = absl::StrCat("127.0.0.1:", port);
  absl::Time start = absl::Now();
  absl::Status st = CheckHealth(
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials()), target, "",
      absl::Milliseconds(500));
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(st.code() == absl::StatusCode::kUnavailable ||
              st.code() == absl::StatusCode::kDeadlineExceeded)
      << st;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

}  // namespace
}  // namespace bertps
