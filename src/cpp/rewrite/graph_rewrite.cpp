#include <array>
#include <bit>
#include <unordered_set>

#include "tinyhybrid/rewrite.h"
#include "tinyhybrid/track.h"
#include "util/small_vector.h"

namespace th {

namespace {

// The rewrite's memo: node -> its state (being rewritten, or done with a result). Open addressing on pointers, with
// the first entries and slots inside the object: most rewrites (a simplify of one expression) touch a handful of
// nodes and then allocate nothing. Entries are raw pointers: the Rewriter keeps every node it meets alive.
class Memo {
 public:
  struct Entry {
    const UOp* key;
    const UOp* result;  // null while the node is being rewritten
  };
  // The entry of n, or null. The pointer is good until the next get().
  Entry* find(const UOp* n) {
    const uint32_t* slots = slot_data();
    for (size_t i = index(n);; i = (i + 1) & mask_) {
      if (!slots[i]) return nullptr;
      Entry& e = entry(slots[i] - 1);
      if (e.key == n) return &e;
    }
  }
  Entry& get(const UOp* n) {
    if (Entry* e = find(n)) return *e;
    if ((count_ + 1) * 2 > nslots_) grow();
    const uint32_t idx = count_++;
    if (idx < kInlineEntries) inline_entries_[idx] = Entry{n, nullptr};
    else spill_.push_back(Entry{n, nullptr});
    place(idx);
    return entry(idx);
  }
  size_t size() const { return count_; }

 private:
  static constexpr size_t kInlineEntries = 32, kInlineSlots = 64;
  size_t index(const UOp* n) const { return ((reinterpret_cast<uintptr_t>(n) >> 4) * 0x9E3779B97F4A7C15ull >> 20) & mask_; }
  uint32_t* slot_data() { return big_slots_.empty() ? inline_slots_.data() : big_slots_.data(); }
  Entry& entry(uint32_t i) { return i < kInlineEntries ? inline_entries_[i] : spill_[i - kInlineEntries]; }
  void place(uint32_t idx) {
    uint32_t* slots = slot_data();
    size_t i = index(entry(idx).key);
    while (slots[i]) i = (i + 1) & mask_;
    slots[i] = idx + 1;
  }
  void grow() {
    nslots_ *= 2;
    mask_ = nslots_ - 1;
    big_slots_.assign(nslots_, 0);
    for (uint32_t i = 0; i < count_; ++i) place(i);
  }
  std::array<Entry, kInlineEntries> inline_entries_;
  std::vector<Entry> spill_;  // entries past the inline ones; slots hold indices, so these may move
  std::array<uint32_t, kInlineSlots> inline_slots_{};
  std::vector<uint32_t> big_slots_;  // used once the inline slots are outgrown
  size_t nslots_ = kInlineSlots;
  size_t mask_ = kInlineSlots - 1;
  uint32_t count_ = 0;
};

// Node lifetimes: the caller holds the root, a held node holds its sources, and every node a rule or a rebuild makes
// is moved into keep_ until the rewrite ends. So every node the walk meets outlives it, and the stack and the memo
// work on raw pointers, with no reference counting on the hot path (and no address reused by a new node, which
// would fool the memo).
class Rewriter {
 public:
  Rewriter(const PatternMatcher& pm, void* ctx, bool bottom_up, std::string_view name, const RewriteLimits& limits,
           track::Call* tracked)
      : pm_(pm), ctx_(ctx), bottom_up_(bottom_up), name_(name), limits_(limits), tracked_(tracked), mark_(pm.fixed_point_mark()) {
    if (limits_.time_limit.count()) start_ = std::chrono::steady_clock::now();
  }
  ~Rewriter() {
    for (const UOp* n : keep_) UOpRef::adopt(n);  // the references keep() took over
  }
  Rewriter(const Rewriter&) = delete;
  Rewriter& operator=(const Rewriter&) = delete;

  UOpRef run(const UOpRef& root) {
    stack_.push_back({root.get(), root.get(), Stage::Visit, SIZE_MAX});
    while (!stack_.empty()) {
      const Entry e = stack_.back();
      stack_.pop_back();
      if (done(e.key)) continue;
      switch (e.stage) {
        case Stage::Visit: visit(e); break;
        case Stage::Rebuild: rebuild(e); break;
        case Stage::Link: link(e); break;
      }
    }
    stats_.nodes = memo_.size();
    return UOpRef(done(root.get())->result);
  }
  const RewriteStats& stats() const { return stats_; }

 private:
  enum class Stage : uint8_t { Visit, Rebuild, Link };
  struct Entry {
    const UOp* key;      // the node whose result this entry computes
    const UOp* current;  // what it has become so far
    Stage stage;
    size_t rule;  // the rule that produced `current` (SIZE_MAX: none), for loop errors
  };
  // The memo entry of a finished node, or null.
  Memo::Entry* done(const UOp* n) {
    Memo::Entry* e = memo_.find(n);
    return e && e->result ? e : nullptr;
  }
  bool in_progress(const UOp* n) {
    Memo::Entry* e = memo_.find(n);
    return e && !e->result;
  }
  const UOp* keep(UOpRef n) {
    const UOp* p = n.release();
    keep_.push_back(p);
    return p;
  }

