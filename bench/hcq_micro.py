#!/usr/bin/env python3
# HCQ micro-benchmarks on the CPU device, from Python. One JSON line per case:
#   hcq_batch_submit: a pre-encoded 1000-kernel command buffer, submit + synchronize, us per kernel
#   hcq_replay_1k:    a pre-encoded 1-kernel buffer with 2 patched addresses, submit + synchronize (median us)
# The anchors (tinygrad's TinyJit replay) come with TinyJit; until then "anchor" is null.
import argparse, ctypes, json, os, shutil, statistics, subprocess, tempfile, time
import numpy as np
from tinyhybrid._core import hcq

SRC = r"""
#include <stdint.h>
void add(const uint64_t* args, uint32_t core, uint32_t cores) {
  float* out = (float*)args[0]; const float* a = (const float*)args[1]; const float* b = (const float*)args[2];
  uint64_t n = args[3], lo = n * core / cores, hi = n * (core + 1) / cores;
  for (uint64_t i = lo; i < hi; i++) out[i] = a[i] + b[i];
}
"""

def build_kernel(tmp:str) -> tuple[ctypes.CDLL, int]:
  cc = shutil.which("clang") or shutil.which("gcc") or shutil.which("cc")
  if cc is None: raise SystemExit("no C compiler found")
  src, so = os.path.join(tmp, "k.c"), os.path.join(tmp, "k.so")
  with open(src, "w") as f: f.write(SRC)
  subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", so, src], check=True)
  lib = ctypes.CDLL(so)
  return lib, ctypes.cast(lib.add, ctypes.c_void_p).value

def emit(name:str, value:float, unit:str, **extra):
  print(json.dumps({"name": name, "ours": round(value, 3), "unit": unit, "anchor": None, "ratio": None, **extra}), flush=True)

def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--iters", type=int, default=5000, help="replays for the round trip")
  ap.add_argument("--batches", type=int, default=50, help="submits of the 1000-kernel buffer")
  ap.add_argument("--n", type=int, default=16, help="elements per kernel")
  args = ap.parse_args()

  with tempfile.TemporaryDirectory() as tmp:
    lib, fn = build_kernel(tmp)
    prog = hcq.Program(fn, "add")
    dev = hcq.CPUQueue()
    n = args.n
    a, b, out = np.ones(n, np.float32), np.ones(n, np.float32), np.zeros(n, np.float32)
    ptr = lambda x: x.ctypes.data

    # 1000 kernels in one buffer: submit copies them into the ring, the leader runs them back to back.
    batch = hcq.CommandBuffer()
    for _ in range(1000): batch.exec(prog, [ptr(out), ptr(a), ptr(b), n], global_size=(1,))
    for _ in range(3): dev.submit(batch); dev.synchronize()
    submit_us, total_us = [], []
    for _ in range(args.batches):
      t0 = time.perf_counter_ns()
      dev.submit(batch)
      t1 = time.perf_counter_ns()
      dev.synchronize()
      t2 = time.perf_counter_ns()
      submit_us.append((t1 - t0) / 1e3 / 1000)
      total_us.append((t2 - t0) / 1e3 / 1000)
    emit("hcq_batch_submit", statistics.median(total_us), "us/kernel", submit_only=round(statistics.median(submit_us), 4),
         kernels=1000, threads=dev.num_threads)

    # The JIT replay shape: one kernel, its two inputs patched per call, then wait for completion.
    one = hcq.CommandBuffer()
    one.exec(prog, [ptr(out), ptr(a), ptr(b), n], global_size=(1,), patch=[1, 2])
    inputs = [(np.full(n, i, np.float32), np.full(n, 1, np.float32)) for i in range(4)]
    addrs = [[ptr(x), ptr(y)] for x, y in inputs]
    submit, sync = dev.submit, dev.synchronize
    for i in range(200): submit(one, addrs[i % 4]); sync()
    times = []
    for i in range(args.iters):
      t0 = time.perf_counter_ns()
      submit(one, addrs[i % 4])
      sync()
      times.append(time.perf_counter_ns() - t0)
    assert out[0] == (args.iters - 1) % 4 + 1, "the last replay's result is wrong"
    times.sort()
    emit("hcq_replay_1k", statistics.median(times) / 1e3, "us", p10=round(times[len(times) // 10] / 1e3, 3),
         p90=round(times[len(times) * 9 // 10] / 1e3, 3), iters=args.iters, target_us=10)

if __name__ == "__main__":
  main()
