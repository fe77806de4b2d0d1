"""codegen/decomp/op.py: THREEFRY as 32-bit arithmetic, against a NumPy uint32 reference of the same cipher."""
import numpy as np
import pytest

from tinyhybrid.codegen.decomp.op import pm_threefry, threefry2x32
from tinyhybrid.dtype import dtypes
from tinyhybrid.uop import GroupOp, Ops
from tinyhybrid.uop.ops import UOp
from tinyhybrid.uop.upat import graph_rewrite


def reference(x: int, key: int) -> int:
  u32 = np.uint32
  with np.errstate(over="ignore"):
    x0, x1, k0, k1 = u32(x & 0xFFFFFFFF), u32(x >> 32), u32(key & 0xFFFFFFFF), u32(key >> 32)
    ks = [k1, k0 ^ k1 ^ u32(0x1BD11BDA), k0]
    a, b = x0 + ks[2], x1 + ks[0]
    for i in range(5):
      for r in ((13, 15, 26, 6), (17, 29, 16, 24))[i % 2]:
        a = a + b
        b = a ^ ((b << u32(r)) | (b >> u32(32 - r)))
      a, b = a + ks[i % 3], b + ks[(i + 1) % 3] + u32(i + 1)
  return (int(b) << 32) | int(a)


@pytest.mark.parametrize("x,key", [(5, 10), (0, 0), (2**64 - 1, 2**64 - 1), (2**63 + 12345, 2**40 + 7), (0xDEADBEEF, 0x123456789ABCDEF)])
def test_constants_fold_to_the_cipher(x, key):
  out = threefry2x32(UOp.const(x, dtypes.uint64), UOp.const(key, dtypes.uint64)).simplify()
  assert out.op is Ops.CONST and out.arg == reference(x, key)


def test_the_rule_leaves_only_alu_ops():
  x, key = UOp.variable("x", 0, 2**31, dtypes.uint64), UOp.const(7, dtypes.uint64)
  out = graph_rewrite(UOp(Ops.THREEFRY, dtypes.uint64, (x, key)), pm_threefry)
  ops = {u.op for u in out.toposort()}
  assert Ops.THREEFRY not in ops and ops <= set(GroupOp.ALU) | {Ops.CONST, Ops.CAST, Ops.DEFINE_VAR}
