// The proof that a member serves the address it registers with
// (RegisterRequest.instance): the member's server answers SERVING for the
// grpc.health.v1 service MemberInstanceService(instance), a random name only
// that process knows; the coordinator asks the server at the address before
// it takes the registration.
// Thread-safety: pure functions.
#ifndef BERTPS_COMMON_CLUSTER_MEMBER_INSTANCE_H_
#define BERTPS_COMMON_CLUSTER_MEMBER_INSTANCE_H_

#include <string>

namespace bertps {

// The member protocol (RegisterRequest.protocol_version): a coordinator and
// its members speak the same one (docs/wire-format.md). 2: member
// credentials, re-announcement (MemberRun), give-up notes, drains.
inline constexpr int kMemberProtocolVersion = 2;

inline std::string MemberInstanceService(const std::string& instance) {
  return "bertps.instance." + instance;
}

}  // namespace bertps

#endif  // BERTPS_COMMON_CLUSTER_MEMBER_INSTANCE_H_
