#include "common/model/pipeline_schedule.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace bertps {

absl::StatusOr<PipelineScheduleKind> ParsePipelineSchedule(
    absl::string_view name) {
  if (name == "gpipe") return PipelineScheduleKind::kGPipe;
  if (name == "1f1b" || name.empty()) return PipelineScheduleKind::kOneFOneB;
  return absl::InvalidArgumentError(
      absl::StrCat("pipeline schedule must be gpipe or 1f1b, got '", name,
                   "'"));
}

absl::string_view PipelineScheduleName(PipelineScheduleKind kind) {
  return kind == PipelineScheduleKind::kGPipe ? "gpipe" : "1f1b";
}

int PipelineSlots(PipelineScheduleKind kind, int stage, int num_stages,
                  int micro_batches) {
  if (kind == PipelineScheduleKind::kGPipe) return micro_batches;
  return std::max(1, std::min(micro_batches, num_stages - stage));
}

std::vector<PipelineOp> MakePipelineSchedule(PipelineScheduleKind kind,
                                             int stage, int num_stages,
                                             int micro_batches) {
  const int m = micro_batches;
  const int slots = PipelineSlots(kind, stage, num_stages, m);
  std::vector<PipelineOp> ops;
  auto f = [&](int i) { ops.push_back({true, i, i % slots}); };
  auto b = [&](int i) { ops.push_back({false, i, i % slots}); };
  if (kind == PipelineScheduleKind::kGPipe) {
    for (int i = 0; i < m; ++i) f(i);
    for (int i = 0; i < m; ++i) b(i);
    return ops;
  }
  const int warmup = std::min(num_stages - stage - 1, m);
  int next_f = 0, next_b = 0;
  for (; next_f < warmup; ++next_f) f(next_f);
  while (next_f < m) {
    f(next_f++);
    b(next_b++);
  }
  while (next_b < m) b(next_b++);
  return ops;
}

double TheoreticalBubble(int num_stages, int micro_batches) {
  return static_cast<double>(num_stages - 1) /
         static_cast<double>(micro_batches + num_stages - 1);
}

}  // namespace bertps
