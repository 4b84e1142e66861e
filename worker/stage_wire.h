// Constants and names shared by the pipeline stage's files (internal to
// worker/pipeline_stage).
#ifndef BERTPS_WORKER_STAGE_WIRE_H_
#define BERTPS_WORKER_STAGE_WIRE_H_

#include <cstdint>

#include "proto/pipeline.pb.h"

namespace bertps {
namespace stage_internal {

// Bytes of a tensor per StageChunk, and the largest message a stage takes.
constexpr int64_t kMinChunk = 1 << 20, kMaxChunk = 4 << 20;
constexpr int kMaxMessageBytes = 8 << 20;

inline const char* KindName(int kind) {
  return kind == ACTIVATION ? "activations" : "gradients";
}

}  // namespace stage_internal
}  // namespace bertps

#endif  // BERTPS_WORKER_STAGE_WIRE_H_
