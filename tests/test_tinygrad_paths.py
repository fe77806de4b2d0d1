"""Names tinygrad's tests and examples import from its modules exist at the same paths here and mean the same."""
import math
import pickle

import pytest
import torch

from tinyhybrid import UOp


def test_rewrite_api_from_uop_ops():
  from tinyhybrid.uop.ops import AxisType, Ops, PatternMatcher, UPat, graph_rewrite
  from tinyhybrid.uop.upat import PatternMatcher as PM
  assert PatternMatcher is PM and AxisType.REDUCE.name == "REDUCE"
  pm = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar("c"))), lambda x, c: x * 2 if c.arg == 0 else None)])
  v = UOp.variable("a", 0, 9)
  assert graph_rewrite(v + 0, pm) is v * 2


def test_dtype_names():
  from tinyhybrid.dtype import AddrSpace, _from_torch_dtype, _to_torch_dtype, dtypes, fp8_to_float, truncate
  from tinyhybrid.uop import AddrSpace as A
  assert AddrSpace is A
  assert truncate[dtypes.int8](300) == 44 and truncate[dtypes.uint32](-1) == 2**32 - 1 and truncate[dtypes.bool](3) is True
  assert truncate[dtypes.float32](1.1) == torch.tensor(1.1, dtype=torch.float32).item()
  assert truncate[dtypes.float16](1e6) == math.inf and truncate[dtypes.bfloat16](1.1) == torch.tensor(1.1).bfloat16().item()
  assert truncate[dtypes.float32](1.1) == UOp.const(dtypes.float32, 1.1).arg  # the graph's constants agree
  fp8_torch = {dtypes.fp8e4m3: torch.float8_e4m3fn, dtypes.fp8e5m2: torch.float8_e5m2, dtypes.fp8e4m3fnuz: torch.float8_e4m3fnuz,
               dtypes.fp8e5m2fnuz: torch.float8_e5m2fnuz}
  for dt in dtypes.fp8s:
    assert _to_torch_dtype(dt) is torch.uint8  # an fp8 is its bits to torch, as in tinygrad
    ref = torch.arange(256, dtype=torch.uint8).view(fp8_torch[dt]).float().tolist()
    ours = [fp8_to_float(x, dt) for x in range(256)]
    assert all(a == b or (math.isnan(a) and math.isnan(b)) for a, b in zip(ours, ref)), dt
  assert _to_torch_dtype(dtypes.bfloat16) is torch.bfloat16 and _from_torch_dtype(torch.uint16) is dtypes.uint16
  with pytest.raises(TypeError): _from_torch_dtype(torch.complex64)
  with pytest.raises(ValueError): fp8_to_float(1, dtypes.float32)
  from tinyhybrid.dtype import DTYPES_DICT
  assert dtypes.fields() is DTYPES_DICT and dtypes.fields()["half"] is dtypes.float16 and "void" not in dtypes.fields()
  assert dtypes.fp8_fnuz == (dtypes.fp8e4m3fnuz, dtypes.fp8e5m2fnuz) and dtypes.fp8s == dtypes.fp8_ocp + dtypes.fp8_fnuz


