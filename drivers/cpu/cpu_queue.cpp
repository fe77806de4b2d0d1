// The CPU device: the host side (submit: copy commands into the ring, patch, publish) and the leader
// worker (run the ring in order, split execs and large copies across the helper pool).
#include <pthread.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "drivers/cpu/ring.h"
#include "drivers/cpu/threads.h"
#include "drivers/cpu/workers.h"
#include "tinyhybrid/hcq/cpu.h"
#include "tinyhybrid/hcq/wait.h"

namespace th::cpu {

namespace {

namespace L = hcq::layout;

// Copies below this size run on one thread: waking helpers costs more than the copy saves.
constexpr uint64_t kCopySplitBytes = 1 << 20;
constexpr uint32_t kMaxThreads = 1024;
// The shortest poll before sleeping, however often polling was preempted: covers a submit that follows
// its predecessor's completion at once.
constexpr std::chrono::nanoseconds kMinSpin = std::chrono::microseconds(2);
constexpr uint32_t kMaxRingSlots = 1u << 24;

uint64_t monotonic_ns() {
  // steady_clock is CLOCK_MONOTONIC on Linux, the clock Python's time.monotonic_ns() reads.
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

std::atomic<uint64_t>* word_at(uint64_t address) { return reinterpret_cast<std::atomic<uint64_t>*>(address); }

// The copy command as a kernel of the CPU ABI: part i copies the i-th 64-byte aligned chunk.
void copy_part(const uint64_t* args, uint32_t part, uint32_t parts) {
  const uint64_t n = args[2];
  const uint64_t chunk = ((n + parts - 1) / parts + 63) & ~uint64_t(63);
  const uint64_t begin = uint64_t(part) * chunk;
  if (begin >= n) return;
  std::memcpy(reinterpret_cast<char*>(args[0]) + begin, reinterpret_cast<const char*>(args[1]) + begin,
              std::min(chunk, n - begin));
}

// The cores one command runs on, held from the shared budget while it runs.
struct Cores {
  hcq::CoreShare* share;
  uint32_t n;
  Cores(hcq::CoreShare* s, uint32_t want) : share(s), n(s ? s->acquire(want) : want) {}
  ~Cores() {
    if (share) share->release(n);
  }
  Cores(const Cores&) = delete;
  Cores& operator=(const Cores&) = delete;
};

// The CPUs a pinned queue's workers keep to: all of the process's, one a worker, or none where the counts differ (with
// fewer workers than CPUs, two processes pinned alike would share their first CPUs while the others idle).
std::vector<int> pinned_cpus(bool pin, uint32_t threads) {
  if (!pin) return {};
  std::vector<int> cpus = allowed_cpus();
  return cpus.size() == threads ? cpus : std::vector<int>{};
}

class CpuQueueImpl final : public hcq::CpuQueue {
 public:
  CpuQueueImpl(const hcq::CpuConfig& cfg, uint32_t threads)
      : name_(cfg.name),
        threads_(threads),
        idle_spin_(cfg.idle_spin),
        share_(cfg.share),
        batch_(cfg.batch),
        timeline_(hcq::Signal::create(cfg.name + ":timeline")),
        ring_(cfg.ring_slots),
        cpus_(pinned_cpus(cfg.pin, threads)),
        pool_(threads - 1, cfg.idle_spin, cpus_),
        leader_([this] { leader_main(); }) {}

  ~CpuQueueImpl() override {
    // The leader drains what was submitted (aborting device waits that can no longer complete), then exits.
    stop_.store(true, std::memory_order_seq_cst);
    leader_bell_.ring();
    leader_.join();
  }

  const std::string& name() const noexcept override { return name_; }
  const hcq::SignalRef& timeline() const noexcept override { return timeline_; }
  uint32_t num_threads() const noexcept override { return threads_; }
  uint32_t ring_slots() const noexcept override { return ring_.size(); }
  uint32_t parallelism() const noexcept override { return parallelism_.load(std::memory_order_relaxed); }
  void set_parallelism(uint32_t workers) override {
    if (workers == 0 || workers > threads_)
      throw std::invalid_argument(name_ + ": parallelism " + std::to_string(workers) + " outside [1, " + std::to_string(threads_) + "]");
    parallelism_.store(workers, std::memory_order_relaxed);
  }
  uint64_t last_submitted() const noexcept override { return submitted_.load(std::memory_order_acquire); }

  bool would_block(const hcq::CommandBuffer& cb) const override {
    const uint64_t used = ring_.put.value.load(std::memory_order_relaxed) - ring_.done.value.load(std::memory_order_acquire);
    return used + cb.size() + 1 > ring_.size();
  }

  uint64_t submit(const hcq::CommandBuffer& cb, std::span<const uint64_t> patches) override;

  bool wait(uint64_t value, std::chrono::milliseconds timeout) override {
    if (!wait_timeline(value, timeout)) return false;
    {
      const std::lock_guard lock(mu_);
      release_completed();
    }
    timeline_->check(value);
    return true;
  }

 private:
  void publish(uint64_t put);
  void wait_space(uint64_t put);
  void release_completed();
  void leader_main();
  bool idle_wait(uint64_t cur);
  bool wait_timeline(uint64_t want, std::chrono::milliseconds timeout);
  std::chrono::nanoseconds spin() const { return std::chrono::nanoseconds(spin_ns_.load(std::memory_order_relaxed)); }
  void execute(const Slot& slot);
  void faulted(const std::string& what);  // the running submit's work stops; its timeline value reports `what`
  uint32_t workers() const noexcept;  // this command's share of the workers

  const std::string name_;
  const uint32_t threads_;
  std::atomic<uint32_t> parallelism_{threads_};
  const std::chrono::nanoseconds idle_spin_;
  const std::shared_ptr<hcq::CoreShare> share_;
  const uint32_t batch_;
  const hcq::SignalRef timeline_;
  Ring ring_;
  Doorbell leader_bell_;  // the host wakes a sleeping leader
  Doorbell done_bell_;    // the leader wakes hosts sleeping in wait/synchronize
  Doorbell space_bell_;   // the leader wakes a host waiting for ring space
  // How long the leader (and a host in synchronize) polls before sleeping, in ns: adapts between kMinSpin
  // and idle_spin_. Written by the leader only; a host reads it as a hint.
  std::atomic<int64_t> spin_ns_{idle_spin_.count()};
  std::atomic<bool> stop_{false};
  // Leader only: the submit being run (its timeline value), and whether a fault ended its work.
  uint64_t running_ = 1;
  bool abandoned_ = false;

  // Host side: submits are serialised by mu_.
  std::mutex mu_;
  uint64_t put_ = 0;        // next slot to write (== ring_.put once published)
  uint64_t done_seen_ = 0;  // a recent ring_.done, so a submit reads the leader's line only when it must
  std::atomic<uint64_t> submitted_{0};
  // What running submits reference (signals, libraries), by the timeline value that ends them.
  std::deque<std::pair<uint64_t, std::shared_ptr<const void>>> inflight_;

  const std::vector<int> cpus_;  // the workers' CPUs, leader first (empty: not pinned)
  HelperPool pool_;
  std::thread leader_;  // last member: starts once everything it uses exists
};

uint64_t CpuQueueImpl::submit(const hcq::CommandBuffer& cb, std::span<const uint64_t> patches) {
  patches = slot_values(cb, patches);
  const std::lock_guard lock(mu_);
  const auto words = cb.words();
  const auto offsets = cb.offsets();
  const auto sites = cb.sites();
  const uint64_t value = submitted_.load(std::memory_order_relaxed) + 1;
  uint64_t put = put_;
  size_t site = 0;
  uint64_t batch = batch_, handoff = batch_ != 0 ? batch_ : UINT64_MAX;  // the command count of the next hand-off
  for (size_t c = 0; c < offsets.size(); ++c) {
    if (c == handoff) {
      publish(put);
      handoff += batch *= 2;
    }
    if (put - done_seen_ >= ring_.size()) wait_space(put);
    uint64_t* dst = ring_.at(put++).w;
    const uint64_t* src = words.data() + offsets[c];
    std::memcpy(dst, src, L::words_of(src[0]) * sizeof(uint64_t));
    // Sites are in command order, so patching walks them once alongside the copy.
    for (; site < sites.size() && sites[site].command == c; ++site) dst[sites[site].word] = patches[sites[site].slot] + sites[site].addend;
  }
  // Every submit ends by raising the timeline: the host's synchronize and the in-flight bookkeeping use it.
  if (put - done_seen_ >= ring_.size()) wait_space(put);
  uint64_t* t = ring_.at(put++).w;
  t[0] = L::header(hcq::Op::Signal, L::kSignalWords);
  t[L::kSignalAddr] = timeline_->address();
  t[L::kSignalValue] = value;
  publish(put);
  submitted_.store(value, std::memory_order_release);
  if (auto refs = cb.retained()) inflight_.emplace_back(value, std::move(refs));
  release_completed();
  return value;
}

void CpuQueueImpl::publish(uint64_t put) {
  put_ = put;
  // seq_cst store, then seq_cst load of `sleeping`: pairs with the leader's store of `sleeping` and load
  // of `put` in idle_wait (see Doorbell).
  ring_.put.value.store(put, std::memory_order_seq_cst);
  if (leader_bell_.sleeping.load(std::memory_order_seq_cst) != 0) leader_bell_.ring();
}

void CpuQueueImpl::wait_space(uint64_t put) {
  // Let the leader start on what this submit has written so far, or the ring never drains.
  publish(put);
  const auto has_space = [&] {
    done_seen_ = ring_.done.value.load(std::memory_order_seq_cst);
    return put - done_seen_ < ring_.size();
  };
  if (!wait_on(space_bell_, has_space, spin(), hcq::kDefaultTimeout))
    throw std::runtime_error(name_ + ": the command ring stayed full for " + std::to_string(hcq::kDefaultTimeout.count()) +
                             " ms (is a queued wait on a signal nobody raises?); this submit was cut short");
}

void CpuQueueImpl::release_completed() {
  const uint64_t reached = timeline_->value();
  while (!inflight_.empty() && inflight_.front().first <= reached) inflight_.pop_front();
}

void CpuQueueImpl::leader_main() {
  pthread_setname_np(pthread_self(), "th-cpu-leader");
  if (!cpus_.empty()) pin_current_thread(cpus_[0]);
  const FaultStack fault_stack;
  uint64_t cur = 0;
  bool busy = false;  // counted in share_->busy
  for (;;) {
    const uint64_t put = ring_.put.value.load(std::memory_order_acquire);
    if (cur == put) {
      if (busy) share_->busy.fetch_sub(1, std::memory_order_relaxed);
      busy = false;
      if (!idle_wait(cur)) return;
      continue;
    }
    if (!busy && share_) {
      share_->busy.fetch_add(1, std::memory_order_relaxed);
      busy = true;
    }
    for (; cur != put; ++cur) {
      execute(ring_.at(cur));
      // seq_cst, then the check for a host waiting for ring space (see wait_on).
      ring_.done.value.store(cur + 1, std::memory_order_seq_cst);
      if (space_bell_.sleeping.load(std::memory_order_seq_cst) != 0) space_bell_.ring();
    }
  }
}

// Returns false when the device stops with the ring drained.
bool CpuQueueImpl::idle_wait(uint64_t cur) {
  const auto start = std::chrono::steady_clock::now();
  std::chrono::nanoseconds budget(spin_ns_.load(std::memory_order_relaxed));
  const Poll polled = poll_for(
      [&] { return ring_.put.value.load(std::memory_order_acquire) != cur || stop_.load(std::memory_order_relaxed); }, budget);
  if (polled == Poll::Ready && ring_.put.value.load(std::memory_order_acquire) != cur) return true;
  // Preempted while polling: the machine has more runnable threads than cores, where polling only takes
  // time from the host; poll much less until polling pays off again.
  if (polled == Poll::Preempted) budget = std::max<std::chrono::nanoseconds>(budget / 4, kMinSpin);

  const uint32_t seq = leader_bell_.seq.load(std::memory_order_seq_cst);
  leader_bell_.sleeping.store(1, std::memory_order_seq_cst);
  bool running = true;
  if (ring_.put.value.load(std::memory_order_seq_cst) == cur) {
    if (stop_.load(std::memory_order_seq_cst)) {
      running = false;
    } else {
      Doorbell::sleep(leader_bell_.seq, seq, std::chrono::seconds(1));
    }
  }
  leader_bell_.sleeping.store(0, std::memory_order_relaxed);
  if (polled == Poll::Timeout) {
    // Work that came soon after the poll gave up: a somewhat longer poll would have saved the wake-up.
    const auto idle = std::chrono::steady_clock::now() - start;
    if (idle < idle_spin_) budget = std::min<std::chrono::nanoseconds>(idle_spin_, std::max<std::chrono::nanoseconds>(2 * budget, 2 * idle));
  }
  spin_ns_.store(budget.count(), std::memory_order_relaxed);
  return running;
}

bool CpuQueueImpl::wait_timeline(uint64_t want, std::chrono::milliseconds timeout) {
  // A seq_cst load: it pairs with the leader's seq_cst timeline store and its check for sleepers.
  const std::atomic<uint64_t>* word = word_at(timeline_->address());
  return wait_on(
      done_bell_, [&] { return word->load(std::memory_order_seq_cst) >= want; }, spin(), timeout);
}

uint32_t CpuQueueImpl::workers() const noexcept {
  const uint32_t mine = parallelism();
  if (!share_) return mine;
  const uint32_t busy = share_->busy.load(std::memory_order_relaxed);
  return busy > 1 ? std::max<uint32_t>(1, mine / busy) : mine;
}

void CpuQueueImpl::faulted(const std::string& what) {
  timeline_->fault(running_, name_ + ": " + what + " in submit " + std::to_string(running_) +
                                 "; the rest of that submit did not run");
  abandoned_ = true;
}

void CpuQueueImpl::execute(const Slot& slot) {
  const uint64_t* w = slot.w;
  const hcq::Op op = L::op_of(w[0]);
  // After a fault the submit's remaining work is skipped; its waits and signals still run, so nothing waits forever.
  if (abandoned_ && (op == hcq::Op::Exec || op == hcq::Op::Copy)) return;
  switch (op) {
    case hcq::Op::Barrier:
      // Commands already run one after another, each finished (all parts joined) before the next.
      break;
    case hcq::Op::Wait: {
      const std::atomic<uint64_t>* word = word_at(w[L::kSignalAddr]);
      const uint64_t want = w[L::kSignalValue];
      hcq::Backoff backoff;
      // A device stopping for good gives up waits nobody will satisfy.
      while (word->load(std::memory_order_acquire) < want && !stop_.load(std::memory_order_relaxed)) backoff.step();
      break;
    }
    case hcq::Op::Signal:
      if (w[L::kSignalAddr] == timeline_->address()) {
        // The end of a submit: wake a host sleeping in synchronize (seq_cst: see Doorbell).
        word_at(w[L::kSignalAddr])->store(w[L::kSignalValue], std::memory_order_seq_cst);
        if (done_bell_.sleeping.load(std::memory_order_seq_cst) != 0) done_bell_.ring();
        running_ = w[L::kSignalValue] + 1;
        abandoned_ = false;
      } else {
        word_at(w[L::kSignalAddr])->store(w[L::kSignalValue], std::memory_order_release);
      }
      break;
    case hcq::Op::Exec: {
      const Cores cores(share_.get(), static_cast<uint32_t>(std::min<uint64_t>(w[L::kExecGlobal], workers())));
      if (const Fault f = pool_.run(reinterpret_cast<hcq::KernelFn>(w[L::kExecFn]), w + L::kExecArgs, cores.n))
        faulted("kernel '" + std::string(reinterpret_cast<const char*>(w[L::kExecName])) + "' faulted: " + f.describe());
      timeline_->note_progress();  // a long submit (a whole JIT replay) is busy, not hung, while its kernels finish
      break;
    }
    case hcq::Op::Copy: {
      const uint64_t n = w[L::kCopySize];
      if (n == 0) break;
      const Cores cores(share_.get(), static_cast<uint32_t>(std::clamp<uint64_t>(n / kCopySplitBytes, 1, workers())));
      if (const Fault f = pool_.run(copy_part, w + L::kCopyDst, cores.n))
        faulted("a copy of " + std::to_string(n) + " bytes faulted: " + f.describe());
      timeline_->note_progress();
      break;
    }
    case hcq::Op::Timestamp:
      word_at(w[L::kTimestampAddr])->store(monotonic_ns(), std::memory_order_release);
      break;
  }
}

}  // namespace

}  // namespace th::cpu

namespace th::hcq {

CoreShare::CoreShare(uint32_t cores) : cores_(cores != 0 ? cores : usable_cpu_count()), free_(cores_) {}

uint32_t CoreShare::acquire(uint32_t want) noexcept {
  want = std::max<uint32_t>(1, want);
  for (uint32_t f = free_.load(std::memory_order_acquire);;) {
    if (f == 0) {
      // A core comes back when another queue's command ends: poll briefly (a short command), then sleep until then.
      if (cpu::poll_for([&] { return free_.load(std::memory_order_acquire) != 0; }, cpu::kMinSpin) != cpu::Poll::Ready)
        free_.wait(0, std::memory_order_acquire);
      f = free_.load(std::memory_order_acquire);
      continue;
    }
    const uint32_t take = std::min(f, want);
    if (free_.compare_exchange_weak(f, f - take, std::memory_order_acquire)) return take;
  }
}

std::unique_ptr<CpuQueue> CpuQueue::create(const CpuConfig& config) {
  const uint32_t threads = config.num_threads != 0 ? config.num_threads : default_cpu_threads();
  if (threads > cpu::kMaxThreads)
    throw std::invalid_argument("cpu device '" + config.name + "': " + std::to_string(threads) + " threads (at most " +
                                std::to_string(cpu::kMaxThreads) + ")");
  const uint32_t slots = config.ring_slots;
  if (slots == 0 || (slots & (slots - 1)) != 0 || slots > cpu::kMaxRingSlots)
    throw std::invalid_argument("cpu device '" + config.name + "': ring_slots must be a power of two in [1, " +
                                std::to_string(cpu::kMaxRingSlots) + "], got " + std::to_string(slots));
  return std::make_unique<cpu::CpuQueueImpl>(config, threads);
}

}  // namespace th::hcq
