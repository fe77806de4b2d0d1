// Patterns, PatternMatcher and graph_rewrite with no Python involved: pattern compilation (permutations, repeat,
// any, captures), dispatch and rule order, top-down and bottom-up rewriting, memoization, loop and limit errors.
#include <map>
#include <string>
#include <vector>

#include "check.h"
#include "tinyhybrid/core.h"
#include "tinyhybrid/rewrite.h"

using namespace th;
using namespace th::pat;

namespace {

UOpRef leaf(const std::string& name, DType d = DType::int32()) { return UOp::make(Ops::NOOP, d, {}, Arg::string(name)); }
UOpRef ci(i128 v, DType d = DType::int32()) { return UOp::const_int(d, v); }
UOpRef add(const UOpRef& a, const UOpRef& b) { return UOp::make(Ops::ADD, a->dtype(), {a, b}); }
UOpRef mul(const UOpRef& a, const UOpRef& b) { return UOp::make(Ops::MUL, a->dtype(), {a, b}); }

// The captures a pattern binds on a node, by name; `matched` tells whether any program matched.
std::map<std::string, const UOp*> match(const Pattern& p, const UOpRef& node, bool* matched) {
  const auto names = capture_names(p);
  std::vector<const UOp*> slots(names.size() + 1);
  for (const MatchProgram& prog : compile_pattern(p, names)) {
    std::fill(slots.begin(), slots.end(), nullptr);
    if (run_program(prog, node.get(), slots.data())) {
      *matched = true;
      std::map<std::string, const UOp*> out;
      for (size_t i = 0; i < names.size(); ++i) out[names[i]] = slots[i];
      return out;
    }
  }
  *matched = false;
  return {};
}

bool matches(const Pattern& p, const UOpRef& node) {
  bool m;
  match(p, node, &m);
  return m;
}

Rule rule(Pattern p, RuleFn fn, std::string name) { return Rule{std::move(p), std::move(fn), std::move(name)}; }
RuleFn constant(i128 v) {
  return [v](const Captured&, void*) { return ci(v); };
}

void test_compile_basics() {
  UOpRef a = leaf("a"), b = leaf("b");
  UOpRef n1 = add(a, ci(1)), n2 = add(ci(1), a);
  // ordered sources
  Pattern ordered = op(OpSet{Ops::ADD}, {named(op(OpSet{Ops::NOOP}, {}, "", Pattern::Src::Any), "x"), cvar("k")});
  bool m;
  auto caps = match(ordered, n1, &m);
  CHECK(m);
  CHECK(caps["x"] == a.get() && caps["k"] == ci(1).get());
  CHECK(!matches(ordered, n2));
  // permuted sources: one program per ordering
  Pattern perm = ordered;
  perm.src_mode = Pattern::Src::Permute;
  CHECK_EQ(compile_pattern(perm, capture_names(perm)).size(), size_t(2));
  caps = match(perm, n2, &m);
  CHECK(m && caps["x"] == a.get() && caps["k"] == ci(1).get());
  // alu() permutes commutative ops only
  CHECK(matches(var("x") + cnst(Arg::integer(1)), n2));
  CHECK(matches(alu(Ops::FLOORDIV, {var("x"), cnst(Arg::integer(2))}), UOp::make(Ops::FLOORDIV, DType::int32(), {a, ci(2)})));
  CHECK(!matches(alu(Ops::FLOORDIV, {var("x"), cnst(Arg::integer(2))}), UOp::make(Ops::FLOORDIV, DType::int32(), {ci(2), a})));
  // three permuted sources: 6 orderings, each matches
  Pattern p3 = op(OpSet{Ops::SINK}, {var("i", {DType::int32()}), var("f", {DType::float32()}), cvar("k")}, "", Pattern::Src::Permute);
  CHECK_EQ(compile_pattern(p3, capture_names(p3)).size(), size_t(6));
  UOpRef f = leaf("f", DType::float32());
  for (auto srcs : std::vector<std::vector<UOpRef>>{{a, f, ci(3)}, {f, ci(3), a}, {ci(3), a, f}, {a, ci(3), f}}) {
    caps = match(p3, UOp::make(Ops::SINK, DType::void_(), srcs), &m);
    CHECK(m && caps["i"] == a.get() && caps["f"] == f.get() && caps["k"] == ci(3).get());
  }
  CHECK(!matches(p3, UOp::make(Ops::SINK, DType::void_(), {a, b, ci(3)})));
  // exact length unless allow_any_len
  Pattern two = op(OpSet{Ops::SINK}, {var("p"), var("q")});
  UOpRef s3 = UOp::make(Ops::SINK, DType::void_(), {a, b, ci(3)});
  CHECK(!matches(two, s3));
  two.allow_any_len = true;
  CHECK(matches(two, s3));
  // dtype sets are exact
  CHECK(matches(var("x", {DType::int32(), DType::float32()}), f));
  CHECK(!matches(var("x", {DType::int32()}), leaf("w", DType::weakint())));
  CHECK(!matches(var("x", {DType::int32()}), leaf("v", DType::int32().vec(4))));
}

void test_args_repeat_any_names() {
  UOpRef a = leaf("a"), b = leaf("b");
  // args compare as Python does: 1 == 1.0 == True
  CHECK(arg_matches(Arg::integer(1), Arg::floating(1.0)));
  CHECK(arg_matches(Arg::integer(1), Arg::boolean(true)));
  CHECK(arg_matches(Arg::boolean(false), Arg::floating(-0.0)));
  CHECK(!arg_matches(Arg::integer(1), Arg::integer(2)));
  CHECK(!arg_matches(Arg::integer(1), Arg::string("1")));
  CHECK(arg_matches(Arg::string("a"), Arg::string("a")));
  CHECK(matches(cnst(Arg::integer(1)), UOp::const_float(DType::float32(), 1.0)));
  CHECK(matches(cnst(Arg::integer(1)), UOp::const_bool(true)));
  CHECK(!matches(cnst(Arg::integer(1), {DType::int32()}), UOp::const_bool(true)));
  // a single pattern repeats over every source
  Pattern all_const = op(OpSet{Ops::ADD}, {cvar("")}, "", Pattern::Src::Repeat);
  CHECK(matches(all_const, add(ci(1), ci(2))));
  CHECK(!matches(all_const, add(a, ci(2))));
  CHECK(!matches(all_const, add(ci(2), a)));
  Pattern same = op(OpSet{Ops::ADD}, {var("x")}, "", Pattern::Src::Repeat);
  CHECK(matches(same, add(a, a)));
  CHECK(!matches(same, add(a, b)));
  // a repeated name is the same node, across levels
  Pattern xx = (var("x") * cvar("k")) + var("x");
  CHECK(matches(xx, add(mul(a, ci(3)), a)));
  CHECK(matches(xx, add(a, mul(a, ci(3)))));
  CHECK(!matches(xx, add(mul(a, ci(3)), b)));
  // any: alternatives, each with its own captures
  Pattern either = one_of({op(OpSet{Ops::ADD}, {}, "x", Pattern::Src::Any), op(OpSet{Ops::MUL}, {}, "x", Pattern::Src::Any)});
  CHECK(matches(either, add(a, b)) && matches(either, mul(a, b)));
  CHECK(!matches(either, UOp::make(Ops::MAX, DType::int32(), {a, b})));
  Pattern inner = op(OpSet{Ops::ADD}, {one_of({cvar("k"), named(op(OpSet{Ops::NOOP}, {}, ""), "v")}), var("y")});
  bool m;
  const UOpRef two = ci(2), a_two = add(a, two), two_a = add(two, a);  // held: captures are borrowed pointers
  auto caps = match(inner, a_two, &m);
  CHECK(m && caps["v"] == a.get() && caps["y"] == two.get() && caps["k"] == nullptr);
  caps = match(inner, two_a, &m);
  CHECK(m && caps["k"] == two.get() && caps["v"] == nullptr);
  // capture order: first appearance
  CHECK((capture_names(var("x") + (var("y") * var("x"))) == std::vector<std::string>{"x", "y"}));
  // repr names the pattern
  CHECK(var("x").repr().find("'x'") != std::string::npos);
}

void test_matcher_dispatch_and_order() {
  UOpRef a = leaf("a");
  UOpRef n = add(a, ci(1));
  std::vector<std::string> calls;
  const auto log = [&calls](std::string tag, UOpRef out) {
    return [&calls, tag, out](const Captured&, void*) -> UOpRef {
      calls.push_back(tag);
      return out;
    };
  };
  PatternMatcher pm({
      rule(op(OpSet{Ops::MUL}, {}, "", Pattern::Src::Any), log("mul", ci(1)), "mul"),
      rule(op(OpSet{Ops::ADD}, {}, "x", Pattern::Src::Any), log("none", nullptr), "none"),
      rule(op(OpSet{Ops::ADD}, {}, "x", Pattern::Src::Any), log("same", n), "same"),
      rule(any("x"), log("any", ci(7)), "any"),
      rule(op(OpSet{Ops::ADD}, {}, "", Pattern::Src::Any), log("late", ci(8)), "late"),
  });
  CHECK_EQ(pm.size(), size_t(5));
  size_t idx = 99;
  UOpRef r = pm.rewrite(n.get(), nullptr, &idx);
  CHECK(r == ci(7));
  CHECK_EQ(idx, size_t(3));
  CHECK((calls == std::vector<std::string>{"none", "same", "any"}));  // the MUL rule is never tried on an ADD
  CHECK_EQ(pm.rule(3).name, std::string("any"));
  calls.clear();
  CHECK(pm.rewrite(mul(a, a).get(), nullptr) == ci(1));
  CHECK((calls == std::vector<std::string>{"mul"}));
  // concatenation keeps order: a's rules first
  PatternMatcher p1({rule(op(OpSet{Ops::ADD}, {}, "", Pattern::Src::Any), constant(1), "one")});
  PatternMatcher p2({rule(op(OpSet{Ops::ADD}, {}, "", Pattern::Src::Any), constant(2), "two"),
                     rule(op(OpSet{Ops::NOOP}, {}, "", Pattern::Src::Any), constant(3), "three")});
  CHECK((p1 + p2).rewrite(n.get(), nullptr) == ci(1));
  CHECK((p2 + p1).rewrite(n.get(), nullptr) == ci(2));
  CHECK((p1 + p2).rewrite(a.get(), nullptr) == ci(3));
  CHECK_EQ((p1 + p2).size(), size_t(3));
  CHECK(!p1.rewrite(a.get(), nullptr));
  // an empty matcher matches nothing
  CHECK(!PatternMatcher().rewrite(n.get(), nullptr));
  // ctx reaches the callback untouched
  int token = 0;
  PatternMatcher with_ctx({rule(any("x"), [](const Captured&, void* ctx) -> UOpRef {
    ++*static_cast<int*>(ctx);
    return nullptr;
  }, "count")});
  with_ctx.rewrite(n.get(), &token);
  CHECK_EQ(token, 1);
  // captures by name and by slot
  PatternMatcher named_caps({rule(var("x") + cvar("k"), [](const Captured& c, void*) -> UOpRef {
    CHECK(c.size() == 2 && c[size_t(0)] == c["x"] && c[size_t(1)] == c["k"]);
    CHECK_THROWS(c["nope"], std::out_of_range);
    return c.ref("x");
  }, "x+k")});
  CHECK(named_caps.rewrite(add(ci(5), a).get(), nullptr) == a);
}

void test_graph_rewrite_orders() {
  UOpRef a = leaf("a"), b = leaf("b");
  UOpRef g = mul(add(a, b), add(b, ci(1)));
  std::vector<const UOp*> order;
  PatternMatcher rec({rule(any("x"), [&order](const Captured& c, void*) -> UOpRef {
    order.push_back(c.root());
    return nullptr;
  }, "record")});
  CHECK(graph_rewrite(g, rec) == g);
  std::map<const UOp*, size_t> pos;
  for (size_t i = 0; i < order.size(); ++i) pos[order[i]] = i;
  CHECK_EQ(order.size(), size_t(6));
  CHECK_EQ(pos.size(), size_t(6));  // each node once (b is shared)
  for (const UOp* u : order)
    for (const UOpRef& s : u->src()) CHECK(pos[s.get()] < pos[u]);
  // bottom-up on a tree: every node before its sources
  order.clear();
  UOpRef t = mul(add(a, b), add(leaf("c"), ci(1)));
  CHECK(graph_rewrite(t, rec, nullptr, true) == t);
  pos.clear();
  for (size_t i = 0; i < order.size(); ++i) pos[order[i]] = i;
  CHECK_EQ(order.size(), size_t(7));
  for (const UOp* u : order)
    for (const UOpRef& s : u->src()) CHECK(pos[s.get()] > pos[u]);
}

void test_graph_rewrite_semantics() {
  UOpRef a = leaf("a"), b = leaf("b");
  // fixed point with constant folding; a replacement's users are rewritten again
  PatternMatcher fold({rule(op(OpSet{Ops::ADD}, {cvar("p"), cvar("q")}), [](const Captured& c, void*) {
    return ci(c["p"]->arg().as_int() + c["q"]->arg().as_int());
  }, "fold")});
  UOpRef g = add(add(add(ci(1), ci(2)), ci(3)), add(ci(4), add(ci(5), ci(6))));
  CHECK(graph_rewrite(g, fold) == ci(21));
  CHECK(graph_rewrite(g, fold, nullptr, true) == ci(21));
  // bottom-up sees the unrewritten subtree; top-down does not
  PatternMatcher whole({
      rule(op(OpSet{Ops::MUL}, {op(OpSet{Ops::ADD}, {}, "s", Pattern::Src::Any), cvar("k")}),
           [](const Captured&, void*) { return leaf("whole"); }, "whole"),
      rule(op(OpSet{Ops::ADD}, {}, "x", Pattern::Src::Any),
           [](const Captured& c, void*) { return UOp::make(Ops::MAX, c["x"]->dtype(), c["x"]->src()); }, "add_to_max"),
  });
  UOpRef m = mul(add(a, b), ci(2));
  CHECK(graph_rewrite(m, whole, nullptr, true) == leaf("whole"));
  CHECK(graph_rewrite(m, whole) == mul(UOp::make(Ops::MAX, DType::int32(), {a, b}), ci(2)));
  // memoization: a node shared by many users is tried once
  UOpRef shared = add(leaf("s"), ci(1));
  std::vector<UOpRef> users;
  for (int i = 0; i < 40; ++i) users.push_back(mul(shared, ci(i)));
  UOpRef sink = UOp::make(Ops::SINK, DType::void_(), users);
  std::map<const UOp*, int> count;
  PatternMatcher counter({rule(any("x"), [&count](const Captured& c, void*) -> UOpRef {
    ++count[c.root()];
    return nullptr;
  }, "count")});
  for (bool bu : {false, true}) {
    count.clear();
    RewriteStats st;
    CHECK(graph_rewrite(sink, counter, nullptr, bu, "count", {}, &st) == sink);
    CHECK_EQ(count[shared.get()], 1);
    for (const auto& [n, k] : count) CHECK_EQ(k, 1);
    CHECK_EQ(st.rewrites, size_t(0));
  }
  // a rewritten shared node: one call, every user sees the result
  int calls = 0;
  PatternMatcher rename({rule(op(OpSet{Ops::NOOP}, {}, "", Pattern::Src::Any), [&calls](const Captured& c, void*) -> UOpRef {
    if (c.root()->arg() != Arg::string("s")) return nullptr;
    ++calls;
    return leaf("t");
  }, "rename")});
  RewriteStats st;
  UOpRef out = graph_rewrite(sink, rename, nullptr, false, "", {}, &st);
  CHECK_EQ(calls, 1);
  CHECK_EQ(st.rewrites, size_t(1));
  CHECK(out->src(7) == mul(add(leaf("t"), ci(1)), ci(7)));
  // a deep chain: no recursion
  UOpRef chain = a;
  for (int i = 0; i < 20000; ++i) chain = add(chain, ci(1));
  PatternMatcher zero_a({rule(op(OpSet{Ops::NOOP}, {}, "", Pattern::Src::Any), constant(0), "zero")});
  CHECK(graph_rewrite(chain, zero_a + fold) == ci(20000));
}

void test_errors() {
  UOpRef n = add(leaf("a"), leaf("b"));
  PatternMatcher swap({rule(op(OpSet{Ops::ADD}, {var("p"), var("q")}),
                            [](const Captured& c, void*) { return UOp::make(Ops::ADD, c["p"]->dtype(), {c.ref("q"), c.ref("p")}); },
                            "swap_add")});
  for (bool bu : {false, true}) {
    std::string msg;
    try {
      graph_rewrite(n, swap, nullptr, bu, "my_pass");
    } catch (const RewriteError& e) {
      msg = e.what();
    }
    CHECK(msg.find("swap_add") != std::string::npos);
    CHECK(msg.find("my_pass") != std::string::npos);
  }
  // the limit
  PatternMatcher up({rule(op(OpSet{Ops::NOOP}, {}, "x", Pattern::Src::Any), [](const Captured& c, void*) {
    return UOp::make(Ops::NOOP, DType::int32(), {}, Arg::integer(c["x"]->arg().as_int() + 1));
  }, "count_up")});
  RewriteLimits lim;
  lim.max_rewrites = 100;
  std::string msg;
  try {
    graph_rewrite(UOp::make(Ops::NOOP, DType::int32(), {}, Arg::integer(0)), up, nullptr, false, "", lim);
  } catch (const RewriteError& e) {
    msg = e.what();
  }
  CHECK(msg.find("count_up") != std::string::npos);
  // an exception from a callback passes through unchanged
  PatternMatcher boom({rule(any("x"), [](const Captured&, void*) -> UOpRef { throw std::logic_error("boom 42"); }, "boom")});
  msg.clear();
  try {
    graph_rewrite(n, boom);
  } catch (const std::logic_error& e) {
    msg = e.what();
  }
  CHECK_EQ(msg, std::string("boom 42"));
}

// A bottom-up chain a -> b -> c -> ... of nodes that nothing else holds: no false "loop" (intermediate results
// are freed while the node is being rewritten, so their addresses can come back for later results).
void test_bottom_up_fresh_chain() {
  PatternMatcher step({rule(op(OpSet{Ops::NOOP}, {}, "x", Pattern::Src::Any), [](const Captured& c, void*) -> UOpRef {
    const i128 v = c["x"]->arg().as_int();
    return v < 200 ? UOp::make(Ops::NOOP, DType::int32(), {}, Arg::integer(v + 1)) : nullptr;
  }, "step")});
  UOpRef out;
  std::string err;
  try {
    out = graph_rewrite(UOp::make(Ops::NOOP, DType::int32(), {}, Arg::integer(0)), step, nullptr, true);
  } catch (const RewriteError& e) {
    err = e.what();
  }
  if (!err.empty()) th_check::fail(__FILE__, __LINE__, "bottom-up chain of fresh nodes raised: " + err);
  CHECK(out->arg() == Arg::integer(200));
}

}  // namespace

int main() {
  const size_t before = live_uop_count();
  test_compile_basics();
  test_args_repeat_any_names();
  test_matcher_dispatch_and_order();
  test_graph_rewrite_orders();
  test_graph_rewrite_semantics();
  test_errors();
  test_bottom_up_fresh_chain();
  CHECK_EQ(live_uop_count(), before);
  std::puts("test_rewrite: ok");
  return 0;
}
