// The NV queue: hcq::Queue over one GPFIFO channel. A submit lowers the command buffer once (cached on it), copies
// the methods into the channel's pushbuffer ring and the QMDs and constant buffers into its side ring, writes the
// patch sites, appends the release of the queue's timeline, then writes a GPFIFO entry, GPPut and the doorbell.
// The channel's memory and registers come from the kernel driver (Python's ioctl layer) or from the mock.
#pragma once
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "drivers/nv/lower.h"
#include "tinyhybrid/hcq/queue.h"

namespace th::nv {

// A ring of GPU-visible memory: `host` is where the CPU writes it, `gpu` where the GPU reads it.
struct Ring {
  uint8_t* host = nullptr;
  uint64_t gpu = 0;
  uint64_t bytes = 0;
};

// One GPFIFO channel as the driver set it up (its objects bound: compute on subchannel 1, or copy on subchannel 4).
struct Channel {
  Ring gpfifo;   // entries of 8 bytes; a power of two of them
  Ring push;     // pushbuffer segments
  Ring side;     // QMDs and constant buffers (256-byte aligned, below 2^40)
  volatile uint32_t* gp_put = nullptr;        // USERD + 0x8C: the next entry index to be written
  const volatile uint32_t* gp_get = nullptr;  // USERD + 0x88: the next entry the GPU reads
  volatile uint32_t* doorbell = nullptr;      // usermode + 0x90 (NOTIFY_CHANNEL_PENDING)
  uint32_t token = 0;                         // the channel's work submit token, written to the doorbell
};

class NvQueue final : public hcq::Queue {
 public:
  // `timeline` must be a signal in memory the GPU writes (a semaphore the queue releases after each submit).
  NvQueue(std::string name, Gen gen, Engine engine, const Channel& channel, hcq::SignalRef timeline);

  const std::string& name() const noexcept override { return name_; }
  const hcq::SignalRef& timeline() const noexcept override { return timeline_; }
  uint64_t submit(const hcq::CommandBuffer& cb, std::span<const uint64_t> patches = {}) override;
  bool would_block(const hcq::CommandBuffer& cb) const override;
  uint64_t last_submitted() const noexcept override { return submitted_.load(std::memory_order_acquire); }

 private:

  const std::string name_;
  const Gen gen_;
  const Engine engine_;
  const Channel ch_;
  const hcq::SignalRef timeline_;
  std::mutex mu_;
  std::atomic<uint64_t> submitted_{0};
  hcq::RingSpace push_, side_;
  uint32_t put_ = 0;  // the next GPFIFO entry's index
  std::deque<std::pair<uint64_t, std::shared_ptr<const void>>> retained_;  // what running submits reference
};

}  // namespace th::nv
