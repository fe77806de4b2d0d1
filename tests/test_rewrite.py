"""UPat, PatternMatcher and graph_rewrite: the pattern vocabulary (ops, dtypes, args, src forms, names, any),
callbacks (captures, ctx, None/same node, errors), rule order, matcher concatenation (Python and native),
the rewrite engine (top-down, bottom-up, fixed point, memoization, loop detection, limits), and a
cross-check against tinygrad's engine on the same rules and graph shapes."""
from __future__ import annotations

import pytest

from tinyhybrid import Ops, UOp, dtypes
from tinyhybrid.uop.symbolic import sym
from tinyhybrid.uop.upat import PatternMatcher, UPat, graph_rewrite


# ---------------------------------------------------------------- helpers

def leaf(name: str, dtype=dtypes.int) -> UOp:
  """An opaque leaf (NOOP with a name): no native rule touches it."""
  return UOp(Ops.NOOP, dtype, (), name)


def c(v, dtype=dtypes.int) -> UOp: return UOp.const(dtype, v)
def add(a: UOp, b: UOp) -> UOp: return UOp(Ops.ADD, a.dtype, (a, b))
def mul(a: UOp, b: UOp) -> UOp: return UOp(Ops.MUL, a.dtype, (a, b))


def matches(pat: UPat, node: UOp) -> dict | None:
  """The captures a pattern binds on a node (through a one-rule matcher), or None when it does not match."""
  got: list[dict] = []
  def record(**kw):
    got.append(kw)
    return None
  PatternMatcher([(pat, record)]).rewrite(node)
  return got[0] if got else None


def ops_of(u) -> list:
  """Structure of a graph: (op name, dtype name, arg) of each node in toposort order."""
  return [(n.op.name, str(n.dtype), n.arg) for n in u.toposort()]


# ---------------------------------------------------------------- UPat: ops, dtypes, args

def test_op_and_op_sets():
  a = leaf("a")
  n = add(a, c(1))
  assert matches(UPat(Ops.ADD), n) == {}
  assert matches(UPat(Ops.MUL), n) is None
  assert matches(UPat({Ops.MUL, Ops.ADD}), n) == {}
  assert matches(UPat((Ops.MUL, Ops.MAX)), n) is None
  assert matches(UPat(name="x"), n) == {"x": n}  # no op: any op


def test_dtype_sets_exact():
  i32, w = leaf("a", dtypes.int), leaf("a", dtypes.weakint)
  i8, f = leaf("a", dtypes.int8), leaf("a", dtypes.float)
  assert matches(UPat.var("x", dtypes.int), i32) == {"x": i32}
  # exact: no weakint/int8/uint for int, no vector
  assert matches(UPat.var("x", dtypes.int), w) is None
  assert matches(UPat.var("x", dtypes.int), i8) is None
  assert matches(UPat.var("x", dtypes.int), leaf("a", dtypes.uint32)) is None
  assert matches(UPat.var("x", dtypes.int), leaf("a", dtypes.int.vec(4))) is None
  s = {dtypes.int8, dtypes.float}
  assert matches(UPat.var("x", s), i8) == {"x": i8}
  assert matches(UPat.var("x", s), f) == {"x": f}
  assert matches(UPat.var("x", s), i32) is None
  assert matches(UPat.var("x", (dtypes.float, dtypes.weakint)), w) == {"x": w}
  with pytest.raises(TypeError):
    UPat.var("x", "int")


@pytest.mark.parametrize("node", [UOp.const(dtypes.int, 1), UOp.const(dtypes.float, 1.0), UOp.const(dtypes.bool, True),
                                  UOp.const(dtypes.weakint, 1), UOp.const(dtypes.uint8, 1), UOp.const(dtypes.half, 1.0)])
def test_arg_matches_as_python_eq(node):
  assert matches(UPat(Ops.CONST, arg=1, name="k"), node) == {"k": node}
  assert matches(UPat(Ops.CONST, arg=1.0), node) == {}
  assert matches(UPat(Ops.CONST, arg=True), node) == {}
  assert matches(UPat(Ops.CONST, arg=2), node) is None
  assert matches(UPat(Ops.CONST, arg=False), node) is None


def test_arg_matching_other_kinds():
  assert matches(UPat(Ops.CONST, arg=0), c(0)) == {}
  assert matches(UPat(Ops.CONST, arg=0), UOp.const(dtypes.float, -0.0)) == {}  # -0.0 == 0 in Python
  assert matches(UPat(Ops.CONST, arg=0.5), UOp.const(dtypes.float, 0.5)) == {}
  assert matches(UPat(Ops.CONST, arg=0.5), c(0)) is None
  assert matches(UPat(Ops.NOOP, arg="a"), leaf("a")) == {}
  assert matches(UPat(Ops.NOOP, arg="b"), leaf("a")) is None
  assert matches(UPat(Ops.NOOP, arg=("t", 1)), UOp(Ops.NOOP, dtypes.int, (), ("t", 1))) == {}
  assert matches(UPat(Ops.NOOP, arg=("t", 2)), UOp(Ops.NOOP, dtypes.int, (), ("t", 1))) is None
  # arg=None matches anything
  assert matches(UPat(Ops.NOOP), leaf("zzz")) == {}
  # UPat.cvar / UPat.const
  assert matches(UPat.cvar("k"), c(7)) == {"k": c(7)}
  assert matches(UPat.cvar("k"), leaf("a")) is None
  assert matches(UPat.const(dtypes.int, 7), c(7)) == {}
  assert matches(UPat.const(dtypes.int, 7), UOp.const(dtypes.int8, 7)) is None
  assert matches(UPat.const(dtypes.int, 7), c(8)) is None