def test_helpers():
  from tinyhybrid.helpers import (Profiling, ansistrip, cdiv, colored, flat_mv, from_mv, get_single_element, getbits, partition, polyN,
                                  time_to_str, to_mv, unwrap)
  assert [cdiv(7, 2), cdiv(-7, 2), cdiv(7, -2), cdiv(5, 0)] == [3, -3, -3, 0]
  assert getbits(0b101100, 2, 4) == 0b011 and polyN(2.0, [1, 0, -1]) == 3.0
  assert partition(range(6), lambda x: x % 2 == 0) == ([0, 2, 4], [1, 3, 5])
  assert ansistrip(colored("hi", "red")) == "hi"
  assert time_to_str(25.0) == "   25.00s " and time_to_str(0.025) == "   25.00ms" and time_to_str(2.5e-6) == "    2.50us"
  assert unwrap(3) == 3 and get_single_element([4]) == 4
  with pytest.raises(ValueError): unwrap(None)
  with pytest.raises(ValueError): get_single_element([1, 2])
  buf = bytearray(b"abcd")
  arr = from_mv(memoryview(buf))
  assert bytes(to_mv(__import__("ctypes").addressof(arr), 4)) == b"abcd"
  assert flat_mv(memoryview(bytearray(8)).cast("I")).nbytes == 8 and flat_mv(memoryview(bytearray(8)).cast("I")).format == "B"
  with Profiling(enabled=False): pass
  from tinyhybrid.helpers import pad_bytes, word_wrap
  assert word_wrap("a" * 10, 4) == "aaaa\naaaa\naa" and word_wrap(colored("ab", "red") + "cdef", 3) == colored("ab", "red") + "c\ndef"
  assert pad_bytes(b"abc", 4) == b"abc\x00" and pad_bytes(b"abcd", 4) == b"abcd"
  from tinyhybrid.dtype import dtypes, float_to_fp8, fp8_to_float
  assert [float_to_fp8(v, dtypes.fp8e4m3) for v in (1.0, -2.0, 1000.0)] == [0x38, 0xC0, 0x7E] and fp8_to_float(0x7E, dtypes.fp8e4m3) == 448


def test_key_value_cache(tmp_path, monkeypatch):
  monkeypatch.setenv("TINYHYBRID_CACHE", str(tmp_path))
  from tinyhybrid.helpers import diskcache, diskcache_clear, diskcache_get, diskcache_put
  assert diskcache_get("t", "k") is None
  assert diskcache_put("t", "k", {"a": [1, 2]}) == {"a": [1, 2]}
  assert diskcache_get("t", "k") == {"a": [1, 2]} and diskcache_get("t", {"key": "k", "n": 1}) is None
  diskcache_put("t", {"key": "k", "n": 1}, b"raw", prepickled=False)
  assert diskcache_get("t", {"key": "k", "n": 1}) == b"raw"
  diskcache_put("t", 5, pickle.dumps(7), prepickled=True)
  assert diskcache_get("t", 5) == 7
  calls = []

  @diskcache
  def square(x):
    calls.append(x)
    return x * x
  assert square(3) == 9 and square(3) == 9 and calls == [3]
  diskcache_clear()
  assert diskcache_get("t", "k") is None


def test_function_names():
  import tinyhybrid
  from tinyhybrid.function import _function, function
  from tinyhybrid.uop.ops import ParamArg
  assert tinyhybrid.function is function and _function.depth == 0
  p = UOp.param(2, tinyhybrid.dtypes.half, (3, 4), "CPU", name="w")
  assert isinstance(p.arg, ParamArg) and (p.arg.slot, p.shape, p.device, p.dtype) == (2, (3, 4), "CPU", tinyhybrid.dtypes.half)
  sharded = UOp.param(0, tinyhybrid.dtypes.float, (4, 6), ("CPU:0", "CPU:1"), axis=1)
  assert sharded.shape == (4, 6) and sharded.device == ("CPU", "CPU:1") and sharded.axis == 1


