// Pipeline schedules: the order in which one stage runs the forward and
// backward passes of a step's M micro-batches.
//
//   GPipe  all M forwards, then all M backwards (in micro-batch order); a
//          stage keeps M micro-batches of activations.
//   1F1B   (PipeDream-Flush) stage s of S first runs min(S - s - 1, M)
//          forwards, then alternates one forward and one backward, then
//          drains the remaining backwards; it keeps at most min(M, S - s)
//          micro-batches of activations. Same result as GPipe, less memory.
//
// Both give the same gradients (the micro-batch gradients are summed in
// micro-batch order on every stage). Thread-safety: pure functions.
#ifndef BERTPS_COMMON_MODEL_PIPELINE_SCHEDULE_H_
#define BERTPS_COMMON_MODEL_PIPELINE_SCHEDULE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace bertps {

enum class PipelineScheduleKind { kGPipe, kOneFOneB };

// "gpipe" or "1f1b" (empty: 1f1b).
absl::StatusOr<PipelineScheduleKind> ParsePipelineSchedule(
    absl::string_view name);
absl::string_view PipelineScheduleName(PipelineScheduleKind kind);

struct PipelineOp {
  bool forward = true;
  int micro_batch = 0;
  int slot = 0;  // activation slot of the micro-batch on this stage
  bool operator==(const PipelineOp& o) const {
    return forward == o.forward && micro_batch == o.micro_batch &&
           slot == o.slot;
  }
};

// Activation slots stage `stage` needs.
int PipelineSlots(PipelineScheduleKind kind, int stage, int num_stages,
                  int micro_batches);

// The 2M operations of stage `stage` for one step.
std::vector<PipelineOp> MakePipelineSchedule(PipelineScheduleKind kind,
                                             int stage, int num_stages,
                                             int micro_batches);

// Textbook bubble fraction of an S-stage pipeline with M equal micro-batches:
// (S - 1) / (M + S - 1).
double TheoreticalBubble(int num_stages, int micro_batches);

}  // namespace bertps

#endif  // BERTPS_COMMON_MODEL_PIPELINE_SCHEDULE_H_
