// DepsTracker: which earlier submits a new one must wait for, by the byte ranges of buffers it touches.
// For every buffer it keeps the ranges last written (and read since) with the (signal, value) that marks
// the end of that access. A read waits for the writers of its bytes (RAW); a write waits for them and
// for the readers since (WAW, WAR). A write replaces what it covers: overlapping entries are split and
// only their parts outside the written range stay.
//
// On the runtime path it sits between the host and every queue: submit() runs a command buffer on its queue after
// the waits its declared accesses (CommandBuffer::access) need on other queues' earlier submits, then records those
// accesses as ending at the submit's timeline value. The host asks waits_for before it reads, writes or frees memory.
// Entries whose signal has passed are dropped as it goes. All members are thread-safe.
#pragma once
#include <cstdint>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "tinyhybrid/hcq/queue.h"
#include "tinyhybrid/hcq/signal.h"

namespace th::hcq {

struct Dep {
  SignalRef signal;
  uint64_t value;
  bool operator==(const Dep& o) const { return signal == o.signal && value == o.value; }
};

// One member of a group submit: a command buffer for a queue, with its patch values (empty: the slots' defaults).
struct Submission {
  Queue* queue;
  const CommandBuffer* cmdbuf;
  std::span<const uint64_t> patches = {};
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

  // Submits each member in order, each after the waits its accesses need on earlier submits of other queues (a
  // wait-only submit first when there are any), then records every member's accesses. Members do not wait on one
  // another: a group orders itself (signals between its queues). Returns each member's timeline value.
  std::vector<uint64_t> submit(std::span<const Submission> group);
  uint64_t submit(Queue& queue, const CommandBuffer& cb, std::span<const uint64_t> patches = {});

  // Drops entries whose signal already reached its value: they cannot make anyone wait. Returns how many.
  size_t prune();
  void forget(uint64_t buffer);  // the buffer was freed
  void clear();
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
  std::vector<Dep> waits_locked(uint64_t buffer, uint64_t begin, uint64_t end, bool write, const Signal* skip) const;
  void write_locked(uint64_t buffer, uint64_t begin, uint64_t end, SignalRef signal, uint64_t value);
  void read_locked(uint64_t buffer, uint64_t begin, uint64_t end, SignalRef signal, uint64_t value);
  size_t prune_locked();
  void recorded(size_t n = 1);  // prunes once enough entries were added since the last prune

  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Ranges> buffers_;
  size_t records_ = 0, prune_at_ = kFirstPrune;
  static constexpr size_t kFirstPrune = 4096;
};

}  // namespace th::hcq
