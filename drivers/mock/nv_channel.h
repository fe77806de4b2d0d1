// A mock NVIDIA GPU behind one GPFIFO channel: GPU-visible memory mapped below 2^40 (where GPFIFO entries and
// SEND_PCAS reach; the mock's GPU addresses are host addresses), the USERD words GPPut and GPGet, a doorbell, and a
// thread that plays the GPU's front end: it runs each entry between GPGet and GPPut on an NvCommandProcessor and
// advances GPGet. A MockFault stops it and is kept for fault().
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "drivers/mock/low_mapping.h"
#include "drivers/mock/nv_gpu.h"
#include "tinyhybrid/hcq/signal.h"

namespace th::mock {

class MockNvGpu {
 public:
  MockNvGpu(bool hopper, NvCommandProcessor::Dispatcher dispatch, uint32_t gpfifo_entries = 1024, size_t push_bytes = 1 << 20,
            size_t side_bytes = 4 << 20);
  ~MockNvGpu();
  MockNvGpu(const MockNvGpu&) = delete;
  MockNvGpu& operator=(const MockNvGpu&) = delete;

  // The channel's memory, as a driver would hand it to the queue.
  uint8_t* gpfifo() const noexcept { return gpfifo_.data(); }
  size_t gpfifo_bytes() const noexcept { return size_t(entries_) * 8; }  // the ring the front end reads, not the mapping
  uint8_t* push() const noexcept { return push_.data(); }
  size_t push_bytes() const noexcept { return push_.size(); }
  uint8_t* side() const noexcept { return side_.data(); }
  size_t side_bytes() const noexcept { return side_.size(); }
  volatile uint32_t* gp_put() const noexcept { return reinterpret_cast<volatile uint32_t*>(userd_.data() + 0x8C); }
  volatile uint32_t* gp_get() const noexcept { return reinterpret_cast<volatile uint32_t*>(userd_.data() + 0x88); }
  volatile uint32_t* doorbell() const noexcept { return reinterpret_cast<volatile uint32_t*>(userd_.data() + 0x1000 + 0x90); }
  static constexpr uint32_t kToken = 0x5a5a;

  // A signal in the mock's GPU memory (below 2^40, where every generation's semaphores reach), 16 bytes of its own.
  hcq::SignalRef signal(std::string name, uint64_t initial = 0) { return signals_.signal(std::move(name), initial); }

  std::string fault() const { return fault_.get(); }  // the MockFault that stopped the front end, or ""
  uint64_t launches() const noexcept { return launches_.load(std::memory_order_relaxed); }

 private:
  void front_end();

  const uint32_t entries_;
  LowMapping gpfifo_, push_, side_, userd_;  // userd_: USERD, then the usermode page with the doorbell
  SignalPage signals_;
  NvCommandProcessor processor_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> launches_{0};
  FaultLatch fault_;
  std::thread thread_;  // last: starts once everything it uses exists
};

}  // namespace th::mock
