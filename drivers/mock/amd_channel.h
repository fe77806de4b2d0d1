// A mock AMD GPU behind one ring (a PM4 compute ring or an SDMA ring): ring and argument memory mapped below 2^40, a
// write-pointer shadow, a read pointer and a doorbell, and a thread that plays the engine: it runs the packets
// between the read and write pointers on an AmdCommandProcessor and advances the read pointer. A MockFault stops it
// and is kept for fault().
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "drivers/mock/amd_gpu.h"
#include "drivers/mock/low_mapping.h"
#include "tinyhybrid/hcq/signal.h"

namespace th::mock {

class MockAmdGpu {
 public:
  // sdma: the ring is an SDMA engine's (else a compute ring's PM4).
  MockAmdGpu(bool sdma, AmdCommandProcessor::Dispatcher dispatch, size_t ring_bytes = 1 << 16, size_t side_bytes = 1 << 20);
  ~MockAmdGpu();
  MockAmdGpu(const MockAmdGpu&) = delete;
  MockAmdGpu& operator=(const MockAmdGpu&) = delete;

  uint8_t* ring() const noexcept { return ring_.data(); }
  size_t ring_bytes() const noexcept { return ring_bytes_; }
  uint8_t* side() const noexcept { return side_.data(); }
  size_t side_bytes() const noexcept { return side_bytes_; }
  volatile uint64_t* wptr() const noexcept { return reinterpret_cast<volatile uint64_t*>(regs_.data()); }
  volatile uint64_t* rptr() const noexcept { return reinterpret_cast<volatile uint64_t*>(regs_.data() + 64); }
  volatile uint64_t* doorbell() const noexcept { return reinterpret_cast<volatile uint64_t*>(regs_.data() + 128); }
  hcq::SignalRef signal(std::string name, uint64_t initial = 0) { return signals_.signal(std::move(name), initial); }  // in the mock's GPU memory

  std::string fault() const { return fault_.get(); }
  uint64_t launches() const noexcept { return launches_.load(std::memory_order_relaxed); }

 private:
  void engine();

  const bool sdma_;
  const size_t ring_bytes_, side_bytes_;
  LowMapping ring_, side_, regs_;
  SignalPage signals_;
  AmdCommandProcessor processor_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> launches_{0};
  FaultLatch fault_;
  std::thread thread_;  // last: starts once everything it uses exists
};

}  // namespace th::mock
