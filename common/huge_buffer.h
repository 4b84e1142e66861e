// HugeBuffer: an uninitialised float buffer for large transient copies (a
// shard's snapshot for a joining backup): 2 MiB-aligned and advised as
// transparent huge pages, so filling it takes one page fault per 2 MiB
// instead of one per 4 KiB page, and nothing zero-fills it first. Where the
// kernel has no huge pages for it, it is an ordinary allocation.
// Thread-safety: a value type; not shared.
#ifndef BERTPS_COMMON_HUGE_BUFFER_H_
#define BERTPS_COMMON_HUGE_BUFFER_H_

#include <cstddef>
#include <memory>

namespace bertps {

class HugeBuffer {
 public:
  HugeBuffer() = default;
  explicit HugeBuffer(size_t floats);
  float* data() { return data_.get(); }
  const float* data() const { return data_.get(); }
  size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(float* p) const;
  };
  std::unique_ptr<float, Free> data_;
  size_t size_ = 0;
};

}  // namespace bertps

#endif  // BERTPS_COMMON_HUGE_BUFFER_H_
