// PatternMatcher and graph_rewrite: every compiler pass is a set of (pattern, callback) rules applied to a graph
// until nothing matches. Rules are dispatched by the root node's op; within an op they are tried in order.
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "tinyhybrid/pattern.h"

namespace th {

// What a rule's callback sees: the matched node and its named captures.
class Captured {
 public:
  Captured(const UOp* root, const UOp* const* slots, const std::vector<std::string>& names)
      : root_(root), slots_(slots), names_(names) {}
  const UOp* root() const { return root_; }
  const UOp* operator[](size_t slot) const { return slots_[slot]; }
  // By name; throws std::out_of_range for a name the pattern does not capture.
  const UOp* operator[](std::string_view name) const;
  UOpRef ref(std::string_view name) const { return UOpRef((*this)[name]); }
  size_t size() const { return names_.size(); }
  const std::vector<std::string>& names() const { return names_; }

 private:
  const UOp* root_;
  const UOp* const* slots_;
  const std::vector<std::string>& names_;
};

// A callback returns the replacement, or null for "no rewrite" (returning the node itself means the same).
// ctx is the graph_rewrite's context object, passed through untouched.
using RuleFn = std::function<UOpRef(const Captured&, void* ctx)>;

// "file:line" of a rule's definition, the path from its src/ (or tests/, drivers/, examples/) directory on.
std::string source_location(const char* file, unsigned line);

struct Rule {
  Pattern pattern;
  RuleFn fn;
  std::string name;  // shown in errors, statistics and VIZ
  // Where the rule is defined. Native rules get the line of the braces that build them (the builtins in a default
  // member initializer name the place of the aggregate initialization); Python rules, their UPat's line.
  std::string location = source_location(__builtin_FILE(), __builtin_LINE());
};

class PatternMatcher {
 public:
  PatternMatcher() = default;
  explicit PatternMatcher(std::vector<Rule> rules);
  // Rules of `a` first, then those of `b`.
  friend PatternMatcher operator+(const PatternMatcher& a, const PatternMatcher& b);

  // The first rule (in order) whose pattern matches and whose callback returns a different node.
  // rule_index receives the index of that rule.
  UOpRef rewrite(const UOp* node, void* ctx, size_t* rule_index = nullptr) const;
  size_t size() const;
  const Rule& rule(size_t i) const;

  // A rule set whose rules read only the node they match (never ctx, never outside state) may own a fixed-point mark
  // (a bit of UOp::has_mark): graph_rewrite then marks every node it finds unchanged, and later rewrites with this
  // rule set take a marked node as it is, without walking under it. 0 (the default): no mark. A sum of matchers
  // (operator+) owns none.
  void set_fixed_point_mark(uint8_t m) { fixed_mark_ = m; }
  uint8_t fixed_point_mark() const { return fixed_mark_; }

 private:
  struct Compiled {
    Rule rule;
    std::vector<std::string> names;
    std::vector<MatchProgram> programs;
  };
  struct Entry {
    const Compiled* rule;
    size_t index;
    const MatchProgram* program;
  };
  void build_dispatch();
  std::vector<std::shared_ptr<const Compiled>> rules_;
  std::vector<std::vector<Entry>> by_op_;  // kNumOps lists, in rule order
  size_t max_slots_ = 0;
  uint8_t fixed_mark_ = 0;
};

struct RewriteLimits {
  size_t max_rewrites = 50'000'000;  // a rule set still rewriting after this many steps is taken to be looping
  std::chrono::milliseconds time_limit{0};  // 0: none
};

struct RewriteStats {
  size_t rewrites = 0;
  size_t nodes = 0;
};

// A rewrite that cannot finish: a loop between rules, or a limit reached. The message names the rule.
struct RewriteError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Rewrite to a fixed point. Top-down (default): a node's sources are rewritten first, then the node, and each
// replacement is rewritten again. Bottom-up: the node is rewritten to a fixed point before its sources.
// Results are memoized within the call.
UOpRef graph_rewrite(const UOpRef& root, const PatternMatcher& pm, void* ctx = nullptr, bool bottom_up = false,
                     std::string_view name = {}, const RewriteLimits& limits = {}, RewriteStats* stats = nullptr);

}  // namespace th
