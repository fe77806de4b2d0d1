#include "drivers/mock/low_mapping.h"

#include <sys/mman.h>

#include <new>

namespace th::mock {

LowMapping::LowMapping(size_t bytes) : bytes_((bytes + 4095) / 4096 * 4096) {
  // Candidates from 256 MiB up, each tried without replacing anything mapped there.
  for (uintptr_t at = uintptr_t(1) << 28; at + bytes_ < (uintptr_t(1) << 40); at += uintptr_t(1) << 28) {
    void* p = mmap(reinterpret_cast<void*>(at), bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == reinterpret_cast<void*>(at)) {
      base_ = p;
      return;
    }
    if (p != MAP_FAILED) munmap(p, bytes_);  // a kernel without MAP_FIXED_NOREPLACE put it elsewhere
  }
  throw std::bad_alloc();
}

LowMapping::~LowMapping() { munmap(base_, bytes_); }

}  // namespace th::mock
