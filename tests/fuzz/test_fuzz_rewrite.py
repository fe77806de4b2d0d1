"""Random UPats and graph_rewrite inputs.

- The native matcher against a reference written here from UPat's documented meaning: random patterns (most of them
  made from the node they are tried on, then loosened or broken: op and dtype sets, args, names that must bind one
  node, src in order, in any order, repeated, a prefix, alternatives) must match exactly when the reference finds a
  binding, and then with one of the reference's bindings.
- graph_rewrite with random sound rule sets (identities of + and *, constant folding, a canonical order of +'s
  sources), top down and bottom up, over random expressions: the result has the same value at random points.
- Callbacks that return junk raise TypeError; nothing crashes."""
from __future__ import annotations

import itertools

from fuzzlib import evaluate, fuzz
from hypothesis import given
from hypothesis import strategies as st

from tinyhybrid import Ops, UOp, dtypes
from tinyhybrid.uop import upat as upat_mod
from tinyhybrid.uop.upat import PatternMatcher, UPat, graph_rewrite

W = dtypes.weakint
LEAVES = [UOp(Ops.NOOP, dtypes.int, (), "a"), UOp(Ops.NOOP, dtypes.int, (), "b"), UOp(Ops.NOOP, dtypes.float, (), "f"),
          UOp.const(dtypes.int, 0), UOp.const(dtypes.int, 1), UOp.const(dtypes.int, 2), UOp.const(dtypes.float, 1.0)]
OPS = [Ops.ADD, Ops.MUL, Ops.MAX, Ops.SUB, Ops.CMPLT]
NAMES = ["x", "y", "z"]


@st.composite
def graphs(draw, depth: int = 3, top: bool = True) -> UOp:
  """A small graph: leaves under binary ops, WHERE and CAST, and (only at the top) a SINK of several."""
  if depth == 0 or draw(st.integers(0, 2)) == 0: return draw(st.sampled_from(LEAVES))
  kind = draw(st.sampled_from(["bin", "bin", "where", "cast"] + (["sink"] if top else [])))
  if kind == "cast": return draw(graphs(depth - 1, False)).cast(draw(st.sampled_from([dtypes.int, dtypes.float, W])))
  if kind == "sink": return UOp(Ops.SINK, dtypes.void, tuple(draw(st.lists(graphs(depth - 1, False), min_size=1, max_size=3))))
  a, b = draw(graphs(depth - 1, False)), draw(graphs(depth - 1, False))
  if a.dtype != b.dtype: b = b.cast(a.dtype)
  if kind == "where":
    return UOp(Ops.WHERE, a.dtype, (UOp(Ops.CMPLT, dtypes.bool, (a, b)), a, b))
  op = draw(st.sampled_from(OPS))
  return UOp(op, dtypes.bool if op is Ops.CMPLT else a.dtype, (a, b))


@st.composite
def patterns(draw, u: UOp, depth: int = 3) -> UPat:
  """A pattern for node u: u's own description, each part kept, dropped (anything) or broken."""
  def part(exact, wrong):
    c = draw(st.integers(0, 5))
    return None if c <= 1 else wrong if c == 2 and wrong is not None else exact
  if draw(st.integers(0, 9)) == 0:  # alternatives: one made for u, one for some other graph, in either order
    alts = [draw(patterns(u, depth)), draw(patterns(draw(graphs(2)), depth))]
    return UPat.any(*(alts if draw(st.booleans()) else alts[::-1]))
  op = part(u.op, draw(st.sampled_from([o for o in OPS + [Ops.NOOP, Ops.CONST] if o is not u.op])))
  if op is not None and draw(st.integers(0, 3)) == 0: op = {op, draw(st.sampled_from(OPS))}
  dtype = part(u.dtype, dtypes.int if u.dtype is not dtypes.int else dtypes.float)
  if dtype is not None and draw(st.integers(0, 3)) == 0: dtype = (dtype, dtypes.bool)
  arg = part(u.arg, "other") if u.op in (Ops.CONST, Ops.NOOP) else None
  name = draw(st.sampled_from([None, None, *NAMES]))
  src: tuple | list | UPat | None = None
  allow_any_len = False
  if depth > 0 and u.src:
    form = draw(st.sampled_from(["any", "ordered", "ordered", "permuted", "repeat", "prefix"]))
    subs = [draw(patterns(s, depth - 1)) for s in u.src]
    if draw(st.integers(0, 7)) == 0: subs = subs[:-1] if len(subs) > 1 else subs + [UPat()]  # the wrong count
    if form == "ordered": src = tuple(subs)
    elif form == "permuted": src = draw(st.permutations(subs))
    elif form == "repeat": src = subs[0]
    elif form == "prefix": src, allow_any_len = tuple(subs[:draw(st.integers(0, len(subs)))]), True
  return UPat(op, dtype, src, arg, name, allow_any_len)


