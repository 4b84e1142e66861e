#include "common/status.h"

#include "common/grpc_status.h"
#include "gtest/gtest.h"

namespace bertps {
namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::StatusOr<int> Quarter(int x) {
  ASSIGN_OR_RETURN(int h, Half(x));
  ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

absl::Status CheckEven(int x, int* calls) {
  ++*calls;
  RETURN_IF_ERROR(Half(x).status());
  return absl::OkStatus();
}

TEST(StatusMacros, AssignOrReturnPropagates) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(6).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Quarter(6).status().message(), "odd");
}

TEST(StatusMacros, ReturnIfErrorEvaluatesOnce) {
  int calls = 0;
  EXPECT_TRUE(CheckEven(4, &calls).ok());
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(CheckEven(3, &calls).ok());
  EXPECT_EQ(calls, 2);
}

TEST(StatusMacros, AnnotateKeepsCode) {
  absl::Status s = Annotate(absl::NotFoundError("x"), "loading W");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "loading W: x");
  EXPECT_TRUE(Annotate(absl::OkStatus(), "ctx").ok());
}

TEST(GrpcStatus, RoundTripsEveryCode) {
  for (int c = 0; c <= 16; ++c) {
    absl::Status s(static_cast<absl::StatusCode>(c), c == 0 ? "" : "msg");
    grpc::Status g = ToGrpcStatus(s);
    EXPECT_EQ(static_cast<int>(g.error_code()), c);
    absl::Status back = FromGrpcStatus(g);
    EXPECT_EQ(back, s) << c;
  }
}

}  // namespace
}  // namespace bertps
