"""Choosing a kernel's optimizations: the default heuristics (the CPU's in codegen/heuristic.py, a GPU-style device's
in codegen/gpu.py), or with BEAM=N a beam search that compiles candidate plans and times them on the device (its own
clock where it has one). A candidate is a neighbour of a plan in the beam: one more action, one action less, or one
action with another amount; the N fastest plans go on until a round finds nothing faster. The winner is cached on
disk by the kernel's source, the device and the compiler, so a second run pays nothing."""
from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from tinyhybrid.codegen.gpu import gpu_optimizations
from tinyhybrid.codegen.heuristic import hand_coded_optimizations
from tinyhybrid.codegen.lower import LoweredKernel
from tinyhybrid.codegen.kernel import KernelOptError, KernelParts, Opt, OptOps, rkind, rsize
from tinyhybrid.codegen.opt import CPU_ONLY, GPU_ONLY, apply_opts
from tinyhybrid.codegen.tc import has_tc, tc_choices
from tinyhybrid.codegen.validate import check_kernel
from tinyhybrid.device import Buffer
from tinyhybrid.dtype import np_storage
from tinyhybrid.helpers import BEAM, CACHELEVEL, CHECK_OOB, DEBUG, IGNORE_BEAM_CACHE, NOOPT, PARALLEL, TC, TC_SELECT
from tinyhybrid.runtime import diskcache
from tinyhybrid.device import CompileError
from tinyhybrid.uop import AxisType, Ops
from tinyhybrid.uop.ops import KernelInfo, UOp
from tinyhybrid.digest import sha256

if TYPE_CHECKING:
  from tinyhybrid.device import Compiled
  from tinyhybrid.renderer import Renderer

AMOUNTS = {OptOps.UPCAST: (2, 3, 4, 6, 8, 16, 32, 64), OptOps.UNROLL: (2, 3, 4, 8, 16, 32, 64), OptOps.BLOCK: (64, 128, 256, 512),
           OptOps.LOCAL: (2, 4, 8, 16, 32, 64), OptOps.GROUP: (4, 8, 16, 32, 64, 128, 256), OptOps.GROUPTOP: (4, 8, 16, 32, 64, 128, 256)}
SPLIT = (AxisType.THREAD, AxisType.GROUP_REDUCE)


def choose_opts(k: LoweredKernel, dev: Compiled | None, ren: Renderer | None) -> list[Opt]:
  """The optimizations for a kernel whose loops are merged: the heuristics' for the renderer, or BEAM's, which times
  candidates on the device; none with NOOPT, or for a GPU kernel with a loop of a variable's length."""
  symbolic = has_variable_loops(k.ast)
  # a kernel whose SINK carries a KernelInfo with a beam width (a custom kernel's, engine.realize.pm_beam) asks for a
  # beam search of that width
  width = int(BEAM.value) or (k.ast.arg.beam if isinstance(k.ast.arg, KernelInfo) else 0)
  gpu = ren is not None and ren.has_local
  if NOOPT.value or (symbolic and gpu): opts: list[Opt] = []
  elif width >= 1 and not symbolic and dev is not None and dev.name.split(":")[0] != "NULL": opts = beam_search(k, dev, width)  # it runs kernels
  elif gpu: opts = gpu_optimizations(k, ren)  # type: ignore[arg-type]  # gpu: there is a renderer
  else: opts = hand_coded_optimizations(k, ren)
  if DEBUG >= 3: print(f"{k.name}: {opts}")
  return opts


def on_device(dev: Compiled) -> Callable[[LoweredKernel], list[Opt]]:
  """choose_opts for the kernels of a device: BEAM, where it is asked for, times candidates on it."""
  return lambda k: choose_opts(k, dev, dev.renderer)


def has_variable_loops(ast: UOp) -> bool:
  """Whether a loop runs a variable's length: it has no size to split by, so such kernels only share a loop of fixed
  length (attention heads, a batch) across the cores."""
  return any(r.op is Ops.RANGE and r.src[0].op is not Ops.CONST for r in ast.toposort())


def default_optimizations(k: LoweredKernel, ren: Renderer) -> list[Opt]:
  return gpu_optimizations(k, ren) if ren.has_local else hand_coded_optimizations(k, ren)


# ** search **

