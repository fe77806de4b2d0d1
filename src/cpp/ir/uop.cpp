#include "tinyhybrid/uop.h"

#include <cstddef>
#include <new>

#include "intern.h"
#include "tinyhybrid/facts.h"
#include "tinyhybrid/const.h"
#include "verify.h"

namespace th {

namespace {
constexpr size_t mix(size_t h, size_t v) { return h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2)); }
static_assert(sizeof(UOp) % alignof(UOpRef) == 0, "sources follow the node");
constexpr size_t kNodeAlign = alignof(UOp);
constexpr size_t node_bytes(size_t nsrc) { return sizeof(UOp) + nsrc * sizeof(UOpRef); }
}  // namespace

// ---- intern table ----

InternTable& InternTable::instance() {
  // Leaked on purpose: nodes held by static objects elsewhere may outlive any destruction order we could pick.
  static InternTable* table = new InternTable();
  return *table;
}

size_t InternTable::key_hash(Ops op, DType dtype, std::span<const UOpRef> src, const Arg& arg, const Arg& tag) {
  size_t h = mix(static_cast<size_t>(op) * 0x100000001b3ull, dtype.hash());
  for (const UOpRef& s : src) h = mix(h, reinterpret_cast<uintptr_t>(s.get()) >> 4);
  h = mix(h, arg.hash());
  if (!tag.is_none()) h = mix(h, tag.hash());
  // avalanche, so the low bits the table indexes with depend on every input bit (fewer, shorter probe runs)
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

bool InternTable::same_key(const UOp* n, size_t hash, Ops op, DType dtype, std::span<const UOpRef> src,
                           const Arg& arg, const Arg& tag) {
  if (n->hash_ != hash || n->op_ != op || n->dtype_ != dtype || n->nsrc_ != src.size()) return false;
  for (size_t i = 0; i < src.size(); ++i)
    if (n->srcs()[i].get() != src[i].get()) return false;
  return n->arg_ == arg && n->tag() == tag;
}

UOpRef InternTable::find_locked(size_t h, Ops op, DType dtype, std::span<const UOpRef> src, const Arg& arg,
                                const Arg& tag) {
  // slots_ and mask_ are read afresh each step: a comparison or release below may change the table (then a probe can
  // miss its key and the caller makes a second node for it, which only a key whose equality has side effects risks).
  for (size_t i = h & mask_; i < slots_.size() && slots_[i].node; i = (i + 1) & mask_) {
    if (slots_[i].hash != h) continue;
    const UOp* n = slots_[i].node;
    // Hold the node while its arg is compared: the comparison may run Python that drops the node's last reference.
    uint32_t c = n->refcount_.load(std::memory_order_relaxed);
    while (c != 0 && !n->refcount_.compare_exchange_weak(c, c + 1, std::memory_order_relaxed)) {}
    if (c == 0) {
      // Its count reached zero on another thread, which waits on this lock to forget it: never revive it.
      if (!same_key(n, h, op, dtype, src, arg, tag)) continue;
      const_cast<UOp*>(n)->in_table_ = false;
      erase_slot(n);
      return nullptr;
    }
    UOpRef hold = UOpRef::adopt(n);
    if (same_key(n, h, op, dtype, src, arg, tag)) return hold;  // a held node's key cannot change
    hold = UOpRef();  // may free the node
  }
  return nullptr;
}

template <class Verify>
UOpRef InternTable::get_or_create(Ops op, DType dtype, std::span<const UOpRef> src, Arg&& arg, Arg&& tag,
                                  const Verify& verify) {
  const size_t h = key_hash(op, dtype, src, arg, tag);
  // One critical section: find, or verify and make and insert. Verifying and allocating under the lock is cheaper
  // than a second lookup after them.
  std::lock_guard lock(mu_);
  if (UOpRef found = find_locked(h, op, dtype, src, arg, tag)) return found;
  verify(op, dtype, src, arg);
  UOpRef fresh = create(op, dtype, src, std::move(arg), std::move(tag), h);
  insert_slot(fresh.get());
  return fresh;
}

UOpRef InternTable::create(Ops op, DType dtype, std::span<const UOpRef> src, Arg&& arg, Arg&& tag, size_t hash) {
  // One allocation per node: the node, then its sources.
  static_assert(kNodeAlign <= __STDCPP_DEFAULT_NEW_ALIGNMENT__);
  void* mem = ::operator new(node_bytes(src.size()));
  auto* n = new (mem) UOp(op, dtype, static_cast<uint32_t>(src.size()), std::move(arg), std::move(tag), hash);
  for (size_t i = 0; i < src.size(); ++i) new (&n->srcs()[i]) UOpRef(src[i]);
  return UOpRef::adopt(n);
}

void InternTable::insert_slot(const UOp* n) {
  if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.size() * 2);  // at most half full: short probe runs
  size_t i = n->hash_ & mask_;
  while (slots_[i].node) i = (i + 1) & mask_;
  slots_[i] = {n->hash_, n};
  ++size_;
}

