// The AMD queue: hcq::Queue over one ring, a PM4 compute ring or an SDMA ring. A submit lowers the command buffer once
// (cached on it), copies the packets into the ring (a NOP fills the ring's end when they would not fit before it),
// the kernel arguments into the side ring, writes the patch sites, appends the release of the queue's timeline, then
// publishes the write pointer and rings the doorbell. The ring's memory and registers come from the kernel driver
// (KFD) or from the mock.
#pragma once
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "drivers/amd/lower.h"
#include "tinyhybrid/hcq/queue.h"

namespace th::amd {

// GPU-visible memory: `host` is where the CPU writes it, `gpu` where the GPU reads it.
struct Region {
  uint8_t* host = nullptr;
  uint64_t gpu = 0;
  uint64_t bytes = 0;
};

struct RingChannel {
  Region ring;  // the packets: a power of two of bytes
  Region side;  // kernel arguments
  // The write and read pointers count dwords since the start, monotonically (the ring index is the pointer modulo
  // its size); SDMA's doorbell takes bytes, the CP's dwords.
  volatile uint64_t* wptr = nullptr;        // the shadow the engine polls
  const volatile uint64_t* rptr = nullptr;  // how far the engine has read
  volatile uint64_t* doorbell = nullptr;
};

class AmdQueue final : public hcq::Queue {
 public:
  AmdQueue(std::string name, Gen gen, Engine engine, const RingChannel& channel, hcq::SignalRef timeline);

  const std::string& name() const noexcept override { return name_; }
  const hcq::SignalRef& timeline() const noexcept override { return timeline_; }
  uint64_t submit(const hcq::CommandBuffer& cb, std::span<const uint64_t> patches = {}) override;
  bool would_block(const hcq::CommandBuffer& cb) const override;
  uint64_t last_submitted() const noexcept override { return submitted_.load(std::memory_order_acquire); }

 private:
  void wait_ring_space(uint64_t dwords);
  void write(std::span<const uint32_t> dwords);  // at the write pointer, which the caller made room for

  const std::string name_;
  const Gen gen_;
  const Engine engine_;
  const RingChannel ch_;
  const uint64_t ring_dwords_;
  const hcq::SignalRef timeline_;
  std::mutex mu_;
  std::atomic<uint64_t> submitted_{0};
  uint64_t wptr_ = 0;
  hcq::RingSpace side_;
  std::deque<std::pair<uint64_t, std::shared_ptr<const void>>> retained_;
};

}  // namespace th::amd