def actions(ast, ren: Renderer | None = None) -> list[Opt]:
  """Every action that could follow on this kernel on the device `ren` renders for (some turn out not to apply)."""
  k = KernelParts.of(ast)
  gpu = ren is not None and ren.has_local
  out: list[Opt] = []
  for r in k.loops:
    if rkind(r) in (AxisType.LOOP, AxisType.THREAD): out += [Opt(OptOps.UPCAST, r.arg[0], a) for a in AMOUNTS[OptOps.UPCAST] if rsize(r) % a == 0]
    if rkind(r) is AxisType.LOOP and gpu: out += [Opt(OptOps.LOCAL, r.arg[0], a) for a in AMOUNTS[OptOps.LOCAL] if rsize(r) % a == 0]
    elif rkind(r) is AxisType.LOOP: out.append(Opt(OptOps.THREAD, r.arg[0]))
    out += [Opt(OptOps.SWAP, r.arg[0], o.arg[0]) for o in k.loops if o.arg[0] > r.arg[0] and rkind(o) not in (AxisType.UPCAST,)]
  for r in k.reduce_ranges:
    if rkind(r) is not AxisType.REDUCE: continue
    out += [Opt(OptOps.UNROLL, r.arg[0], a) for a in AMOUNTS[OptOps.UNROLL] if rsize(r) % a == 0]
    if gpu: out += [Opt(op, r.arg[0], a) for op in (OptOps.GROUP, OptOps.GROUPTOP) for a in AMOUNTS[op] if rsize(r) % a == 0]
    else:
      out += [Opt(OptOps.BLOCK, r.arg[0], a) for a in AMOUNTS[OptOps.BLOCK] if rsize(r) % a == 0 and a < rsize(r)]
      out.append(Opt(OptOps.GROUP, r.arg[0]))
  if ren is not None and gpu and TC and ren.tensor_cores and not has_tc(ast):  # the tensor cores, as the first action (tinygrad's BEAM too)
    out += [Opt(OptOps.TC, i, int(TC_SELECT.value)) for i in range(len(tc_choices(k)))]
  return [o for o in out if o.op is OptOps.TC or o.op not in (CPU_ONLY if gpu else GPU_ONLY)]


def neighbours(k: LoweredKernel, plan: tuple[Opt, ...], ren: Renderer | None = None) -> list[tuple[Opt, ...]]:
  gpu = ren is not None and ren.has_local
  out: list[tuple[Opt, ...]] = [plan[:i] + plan[i + 1:] for i in range(len(plan))]
  for i, o in enumerate(plan):
    if o.op is OptOps.GROUP and not gpu: continue  # the CPU's GROUP takes no amount
    out += [plan[:i] + (Opt(o.op, o.axis, a),) + plan[i + 1:] for a in AMOUNTS.get(o.op, ()) if a != o.arg]
  try: out += [plan + (a,) for a in actions(apply_opts(k.ast, plan, ren), ren)]
  except KernelOptError: pass
  return out


class _Timer:
  """Compiles candidates (one per core at a time: the compiler is a subprocess) and times them on scratch buffers."""
  def __init__(self, k: LoweredKernel, dev: Compiled, pool: ThreadPoolExecutor):
    self.k, self.dev, self.pool = k, dev, pool
    # inputs of ones: no candidate divides by zero (no kernel takes an address from memory, so any value is safe)
    self.bufs: list[Buffer] = [Buffer(dev.name, max(b.size, 1), b.dtype, initial=np.ones(max(b.size, 1), np_storage(b.dtype))) for b in k.buffers]

  def source(self, plan: tuple[Opt, ...]) -> tuple[LoweredKernel, str] | None:
    from tinyhybrid.codegen import finalize  # the pipeline's passes after the choice, which calls this search
    try: fk = finalize(self.k, plan, self.dev.renderer)
    except KernelOptError: return None
    src = self.dev.renderer.render(fk)
    if CHECK_OOB: check_kernel(fk, src)  # a candidate runs on scratch buffers: it is proven like any kernel
    return fk, src

  def time(self, cands: list[tuple[tuple[Opt, ...], LoweredKernel, str]], limit: float) -> list[float]:
    # one compiler run per core for the whole round; if a candidate breaks it, each is compiled alone to find it
    try: progs = list(self.dev.compile_many([(fk.name, src) for _, fk, src in cands]))
    except CompileError: progs = list(self.pool.map(lambda c: _compile_or_none(self.dev, c[1].name, c[2]), cands))
    times = []
    addrs = [b.address for b in self.bufs] + [v.arg[1] for v in self.k.vars]  # variables at their smallest value
    for (_, fk, _), prg in zip(cands, progs):
      if prg is None:
        times.append(float("inf"))
        continue
      threads = fk.launch or max(1, min(fk.outer, self.dev.max_threads))
      runs = []
      for _ in range(4):  # the first run warms caches and workers; a hopeless candidate gets no more
        if prg.timed is not None: runs.append(prg.timed(addrs, threads))  # the device's own clock
        else:
          st = time.perf_counter()
          prg.call(addrs, threads)
          runs.append(time.perf_counter() - st)
        if runs[0] > 3 * limit: break
      times.append(min(runs[1:], default=runs[0]))
    return times


