#include <bit>
#include <atomic>
#include <optional>

#include "tinyhybrid/graph.h"

namespace th {

namespace {
inline size_t ptr_hash(const UOp* p) { return (reinterpret_cast<uintptr_t>(p) >> 4) * 0x9E3779B97F4A7C15ull; }
}  // namespace

NodeSet::NodeSet(size_t expected) {
  const size_t cap = std::bit_ceil(std::max<size_t>(16, expected * 2));
  slots_.assign(cap, nullptr);
  mask_ = cap - 1;
}

bool NodeSet::insert(const UOp* p) {
  if ((size_ + 1) * 2 > slots_.size()) grow();
  for (size_t i = (ptr_hash(p) >> 20) & mask_;; i = (i + 1) & mask_) {
    if (slots_[i] == p) return false;
    if (!slots_[i]) {
      slots_[i] = p;
      ++size_;
      return true;
    }
  }
}

bool NodeSet::contains(const UOp* p) const {
  for (size_t i = (ptr_hash(p) >> 20) & mask_;; i = (i + 1) & mask_) {
    if (slots_[i] == p) return true;
    if (!slots_[i]) return false;
  }
}

void NodeSet::grow() {
  std::vector<const UOp*> old(slots_.size() * 2, nullptr);
  old.swap(slots_);
  mask_ = slots_.size() - 1;
  size_ = 0;
  for (const UOp* p : old)
    if (p) insert(p);
}

// The "seen" set of a walk. The fast form stamps each node with the walk's number, which needs no hashing;
// one walk at a time may stamp, so a walk that finds the stamp in use by another thread falls back to a NodeSet.
class WalkMarks {
 public:
  WalkMarks() {
    if (!in_use().exchange(true, std::memory_order_acquire)) epoch_ = ++counter();
    else set_.emplace(1024);
  }
  ~WalkMarks() {
    if (!set_) in_use().store(false, std::memory_order_release);
  }
  WalkMarks(const WalkMarks&) = delete;
  WalkMarks& operator=(const WalkMarks&) = delete;
  bool insert(const UOp* n) {
    if (!set_) {
      if (n->visit_mark_ == epoch_) return false;
      n->visit_mark_ = epoch_;
      return true;
    }
    return set_->insert(n);
  }

 private:
  // Held by the walk that stamps; a nested walk (a gate that walks) or another thread's gets the NodeSet.
  static std::atomic<bool>& in_use() {
    static std::atomic<bool> flag{false};
    return flag;
  }
  static uint64_t& counter() {  // only touched by the holder of in_use
    static uint64_t c = 0;
    return c;
  }
  uint64_t epoch_ = 0;
  std::optional<NodeSet> set_;
};

namespace {
struct Frame {
  const UOp* node;
  size_t next;
};

template <bool kGated>
void walk_impl(const UOp* root, const Gate& gate, WalkMarks& seen, std::vector<const UOp*>& out,
               std::vector<Frame>& stack) {
  if (!root || !seen.insert(root) || (kGated && !gate(root))) return;
  stack.push_back({root, 0});
  while (!stack.empty()) {
    Frame& f = stack.back();
    if (f.next < f.node->nsrc()) {
      const UOp* s = f.node->src(f.next++).get();
      if (seen.insert(s) && (!kGated || gate(s))) stack.push_back({s, 0});
      continue;
    }
    out.push_back(f.node);
    stack.pop_back();
  }
}

void walk(const UOp* root, const Gate& gate, WalkMarks& seen, std::vector<const UOp*>& out, std::vector<Frame>& stack) {
  if (gate) walk_impl<true>(root, gate, seen, out, stack);
  else walk_impl<false>(root, gate, seen, out, stack);
}
}  // namespace

std::vector<const UOp*> toposort(const UOp* root, const Gate& gate) {
  std::vector<const UOp*> out;
  std::vector<Frame> stack;
  out.reserve(64);
  stack.reserve(64);
  WalkMarks seen;
  walk(root, gate, seen, out, stack);
  return out;
}

std::vector<const UOp*> toposort(std::span<const UOpRef> roots, const Gate& gate) {
  std::vector<const UOp*> out;
  std::vector<Frame> stack;
  WalkMarks seen;
  for (const UOpRef& r : roots) walk(r.get(), gate, seen, out, stack);
  return out;
}

std::vector<const UOp*> backward_slice(const UOp* root) {
  auto out = toposort(root);
  if (!out.empty()) out.pop_back();
  return out;
}

UOpRef substitute(const UOpRef& root, const SubstituteMap& map) {
  if (map.empty() || !root) return root;
  const auto order = toposort(root.get());
  std::unordered_map<const UOp*, UOpRef> done;
  done.reserve(order.size());
  std::vector<UOpRef> new_src;
  for (const UOp* n : order) {
    if (auto it = map.find(n); it != map.end()) {
      done.emplace(n, it->second);
      continue;
    }
    bool changed = false;
    new_src.clear();
    for (const UOpRef& s : n->src()) {
      auto it = done.find(s.get());
      const UOpRef& ns = it == done.end() ? s : it->second;
      changed |= ns.get() != s.get();
      new_src.push_back(ns);
    }
    if (changed) done.emplace(n, n->replace_src(new_src));
  }
  auto it = done.find(root.get());
  return it == done.end() ? root : it->second;
}

}  // namespace th
