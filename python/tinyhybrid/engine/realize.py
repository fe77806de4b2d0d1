"""Realizing a UOp graph is planning, then running. Planning normalizes one device's roots (prepare), gets their
compiled schedule (from the schedule cache, or by scheduling, lowering, rendering and compiling) and binds memory
(bind); a plan is a Linear of such Steps (tinygrad's LINEAR: Tensor.linear_with_vars gives one), which run_linear runs.
A realize hands buffers back and Tensor applies them: this module never sees a Tensor. After a step's first run it
hands the step to its on_done, and results() says what each realized node became (the becomes map); tensor.py points
the live tensors at those buffers, and decides what else a realize must see to first (pending writes, readers of a
buffer about to be overwritten, live CONTIGUOUS tensors inside the graph)."""
from __future__ import annotations

import contextlib
import dataclasses
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Iterator

from tinyhybrid import viz
from tinyhybrid.codegen.gpu import Launch
from tinyhybrid.codegen.lower import LoweredKernel
from tinyhybrid.codegen import to_program
from tinyhybrid.codegen.search import on_device
from tinyhybrid.codegen.validate import check_kernel
from tinyhybrid.device import Buffer, CompiledProgram, Device, Runner, device_base
from tinyhybrid.dtype import dtypes
from tinyhybrid.helpers import BEAM, CAPTURING, CHECK_OOB, DEBUG, NOLOCALS, NOOPT, SPLIT_REDUCEOP, TC, TC_SELECT, TRANSCENDENTAL, GlobalCounters
from tinyhybrid.renderer import Estimates
from tinyhybrid.schedule import schedule_cache  # (normalized sink, device, planning switches) -> CompiledSchedule
from tinyhybrid.schedule.kernelize import UnrunWrites, create_schedule, normalize  # noqa: F401 (UnrunWrites: what prepare raises, for its callers)
from tinyhybrid.uop.buffers import BufferSlot, base_buffer, buffer_uop, contiguous_buffer, strip_reshapes
from tinyhybrid.schedule.localize import localize
from tinyhybrid.schedule.memory import plan_memory
from tinyhybrid.uop import Ops
from tinyhybrid.uop.ops import KernelInfo, UOp
from tinyhybrid.uop.upat import PatternMatcher, UPat
from tinyhybrid.uop.shape import shape_of
from tinyhybrid.uop.spec import spec_check


@dataclass
class ExecItem:
  prg: CompiledProgram
  slots: list[int]
  threads: int | Launch  # a CPU kernel's cores, a GPU kernel's grid (LoweredKernel.launch)
  device: str = ""

  @property
  def src(self) -> tuple[UOp, ...]:
    """tinygrad's view of a plan's call: src[0] is the kernel (its SINK in kernel IR, as rendered)."""
    return (self.prg.ast,)


@dataclass
class CompiledSchedule:
  """Everything needed to run one graph structure again: programs, argument slots, the memory plan, and the
  device's runner (for the CPU: the whole schedule as one pre-encoded command buffer)."""
  items: list[ExecItem]
  new_slots: list[BufferSlot]
  physical: list[int]  # new slot j lives in physical buffer physical[j]
  outputs: list[tuple[str, int]]
  runner: Runner
  vars: tuple[UOp, ...] = ()  # the variables whose values follow the buffers in the runner's arguments, in this order
  contiguous_inside: bool = True  # the graph has a CONTIGUOUS that is not a root (a live tensor there is realized too)
  proven: bool = False  # every kernel's accesses were proven in bounds (CHECK_OOB)
  bases: dict[int, int] = field(default_factory=dict)  # physical buffers that slots share as views: their bytes

  ops: int = field(init=False)  # the kernels' estimated operations and memory traffic per run (GlobalCounters)
  mem: int = field(init=False)

  def __post_init__(self) -> None: self.ops, self.mem = sum(ei.prg.ops for ei in self.items), sum(ei.prg.mem for ei in self.items)


def count_runs(kernels: int, ops: int, mem: int) -> None:
  """Adds kernels that ran to GlobalCounters."""
  GlobalCounters.kernel_count += kernels
  GlobalCounters.global_ops += ops
  GlobalCounters.global_mem += mem


