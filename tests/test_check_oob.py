"""CHECK_OOB=1: z3 proves every kernel's loads and stores in bounds before it runs.

Kernel IR built by hand checks what the proof accepts and what it catches (the cases of tinygrad's
test_validate_oob); planted bugs in the lowering (a wrong shrink, an off-by-one pad, a lost gate) check that a real
Tensor program's broken kernel is stopped before it runs, with the access, the buffer size and the counterexample."""
from collections import OrderedDict

import numpy as np
import pytest

from tinyhybrid import Tensor, TinyJit, Variable
from tinyhybrid.codegen import lower as lower_mod
from tinyhybrid.codegen import validate
from tinyhybrid.codegen.validate import OutOfBoundsError, prove
from tinyhybrid.dtype import dtypes
from tinyhybrid.engine import realize as realize_mod
from tinyhybrid.helpers import Context, GlobalCounters
from tinyhybrid.uop import AxisType, Ops
from tinyhybrid.uop.ops import UOp

IDX = dtypes.weakint


def buf(size: int, dt=dtypes.int, slot: int = 0) -> UOp: return UOp(Ops.PARAM, dt.ptr(size), (), slot)
def c(v: int) -> UOp: return UOp.const(IDX, v)
def rng(end: int | UOp, axis: int = 0) -> UOp: return UOp(Ops.RANGE, IDX, (end if isinstance(end, UOp) else c(end),), (axis, AxisType.LOOP))
def var(name: str, lo: int, hi: int) -> UOp: return UOp(Ops.DEFINE_VAR, IDX, (), (name, lo, hi))


def load(b: UOp, idx: UOp, gate: UOp | None = None, width: int = 1, mask: int | None = None) -> UOp:
  dt = b.dtype.base.vec(width) if width > 1 else b.dtype.base
  src = (UOp(Ops.INDEX, dt, (b, idx)),) + ((gate,) if gate is not None else ()) + ((UOp.const(dtypes.uint, mask),) if mask is not None else ())
  return UOp(Ops.LOAD, dt, src)


def kernel(value: UOp, *loops: UOp, out_idx: UOp | None = None, out_size: int = 1 << 20) -> UOp:
  """A kernel storing value to a large output buffer (slot 9) at out_idx (0 by default)."""
  out = buf(out_size, value.dtype.scalar(), 9)
  store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, value.dtype, (out, out_idx if out_idx is not None else c(0))), value))
  return UOp.sink(UOp(Ops.END, dtypes.void, (store, *loops)))


def ok(value: UOp, *loops: UOp, **kw) -> None: prove("k", kernel(value, *loops, **kw))


def caught(value: UOp, *loops: UOp, **kw) -> str:
  with pytest.raises(OutOfBoundsError) as e: prove("k", kernel(value, *loops, **kw))
  return str(e.value)


def test_const_index():
  b = buf(16)
  ok(load(b, c(0)))
  ok(load(b, c(15)))
  assert "LOAD data0[16] (int, 16 elements) may be out of bounds" in caught(load(b, c(16)))
  assert "the index is -1" in caught(load(b, c(-1)))


def test_variable_index():
  b = buf(16)
  ok(load(b, var("i", 0, 15)))
  msg = caught(load(b, var("i", 0, 20)))
  i = int(msg.split("i=")[1].split(" ")[0])
  assert 16 <= i <= 20 and f"the index is {i}" in msg


def test_range_and_gate():
  b, r = buf(16), rng(42)
  ok(load(b, r, r < 16), r)
  # a gate that does not cover its access: one element too many
  assert "at r0=16 the index is 16 (under the gate" in caught(load(b, r, r < 17), r)
  assert "r0=" in caught(load(b, r), r)


def test_variable_gate():
  b, v = buf(16), var("v", -5, 80)
  ok(load(b, v, (v < 0).logical_not() & (v < 16)))
  caught(load(b, v, v < 16))


def test_wrong_shrink():
  # x[1:16] of a 16-element buffer read at r+2 instead of r+1: the last element is one past the end
  b, r = buf(16), rng(15)
  ok(load(b, r + 1), r)
  assert "at r0=14 the index is 16" in caught(load(b, r + 2), r)


