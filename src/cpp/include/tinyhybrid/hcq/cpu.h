// The CPU device: a Queue whose ring of command slots is consumed by worker threads of this process.
// One worker (the leader) takes commands in order; an exec's parts run on the leader and helper workers
// at once, and the next command starts after all parts finished.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "tinyhybrid/hcq/queue.h"

namespace th::hcq {

// The cores of CPU queues that run side by side (CPU:0, CPU:1, ...): each exec of a sharing queue asks for its
// parallelism divided by the number of sharing queues that have work, and runs on as many of the free cores as it
// gets, at least one (waiting for one when none is free). Devices busy at once split the cores instead of
// oversubscribing them, and a device busy alone still uses all of its workers.
class CoreShare {
 public:
  explicit CoreShare(uint32_t cores = 0);  // 0: usable_cpu_count()
  uint32_t cores() const noexcept { return cores_; }
  // Up to `want` cores (at least 1), waiting while none is free; give them back with release(). A waiter sleeps until
  // a release wakes it: a core handed back is taken at once, not after a nap.
  uint32_t acquire(uint32_t want) noexcept;
  void release(uint32_t n) noexcept {
    free_.fetch_add(n, std::memory_order_release);
    free_.notify_all();
  }

  std::atomic<uint32_t> busy{0};  // sharing queues whose leader has work now

 private:
  uint32_t cores_;
  std::atomic<uint32_t> free_;
};

struct CpuConfig {
  std::string name = "cpu";      // the timeline signal is "<name>:timeline"
  uint32_t num_threads = 0;      // workers; 0: default_cpu_threads()
  uint32_t ring_slots = 16384;   // a power of two; each slot holds one command (64 words)
  // How long an idle worker keeps polling before it sleeps: back-to-back submits (a JIT replay loop)
  // then find it awake, which saves a futex wake-up (~5-50 us) per submit.
  std::chrono::microseconds idle_spin{200};
  std::shared_ptr<CoreShare> share;  // null: the queue uses its workers as if alone
  // A long submit is handed to the workers in batches as it is copied into the ring: after its first `batch`
  // commands, then after twice as many more, and so on (tinygrad's JIT_BATCH_SIZE, which batches a replay the same
  // way), so the device starts on it while the host still copies. 0: once, at the end.
  uint32_t batch = 32;
  // Each worker on a CPU of its own (the leader on the process's first, helper i on the (i+1)-th), where the workers
  // are as many as the process's CPUs. Unpinned, the scheduler at times runs both workers of a 2-core machine on one
  // core for milliseconds: a quarter of an LLM's decode steps took 20-27 ms instead of 15-16. For the one queue that
  // runs a device's kernels: queues that share the cores (CoreShare) would all pin their leaders to the same CPU.
  bool pin = false;
};

// CPUs this process may use: its affinity mask, capped by a cgroup CPU quota (v2 cpu.max or v1
// cpu.cfs_quota_us / cpu.cfs_period_us, rounded up). At least 1.
uint32_t usable_cpu_count();
// NUM_CPU_THREADS when set to a positive integer, else usable_cpu_count().
uint32_t default_cpu_threads();

class CpuQueue : public Queue {
 public:
  // Starts the workers. Throws std::invalid_argument for a bad config.
  static std::unique_ptr<CpuQueue> create(const CpuConfig& config = {});
  virtual uint32_t num_threads() const noexcept = 0;
  virtual uint32_t ring_slots() const noexcept = 0;
  // How many workers an exec or a copy runs on at most, in [1, num_threads()] (num_threads() at first). Devices
  // that run side by side share the cores by lowering it; it applies to commands started after the call.
  virtual uint32_t parallelism() const noexcept = 0;
  virtual void set_parallelism(uint32_t workers) = 0;  // std::invalid_argument outside [1, num_threads()]
};

}  // namespace th::hcq
