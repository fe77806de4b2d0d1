#include "tinyhybrid/hcq/queue.h"

#include <stdexcept>
#include <string>

#include "tinyhybrid/hcq/wait.h"

namespace th::hcq {

Queue::~Queue() = default;

bool Queue::wait(uint64_t value, std::chrono::milliseconds timeout) { return timeline()->wait_for(value, timeout); }

void Queue::synchronize(std::chrono::milliseconds timeout) {
  const uint64_t want = last_submitted();
  if (!wait_while_busy([&](std::chrono::milliseconds slice) { return wait(want, slice); }, [&] { return timeline()->activity(); }, timeout,
                       timeout))
    throw SignalTimeout(timeline()->name(), want, timeline()->value(), timeout);
}

std::span<const uint64_t> Queue::slot_values(const CommandBuffer& cb, std::span<const uint64_t> patches) const {
  if (patches.empty()) return cb.slot_defaults();
  if (patches.size() != cb.num_slots())
    throw std::invalid_argument(name() + ": submit got " + std::to_string(patches.size()) + " patch values for a command buffer with " +
                                std::to_string(cb.num_slots()) + " slots");
  return patches;
}

}  // namespace th::hcq