# ---------------------------------------------------------------- UPat: src forms

def test_tuple_src_in_order():
  a = leaf("a")
  n1, n2 = add(a, c(1)), add(c(1), a)
  pat = UPat(Ops.ADD, src=(UPat(Ops.NOOP, name="x"), UPat(Ops.CONST, name="k")))
  assert matches(pat, n1) == {"x": a, "k": c(1)}
  assert matches(pat, n2) is None
  # length must match exactly unless allow_any_len
  w = UOp(Ops.WHERE, dtypes.int, (leaf("b", dtypes.bool), a, c(1)))
  assert matches(UPat(Ops.WHERE, src=(UPat.var("p"), UPat.var("t"))), w) is None
  assert matches(UPat(Ops.WHERE, src=(UPat.var("p"), UPat.var("t")), allow_any_len=True), w) == {"p": w.src[0], "t": a}
  assert matches(UPat(Ops.WHERE, src=(UPat.var("p"), UPat.var("t"), UPat.var("f"), UPat.var("g")), allow_any_len=True), w) is None
  # src=() matches only a node without sources
  assert matches(UPat(Ops.NOOP, src=()), a) == {}
  assert matches(UPat(Ops.ADD, src=()), n1) is None


def test_list_src_any_permutation():
  a = leaf("a")
  n1, n2 = add(a, c(1)), add(c(1), a)
  pat = UPat(Ops.ADD, src=[UPat(Ops.NOOP, name="x"), UPat(Ops.CONST, arg=1, name="k")])
  assert matches(pat, n1) == {"x": a, "k": c(1)}
  assert matches(pat, n2) == {"x": a, "k": c(1)}
  # the operator form builds a list for commutative ops
  op_pat = UPat.var("x") + 1
  assert matches(op_pat, n1) == {"x": a}
  assert matches(op_pat, n2) == {"x": a}
  assert matches(UPat.var("x") * 1, mul(c(1), a)) == {"x": a}
  # non-commutative ops keep order
  assert matches(UPat.var("x") // 2, UOp(Ops.FLOORDIV, dtypes.int, (a, c(2)))) == {"x": a}
  assert matches(UPat.var("x") // 2, UOp(Ops.FLOORDIV, dtypes.int, (c(2), a))) is None
  # three sources: every ordering
  b, p = leaf("b"), leaf("p", dtypes.bool)
  pat3 = UPat(Ops.SINK, src=[UPat(Ops.NOOP, dtypes.bool, name="cond"), UPat(Ops.CONST, name="k"), UPat(Ops.NOOP, dtypes.int, name="v")])
  for order in [(p, c(3), b), (b, p, c(3)), (c(3), b, p), (p, b, c(3)), (b, c(3), p), (c(3), p, b)]:
    assert matches(pat3, UOp.sink(*order)) == {"cond": p, "k": c(3), "v": b}
  assert matches(pat3, UOp.sink(p, c(3), leaf("q", dtypes.bool))) is None
  assert matches(pat3, UOp.sink(p, c(3), b, b)) is None


def test_single_upat_src_repeats():
  a, b = leaf("a"), leaf("b")
  pat = UPat(Ops.ADD, src=UPat(Ops.CONST))
  assert matches(pat, add(c(1), c(2))) == {}
  assert matches(pat, add(a, c(2))) is None
  assert matches(pat, add(c(2), a)) is None
  sink = UOp.sink(c(1), c(2), c(3), c(4), c(5))
  assert matches(UPat(Ops.SINK, src=UPat(Ops.CONST)), sink) == {}
  assert matches(UPat(Ops.SINK, src=UPat(Ops.CONST)), UOp.sink(c(1), a, c(3))) is None
  # a named repeated pattern: every source must be the same node
  assert matches(UPat(Ops.ADD, src=UPat.var("x")), add(a, a)) == {"x": a}
  assert matches(UPat(Ops.ADD, src=UPat.var("x")), add(a, b)) is None


def test_repeated_name_is_the_same_node():
  a, b = leaf("a"), leaf("b")
  pat = UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("x")))
  assert matches(pat, add(a, a)) == {"x": a}
  assert matches(pat, add(a, b)) is None
  # across levels: (x*c) + x
  pat2 = UPat.var("x") * UPat.cvar("k") + UPat.var("x")
  assert matches(pat2, add(mul(a, c(3)), a)) == {"x": a, "k": c(3)}
  assert matches(pat2, add(a, mul(a, c(3)))) == {"x": a, "k": c(3)}
  assert matches(pat2, add(mul(a, c(3)), b)) is None
  # interned nodes: a node built twice is the same node
  assert matches(pat, add(leaf("q"), leaf("q"))) == {"x": leaf("q")}


