#include "common/ps/example_ledger.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace bertps {
namespace ps {

int64_t ExampleLedger::Add(int64_t first, int64_t n) {
  if (n <= 0) return 0;
  int64_t b = first, e = first + n;
  const int64_t overlap = Covered(b, e);
  // Merge with every range that touches [b, e).
  auto it = ranges_.upper_bound(b);
  if (it != ranges_.begin() && std::prev(it)->second >= b) --it;
  while (it != ranges_.end() && it->first <= e) {
    b = std::min(b, it->first);
    e = std::max(e, it->second);
    it = ranges_.erase(it);
  }
  ranges_[b] = e;
  applied_ += n - overlap;
  twice_ += overlap;
  return overlap;
}

std::vector<std::pair<int64_t, int64_t>> ExampleLedger::ranges() const {
  return {ranges_.begin(), ranges_.end()};
}

int64_t ExampleLedger::Covered(int64_t begin, int64_t end) const {
  int64_t covered = 0;
  auto it = ranges_.upper_bound(begin);
  if (it != ranges_.begin()) --it;
  for (; it != ranges_.end() && it->first < end; ++it) {
    const int64_t lo = std::max(begin, it->first);
    const int64_t hi = std::min(end, it->second);
    if (hi > lo) covered += hi - lo;
  }
  return covered;
}

std::string ExampleLedger::Serialize() const {
  std::string out = absl::StrCat(twice_, ";");
  bool first = true;
  for (const auto& [b, e] : ranges_) {
    absl::StrAppend(&out, first ? "" : ",", b, "-", e);
    first = false;
  }
  return out;
}

absl::StatusOr<ExampleLedger> ExampleLedger::Parse(absl::string_view text) {
  auto bad = [&] {
    return absl::DataLossError(
        absl::StrCat("example ledger '", text.substr(0, 80), "' is malformed"));
  };
  std::vector<absl::string_view> parts = absl::StrSplit(text, ';');
  ExampleLedger l;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &l.twice_) ||
      l.twice_ < 0) {
    return bad();
  }
  int64_t last_end = -1;
  for (absl::string_view r : absl::StrSplit(parts[1], ',', absl::SkipEmpty())) {
    std::vector<absl::string_view> be = absl::StrSplit(r, '-');
    int64_t b = 0, e = 0;
    if (be.size() != 2 || !absl::SimpleAtoi(be[0], &b) ||
        !absl::SimpleAtoi(be[1], &e) || b < 0 || e <= b || b <= last_end) {
      return bad();
    }
    l.ranges_[b] = e;
    l.applied_ += e - b;
    last_end = e;
  }
  return l;
}

}  // namespace ps
}  // namespace bertps
