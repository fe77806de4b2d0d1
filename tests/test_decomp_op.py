"""codegen/decomp/op.py: THREEFRY as 32-bit arithmetic, against a NumPy uint32 reference of the same cipher; and
BYTEDOT (x86's pmaddubsw on 16-bit lanes) against NumPy on every CPU backend and the Python device, as the C
renderer's instruction and as the int32 arithmetic the others get."""
import numpy as np
import pytest

from tinyhybrid.codegen.decomp.op import pm_bytedot, pm_threefry, threefry2x32
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


def bytedot_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  lo, hi = (a & 0xFF).astype(np.int32), (a >> 8).astype(np.int32)
  slo, shi = (b & 0xFF).astype(np.uint8).view(np.int8).astype(np.int32), (b >> 8).astype(np.uint8).view(np.int8).astype(np.int32)
  return np.clip(lo * slo + hi * shi, -32768, 32767).astype(np.int16)


def _bytedot_operands() -> tuple[np.ndarray, np.ndarray]:
  """Random lanes, and the extremes: both sums saturating (255 * 127 twice, 255 * -128 twice), zero, and mixed signs."""
  rng = np.random.default_rng(0)
  a, b = rng.integers(0, 1 << 16, (3, 64), dtype=np.uint16), rng.integers(0, 1 << 16, (3, 64), dtype=np.uint16)
  a[0, :6] = [0xFFFF, 0xFFFF, 0, 0x00FF, 0xFF00, 0x0101]
  b[0, :6] = [0x7F7F, 0x8080, 0x8080, 0x0080, 0x7F00, 0xFF01]
  return a, b


@pytest.mark.parametrize("device", ["CPU", "CPU:LLVM", "CPU:X86", "PYTHON"])
def test_bytedot_is_pmaddubsw_on_every_cpu_backend(device):
  # the C renderer has the instruction (code_for_op); LLVM, the x86 writer and the Python device get BYTEDOT as int32
  # arithmetic before the lanes are expanded. Each matches NumPy's saturating sum bit for bit
  from tinyhybrid import Device, Tensor
  a, b = _bytedot_operands()
  out = Tensor(a, device=device).alu(Ops.BYTEDOT, Tensor(b, device=device))
  assert out.dtype == dtypes.int16 and (Ops.BYTEDOT in Device[device].renderer.code_for_op) == (device == "CPU")
  np.testing.assert_array_equal(out.numpy(), bytedot_reference(a, b))


def test_the_c_renderer_writes_pmaddubsw_and_the_rule_leaves_int32_arithmetic():
  from tinyhybrid import Tensor
  from tinyhybrid.codegen import to_program
  from tinyhybrid.renderer.cstyle import CRenderer
  from tinyhybrid.schedule.kernelize import create_schedule, normalize
  a, b = _bytedot_operands()
  out = Tensor(a).alu(Ops.BYTEDOT, Tensor(b))
  key, inputs, _ = normalize([out.uop])
  (item,) = create_schedule(key, len(inputs)).items
  src = to_program(item, CRenderer(8, registers=16)).src
  assert "__builtin_ia32_pmaddubsw128" in src and "defined(__SSSE3__)" in src, src  # (8 lanes: the plan's vector)
  x, y = UOp.variable("x", 0, 2**16 - 1, dtypes.uint16), UOp.variable("y", 0, 2**16 - 1, dtypes.uint16)
  ops = {u.op for u in graph_rewrite(UOp(Ops.BYTEDOT, dtypes.int16, (x, y)), pm_bytedot).toposort()}
  assert Ops.BYTEDOT not in ops and ops <= set(GroupOp.ALU) | {Ops.CONST, Ops.CAST, Ops.DEFINE_VAR}


def test_bytedot_takes_uint16_lanes_and_makes_int16():
  # an ALU op of ours, outside tinygrad's groups (its programs iterate GroupOp.ALU), inside those the passes read
  assert Ops.BYTEDOT not in GroupOp.ALU | GroupOp.Binary | GroupOp.Elementwise and Ops.BYTEDOT in GroupOp.AnyALU & GroupOp.AnyElementwise
  assert UOp(Ops.BYTEDOT, None, (UOp.const(1, dtypes.uint16),) * 2).dtype == dtypes.int16
  with pytest.raises(TypeError, match="uint16"): UOp(Ops.BYTEDOT, None, (UOp.const(1, dtypes.int32),) * 2)
