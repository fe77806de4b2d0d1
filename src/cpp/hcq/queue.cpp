#include "tinyhybrid/hcq/queue.h"

namespace th::hcq {

Queue::~Queue() = default;

bool Queue::wait(uint64_t value, std::chrono::milliseconds timeout) { return timeline()->wait_for(value, timeout); }

void Queue::synchronize(std::chrono::milliseconds timeout) {
  const uint64_t want = last_submitted();
  if (!wait(want, timeout)) throw SignalTimeout(timeline()->name(), want, timeline()->value(), timeout);
}

}  // namespace th::hcq