def test_upat_any():
  a = leaf("a")
  pat = UPat.any(UPat(Ops.ADD, name="x"), UPat(Ops.MUL, name="x"))
  assert matches(pat, add(a, c(1))) == {"x": add(a, c(1))}
  assert matches(pat, mul(a, c(1))) == {"x": mul(a, c(1))}
  assert matches(pat, UOp(Ops.MAX, dtypes.int, (a, c(1)))) is None
  # alternatives in a source position; tried in order
  inner = UPat.any(UPat(Ops.CONST, name="v"), UPat(Ops.NOOP, name="v"))
  pat2 = UPat(Ops.ADD, src=(inner, UPat.var("y")))
  assert matches(pat2, add(c(2), a)) == {"v": c(2), "y": a}
  assert matches(pat2, add(a, c(2))) == {"v": a, "y": c(2)}
  assert matches(pat2, add(add(a, a), c(2))) is None
  # or_casted: x or x.cast()
  oc = UPat(Ops.NOOP, name="v").or_casted()
  assert matches(oc, a) == {"v": a}
  assert matches(oc, a.cast(dtypes.float)) == {"v": a}


_UNBOUND_CAPTURE = """
from tinyhybrid import UOp, dtypes, Ops
from tinyhybrid.uop.upat import UPat, PatternMatcher
a, k = UOp(Ops.NOOP, dtypes.int, (), 'a'), UOp.const(dtypes.int, 2)
inner = UPat.any(UPat(Ops.CONST, name='k'), UPat(Ops.NOOP, name='v'))
got = []
pm = PatternMatcher([(UPat(Ops.ADD, src=(inner, UPat.var('y'))), lambda **kw: got.append(kw))])
pm.rewrite(UOp(Ops.ADD, dtypes.int, (a, k)))
pm.rewrite(UOp(Ops.ADD, dtypes.int, (k, a)))
# tinygrad passes only the names the matching alternative bound
assert [{n: u for n, u in kw.items() if u is not None} for kw in got] == [{'v': a, 'y': k}, {'k': k, 'y': a}], got
"""


def test_bug_any_alternatives_with_different_names_no_crash():
  """BUG (reported): a UPat.any whose alternatives capture different names leaves a capture unbound, and the
  Python callback bridge passes the null slot on: the process segfaults. Run in a subprocess so that the
  crash fails this test only."""
  import os
  import subprocess
  import sys
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
  r = subprocess.run([sys.executable, "-c", _UNBOUND_CAPTURE], capture_output=True, text=True, env=env, timeout=120)
  assert r.returncode == 0, f"exit {r.returncode}: {r.stderr[-2000:]}"


def test_captures_reach_callbacks_by_name():
  a = leaf("a")
  seen = {}
  def cb(k, x):  # parameter order differs from capture order: passed by name
    seen.update(x=x, k=k)
    return x
  pm = PatternMatcher([(UPat.var("x") + UPat.cvar("k"), cb)])
  assert pm.rewrite(add(c(5), a)) is a
  assert seen == {"x": a, "k": c(5)}
  # a callback may take only some captures
  pm2 = PatternMatcher([(UPat.var("x") + UPat.cvar("k"), lambda k: k)])
  assert pm2.rewrite(add(a, c(5))) is c(5)
  # **kwargs takes every capture
  pm3 = PatternMatcher([(UPat.var("x") + UPat.cvar("k"), lambda **kw: kw["x"] if set(kw) == {"x", "k"} else None)])
  assert pm3.rewrite(add(a, c(5))) is a
  # a parameter the pattern does not capture is an error when the matcher is built
  with pytest.raises(ValueError):
    PatternMatcher([(UPat.var("x"), lambda y: y)])
  with pytest.raises(ValueError):
    UPat(Ops.ADD, name="ctx")


def test_ctx_only_when_asked():
  a = leaf("a")
  n = add(a, c(0))
  got = []
  pm = PatternMatcher([(UPat(Ops.ADD, name="x"), lambda ctx, x: got.append(ctx) or None)])
  token = object()
  pm.rewrite(n, token)
  graph_rewrite(n, pm, ctx=token)
  graph_rewrite(n, pm)
  assert got[0] is token and got[1] is token and got[2] is None
  # without a ctx parameter nothing extra is passed (a strict signature would raise TypeError)
  def strict(x): return None
  graph_rewrite(n, PatternMatcher([(UPat(Ops.ADD, name="x"), strict)]), ctx=token)
  # ctx alone
  pm_ctx = PatternMatcher([(UPat(Ops.NOOP), lambda ctx: ctx[0])])
  assert graph_rewrite(a, pm_ctx, ctx=[c(9)]) is c(9)


# ---------------------------------------------------------------- callbacks and rule order

