// The UOp: one immutable, interned graph node. The same (op, dtype, src, arg, tag) always gives the same node.
#pragma once
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tinyhybrid/arg.h"
#include "tinyhybrid/dtype.h"
#include "tinyhybrid/ops.h"

namespace th {

class UOp;
struct NodeFacts;  // facts derived on demand (value range, ...): tinyhybrid/facts.h

// An owning reference to a node (intrusive reference count).
class UOpRef {
 public:
  UOpRef() = default;
  UOpRef(std::nullptr_t) {}
  // Takes a new reference to p.
  explicit UOpRef(const UOp* p);
  UOpRef(const UOpRef& o);
  UOpRef(UOpRef&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  UOpRef& operator=(UOpRef o) noexcept {
    std::swap(p_, o.p_);
    return *this;
  }
  ~UOpRef();
  // Adopts a reference that the caller already owns.
  static UOpRef adopt(const UOp* p) {
    UOpRef r;
    r.p_ = p;
    return r;
  }
  // Gives up ownership without decrementing.
  const UOp* release() { return std::exchange(p_, nullptr); }

  const UOp* get() const { return p_; }
  const UOp* operator->() const { return p_; }
  const UOp& operator*() const { return *p_; }
  explicit operator bool() const { return p_ != nullptr; }
  bool operator==(const UOpRef& o) const { return p_ == o.p_; }
  bool operator==(const UOp* o) const { return p_ == o; }

 private:
  const UOp* p_ = nullptr;
};

// Errors raised by node construction: TypeError-like (wrong kind of input) and ValueError-like (bad value).
struct UOpTypeError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};
struct UOpValueError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

class UOp {
 public:
  // The one way to make a node: interned, verified. Throws UOpTypeError / UOpValueError on malformed input.
  static UOpRef make(Ops op, DType dtype, std::span<const UOpRef> src, Arg arg = {}, Arg tag = {});
  static UOpRef make(Ops op, DType dtype, std::initializer_list<UOpRef> src, Arg arg = {}, Arg tag = {}) {
    return make(op, dtype, std::span<const UOpRef>(src.begin(), src.size()), std::move(arg), std::move(tag));
  }

  // Conveniences that C++ rules and embedders use.
  static UOpRef const_int(DType dtype, i128 v);
  static UOpRef const_float(DType dtype, double v);
  static UOpRef const_bool(bool v);
  // A constant of dtype holding a number Arg (converted to the dtype's kind).
  static UOpRef const_of(DType dtype, const Arg& value);
  static UOpRef variable(std::string_view name, i128 min, i128 max, DType dtype = DType::int32());

  Ops op() const { return op_; }
  DType dtype() const { return dtype_; }
  std::span<const UOpRef> src() const { return {srcs(), nsrc_}; }
  const UOpRef& src(size_t i) const { return srcs()[i]; }
  size_t nsrc() const { return nsrc_; }
  const Arg& arg() const { return arg_; }
  const Arg& tag() const;
  size_t hash() const { return hash_; }
  uint32_t refcount() const { return refcount_.load(std::memory_order_relaxed); }

  // Derived node builders (all go through make()).
  UOpRef replace_src(std::span<const UOpRef> new_src) const;
  UOpRef with_arg(Arg new_arg) const;
  UOpRef with_tag(Arg new_tag) const;

  // Derived facts, computed once on first use; null until then. install_facts keeps the first installed.
  const NodeFacts* facts() const { return facts_.load(std::memory_order_acquire); }
  const NodeFacts* install_facts(std::unique_ptr<NodeFacts> f) const;

  // Fixed-point marks. Bit m set: the node is a fixed point of the rule set that owns mark m (graph_rewrite leaves it
  // unchanged). That is a property of the node and the rule set alone, as the rule set's rules read only the node
  // (PatternMatcher::set_fixed_point_mark), so it is set once and never cleared; it caches no per-call answer.
  bool has_mark(uint8_t m) const { return (marks_.load(std::memory_order_relaxed) & m) != 0; }
  void set_mark(uint8_t m) const { marks_.fetch_or(m, std::memory_order_relaxed); }

  // The Python binding keeps its object for this node here (a weak back-pointer; null when none).
  // It is read and written only by the binding, under the GIL.
  void* binding_handle() const { return binding_handle_; }
  void set_binding_handle(void* h) const { binding_handle_ = h; }

  UOp(const UOp&) = delete;
  UOp& operator=(const UOp&) = delete;

 private:
  friend class UOpRef;
  friend class InternTable;
  UOp(Ops op, DType dtype, uint32_t nsrc, Arg arg, Arg tag, size_t hash);
  ~UOp();
  static void destroy(const UOp* node);

  // Layout: what graph walks read (count, mark, then the sources right after the object) sits together at the end,
  // so a walk touches one cache line per node.
  DType dtype_;
  size_t hash_;
  Arg arg_;
  std::unique_ptr<const Arg> tag_;  // null for None, the common case, which keeps nodes small
  mutable void* binding_handle_ = nullptr;
  mutable std::atomic<const NodeFacts*> facts_{nullptr};  // owned
  mutable std::atomic<uint32_t> refcount_{1};
  Ops op_;
  bool in_table_ = true;  // guarded by the intern table's lock
  mutable std::atomic<uint8_t> marks_{0};  // fixed-point marks (in what was padding before nsrc_)
  uint32_t nsrc_;
  // Which graph walk last reached this node; see graph/toposort.cpp (guarded by the walk flag there).
  mutable uint64_t visit_mark_ = 0;
  friend class WalkMarks;
  // The sources live just past this object, in the same allocation.
  UOpRef* srcs() const { return reinterpret_cast<UOpRef*>(const_cast<UOp*>(this) + 1); }
};

inline UOpRef::UOpRef(const UOp* p) : p_(p) {
  if (p_) p_->refcount_.fetch_add(1, std::memory_order_relaxed);
}
inline UOpRef::UOpRef(const UOpRef& o) : p_(o.p_) {
  if (p_) p_->refcount_.fetch_add(1, std::memory_order_relaxed);
}
inline UOpRef::~UOpRef() {
  if (p_ && p_->refcount_.fetch_sub(1, std::memory_order_acq_rel) == 1) UOp::destroy(p_);
}

// Number of live nodes (for tests and leak checks).
size_t live_uop_count();

// Infer the dtype a node of `op` gets when none is given (void when there is no rule).
DType infer_dtype(Ops op, std::span<const UOpRef> src, const Arg& arg);

// Builders that follow tinygrad's conventions.
UOpRef alu(Ops op, std::initializer_list<UOpRef> src);
UOpRef alu(Ops op, std::span<const UOpRef> src);
UOpRef cast(const UOpRef& x, DType to);
UOpRef bitcast(const UOpRef& x, DType to);

// A readable multi-line dump, sharing repeated subtrees (what Python's repr shows).
std::string repr(const UOpRef& u);
// An expression string: "(a+(b*2))", "x0", consts as values.
std::string render(const UOpRef& u);

}  // namespace th

template <>
struct std::hash<th::UOpRef> {
  size_t operator()(const th::UOpRef& u) const noexcept { return reinterpret_cast<uintptr_t>(u.get()) >> 4; }
};
