// The helper threads of the CPU device: they run the parts of a split exec (or a large copy) alongside
// the leader, the worker that consumes the ring.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "drivers/cpu/fault.h"
#include "tinyhybrid/hcq/program.h"
#include "tinyhybrid/hcq/wait.h"

namespace th::cpu {

// Sleeping/waking protocol shared by the leader, the helpers and a host in synchronize(): a sleeper
// announces itself in `sleeping`, re-checks its condition, then sleeps on `seq`; a waker makes its change,
// then bumps `seq` and wakes only when someone announced sleep. With both sides seq_cst, either the
// sleeper sees the change or the waker sees the sleeper: no lost wake-up, and no syscall on the busy path.
struct alignas(64) Doorbell {
  std::atomic<uint32_t> seq{0};
  std::atomic<uint32_t> sleeping{0};  // how many sleep (or are about to)

  void ring() {
    seq.fetch_add(1, std::memory_order_seq_cst);
    if (sleeping.load(std::memory_order_seq_cst) != 0) wake_all(seq);
  }
  // Sleeps while seq == `seen`, at most `timeout` (spurious returns are fine: callers re-check).
  static void sleep(std::atomic<uint32_t>& seq, uint32_t seen, std::chrono::nanoseconds timeout);
  static void wake_all(std::atomic<uint32_t>& seq);
};

enum class Poll { Ready, Timeout, Preempted };

// Polls `ready` for up to `budget`: pause-spins for half a microsecond (work arriving back to back),
// then yields between polls. The pause phase is short because the thread we wait for may share our
// core (an oversubscribed machine, or the scheduler's choice): a pure spin would hold the core it needs
// for a whole time slice, a sched_yield hands it over at once (and costs well under a microsecond when
// nobody else wants the core). Gives up early when it notices it was preempted (a long gap between two
// of its own clock reads): then a sleeper woken by a futex serves better than a poller.
template <class Ready>
Poll poll_for(Ready&& ready, std::chrono::nanoseconds budget) {
  using Clock = std::chrono::steady_clock;
  constexpr std::chrono::nanoseconds kPauseSpin{500}, kPreemptedGap{10'000};
  const auto start = Clock::now();
  auto last = start;
  bool yielding = false;
  for (uint32_t i = 1;; ++i) {
    if (ready()) return Poll::Ready;
    if (yielding || (i & 7) == 0) {  // a clock read costs about as much as a pause
      const auto now = Clock::now();
      if (now - last > kPreemptedGap) return Poll::Preempted;
      if (now - start >= budget) return Poll::Timeout;
      last = now;
      yielding = now - start >= kPauseSpin;
    }
    if (yielding) {
      std::this_thread::yield();
    } else {
      hcq::cpu_relax();
    }
  }
}

// Polls `ready`, then sleeps on `bell` until ready() holds; false when `timeout` (kNoTimeout: never)
// passed first. The waker makes ready() true with a seq_cst store, then loads bell.sleeping (seq_cst) and
// rings when it is non-zero: with the sleeper's seq_cst increment of `sleeping` before its last check,
// one of the two sees the other.
template <class Ready>
bool wait_on(Doorbell& bell, Ready&& ready, std::chrono::nanoseconds spin, std::chrono::milliseconds timeout) {
  if (ready() || poll_for(ready, spin) == Poll::Ready) return true;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const auto elapsed = std::chrono::steady_clock::now() - start;
    const bool forever = timeout == std::chrono::milliseconds::max();
    if (!forever && elapsed >= timeout) return ready();
    const std::chrono::nanoseconds cap = std::chrono::seconds(1);  // re-check now and then regardless
    const auto left = forever ? cap : std::min<std::chrono::nanoseconds>(timeout - elapsed, cap);
    const uint32_t seq = bell.seq.load(std::memory_order_seq_cst);
    bell.sleeping.fetch_add(1, std::memory_order_seq_cst);
    const bool done = ready();
    if (!done) Doorbell::sleep(bell.seq, seq, left);
    bell.sleeping.fetch_sub(1, std::memory_order_seq_cst);
    if (done || ready()) return true;
  }
}

class HelperPool {
 public:
  // `helpers` threads (the leader is the extra one); an idle helper polls for `idle_spin` before sleeping. Helper i
  // keeps to cpus[i + 1] where `cpus` is given (CpuConfig::pin).
  HelperPool(uint32_t helpers, std::chrono::nanoseconds idle_spin, std::vector<int> cpus = {});
  ~HelperPool();  // stops and joins the helpers (no job may be running)
  HelperPool(const HelperPool&) = delete;
  HelperPool& operator=(const HelperPool&) = delete;

  uint32_t helpers() const noexcept { return static_cast<uint32_t>(threads_.size()); }
  // fn(args, i, parts) for every i in [0, parts) with parts <= helpers() + 1; the caller runs part 0.
  // Returns once all parts finished, with their memory effects visible to the caller, and the first part's fault
  // if any faulted (the caller's thread holds a FaultStack).
  Fault run(hcq::KernelFn fn, const uint64_t* args, uint32_t parts);

 private:
  // One per helper, so the leader never rewrites a job another helper may still be reading.
  struct alignas(64) Mailbox {
    Doorbell bell;
    hcq::KernelFn fn = nullptr;
    const uint64_t* args = nullptr;
    uint32_t part = 0, parts = 0;
  };
  void helper_main(uint32_t index);
  void stop();

  std::chrono::nanoseconds idle_spin_;
  const std::vector<int> cpus_;
  std::unique_ptr<Mailbox[]> boxes_;
  alignas(64) std::atomic<uint32_t> pending_{0};
  // A helper's fault in the current run: the first to take `faulted_` writes `fault_`.
  std::atomic<bool> faulted_{false};
  Fault fault_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

}  // namespace th::cpu