def test_none_or_same_node_tries_next_rule():
  a = leaf("a")
  n = add(a, c(1))
  calls = []
  def none_rule(x):
    calls.append("none")
    return None
  def same_rule(x):
    calls.append("same")
    return x
  def real_rule(x):
    calls.append("real")
    return c(42)
  pm = PatternMatcher([(UPat(Ops.ADD, name="x"), none_rule), (UPat(Ops.ADD, name="x"), same_rule), (UPat(Ops.ADD, name="x"), real_rule)])
  assert pm.rewrite(n) is c(42)
  assert calls == ["none", "same", "real"]
  # nothing applies: None, and graph_rewrite leaves the graph alone
  pm2 = PatternMatcher([(UPat(Ops.ADD, name="x"), none_rule), (UPat(Ops.ADD, name="x"), same_rule)])
  assert pm2.rewrite(n) is None
  assert graph_rewrite(n, pm2) is n


def test_first_matching_rule_wins():
  a = leaf("a")
  n = add(a, c(1))
  pm = PatternMatcher([(UPat(Ops.MUL), lambda: c(1)), (UPat(Ops.ADD), lambda: c(2)), (UPat({Ops.ADD, Ops.MUL}), lambda: c(3)),
                       (UPat(Ops.ADD), lambda: c(4))])
  assert pm.rewrite(n) is c(2)
  assert pm.rewrite(mul(a, c(1))) is c(1)
  # rules for different ops interleaved keep their list order within an op
  pm2 = PatternMatcher([(UPat(), lambda: c(10)), (UPat(Ops.ADD), lambda: c(11))])
  assert pm2.rewrite(n) is c(10)
  pm3 = PatternMatcher([(UPat(Ops.ADD), lambda: c(11)), (UPat(), lambda: c(10))])
  assert pm3.rewrite(n) is c(11)
  assert pm3.rewrite(a) is c(10)
  # a more specific rule later in the list does not beat an earlier general one
  pm4 = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var(), UPat.cvar())), lambda: c(20)), (UPat.var("x") + 1, lambda x: x)])
  assert pm4.rewrite(n) is c(20)


def test_matcher_concatenation_python():
  a = leaf("a")
  n = add(a, c(1))
  p1 = PatternMatcher([(UPat(Ops.ADD), lambda: c(1)), (UPat(Ops.NOOP), lambda: c(5))])
  p2 = PatternMatcher([(UPat(Ops.ADD), lambda: c(2)), (UPat(Ops.MUL), lambda: c(3))])
  both, rev = p1 + p2, p2 + p1
  assert len(both) == 4 and len(rev) == 4
  assert both.rewrite(n) is c(1) and rev.rewrite(n) is c(2)
  assert both.rewrite(mul(a, a)) is c(3) and rev.rewrite(mul(a, a)) is c(3)
  assert both.rewrite(a) is c(5)
  # the parts are unchanged
  assert len(p1) == 2 and p1.rewrite(mul(a, a)) is None


def test_matcher_concatenation_with_native_sym():
  x = UOp.variable("x", 0, 10, dtypes.int)
  n = add(x, c(0))
  tag = []
  py = PatternMatcher([(UPat.var("x") + 0, lambda x: tag.append("py") or c(77)),
                       (UPat(Ops.NOOP, arg="a"), lambda: leaf("b"))])
  # native first: sym's x+0 fires, Python's is not reached
  s1 = sym + py
  assert len(s1) == len(sym) + 2
  assert graph_rewrite(n, s1) is x and tag == []
  # Python first
  s2 = py + sym
  assert graph_rewrite(n, s2) is c(77) and tag == ["py"]
  # Python rules extend sym: both kinds fire in one rewrite
  g = add(add(leaf("a"), c(2)), c(3))
  out = graph_rewrite(g, s1)
  assert out is add(leaf("b"), c(5)), out.render()


def test_single_node_rewrite_api():
  a = leaf("a")
  pm = PatternMatcher([(UPat(Ops.NOOP, arg="a"), lambda: leaf("b")), (UPat(Ops.NOOP, arg="b"), lambda: leaf("c"))])
  assert pm.rewrite(a) is leaf("b")  # one step, not a fixed point
  assert pm.rewrite(leaf("z")) is None
  # rewrite does not look below the node
  assert pm.rewrite(add(a, a)) is None
  assert sym.rewrite(add(UOp.variable("x", 0, 3, dtypes.int), c(0))) is UOp.variable("x", 0, 3, dtypes.int)


# ---------------------------------------------------------------- graph_rewrite

def test_top_down_visits_sources_first():
  a, b = leaf("a"), leaf("b")
  g = mul(add(a, b), add(b, c(1)))
  order = []
  pm = PatternMatcher([(UPat(name="x"), lambda x: order.append(x) or None)])
  assert graph_rewrite(g, pm) is g
  pos = {u: i for i, u in enumerate(order)}
  assert len(order) == len(pos) == len(list(g.toposort()))  # each node once
  for u in order:
    for s in u.src: assert pos[s] < pos[u]


