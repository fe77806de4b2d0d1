// The CPU device: a Queue whose ring of command slots is consumed by worker threads of this process.
// One worker (the leader) takes commands in order; an exec's parts run on the leader and helper workers
// at once, and the next command starts after all parts finished.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "tinyhybrid/hcq/queue.h"

namespace th::hcq {

struct CpuConfig {
  std::string name = "cpu";      // the timeline signal is "<name>:timeline"
  uint32_t num_threads = 0;      // workers; 0: default_cpu_threads()
  uint32_t ring_slots = 16384;   // a power of two; each slot holds one command (64 words)
  // How long an idle worker keeps polling before it sleeps: back-to-back submits (a JIT replay loop)
  // then find it awake, which saves a futex wake-up (~5-50 us) per submit.
  std::chrono::microseconds idle_spin{200};
};

// CPUs this process may use: its affinity mask, capped by a cgroup CPU quota (v2 cpu.max or v1
// cpu.cfs_quota_us / cpu.cfs_period_us, rounded up). At least 1.
uint32_t usable_cpu_count();
// NUM_CPU_THREADS when set to a positive integer, else usable_cpu_count().
uint32_t default_cpu_threads();

class CpuDevice : public Queue {
 public:
  // Starts the workers. Throws std::invalid_argument for a bad config.
  static std::unique_ptr<CpuDevice> create(const CpuConfig& config = {});
  virtual uint32_t num_threads() const noexcept = 0;
  virtual uint32_t ring_slots() const noexcept = 0;
};

}  // namespace th::hcq
