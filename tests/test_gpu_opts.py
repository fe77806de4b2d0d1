"""GPU lowering (codegen/gpu.py and the GPU actions of codegen/opt.py) on the OpenCL device and on the PYTHON device
(which runs the same lowering with NumPy, checking every address): the numbers of kernels under the default plan,
under each action alone and after the default plan, against NumPy/torch (the kernels of test_kernel_opts.py); the grid
within the device's limits; actions that do not apply."""
import os
from collections import OrderedDict
from dataclasses import replace

import numpy as np
import pytest

from tinyhybrid import Device, Tensor, Variable
from tinyhybrid.codegen.gpu import gpu_optimizations
from tinyhybrid.codegen.kernel import KernelOptError, Opt, OptOps
from tinyhybrid.codegen.opt import apply_opts
from tinyhybrid.codegen import finalize
from tinyhybrid.codegen.search import actions
from tinyhybrid.device import Buffer
from tinyhybrid.runtime import ops_cl

from test_kernel_opts import CASES, _f, _tol, kernel_of  # noqa: E402 (the kernels, built the same way)


# an OpenCL device's limits, to plan for where the PYTHON device runs the kernels
CL_LIKE = dict(name="an OpenCL device", ident="", is_cpu=False, compute_units=8, max_work_group=256, max_local=(256, 256, 256),
               local_mem=32768, max_alloc=1 << 30, extensions=frozenset({"cl_khr_fp16"}))


@pytest.fixture(params=["CL", "PYTHON"], autouse=True)
def dev(request) -> str:
  if request.param == "CL" and not ops_cl.available():
    if os.getenv("CI"): raise RuntimeError(ops_cl.why_unavailable())
    pytest.skip(f"no OpenCL device: {ops_cl.why_unavailable()}")
  return request.param


def run_plan(t: Tensor, opts, dev: str, ren=None) -> np.ndarray:
  """t computed on dev by its kernel with exactly these opts, planned for ren's limits (the device's by default; its
  inputs copied to the device)."""
  k, inputs = kernel_of(t)
  device = Device[dev]
  fk = finalize(k, opts, ren or device.renderer)
  assert fk.launch is not None and all(len(d) == 3 for d in fk.launch)
  prg = device.compile(fk.name, device.renderer.render(fk))
  bufs = {i: Buffer(dev, b.size, b.dtype, initial=b.numpy()) for i, b in enumerate(inputs)}
  out = bufs[k.buffers[0].index] = Buffer(dev, k.buffers[0].size, k.buffers[0].dtype)
  prg.call([bufs[b.index].address for b in k.buffers] + [v.arg[1] for v in k.vars], fk.launch)
  return out.numpy().reshape(t.shape)


def _ren(dev: str): return Device[dev].renderer


@pytest.mark.parametrize("name", list(CASES))
def test_default_plan(name, dev):
  t, ref = CASES[name]()
  k, _ = kernel_of(t)
  np.testing.assert_allclose(run_plan(t, gpu_optimizations(k, _ren(dev)), dev), ref, **_tol(name))


def _sample(plans):
  """One plan of each kind of last action (compiling every one would take minutes)."""
  seen = {}
  for p in plans: seen.setdefault(p[-1].op, p)
  return list(seen.values())


@pytest.mark.parametrize("name", list(CASES))
def test_each_action(name, dev):
  t, ref = CASES[name]()
  k, _ = kernel_of(t)
  ren = _ren(dev)
  base = tuple(gpu_optimizations(k, ren))
  plans = _sample([(a,) for a in actions(k.ast, ren)]) + _sample([base + (a,) for a in actions(apply_opts(k.ast, base, ren), ren)])
  ran = 0
  for plan in plans:
    try: got = run_plan(t, plan, dev)
    except KernelOptError: continue
    np.testing.assert_allclose(got, ref, **_tol(name), err_msg=f"plan {plan}")
    ran += 1
  assert ran > 0 or not plans


@pytest.mark.parametrize("plan", [
  [Opt(OptOps.GROUP, 1, 16), Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.LOCAL, 2, 2)],     # a group's accumulators at 3-D places
  [Opt(OptOps.UPCAST, 2, 16), Opt(OptOps.GROUPTOP, 1, 8), Opt(OptOps.LOCAL, 0, 2)],  # vector accumulators, blocks of K
  [Opt(OptOps.UNROLL, 1, 4), Opt(OptOps.GROUP, 1, 4), Opt(OptOps.UPCAST, 0, 4)],
  [Opt(OptOps.LOCAL, 2, 16), Opt(OptOps.LOCAL, 0, 16)],
  [Opt(OptOps.SWAP, 0, 2), Opt(OptOps.LOCAL, 0, 8), Opt(OptOps.GROUP, 1, 2)],
])
def test_grouped_matmuls(plan, dev):
  a, b = _f(32, 64), _f(64, 48)
  np.testing.assert_allclose(run_plan(Tensor(a).realize() @ Tensor(b).realize(), plan, dev), a @ b, rtol=1e-4, atol=1e-4)


def test_more_output_loops_than_grid_dimensions(dev):
  x = _f(2, 3, 4, 5, 6)
  t = Tensor(x).realize().permute(4, 3, 2, 1, 0) * 2
  k, _ = kernel_of(t)
  fk = finalize(k, (), _ren(dev))
  # the outer loops joined into one dimension: one work-group per output
  assert len(fk.launch[0]) == 3 and np.prod(fk.launch[0]) == x.size and fk.launch[0][2] > 1 and fk.launch[1] == (1, 1, 1), fk.launch
  np.testing.assert_allclose(run_plan(t, (), dev), x.transpose(4, 3, 2, 1, 0) * 2)