def test_bottom_up_visits_node_before_sources():
  a, b = leaf("a"), leaf("b")
  g = mul(add(a, b), add(b, c(1)))
  order = []
  pm = PatternMatcher([(UPat(name="x"), lambda x: order.append(x) or None)])
  assert graph_rewrite(g, pm, bottom_up=True) is g
  pos = {u: i for i, u in enumerate(order)}
  assert len(order) == len(pos) == len(list(g.toposort()))
  assert order[0] is g
  # every node is reached through a user that was tried before it (b is shared: its second user may come later)
  users: dict = {}
  for u in order:
    for s in u.src: users.setdefault(s, []).append(u)
  for u in order[1:]: assert min(pos[x] for x in users[u]) < pos[u]
  # on a tree: every node before all of its sources
  order.clear()
  t = mul(add(leaf("a"), leaf("b")), add(leaf("c"), c(1)))
  graph_rewrite(t, pm, bottom_up=True)
  pos = {u: i for i, u in enumerate(order)}
  for u in order:
    for s in u.src: assert pos[s] > pos[u]


def test_bottom_up_sees_unrewritten_sources():
  a, b = leaf("a"), leaf("b")
  g = mul(add(a, b), c(2))
  seen = []
  def whole(s, k):
    seen.append(s)
    return UOp(Ops.NOOP, dtypes.int, (), ("whole", s.src[0].arg, k.arg))
  rules = [(UPat(Ops.MUL, src=(UPat(Ops.ADD, name="s"), UPat.cvar("k"))), whole),
           (UPat(Ops.ADD, name="x"), lambda x: UOp(Ops.MAX, dtypes.int, x.src))]
  pm = PatternMatcher(rules)
  # bottom-up: the MUL rule sees the ADD before the ADD rule turns it into a MAX
  assert graph_rewrite(g, pm, bottom_up=True) is UOp(Ops.NOOP, dtypes.int, (), ("whole", "a", 2))
  assert seen == [add(a, b)]
  # top-down: the ADD is rewritten first, the MUL rule no longer matches
  assert graph_rewrite(g, pm) is mul(UOp(Ops.MAX, dtypes.int, (a, b)), c(2))


def test_bottom_up_replacement_is_rewritten_and_entered():
  # a replacement is rewritten to a fixed point, and then its own sources are visited
  pm = PatternMatcher([(UPat(Ops.NOOP, arg="a"), lambda: add(leaf("b"), leaf("b"))),
                       (UPat(Ops.NOOP, arg="b"), lambda: leaf("c"))])
  assert graph_rewrite(mul(leaf("a"), c(2)), pm, bottom_up=True) is mul(add(leaf("c"), leaf("c")), c(2))
  assert graph_rewrite(mul(leaf("a"), c(2)), pm) is mul(add(leaf("c"), leaf("c")), c(2))


def test_fixed_point():
  chain = PatternMatcher([(UPat(Ops.NOOP, arg="a"), lambda: leaf("b")), (UPat(Ops.NOOP, arg="b"), lambda: leaf("c")),
                          (UPat(Ops.NOOP, arg="c"), lambda: leaf("d"))])
  g = add(leaf("a"), leaf("x"))
  assert graph_rewrite(g, chain) is add(leaf("d"), leaf("x"))
  # a replacement's users are rewritten again: folding (1+2)+3 needs the inner result first
  fold = PatternMatcher([(UPat(Ops.ADD, src=(UPat.cvar("p"), UPat.cvar("q"))), lambda p, q: c(p.arg + q.arg))])
  g2 = add(add(add(c(1), c(2)), c(3)), add(c(4), add(c(5), c(6))))
  assert graph_rewrite(g2, fold) is c(21)
  assert graph_rewrite(g2, fold, bottom_up=True) is c(21)
  # a replacement whose new sources need rewriting too
  grow = PatternMatcher([(UPat(Ops.NOOP, arg="a"), lambda: add(leaf("b"), leaf("b"))), (UPat(Ops.NOOP, arg="b"), lambda: c(3))])
  assert graph_rewrite(leaf("a"), grow + fold) is c(6)
  assert graph_rewrite(leaf("a"), grow + fold, bottom_up=True) is c(6)


def test_bug_bottom_up_chain_of_fresh_nodes_is_no_loop():
  """BUG (reported): bottom-up fixed-point loop detection remembers the raw addresses of intermediate results
  without holding them; a -> b -> c -> d frees b, d is allocated at b's address, and a false 'rewrite loop'
  is raised."""
  chain = PatternMatcher([(UPat(Ops.NOOP, arg="a"), lambda: leaf("b")), (UPat(Ops.NOOP, arg="b"), lambda: leaf("c")),
                          (UPat(Ops.NOOP, arg="c"), lambda: leaf("d"))])
  assert graph_rewrite(leaf("a"), chain, bottom_up=True) is leaf("d")
  assert graph_rewrite(add(leaf("a"), leaf("x")), chain, bottom_up=True) is add(leaf("d"), leaf("x"))
  # a longer chain of fresh nodes
  step = PatternMatcher([(UPat(Ops.NOOP, name="x"), lambda x: UOp(Ops.NOOP, dtypes.int, (), x.arg + 1) if x.arg < 200 else None)])
  assert graph_rewrite(UOp(Ops.NOOP, dtypes.int, (), 0), step, bottom_up=True).arg == 200


