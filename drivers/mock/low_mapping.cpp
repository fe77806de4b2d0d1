#include "drivers/mock/low_mapping.h"

#include <sys/mman.h>

#include <new>
#include <stdexcept>

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

hcq::SignalRef SignalPage::signal(std::string name, uint64_t initial) {
  const uint32_t k = next_.fetch_add(1);
  if ((k + 1) * 16 > memory_->size()) throw std::length_error("mock GPU: out of signal memory");
  auto* word = reinterpret_cast<std::atomic<uint64_t>*>(memory_->data() + 16 * k);
  word->store(initial, std::memory_order_relaxed);
  auto s = hcq::Signal::external(std::move(name), word, memory_);
  const std::lock_guard lock(mu_);
  made_.push_back(s);
  return s;
}

void SignalPage::stop_all(const std::string& what) {
  const std::lock_guard lock(mu_);
  for (const auto& w : made_)
    if (const auto s = w.lock()) s->stop(what);
}

}  // namespace th::mock
