"""Random Tensor programs against torch: creation, elementwise, movement, reductions, indexing, matmul, conv,
setitem and autograd, chained on one value. Each program runs on tinyhybrid (with CHECK_OOB=1: every kernel it
makes is also proven in bounds) and on torch; values and gradients must agree. A failing program is shrunk by
hypothesis to a smallest one and printed step by step."""
from __future__ import annotations

import math
import os

import numpy as np
import torch
import torch.nn.functional as F
from fuzzlib import fuzz, long_mode
from hypothesis import given
from hypothesis import strategies as st

from tinyhybrid import Tensor
from tinyhybrid.helpers import Context

UNARY = ["neg", "relu", "tanh", "sigmoid", "abs", "square", "log1p_abs", "sqrt_abs", "trunc_cast", "recip_safe"]
BINARY = ["add", "sub", "mul", "maximum", "div_safe", "where_pos", "lt_float"]


def _shape_of_numel(n: int, draw) -> tuple[int, ...]:
  """A random shape (1 to 3 dims) holding n elements."""
  dims, rest = [], n
  for _ in range(draw(st.integers(0, 2))):
    divs = [d for d in range(1, rest + 1) if rest % d == 0]
    d = draw(st.sampled_from(divs))
    dims.append(d)
    rest //= d
  return tuple(dims + [rest])


@st.composite
def steps(draw, shape: tuple[int, ...], n: int):
  """n program steps starting from a value of `shape`, each valid for the shape the previous ones leave."""
  out = []
  for _ in range(n):
    nd, numel = len(shape), math.prod(shape)
    kinds = ["unary", "binary", "reshape", "reduce", "contiguous"]
    if nd >= 1: kinds += ["permute", "flip", "pad", "shrink", "slice", "gather", "setitem"]
    if nd >= 1 and numel <= 64: kinds.append("matmul")
    if any(s == 1 for s in shape): kinds.append("expand")
    if nd == 3 and shape[1] >= 2 and shape[2] >= 2: kinds.append("conv")
    kind = draw(st.sampled_from(kinds))
    if kind == "unary": step = (kind, draw(st.sampled_from(UNARY)))
    elif kind == "binary":
      # the other operand broadcasts: some of its dims are 1
      other = tuple(s if draw(st.booleans()) else 1 for s in shape)
      step = (kind, draw(st.sampled_from(BINARY)), other, draw(st.integers(0, 2**16)))
    elif kind == "reshape": step = (kind, _shape_of_numel(numel, draw))
    elif kind == "permute": step = (kind, tuple(draw(st.permutations(range(nd)))))
    elif kind == "flip": step = (kind, tuple(sorted(set(draw(st.lists(st.integers(0, nd - 1), min_size=1, max_size=nd))))))
    elif kind == "pad": step = (kind, tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape))
    elif kind == "shrink":
      arg = []
      for s in shape:
        b = draw(st.integers(0, s - 1))
        arg.append((b, draw(st.integers(b + 1, s))))
      step = (kind, tuple(arg))
    elif kind == "expand": step = (kind, tuple(draw(st.integers(1, 3)) if s == 1 else s for s in shape))
    elif kind == "reduce":
      axis = draw(st.one_of(st.none(), st.integers(0, nd - 1))) if nd else None
      step = (kind, draw(st.sampled_from(["sum", "max", "mean", "min"])), axis, draw(st.booleans()))
    elif kind == "slice":
      s0 = shape[0]
      a = draw(st.integers(0, s0 - 1))
      step = (kind, a, draw(st.integers(a + 1, s0)), draw(st.integers(1, 3)))
    elif kind == "gather": step = (kind, tuple(draw(st.lists(st.integers(-shape[0], shape[0] - 1), min_size=1, max_size=5))))
    elif kind == "setitem":
      s0 = shape[0]
      a = draw(st.integers(0, s0 - 1))
      step = (kind, a, draw(st.integers(a + 1, s0)), draw(st.one_of(st.floats(-4, 4, width=32), st.integers(0, 2**16))))
    elif kind == "matmul": step = (kind, draw(st.integers(1, 4)), draw(st.integers(0, 2**16)))
    elif kind == "conv":
      k = draw(st.integers(1, min(3, shape[1], shape[2])))
      step = (kind, draw(st.integers(1, 3)), k, draw(st.integers(1, 2)), draw(st.integers(0, 1)), draw(st.integers(0, 2**16)))
    else: step = (kind,)
    shape = _result_shape(shape, step)
    out.append(step)
    if math.prod(shape) == 0 or math.prod(shape) > 512: break
  return out


