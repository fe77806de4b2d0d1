#include <algorithm>

#include "tinyhybrid/rewrite.h"

namespace th {

std::string source_location(const char* file, unsigned line) {
  std::string_view f(file);
  for (std::string_view root : {"src/", "tests/", "drivers/", "examples/"})
    if (const size_t at = f.rfind(root); at != std::string_view::npos && (at == 0 || f[at - 1] == '/')) {
      f.remove_prefix(at);
      break;
    }
  return std::string(f) + ":" + std::to_string(line);
}

const UOp* Captured::operator[](std::string_view name) const {
  for (size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) return slots_[i];
  throw std::out_of_range("the pattern captures no '" + std::string(name) + "'");
}

PatternMatcher::PatternMatcher(std::vector<Rule> rules) {
  rules_.reserve(rules.size());
  for (Rule& r : rules) {
    auto c = std::make_shared<Compiled>();
    c->names = capture_names(r.pattern);
    c->programs = compile_pattern(r.pattern, c->names);
    if (r.name.empty()) r.name = r.pattern.repr();
    c->rule = std::move(r);
    rules_.push_back(std::move(c));
  }
  build_dispatch();
}

PatternMatcher operator+(const PatternMatcher& a, const PatternMatcher& b) {
  PatternMatcher pm;
  pm.rules_ = a.rules_;
  pm.rules_.insert(pm.rules_.end(), b.rules_.begin(), b.rules_.end());
  pm.build_dispatch();
  return pm;
}

void PatternMatcher::build_dispatch() {
  by_op_.assign(kNumOps, {});
  max_slots_ = 0;
  for (size_t i = 0; i < rules_.size(); ++i) {
    const Compiled* c = rules_[i].get();
    max_slots_ = std::max(max_slots_, c->names.size());
    const OpSet& ops = c->rule.pattern.ops;
    for (const MatchProgram& prog : c->programs)
      for (size_t o = 0; o < kNumOps; ++o)
        if (ops.empty() || ops.contains(static_cast<Ops>(o))) by_op_[o].push_back({c, i, &prog});
  }
}

size_t PatternMatcher::size() const { return rules_.size(); }
const Rule& PatternMatcher::rule(size_t i) const { return rules_.at(i)->rule; }

UOpRef PatternMatcher::rewrite(const UOp* node, void* ctx, size_t* rule_index) const {
  if (by_op_.empty()) return nullptr;
  const auto& entries = by_op_[static_cast<size_t>(node->op())];
  if (entries.empty()) return nullptr;
  constexpr size_t kInlineSlots = 16;
  const UOp* inline_slots[kInlineSlots];
  std::vector<const UOp*> big;
  const UOp** slots = inline_slots;
  if (max_slots_ > kInlineSlots) {
    big.resize(max_slots_);
    slots = big.data();
  }
  for (const Entry& e : entries) {
    if (!e.program->guard.admits(node)) continue;
    std::fill_n(slots, e.rule->names.size(), nullptr);
    if (!run_program(*e.program, node, slots)) continue;
    UOpRef r = e.rule->rule.fn(Captured(node, slots, e.rule->names), ctx);
    if (r && r.get() != node) {
      if (rule_index) *rule_index = e.index;
      return r;
    }
  }
  return nullptr;
}

}  // namespace th
