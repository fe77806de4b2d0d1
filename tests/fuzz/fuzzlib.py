"""What every fuzzer in tests/fuzz shares: how many examples it runs.

CI runs a short, fixed slice (hypothesis derandomized: the same examples every run, so a failure is reproducible and
the suite never flakes). FUZZ_LONG=1 (or `pytest tests/fuzz --fuzz-long`) runs the long mode: random examples, as many
as each fuzzer's long count; FUZZ_EXAMPLES=N sets the count of every fuzzer. A failure is shrunk by hypothesis to a
smallest program and printed with the seed that reproduces it."""
from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

from tinyhybrid import Ops, UOp, dtypes


def long_mode() -> bool: return os.getenv("FUZZ_LONG", "") not in ("", "0")


def fuzz(ci: int, long: int) -> settings:
  """Hypothesis settings for a fuzzer: `ci` examples in CI, `long` in the long mode."""
  n = int(os.getenv("FUZZ_EXAMPLES", "0")) or (long if long_mode() else ci)
  return settings(max_examples=n, deadline=None, derandomize=not long_mode(), print_blob=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])


def _floordiv(a: int, b: int) -> int: return 0 if b == 0 else a // b
def _cdiv(a: int, b: int) -> int: return 0 if b == 0 else abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)


def evaluate(u: UOp, env: dict[str, int]) -> int | bool:
  """The value of an integer expression at the variables' values env, node by node with Python's ints."""
  val: dict[UOp, int | bool] = {}
  for n in u.toposort():
    s = [val[x] for x in n.src]
    op = n.op
    if op is Ops.CONST: v = n.arg
    elif op is Ops.DEFINE_VAR: v = env[n.arg[0]]
    elif op is Ops.ADD: v = s[0] + s[1]
    elif op is Ops.SUB: v = s[0] - s[1]
    elif op is Ops.MUL: v = s[0] * s[1]
    elif op is Ops.NEG: v = -s[0]
    elif op is Ops.FLOORDIV: v = _floordiv(s[0], s[1])
    elif op is Ops.FLOORMOD: v = s[0] - s[1] * _floordiv(s[0], s[1]) if s[1] else 0
    elif op is Ops.CDIV: v = _cdiv(s[0], s[1])
    elif op is Ops.CMOD: v = s[0] - s[1] * _cdiv(s[0], s[1]) if s[1] else 0
    elif op is Ops.MAX: v = max(s[0], s[1])
    elif op is Ops.CMPLT: v = s[0] < s[1]
    elif op is Ops.CMPNE: v = s[0] != s[1]
    elif op is Ops.CMPEQ: v = s[0] == s[1]
    elif op is Ops.WHERE: v = s[1] if s[0] else s[2]
    elif op is Ops.AND: v = s[0] & s[1]
    elif op is Ops.OR: v = s[0] | s[1]
    elif op is Ops.XOR: v = s[0] ^ s[1]
    elif op is Ops.SHL: v = s[0] << s[1]
    elif op is Ops.SHR: v = s[0] >> s[1]
    elif op is Ops.CAST and n.dtype in (dtypes.weakint, dtypes.int64): v = int(s[0])
    elif op is Ops.CAST and n.dtype is dtypes.bool: v = s[0] != 0
    else: raise NotImplementedError(f"evaluate: {op} {n.dtype}")
    val[n] = v
  return val[u]