  // Bottom-up: rewrite the node to a fixed point first. Then its sources are visited.
  void visit(Entry e) {
    if (mark_ && e.current->has_mark(mark_)) {  // a known fixed point of this rule set: nothing under it changes
      finish(e.key, e.current);
      return;
    }
    if (bottom_up_) {
      size_t rule;
      if (UOpRef r = apply(e.current, &rule)) {
        std::unordered_set<const UOp*> seen{e.current};
        do {
          if (!seen.insert(r.get()).second) loop_error(rule, e.current, r.get());
          e.current = keep(std::move(r));
        } while ((r = apply(e.current, &rule)));
      }
    }
    memo_.get(e.key);  // marks it as being rewritten
    const UOp* cur = e.current;
    stack_.push_back({e.key, cur, Stage::Rebuild, SIZE_MAX});
    for (size_t i = cur->nsrc(); i-- > 0;) {
      const UOp* s = cur->src(i).get();
      if (!done(s)) stack_.push_back({s, s, Stage::Visit, SIZE_MAX});
    }
  }

  // Sources are done: rebuild with their results, or (top-down) rewrite the node itself.
  void rebuild(Entry e) {
    const UOp* cur = e.current;
    bool changed = false;
    for (const UOpRef& s : cur->src()) changed |= done(s.get())->result != s.get();
    UOpRef next;
    size_t rule = SIZE_MAX;
    if (changed) {
      new_src_.clear();
      for (const UOpRef& s : cur->src()) new_src_.emplace_back(done(s.get())->result);
      next = cur->replace_src(new_src_);
    } else if (!bottom_up_) {
      next = apply(cur, &rule);
    }
    if (!next) {
      // no rule fires on cur (top-down: just now; bottom-up: in visit) and its sources are fixed points: so is cur
      if (mark_) cur->set_mark(mark_);
      finish(e.key, e.current);
      return;
    }
    if (in_progress(next.get())) loop_error(rule, cur, next.get());
    const UOp* n = keep(std::move(next));
    stack_.push_back({e.key, n, Stage::Link, rule});
    stack_.push_back({n, n, Stage::Visit, SIZE_MAX});
  }

  void link(Entry e) { finish(e.key, done(e.current)->result); }

  void finish(const UOp* key, const UOp* result) { memo_.get(key).result = result; }

  UOpRef apply(const UOp* n, size_t* rule) {
    UOpRef r = pm_.rewrite(n, ctx_, rule);
    if (!r) return r;
    if (tracked_) [[unlikely]] {
      const Rule& fired = pm_.rule(*rule);
      tracked_->step(fired.name, fired.location, n, r.get());
    }
    if (++stats_.rewrites > limits_.max_rewrites)
      throw RewriteError(label() + ": stopped after " + std::to_string(limits_.max_rewrites) +
                         " rewrites (the rule set does not reach a fixed point); last rule: " + pm_.rule(*rule).name);
    if (limits_.time_limit.count() && (stats_.rewrites & 1023) == 0 &&
        std::chrono::steady_clock::now() - start_ > limits_.time_limit)
      throw RewriteError(label() + ": stopped at the time limit after " + std::to_string(stats_.rewrites) +
                         " rewrites; last rule: " + pm_.rule(*rule).name);
    return r;
  }

  [[noreturn]] void loop_error(size_t rule, const UOp* from, const UOp* to) const {
    const std::string who = rule == SIZE_MAX ? std::string("rebuilding sources") : "rule " + pm_.rule(rule).name;
    throw RewriteError(label() + ": rewrite loop: " + who + " turned " + std::string(op_name(from->op())) +
                       " into a node that is already being rewritten (" + std::string(op_name(to->op())) + ")");
  }

  std::string label() const { return name_.empty() ? std::string("graph_rewrite") : std::string(name_); }

  const PatternMatcher& pm_;
  void* ctx_;
  bool bottom_up_;
  std::string_view name_;
  RewriteLimits limits_;
  track::Call* tracked_;  // null unless tracking is on
  uint8_t mark_;  // the rule set's fixed-point mark (0: none)
  std::chrono::steady_clock::time_point start_;
  SmallVector<Entry, 16> stack_;
  Memo memo_;
  std::vector<UOpRef> new_src_;
  SmallVector<const UOp*, 32> keep_;  // owned references (see keep())
  RewriteStats stats_;
};

}  // namespace

UOpRef graph_rewrite(const UOpRef& root, const PatternMatcher& pm, void* ctx, bool bottom_up, std::string_view name,
                     const RewriteLimits& limits, RewriteStats* stats) {
  if (!root) return root;
  if (track::enabled()) [[unlikely]] {
    track::Call call(name.empty() ? std::string_view("graph_rewrite") : name, root.get(), bottom_up ? track::kBottomUp : 0);
    Rewriter r(pm, ctx, bottom_up, name, limits, &call);
    UOpRef out = r.run(root);
    call.finish(out.get());
    if (stats) *stats = r.stats();
    return out;
  }
  Rewriter r(pm, ctx, bottom_up, name, limits, nullptr);
  UOpRef out = r.run(root);
  if (stats) *stats = r.stats();
  return out;
}

}  // namespace th
