#!/usr/bin/env python3
"""The GPU queues' host cost on the mock GPUs (hcq.MockNVGPU's channel, hcq.MockAMDGPU's ring): patch and submit a
pre-encoded replay of 100 kernel launches (two patched addresses each), kernel execution not counted (the mock decodes
each launch and runs nothing). One JSON line per case:
  nv_replay_100 (Hopper, Ampere), amd_replay_100 (gfx11, gfx10): median µs from submit() to its return, then the mock
                 drains before the next (untimed); target 5 µs a submit + 0.2 µs a kernel = 25 µs (issue 25).
The anchor is null here: tinygrad's own mock GPUs ship only in its test tree, and the real comparison (against CUDA=1
on the same GPU) is bench/gpu_check.sh's on a machine with one."""
from __future__ import annotations

import json
import statistics
import time

from tinyhybrid._core import hcq


def nv_queue(newer: bool) -> tuple[hcq.Queue, hcq.Program, hcq.MockNVGPU]:
  gpu = hcq.MockNVGPU(hopper=newer, push_bytes=1 << 22, side_bytes=1 << 24)
  q = hcq.NVQueue("nv", newer, "compute", gpu.gpfifo, gpu.push, gpu.side, gpu.gp_put, gpu.gp_get, gpu.doorbell,
                  hcq.MockNVGPU.token, gpu.signal("nv:timeline"), gpu)
  return q, hcq.NVKernel(code=0x1000, registers=32, param_offset=0x210, cbuf0_bytes=0x220).program("E_1024"), gpu


def amd_queue(newer: bool) -> tuple[hcq.Queue, hcq.Program, hcq.MockAMDGPU]:
  gpu = hcq.MockAMDGPU(ring_bytes=1 << 22, side_bytes=1 << 24)
  q = hcq.AMDQueue("amd", newer, "compute", gpu.ring, gpu.side, gpu.wptr, gpu.rptr, gpu.doorbell, gpu.signal("amd:timeline"), gpu)
  return q, hcq.AMDKernel(code=0x10000, kernarg_sgpr=4, kernarg_bytes=16).program("E_1024"), gpu


def replay_cost(make, kernels: int, newer: bool, runs: int = 2000) -> float:
  q, prg, gpu = make(newer)
  cb = hcq.CommandBuffer()
  slots = [cb.add_slot(0) for _ in range(2 * kernels)]
  for k in range(kernels): cb.exec(prg, [hcq.Patch(slots[2 * k]), hcq.Patch(slots[2 * k + 1])], global_size=(8,), local_size=(128,))
  patches = [0x10000 * (i + 1) for i in range(2 * kernels)]
  q.wait(q.submit(cb, patches), timeout_ms=10_000)  # lowered once, cached on the command buffer
  ts = []
  for _ in range(runs):
    st = time.perf_counter()
    v = q.submit(cb, patches)
    ts.append(time.perf_counter() - st)
    q.wait(v, timeout_ms=10_000)
  assert gpu.fault == "" and gpu.launches == kernels * (runs + 1), (gpu.fault, gpu.launches)
  return statistics.median(ts) * 1e6


def main() -> None:
  for case, make, names in (("nv_replay_100", nv_queue, ("hopper", "ampere")), ("amd_replay_100", amd_queue, ("gfx11", "gfx10"))):
    for newer, gen in zip((True, False), names):
      one, hundred = replay_cost(make, 1, newer), replay_cost(make, 100, newer)
      print(json.dumps({"bench": "gpu_submit", "case": case, "gpu": gen, "unit": "us per submit",
                        "ours": round(hundred, 3), "per_kernel_us": round((hundred - one) / 99, 4), "replay_1_us": round(one, 3),
                        "anchor": None, "ratio": None, "target": 25.0}), flush=True)


if __name__ == "__main__":
  main()
