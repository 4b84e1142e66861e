// The parameter partition plan: which element range of which tensor lives on
// which parameter-server shard.
//
// Tensors (Hugging Face names, ParamLayout order) are cut into slices: whole
// tensors, or row ranges of a tensor bigger than a shard's fair share (such
// as the word embeddings). Slices are assigned to the least-loaded shard,
// largest first (ties: lowest shard index), which balances bytes. The plan is
// a pure function of (layout, number of shards): every process computes the
// same plan, and a checkpoint records it so that it can be restored onto a
// different number of shards.
//
// Each shard keeps its slices in one flat buffer, in plan order.
// Thread-safety: immutable after Make().
#ifndef BERTPS_COMMON_PS_PARTITION_H_
#define BERTPS_COMMON_PS_PARTITION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/params.h"

namespace bertps {
namespace ps {

struct SliceSpec {
  int tensor = 0;            // index in ParamLayout::tensors()
  std::string name;          // tensor name
  int64_t begin = 0;         // element range [begin, end) of the tensor
  int64_t end = 0;
  int shard = 0;
  int64_t shard_offset = 0;  // elements into the shard's flat buffer
  bool decay = true;         // weight decay applies
  int64_t size() const { return end - begin; }
};

// Elements in one row of a tensor (its first dimension's entries); the whole
// tensor for a scalar or a tensor without rows.
int64_t RowSize(const ParamSpec& spec);

// The rows (of `row` elements each) of slice `sl` that are in `sorted`
// (strictly increasing tensor rows), or with others=true all its rows that
// are not. A slice is a range of whole rows.
std::vector<int64_t> RowsOfSlice(const SliceSpec& sl, int64_t row,
                                 const std::vector<int64_t>& sorted,
                                 bool others);

class PartitionPlan {
 public:
  static absl::StatusOr<PartitionPlan> Make(const ParamLayout& layout,
                                            int num_shards);

  int num_shards() const { return num_shards_; }
  // All slices, ordered by (tensor, begin).
  const std::vector<SliceSpec>& slices() const { return slices_; }
  // Indices into slices() of one shard's slices, in its buffer order.
  const std::vector<int>& shard_slices(int shard) const {
    return by_shard_[shard];
  }
  int64_t shard_size(int shard) const { return shard_size_[shard]; }
  // Number of slices the tensor is cut into.
  int pieces(int tensor) const { return pieces_[tensor]; }
  // One line per slice: "name begin end shard"; stored in manifests.
  std::string ToText() const;

 private:
  int num_shards_ = 0;
  std::vector<SliceSpec> slices_;
  std::vector<std::vector<int>> by_shard_;
  std::vector<int64_t> shard_size_;
  std::vector<int> pieces_;
};

}  // namespace ps
}  // namespace bertps

#endif  // BERTPS_COMMON_PS_PARTITION_H_
