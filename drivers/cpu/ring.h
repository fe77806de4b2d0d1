// The CPU device's command ring: fixed-size slots, each holding one command in the command-buffer layout
// (header + fields, at most 64 words). The host writes slots and raises `put`; the leader worker runs
// slot after slot and raises `done`. A slot is reused only after done passed it, so a running kernel's
// argument words (read straight from its slot) stay valid for the whole call.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>

#include "tinyhybrid/hcq/command_buffer.h"

namespace th::cpu {

struct alignas(64) Slot {
  uint64_t w[hcq::layout::kMaxWords];
};

// Each counter on its own cache line: the host polls `done` only when the ring looks full, the leader
// polls `put` while idle; sharing a line would make every raise of one disturb the other's reader.
struct alignas(64) Counter {
  std::atomic<uint64_t> value{0};
};

class Ring {
 public:
  // Slots are always written before they are read: no need to zero (and fault in) megabytes up front.
  explicit Ring(uint32_t slots) : size_(slots), mask_(slots - 1), slots_(std::make_unique_for_overwrite<Slot[]>(slots)) {}
  uint32_t size() const noexcept { return size_; }
  // Counters grow forever (2^64 commands never wrap); a slot index is the counter modulo the size.
  Slot& at(uint64_t index) noexcept { return slots_[index & mask_]; }

  Counter put;   // commands written by the host
  Counter done;  // commands completed by the leader

 private:
  uint32_t size_;
  uint64_t mask_;
  std::unique_ptr<Slot[]> slots_;
};

}  // namespace th::cpu
