// GPU memory for the mocks: anonymous host memory mapped below 2^40, where the GPUs' 40-bit addresses (GPFIFO
// entries, SEND_PCAS, Ampere's semaphores) reach; the mocks' GPU addresses are host addresses.
#pragma once
#include <cstddef>
#include <cstdint>

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

}  // namespace th::mock
