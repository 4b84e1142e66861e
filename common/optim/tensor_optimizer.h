// In-process driver: one full optimizer step over a set of whole, named
// tensors (single-process training; the PS shards drive slice_update.h
// themselves).
//
// A step: NaN/Inf check of every gradient (refusing the whole step, with
// nothing changed, if any is bad) -> global-norm clipping over all gradients
// -> per tensor phase 1, LAMB trust ratio, phase 2.
//
// Ownership: the optimizer does NOT own the tensors; the caller keeps every
// param/grad/state buffer alive, unmoved, and sized as declared for the
// optimizer's lifetime. The optimizer owns only a scratch buffer for LAMB
// (as large as the largest tensor), allocated by Create; Step allocates
// nothing.
// Element-wise optimizers update the tensors in pieces on the compute
// threads (OpenMP; the same bits on any number of threads).
// Thread-safety: not thread-safe; one Step at a time, and the caller must not
// touch the buffers during a Step.
#ifndef BERTPS_COMMON_OPTIM_TENSOR_OPTIMIZER_H_
#define BERTPS_COMMON_OPTIM_TENSOR_OPTIMIZER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/optim/optimizer_config.h"

namespace bertps {
namespace optim {

// n: number of elements of the tensor.
struct NamedTensor {
  std::string name;             // Hugging Face name; decides weight decay
  float* param = nullptr;       // (n)
  const float* grad = nullptr;  // (n)
  float* state = nullptr;       // (StateSlots(config) * n), slot-major,
                                // zero-initialised before the first step
  int64_t n = 0;
};

class TensorOptimizer {
 public:
  // InvalidArgument for a bad config, an empty or duplicate name, n < 0, or
  // a null buffer where n > 0 needs one.
  static absl::StatusOr<TensorOptimizer> Create(
      const OptimizerConfig& config, std::vector<NamedTensor> tensors);

  // Applies step `step` (0-based global step; >= 0) using the current
  // gradients. InvalidArgument naming the first tensor whose gradient holds
  // NaN or Inf: then no parameter and no state has been changed.
  absl::Status Step(int64_t step);

  const OptimizerConfig& config() const { return config_; }
  // Of the last successful Step: gradient global norm before clipping, and
  // the learning rate used.
  double last_global_norm() const { return last_global_norm_; }
  float last_learning_rate() const { return last_learning_rate_; }

 private:
  struct Entry {
    NamedTensor tensor;
    bool decay = false;
  };
  // A piece of one tensor updated alone (element-wise optimizers).
  struct Part {
    int64_t entry = 0;
    int64_t offset = 0;
    int64_t n = 0;
  };
  static constexpr int64_t kPart = int64_t{1} << 16;

  TensorOptimizer(const OptimizerConfig& config, std::vector<Entry> entries,
                  int64_t scratch_n);

  OptimizerConfig config_;
  std::vector<Entry> entries_;
  std::vector<float> scratch_;  // (max n) LAMB update directions; else empty
  std::vector<Part> parts_;     // every tensor in pieces of at most kPart
  std::vector<absl::Status> part_status_;  // (parts_) of the last Step
  int64_t total_n_ = 0;
  double last_global_norm_ = 0;
  float last_learning_rate_ = 0;
};

}  // namespace optim
}  // namespace bertps

#endif  // BERTPS_COMMON_OPTIM_TENSOR_OPTIMIZER_H_
