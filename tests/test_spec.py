"""SPEC: the type rules checked at each pass boundary (src/cpp/ir/spec.cpp), on planted violations: each names the
pass, the stage, the op and the rule, and shows the smallest failing subgraph."""
import dataclasses

import numpy as np
import pytest

import tinyhybrid.engine.realize as realize
from tinyhybrid import Tensor, UOp, _core, codegen, dtypes
from tinyhybrid.helpers import Context
from tinyhybrid.uop import Ops
from tinyhybrid.uop.spec import spec_check, spec_check_linear

PARAM = UOp(Ops.PARAM, dtypes.float.ptr(16), (), 0)
INDEX = UOp(Ops.INDEX, dtypes.float, (PARAM, UOp.const(dtypes.weakint, 3)))
LOAD = UOp(Ops.LOAD, dtypes.float, (INDEX,))


def lowered_kernel(value: UOp) -> UOp:
  return UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (INDEX, value)),))


def test_movement_op_after_lowering():
  bad = UOp(Ops.RESHAPE, dtypes.float, (LOAD,), (1,))
  with pytest.raises(RuntimeError) as e: _core.spec_check(lowered_kernel(bad + 1.0), "lowered", 1, "lower")
  msg = str(e.value)
  assert msg.startswith("SPEC: lower (lowered): RESHAPE breaks rule 'tensor-graph ops are gone after lowering': the op itself\n"
                        "smallest failing subgraph:\nUOp(Ops.RESHAPE, dtypes.float, arg=(1,), src=(\n")
  # the subgraph is the failing node and its sources, not the users above it
  assert "Ops.LOAD" in msg and "Ops.STORE" not in msg and "Ops.ADD" not in msg


def test_kernel_op_in_tensor_graph():
  buf = UOp(Ops.BUFFER, dtypes.float, (), 0)
  root = UOp(Ops.SINK, dtypes.void, (LOAD + buf,))
  with pytest.raises(RuntimeError, match=r"^SPEC: normalize \(tensor graph\): PARAM breaks rule 'kernel ops appear only once a "
                                         r"kernel is lowered': the op itself\n"):
    _core.spec_check(root, "tensor graph", 1, "normalize")


def test_smallest_failing_subgraph_is_the_deepest():
  # two violations, one under the other: the one whose sources all pass is reported
  inner = UOp(Ops.RESHAPE, dtypes.float, (LOAD,), (1,))
  outer = UOp(Ops.EXPAND, dtypes.float, (inner,), (4,))
  with pytest.raises(RuntimeError, match=r"RESHAPE breaks rule") as e: _core.spec_check(lowered_kernel(outer), "lowered", 1, "lower")
  assert "EXPAND" not in str(e.value)


def test_level_two_is_stricter():
  load_param = UOp(Ops.LOAD, dtypes.float, (PARAM,))  # a load that skips its INDEX
  _core.spec_check(lowered_kernel(load_param), "lowered", 1, "lower")
  with pytest.raises(RuntimeError, match=r"^SPEC: lower \(lowered\): LOAD breaks rule 'a LOAD reads through an INDEX': source 0 is PARAM\n"):
    _core.spec_check(lowered_kernel(load_param), "lowered", 2, "lower")
  wide_gep = UOp(Ops.GEP, dtypes.float, (UOp(Ops.VECTORIZE, dtypes.float.vec(2), (LOAD, LOAD)),), (2,))
  _core.spec_check(lowered_kernel(wide_gep), "lowered", 1, "lower")
  with pytest.raises(RuntimeError, match=r"GEP breaks rule 'a GEP's arg picks one existing lane per result lane': lane 2 of a "
                                         r"source with 2 lanes"):
    _core.spec_check(lowered_kernel(wide_gep), "lowered", 2, "lower")


def test_vectorize_lanes_and_index_pointer():
  short = UOp(Ops.VECTORIZE, dtypes.float.vec(4), (LOAD, LOAD))
  with pytest.raises(RuntimeError, match=r"VECTORIZE breaks rule 'a VECTORIZE has one source per lane': 2 sources for dtypes.float.vec\(4\)"):
    _core.spec_check(short, "lowered", 1, "expand")
  no_ptr = UOp(Ops.INDEX, dtypes.float, (LOAD, UOp.const(dtypes.weakint, 0)))
  with pytest.raises(RuntimeError, match=r"INDEX breaks rule 'an INDEX indexes a pointer': source 0 has dtype dtypes.float\n"):
    _core.spec_check(no_ptr, "lowered", 1, "lower")


def test_linear_order():
  with pytest.raises(RuntimeError, match=r"^SPEC: linearize \(linearized\): LOAD breaks rule 'a linearized program lists sources "
                                         r"before their users': source 0 \(INDEX\) comes later or not at all\n"):
    _core.spec_check_linear([PARAM, LOAD, INDEX], 1, "linearize")
  _core.spec_check_linear(list(lowered_kernel(LOAD).toposort()), 2, "linearize")


def test_bad_arguments():
  with pytest.raises(ValueError, match="no stage 'scheduled'"): _core.spec_check(LOAD, "scheduled", 1, "x")
  with pytest.raises(TypeError, match="root must be a UOp"): _core.spec_check(3, "lowered", 1, "x")
  with pytest.raises(TypeError, match=r"program\[1\] must be a UOp"): _core.spec_check_linear([LOAD, None], 1, "x")


def test_spec_off_checks_nothing():
  bad = lowered_kernel(UOp(Ops.RESHAPE, dtypes.float, (LOAD,), (1,)))
  with Context(SPEC=0):
    spec_check(bad, "lowered", "lower")
    spec_check_linear([LOAD], "linearize")
  with Context(SPEC=1), pytest.raises(RuntimeError, match="RESHAPE breaks rule"): spec_check(bad, "lowered", "lower")


def test_pipeline_catches_a_broken_pass(monkeypatch):
  """A lowering (with its optimizer) that leaves a movement op in the kernel is stopped at the pass boundary, naming
  the pass."""
  real_optimize = codegen.optimize
  def broken_optimize(k, ren=None, choose=None):
    k = real_optimize(k, ren, choose)
    load = next(u for u in k.ast.toposort() if u.op is Ops.LOAD)
    return dataclasses.replace(k, ast=k.ast.substitute({load: UOp(Ops.RESHAPE, load.dtype, (load,), (1,))}))
  monkeypatch.setattr(codegen, "optimize", broken_optimize)
  for cache in ("schedule_cache", "kernel_cache"): monkeypatch.setattr(realize, cache, type(getattr(realize, cache))())
  a = np.arange(6, dtype=np.float32)
  with Context(SPEC=1), pytest.raises(RuntimeError, match=r"^SPEC: lower \(lowered\): RESHAPE breaks rule 'tensor-graph ops are gone"):
    (Tensor(a) * 7.25 + 0.5).realize()


def test_pipeline_passes_under_spec2():
  a, b = np.arange(12, dtype=np.float32).reshape(3, 4), np.linspace(-1, 1, 4, dtype=np.float32)
  with Context(SPEC=2):
    out = ((Tensor(a) * Tensor(b)).sum(1).exp() + Tensor(a)[:, 1:3].max(1)).numpy()
  np.testing.assert_allclose(out, np.exp((a * b).sum(1)) + a[:, 1:3].max(1), rtol=1e-6)
