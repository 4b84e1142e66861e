// TCP congestion control for the process's gRPC connections.
//
// Linux applies the system's default congestion control to every TCP
// connection, loopback included. With BBR (a common default) every socket
// is paced: the kernel releases its data in bursts from a timer, which on
// loopback only adds latency, timer interrupts and a rate limit (raw
// loopback TCP measured 3.5 GB/s paced by BBR against 7.7 GB/s with reno on
// the same machine). The policy:
//   "auto"    (default) connections whose peer is a loopback address use
//             "reno" (unpaced; always allowed to unprivileged processes);
//             every other connection keeps the system default;
//   "system"  nothing is changed;
//   NAME      every connection uses the algorithm NAME (unprivileged
//             processes may only choose those listed in
//             net.ipv4.tcp_allowed_congestion_control).
// A socket that refuses the algorithm keeps its default (logged once): the
// choice only ever costs speed, never a connection.
//
// Thread-safety: all functions may be called from any thread; the policy is
// read when a connection is made.
#ifndef BERTPS_COMMON_TCP_TUNING_H_
#define BERTPS_COMMON_TCP_TUNING_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/support/channel_arguments.h"

namespace bertps {

// The default of the daemons' --tcp_congestion flag.
inline constexpr char kDefaultTcpCongestion[] = "auto";

// Sets the process's policy ("auto", "system" or an algorithm name of 1-15
// characters [a-z0-9_]); anything else is InvalidArgument and changes
// nothing.
absl::Status SetTcpCongestion(absl::string_view policy);
std::string TcpCongestionPolicy();
// Sets the policy from the --tcp_congestion flag (defined with this library).
absl::Status SetTcpCongestionFromFlag();

// Whether `host` (a name or an IPv4/IPv6 literal, brackets allowed) is a
// loopback address: "localhost", 127.0.0.0/8, ::1, ::ffff:127.x.x.x.
bool IsLoopbackHost(absl::string_view host);

// The algorithm the policy gives a client connection to `target` (a gRPC
// target: "host:port", "[v6]:port", "ipv4:host:port", "dns:///host:port");
// empty: the system default.
std::string TcpCongestionForTarget(absl::string_view target);

// Adds to `args` the socket mutator that applies the policy to the
// connection(s) of a channel to `target`.
void AddTcpTuning(absl::string_view target, grpc::ChannelArguments* args);

// Applies the policy to the connections a server accepts (decided by each
// connection's peer address), and turns SO_REUSEPORT off: a port already
// taken fails BuildAndStart instead of being shared. Every bertps server
// calls it.
void AddTcpTuning(grpc::ServerBuilder* builder);

// Applies the policy to one connection a server accepted itself (outside
// gRPC's listener: common/listener.h), decided by its peer address.
void TuneAcceptedConnection(int fd);

// Sets `algorithm` on a TCP socket.
absl::Status SetTcpCongestionOf(int fd, const std::string& algorithm);
// The congestion control algorithm of a TCP socket.
absl::StatusOr<std::string> TcpCongestionOf(int fd);

}  // namespace bertps

#endif  // BERTPS_COMMON_TCP_TUNING_H_