PLANNING = (TC, TC_SELECT, BEAM, NOOPT, SPLIT_REDUCEOP, NOLOCALS, TRANSCENDENTAL)  # a plan made under other values is not reused


def _cache_key(key: UOp, device: str) -> tuple[UOp, str, tuple]: return (key, device, tuple(v.value for v in PLANNING))
SCHEDULE_CACHE_SIZE = 256


class KernelCache(OrderedDict):
  """A kernel's local form (schedule/localize.py), device and optimization settings -> it lowered and compiled: kernels
  repeated across a network or a schedule are lowered once. Least recently added entries go first past the limit. A
  program outlives its entry (in its device's cache, or a JIT's capture): the entry that goes packs its kernel."""
  def __delitem__(self, key: tuple) -> None:
    self[key][1].pack_ast()
    super().__delitem__(key)

  def popitem(self, last: bool = True) -> tuple:
    key, value = super().popitem(last)
    value[1].pack_ast()
    return key, value

  def clear(self) -> None:
    for _, prg in self.values(): prg.pack_ast()
    super().clear()


kernel_cache: OrderedDict[tuple, tuple[LoweredKernel, CompiledProgram]] = KernelCache()
KERNEL_CACHE_SIZE = 4096


@contextlib.contextmanager
def run_once() -> Iterator[None]:
  """For work whose kernels run once (a model's loading, which unpacks each weight with kernels of its shapes): the
  schedules, lowered kernels and programs made inside are let go at the end; those made before stay. The 0.5B Q4_K_M
  model's loading left 22k graph nodes in them, 5 MB its warm-up then peaked above."""
  schedules, kernels = set(schedule_cache), set(kernel_cache)
  programs = {name: Device[name].program_keys() for name in Device.opened()}
  try: yield
  finally:
    for k in schedule_cache.keys() - schedules: del schedule_cache[k]
    for k in kernel_cache.keys() - kernels: del kernel_cache[k]
    for name in Device.opened(): Device[name].forget_programs(programs.get(name, set()))


# Seconds spent in each compile phase since the last reset (bench/resnet_null.py reads it): scheduling, the code
# generator's passes (codegen.to_program: lowering to rendering), compiling.
phase_times: dict[str, float] = {"schedule": 0.0, "codegen": 0.0, "compile": 0.0}


