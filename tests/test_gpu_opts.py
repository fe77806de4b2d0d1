"""GPU lowering (codegen/gpu.py and the GPU actions of codegen/opt.py) on the OpenCL device: the numbers of kernels
under the default plan, under each action alone and after the default plan, against NumPy/torch (the kernels of
test_kernel_opts.py); the grid within the device's limits; actions that do not apply."""
import os
from dataclasses import replace

import numpy as np
import pytest

from tinyhybrid import Device, Tensor, Variable
from tinyhybrid.codegen.gpu import gpu_optimizations
from tinyhybrid.codegen.opt import KernelOptError, Opt, OptOps, apply_opts
from tinyhybrid.codegen.search import actions, finalize
from tinyhybrid.device import Buffer
from tinyhybrid.runtime import ops_cl

if not ops_cl.available():
  if os.getenv("CI"): raise RuntimeError(ops_cl.why_unavailable())
  pytest.skip(f"no OpenCL device: {ops_cl.why_unavailable()}", allow_module_level=True)

from test_kernel_opts import CASES, _f, _tol, kernel_of  # noqa: E402 (the kernels, built the same way)


def run_plan(t: Tensor, opts, ren=None) -> np.ndarray:
  """t computed on CL by its kernel with exactly these opts (its inputs copied to the device)."""
  k, inputs = kernel_of(t)
  dev = Device["CL"]
  fk = finalize(k, opts, ren or dev.renderer)
  assert fk.launch is not None and all(len(d) == 3 for d in fk.launch)
  prg = dev.compile(fk.name, dev.renderer.render(fk))
  bufs = {i: Buffer("CL", b.size, b.dtype, initial=b.numpy()) for i, b in enumerate(inputs)}
  out = bufs[k.buffers[0].index] = Buffer("CL", k.buffers[0].size, k.buffers[0].dtype)
  prg.call([bufs[b.index].address for b in k.buffers] + [v.arg[1] for v in k.vars], fk.launch)
  return out.numpy().reshape(t.shape)


def _ren(): return Device["CL"].renderer


@pytest.mark.parametrize("name", list(CASES))
def test_default_plan(name):
  t, ref = CASES[name]()
  k, _ = kernel_of(t)
  np.testing.assert_allclose(run_plan(t, gpu_optimizations(k, _ren())), ref, **_tol(name))


def _sample(plans):
  """One plan of each kind of last action (compiling every one would take minutes)."""
  seen = {}
  for p in plans: seen.setdefault(p[-1].op, p)
  return list(seen.values())


@pytest.mark.parametrize("name", list(CASES))
def test_each_action(name):
  t, ref = CASES[name]()
  k, _ = kernel_of(t)
  ren = _ren()
  base = tuple(gpu_optimizations(k, ren))
  plans = _sample([(a,) for a in actions(k.ast, ren)]) + _sample([base + (a,) for a in actions(apply_opts(k.ast, base, ren), ren)])
  ran = 0
  for plan in plans:
    try: got = run_plan(t, plan)
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
def test_grouped_matmuls(plan):
  a, b = _f(32, 64), _f(64, 48)
  np.testing.assert_allclose(run_plan(Tensor(a).realize() @ Tensor(b).realize(), plan), a @ b, rtol=1e-4, atol=1e-4)


def test_more_output_loops_than_grid_dimensions():
  x = _f(2, 3, 4, 5, 6)
  t = Tensor(x).realize().permute(4, 3, 2, 1, 0) * 2
  k, _ = kernel_of(t)
  fk = finalize(k, (), _ren())
  assert fk.launch[0] != (1, 1, 1)
  np.testing.assert_allclose(run_plan(t, ()), x.transpose(4, 3, 2, 1, 0) * 2)


def test_variable_length_loops_stay_loops():
  x = _f(10, 24)
  v = Variable("n", 1, 10)
  for n in (3, 10):
    np.testing.assert_allclose(Tensor(x, device="CL")[:v.bind(n)].sum(axis=0).numpy(), x[:n].sum(0), rtol=1e-5, atol=1e-5)


def test_opts_that_do_not_apply():
  t, _ = CASES["matmul"]()  # 48x64 @ 64x80: loops 0 (48) and 2 (80), reduce 1 (64)
  k, _ = kernel_of(t)
  ren = _ren()
  for bad in [Opt(OptOps.THREAD, 0), Opt(OptOps.BLOCK, 1, 16), Opt(OptOps.GROUP, 1), Opt(OptOps.LOCAL, 1, 4), Opt(OptOps.GROUP, 0, 4),
              Opt(OptOps.LOCAL, 0, 7)]:
    with pytest.raises(KernelOptError): apply_opts(k.ast, [bad], ren)
  with pytest.raises(KernelOptError): apply_opts(k.ast, [Opt(OptOps.GROUP, 1, 4), Opt(OptOps.GROUPTOP, 1, 2)], ren)  # one group
  # GPU actions are not the CPU's
  with pytest.raises(KernelOptError): apply_opts(k.ast, [Opt(OptOps.LOCAL, 0, 4)])


def test_device_limits():
  """A work-group past the device's size, or a group's accumulators past its local memory, does not apply."""
  from tinyhybrid.renderer.opencl import OpenCLRenderer
  t, ref = CASES["matmul"]()
  k, _ = kernel_of(t)
  props = Device["CL"].props
  tiny = OpenCLRenderer(replace(props, max_work_group=8, local_mem=256))
  with pytest.raises(KernelOptError): apply_opts(k.ast, [Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.LOCAL, 2, 4)], tiny)
  with pytest.raises(KernelOptError): finalize(k, [Opt(OptOps.UPCAST, 2, 16), Opt(OptOps.GROUP, 1, 8)], tiny)  # 8 x 16 x 4 bytes
  np.testing.assert_allclose(run_plan(t, [Opt(OptOps.UPCAST, 2, 4), Opt(OptOps.GROUP, 1, 4)], tiny), ref, rtol=1e-4, atol=1e-4)
