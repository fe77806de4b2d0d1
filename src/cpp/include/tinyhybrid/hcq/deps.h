// DepsTracker: which earlier submits a new one must wait for, by the byte ranges of buffers it touches.
// For every buffer it keeps the ranges last written (and read since) with the (signal, value) that marks
// the end of that access. A read waits for the writers of its bytes (RAW); a write waits for them and
// for the readers since (WAW, WAR). A write replaces what it covers: overlapping entries are split and
// only their parts outside the written range stay.
#pragma once
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "tinyhybrid/hcq/signal.h"

namespace th::hcq {

struct Dep {
  SignalRef signal;
  uint64_t value;
  bool operator==(const Dep& o) const { return signal == o.signal && value == o.value; }
};

class DepsTracker {
 public:
  // The waits an access of bytes [begin, end) of `buffer` (an id or base address) needs: one per signal,
  // with the largest value, in the order the signals were first met. Entries on `skip` are left out (a
  // queue's own earlier submits, which it already runs in order). Throws std::invalid_argument if end < begin.
  std::vector<Dep> waits_for(uint64_t buffer, uint64_t begin, uint64_t end, bool write = false,
                             const Signal* skip = nullptr) const;
  void record_write(uint64_t buffer, uint64_t begin, uint64_t end, SignalRef signal, uint64_t value);
  void record_read(uint64_t buffer, uint64_t begin, uint64_t end, SignalRef signal, uint64_t value);
  // waits_for, then record the access as ending at (signal, value).
  std::vector<Dep> access(uint64_t buffer, uint64_t begin, uint64_t end, bool write, const SignalRef& signal, uint64_t value,
                          const Signal* skip = nullptr);

  // Drops entries whose signal already reached its value: they cannot make anyone wait. Returns how many.
  size_t prune();
  void forget(uint64_t buffer);  // the buffer was freed
  void clear() { buffers_.clear(); }
  // Entries kept for `buffer` (writers + readers): for tests and leak checks.
  size_t entries(uint64_t buffer) const;

 private:
  struct Entry {
    uint64_t begin, end;
    SignalRef signal;
    uint64_t value;
  };
  struct Ranges {
    std::vector<Entry> writes, reads;
  };
  std::unordered_map<uint64_t, Ranges> buffers_;
};

}  // namespace th::hcq