def _compile_schedule(key: UOp, n_inputs: int, device: str, variables: tuple[UOp, ...] = ()) -> CompiledSchedule:
  dev = Device[device]
  t0 = time.perf_counter()
  spec_check(key, "tensor graph", "normalize")
  with viz.group("schedule") as vg:
    ren = dev.renderer
    # a CPU with 8-lane vectors runs a long product faster in one stage: a ResNet-50 training step at batch 8 took
    # 3.46-3.58 s with its conv weight gradients in two stages, 2.95-3.05 s in one (2 AVX2 cores, either cache size)
    spec = create_schedule(key, n_inputs, split_reduce=ren.has_local and bool(SPLIT_REDUCEOP), cache=0 if ren.has_local else ren.core_cache,
                           two_stages=not ren.eight_lanes, inner_sums=ren.inner_sums)
    if vg.on:
      vg.name = f"schedule of {len(spec.items)} kernels"
      viz.stage("kernelize", key, UOp.sink(*[it.out for it in spec.items]))
  t1 = time.perf_counter()
  phase_times["schedule"] += t1 - t0
  kernels: list[tuple[tuple, list[BufferSlot]]] = []
  fresh: dict[tuple, tuple[LoweredKernel, str]] = {}
  for item in spec.items:
    local, slots = localize(item)
    spec_check(local.out, "kernel graph", "kernelize")
    kernels.append((ck := (local.out, local.also, local.buffer, device, *(v.value for v in PLANNING)), slots))
    if ck in kernel_cache:
      kernel_cache.move_to_end(ck)  # in use: the last to go
      if CHECK_OOB: check_kernel(kernel_cache[ck][0], kernel_cache[ck][1].src)  # lowered before CHECK_OOB was set
      continue
    if ck in fresh: continue
    # another device of the same kind (CPU:1 for CPU) lowered it already: only its compiled program is per device
    if (same := next((kernel_cache[o] for d in Device.opened(device_base(device)) if (o := (*ck[:3], d, *ck[4:])) in kernel_cache), None)):
      fresh[ck] = (same[0], same[1].src)
      continue
    with viz.group("kernel") as vg:
      program = to_program(local, dev.renderer, on_device(dev))
      k, src = program.kernel, program.src
      vg.name, vg.text = k.name, src
    if DEBUG >= 4: print(src)
    if CHECK_OOB: check_kernel(k, src)  # before it is compiled, so before it ever runs; kept with the kernel
    fresh[ck] = (k, src)
    t2 = time.perf_counter()
    phase_times["codegen"] += t2 - t1
    t1 = t2
  # kernels with the same source compile once; the device builds the new ones together (on the CPU: a compiler run
  # per core, each over its share)
  unique = list({(k.name, src): None for k, src in fresh.values()})
  compiled = dict(zip(unique, dev.compile_many(unique))) if unique else {}
  for ck, (k, src) in fresh.items():
    kernel_cache[ck] = (k, kernel_program(compiled[(k.name, src)], k))
  phase_times["compile"] += time.perf_counter() - t1
  items = []
  # a variable's value is one more argument slot, after every buffer's: a kernel takes its buffers, then its variables
  n_bufs = n_inputs + len(spec.new_slots)
  for ck, slots in kernels:
    k, prg = kernel_cache[ck]
    # how it runs: a CPU kernel on some of the cores, a GPU kernel on its grid
    threads = k.launch or (max(1, min(k.outer, dev.max_threads)) if k.work >= PARALLEL_WORK or k.loads >= PARALLEL_BYTES else 1)
    items.append(ExecItem(prg, [slots[b.index].index for b in k.buffers] + [n_bufs + variables.index(v) for v in k.vars], threads, device))
  # past the limit the least recently used kernels go, once this schedule has taken its own
  while len(kernel_cache) > KERNEL_CACHE_SIZE: kernel_cache.popitem(last=False)
  outputs = {slot for kind, slot in spec.outputs if kind == "view"}
  physical, bases = plan_memory([ei.slots for ei in items], spec.new_slots, keep=outputs, by_bytes=dev.allocator.is_host_memory)
  runner = dev.runner([(ei.prg, ei.slots, ei.threads) for ei in items], n_bufs + len(variables))
  roots = set(key.src)
  inside = any(u.op is Ops.CONTIGUOUS and u not in roots for u in key.toposort())
  return CompiledSchedule(items, spec.new_slots, physical, spec.outputs, runner, variables, inside, bool(CHECK_OOB), bases)


def kernel_program(prg: CompiledProgram, k: LoweredKernel) -> CompiledProgram:
  """prg with what runs and captures read off it taken from the kernel it was compiled from: its estimated work, its
  outputs, how many of its arguments are buffers, the buffers it loads from, and its AST."""
  prg.ops, prg.mem, prg.outs, prg.bufs, prg.ast = k.ops, k.mem, k.outs, len(k.buffers), k.ast
  prg.reads = loaded_params(k.ast)
  return prg


def loaded_params(ast: UOp) -> frozenset[int]:
  """The argument slots (PARAMs) a kernel loads from."""
  return frozenset(p.arg for u in ast.toposort() if u.op is Ops.LOAD for p in u.toposort() if p.op is Ops.PARAM)


# a variable's value as a kernel argument word (a negative value in two's complement)
U64_MASK = (1 << 64) - 1

# below this many loop iterations a kernel runs on one core: waking the others costs more than it saves, unless it
# reads at least this many bytes: a sum of the stored sums of int_matvec's short blocks (Q6_K's) does little work an
# output but reads a megabyte (the 0.5B Q4_K_M model's output layer: 12 such kernels on one core, 1.1 ms a step)
PARALLEL_WORK = 1 << 15
PARALLEL_BYTES = 1 << 19