def _compile_or_none(dev: Compiled, name: str, src: str):
  try: return dev.compile(name, src)
  except CompileError: return None


def _cache_path(k: LoweredKernel, dev: Compiled, width: int) -> Path:
  from tinyhybrid.codegen import finalize
  src = dev.renderer.render(finalize(k, (), dev.renderer if dev.renderer.has_local else 1))
  parts: tuple[str, ...] = (src, dev.name, str(dev.max_threads), dev.compiler_key(), str(width), str(dev.renderer.vec))
  if props := getattr(dev, "props", None): parts += (props.ident,)  # a GPU-style device: which one, and its driver
  key = sha256("\0".join(parts).encode())
  return diskcache.subdir("beam") / f"{k.name}-{key.hexdigest()[:24]}.json"


def _cached_opts(path: Path) -> list[Opt] | None:
  """BEAM's choice for a kernel from the cache; an entry that does not read back as a list of actions is deleted."""
  if (blob := diskcache.read(path)) is None: return None
  try:
    opts = [Opt(OptOps[op], axis, arg) for op, axis, arg in json.loads(blob)]
    if all(type(o.axis) is int and type(o.arg) is int for o in opts): return opts
  except (ValueError, KeyError, TypeError): pass
  diskcache.discard(path)
  return None


def beam_search(k: LoweredKernel, dev: Compiled, width: int) -> list[Opt]:
  path = _cache_path(k, dev, width)
  if CACHELEVEL >= 1 and not IGNORE_BEAM_CACHE.value and (cached := _cached_opts(path)) is not None: return cached
  seen: set[str] = set()

  def measure(timer: _Timer, plans: list[tuple[Opt, ...]], limit: float, desc: str) -> list[tuple[float, tuple[Opt, ...]]]:
    cands = []
    for p in plans:
      if (got := timer.source(p)) is not None and got[1] not in seen:
        seen.add(got[1])
        cands.append((p, *got))
    out = []
    from tqdm import tqdm  # here: importing it costs every process 3 MB
    with tqdm(total=len(cands), desc=desc, leave=False) as bar:
      for i in range(0, len(cands), 8):
        batch = cands[i:i + 8]
        out += [(t, c[0]) for t, c in zip(timer.time(batch, limit), batch)]
        bar.update(len(batch))
    return out

  with ThreadPoolExecutor(max(1, int(PARALLEL.value))) as pool:
    timer = _Timer(k, dev, pool)
    beam = sorted(measure(timer, [(), tuple(default_optimizations(k, dev.renderer))], float("inf"), f"BEAM {k.name}"), key=lambda x: x[0])[:width]
    for rnd in range(1, 16):
      cands = list(dict.fromkeys(n for _, p in beam for n in neighbours(k, p, dev.renderer)))
      got = measure(timer, cands, beam[0][0], f"BEAM {k.name} round {rnd} ({beam[0][0] * 1e6:.0f} us)")
      new = sorted(beam + [x for x in got if x[0] < float("inf")], key=lambda x: x[0])[:width]
      improved, beam = new[0][0] < beam[0][0], new
      if not improved: break
  best = list(beam[0][1])
  if DEBUG >= 2: print(f"BEAM {k.name}: {beam[0][0] * 1e6:.1f} us with {best}")
  if CACHELEVEL >= 1: diskcache.write(path, json.dumps([[o.op.name, o.axis, o.arg] for o in best]).encode())
  return best
