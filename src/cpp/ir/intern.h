// The intern table: the one place nodes are created, found and forgotten.
#pragma once
#include <mutex>
#include <vector>

#include "tinyhybrid/uop.h"

namespace th {

class InternTable {
 public:
  static InternTable& instance();
  // Returns the node for the key, creating it when absent. `verify` runs only when the node is new.
  template <class Verify>
  UOpRef get_or_create(Ops op, DType dtype, std::span<const UOpRef> src, Arg&& arg, Arg&& tag, const Verify& verify);
  // Called by the thread that dropped a node's count to zero.
  void forget(const UOp* node);
  size_t size();

 private:
  static constexpr size_t kInitialSlots = 1024;
  InternTable() : slots_(kInitialSlots), mask_(kInitialSlots - 1) {}
  static size_t key_hash(Ops op, DType dtype, std::span<const UOpRef> src, const Arg& arg, const Arg& tag);
  static bool same_key(const UOp* n, size_t hash, Ops op, DType dtype, std::span<const UOpRef> src, const Arg& arg,
                       const Arg& tag);
  UOpRef create(Ops op, DType dtype, std::span<const UOpRef> src, Arg&& arg, Arg&& tag, size_t hash);
  UOpRef find_locked(size_t hash, Ops op, DType dtype, std::span<const UOpRef> src, const Arg& arg, const Arg& tag);
  void insert_slot(const UOp* n);
  void erase_slot(const UOp* n);
  void rehash(size_t n_slots);  // to n_slots (a power of two above twice the size)

  // Recursive: comparing an opaque (Python) arg may run code that makes or frees nodes on this same thread.
  std::recursive_mutex mu_;
  // Each slot keeps its node's hash, so a probe compares hashes in this array and reads a node only on a match.
  struct Slot {
    size_t hash = 0;
    const UOp* node = nullptr;
  };
  std::vector<Slot> slots_;
  size_t mask_;
  size_t size_ = 0;
};

}  // namespace th
