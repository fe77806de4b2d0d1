"""Tensor.custom_kernel: kernels written by hand in tinygrad's kernel DSL (uop/kernel_dsl.py), lowered to this kernel
IR (codegen/custom.py) and run (engine/custom.py). Values against NumPy; accumulators, registers, several outputs,
gradients through grad_fxn, shards, TinyJit, and the forms refused with their reason."""
import numpy as np
import pytest
import torch

from tinyhybrid import GlobalCounters, Tensor, TinyJit, dtypes
from tinyhybrid.uop import AddrSpace, AxisType
from tinyhybrid.uop.ops import KernelInfo, UOp


def add_one(B: UOp, A: UOp) -> UOp:
  A, B = A.flatten(), B.flatten()
  i = UOp.range(A.numel(), 0)
  return B[i].store(A[i] + 1).end(i).sink(arg=KernelInfo(name=f"add_one_{A.numel()}"))


def eye(C: UOp) -> UOp:
  i, j = UOp.range(C.shape[0], 0), UOp.range(C.shape[1], 1)
  return C[i, j].store(i.eq(j).cast(C.dtype)).end(i, j).sink(arg=KernelInfo(name="eye"))


def gemm(C: UOp, A: UOp, B: UOp) -> UOp:
  i, j, k = UOp.range(C.shape[0], 0), UOp.range(C.shape[1], 1), UOp.range(A.shape[1], 2, axis_type=AxisType.REDUCE)
  C = C[i, j].set(0.0)
  C = C[i, j].set(C.after(k)[i, j] + A[i, k] * B[k, j], end=k)
  return C.end(i, j).sink(arg=KernelInfo(name="gemm", opts_to_apply=()))


def row_max_through_a_register(dest: UOp, src: UOp) -> UOp:
  g, r = UOp.range(src.shape[0], 0), UOp.range(src.shape[1], 1, AxisType.REDUCE)
  reg = UOp.placeholder((1,), dest.dtype, 0, addrspace=AddrSpace.REG)
  reg = reg.after(g)[0].set(-1e30)
  reg = reg[0].set(reg.after(r)[0].maximum(src[g, r]), end=r)
  return dest[g].set(reg[0], end=g).sink(arg=KernelInfo(name="row_max"))


def add_and_mul(C: UOp, D: UOp, A: UOp, B: UOp) -> UOp:
  C, D, A, B = C.flatten(), D.flatten(), A.flatten(), B.flatten()
  i = UOp.range(C.numel(), 0)
  return UOp.group(C[i].store(A[i] + B[i]), D[i].store(A[i] * B[i])).end(i).sink(arg=KernelInfo(name="addmul"))


def test_elementwise_and_index_kernels():
  x = Tensor.arange(12, dtype=dtypes.float32).reshape(3, 4).contiguous()
  out = Tensor.custom_kernel(Tensor.empty(3, 4), x, fxn=add_one)
  assert len(out) == 2 and out[0].tolist() == (np.arange(12).reshape(3, 4) + 1).tolist()
  np.testing.assert_equal(Tensor.empty(3, 5).custom_kernel(fxn=eye)[0].numpy(), np.eye(3, 5))


def test_an_element_loaded_explicitly_adds_in_place():
  # tinygrad's C[i].load(): the element's value, here an in-place add into a realized output
  def inplace_add(C: UOp, A: UOp) -> UOp:
    i = UOp.range(A.shape[0], 0)
    return C[i].store(C[i].load() + A[i]).end(i).sink(arg=KernelInfo(name="inplace_add"))
  c = Tensor([10., 20., 30., 40.]).contiguous().realize()
  out = Tensor.custom_kernel(c, Tensor([1., 2., 3., 4.]).contiguous(), fxn=inplace_add)[0]
  np.testing.assert_equal(out.numpy(), [11., 22., 33., 44.])
  with pytest.raises(TypeError, match="only an element"): UOp.range(4, 0).load()


def test_an_accumulator_in_memory_is_a_reduce():
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((5, 7)).astype(np.float32), rng.standard_normal((7, 3)).astype(np.float32)
  out = Tensor.custom_kernel(Tensor.empty(5, 3), Tensor(a), Tensor(b), fxn=gemm)[0]
  np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-5, atol=1e-5)


def test_a_register_accumulator_with_max():
  x = np.random.default_rng(1).standard_normal((6, 9)).astype(np.float32)
  np.testing.assert_equal(Tensor.custom_kernel(Tensor.empty(6), Tensor(x), fxn=row_max_through_a_register)[0].numpy(), x.max(1))