def _result_shape(shape: tuple[int, ...], step: tuple) -> tuple[int, ...]:
  return tuple(_torch_step(torch.zeros(shape), step).shape)


def _rand(shape: tuple[int, ...], seed: int) -> np.ndarray:
  return np.random.default_rng(seed).uniform(-3, 3, shape).astype(np.float32)


def _unary(x, name: str):
  if name == "neg": return -x
  if name == "relu": return x.relu()
  if name == "tanh": return x.tanh()
  if name == "sigmoid": return x.sigmoid()
  if name == "abs": return x.abs()
  if name == "square": return x * x
  if name == "log1p_abs": return (x.abs() + 1).log()
  if name == "sqrt_abs": return (x.abs() + 1).sqrt()
  if name == "recip_safe": return 1 / (x.abs() + 1)
  assert name == "trunc_cast"
  if isinstance(x, Tensor): return x.clip(-1000, 1000).cast("int32").cast("float32")
  return x.clip(-1000, 1000).to(torch.int32).to(torch.float32)


def _binary(x, y, name: str):
  if name == "add": return x + y
  if name == "sub": return x - y
  if name == "mul": return x * y
  if name == "maximum": return x.maximum(y)
  if name == "div_safe": return x / (y.abs() + 1)
  where = Tensor.where if isinstance(x, Tensor) else torch.where
  if name == "where_pos": return where(x > 0, x, y)
  assert name == "lt_float"
  return where(x < y, x * 0 + 1, x * 0)


def _torch_step(x: torch.Tensor, step: tuple) -> torch.Tensor:
  kind = step[0]
  if kind == "unary": return _unary(x, step[1])
  if kind == "binary": return _binary(x, torch.from_numpy(_rand(step[2], step[3])), step[1])
  if kind == "reshape": return x.reshape(step[1])
  if kind == "permute": return x.permute(step[1])
  if kind == "flip": return x.flip(step[1])
  if kind == "pad": return F.pad(x, [p for pair in reversed(step[1]) for p in pair])
  if kind == "shrink": return x[tuple(slice(b, e) for b, e in step[1])]
  if kind == "expand": return x.expand(step[1])
  if kind == "reduce":
    _, op, axis, keep = step
    fn = {"sum": torch.sum, "max": torch.amax, "min": torch.amin, "mean": torch.mean}[op]
    return fn(x, dim=tuple(range(x.ndim)) if axis is None else axis, keepdim=keep) if x.ndim else fn(x)
  if kind == "slice": return x[step[1]:step[2]:step[3]]
  if kind == "gather": return x[torch.tensor(step[1])]
  if kind == "setitem":
    x = x.clone()
    x[step[1]:step[2]] = step[3] if isinstance(step[3], float) else torch.from_numpy(_rand(x[step[1]:step[2]].shape, step[3]))
    return x
  if kind == "matmul": return x @ torch.from_numpy(_rand((x.shape[-1], step[1]), step[2]))
  if kind == "conv":
    _, cout, k, stride, pad, seed = step
    w = torch.from_numpy(_rand((cout, x.shape[0], k, k), seed))
    return F.conv2d(x.unsqueeze(0), w, stride=stride, padding=pad).squeeze(0)
  assert kind == "contiguous"
  return x.contiguous()


