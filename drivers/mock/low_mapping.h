// GPU memory for the mocks: anonymous host memory mapped below 2^40, where the GPUs' 40-bit addresses (GPFIFO
// entries, SEND_PCAS, Ampere's semaphores) reach; the mocks' GPU addresses are host addresses.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tinyhybrid/hcq/signal.h"

namespace th::mock {

// Mapped below 2^40 (std::bad_alloc when no room is found there), unmapped on destruction.
class LowMapping {
 public:
  explicit LowMapping(size_t bytes);
  ~LowMapping();
  LowMapping(const LowMapping&) = delete;
  LowMapping& operator=(const LowMapping&) = delete;
  uint8_t* data() const noexcept { return static_cast<uint8_t*>(base_); }
  size_t size() const noexcept { return bytes_; }

 private:
  void* base_ = nullptr;
  size_t bytes_;
};

// Signals in mock GPU memory, 16 bytes each (room for a timestamp after the value), below 2^40 where every
// generation's semaphores reach; the memory lives as long as any of them.
class SignalPage {
 public:
  hcq::SignalRef signal(std::string name, uint64_t initial = 0);
  // The mock stopped: every signal of the page still alive stops too (Signal::stop), so no wait hangs on it.
  void stop_all(const std::string& what);

 private:
  std::shared_ptr<LowMapping> memory_ = std::make_shared<LowMapping>(1 << 16);
  std::atomic<uint32_t> next_{0};
  std::mutex mu_;
  std::vector<std::weak_ptr<hcq::Signal>> made_;
};

}  // namespace th::mock