def test_off_by_one_pad():
  # x.pad((1, 1)) of 16 elements: 18 outputs, the inner 16 read x[r-1]
  b, r = buf(16), rng(18)
  inside = (r < 1).logical_not()
  ok(load(b, r - 1, inside & (r < 17)), r)
  assert "at r0=17 the index is 16" in caught(load(b, r - 1, inside & (r < 18)), r)
  assert "at r0=0 the index is -1" in caught(load(b, r - 1, r < 17), r)


def test_two_loops_and_counterexample():
  b, r0, r1 = buf(16), rng(4, 0), rng(4, 1)
  ok(load(b, r0 * 4 + r1), r0, r1)
  assert "at r0=3, r1=3 the index is 15" in caught(load(buf(15), r0 * 4 + r1), r0, r1)


def test_floordiv_mod_shifts():
  b = buf(16)
  r = rng(32)
  ok(load(b, r // 2), r)
  r = rng(34)
  caught(load(b, r // 2), r)
  r = rng(100)
  ok(load(b, r % 16), r)
  caught(load(b, r % 17), r)
  r = rng(64)
  ok(load(b, UOp(Ops.SHR, IDX, (r, c(2)))), r)
  r = rng(128)
  caught(load(b, UOp(Ops.SHR, IDX, (r, c(2)))), r)
  r = rng(8)
  ok(load(buf(57), UOp(Ops.SHL, IDX, (r, c(3)))), r)  # 0..56
  caught(load(buf(56), UOp(Ops.SHL, IDX, (r, c(3)))), r)


def test_vector_access_and_lane_mask():
  b, r = buf(16, dtypes.float), rng(4)
  ok(load(b, r * 4, width=4), r)
  assert "LOAD of 4 elements data0[(r0*4)] (float, 15 elements) may be out of bounds: at r0=3 the index is 12 and lane 3 reads element 15" in \
    caught(load(buf(15, dtypes.float), r * 4, width=4), r)
  # a chunk whose dead lanes lie past the end: the lane mask keeps them from being read
  ok(load(buf(14, dtypes.float), c(12), width=4, mask=0b0011))
  assert "lane 2 reads element 14" in caught(load(buf(14, dtypes.float), c(12), width=4, mask=0b0111))


def test_lane_mask_built_from_gates():
  # as codegen/expand.py builds it: bit i of the mask is set where lane i's gate holds
  def masked(size: int, limit: int) -> UOp:
    r = rng(4)
    m = UOp.const(dtypes.uint, 0)
    for i in range(4): m = m | (r * 4 + i < limit).where(UOp.const(dtypes.uint, 1 << i), UOp.const(dtypes.uint, 0))
    b = buf(size, dtypes.float)
    return kernel(UOp(Ops.LOAD, dtypes.float.vec(4), (UOp(Ops.INDEX, dtypes.float.vec(4), (b, r * 4)), m)), r)
  prove("k", masked(14, 14))
  with pytest.raises(OutOfBoundsError, match="at r0=3 the index is 12 and lane 2 reads element 14"): prove("k", masked(14, 15))


def test_symbolic_loop_end():
  n = var("n", 1, 16)
  r = rng(n)
  ok(load(buf(16), r), r)
  assert "n=16" in caught(load(buf(15), r), r)


def test_casts_wrap():
  r = rng(300)
  # a cast to uchar wraps 256..299 to 0..43: always inside 256 elements, not inside 200
  idx = r.cast(dtypes.uint8).cast(IDX)
  ok(load(buf(256), idx), r)
  caught(load(buf(200), idx), r)
  # bool to int is 0 or 1
  ok(load(buf(2), (r < 5).cast(IDX)), r)


def test_bitcast():
  r = rng(16)
  # int -> uint, shift, back to int: 0..30
  i = UOp(Ops.SHL, dtypes.uint, (r.cast(dtypes.int).bitcast(dtypes.uint), UOp.const(dtypes.uint, 1))).bitcast(dtypes.int).cast(IDX)
  ok(load(buf(16), i, i < 16), r)
  caught(load(buf(16), i), r)
  # a negative char reads as a large uchar
  ch = var("c", -128, -113).cast(dtypes.int8)
  ok(load(buf(144), ch.bitcast(dtypes.uint8).cast(IDX)))
  caught(load(buf(143), ch.bitcast(dtypes.uint8).cast(IDX)))


def test_float_and_loaded_values_are_unknown():
  b, r = buf(16), rng(20)
  # an index from a float, or a gate from a float comparison, can be anything
  caught(load(b, (r.cast(dtypes.float) * 0.5).cast(IDX)), r)
  unknown = r.cast(dtypes.float) < 3.0
  ok(load(b, r, (r < 16) & unknown), r)
  caught(load(b, r, unknown), r)
  # an index read from memory is proven only under a gate that bounds it
  x = load(buf(20, dtypes.int, 1), r).cast(IDX)
  caught(load(b, x), r)
  ok(load(b, x, (x < 0).logical_not() & (x < 16)), r)


def test_store():
  r = rng(17)
  with pytest.raises(OutOfBoundsError, match=r"STORE data9\[.*\] \(float, 16 elements\) .* at r0=16 the index is 16"):
    prove("k", kernel(UOp.const(dtypes.float, 1.0), r, out_idx=r, out_size=16))
  prove("k", kernel(UOp.const(dtypes.float, 1.0), rng(16), out_idx=rng(16), out_size=16))


def test_empty_loop_runs_nothing():
  # a kernel over a zero-size dimension: its body never runs, so nothing in it is out of bounds
  r = rng(0)
  ok(load(buf(0, dtypes.float), c(0)), r)
  # inside a loop of n iterations n is at least 1: n - 1 is an index, for the load and the store in it
  n = var("n", 0, 8)
  ok(load(buf(8, dtypes.float), n - 1), rng(n), out_idx=n - 1, out_size=8)
  caught(load(buf(8, dtypes.float), n - 1), out_idx=c(0))  # outside any loop n may be 0


def test_loop_range_holds_only_inside_the_loop():
  # a sum over n elements, n from 0: the reduce's loop may be empty, and the store after it still runs. Its index
  # n - 1 is -1 at n = 0: the loop's range (which would imply n >= 1) must not be assumed outside the loop
  n = var("n", 0, 4)
  rr = UOp(Ops.RANGE, IDX, (n,), (1, AxisType.REDUCE))
  total = UOp(Ops.REDUCE, dtypes.float, (load(buf(4, dtypes.float), rr), rr), (Ops.ADD, 1))
  assert "n=0" in caught(total, out_idx=n - 1, out_size=4)
  prove("k", kernel(total, out_idx=n, out_size=5))


def test_same_axis_number_is_two_loops():
  # two loops that share an axis number are two unknowns: the proof must not take the smaller range for both
  b, small, big = buf(8), rng(8, 0), UOp(Ops.RANGE, IDX, (c(16),), (0, AxisType.REDUCE))
  caught(load(b, small + big - small), small, big)


def test_is_a_runtime_error():
  assert issubclass(OutOfBoundsError, RuntimeError)  # tinygrad raises RuntimeError


# ** planted bugs in the lowering: a real program's kernel is stopped before it runs **

@pytest.fixture
def fresh(monkeypatch, tmp_path):
  """Empty kernel and schedule caches and proof store: each test lowers (and proves) its own kernels."""
  monkeypatch.setattr(realize_mod, "kernel_cache", OrderedDict())
  monkeypatch.setattr(realize_mod, "schedule_cache", OrderedDict())
  monkeypatch.setenv("TINYHYBRID_CACHE", str(tmp_path))


def _stopped(t: Tensor, match: str) -> None:
  before = GlobalCounters.kernel_count
  with Context(CHECK_OOB=1), pytest.raises(OutOfBoundsError, match=match): t.realize()
  assert GlobalCounters.kernel_count == before  # nothing ran


def test_planted_wrong_shrink(fresh, monkeypatch):
  orig = lower_mod.INDEX_MAPS[Ops.SHRINK]
  def wrong_shrink(idx, src, u):
    out = orig(idx, src, u)
    return (out[0] + 1,) + out[1:]
  x = Tensor(np.arange(37, dtype=np.float32)).realize()
  monkeypatch.setitem(lower_mod.INDEX_MAPS, Ops.SHRINK, wrong_shrink)
  _stopped(x[5:37] * 2, r"LOAD.* \(float, 37 elements\) may be out of bounds: at .* (the index is 37|reads element 37)")


def test_planted_off_by_one_pad(fresh, monkeypatch):
  def off_by_one(idx, src, u):
    (b, _), = u.arg
    return (idx[0] < b).logical_not() & (idx[0] < b + src[0] + 1)  # one element past the source
  x = Tensor(np.arange(29, dtype=np.float32)).realize()
  monkeypatch.setattr(lower_mod, "_pad_inside", off_by_one)
  _stopped(x.pad((2, 3)) + 1, r"\(float, 29 elements\) may be out of bounds: at .* (the index is 29|reads element 29)")


def test_planted_lost_gate(fresh, monkeypatch):
  orig = lower_mod.Lowerer.load
  monkeypatch.setattr(lower_mod.Lowerer, "load", lambda self, b, flat, valid: orig(self, b, flat, None))
  x = Tensor(np.arange(23, dtype=np.float32)).realize()
  _stopped(x.pad((1, 1)).sum(), r"\(float, 23 elements\) may be out of bounds: at .* the index is (-1|23)")


def test_planted_kernel_never_cached(fresh, monkeypatch):
  # the kernel that failed its proof is not kept: once the bug is gone the same program lowers again and runs
  orig = lower_mod.Lowerer.load
  x = Tensor(np.arange(19, dtype=np.float32)).realize()
  with monkeypatch.context() as m:
    m.setattr(lower_mod.Lowerer, "load", lambda self, b, flat, valid: orig(self, b, flat, None))
    _stopped(x.pad((1, 2)) * 3, "19 elements")
  with Context(CHECK_OOB=1): np.testing.assert_equal((x.pad((1, 2)) * 3).numpy(), np.pad(np.arange(19, dtype=np.float32), (1, 2)) * 3)


# ** correct programs: proven, values right, proofs kept **

def test_correct_programs_pass(fresh):
  a, b = np.random.default_rng(0).standard_normal((2, 9, 13)).astype(np.float32)
  with Context(CHECK_OOB=1):
    x, y = Tensor(a), Tensor(b)
    np.testing.assert_allclose((x @ y.T).relu().numpy(), np.maximum(a @ b.T, 0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(x[2:7, ::3].pad(((1, 2), (0, 3))).flip(1).sum(0).numpy(),
                               np.pad(a[2:7, ::3], ((1, 2), (0, 3)))[:, ::-1].sum(0), rtol=1e-5)
    np.testing.assert_allclose(x.reshape(13, 9).permute(1, 0).max(1).numpy(), a.reshape(13, 9).T.max(1))


def test_proof_kept_with_kernel(fresh, monkeypatch, tmp_path):
  calls = []
  real = validate.prove
  monkeypatch.setattr(validate, "prove", lambda name, ast, sizes=None: calls.append(name) or real(name, ast, sizes))
  x = Tensor(np.arange(41, dtype=np.float32)).realize()
  with Context(CHECK_OOB=1):
    (x[1:] + 1).realize()
    n = len(calls)
    assert n >= 1 and len(list((tmp_path / "oob").iterdir())) == n
    (x[1:] + 1).realize()  # the schedule cache's kernels are proven already
    assert len(calls) == n
  # in a new process (empty caches) the proof on disk is used
  monkeypatch.setattr(realize_mod, "kernel_cache", OrderedDict())
  monkeypatch.setattr(realize_mod, "schedule_cache", OrderedDict())
  with Context(CHECK_OOB=1): (x[1:] + 1).realize()
  assert len(calls) == n


def test_cached_before_check_oob_is_proven(fresh, monkeypatch):
  # kernels lowered and planned while CHECK_OOB was off are proven once it is on, before they run again
  calls = []
  real = validate.prove
  monkeypatch.setattr(validate, "prove", lambda name, ast, sizes=None: calls.append(name) or real(name, ast, sizes))
  x = Tensor(np.arange(31, dtype=np.float32)).realize()
  (x.flip(0) * 2).realize()
  assert calls == []
  with Context(CHECK_OOB=1): np.testing.assert_equal((x.flip(0) * 2).numpy(), np.arange(31, dtype=np.float32)[::-1] * 2)
  assert len(calls) >= 1


# ** Variable-sized buffers: a whole buffer reshaped to a symbolic shape is n*3 elements for every n **

def test_symbolic_buffer_size():
  n = var("n", 1, 10)
  r, j = rng(n, 0), rng(c(3), 1)
  value = load(buf(12, slot=1), r * 3 + j)
  # the PARAM's size is that of the buffer the kernel was lowered for (n=4): n=5 would read past it
  with pytest.raises(OutOfBoundsError, match=r"\(int, 12 elements\) may be out of bounds: at n=\d+"): prove("k", kernel(value, r, j))
  prove("k", kernel(value, r, j), {1: (n * 3,)})  # the size as an expression of n: in bounds for every n
  prove("k", kernel(value, r, j), {1: (n * 3, (n * 3 // 3) * 3)})  # two reshapes of the buffer: both are its size
  # one row too many: caught, with the size at the counterexample
  r1 = rng(n + 1, 0)
  with pytest.raises(OutOfBoundsError) as e: prove("k", kernel(load(buf(12, slot=1), r1 * 3 + j), r1, j), {1: (n * 3,)})
  msg = str(e.value)
  at_n = int(msg.split("n=")[1].split(",")[0])
  assert f"(int, (n*3) elements, {3 * at_n} there) may be out of bounds" in msg and f"r0={at_n}" in msg, msg


def _variable_rows(jf, rows, check) -> None:
  vn = Variable("n", 1, 10)
  for n in rows:
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3) - 7
    check(n, x, jf(Tensor(x).reshape(vn.bind(n), 3)))


def test_symbolic_buffer_proves_under_jit(fresh, monkeypatch):
  calls = []
  real = validate.prove
  monkeypatch.setattr(validate, "prove", lambda name, ast, sizes=None: calls.append(sizes) or real(name, ast, sizes))
  jf = TinyJit(lambda a: a.sum(1).realize())
  with Context(CHECK_OOB=1):
    _variable_rows(jf, [4, 5, 7, 3, 10, 1], lambda n, x, out: np.testing.assert_allclose(out.reshape(n).numpy(), x.sum(1)))
  assert calls and any(s for s in calls)  # proven against the symbolic size
  jg = TinyJit(lambda a: (a * 2 + 1).realize())
  with Context(CHECK_OOB=1):
    _variable_rows(jg, [2, 6, 9, 3], lambda n, x, out: np.testing.assert_allclose(out.reshape(n, 3).numpy(), x * 2 + 1))


def test_planted_symbolic_overread(fresh, monkeypatch):
  # a reshape of the Variable-sized buffer that reads one element past its row: caught for some n, with the size there
  orig = lower_mod.INDEX_MAPS[Ops.RESHAPE]
  def one_past(idx, src, u):
    out = orig(idx, src, u)
    return (out[0] + 1,) + out[1:] if u.src[0].op is Ops.BUFFER else out
  monkeypatch.setitem(lower_mod.INDEX_MAPS, Ops.RESHAPE, one_past)
  x = Tensor(np.arange(12, dtype=np.float32)).reshape(Variable("n", 1, 10).bind(4), 3)
  with Context(CHECK_OOB=1), pytest.raises(OutOfBoundsError) as e: x.sum(1).realize()
  msg = str(e.value)
  at_n = int(msg.split("n=")[1].split(",")[0].split(" ")[0])
  assert f"(float, (n*3) elements, {3 * at_n} there) may be out of bounds" in msg, msg
  assert f"{3 * at_n}" in msg.split("the index is")[1], msg