def test_memoization_shared_nodes():
  shared = add(leaf("s"), c(1))
  users = [mul(shared, c(i)) for i in range(50)]
  g = UOp.sink(*users)
  count: dict = {}
  def counter(x):
    count[x] = count.get(x, 0) + 1
    return None
  for bu in (False, True):
    count.clear()
    graph_rewrite(g, PatternMatcher([(UPat(name="x"), counter)]), bottom_up=bu)
    assert count[shared] == 1 and count[leaf("s")] == 1
    assert all(v == 1 for v in count.values())
    assert len(count) == len(list(g.toposort()))
  # a rewritten shared node: its rule runs once, every user sees the result
  calls = []
  pm = PatternMatcher([(UPat(Ops.NOOP, arg="s"), lambda: calls.append(1) or leaf("t"))])
  out = graph_rewrite(g, pm)
  assert len(calls) == 1
  assert out is UOp.sink(*[mul(add(leaf("t"), c(1)), c(i)) for i in range(50)])


def test_deep_graph_no_recursion_limit():
  g = leaf("a")
  for i in range(20000): g = add(g, c(1))
  pm = PatternMatcher([(UPat(Ops.NOOP, arg="a"), lambda: c(0)),
                       (UPat(Ops.ADD, src=(UPat.cvar("p"), UPat.cvar("q"))), lambda p, q: c(p.arg + q.arg))])
  assert graph_rewrite(g, pm) is c(20000)


def test_loop_raises_with_rule_name():
  n = add(leaf("a"), leaf("b"))
  def swap_add(a): return UOp(Ops.ADD, a.dtype, (a.src[1], a.src[0]))
  pm = PatternMatcher([(UPat(Ops.ADD, name="a"), swap_add)])
  for bu in (False, True):
    with pytest.raises(RuntimeError) as e:
      graph_rewrite(n, pm, bottom_up=bu)
    assert "swap_add" in str(e.value)
  # a two-rule cycle names one of its rules
  def a_to_b(): return leaf("b2")
  def b_to_a(): return leaf("a2")
  pm2 = PatternMatcher([(UPat(Ops.NOOP, arg="a2"), a_to_b), (UPat(Ops.NOOP, arg="b2"), b_to_a)])
  for bu in (False, True):
    with pytest.raises(RuntimeError) as e:
      graph_rewrite(mul(leaf("a2"), c(1)), pm2, bottom_up=bu)
    assert "a_to_b" in str(e.value) or "b_to_a" in str(e.value)


def test_max_rewrites_limit():
  # a rule that never reaches a fixed point without ever repeating a node
  def count_up(x): return UOp(Ops.NOOP, dtypes.int, (), x.arg + 1)
  pm = PatternMatcher([(UPat(Ops.NOOP, name="x"), count_up)])
  with pytest.raises(RuntimeError) as e:
    graph_rewrite(UOp(Ops.NOOP, dtypes.int, (), 0), pm, max_rewrites=100)
  assert "count_up" in str(e.value)
  with pytest.raises(RuntimeError) as e:
    graph_rewrite(UOp(Ops.NOOP, dtypes.int, (), 0), pm, bottom_up=True, max_rewrites=100)
  assert "count_up" in str(e.value)
  # under the limit it finishes
  stop = PatternMatcher([(UPat(Ops.NOOP, name="x"), lambda x: count_up(x) if x.arg < 50 else None)])
  assert graph_rewrite(UOp(Ops.NOOP, dtypes.int, (), 0), stop, max_rewrites=100).arg == 50


class MyError(Exception): pass


