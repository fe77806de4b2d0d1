#include "drivers/mock/amd_channel.h"

#include <span>
#include <stdexcept>

#include "tinyhybrid/hcq/wait.h"

namespace th::mock {

MockAmdGpu::MockAmdGpu(bool sdma, AmdCommandProcessor::Dispatcher dispatch, size_t ring_bytes, size_t side_bytes)
    : sdma_(sdma),
      ring_bytes_(ring_bytes),
      side_bytes_(side_bytes),
      ring_(ring_bytes),
      side_(side_bytes),
      regs_(4096),
      processor_([this, dispatch = std::move(dispatch)](const AmdLaunch& l) {
        launches_.fetch_add(1, std::memory_order_relaxed);
        if (dispatch) dispatch(l);
      }),
      thread_([this] { engine(); }) {}

MockAmdGpu::~MockAmdGpu() {
  stop_.store(true, std::memory_order_relaxed);
  thread_.join();
}

void MockAmdGpu::engine() {
  const auto* ring = reinterpret_cast<const uint32_t*>(ring_.data());
  const uint64_t dwords = ring_bytes_ / 4;
  hcq::BackoffPolicy idle;
  idle.max_nap = std::chrono::microseconds(100);
  hcq::Backoff backoff(idle);
  while (!stop_.load(std::memory_order_relaxed)) {
    const uint64_t read = *rptr(), write = *wptr();
    if (read == write) {
      backoff.step();
      continue;
    }
    backoff = hcq::Backoff(idle);
    std::atomic_thread_fence(std::memory_order_acquire);  // the packets were written before the write pointer
    // Up to the ring's end at most: packets never straddle it.
    const uint64_t at = read % dwords, n = std::min(write - read, dwords - at);
    try {
      const std::span<const uint32_t> chunk(ring + at, n);
      sdma_ ? processor_.run_sdma(chunk) : processor_.run_pm4(chunk);
    } catch (const MockFault& e) {
      fault_.set(e.what());
      signals_.stop_all(std::string("the mock AMD GPU stopped: ") + e.what());
      return;
    }
    std::atomic_thread_fence(std::memory_order_release);
    *rptr() = read + n;
  }
}

}  // namespace th::mock