def test_test_helpers_names_have_our_meaning():
  """What tinygrad's test/helpers.py imports (to_program, full_rewrite_to_sink, line_rewrite, pm_linearize_cleanups,
  linearize, compile_linear, KernelInfo, helpers.Target) and what its checks read (a plan's calls, a capture's kernels)."""
  import numpy as np
  from tinyhybrid import Device, Tensor, TinyJit, dtypes
  from tinyhybrid.codegen import full_rewrite_to_sink, line_rewrite, pm_linearize_cleanups, to_program
  from tinyhybrid.codegen.late.linearizer import linearize
  from tinyhybrid.device import Target as DeviceTarget
  from tinyhybrid.engine import realize
  from tinyhybrid.helpers import Target
  from tinyhybrid.schedule.kernelize import create_schedule
  from tinyhybrid.schedule.localize import localize
  from tinyhybrid.uop import Ops
  from tinyhybrid.uop.ops import KernelInfo
  assert Target is DeviceTarget and KernelInfo().opts_to_apply is None and KernelInfo(name="k").function_name == "k"
  a = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4)).realize()
  out = (a * 2).sum(1)
  p = realize.prepare("CPU", [out.uop])
  item, _ = localize(create_schedule(p.key, len(p.inputs)).items[0])
  prg = to_program(item, Device["CPU"].renderer)
  assert prg.name in prg.src and prg.uops[-1].op is Ops.SINK and prg.uops[-1] is prg.kernel.ast
  assert full_rewrite_to_sink(item, Device["CPU"].renderer, optimize=False).op is Ops.SINK
  lines = linearize(prg.kernel.ast)
  assert all(lines.index(s) < i for i, u in enumerate(lines) for s in u.src)  # every node after its sources
  assert line_rewrite(lines, pm_linearize_cleanups) == lines  # nothing to clean in a kernel graph
  with pytest.raises(RuntimeError, match="IF"): line_rewrite([UOp(Ops.IF, dtypes.void, (UOp.const(dtypes.bool, True),))], pm_linearize_cleanups)
  # a line rule's result replaces the line, and the lines after it read the replacement
  from tinyhybrid.uop.upat import PatternMatcher, UPat
  x = UOp.variable("lr_x", 0, 9)
  neg = UOp(Ops.NEG, x.dtype, (x,))
  to_mul = PatternMatcher([(UPat(Ops.NEG, src=(UPat.var("y"),)), lambda y: y * -1)])
  got = line_rewrite([x, neg, neg + 1], to_mul)
  assert got[1] is x * -1 and got[2].src[0] is x * -1
  # a plan's calls are its kernels (src[0] a SINK), compile_linear gives the plan back compiled
  linear, _ = out.linear_with_vars()
  assert realize.compile_linear(linear) is linear and [c.src[0].op for c in linear.src] == [Ops.SINK] and linear.src[0].device == "CPU"
  @TinyJit
  def f(x: Tensor) -> Tensor: return (x + 1).sum()
  for _ in range(3): f(Tensor.ones(4).contiguous().realize())
  assert len(f.captured.linear.src) == 1 and f.captured.linear.src[0].src[0].op is Ops.SINK


def test_invalid_and_half_conversions():
  from tinyhybrid.dtype import Invalid, InvalidType, dtypes, float_to_bf16, float_to_fp16
  assert InvalidType() is Invalid and pickle.loads(pickle.dumps(Invalid)) is Invalid and dtypes.from_py(Invalid) is dtypes.bool
  for v in (1.1, 65504.0, 65519.0, 1e-8, -3.14159, 6.1e-5, math.inf):
    assert float_to_fp16(v) == torch.tensor(v, dtype=torch.float64).half().item(), v
  assert float_to_fp16(65520.0) == math.inf and float_to_fp16(-1e6) == -math.inf and math.isnan(float_to_fp16(math.nan))
  for v in (1.1, -2.5e-3, 1e38, 3.4e38, -math.inf):
    assert float_to_bf16(v) == torch.tensor(v, dtype=torch.float32).bfloat16().item(), v


def test_schedule_cache_at_tinygrads_path():
  from tinyhybrid import Tensor, Variable
  from tinyhybrid.engine import realize
  from tinyhybrid.schedule import schedule_cache
  assert realize.schedule_cache is schedule_cache
  schedule_cache.clear()
  v = Variable("v", 1, 100)
  x = Tensor.ones(10).contiguous().realize()
  assert (x + Tensor(v.bind(5))).sum().item() == 60.0
  n = len(schedule_cache)
  assert n > 0 and (x + Tensor(v.bind(10))).sum().item() == 110.0 and len(schedule_cache) == n  # one plan for every value