def test_callback_exception_propagates_unchanged():
  g = add(leaf("a"), c(1))
  err = MyError("boom 42")
  def boom(x): raise err
  with pytest.raises(MyError, match="^boom 42$") as e:
    graph_rewrite(g, PatternMatcher([(UPat(Ops.NOOP, name="x"), boom)]))
  assert e.value is err  # the very exception object
  with pytest.raises(KeyError) as e:
    graph_rewrite(g, PatternMatcher([(UPat(Ops.ADD, name="x"), lambda x: {}["nope"])]), bottom_up=True)
  assert e.value.args == ("nope",)
  with pytest.raises(ZeroDivisionError):
    PatternMatcher([(UPat(Ops.ADD, name="x"), lambda x: 1 // 0)]).rewrite(g)
  # the matcher still works afterwards
  assert graph_rewrite(g, PatternMatcher([(UPat(Ops.NOOP, arg="a"), lambda: leaf("b"))])) is add(leaf("b"), c(1))


@pytest.mark.parametrize("bad", [3, "x", (1, 2), 1.5])
def test_callback_returning_non_uop_is_type_error(bad):
  # (a one-node rewrite returns the value itself: test_one_node_rewrite_returns_any_value_and_graph_rewrite_only_uops)
  g = add(leaf("a"), c(1))
  with pytest.raises(TypeError):
    graph_rewrite(g, PatternMatcher([(UPat(Ops.ADD), lambda: bad)]))


def test_graph_rewrite_name_in_loop_error():
  def swap_add(a): return UOp(Ops.ADD, a.dtype, (a.src[1], a.src[0]))
  with pytest.raises(RuntimeError, match="my_pass"):
    graph_rewrite(add(leaf("a"), leaf("b")), PatternMatcher([(UPat(Ops.ADD, name="a"), swap_add)]), name="my_pass")


def test_rewrite_keeps_unmatched_graph_identical():
  g = UOp.sink(mul(add(leaf("a"), leaf("b")), c(3)), leaf("z"))
  assert graph_rewrite(g, PatternMatcher([(UPat(Ops.MAX), lambda: c(0))])) is g
  assert graph_rewrite(g, PatternMatcher([])) is g


# ---------------------------------------------------------------- cross-check against tinygrad

# Rule callbacks for the cross-check: closure-free (tinygrad's matcher requires it); they build nodes with the class
# of the node they get, so the same function serves both implementations.
def _mk(like, op_name, dtype, src, arg=None): return type(like)(type(like.op)[op_name], dtype, src, arg)
def _fold_add(p, q): return _mk(p, "CONST", p.dtype, (), p.arg + q.arg)
def _fold_mul(p, q): return _mk(p, "CONST", p.dtype, (), p.arg * q.arg)
def _const_right(k, x): return _mk(x, "ADD", x.dtype, (x, k))
def _reassoc(x, p, q): return _mk(x, "ADD", x.dtype, (x, _fold_add(p, q)))
def _rename(v): return _mk(v, "NOOP", v.dtype, (), "b")
def _whole(s, k): return _mk(s, "NOOP", s.dtype, (), f"whole{k.arg}")
def _double(x): return _mk(x, "MUL", x.dtype, (x, _mk(x, "CONST", x.dtype, (), 2)))


def _rule_sets(U, PM, ops):
  """The same rule sets, built with either implementation's UPat/PatternMatcher."""
  folding = PM([
    (U(ops.ADD, src=[U.var("x"), U(ops.CONST, arg=0)]), lambda x: x),
    (U(ops.MUL, src=[U.var("x"), U(ops.CONST, arg=1)]), lambda x: x),
    (U(ops.ADD, src=(U.cvar("p"), U.cvar("q"))), _fold_add),
    (U(ops.MUL, src=(U.cvar("p"), U.cvar("q"))), _fold_mul),
  ])
  # constants to the right, then (x + c1) + c2 -> x + (c1 + c2)
  reassoc = PM([
    (U(ops.ADD, src=(U.cvar("k"), U(ops.NOOP, name="x"))), _const_right),
    (U(ops.ADD, src=(U(ops.ADD, src=(U.var("x"), U.cvar("p"))), U.cvar("q"))), _reassoc),
    (U(ops.ADD, src=(U.cvar("p"), U.cvar("q"))), _fold_add),
  ])
  # rename leaves, and replace a whole subtree (differs between top-down and bottom-up)
  subtree = PM([
    (U(ops.NOOP, arg="a", name="v"), _rename),
    (U(ops.MUL, src=(U(ops.ADD, name="s"), U.cvar("k"))), _whole),
    (U(ops.ADD, src=(U.var("x"), U.var("x"))), _double),
  ])
  return {"folding": folding, "reassoc": reassoc, "subtree": subtree}


def _graphs(ops, mk):
  dt = mk.int_dtype
  def L(n): return mk(ops.NOOP, dt, (), n)
  def K(v): return mk(ops.CONST, dt, (), v)
  def A(a, b): return mk(ops.ADD, dt, (a, b), None)
  def M(a, b): return mk(ops.MUL, dt, (a, b), None)
  out = []
  out.append(A(M(L("a"), K(1)), K(0)))
  out.append(A(A(A(K(1), K(2)), L("x")), K(3)))
  out.append(M(A(L("a"), L("a")), K(3)))
  out.append(M(A(L("a"), L("y")), K(2)))
  out.append(A(K(5), A(K(4), L("z"))))
  shared = A(L("a"), K(0))
  out.append(mk(ops.SINK, mk.void_dtype, tuple(M(shared, K(i)) for i in range(1, 6)), None))
  # a bigger random-ish graph built deterministically
  import random
  rng = random.Random(1234)
  nodes = [L("a"), L("b"), L("x"), K(0), K(1), K(2), K(3)]
  for _ in range(120):
    a, b = rng.choice(nodes), rng.choice(nodes)
    nodes.append((A if rng.random() < 0.6 else M)(a, b))
  out.append(mk(ops.SINK, mk.void_dtype, tuple(nodes[-10:]), None))
  return out


def test_cross_check_with_tinygrad():
  tg = pytest.importorskip("tinygrad.uop.ops")
  from tinygrad.dtype import dtypes as tdtypes

  def mk_ours(op, dtype, src, arg): return UOp(Ops[op.name], dtype, src, arg)
  mk_ours.int_dtype, mk_ours.void_dtype = dtypes.int, dtypes.void
  def mk_tg(op, dtype, src, arg): return tg.UOp(tg.Ops[op.name], dtype, src, arg)
  mk_tg.int_dtype, mk_tg.void_dtype = tdtypes.int, tdtypes.void

  ours = _rule_sets(UPat, PatternMatcher, Ops)
  theirs = _rule_sets(tg.UPat, tg.PatternMatcher, tg.Ops)
  g_ours, g_tg = _graphs(Ops, mk_ours), _graphs(tg.Ops, mk_tg)

  def structure(u): return [(n.op.name, n.arg) for n in u.toposort()]
  changed = 0
  for name in ours:
    for go, gt in zip(g_ours, g_tg):
      assert structure(go) == structure(gt)  # the same input shapes
      for bu in (False, True):
        ro = graph_rewrite(go, ours[name], bottom_up=bu)
        rt = tg.graph_rewrite(gt, theirs[name], bottom_up=bu)
        assert structure(ro) == structure(rt), f"{name} bottom_up={bu}: {ro.render()}"
        changed += ro is not go
  assert changed >= 20  # the rules did something on many graphs


def test_native_rewrite_releases_the_gil():
  import threading
  import time
  x = UOp.variable("gil_x", 0, 100, dtypes.weakint)
  e = x
  for i in range(20000): e = e + (x * (i % 7)) % 5
  ticks: list[float] = []
  stop = threading.Event()
  def spin():
    while not stop.is_set(): ticks.append(time.perf_counter())
  t = threading.Thread(target=spin)
  t.start()
  time.sleep(0.02)
  start = time.perf_counter()
  out = graph_rewrite(e, sym)
  end = time.perf_counter()
  stop.set()
  t.join()
  assert out is e.simplify()
  # with the GIL held for the whole native call, the other thread could not run Python inside this window at all
  margin = (end - start) / 4
  assert any(start + margin < s < end - margin for s in ticks), f"no Python ran during a {end - start:.3f} s native rewrite"


def test_native_rewrites_with_python_args_in_threads():
  # graphs whose nodes carry Python objects keep the GIL (their args compare through Python); rewriting them in
  # several threads while others make nodes with Python args must neither deadlock nor mix results up
  import threading
  class Tagged:
    def __init__(self, v: int): self.v = v
    def __eq__(self, o: object) -> bool: return isinstance(o, Tagged) and o.v == self.v
    def __hash__(self) -> int: return hash(self.v)
  errors: list[BaseException] = []
  def work(seed: int):
    try:
      for i in range(200):
        x = UOp.variable(f"t{seed}", 0, 10, dtypes.weakint)
        leaf = UOp(Ops.CUSTOM, dtypes.weakint, (x * 2 + x,), Tagged(i % 7))
        out = graph_rewrite(leaf + 0, sym)
        assert out.op is Ops.CUSTOM and out.arg == Tagged(i % 7) and out.src[0] is (x * 3).simplify()
    except BaseException as e: errors.append(e)
  threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
  for t in threads: t.start()
  for t in threads: t.join(timeout=60)
  assert not any(t.is_alive() for t in threads), "rewrite threads deadlocked"
  assert not errors, errors


def test_one_node_rewrite_returns_any_value_and_graph_rewrite_only_uops():
  # tinygrad's renderers use a PatternMatcher as a dispatch table: pm.rewrite(u, ctx) returns their rule's string
  pm = PatternMatcher([(UPat(Ops.CONST, name="x"), lambda ctx, x: f"{ctx}{x.arg}"),
                       (UPat(Ops.NOOP, src=(UPat(Ops.NOOP), UPat(Ops.NOOP)), allow_any_len=True), lambda: True)])
  assert pm.rewrite(c(3), "c") == "c3"
  assert pm.rewrite(UOp(Ops.NOOP, dtypes.void, (leaf("a"), leaf("b"), leaf("c")))) is True
  assert pm.rewrite(UOp(Ops.NOOP, dtypes.void, (leaf("a"),))) is None
  with pytest.raises(TypeError, match="not a tinyhybrid UOp"): graph_rewrite(add(c(1), leaf("a")), pm, "c")
  # a graph rewrite run from inside a one-node rewrite's rule takes only UOps too
  inner = PatternMatcher([(UPat(Ops.NOOP, name="x"), lambda x: "no")])
  outer = PatternMatcher([(UPat(Ops.ADD, name="x"), lambda x: graph_rewrite(x, inner))])
  with pytest.raises(TypeError, match="not a tinyhybrid UOp"): outer.rewrite(add(c(1), leaf("a")))


def test_rtag_marks_a_node_as_tinygrads():
  x = c(2)
  assert x.rtag().tag is True and x.rtag("seen").tag == "seen" and x.rtag("seen") is x.rtag("seen")
  assert x.rtag() is not x and x.rtag().replace(tag=None) is x
  assert x.tagstr == "" and x.rtag(5).tagstr == ", tag=5"
  # a rule that tags what it rewrote does not match it again
  pm = PatternMatcher([(UPat(Ops.CONST, name="x"), lambda x: x.rtag() if x.tag is None else None)])
  assert graph_rewrite(add(x, leaf("a")), pm).src[0].tag is True
