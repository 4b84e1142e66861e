#include "tools/tcp_peer.h"

#include <memory>

#include "gtest/gtest.h"

namespace bertps {
namespace tools {
namespace {

TEST(RawTcpPeerTest, MovesEveryByteOverEachStream) {
  for (int streams : {1, 2, 3}) {
    TcpPeerOptions o;
    o.bytes = (1 << 20) + 12345;  // not a multiple of the streams or calls
    o.streams = streams;
    o.write_bytes = 64 << 10;
    auto peer = RawTcpPeer::Create(o);
    ASSERT_TRUE(peer.ok()) << peer.status();
    for (int r = 0; r < 3; ++r) {
      absl::StatusOr<double> secs = (*peer)->Transfer();
      ASSERT_TRUE(secs.ok()) << secs.status();
      EXPECT_GT(*secs, 0);
    }
    EXPECT_TRUE((*peer)->Verify()) << streams << " streams";
  }
}

TEST(RawTcpPeerTest, RingBuffersAndSmallSocketBuffers) {
  TcpPeerOptions o;
  o.bytes = 3 << 20;
  o.streams = 2;
  o.buffer_bytes = 64 << 10;
  o.sockbuf = 64 << 10;
  o.congestion = "reno";  // unprivileged processes may always choose it
  auto peer = RawTcpPeer::Create(o);
  ASSERT_TRUE(peer.ok()) << peer.status();
  ASSERT_TRUE((*peer)->Transfer().ok());
  EXPECT_TRUE((*peer)->Verify());
}

TEST(RawTcpPeerTest, CopyOutDeliversEveryByte) {
  for (int64_t bounce : {int64_t{1000}, int64_t{64} << 10, int64_t{8} << 20}) {
    TcpPeerOptions o;
    o.bytes = (2 << 20) + 777;
    o.streams = 2;
    o.write_bytes = 96 << 10;
    o.copy_out_bytes = bounce;
    auto peer = RawTcpPeer::Create(o);
    ASSERT_TRUE(peer.ok()) << peer.status();
    for (int r = 0; r < 2; ++r) ASSERT_TRUE((*peer)->Transfer().ok());
    EXPECT_TRUE((*peer)->Verify()) << "bounce buffer of " << bounce;
  }
}

TEST(RawTcpPeerTest, RejectsBadOptions) {
  TcpPeerOptions o;
  o.bytes = 0;
  EXPECT_EQ(RawTcpPeer::Create(o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.bytes = 1024;
  o.streams = 0;
  EXPECT_EQ(RawTcpPeer::Create(o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.streams = 1;
  o.write_bytes = 0;
  EXPECT_EQ(RawTcpPeer::Create(o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.write_bytes = 4096;
  o.copy_out_bytes = -1;
  EXPECT_EQ(RawTcpPeer::Create(o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.copy_out_bytes = 4096;  // needs flat buffers
  o.buffer_bytes = 4096;
  EXPECT_EQ(RawTcpPeer::Create(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RawTcpPeerTest, UnknownCongestionControlIsAnError) {
  TcpPeerOptions o;
  o.bytes = 1024;
  o.congestion = "no-such-algorithm";
  EXPECT_FALSE(RawTcpPeer::Create(o).ok());
}

}  // namespace
}  // namespace tools
}  // namespace bertps
