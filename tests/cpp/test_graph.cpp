// Graph algorithms with no Python: toposort order (diamonds, gates, several roots, random DAGs against a
// recursive reference), backward_slice, substitute, node freeing, and interning from two threads at once.
#include <algorithm>
#include <atomic>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "check.h"
#include "tinyhybrid/core.h"

using namespace th;

namespace {

// Reference order: recursive depth-first post-order, sources left to right, each node at its first visit.
// A node the gate rejects is neither listed nor entered.
void ref_visit(const UOp* n, const Gate& gate, std::unordered_set<const UOp*>& seen, std::vector<const UOp*>& out) {
  if (!seen.insert(n).second) return;
  if (gate && !gate(n)) return;
  for (const UOpRef& s : n->src()) ref_visit(s.get(), gate, seen, out);
  out.push_back(n);
}
std::vector<const UOp*> ref_toposort(std::initializer_list<const UOp*> roots, const Gate& gate = nullptr) {
  std::unordered_set<const UOp*> seen;
  std::vector<const UOp*> out;
  for (const UOp* r : roots) ref_visit(r, gate, seen, out);
  return out;
}

UOpRef noop(std::vector<UOpRef> src, int64_t id) { return UOp::make(Ops::NOOP, DType::void_(), src, Arg::integer(id)); }
UOpRef i32(int64_t v) { return UOp::const_int(DType::int32(), v); }

// Sources before users: every entered source of a listed node appears earlier.
bool sources_first(const std::vector<const UOp*>& order) {
  std::unordered_map<const UOp*, size_t> pos;
  for (size_t i = 0; i < order.size(); ++i) pos[order[i]] = i;
  for (size_t i = 0; i < order.size(); ++i)
    for (const UOpRef& s : order[i]->src())
      if (auto it = pos.find(s.get()); it != pos.end() && it->second >= i) return false;
  return true;
}

void test_diamond() {
  UOpRef a = UOp::variable("a", 0, 10);
  UOpRef two = i32(2), three = i32(3);
  UOpRef l = alu(Ops::MUL, {a, two});
  UOpRef r = alu(Ops::ADD, {a, three});
  UOpRef top = alu(Ops::ADD, {l, r});
  const auto order = toposort(top.get());
  const std::vector<const UOp*> want{a.get(), two.get(), l.get(), three.get(), r.get(), top.get()};
  CHECK(order == want);
  CHECK(order == ref_toposort({top.get()}));
  // reached first through the right-hand path: listed under that path
  UOpRef top2 = alu(Ops::ADD, {r, l});
  const std::vector<const UOp*> want2{a.get(), three.get(), r.get(), two.get(), l.get(), top2.get()};
  CHECK(toposort(top2.get()) == want2);
  // repeated sources are listed once
  UOpRef sq = alu(Ops::MUL, {a, a});
  CHECK_EQ(toposort(sq.get()).size(), size_t{2});
  // a leaf alone
  CHECK(toposort(a.get()) == std::vector<const UOp*>{a.get()});
  CHECK(toposort(static_cast<const UOp*>(nullptr)).empty());
}

void test_gate() {
  UOpRef a = UOp::variable("a", 0, 10), b = UOp::variable("b", 0, 5);
  UOpRef hundred = i32(100);
  UOpRef m = alu(Ops::MUL, {a, hundred});
  UOpRef e = alu(Ops::ADD, {m, alu(Ops::MUL, {b, a})});
  const Gate gate = [&](const UOp* n) { return n != m.get(); };
  const auto order = toposort(e.get(), gate);
  CHECK(order == ref_toposort({e.get()}, gate));
  CHECK(std::find(order.begin(), order.end(), m.get()) == order.end());
  CHECK(std::find(order.begin(), order.end(), hundred.get()) == order.end());  // only under m: not entered
  CHECK(std::find(order.begin(), order.end(), a.get()) != order.end());        // also under b*a: listed
  CHECK_EQ(order.size(), size_t{4});
  // rejecting the root lists nothing
  CHECK(toposort(e.get(), [&](const UOp* n) { return n != e.get(); }).empty());
  // the gate is asked once per node reached, never for a node behind a rejected one
  size_t calls = 0;
  toposort(e.get(), [&](const UOp* n) { ++calls; return n != m.get(); });
  CHECK_EQ(calls, size_t{5});  // e, m (rejected), b*a, b, a
  // a gate that walks (a nested toposort) leaves the outer walk intact
  std::unordered_map<const UOp*, size_t> sizes;
  const auto nested = toposort(e.get(), [&](const UOp* n) { sizes[n] = toposort(n).size(); return true; });
  CHECK(nested == toposort(e.get()));
  CHECK_EQ(sizes[e.get()], nested.size());
  // a throwing gate leaves nothing behind
  bool threw = false;
  try {
    toposort(e.get(), [](const UOp*) -> bool { throw std::runtime_error("gate"); });
  } catch (const std::runtime_error&) {
    threw = true;
  }
  CHECK(threw);
  CHECK(toposort(e.get()) == ref_toposort({e.get()}));
}

void test_multi_root() {
  UOpRef a = UOp::variable("a", 0, 10), b = UOp::variable("b", 0, 5);
  UOpRef r1 = alu(Ops::ADD, {a, b});
  UOpRef r2 = alu(Ops::MUL, {b, i32(7)});
  const std::vector<UOpRef> roots{r1, r2, r1};
  const auto order = toposort(std::span<const UOpRef>(roots));
  CHECK(order == ref_toposort({r1.get(), r2.get(), r1.get()}));
  const std::vector<const UOp*> want{a.get(), b.get(), r1.get(), r2->src(1).get(), r2.get()};
  CHECK(order == want);
  const Gate no_b = [&](const UOp* n) { return n != b.get(); };
  CHECK(toposort(std::span<const UOpRef>(roots), no_b) == ref_toposort({r1.get(), r2.get(), r1.get()}, no_b));
  CHECK(toposort(std::span<const UOpRef>()).empty());
}

void test_random_dags() {
  std::mt19937_64 rng(1234);
  for (int trial = 0; trial < 30; ++trial) {
    std::vector<UOpRef> pool;
    const int leaves = 1 + static_cast<int>(rng() % 5), nodes = 1 + static_cast<int>(rng() % 300);
    for (int i = 0; i < leaves; ++i) pool.push_back(noop({}, -1 - i));
    for (int i = 0; i < nodes; ++i) {
      std::vector<UOpRef> src;
      const size_t k = 1 + rng() % 4;
      for (size_t j = 0; j < k; ++j) {
        const size_t window = std::min<size_t>(pool.size(), rng() % 2 ? 20 : pool.size());
        src.push_back(pool[pool.size() - 1 - rng() % window]);
      }
      pool.push_back(noop(src, trial * 1000 + i));
    }
    std::unordered_set<const UOp*> rejected;
    for (const UOpRef& u : pool)
      if (rng() % 5 == 0) rejected.insert(u.get());
    const Gate gate = [&](const UOp* n) { return !rejected.count(n); };
    for (int k = 0; k < 5; ++k) {
      const UOp* root = pool[rng() % pool.size()].get();
      const auto order = toposort(root);
      CHECK(order == ref_toposort({root}));
      CHECK(sources_first(order));
      CHECK(order.back() == root);
      CHECK(toposort(root, gate) == ref_toposort({root}, gate));
      auto slice = backward_slice(root);
      CHECK_EQ(slice.size() + 1, order.size());
      CHECK(std::equal(slice.begin(), slice.end(), order.begin()));
    }
  }
}

void test_backward_slice() {
  UOpRef a = UOp::variable("a", 0, 10), b = UOp::variable("b", 0, 5);
  UOpRef e = alu(Ops::ADD, {alu(Ops::MUL, {a, b}), a});
  const auto slice = backward_slice(e.get());
  const std::vector<const UOp*> want{a.get(), b.get(), e->src(0).get()};
  CHECK(slice == want);
  CHECK(backward_slice(a.get()).empty());
}

void test_substitute() {
  UOpRef a = UOp::variable("a", 0, 10), b = UOp::variable("b", 0, 5);
  UOpRef e = alu(Ops::FLOORDIV, {alu(Ops::ADD, {alu(Ops::MUL, {a, b}), a}), i32(2)});
  CHECK(render(substitute(e, {{a.get(), i32(2)}})) == "(((2*b)+2)//2)");
  // empty map, unreached key: the same node
  CHECK(substitute(e, {}) == e);
  UOpRef unused = UOp::variable("unused", 0, 1);
  CHECK(substitute(e, {{unused.get(), a}}) == e);
  // the root itself
  CHECK(substitute(e, {{e.get(), a}}) == a);
  // simultaneous: a and b swap
  UOpRef ab = alu(Ops::ADD, {a, b});
  CHECK(substitute(ab, {{a.get(), b}, {b.get(), a}}) == alu(Ops::ADD, {b, a}));
  // a replacement is not walked again
  UOpRef a1 = alu(Ops::ADD, {a, i32(1)});
  CHECK(substitute(a1, {{a.get(), a1}}) == alu(Ops::ADD, {a1, i32(1)}));
  // shared subtrees are rebuilt once: both uses see the same new node
  UOpRef sq = alu(Ops::MUL, {ab, ab});
  UOpRef sq2 = substitute(sq, {{a.get(), i32(5)}});
  CHECK(sq2->src(0) == sq2->src(1));
  CHECK(render(sq2) == "((5+b)*(5+b))");
  // a deep chain substitutes without recursion
  UOpRef x = a;
  for (int i = 0; i < 200000; ++i) x = alu(Ops::ADD, {x, i32(1)});
  UOpRef y = substitute(x, {{a.get(), b}});
  CHECK(toposort(y.get()).front() == b.get());
  CHECK_EQ(toposort(y.get()).size(), toposort(x.get()).size());
}

void test_replace() {
  UOpRef a = UOp::variable("a", 0, 10), b = UOp::variable("b", 0, 5);
  UOpRef e = alu(Ops::ADD, {a, b});
  const std::vector<UOpRef> swapped{b, a};
  CHECK(e->replace_src(swapped) == alu(Ops::ADD, {b, a}));
  CHECK(e->with_tag(Arg::string("t")) != e);
  CHECK(e->with_tag(Arg::string("t"))->with_tag(Arg()) == e);
  UOpRef n = noop({}, 1);
  CHECK(n->with_arg(Arg::integer(2)) == noop({}, 2));
  CHECK_THROWS(e->replace_src(std::vector<UOpRef>{a}), UOpTypeError);
}

void test_errors_name_the_op() {
  UOpRef a = UOp::variable("a", 0, 10);
  try {
    UOp::make(Ops::WHERE, DType::int32(), {a, a, a});
    CHECK(false);
  } catch (const UOpTypeError& e) {
    CHECK(std::string(e.what()).find("WHERE") != std::string::npos);
  }
  CHECK_THROWS(UOp::make(Ops::ADD, DType::int32(), {a}), UOpTypeError);
  CHECK_THROWS(UOp::variable("x", 5, 1), UOpValueError);
}

void test_freeing() {
  const size_t before = live_uop_count();
  {
    UOpRef a = UOp::variable("free_a", 0, 10);
    UOpRef x = a;
    for (int i = 0; i < 100000; ++i) x = alu(Ops::ADD, {x, i32(i)});
    CHECK(live_uop_count() >= before + 200000);
    CHECK_EQ(toposort(x.get()).size(), size_t{200001});
    // dropping a middle reference keeps the chain alive through its users
    UOpRef mid = x->src(0);
    x = UOpRef();
    CHECK(live_uop_count() >= before + 199998);
    CHECK_EQ(toposort(mid.get()).size(), size_t{199999});
  }
  CHECK_EQ(live_uop_count(), before);
  // a shared node lives while any user does
  {
    UOpRef keep;
    {
      UOpRef v = UOp::variable("shared", 0, 1);
      keep = alu(Ops::MUL, {v, v});
    }
    CHECK_EQ(live_uop_count(), before + 2);
    CHECK(keep->src(0)->op() == Ops::DEFINE_VAR);
  }
  CHECK_EQ(live_uop_count(), before);
}

// ---- two threads

constexpr int kPerThread = 100000;

void test_concurrent_interning() {
  const size_t before = live_uop_count();
  {
    UOpRef x = UOp::variable("thr_x", 0, 1000);
    std::vector<UOpRef> made[2];
    std::atomic<int> ready{0};
    auto work = [&](int t) {
      auto& out = made[t];
      out.reserve(kPerThread);
      ready.fetch_add(1);
      while (ready.load() < 2) {}
      // the two threads walk the same keys in opposite orders, so they meet in the middle
      for (int k = 0; k < kPerThread; ++k) {
        const int i = t == 0 ? k : kPerThread - 1 - k;
        out.push_back(alu(Ops::ADD, {x, i32(i)}));
      }
      if (t == 1) std::reverse(out.begin(), out.end());
    };
    std::thread t0(work, 0), t1(work, 1);
    t0.join();
    t1.join();
    for (int i = 0; i < kPerThread; ++i) {
      CHECK(made[0][i] == made[1][i]);
      CHECK(made[0][i]->src(1)->arg().as_int() == i);
    }
    // x, kPerThread constants, kPerThread adds
    CHECK_EQ(live_uop_count(), before + 1 + 2 * size_t{kPerThread});
    made[0].clear();
    CHECK_EQ(live_uop_count(), before + 1 + 2 * size_t{kPerThread});
    made[1].clear();
    CHECK_EQ(live_uop_count(), before + 1);
  }
  CHECK_EQ(live_uop_count(), before);
}

void test_concurrent_create_and_drop() {
  // Both threads make and drop the same short-lived nodes: a lookup may find a node whose last reference is
  // being dropped by the other thread; it must never be revived, and nothing may leak.
  const size_t before = live_uop_count();
  {
    UOpRef x = UOp::variable("churn_x", 0, 1000);
    std::atomic<int> ready{0};
    std::atomic<bool> bad{false};
    auto work = [&](unsigned seed) {
      std::mt19937 rng(seed);
      ready.fetch_add(1);
      while (ready.load() < 2) {}
      UOpRef held;
      for (int k = 0; k < kPerThread; ++k) {
        const int i = static_cast<int>(rng() % 64);
        UOpRef u = alu(Ops::MUL, {alu(Ops::ADD, {x, i32(i)}), i32(i)});
        if (u->src(0)->src(1)->arg().as_int() != i || u->refcount() == 0) bad = true;
        if (rng() % 8 == 0) held = u;  // sometimes keep one alive a little longer
      }
    };
    std::thread t0(work, 1u), t1(work, 2u);
    t0.join();
    t1.join();
    CHECK(!bad.load());
    CHECK_EQ(live_uop_count(), before + 1);
  }
  CHECK_EQ(live_uop_count(), before);
}

void test_concurrent_toposort() {
  UOpRef a = UOp::variable("topo_a", 0, 10);
  UOpRef x = a;
  for (int i = 0; i < 20000; ++i) x = alu(Ops::ADD, {alu(Ops::MUL, {x, i32(i % 7)}), x});
  const auto want = toposort(x.get());
  std::atomic<bool> bad{false};
  auto work = [&] {
    for (int k = 0; k < 20; ++k)
      if (toposort(x.get()) != want) bad = true;
  };
  std::thread t0(work), t1(work);
  t0.join();
  t1.join();
  CHECK(!bad.load());
}

}  // namespace

int main() {
  test_diamond();
  test_gate();
  test_multi_root();
  test_random_dags();
  test_backward_slice();
  test_substitute();
  test_replace();
  test_errors_name_the_op();
  test_freeing();
  test_concurrent_interning();
  test_concurrent_create_and_drop();
  test_concurrent_toposort();
  std::cout << "test_graph: ok\n";
  return 0;
}
