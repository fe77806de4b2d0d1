"""Pickling: tensors with their contents (what multiprocessing and a saved object need), buffers out of band with
protocol 5, views as their base and offset, rule sets with their lambdas, and tinygrad's helpers for it."""
import os
import pickle
import types

import numpy as np
import pytest

from tinyhybrid import Device, GlobalCounters, Tensor, Variable, dtypes
from tinyhybrid.engine.realize import pm_beam
from tinyhybrid.uop.ops import KernelInfo, UOp, deconstruct_function
from tinyhybrid.uop.symbolic import sym
from tinyhybrid.uop.upat import PatternMatcher, UPat, graph_rewrite
from tinyhybrid.uop import Ops


def test_a_realized_tensor_comes_back_with_its_contents_and_no_kernel():
  t = Tensor.rand(10, 10).realize()
  want = t.numpy()
  blob = pickle.dumps(t)
  del t
  GlobalCounters.reset()
  t2 = pickle.loads(blob)
  assert t2.uop.is_realized
  np.testing.assert_equal(t2.numpy(), want)
  assert GlobalCounters.kernel_count == 0


def test_lazy_and_symbolic_tensors_pickle_as_graphs():
  v = Variable("i", 1, 20).bind(10)
  out = (Tensor.ones(10, v).contiguous() + Tensor.ones(10, v).contiguous()).sum(1)
  np.testing.assert_equal(pickle.loads(pickle.dumps(out)).numpy(), np.full(10, 20.0))
  a = Tensor(np.array([1, 2, 3, 4.0]), dtype=dtypes.float32) * 3
  np.testing.assert_equal(pickle.loads(pickle.dumps(a)).numpy(), [3, 6, 9, 12])


def test_a_view_pickles_as_its_base_and_offset():
  base = Tensor.arange(10).clone().realize().uop.buffer
  view = base.view(2, dtypes.int32, 12)
  base2, view2 = pickle.loads(pickle.dumps((base, view)))
  assert view2.base is base2 and view2.offset == 12 and view2.numpy().tolist() == [3, 4]
  base2.copyin(np.arange(10, 20, dtype=np.int32))  # one memory, as before
  assert view2.numpy().tolist() == [13, 14]


def test_protocol_5_moves_the_contents_out_of_band():
  t = Tensor.arange(1000, dtype=dtypes.int32).realize()
  out_of_band: list[pickle.PickleBuffer] = []
  blob = pickle.dumps(t, protocol=5, buffer_callback=out_of_band.append)
  assert len(out_of_band) == 1 and out_of_band[0].raw().nbytes == 4000 and len(blob) < 1000
  np.testing.assert_equal(pickle.loads(blob, buffers=[bytearray(b.raw()) for b in out_of_band]).numpy(), np.arange(1000))
  with pytest.raises(pickle.UnpicklingError):  # the contents were not handed back
    pickle.loads(blob)


def test_an_unallocated_buffer_pickles_without_contents():
  u = Tensor.empty(4).uop
  assert not u.buffer.is_allocated()
  assert not pickle.loads(pickle.dumps(u)).buffer.is_allocated()


def test_rule_sets_pickle_with_their_lambdas():
  pm = PatternMatcher([(UPat.cvar("x"), lambda x: x * 2)])
  two = UOp.const(dtypes.int, 2)
  pm2 = pickle.loads(pickle.dumps(pm))
  assert pm2.rewrite(two) is pm.rewrite(two) and pm2.rewrite(two).key == pm.rewrite(two).key
  with pytest.raises(pickle.PicklingError, match="C\\+\\+ rules"):
    pickle.dumps(sym + pm)


def test_code_and_deconstructed_functions_pickle():
  double = lambda x: x * 2  # noqa: E731
  assert types.FunctionType(pickle.loads(pickle.dumps(double.__code__)), {})(2) == 4
  def nested(): return [[dtypes.int for _ in range(2)] for _ in range(2)]
  rebuilt = types.FunctionType(*pickle.loads(pickle.dumps(deconstruct_function(nested))))
  assert rebuilt() == nested()
  k = 3
  with pytest.raises(ValueError, match="closure"): deconstruct_function(lambda: k)


def test_keys_are_equal_for_equal_graphs_only():
  a, b = (Tensor.ones(3) + 2).uop, (Tensor.ones(3) + 3).uop
  assert pickle.loads(pickle.dumps(a)).key == a.key != b.key


def test_device_default_and_its_renderer():
  assert Device.default is Device[Device.DEFAULT]
  assert type(pickle.loads(pickle.dumps(Device.default.renderer))) is type(Device.default.renderer)


def test_pm_beam_sets_the_width_on_kernels_that_carry_a_kernel_info():
  sink = UOp(Ops.SINK, dtypes.void, (), KernelInfo(name="k"))
  assert graph_rewrite(sink, pm_beam, ctx=2).arg.beam == 2
  assert graph_rewrite(graph_rewrite(sink, pm_beam, ctx=2), pm_beam, ctx=4).arg.beam == 2  # a set width stays
  plain = UOp(Ops.SINK, dtypes.void, ())
  assert graph_rewrite(plain, pm_beam, ctx=2) is plain


def _captured_jit() -> bytes:
  from tinyhybrid import TinyJit
  @TinyJit
  def step(a: Tensor, b: Tensor) -> Tensor: return (a @ b).relu().sum(1) + 1
  for _ in range(3): step(Tensor.rand(8, 8), Tensor.rand(8, 8))
  return pickle.dumps(step)


def test_a_captured_jit_replays_after_pickling_here_and_in_another_process(tmp_path):
  import subprocess
  import sys
  blob = _captured_jit()
  a, b = np.random.default_rng(0).random((2, 8, 8), dtype=np.float32)
  want = np.maximum(a @ b, 0).sum(1) + 1
  np.testing.assert_allclose(pickle.loads(blob)(Tensor(a), Tensor(b)).numpy(), want, rtol=1e-5)
  (tmp_path / "jit.pkl").write_bytes(blob)
  np.save(tmp_path / "a.npy", a)
  np.save(tmp_path / "b.npy", b)
  code = (f"import pickle, numpy as np; from tinyhybrid import Tensor; d = {str(tmp_path)!r}; f = pickle.load(open(d + '/jit.pkl', 'rb'));"
          "np.save(d + '/out.npy', f(Tensor(np.load(d + '/a.npy')), Tensor(np.load(d + '/b.npy'))).numpy())")
  # the capture is the CPU's: the other process's tensors go there too, whatever this worker's environment says
  env = {**{k: v for k, v in os.environ.items() if k not in ("CL", "NULL", "PYTHON", "NV", "AMD", "CUDA")}, "DEV": "CPU"}
  done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
  assert done.returncode == 0, done.stderr[-3000:] + f"\nenvironment: { {k: v for k, v in os.environ.items() if k in ('DEV', 'CL', 'CPU')} }"
  np.testing.assert_allclose(np.load(tmp_path / "out.npy"), want, rtol=1e-5)


def test_an_unpickled_jit_without_a_capture_says_so():
  from tinyhybrid import TinyJit
  from tinyhybrid.engine.realize import JitError
  @TinyJit
  def step(a: Tensor) -> Tensor: return a + 1
  with pytest.raises(JitError, match="without a capture"): pickle.loads(pickle.dumps(step))(Tensor.ones(2))
  @TinyJit
  def noisy(a: Tensor) -> Tensor: return a + Tensor.rand(2)
  for _ in range(3): noisy(Tensor.ones(2).contiguous())
  with pytest.raises(pickle.PicklingError, match="random"): pickle.dumps(noisy)
