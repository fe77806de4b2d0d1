#include <unordered_map>
#include <unordered_set>

#include "tinyhybrid/rewrite.h"

namespace th {

namespace {

class Rewriter {
 public:
  Rewriter(const PatternMatcher& pm, void* ctx, bool bottom_up, std::string_view name, const RewriteLimits& limits)
      : pm_(pm), ctx_(ctx), bottom_up_(bottom_up), name_(name.empty() ? "graph_rewrite" : name), limits_(limits),
        start_(std::chrono::steady_clock::now()) {}

  UOpRef run(const UOpRef& root) {
    stack_.push_back({root, root, Stage::Visit});
    while (!stack_.empty()) {
      Entry e = std::move(stack_.back());
      stack_.pop_back();
      if (done_.count(e.key.get())) continue;
      switch (e.stage) {
        case Stage::Visit: visit(std::move(e)); break;
        case Stage::Rebuild: rebuild(std::move(e)); break;
        case Stage::Link: link(std::move(e)); break;
      }
    }
    stats_.nodes = done_.size();
    return done_.at(root.get()).result;
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
  struct Done {
    UOpRef key;  // held so its address cannot be reused by a new node while the memo lives
    UOpRef result;
  };

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
    in_progress_.insert(e.key.get());
    const UOp* cur = e.current.get();
    stack_.push_back({e.key, e.current, Stage::Rebuild});
    for (size_t i = cur->nsrc(); i-- > 0;) {
      const UOpRef& s = cur->src(i);
      if (!done_.count(s.get())) stack_.push_back({s, s, Stage::Visit});
    }
  }

  // Sources are done: rebuild with their results, or (top-down) rewrite the node itself.
  void rebuild(Entry e) {
    const UOp* cur = e.current.get();
    bool changed = false;
    new_src_.clear();
    for (const UOpRef& s : cur->src()) {
      const UOpRef& r = done_.at(s.get()).result;
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
    if (in_progress_.count(next.get())) loop_error(rule, cur, next.get());
    stack_.push_back({e.key, next, Stage::Link, rule});
    stack_.push_back({next, next, Stage::Visit});
  }

  void link(Entry e) { finish(e.key, done_.at(e.current.get()).result); }

  void finish(const UOpRef& key, UOpRef result) {
    in_progress_.erase(key.get());
    done_.emplace(key.get(), Done{key, std::move(result)});
  }

  UOpRef apply(const UOp* n, size_t* rule) {
    UOpRef r = pm_.rewrite(n, ctx_, rule);
    if (!r) return r;
    if (++stats_.rewrites > limits_.max_rewrites)
      throw RewriteError(name_ + ": stopped after " + std::to_string(limits_.max_rewrites) +
                         " rewrites (the rule set does not reach a fixed point); last rule: " + pm_.rule(*rule).name);
    if (limits_.time_limit.count() && (stats_.rewrites & 1023) == 0 &&
        std::chrono::steady_clock::now() - start_ > limits_.time_limit)
      throw RewriteError(name_ + ": stopped at the time limit after " + std::to_string(stats_.rewrites) +
                         " rewrites; last rule: " + pm_.rule(*rule).name);
    return r;
  }

  [[noreturn]] void loop_error(size_t rule, const UOp* from, const UOp* to) const {
    const std::string who = rule == SIZE_MAX ? std::string("rebuilding sources") : "rule " + pm_.rule(rule).name;
    throw RewriteError(name_ + ": rewrite loop: " + who + " turned " + std::string(op_name(from->op())) +
                       " into a node that is already being rewritten (" + std::string(op_name(to->op())) + ")");
  }

  const PatternMatcher& pm_;
  void* ctx_;
  bool bottom_up_;
  std::string name_;
  RewriteLimits limits_;
  std::chrono::steady_clock::time_point start_;
  std::vector<Entry> stack_;
  std::unordered_map<const UOp*, Done> done_;
  std::unordered_set<const UOp*> in_progress_;
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
