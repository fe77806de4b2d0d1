// Queue: where command buffers run. A submit copies a buffer's commands into the device's ring (patch
// values applied on the way), then the device consumes the ring in order. After each submit the queue
// raises its timeline signal to the value submit() returned, so the host (or another queue) can wait
// for exactly that submit.
#pragma once
#include <chrono>
#include <cstdint>
#include <span>
#include <string>

#include "tinyhybrid/hcq/command_buffer.h"
#include "tinyhybrid/hcq/signal.h"

namespace th::hcq {

class Queue {
 public:
  virtual ~Queue();
  Queue() = default;
  Queue(const Queue&) = delete;
  Queue& operator=(const Queue&) = delete;

  virtual const std::string& name() const noexcept = 0;
  // Rises by one per submit; value n means the first n submits are complete.
  virtual const SignalRef& timeline() const noexcept = 0;

  // Runs `cb` with `patches` (one value per slot of cb, or empty for the slots' defaults). Returns the
  // timeline value that marks this submit complete. Blocks while the ring is full. Thread-safe.
  // Throws std::invalid_argument for a wrong number of patches.
  virtual uint64_t submit(const CommandBuffer& cb, std::span<const uint64_t> patches = {}) = 0;
  // Whether submit(cb) would have to wait for ring space now (a Python binding releases the GIL then).
  virtual bool would_block(const CommandBuffer& cb) const = 0;
  // The value the latest submit returned (0 before the first).
  virtual uint64_t last_submitted() const noexcept = 0;

  // Until the timeline reaches `value` (a submit's return value); false on timeout. A device may sleep
  // here and be woken by its own queue, which a plain Signal wait cannot.
  virtual bool wait(uint64_t value, std::chrono::milliseconds timeout);
  // Until everything submitted so far has completed. Throws SignalTimeout naming the timeline.
  void synchronize(std::chrono::milliseconds timeout = kDefaultTimeout);

 protected:
  // The values a submit writes into cb's slots: `patches`, or the slots' defaults when it is empty. Throws
  // std::invalid_argument naming the queue for a wrong number of patches.
  std::span<const uint64_t> slot_values(const CommandBuffer& cb, std::span<const uint64_t> patches) const;
};

}  // namespace th::hcq
