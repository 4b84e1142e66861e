// The path policy moved to common/cluster/path_policy.h (the members check
// their assignments with it too); this header forwards to it.
#ifndef BERTPS_SERVER_COORDINATOR_PATH_POLICY_H_
#define BERTPS_SERVER_COORDINATOR_PATH_POLICY_H_

#include "common/cluster/path_policy.h"

#endif  // BERTPS_SERVER_COORDINATOR_PATH_POLICY_H_
