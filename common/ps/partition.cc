#include "common/ps/partition.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace bertps {
namespace ps {

absl::StatusOr<PartitionPlan> PartitionPlan::Make(const ParamLayout& layout,
                                                  int num_shards) {
  if (num_shards < 1 || num_shards > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("number of shards must be in [1, 1024], got ", num_shards));
  }
  PartitionPlan plan;
  plan.num_shards_ = num_shards;
  const auto& tensors = layout.tensors();
  const int64_t fair = (layout.total_size() + num_shards - 1) / num_shards;
  // Cut: a tensor larger than half a fair share is split into row ranges of
  // about half a fair share each, so that the pieces pack evenly.
  const int64_t piece_target = std::max<int64_t>(1, fair / 2);
  plan.pieces_.assign(tensors.size(), 1);
  std::vector<SliceSpec> pieces;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const ParamSpec& p = tensors[t];
    const int64_t rows = p.shape.empty() ? 1 : p.shape[0];
    const int64_t row_size = rows > 0 ? p.size / rows : p.size;
    int64_t n = 1;
    if (num_shards > 1 && p.size > piece_target && rows > 1) {
      n = std::min<int64_t>(rows, (p.size + piece_target - 1) / piece_target);
    }
    plan.pieces_[t] = static_cast<int>(n);
    for (int64_t i = 0; i < n; ++i) {
      SliceSpec s;
      s.tensor = static_cast<int>(t);
      s.name = p.name;
      s.begin = (rows * i / n) * row_size;
      s.end = (rows * (i + 1) / n) * row_size;
      s.decay = p.decay;
      pieces.push_back(s);
    }
  }
  // Assign, largest first, to the least-loaded shard.
  std::vector<int> order(pieces.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return pieces[a].size() > pieces[b].size();
  });
  std::vector<int64_t> load(num_shards, 0);
  for (int i : order) {
    int best = 0;
    for (int s = 1; s < num_shards; ++s) {
      if (load[s] < load[best]) best = s;
    }
    pieces[i].shard = best;
    load[best] += pieces[i].size();
  }
  // Buffer offsets in plan order (tensor, begin).
  plan.slices_ = std::move(pieces);
  plan.by_shard_.assign(num_shards, {});
  plan.shard_size_.assign(num_shards, 0);
  for (size_t i = 0; i < plan.slices_.size(); ++i) {
    SliceSpec& s = plan.slices_[i];
    s.shard_offset = plan.shard_size_[s.shard];
    plan.shard_size_[s.shard] += s.size();
    plan.by_shard_[s.shard].push_back(static_cast<int>(i));
  }
  return plan;
}

std::string PartitionPlan::ToText() const {
  std::string out;
  for (const SliceSpec& s : slices_) {
    absl::StrAppend(&out, s.name, " ", s.begin, " ", s.end, " ", s.shard, "\n");
  }
  return out;
}

int64_t RowSize(const ParamSpec& spec) {
  return spec.shape.empty() || spec.shape[0] == 0 ? spec.size
                                                  : spec.size / spec.shape[0];
}

std::vector<int64_t> RowsOfSlice(const SliceSpec& sl, int64_t row,
                                 const std::vector<int64_t>& sorted,
                                 bool others) {
  const int64_t lo = sl.begin / row, hi = sl.end / row;
  std::vector<int64_t> out;
  auto it = std::lower_bound(sorted.begin(), sorted.end(), lo);
  if (!others) {
    for (; it != sorted.end() && *it < hi; ++it) out.push_back(*it);
    return out;
  }
  for (int64_t r = lo; r < hi; ++r) {
    if (it != sorted.end() && *it == r) {
      ++it;
    } else {
      out.push_back(r);
    }
  }
  return out;
}

}  // namespace ps
}  // namespace bertps