class JitError(RuntimeError):
  """A jitted function was misused: inputs that do not match what it captured, or something that cannot be captured
  (reading a tensor's values, a constant input, a return that is not tensors)."""


@dataclass(eq=False)
class Transient:
  """A buffer a capture holds weakly: one a run wrote before any read it, so the replay needs its memory but not its
  contents. Nothing else holding it (a schedule's intermediate), it dies with its realize, and the next realize's
  buffers reuse its memory as they do outside a capture; the replay gives transients whose runs do not overlap one
  buffer (TinyJit's memory plan, engine/jit._rehome)."""
  ref: weakref.ref[Buffer]
  device: str
  nbytes: int


@dataclass(eq=False)
class Capture:
  """What TinyJit records while it captures: every kernel run, as (device, program, its arguments, threads) with the
  arguments its buffers (or Transients, weak: see weak), then its variables, each bound to the value it ran with; and
  the random calls made (mixin/random.py), which a replay makes again. weak: hold as Transients the buffers a run
  writes first (not a view of another, not from host data), so that intermediates do not outlive their realize."""
  runs: list[tuple[str, CompiledProgram, list[Buffer | Transient | UOp], int | Launch]] = field(default_factory=list)
  rng: list[tuple[Buffer, Callable[[], UOp]]] = field(default_factory=list)
  weak: bool = True
  _held: dict[int, Buffer | Transient] = field(default_factory=dict)  # by id(buffer): how the capture holds it

  def record(self, device: str, prg: CompiledProgram, args: list[Buffer | UOp], threads: int | Launch) -> None:
    """A run the replay repeats (its first prg.outs arguments are the buffers it writes)."""
    self.runs.append((device, prg, [self._hold(a, i < prg.outs) if isinstance(a, Buffer) else a for i, a in enumerate(args)], threads))

  def _hold(self, b: Buffer, written: bool) -> Buffer | Transient:
    held = self._held.get(id(b))
    if held is b or (isinstance(held, Transient) and held.ref() is b): return held  # type: ignore[return-value]
    # first seen here (an id whose buffer died may be another buffer's now)
    if self.weak and written and (b.intermediate or b._base is None and not b._external) and not b.from_host:
      held = Transient(weakref.ref(b), b.device, b.nbytes)
    else: held = b
    self._held[id(b)] = held
    return held


capturing: list[Capture] = []


def capture_random(words: UOp, redraw: Callable[[], UOp]) -> None:
  """While TinyJit captures: notes the buffer a random call reads its key from (words, a view of it: mixin/random.py),
  with the function that makes the same call again (advancing the generator), whose words a replay copies into that
  buffer."""
  if capturing: capturing[-1].rng.append((base_buffer(words).arg, redraw))


def check_not_capturing(what: str) -> None:
  """Reading a tensor's values while TinyJit captures would bake them into the replay, as in tinygrad an error."""
  if capturing: raise JitError(f"{what}: cannot read tensor data while TinyJit captures, the value would be baked into the replay")


# buffers realized from a Python scalar (Tensor(2).realize()): tinygrad keeps such a constant virtual, and TinyJit
# refuses one as an input (a replay could not replace it), so ours does too
scalar_buffers: weakref.WeakSet[Buffer] = weakref.WeakSet()


@dataclass(slots=True)
class Step:
  """One device's share of a Linear: the compiled schedule, the memory bound to its slots (inputs, then the memory
  plan's buffers), the variables' values, and the roots it realizes with their graph's nodes. After its first run,
  run_step hands it to on_done (tensor.py's: it reads results() and points the live tensors at them)."""
  device: str
  cs: CompiledSchedule
  bufs: list[Buffer]
  var_vals: dict[UOp, int]
  roots: list[UOp]
  nodes: list[UOp]
  on_done: Callable[[Step], None] | None = None
  done: bool = False  # it ran once (on_done was called)


