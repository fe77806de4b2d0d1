#include <bit>
#include <unordered_set>

#include "tinyhybrid/rewrite.h"

namespace th {

namespace {

// The rewrite's memo: node -> its state (being rewritten, or done with a result). Open addressing on pointers with
// entries in one array: most rewrites touch a handful of nodes, and this costs two allocations, not one per node.
class Memo {
 public:
  struct Entry {
    UOpRef key;     // held so its address cannot be reused by a new node while the memo lives
    UOpRef result;  // null while the node is being rewritten
  };
  Memo() : slots_(16, nullptr), mask_(15) {}
  Entry* find(const UOp* n) {
    for (size_t i = index(n);; i = (i + 1) & mask_) {
      if (!slots_[i]) return nullptr;
      if (slots_[i]->key.get() == n) return slots_[i];
    }
  }
  Entry& get(const UOp* n) {
    if (Entry* e = find(n)) return *e;
    if ((entries_.size() + 1) * 2 > slots_.size()) grow();
    entries_.push_back(std::make_unique<Entry>(Entry{UOpRef(n), nullptr}));
    place(entries_.back().get());
    return *entries_.back();
  }
  size_t size() const { return entries_.size(); }

 private:
  size_t index(const UOp* n) const { return ((reinterpret_cast<uintptr_t>(n) >> 4) * 0x9E3779B97F4A7C15ull >> 20) & mask_; }
  void place(Entry* e) {
    size_t i = index(e->key.get());
    while (slots_[i]) i = (i + 1) & mask_;
    slots_[i] = e;
  }
  void grow() {
    slots_.assign(slots_.size() * 2, nullptr);
    mask_ = slots_.size() - 1;
    for (const auto& e : entries_) place(e.get());
  }
  std::vector<Entry*> slots_;
  size_t mask_;
  std::vector<std::unique_ptr<Entry>> entries_;
};

class Rewriter {
 public:
  Rewriter(const PatternMatcher& pm, void* ctx, bool bottom_up, std::string_view name, const RewriteLimits& limits)
      : pm_(pm), ctx_(ctx), bottom_up_(bottom_up), name_(name), limits_(limits) {
    if (limits_.time_limit.count()) start_ = std::chrono::steady_clock::now();
  }

  UOpRef run(const UOpRef& root) {
    stack_.push_back({root, root, Stage::Visit});
    while (!stack_.empty()) {
      Entry e = std::move(stack_.back());
      stack_.pop_back();
      if (done(e.key.get())) continue;
      switch (e.stage) {
        case Stage::Visit: visit(std::move(e)); break;
        case Stage::Rebuild: rebuild(std::move(e)); break;
        case Stage::Link: link(std::move(e)); break;
      }
    }
    stats_.nodes = memo_.size();
    return done(root.get())->result;
  }
  const RewriteStats& stats() const { return stats_; }

 private:
  enum class Stage : uint8_t { Visit, Rebuild, Link };
  struct Entry {
    UOpRef key;      // the node whose result this entry computes
    UOpRef current;  // what it has become so far
    Stage stage;
    size_t rule = SIZE_MAX;  // the rule that produced `current`, for loop errors
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

  // Bottom-up: rewrite the node to a fixed point first. Then its sources are visited.
  void visit(Entry e) {
    if (bottom_up_) {
      size_t rule;
      if (UOpRef r = apply(e.current.get(), &rule)) {
        // the chain is held, so a freed intermediate's address cannot come back as a false loop
        std::vector<UOpRef> chain{e.current};
        std::unordered_set<const UOp*> seen{e.current.get()};
        do {
          if (!seen.insert(r.get()).second) loop_error(rule, e.current.get(), r.get());
          chain.push_back(r);
          e.current = std::move(r);
        } while ((r = apply(e.current.get(), &rule)));
      }
    }
    memo_.get(e.key.get());  // marks it as being rewritten
    const UOp* cur = e.current.get();
    stack_.push_back({e.key, e.current, Stage::Rebuild});
    for (size_t i = cur->nsrc(); i-- > 0;) {
      const UOpRef& s = cur->src(i);
      if (!done(s.get())) stack_.push_back({s, s, Stage::Visit});
    }
  }

  // Sources are done: rebuild with their results, or (top-down) rewrite the node itself.
  void rebuild(Entry e) {
    const UOp* cur = e.current.get();
    bool changed = false;
    new_src_.clear();
    for (const UOpRef& s : cur->src()) {
      const UOpRef& r = done(s.get())->result;
      changed |= r.get() != s.get();
      new_src_.push_back(r);
    }
    UOpRef next;
    size_t rule = SIZE_MAX;
    if (changed) {
      next = cur->replace_src(new_src_);
    } else if (!bottom_up_) {
      next = apply(cur, &rule);
    }
    if (!next) {
      finish(e.key, e.current);
      return;
    }
    if (in_progress(next.get())) loop_error(rule, cur, next.get());
    stack_.push_back({e.key, next, Stage::Link, rule});
    stack_.push_back({next, next, Stage::Visit});
  }

  void link(Entry e) { finish(e.key, done(e.current.get())->result); }

  void finish(const UOpRef& key, UOpRef result) { memo_.get(key.get()).result = std::move(result); }

  UOpRef apply(const UOp* n, size_t* rule) {
    UOpRef r = pm_.rewrite(n, ctx_, rule);
    if (!r) return r;
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
  std::chrono::steady_clock::time_point start_;
  std::vector<Entry> stack_;
  Memo memo_;
  std::vector<UOpRef> new_src_;
  RewriteStats stats_;
};

}  // namespace

UOpRef graph_rewrite(const UOpRef& root, const PatternMatcher& pm, void* ctx, bool bottom_up, std::string_view name,
                     const RewriteLimits& limits, RewriteStats* stats) {
  if (!root) return root;
  Rewriter r(pm, ctx, bottom_up, name, limits);
  UOpRef out = r.run(root);
  if (stats) *stats = r.stats();
  return out;
}

}  // namespace th
