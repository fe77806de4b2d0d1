// How a thread waits for memory that another agent (a worker thread, later a GPU) writes: spin a
// little, because most HCQ waits end within microseconds and a sleep costs tens of them; then yield, so
// that the thread we wait for gets the core when it shares ours (a loaded machine); then nap with
// growing sleeps, so a long wait costs almost no CPU.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>

namespace th::hcq {

// A hint to the core that this is a spin loop (cheaper for the sibling hyperthread, and no memory-order
// mis-speculation penalty when the awaited line finally changes).
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

struct BackoffPolicy {
  std::chrono::nanoseconds spin{std::chrono::microseconds(2)};     // pause-spin this long
  std::chrono::nanoseconds yield{std::chrono::microseconds(300)};  // then sched_yield until this much elapsed
  std::chrono::nanoseconds min_nap{std::chrono::microseconds(20)};
  std::chrono::nanoseconds max_nap{std::chrono::microseconds(250)};  // bounds the extra latency of a long wait
};

// One waiter's state: call step() between checks of the condition.
class Backoff {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Backoff(const BackoffPolicy& policy = {}) : policy_(policy), nap_(policy.min_nap) {}

  void step() {
    // While spinning the clock is read every 32 steps only (a pause is a few ns, a clock read ~20 ns);
    // past the spin phase every step may last a whole time slice, so the clock is read each time.
    if (!spinning_ || (steps_++ & 31) == 0) elapsed_ = Clock::now() - start_;
    if (elapsed_ < policy_.spin) {
      cpu_relax();
      return;
    }
    spinning_ = false;
    if (elapsed_ < policy_.yield) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(nap_);
      nap_ = nap_ * 2 < policy_.max_nap ? nap_ * 2 : policy_.max_nap;
    }
  }
  // Time since construction, as of the last clock read (fresh when `fresh`).
  Clock::duration elapsed(bool fresh = false) {
    if (fresh) elapsed_ = Clock::now() - start_;
    return elapsed_;
  }

 private:
  BackoffPolicy policy_;
  Clock::time_point start_ = Clock::now();
  Clock::duration elapsed_{0};
  std::chrono::nanoseconds nap_;
  uint64_t steps_ = 0;
  bool spinning_ = true;
};

// Calls wait_for(slice) -> bool (true: done) until it returns true. False once `timeout` has passed with no change in
// activity() (Signal::activity): a queue working through a long submit is busy, not hung. kNoTimeout-like limits
// (milliseconds::max()) never give up. The slices bound how long one call blocks (a Python wait checks Ctrl-C between).
template <class WaitFor, class Activity>
bool wait_while_busy(WaitFor&& wait_for, Activity&& activity, std::chrono::milliseconds timeout, std::chrono::milliseconds slice) {
  using Clock = std::chrono::steady_clock;
  const bool bounded = timeout != std::chrono::milliseconds::max();
  auto start = Clock::now();
  uint64_t seen = activity();
  for (;;) {
    const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    const auto left = bounded ? std::max(timeout - spent, std::chrono::milliseconds(0)) : slice;
    if (wait_for(std::min(left, slice))) return true;
    if (const uint64_t a = activity(); a != seen) {
      seen = a;
      start = Clock::now();
    } else if (bounded && Clock::now() - start >= timeout) {
      return false;
    }
  }
}

}  // namespace th::hcq
