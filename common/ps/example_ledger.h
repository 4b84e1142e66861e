// ExampleLedger: which examples of the job's data stream the shard's
// updates consumed, counted from the pushes it applied, not computed from
// its version. Each push names its examples as a range of global stream
// positions [first, first + n) (position p is example p mod E of epoch
// p / E, E the examples of an epoch); the ledger keeps the union as sorted
// disjoint ranges, which merge back into a few as steps complete, and
// counts the positions applied more than once. From it the coordinator
// checks that each epoch covered every example exactly once (an XOR or a
// plain count would hide a duplicate pair).
// Thread-safety: none (the shard guards it); a plain value.
#ifndef BERTPS_COMMON_PS_EXAMPLE_LEDGER_H_
#define BERTPS_COMMON_PS_EXAMPLE_LEDGER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace bertps {
namespace ps {

class ExampleLedger {
 public:
  // Adds [first, first + n); returns the positions of it already present.
  int64_t Add(int64_t first, int64_t n);

  // The ranges (begin, end), sorted and disjoint.
  std::vector<std::pair<int64_t, int64_t>> ranges() const;
  int64_t applied() const { return applied_; }  // positions, counted once
  int64_t twice() const { return twice_; }      // positions added again

  // Covered positions in [begin, end).
  int64_t Covered(int64_t begin, int64_t end) const;

  // "twice;b-e,b-e,..." and back (checkpoint metadata).
  std::string Serialize() const;
  static absl::StatusOr<ExampleLedger> Parse(absl::string_view text);

  bool operator==(const ExampleLedger& o) const {
    return ranges_ == o.ranges_ && twice_ == o.twice_;
  }

 private:
  std::map<int64_t, int64_t> ranges_;  // begin -> end
  int64_t applied_ = 0;
  int64_t twice_ = 0;
};

}  // namespace ps
}  // namespace bertps

#endif  // BERTPS_COMMON_PS_EXAMPLE_LEDGER_H_