@dataclass
class Linear:
  """A planned realize (tinygrad's LINEAR): everything scheduled, compiled and bound to memory; run_linear runs it.
  src holds one ExecItem per kernel, in the order they run. Work across devices (a sharded value, copies between
  devices) is planned while it runs, as the copies' sizes and the shards' kernels are known then: `across` holds
  those realizes, run first."""
  steps: list[Step]
  across: list[Callable[[], None]] = field(default_factory=list)

  @property
  def src(self) -> tuple[ExecItem, ...]: return tuple(ei for st in self.steps for ei in st.cs.items)


@dataclass(slots=True)
class Prepared:
  """One device's roots normalized for planning: the schedule cache's key, the input buffers in slot order, the
  graph's nodes, the bound variables' values, and the plan the cache holds for the key (None: not compiled yet). The
  caller may look at it (what it writes, whether it computes a CONTIGUOUS inside) before bind() commits to it."""
  device: str
  roots: list[UOp]
  key: UOp
  inputs: list[Buffer]
  nodes: list[UOp]
  var_vals: dict[UOp, int]
  cs: CompiledSchedule | None

  def written(self) -> set[int]:
    """The ids of the buffers the graph assigns to as a whole (a write through a view of one is not listed)."""
    return {id(base_buffer(u.src[0]).arg) for u in self.nodes if u.op is Ops.STORE and contiguous_buffer(u.src[0]) is not None}

  @property
  def contiguous_inside(self) -> bool:
    """Whether the graph may compute a CONTIGUOUS that is not a root (a cached plan knows; an uncompiled one may)."""
    return self.cs is None or self.cs.contiguous_inside


def prepare(device: str, roots: list[UOp], var_vals: dict[UOp, int] | None = None) -> Prepared:
  """Normalizes one device's roots and looks their plan up in the schedule cache; var_vals (if given) receives the
  bound variables' values. Raises UnrunWrites for a graph that reads memory after writes made with UOps."""
  if var_vals is None: var_vals = {}
  key, inputs, nodes = normalize(roots, var_vals)
  return Prepared(device, roots, key, inputs, nodes, var_vals, schedule_cache.get(_cache_key(key, device)))


def bind(p: Prepared, on_done: Callable[[Step], None] | None = None) -> Step:
  """The compiled schedule of p (from the cache, or by scheduling, lowering and compiling) with memory bound to its
  slots: the inputs, then the memory plan's physical buffers."""
  cs, device = p.cs, p.device
  if cs is None or (CHECK_OOB and not cs.proven):  # a plan made before CHECK_OOB was set is made (and proven) again
    cs = schedule_cache[_cache_key(p.key, device)] = _compile_schedule(p.key, len(p.inputs), device, tuple(sorted(p.var_vals, key=lambda v: v.arg)))
    if len(schedule_cache) > SCHEDULE_CACHE_SIZE: schedule_cache.popitem(last=False)
  else:
    schedule_cache.move_to_end(_cache_key(p.key, device))
    if DEBUG >= 3: print(f"schedule cache hit: {len(cs.items)} kernels")
  phys: dict[int, Buffer] = {}
  bufs: list[Buffer] = list(p.inputs)
  for slot, n in zip(cs.new_slots, cs.physical):
    if (nbytes := cs.bases.get(n)) is not None:  # intermediates of several sizes in turn: views of its bytes
      if n not in phys: phys[n] = Buffer(device, nbytes, dtypes.uint8)
      bufs.append(view := phys[n].view(slot.size, slot.dtype, 0))
      view.intermediate = True
      continue
    if n not in phys: phys[n] = Buffer(device, slot.size, slot.dtype)
    bufs.append(phys[n] if phys[n].size == slot.size and phys[n].dtype is slot.dtype else Buffer(device, slot.size, slot.dtype))
  return Step(device, cs, bufs, p.var_vals, p.roots, p.nodes, on_done)