def test_several_outputs_and_a_tensor_given_twice():
  a, b = Tensor.full((4, 4), 3.0).contiguous(), Tensor.full((4, 4), 2.0).contiguous()
  c, d = Tensor.custom_kernel(Tensor.empty(4, 4), Tensor.empty(4, 4), a, b, fxn=add_and_mul)[:2]
  assert c.flatten().tolist() == [5.0] * 16 and d.flatten().tolist() == [6.0] * 16
  x = Tensor.arange(4).clone().realize()
  assert Tensor.custom_kernel(x, x, fxn=add_one)[0].tolist() == [1, 2, 3, 4]  # read and written in place


def test_stores_in_loops_one_after_another():
  # tinygrad's sink of two ended loops: each loop's stores are a kernel, run in order (the second reads the first's)
  def two_loops(C: UOp, D: UOp, A: UOp) -> UOp:
    i, j = UOp.range(A.shape[0], 0), UOp.range(D.shape[0], 1)
    return UOp.sink(C[i].store(A[i] * 2.0).end(i), D[j].store(C[j] + A[j + 1]).end(j), arg=KernelInfo(name="two_loops"))
  a = Tensor([1.0, 2.0, 3.0, 4.0]).contiguous()
  c, d = Tensor.custom_kernel(Tensor.empty(4), Tensor.empty(3), a, fxn=two_loops)[:2]
  assert c.tolist() == [2.0, 4.0, 6.0, 8.0] and d.tolist() == [4.0, 7.0, 10.0]


