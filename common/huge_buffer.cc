#include "common/huge_buffer.h"

#include <sys/mman.h>

#include <cstdlib>
#include <new>

namespace bertps {
namespace {
constexpr size_t kHugePage = size_t{2} << 20;
}  // namespace

HugeBuffer::HugeBuffer(size_t floats) : size_(floats) {
  if (floats == 0) return;
  const size_t bytes =
      (floats * sizeof(float) + kHugePage - 1) / kHugePage * kHugePage;
  void* p = std::aligned_alloc(kHugePage, bytes);
  if (p == nullptr) throw std::bad_alloc();
  madvise(p, bytes, MADV_HUGEPAGE);  // advice: an error changes nothing
  data_.reset(static_cast<float*>(p));
}

void HugeBuffer::Free::operator()(float* p) const { std::free(p); }

}  // namespace bertps
