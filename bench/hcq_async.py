#!/usr/bin/env python3
"""Asynchronous HCQ execution on the CPU device (issue 24's targets), each case beside tinygrad's same program in the
same run where tinygrad is installed. One JSON line per case.

  realize_return  (a @ b).realize() of a 2048x2048 fp32 matmul: the time realize() takes to return, as a fraction of
                  the whole matmul (realize + synchronize). Target: under 0.05.
  train_overlap   a jitted training step (a small MLP, Adam) with host work between steps (a batch made with NumPy),
                  the CPU device held to one worker so the host has the other core: time per step over 200 steps,
                  as a multiple of max(host alone, device alone). Target: at most 1.1 (it is their sum when the host
                  waits for each step).
  jit_replay      the host's cost of one TinyJit replay call (submit, no wait) of 1 and of 100 small kernels.
                  Targets: 100 kernels at most 0.1 us per kernel; 1 kernel no worse than 6 us.
  cpu4_overlap    four CPU:N devices, each an elementwise step over its own shard: aggregate GB/s against one
                  device doing all shards with every core, and whether the four queues' kernels overlap in time
                  (the PROFILE=1 timeline). Target: at least 0.9x.

  python bench/hcq_async.py [case ...]
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

CASES = ("realize_return", "train_overlap", "jit_replay", "cpu4_overlap")


def emit(case: str, **fields) -> None:
  print(json.dumps({"bench": "hcq_async", "case": case, **{k: (round(v, 4) if isinstance(v, float) else v) for k, v in fields.items()}}), flush=True)


def median(fn, n: int) -> float:
  ts = []
  for _ in range(n):
    st = time.perf_counter()
    fn()
    ts.append(time.perf_counter() - st)
  return statistics.median(ts)


def realize_return(fw: str) -> dict:
  """(return fraction, return us, whole us) for one framework."""
  if fw == "ours": from tinyhybrid import Device, Tensor
  else: from tinygrad import Device, Tensor
  a, b = Tensor.rand(2048, 2048).realize(), Tensor.rand(2048, 2048).realize()
  sync = Device[Device.DEFAULT].synchronize
  for _ in range(2): (a @ b).realize(), sync()
  ret, whole = [], []
  for _ in range(7):
    st = time.perf_counter()
    c = (a @ b).realize()
    t1 = time.perf_counter()
    sync()
    t2 = time.perf_counter()
    ret.append(t1 - st)
    whole.append(t2 - st)
    del c
  r, w = statistics.median(ret), statistics.median(whole)
  return {"fraction": r / w, "return_us": r * 1e6, "whole_us": w * 1e6}


def train_overlap(fw: str) -> dict:
  if fw == "ours":
    from tinyhybrid import Device, Tensor, TinyJit, nn
    from tinyhybrid.helpers import Context
  else:
    from tinygrad import Device, Tensor, TinyJit, nn
    from tinygrad.helpers import Context
  Tensor.manual_seed(0)
  rng = np.random.default_rng(0)
  data = rng.standard_normal((4096, 256)).astype(np.float32)
  labels = rng.integers(0, 10, 4096)

  class MLP:
    def __init__(self):
      self.l1, self.l2, self.l3 = nn.Linear(256, 512), nn.Linear(512, 512), nn.Linear(512, 10)
    def __call__(self, x): return self.l3(self.l2(self.l1(x).relu()).relu())

  model = MLP()
  opt = nn.optim.Adam(nn.state.get_parameters(model), lr=1e-3)

  @TinyJit
  def step(x, y):
    with Context(TRAINING=1):
      opt.zero_grad()
      loss = model(x).sparse_categorical_crossentropy(y).backward()
      opt.step()
    return loss.realize()

  def batch(k: int, reps: int) -> tuple[np.ndarray, np.ndarray]:
    """The host's work between steps: a shuffled, augmented, normalized batch (NumPy)."""
    idx = rng.permutation(4096)[:128]
    x = data[idx]
    for _ in range(reps): x = np.tanh(x * 1.01 + 0.01)
    return (x - x.mean(1, keepdims=True)) / (x.std(1, keepdims=True) + 1e-5), labels[idx].astype(np.int32)

  sync = Device[Device.DEFAULT].synchronize
  xb, yb = batch(0, 1)
  for _ in range(4): step(Tensor(xb), Tensor(yb))
  sync()
  n = 200

  def device_alone() -> float:
    st = time.perf_counter()
    for _ in range(n): step(Tensor(xb), Tensor(yb))
    sync()
    return (time.perf_counter() - st) / n

  def host_alone(reps: int) -> float:
    st = time.perf_counter()
    for k in range(n): batch(k, reps)
    return (time.perf_counter() - st) / n

  def both(reps: int) -> float:
    st = time.perf_counter()
    x, y = batch(0, reps)
    for k in range(n):
      loss = step(Tensor(x), Tensor(y))
      x, y = batch(k, reps)  # while the step computes
    sync()
    assert np.isfinite(loss.item())
    return (time.perf_counter() - st) / n

  # the host's work sized to the device's step: the case where overlap matters most (either alone is half the sum)
  dev = device_alone()
  reps = 16
  for _ in range(3): reps = max(1, round(reps * dev / host_alone(reps)))
  # rounds of the three, each round's ratio from its own figures (a burst of other load then spoils one round only)
  rounds = [(device_alone(), host_alone(reps), both(reps)) for _ in range(5)]
  ratios = sorted(b / max(h, d) for d, h, b in rounds)
  d, h, b = (statistics.median(r[i] for r in rounds) for i in range(3))
  return {"ratio": ratios[len(ratios) // 2], "rounds": [round(r, 3) for r in ratios], "step_ms": b * 1e3, "host_ms": h * 1e3,
          "device_ms": d * 1e3, "sum_ratio": (h + d) / max(h, d)}


def jit_replay(fw: str) -> dict:
  if fw == "ours":
    from tinyhybrid import Device, Tensor, TinyJit
  else:
    from tinygrad import Device, Tensor, TinyJit
  sync = Device[Device.DEFAULT].synchronize
  out = {}
  for k in (1, 100):
    def chain(x, y):
      for _ in range(k): x = (x + y).contiguous()
      return x.realize()
    f = TinyJit(chain)
    a, b = Tensor(np.arange(16, dtype=np.float32)).realize(), Tensor(np.ones(16, np.float32)).realize()
    for _ in range(5): f(a, b)
    sync()
    ts = []
    for _ in range(500):
      st = time.perf_counter()
      f(a, b)
      ts.append(time.perf_counter() - st)
      sync()  # not timed: each call measures a submit into an idle queue
    out[f"replay_{k}_us"] = statistics.median(ts) * 1e6
    assert np.allclose(f(a, b).numpy(), np.arange(16) + k)
  out["per_kernel_us"] = out["replay_100_us"] / 100
  return out


def cpu4_overlap() -> None:
  from tinyhybrid import Device, Tensor
  from tinyhybrid.device import profile_events
  from tinyhybrid.helpers import Context
  n, devs = 1 << 22, [f"CPU:{i}" for i in range(4)]
  xs = [Tensor(np.ones(n, np.float32), device=d).realize() for d in devs]
  one = [Tensor(np.ones(n, np.float32)).realize() for _ in devs]
  def run(ts): return [(x * 1.5 + 0.5).realize() for x in ts]
  def sync_all():
    for d in devs: Device[d].synchronize()
  def gbs(ts) -> float:
    return 2 * 4 * n * len(ts) / median(lambda: (run(ts), sync_all()), 5) / 1e9
  for ts in (xs, one): gbs(ts)  # warm-up: kernels compiled, memory touched
  # rounds alternating the two, each round's ratio from its own figures (a burst of other load spoils one round only)
  rounds = [(gbs(xs), gbs(one)) for _ in range(7)]
  ratios = sorted(f / s for f, s in rounds)
  four, single = (statistics.median(r[i] for r in rounds) for i in range(2))
  with Context(PROFILE=1):
    del profile_events[:]
    run(xs), sync_all()
    spans = sorted((e.start_ns, e.end_ns, e.device) for e in profile_events if e.kind == "kernel")
  overlapping = sum(1 for i, a in enumerate(spans) for b in spans[i + 1:] if b[0] < a[1] and b[2] != a[2])
  emit("cpu4_overlap", unit="GB/s", ours=four, one_device=single, ratio=ratios[len(ratios) // 2], rounds=[round(r, 3) for r in ratios],
       overlapping_pairs=overlapping, target=0.9)


def compare(case: str, fn, unit: str, key: str, target: float, **extra) -> None:
  ours = fn("ours")
  try:
    import tinygrad  # noqa: F401
    tg = fn("tinygrad")
  except ImportError: tg = None
  emit(case, unit=unit, ours=ours[key], tinygrad=None if tg is None else tg[key], target=target, detail=ours,
       tinygrad_detail=tg, **extra)


def main(cases: list[str]) -> None:
  os.environ.setdefault("DEV", "CPU")
  for case in cases:
    if case not in CASES: raise SystemExit(f"unknown case {case!r}; cases: {', '.join(CASES)}")
    if case == "train_overlap" and os.environ.get("NUM_CPU_THREADS") != "1":
      # the device held to one worker, in a process of its own (the queue's workers start with the device)
      subprocess.run([sys.executable, __file__, case], env={**os.environ, "NUM_CPU_THREADS": "1", "CPU_COUNT": "1"}, check=True)
      continue
    if case == "realize_return": compare(case, realize_return, "fraction", "fraction", 0.05)
    elif case == "train_overlap": compare(case, train_overlap, "x max(host, device)", "ratio", 1.1)
    elif case == "jit_replay": compare(case, jit_replay, "us per kernel (100 kernels)", "per_kernel_us", 0.1)
    else: cpu4_overlap()


if __name__ == "__main__":
  main(sys.argv[1:] or list(CASES))
