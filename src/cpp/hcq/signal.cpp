#include "tinyhybrid/hcq/signal.h"

#include <stdexcept>
#include <utility>

#include "tinyhybrid/hcq/wait.h"

namespace th::hcq {

namespace {
std::string timeout_message(const std::string& signal, uint64_t wanted, uint64_t seen, std::chrono::milliseconds t) {
  return "signal '" + signal + "' timed out after " + std::to_string(t.count()) + " ms waiting for value >= " +
         std::to_string(wanted) + " (saw " + std::to_string(seen) + ")";
}
}  // namespace

SignalTimeout::SignalTimeout(const std::string& signal, uint64_t wanted, uint64_t seen, std::chrono::milliseconds timeout)
    : std::runtime_error(timeout_message(signal, wanted, seen, timeout)), signal_(signal), wanted_(wanted), seen_(seen) {}

DeviceFault::DeviceFault(const std::string& signal, uint64_t value, const std::string& what)
    : std::runtime_error(what), signal_(signal), value_(value) {}

Signal::Signal(Key, std::string name, std::unique_ptr<Cell> cell, std::atomic<uint64_t>* word, std::shared_ptr<void> owner)
    : name_(std::move(name)), cell_(std::move(cell)), word_(word), owner_(std::move(owner)) {}

Signal::~Signal() = default;

SignalRef Signal::create(std::string name, uint64_t initial) {
  auto cell = std::make_unique<Cell>();
  cell->value.store(initial, std::memory_order_relaxed);
  std::atomic<uint64_t>* word = &cell->value;
  return std::make_shared<Signal>(Key{}, std::move(name), std::move(cell), word, nullptr);
}

SignalRef Signal::external(std::string name, std::atomic<uint64_t>* word, std::shared_ptr<void> owner) {
  if (word == nullptr || reinterpret_cast<uintptr_t>(word) % alignof(std::atomic<uint64_t>) != 0)
    throw std::invalid_argument("signal '" + name + "': external storage must be a non-null, 8-byte aligned address");
  return std::make_shared<Signal>(Key{}, std::move(name), nullptr, word, std::move(owner));
}

bool Signal::wait_for(uint64_t v, std::chrono::milliseconds timeout) const {
  const auto reached = [&] {
    if (value() < v) {
      if (stopped_.load(std::memory_order_acquire)) throw DeviceFault(name_, v, stop_what_);
      return false;
    }
    check(v);
    return true;
  };
  if (reached()) return true;
  Backoff backoff;
  for (;;) {
    backoff.step();
    if (reached()) return true;
    if (timeout != kNoTimeout && backoff.elapsed() >= timeout) {
      // Refresh the clock before giving up: elapsed() may be up to 32 spin steps old.
      if (backoff.elapsed(true) >= timeout) return reached();
    }
  }
}

void Signal::fault(uint64_t value, std::string what) {
  const std::lock_guard lock(fault_mu_);
  if (faulted_.load(std::memory_order_relaxed)) return;
  fault_value_ = value;
  fault_what_ = std::move(what);
  faulted_.store(true, std::memory_order_release);
}

void Signal::stop(std::string what) {
  const std::lock_guard lock(fault_mu_);
  if (stopped_.load(std::memory_order_relaxed)) return;
  stop_what_ = std::move(what);
  stopped_.store(true, std::memory_order_release);
}

void Signal::throw_fault(uint64_t reached) const {
  std::string what;
  uint64_t at = 0;
  {
    const std::lock_guard lock(fault_mu_);
    if (!faulted_.load(std::memory_order_relaxed) || fault_value_ > reached) return;
    what = std::move(fault_what_);
    at = fault_value_;
    faulted_.store(false, std::memory_order_relaxed);
  }
  throw DeviceFault(name_, at, what);
}

void Signal::wait(uint64_t v, std::chrono::milliseconds timeout) const {
  if (!wait_while_busy([&](std::chrono::milliseconds slice) { return wait_for(v, slice); }, [&] { return activity(); }, timeout, timeout))
    throw SignalTimeout(name_, v, value(), timeout);
}

}  // namespace th::hcq
