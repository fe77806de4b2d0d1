#include "drivers/cpu/workers.h"

#include <pthread.h>
#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#endif

#include <string>

#include "drivers/cpu/threads.h"

namespace th::cpu {

// A futex on the bell's 32-bit word: unlike std::atomic::wait it takes a timeout (host waits need one).
void Doorbell::sleep(std::atomic<uint32_t>& seq, uint32_t seen, std::chrono::nanoseconds timeout) {
#if defined(__linux__)
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  const auto ns = timeout.count() > 0 ? timeout.count() : 0;
  const timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&seq), FUTEX_WAIT_PRIVATE, seen, &ts, nullptr, 0);
#else
  // Portable fallback: a short nap, then the caller re-checks.
  if (seq.load(std::memory_order_seq_cst) == seen) std::this_thread::sleep_for(std::min(timeout, std::chrono::nanoseconds(50'000)));
#endif
}

void Doorbell::wake_all(std::atomic<uint32_t>& seq) {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&seq), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr, nullptr, 0);
#else
  (void)seq;
#endif
}

HelperPool::HelperPool(uint32_t helpers, std::chrono::nanoseconds idle_spin, std::vector<int> cpus)
    : idle_spin_(idle_spin), cpus_(std::move(cpus)), boxes_(std::make_unique<Mailbox[]>(helpers)) {
  threads_.reserve(helpers);
  try {
    for (uint32_t i = 0; i < helpers; ++i) threads_.emplace_back([this, i] { helper_main(i); });
  } catch (...) {
    stop();  // out of threads: the ones started must be joined before the error leaves
    throw;
  }
}

HelperPool::~HelperPool() { stop(); }

void HelperPool::stop() {
  stop_.store(true, std::memory_order_seq_cst);
  for (uint32_t i = 0; i < threads_.size(); ++i) boxes_[i].bell.ring();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

Fault HelperPool::run(hcq::KernelFn fn, const uint64_t* args, uint32_t parts) {
  if (parts <= 1) return parts == 1 ? run_guarded(fn, args, 0, 1) : Fault{};
  pending_.store(parts - 1, std::memory_order_relaxed);
  faulted_.store(false, std::memory_order_relaxed);
  for (uint32_t p = 1; p < parts; ++p) {
    Mailbox& box = boxes_[p - 1];
    box.fn = fn;
    box.args = args;
    box.part = p;
    box.parts = parts;
    box.bell.ring();  // seq_cst: publishes the job fields above to the helper's acquire of seq
  }
  const Fault mine = run_guarded(fn, args, 0, parts);
  // The leader's own part usually ends close to the others: poll, then let the atomic wait sleep.
  if (poll_for([&] { return pending_.load(std::memory_order_acquire) == 0; }, std::chrono::microseconds(50)) != Poll::Ready) {
    for (uint32_t left; (left = pending_.load(std::memory_order_acquire)) != 0;) pending_.wait(left, std::memory_order_acquire);
  }
  // pending_'s acquire above made a helper's fault_ visible
  return mine ? mine : faulted_.load(std::memory_order_relaxed) ? fault_ : Fault{};
}

void HelperPool::helper_main(uint32_t index) {
  const std::string name = "th-cpu-h" + std::to_string(index + 1);
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
  if (index + 1 < cpus_.size()) pin_current_thread(cpus_[index + 1]);
  Mailbox& box = boxes_[index];
  const FaultStack fault_stack;
  uint32_t seen = 0;
  for (;;) {
    // Poll for a while: split execs tend to come in runs, and a futex wake-up costs more than the poll.
    uint32_t now = seen;
    if (poll_for([&] { return (now = box.bell.seq.load(std::memory_order_acquire)) != seen; }, idle_spin_) != Poll::Ready) {
      box.bell.sleeping.store(1, std::memory_order_seq_cst);
      while ((now = box.bell.seq.load(std::memory_order_seq_cst)) == seen) Doorbell::sleep(box.bell.seq, seen, std::chrono::seconds(1));
      box.bell.sleeping.store(0, std::memory_order_relaxed);
    }
    seen = now;
    if (stop_.load(std::memory_order_acquire)) return;
    if (const Fault f = run_guarded(box.fn, box.args, box.part, box.parts); f && !faulted_.exchange(true, std::memory_order_relaxed))
      fault_ = f;
    // The last helper to finish wakes the leader in case it stopped spinning (cheap when nobody waits).
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

}  // namespace th::cpu