def test_gradient_through_grad_fxn():
  def backward(grad, call):
    _, a, b = call.src[1:]
    return None, grad @ b.T, a.T @ grad
  rng = np.random.default_rng(2)
  a_np, b_np = rng.standard_normal((4, 6)).astype(np.float32), rng.standard_normal((6, 5)).astype(np.float32)
  a, b = Tensor(a_np, requires_grad=True), Tensor(b_np, requires_grad=True)
  out = Tensor.custom_kernel(Tensor.empty(4, 5), a, b, fxn=gemm, grad_fxn=backward)[0]
  (out * out).sum().backward()
  g = 2 * (a_np @ b_np)
  np.testing.assert_allclose(a.grad.numpy(), g @ b_np.T, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(b.grad.numpy(), a_np.T @ g, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("used", ["c", "d", "both", "product"])
def test_a_kernel_with_several_outputs_gets_the_gradient_of_each_used_one(used):
  # tinygrad's convention: grad_fxn(g, call) when one output has a gradient, grad_fxn(*gs, call=call) for several
  seen: list[int] = []
  def backward(*gs, call):
    seen.append(len(gs))
    _, _, a, b = call.src[1:]
    if used in ("c", "d"):  # one gradient: the used output's
      return (None, None, gs[0] * (1 if used == "c" else b), gs[0] * (1 if used == "c" else a))
    gc, gd = gs
    return None, None, gc + gd * b, gc + gd * a
  def one(g, call): return backward(g, call=call)
  rng = np.random.default_rng(3)
  a_np, b_np = rng.standard_normal((4, 4)).astype(np.float32), rng.standard_normal((4, 4)).astype(np.float32)
  a, b = Tensor(a_np, requires_grad=True), Tensor(b_np, requires_grad=True)
  c, d = Tensor.custom_kernel(Tensor.empty(4, 4), Tensor.empty(4, 4), a, b, fxn=add_and_mul,
                              grad_fxn=one if used in ("c", "d") else backward)[:2]
  loss = {"c": c.sum(), "d": d.sum(), "both": c.sum() + d.sum(), "product": (c * d).sum()}[used]
  loss.backward()
  ta, tb = torch.tensor(a_np, requires_grad=True), torch.tensor(b_np, requires_grad=True)
  tc, td = ta + tb, ta * tb
  {"c": tc.sum(), "d": td.sum(), "both": tc.sum() + td.sum(), "product": (tc * td).sum()}[used].backward()
  np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(b.grad.numpy(), tb.grad.numpy(), rtol=1e-5, atol=1e-6)
  assert seen == [1 if used in ("c", "d") else 2]  # called once, with every used output's gradient


def test_sharded_tensors_run_per_device():
  devs = ("CPU:1", "CPU:2")
  a = Tensor.arange(16, dtype=dtypes.float32).reshape(4, 4).contiguous().shard(devs, axis=0)
  c = Tensor(Tensor.empty(2, 4, device=devs).uop.unshard(0), device=devs)
  out = Tensor.custom_kernel(c, a, fxn=add_one)[0]
  assert out.device == devs and out.numpy().tolist() == (np.arange(16).reshape(4, 4) + 1).tolist()


def test_tinyjit_captures_it():
  @TinyJit
  def step(x: Tensor) -> Tensor: return Tensor.custom_kernel(Tensor.empty(8), (x * 2).contiguous(), fxn=add_one)[0]
  for i in range(4):
    x = Tensor.full((8,), float(i)).contiguous().realize()
    GlobalCounters.reset()
    assert step(x).tolist() == [2.0 * i + 1] * 8
  assert step.captured is not None


def test_refused_forms_say_why():
  def nested(O: UOp, Q: UOp) -> UOp:  # a reduce inside a reduce
    i, j, k = UOp.range(2, 0), UOp.range(3, 1, AxisType.REDUCE), UOp.range(3, 2, AxisType.REDUCE)
    inner = UOp.placeholder((1,), Q.dtype, 0, addrspace=AddrSpace.REG)
    inner = inner.after(i, j)[0].set(0.0)
    inner = inner[0].set(inner.after(k)[0] + Q[j, k], end=k)
    acc = UOp.placeholder((1,), Q.dtype, 1, addrspace=AddrSpace.REG)
    acc = acc.after(i)[0].set(0.0)
    acc = acc[0].set(acc.after(j)[0] + inner[0], end=j)
    return O[i].store(acc[0]).end(i).sink(arg=KernelInfo(name="nested"))
  with pytest.raises(ValueError, match="reduce inside another reduce"): Tensor.custom_kernel(Tensor.empty(2), Tensor.ones(3, 3), fxn=nested)
  def accumulate(update):
    def kernel(B: UOp, A: UOp) -> UOp:
      k = UOp.range(4, 0, AxisType.REDUCE)
      B = B[0].set(1.0)
      return B[0].set(update(B.after(k)[0], A[k]), end=k).sink(arg=KernelInfo())
    return kernel
  x = Tensor([1.0, 2.0, 3.0, 4.0])
  assert Tensor.custom_kernel(Tensor.empty(1), x, fxn=accumulate(lambda acc, a: acc - a))[0].item() == -9.0  # acc + (-a)
  with pytest.raises(ValueError, match=r"acc \+ x, acc \* x or max"):
    Tensor.custom_kernel(Tensor.empty(1), x, fxn=accumulate(lambda acc, a: acc * 0.5 + a))
  with pytest.raises(TypeError, match="cannot be indexed"): (UOp.range(4, 0) + 1)[0]
  with pytest.raises(TypeError, match="must return the kernel's SINK"): Tensor.custom_kernel(Tensor.empty(2), fxn=lambda a: None)
  assert Tensor.custom_kernel(Tensor.ones(2).contiguous(), fxn=lambda a: UOp.sink(arg=KernelInfo()))[0].tolist() == [1.0, 1.0]  # stores nothing


def test_inside_a_function_its_output_is_computed_from_the_inputs():
  from tinyhybrid import function
  @function
  def run(a: Tensor) -> Tensor:
    view = a.reshape(4, 8).T
    return Tensor.custom_kernel(Tensor.invalids(*view.shape, dtype=view.dtype, device=a.device), view, fxn=add_one)[0]
  x = Tensor.arange(32).clone().realize()
  assert run(x).tolist() == (np.arange(32).reshape(4, 8).T + 1).tolist()
  weight = Tensor.arange(4).clone().realize()
  @function
  def reads_state(a: Tensor) -> Tensor: return Tensor.custom_kernel(Tensor.empty(4, dtype=dtypes.int32), a + weight, fxn=add_one)[0]
  with pytest.raises(RuntimeError, match="implicit"): reads_state(Tensor.ones(4, dtype=dtypes.int32).contiguous().realize())


def test_a_kernel_info_beam_width_runs_a_beam_search(monkeypatch, tmp_path):
  """KernelInfo(beam=N) on a custom kernel's SINK (or engine.realize.pm_beam) has a beam search of width N choose its
  optimizations, as BEAM=N does for every kernel."""
  from tinyhybrid.codegen import search
  from tinyhybrid.engine.realize import pm_beam
  from tinyhybrid.uop.upat import graph_rewrite
  monkeypatch.setenv("TINYHYBRID_CACHE", str(tmp_path))  # (a search of its own, not the cache's answer)
  widths, real = [], search.beam_search
  monkeypatch.setattr(search, "beam_search", lambda k, dev, width: widths.append(width) or real(k, dev, width))
  x = Tensor.arange(64, dtype=dtypes.float32).reshape(8, 8).contiguous()
  searched = lambda B, A: graph_rewrite(add_one(B, A), pm_beam, ctx=2)  # noqa: E731
  assert Tensor.custom_kernel(Tensor.empty(8, 8), x, fxn=searched)[0].numpy().tolist() == (np.arange(64).reshape(8, 8) + 1).tolist()
  assert widths == [2]