def _tiny_step(x: Tensor, step: tuple) -> Tensor:
  kind = step[0]
  if kind == "unary": return _unary(x, step[1])
  if kind == "binary": return _binary(x, Tensor(_rand(step[2], step[3])), step[1])
  if kind == "reshape": return x.reshape(step[1])
  if kind == "permute": return x.permute(step[1])
  if kind == "flip": return x.flip(step[1])
  if kind == "pad": return x.pad(step[1])
  if kind == "shrink": return x.shrink(step[1])
  if kind == "expand": return x.expand(step[1])
  if kind == "reduce":
    _, op, axis, keep = step
    return getattr(x, op)(axis, keepdim=keep)
  if kind == "slice": return x[step[1]:step[2]:step[3]]
  if kind == "gather": return x[Tensor(list(step[1]))]
  if kind == "setitem":
    x = x.contiguous()
    x[step[1]:step[2]] = step[3] if isinstance(step[3], float) else Tensor(_rand(tuple(x[step[1]:step[2]].shape), step[3]))
    return x
  if kind == "matmul": return x @ Tensor(_rand((x.shape[-1], step[1]), step[2]))
  if kind == "conv":
    _, cout, k, stride, pad, seed = step
    w = Tensor(_rand((cout, x.shape[0], k, k), seed))
    return x.unsqueeze(0).conv2d(w, stride=stride, padding=pad).squeeze(0)
  assert kind == "contiguous"
  return x.contiguous()


@st.composite
def programs(draw):
  shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
  seed = draw(st.integers(0, 2**16))
  return shape, seed, draw(steps(shape, draw(st.integers(1, 6)))), draw(st.booleans())


def _close(ours: np.ndarray, ref: np.ndarray, what: str) -> None:
  assert ours.shape == ref.shape, f"{what}: shape {ours.shape}, torch {ref.shape}"
  scale = max(1.0, float(np.abs(ref).max()) if ref.size else 1.0)
  np.testing.assert_allclose(ours, ref, rtol=2e-4, atol=2e-5 * scale, err_msg=what)


class _Run:
  """One program on both frameworks: torch runs eagerly; ours is built lazily, to be realized with its batch."""
  def __init__(self, prog):
    self.shape, self.seed, self.program, grad = prog
    # setitem writes in place: torch takes no gradient through it the same way (a leaf's clone), so it runs without
    self.grad = grad and not any(s[0] == "setitem" for s in self.program)
    x0 = _rand(self.shape, self.seed)
    self.xt = torch.tensor(x0, requires_grad=self.grad)
    self.ref = self.xt
    for s in self.program: self.ref = _torch_step(self.ref, s)
    self.grad = self.grad and self.ref.requires_grad
    self.x = Tensor(x0, requires_grad=self.grad)
    self.out = self.x
    for s in self.program: self.out = _tiny_step(self.out, s)

  def loss(self) -> Tensor:
    w = _rand(tuple(self.ref.shape), self.seed + 1)
    (self.ref * torch.from_numpy(w)).sum().backward()
    return (self.out * Tensor(w)).sum()

  def check(self) -> None:
    _close(self.out.numpy(), self.ref.detach().numpy(), f"value of {self.program} on {self.shape}")
    if self.grad: _close(self.x.grad.numpy(), self.xt.grad.numpy(), f"gradient of {self.program} on {self.shape}")


def _run_batch(progs: list) -> None:
  """Values and gradients of the programs, realized together: one schedule and one compiler run serve the batch."""
  with Context(CHECK_OOB=1):
    runs = [_Run(p) for p in progs]
    Tensor.realize(*[r.out for r in runs])
    if grads := [r for r in runs if r.grad]:
      Tensor.stack(*[r.loss() for r in grads]).sum().backward()
      Tensor.realize(*[r.x.grad for r in grads])
    for r in runs: r.check()


# Compiling dominates a program's cost, so programs run in batches that share a compiler run. In the long mode a
# failing batch is then run program by program, so the error names the one at fault before hypothesis shrinks it.
BATCH = int(os.getenv("FUZZ_BATCH", "16"))


@fuzz(ci=6, long=100_000 // BATCH)
@given(st.lists(programs(), min_size=BATCH if long_mode() else 1, max_size=BATCH))
def test_tensor_programs(progs):
  try: _run_batch(progs)
  except Exception:
    for p in progs: _run_batch([p])
    raise
