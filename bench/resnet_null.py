#!/usr/bin/env python3
"""Compile speed: a ResNet-50 (bottleneck blocks 3-4-6-3) taken from Tensor to rendered kernels on the NULL device
(scheduled, lowered and rendered, nothing run), ours side by side with tinygrad, each case in a fresh process.

Cases: `forward` (batch 64, eval mode) and `train` (forward, backward and an SGD step, train mode). The model uses only
API both frameworks have, so one definition serves both. Ours reports its per-phase times (engine.realize.phase_times:
schedule, codegen = lowering through rendering, compile); tinygrad's total is from the same run (its
codegen runs in worker processes, so a profile of the parent cannot split it into phases).
`python bench/resnet_null.py` prints one JSON line per case.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

BATCH = 64


def resnet50(Tensor: Any, nn: Any) -> Any:
  class Bottleneck:
    def __init__(self, cin: int, planes: int, stride: int):
      self.convs = [nn.Conv2d(cin, planes, 1, bias=False), nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False),
                    nn.Conv2d(planes, planes * 4, 1, bias=False)]
      self.bns = [nn.BatchNorm(planes), nn.BatchNorm(planes), nn.BatchNorm(planes * 4)]
      self.down = [nn.Conv2d(cin, planes * 4, 1, stride=stride, bias=False), nn.BatchNorm(planes * 4)] if stride != 1 or cin != planes * 4 else []

    def __call__(self, x: Any) -> Any:
      out = self.bns[0](self.convs[0](x)).relu()
      out = self.bns[1](self.convs[1](out)).relu()
      out = self.bns[2](self.convs[2](out))
      return (out + (x.sequential(self.down) if self.down else x)).relu()

  class ResNet50:
    def __init__(self):
      self.conv1, self.bn1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False), nn.BatchNorm(64)
      self.layers, cin = [], 64
      for planes, n, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(n):
          self.layers.append(Bottleneck(cin, planes, stride if i == 0 else 1))
          cin = planes * 4
      self.fc = nn.Linear(2048, 1000)

    def __call__(self, x: Any) -> Any:
      x = self.bn1(self.conv1(x)).relu().max_pool2d(kernel_size=(3, 3), stride=2, padding=1)
      return self.fc(x.sequential(self.layers).mean((2, 3)))

  return ResNet50()


def run_case(side: str, case: str) -> float:
  """Seconds from building the graph to every kernel rendered, for one case."""
  if side == "ours":
    from tinyhybrid import Context, Tensor, dtypes, nn
  else:
    from tinygrad import Context, Tensor, dtypes, nn
  model = resnet50(Tensor, nn)
  params = nn.state.get_parameters(model)
  Tensor.realize(*params)  # the weights' init kernels are not what is measured
  x = Tensor.empty(BATCH, 3, 224, 224)
  if side == "ours":
    from tinyhybrid.engine.realize import phase_times
    phase_times.update((k, 0.0) for k in phase_times)
  start = time.perf_counter()
  with Context(TRAINING=int(case == "train")):
    if case == "forward": model(x).realize()
    else:
      opt = nn.optim.SGD([p for p in params if getattr(p, "requires_grad", None) is not False], lr=0.01, momentum=0.9)
      loss = model(x).sparse_categorical_crossentropy(Tensor.empty(BATCH, dtype=dtypes.int32))
      opt.zero_grad()
      loss.backward()
      opt.step()
  return time.perf_counter() - start


def child(side: str, case: str) -> dict:
  out: dict[str, Any] = {"total": run_case(side, case)}
  if side == "ours":
    from tinyhybrid.engine.realize import phase_times
    out["phases"] = dict(phase_times)
  return out


def measure(side: str, case: str) -> dict:
  env = {**os.environ, "DEV": "NULL", "JIT": "0"}
  res = subprocess.run([sys.executable, __file__, "--child", side, case], env=env, capture_output=True, text=True, check=False)
  if res.returncode != 0: raise RuntimeError(f"{side} {case} failed:\n{res.stderr[-3000:]}")
  return json.loads(res.stdout.strip().splitlines()[-1])


def have_tinygrad() -> bool:
  try:
    import tinygrad  # noqa: F401
    return True
  except ImportError:
    return False


def main() -> None:
  p = argparse.ArgumentParser()
  p.add_argument("--child", nargs=2)
  p.add_argument("--case", choices=["forward", "train"], action="append")
  args = p.parse_args()
  if args.child:
    print(json.dumps(child(args.child[0], args.child[1])))
    return
  for case in args.case or ["forward", "train"]: report(case)


def report(case: str) -> None:
  """Measures one case on both sides and prints its JSON line."""
  ours = measure("ours", case)
  row: dict[str, Any] = {"case": f"resnet50_null_{case}", "batch": BATCH, "unit": "s", "ours": round(ours["total"], 3),
                         "ours_phases": {k: round(v, 3) for k, v in ours["phases"].items()}}
  if have_tinygrad():
    theirs = measure("tinygrad", case)["total"]
    row.update(tinygrad=round(theirs, 3), ratio=round(theirs / ours["total"], 2), target=30)  # issue 29: Tensor to rendered kernels at least 30x tinygrad
  print(json.dumps(row), flush=True)


if __name__ == "__main__":
  main()
