// Signal: a 64-bit timeline value in host-visible memory. Producers (a device's queue, the host) only
// raise it; consumers wait until it reaches a value. It is the one synchronisation primitive of HCQ:
// queues wait on and write signals, the host waits on a device's timeline signal.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

namespace th::hcq {

// A wait that ran out of time. The message names the signal, the awaited value and the value seen, e.g.
// "signal 'cpu:timeline' timed out after 1000 ms waiting for value >= 5 (saw 3)".
class SignalTimeout : public std::runtime_error {
 public:
  SignalTimeout(const std::string& signal, uint64_t wanted, uint64_t seen, std::chrono::milliseconds timeout);
  const std::string& signal() const noexcept { return signal_; }
  uint64_t wanted() const noexcept { return wanted_; }
  uint64_t seen() const noexcept { return seen_; }

 private:
  std::string signal_;
  uint64_t wanted_, seen_;
};

// A device-side error (a kernel that faulted) in the work that was to raise a signal to `value`. The next wait that
// reaches `value` throws it, once: the device itself goes on with later work. The message names the kernel.
class DeviceFault : public std::runtime_error {
 public:
  DeviceFault(const std::string& signal, uint64_t value, const std::string& what);
  const std::string& signal() const noexcept { return signal_; }
  uint64_t value() const noexcept { return value_; }

 private:
  std::string signal_;
  uint64_t value_;
};

// No time limit: wait() with this never throws.
inline constexpr std::chrono::milliseconds kNoTimeout = std::chrono::milliseconds::max();
// What synchronize() and Python waits use unless told otherwise (a long kernel, not a hang, must pass).
inline constexpr std::chrono::milliseconds kDefaultTimeout{30'000};

class Signal;
using SignalRef = std::shared_ptr<Signal>;

class Signal {
 public:
  // A signal with its own cache line (no false sharing with a neighbour signal or counter).
  static SignalRef create(std::string name, uint64_t initial = 0);
  // A signal whose value lives in memory someone else owns (a device's signal page). `owner` keeps that
  // memory alive as long as the signal; `word` must be 8-byte aligned.
  static SignalRef external(std::string name, std::atomic<uint64_t>* word, std::shared_ptr<void> owner);

  // Only the factories can make the key; it lets make_shared reach the constructor.
  class Key {
    friend class Signal;
    Key() = default;
  };
  struct alignas(64) Cell {
    std::atomic<uint64_t> value;
  };
  Signal(Key, std::string name, std::unique_ptr<Cell> cell, std::atomic<uint64_t>* word, std::shared_ptr<void> owner);

  Signal(const Signal&) = delete;  // its address is encoded into command streams: never moves
  Signal& operator=(const Signal&) = delete;
  ~Signal();

  // Acquire: what the producer wrote before raising the value is visible after seeing it.
  uint64_t value() const noexcept { return word_->load(std::memory_order_acquire); }
  // Release: everything this thread wrote before is visible to whoever sees the new value.
  void set(uint64_t v) noexcept { word_->store(v, std::memory_order_release); }
  // A queue whose timeline this is finished one more command of a submit: progress short of the next value.
  void note_progress() noexcept { progress_.fetch_add(1, std::memory_order_relaxed); }
  // Rises whenever the value rises or a command finishes: a wait's time limit runs from its last change.
  uint64_t activity() const noexcept { return value() + progress_.load(std::memory_order_relaxed); }

  // Until value() >= v. Throws SignalTimeout once activity() has not changed for `timeout` (never with kNoTimeout):
  // a queue working through a long submit is busy, not hung.
  void wait(uint64_t v, std::chrono::milliseconds timeout = kDefaultTimeout) const;
  // Until value() >= v or `timeout` passed, a strict limit (one slice of a longer wait): false then. Both throw a
  // DeviceFault reported at a value <= v.
  bool wait_for(uint64_t v, std::chrono::milliseconds timeout) const;

  // The producer reports a device-side error in the work that raises this signal to `value` (the first report
  // stands until a wait throws it).
  void fault(uint64_t value, std::string what);
  // Throws the reported DeviceFault if it came at a value <= `reached` (a wait that reached it), and forgets it.
  bool faulted() const noexcept { return faulted_.load(std::memory_order_acquire); }
  void check(uint64_t reached) const {
    if (faulted_.load(std::memory_order_acquire)) throw_fault(reached);
  }

  // The producer stopped for good (a mock GPU whose stream was malformed): from now on a wait for a value not yet
  // reached throws DeviceFault(what) at once, every time, instead of waiting for a value that never comes.
  void stop(std::string what);

  const std::string& name() const noexcept { return name_; }
  // The address a command stream uses to reach the value (a device writes it with release order).
  uint64_t address() const noexcept { return reinterpret_cast<uint64_t>(word_); }

 private:
  std::string name_;
  std::unique_ptr<Cell> cell_;    // own storage, or null
  std::atomic<uint64_t>* word_;   // into cell_ or into the owner's memory
  std::shared_ptr<void> owner_;   // keeps external memory alive
  void throw_fault(uint64_t reached) const;
  // A reported fault, for the waits: rare, so a mutex; `faulted_` keeps the check to one load.
  mutable std::atomic<bool> faulted_{false};
  mutable std::mutex fault_mu_;
  mutable uint64_t fault_value_ = 0;
  mutable std::string fault_what_;
  std::atomic<bool> stopped_{false};
  std::string stop_what_;  // set once, before stopped_
  std::atomic<uint64_t> progress_{0};  // commands finished (note_progress)
};

}  // namespace th::hcq