def test_variable_length_loops_stay_loops(dev):
  x = _f(10, 24)
  v = Variable("n", 1, 10)
  for n in (3, 10):
    np.testing.assert_allclose(Tensor(x, device=dev)[:v.bind(n)].sum(axis=0).numpy(), x[:n].sum(0), rtol=1e-5, atol=1e-5)


def test_opts_that_do_not_apply(dev):
  t, _ = CASES["matmul"]()  # 48x64 @ 64x80: loops 0 (48) and 2 (80), reduce 1 (64)
  k, _ = kernel_of(t)
  ren = _ren(dev)
  for bad in [Opt(OptOps.THREAD, 0), Opt(OptOps.BLOCK, 1, 16), Opt(OptOps.GROUP, 1), Opt(OptOps.LOCAL, 1, 4), Opt(OptOps.GROUP, 0, 4),
              Opt(OptOps.LOCAL, 0, 7)]:
    with pytest.raises(KernelOptError): apply_opts(k.ast, [bad], ren)
  with pytest.raises(KernelOptError): apply_opts(k.ast, [Opt(OptOps.GROUP, 1, 4), Opt(OptOps.GROUPTOP, 1, 2)], ren)  # one group
  # GPU actions are not the CPU's
  with pytest.raises(KernelOptError): apply_opts(k.ast, [Opt(OptOps.LOCAL, 0, 4)])


def test_device_limits(dev):
  """A work-group past the device's size, or a group's accumulators past its local memory, does not apply; the PYTHON
  device runs a kernel planned for another device's limits."""
  from tinyhybrid.renderer.opencl import OpenCLRenderer
  from tinyhybrid.renderer.opencl import CLProperties
  t, ref = CASES["matmul"]()
  k, _ = kernel_of(t)
  props = Device["CL"].props if dev == "CL" else CLProperties(**CL_LIKE)
  tiny = OpenCLRenderer(replace(props, max_work_group=8, local_mem=256))
  with pytest.raises(KernelOptError): apply_opts(k.ast, [Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.LOCAL, 2, 4)], tiny)
  with pytest.raises(KernelOptError): finalize(k, [Opt(OptOps.UPCAST, 2, 16), Opt(OptOps.GROUP, 1, 8)], tiny)  # 8 x 16 x 4 bytes
  np.testing.assert_allclose(run_plan(t, [Opt(OptOps.UPCAST, 2, 4), Opt(OptOps.GROUP, 1, 4)], dev, tiny), ref, rtol=1e-4, atol=1e-4)


def test_local_limits_per_dimension(dev):
  """Each local dimension has its own limit (dimension 0 the innermost output loop): a group of 16 along the output's
  rows fits a device whose other dimensions take 2, and 4 along the outer loop, dimension 1, does not."""
  from tinyhybrid.renderer.opencl import CLProperties, OpenCLRenderer
  t, ref = CASES["matmul"]()  # (48, 64) @ (64, 80): axis 0 the 48 rows, axis 2 the 80 columns
  k, _ = kernel_of(t)
  props = Device["CL"].props if dev == "CL" else CLProperties(**CL_LIKE)
  narrow = OpenCLRenderer(replace(props, max_work_group=64, max_local=(16, 2, 2)))
  with pytest.raises(KernelOptError, match="past the device's limits"): apply_opts(k.ast, [Opt(OptOps.LOCAL, 2, 16), Opt(OptOps.LOCAL, 0, 4)], narrow)
  np.testing.assert_allclose(run_plan(t, [Opt(OptOps.LOCAL, 2, 16), Opt(OptOps.LOCAL, 0, 2)], dev, narrow), ref, rtol=1e-4, atol=1e-4)


def test_group_size_follows_the_renderer(monkeypatch):
  """The default plan fills a work-group up to the renderer's group_items: four warps on an NVIDIA GPU (a
  multiprocessor holds 32 groups at most, so 16 work-items would leave three quarters of it idle)."""
  from tinyhybrid.engine import realize
  monkeypatch.setattr(realize, "schedule_cache", OrderedDict())
  monkeypatch.setattr(realize, "kernel_cache", OrderedDict())
  for target, items in (("NULL:CUDA:sm_90", 128), ("NULL:PTX:sm_90", 128)):
    realize.kernel_cache.clear()
    (Tensor.empty(1 << 20, device=target) + Tensor.empty(1 << 20, device=target)).realize()
    (lk, _), = realize.kernel_cache.values()
    assert int(np.prod(lk.launch[1])) == items, (target, lk.launch)


def test_planning_switches_take_effect_and_are_part_of_the_cache_key(monkeypatch):
  """tinygrad's NOLOCALS=1 plans without work-groups and SPLIT_REDUCEOP=0 keeps a long reduce in one kernel; a plan
  made under other values is not reused from the caches."""
  from tinyhybrid.engine import realize
  from tinyhybrid.helpers import Context
  monkeypatch.setattr(realize, "schedule_cache", OrderedDict())
  monkeypatch.setattr(realize, "kernel_cache", OrderedDict())
  dev = "NULL:CUDA:sm_90"
  a = Tensor.empty(1 << 20, device=dev).realize()
  def launches() -> list:
    before = set(realize.kernel_cache)
    (a + 1).sum().realize()
    return [lk.launch for key, (lk, _) in realize.kernel_cache.items() if key not in before]
  assert len(launches()) == 2  # split in two: a GPU spreads a long reduce over its work-groups
  with Context(SPLIT_REDUCEOP=0): assert len(launches()) == 1
  with Context(NOLOCALS=1, SPLIT_REDUCEOP=0): assert [lo for _, lo in launches()] == [(1, 1, 1)]

