// The request script of fuzz_coordinator (coordinator_fuzz.cc), shared
// with the seed generator (make_seeds.cc).
//
// Setup byte 0: the example count every job's data has (% 4: 0, 1, 1000,
// 123457; the harness does not read training files).
// Records (fuzz_input.h), one request each:
#ifndef BERTPS_FUZZ_COORDINATOR_FUZZ_H_
#define BERTPS_FUZZ_COORDINATOR_FUZZ_H_

#include <cstdint>

namespace bertps {
namespace fuzz {

constexpr int kCoordSetupBytes = 1;

enum CoordOp : uint8_t {
  kCoSubmitText = 0,   // JobSpec text format or JSON (ParseJobSpec, Submit)
  kCoSubmitProto = 1,  // serialized JobSpec, straight to Submit
  kCoRegister = 2,     // RegisterRequest
  kCoHeartbeat = 3,    // HeartbeatRequest (short ids: see below)
  kCoCancel = 4,       // job id
  kCoGet = 5,          // job id: Get, then WaitForEvents (no wait)
  kCoAdvance = 6,      // payload[0] seconds pass, then Tick
  kCoNumOps = 7,
};
// Ids of at most one byte in a request stand for the (byte % n)-th member
// or job the coordinator gave out in this script, so mutations reach known
// members and jobs.

}  // namespace fuzz
}  // namespace bertps

#endif  // BERTPS_FUZZ_COORDINATOR_FUZZ_H_