def run_step(st: Step) -> None:
  """Runs a step's kernels; after its first run, hands the step to its on_done."""
  cs, bufs = st.cs, st.bufs
  args = [b.address for b in bufs]
  if cs.vars: args += [st.var_vals[v] & U64_MASK for v in cs.vars]
  if DEBUG >= 2:
    for ei in cs.items:  # one at a time, so each kernel's time is seen (the device's clock where it has one)
      start = time.perf_counter()
      if ei.prg.timed is not None: et = ei.prg.timed([args[s] for s in ei.slots], ei.threads)
      else:
        ei.prg.call([args[s] for s in ei.slots], ei.threads)
        et = max(time.perf_counter() - start, 1e-9)
      GlobalCounters.time_sum_s += et
      launch = f"{ei.threads} threads" if isinstance(ei.threads, int) else f"grid {ei.threads[0]} local {ei.threads[1]}"
      print(f"{ei.prg.name:<40} {et * 1e6:9.2f} us  {len(ei.slots)} args  {launch}  "
            f"{ei.prg.ops / et * 1e-9:8.2f} GFLOPS {ei.prg.mem / et * 1e-9:7.2f} GB/s")
  elif cs.items:
    cs.runner(args)
  count_runs(len(cs.items), cs.ops, cs.mem)
  if capturing and CAPTURING:  # (Context(CAPTURING=0): work a TinyJit function does that its replays skip)
    bound: list[Buffer | UOp] = [*bufs, *(v.bind(st.var_vals[v]) for v in cs.vars)]
    for ei in cs.items: capturing[-1].record(st.device, ei.prg, [bound[s] for s in ei.slots], ei.threads)
  if not st.done:
    st.done = True
    if st.on_done is not None: st.on_done(st)


def results(st: Step, history: bool = False) -> dict[UOp, UOp]:
  """What a step's graph became once it ran (the becomes map): each root it computed -> the view of its buffer (with
  history: AFTER(view, root), so the graph stays reachable for backward), an assign -> its target, and every assign
  inside the graph -> its target."""
  becomes: dict[UOp, UOp] = {}
  for r, (kind, slot) in zip(st.roots, st.cs.outputs):
    if kind == "store":
      base = strip_reshapes(r)
      becomes[r] = base.src[0] if base is r else UOp(Ops.RESHAPE, r.dtype, (base.src[0], *r.src[1:]), r.arg)
    elif kind == "view":
      view = buffer_uop(st.bufs[slot], shape_of(r) or ())
      becomes[r] = UOp(Ops.AFTER, r.dtype, (view, r)) if history else view
  for u in st.nodes:
    if u.op is Ops.STORE and u not in becomes: becomes[u] = u.src[0]
  return becomes


def realize_uops(device: str, roots: list[UOp]) -> dict[UOp, UOp]:
  """Plans and runs one device's roots, and returns what they became (see results()). No tensor follows: the caller
  applies the map (tensor.py does it for the live tensors, with what else a realize must see to, first)."""
  st = bind(prepare(device, roots))
  run_step(st)
  return results(st)


def estimate_uop(item: ExecItem) -> Estimates:
  """A planned kernel's estimated work per run (tinygrad's name; loads and stores are counted as its memory)."""
  return Estimates(ops=item.prg.ops, lds=item.prg.mem, mem=item.prg.mem)


# tinygrad's rule set that has a beam search of width ctx choose each kernel's optimizations (KernelInfo.beam), for the
# kernels whose SINK carries a KernelInfo; BEAM=N does the same for every kernel
pm_beam = PatternMatcher([(UPat(Ops.SINK, name="sink"), lambda ctx, sink: sink.replace(arg=dataclasses.replace(sink.arg, beam=ctx))
                           if isinstance(sink.arg, KernelInfo) and sink.arg.beam == 0 else None)])


def compile_linear(linear: Linear) -> Linear:
  """tinygrad compiles a plan's kernels in a step of its own; a plan here is compiled when it is made (every kernel of
  Linear.src has its program), so it gives the plan back as it is."""
  return linear


lower_and_compile = compile_linear  # tinygrad's name for the same step


def run_linear(linear: Linear, var_vals: dict[str, int] | None = None) -> None:
  """Runs a plan from Tensor.linear_with_vars; var_vals (by name) may give its variables other values."""
  if var_vals:
    for st in linear.steps: st.var_vals = {v: var_vals.get(v.arg[0], val) for v, val in st.var_vals.items()}
  for realize in linear.across: realize()
  for st in linear.steps: run_step(st)