def ref_match(p: UPat, u: UOp, caps: dict[str, UOp]) -> list[dict[str, UOp]]:
  """Every binding of p's names under which p matches u (extending caps), in the order they are tried."""
  if p.is_any: return [b for alt in p.src for b in ref_match(alt, u, caps)]
  if p.op is not None and u.op not in p.op: return []
  if p.match_dtype is not None and u.dtype not in p.match_dtype: return []
  if p.arg is not None and not (type(u.arg) is not str and type(p.arg) is not str and u.arg == p.arg or u.arg == p.arg): return []
  if p.name is not None:
    if p.name in caps and caps[p.name] is not u: return []
    caps = {**caps, p.name: u}
  mode = p.src_mode
  if mode == upat_mod._SRC_ANY: return [caps]
  if mode == upat_mod._SRC_REPEAT: pairs = [[(p.src[0], s) for s in u.src]]
  elif mode == upat_mod._SRC_ORDERED:
    if len(u.src) != len(p.src) and not (p.allow_any_len and len(u.src) >= len(p.src)): return []
    pairs = [list(zip(p.src, u.src))]
  else:
    if len(u.src) != len(p.src): return []
    pairs = [list(zip(perm, u.src)) for perm in itertools.permutations(p.src)]
  out = []
  for pl in pairs:
    binds = [caps]
    for sp, su in pl: binds = [b2 for b in binds for b2 in ref_match(sp, su, b)]
    out += binds
  return out


def native_match(p: UPat, u: UOp) -> dict[str, UOp] | None:
  got: list[dict] = []
  PatternMatcher([(p, lambda **kw: got.append({k: v for k, v in kw.items() if v is not None}))]).rewrite(u)
  return got[0] if got else None


@fuzz(ci=300, long=100_000)
@given(st.data())
def test_upat_matches_like_reference(data):
  u = data.draw(graphs())
  p = data.draw(patterns(u))
  ref = ref_match(p, u, {})
  got = native_match(p, u)
  assert (got is not None) == bool(ref), f"{p!r} on {u}: native {'matched' if got is not None else 'did not match'}, reference {ref}"
  if got is not None: assert any(got.keys() == b.keys() and all(got[k] is b[k] for k in b) for b in ref), (p, u, got, ref)


# ** graph_rewrite with sound rules **

VARS = [("a", -5, 5), ("b", 0, 7), ("c", 1, 3)]
ZERO, ONE = UOp.const(W, 0), UOp.const(W, 1)


@st.composite
def int_exprs(draw, depth: int = 4) -> UOp:
  if depth == 0 or draw(st.integers(0, 3)) == 0:
    if draw(st.booleans()):
      n, lo, hi = draw(st.sampled_from(VARS))
      return UOp.variable(n, lo, hi, W)
    return UOp.const(W, draw(st.integers(-3, 3)))
  op = draw(st.sampled_from([Ops.ADD, Ops.MUL, Ops.MAX, Ops.SUB]))
  return UOp(op, W, (draw(int_exprs(depth - 1)), draw(int_exprs(depth - 1))))


def _fold(x: UOp) -> UOp | None:
  a, b = x.src
  if a.op is not Ops.CONST or b.op is not Ops.CONST: return None
  return UOp.const(W, {Ops.ADD: a.arg + b.arg, Ops.MUL: a.arg * b.arg, Ops.MAX: max(a.arg, b.arg), Ops.SUB: a.arg - b.arg}[x.op])


def _order(x: UOp) -> UOp | None:
  # a canonical order of +'s sources (by a key of the node): applied once it is a fixed point, so no loop
  a, b = x.src
  return UOp(Ops.ADD, W, (b, a)) if (b.op.value, str(b.arg)) < (a.op.value, str(a.arg)) else None


RULES = [
  (UPat.var("x") + 0, lambda x: x), (UPat.var("x") * 1, lambda x: x), (UPat.var("x") * 0, lambda x: ZERO),
  (UPat(Ops.SUB, src=(UPat.var("x"), UPat.var("x"))), lambda x: ZERO), (UPat(Ops.MAX, src=(UPat.var("x"), UPat.var("x"))), lambda x: x),
  (UPat((Ops.ADD, Ops.MUL, Ops.MAX, Ops.SUB), W, src=(UPat(Ops.CONST), UPat(Ops.CONST)), name="x"), _fold),
  (UPat(Ops.ADD, W, name="x"), _order),
  (UPat(Ops.SUB, src=(UPat.var("x"), UPat.var("y"))), lambda x, y: x + y * -1),
]


@fuzz(ci=150, long=100_000)
@given(int_exprs(), st.lists(st.integers(0, len(RULES) - 1), min_size=1, max_size=len(RULES), unique=True), st.booleans(),
       st.lists(st.tuples(*[st.integers(lo, hi) for _, lo, hi in VARS]), min_size=1, max_size=3))
def test_graph_rewrite_keeps_value(e, rules, bottom_up, points):
  out = graph_rewrite(e, PatternMatcher([RULES[i] for i in rules]), bottom_up=bottom_up)
  for p in points:
    env = {n: v for (n, _, _), v in zip(VARS, p)}
    assert evaluate(out, env) == evaluate(e, env), f"{e.render()} -> {out.render()} at {env}"
  # a fixed point: rewriting again changes nothing
  assert graph_rewrite(out, PatternMatcher([RULES[i] for i in rules]), bottom_up=bottom_up) is out


JUNK = [3, "x", (1, 2), 1.5, [LEAVES[0]], {}, object(), b"", UOp, Ops.ADD, dtypes.int]


@fuzz(ci=60, long=20_000)
@given(graphs(), st.sampled_from(JUNK), st.booleans())
def test_callback_junk_is_type_error(g, junk, bottom_up):
  seen = []
  def bad(x): seen.append(x); return junk
  pm = PatternMatcher([(UPat(name="x"), bad)])
  try: graph_rewrite(g, pm, bottom_up=bottom_up)
  except TypeError: pass
  else: raise AssertionError(f"a callback returning {junk!r} did not raise TypeError")
  assert seen