void InternTable::erase_slot(const UOp* n) {
  size_t i = n->hash_ & mask_;
  while (slots_[i].node != n) i = (i + 1) & mask_;
  // Backward-shift deletion keeps probe chains intact without tombstones.
  size_t j = i;
  for (;;) {
    j = (j + 1) & mask_;
    if (!slots_[j].node) break;
    const size_t home = slots_[j].hash & mask_;
    if (((j - home) & mask_) >= ((j - i) & mask_)) {
      slots_[i] = slots_[j];
      i = j;
    }
  }
  slots_[i] = Slot{};
  --size_;
  // and at least 1/8 full once it is past its first size: after a big graph is freed, new nodes probe a table that
  // fits in cache rather than one sized for the graph
  if (slots_.size() > kInitialSlots && size_ * 8 < slots_.size()) rehash(slots_.size() / 2);
}

void InternTable::rehash(size_t n_slots) {
  std::vector<Slot> old(n_slots);
  old.swap(slots_);
  mask_ = slots_.size() - 1;
  for (const Slot& old_slot : old) {
    if (!old_slot.node) continue;
    size_t i = old_slot.hash & mask_;
    while (slots_[i].node) i = (i + 1) & mask_;
    slots_[i] = old_slot;
  }
}

void InternTable::forget(const UOp* node) {
  std::lock_guard lock(mu_);
  if (node->in_table_) erase_slot(node);
}

size_t InternTable::size() {
  std::lock_guard lock(mu_);
  return size_;
}

size_t live_uop_count() { return InternTable::instance().size(); }

// ---- node lifetime ----

UOp::UOp(Ops op, DType dtype, uint32_t nsrc, Arg arg, Arg tag, size_t hash)
    : dtype_(dtype), hash_(hash), arg_(std::move(arg)),
      tag_(tag.is_none() ? nullptr : std::make_unique<const Arg>(std::move(tag))), op_(op), nsrc_(nsrc) {}

UOp::~UOp() { std::unique_ptr<const NodeFacts> owned(facts_.load(std::memory_order_relaxed)); }

const NodeFacts* UOp::install_facts(std::unique_ptr<NodeFacts> f) const {
  const NodeFacts* expected = nullptr;
  if (facts_.compare_exchange_strong(expected, f.get(), std::memory_order_acq_rel)) return f.release();
  return expected;  // another thread was first; ours is dropped
}

const Arg& UOp::tag() const {
  static const Arg none{};  // braces: clang 14 refuses a const default-initialized object of a class with no user-provided default constructor
  return tag_ ? *tag_ : none;
}

void UOp::destroy(const UOp* node) {
  // Iterative, so dropping the root of a 10^6-node chain does not recurse.
  std::vector<const UOp*> dying;  // allocates only when a source dies too
  for (const UOp* n = node; n;) {
    InternTable::instance().forget(n);
    for (size_t i = 0; i < n->nsrc_; ++i) {
      const UOp* s = n->srcs()[i].release();
      if (s->refcount_.fetch_sub(1, std::memory_order_acq_rel) == 1) dying.push_back(s);
    }
    auto* mut = const_cast<UOp*>(n);
    mut->~UOp();
    ::operator delete(mut);
    n = nullptr;
    if (!dying.empty()) {
      n = dying.back();
      dying.pop_back();
    }
  }
}

// ---- construction ----

UOpRef UOp::make(Ops op, DType dtype, std::span<const UOpRef> src, Arg arg, Arg tag) {
  if (op == Ops::CONST) arg = const_for(dtype, arg);
  return InternTable::instance().get_or_create(op, dtype, src, std::move(arg), std::move(tag), verify_node);
}

UOpRef UOp::const_int(DType dtype, i128 v) { return make(Ops::CONST, dtype, {}, Arg::integer(v)); }
UOpRef UOp::const_float(DType dtype, double v) { return make(Ops::CONST, dtype, {}, Arg::floating(v)); }
UOpRef UOp::const_bool(bool v) { return make(Ops::CONST, DType::bool_(), {}, Arg::boolean(v)); }
UOpRef UOp::const_of(DType dtype, const Arg& value) { return make(Ops::CONST, dtype, {}, value); }

UOpRef UOp::variable(std::string_view name, i128 min, i128 max, DType dtype) {
  return make(Ops::DEFINE_VAR, dtype, {}, Arg::tuple({Arg::string(name), Arg::integer(min), Arg::integer(max)}));
}

UOpRef UOp::replace_src(std::span<const UOpRef> new_src) const { return make(op_, dtype_, new_src, arg_, tag()); }
UOpRef UOp::with_arg(Arg new_arg) const { return make(op_, dtype_, src(), std::move(new_arg), tag()); }
UOpRef UOp::with_tag(Arg new_tag) const { return make(op_, dtype_, src(), arg_, std::move(new_tag)); }

}  // namespace th
