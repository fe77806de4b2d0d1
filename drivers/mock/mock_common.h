// What the mock GPUs share: the error a malformed stream raises, and the helpers its messages and timestamps use.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <string>

namespace th::mock {

// A stream the mock cannot run: the message names the engine, the word and why.
class MockFault : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The fault that stopped a mock engine's thread: set by it, read by anyone.
class FaultLatch {
 public:
  void set(std::string what) {
    const std::lock_guard lock(mu_);
    what_ = std::move(what);
  }
  std::string get() const {
    const std::lock_guard lock(mu_);
    return what_;
  }

 private:
  mutable std::mutex mu_;
  std::string what_;
};

inline std::string hex(uint64_t v) {
  char s[24];
  std::snprintf(s, sizeof(s), "0x%llx", static_cast<unsigned long long>(v));
  return s;
}

// The mock GPUs' clock: CLOCK_MONOTONIC in ns, the one the CPU queue's timestamps read.
inline uint64_t clock_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

}  // namespace th::mock
