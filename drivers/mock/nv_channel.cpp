#include "drivers/mock/nv_channel.h"

#include <new>
#include <stdexcept>

#include "tinyhybrid/hcq/wait.h"

namespace th::mock {

MockNvGpu::MockNvGpu(bool hopper, NvCommandProcessor::Dispatcher dispatch, uint32_t gpfifo_entries, size_t push_bytes, size_t side_bytes)
    : entries_(gpfifo_entries),
      gpfifo_(size_t(gpfifo_entries) * 8),
      push_(push_bytes),
      side_(side_bytes),
      userd_(0x2000),
      processor_(hopper,
                 [this, dispatch = std::move(dispatch)](const NvLaunch& l) {
                   launches_.fetch_add(1, std::memory_order_relaxed);
                   if (dispatch) dispatch(l);
                 }),
      thread_([this] { front_end(); }) {}

MockNvGpu::~MockNvGpu() {
  stop_.store(true, std::memory_order_relaxed);
  thread_.join();
}

void MockNvGpu::front_end() {
  auto* entries = reinterpret_cast<const uint32_t*>(gpfifo_.data());
  hcq::BackoffPolicy idle;
  idle.max_nap = std::chrono::microseconds(100);
  hcq::Backoff backoff(idle);
  while (!stop_.load(std::memory_order_relaxed)) {
    const uint32_t get = *gp_get(), put = *gp_put();
    if (get == put) {
      backoff.step();
      continue;
    }
    backoff = hcq::Backoff(idle);
    std::atomic_thread_fence(std::memory_order_acquire);  // the entry and its segment were written before GPPut
    try {
      processor_.run_entry(entries[2 * get], entries[2 * get + 1]);
    } catch (const MockFault& e) {
      fault_.set(e.what());
      signals_.stop_all(std::string("the mock NVIDIA GPU stopped: ") + e.what());
      return;
    }
    std::atomic_thread_fence(std::memory_order_release);
    *gp_get() = (get + 1) % entries_;
  }
}

}  // namespace th::mock
