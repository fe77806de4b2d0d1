"""Realizing tensors is planning, then running. Planning normalizes the graph, gets its compiled schedule (from the
schedule cache, or by scheduling, lowering, rendering and compiling) and binds memory; the plan is a Linear (tinygrad's
LINEAR: Tensor.linear_with_vars gives one), which run_linear runs, pointing the tensors at their results."""
from __future__ import annotations

import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable

from tinyhybrid import viz
from tinyhybrid.codegen.lower import LoweredKernel, lower
from tinyhybrid.codegen.search import optimize
from tinyhybrid.codegen.validate import check_kernel
from tinyhybrid.device import Buffer, CompiledProgram, Device, Runner, device_base
from tinyhybrid.helpers import BEAM, CHECK_OOB, DEBUG, NOOPT, GlobalCounters
from tinyhybrid.schedule.kernelize import BufferSlot, base_buffer, buffer_uop, buffer_view, contiguous_buffer, create_schedule, normalize
from tinyhybrid.schedule.localize import localize
from tinyhybrid.schedule.memory import plan_memory
from tinyhybrid.uop import Ops
from tinyhybrid.uop.ops import UOp
from tinyhybrid.uop.shape import shape_of
from tinyhybrid.uop.spec import spec_check

if TYPE_CHECKING:
  from tinyhybrid.tensor import Tensor


@dataclass
class ExecItem:
  prg: CompiledProgram
  slots: list[int]
  threads: int


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

  ops: int = field(init=False)  # the kernels' estimated operations and memory traffic per run (GlobalCounters)
  mem: int = field(init=False)

  def __post_init__(self) -> None: self.ops, self.mem = sum(ei.prg.ops for ei in self.items), sum(ei.prg.mem for ei in self.items)


def count_runs(kernels: int, ops: int, mem: int) -> None:
  """Adds kernels that ran to GlobalCounters."""
  GlobalCounters.kernel_count += kernels
  GlobalCounters.global_ops += ops
  GlobalCounters.global_mem += mem


# (normalized sink, device) -> compiled schedule; the key keeps its graph alive, and so its identity. Least recently
# used plans are dropped past the limit, so programs that build ever-new graphs do not grow without bound.
schedule_cache: OrderedDict[tuple[UOp, str], CompiledSchedule] = OrderedDict()
SCHEDULE_CACHE_SIZE = 256


# A kernel's local form (schedule/localize.py), device and optimization settings -> it lowered and compiled: kernels
# repeated across a network or a schedule are lowered once. Least recently added entries go first past the limit.
kernel_cache: OrderedDict[tuple, tuple[LoweredKernel, CompiledProgram]] = OrderedDict()
KERNEL_CACHE_SIZE = 4096


# Seconds spent in each compile phase since the last reset (bench/resnet_null.py reads it): scheduling, lowering with
# its rewrites and optimizations, rendering (which linearizes), compiling.
phase_times: dict[str, float] = {"schedule": 0.0, "rewrite": 0.0, "render": 0.0, "compile": 0.0}


def _compile_schedule(key: UOp, n_inputs: int, device: str, variables: tuple[UOp, ...] = ()) -> CompiledSchedule:
  dev = Device[device]
  t0 = time.perf_counter()
  spec_check(key, "tensor graph", "normalize")
  with viz.group("schedule") as vg:
    spec = create_schedule(key, n_inputs, split_reduce=dev.renderer.has_local)
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
    kernels.append((ck := (local.out, local.buffer, device, BEAM.value, NOOPT.value), slots))
    if ck in kernel_cache:
      kernel_cache.move_to_end(ck)  # in use: the last to go
      if CHECK_OOB: check_kernel(kernel_cache[ck][0], kernel_cache[ck][1].src)  # lowered before CHECK_OOB was set
      continue
    if ck in fresh: continue
    # another device of the same kind (CPU:1 for CPU) lowered it already: only its compiled program is per device
    if (same := next((kernel_cache[o] for d in Device.opened(device_base(device)) if (o := (*ck[:2], d, *ck[3:])) in kernel_cache), None)):
      fresh[ck] = (same[0], same[1].src)
      continue
    with viz.group("kernel") as vg:
      k = optimize(lower(local), dev)  # heuristics, or BEAM timing candidates on dev
      spec_check(k.ast, "lowered", "lower")
      t2 = time.perf_counter()
      src = dev.renderer.render(k)
      t3 = time.perf_counter()
      vg.name, vg.text = k.name, src
    if DEBUG >= 4: print(src)
    if CHECK_OOB: check_kernel(k, src)  # before it is compiled, so before it ever runs; kept with the kernel
    fresh[ck] = (k, src)
    phase_times["rewrite"] += t2 - t1
    phase_times["render"] += t3 - t2
    t1 = t3
  # kernels with the same source compile once; the device builds the new ones together (on the CPU: a compiler run
  # per core, each over its share)
  unique = list({(k.name, src): None for k, src in fresh.values()})
  compiled = dict(zip(unique, dev.compile_many(unique))) if unique else {}
  for ck, (k, src) in fresh.items():
    prg = compiled[(k.name, src)]
    prg.ops, prg.mem = k.ops, k.mem
    kernel_cache[ck] = (k, prg)
  phase_times["compile"] += time.perf_counter() - t1
  items = []
  # a variable's value is one more argument slot, after every buffer's: a kernel takes its buffers, then its variables
  n_bufs = n_inputs + len(spec.new_slots)
  for ck, slots in kernels:
    k, prg = kernel_cache[ck]
    # how it runs: a CPU kernel on some of the cores, a GPU kernel on its grid
    threads = k.launch or (max(1, min(k.outer, dev.max_threads)) if k.work >= PARALLEL_WORK else 1)
    items.append(ExecItem(prg, [slots[b.index].index for b in k.buffers] + [n_bufs + variables.index(v) for v in k.vars], threads))
  # past the limit the least recently used kernels go, once this schedule has taken its own
  while len(kernel_cache) > KERNEL_CACHE_SIZE: kernel_cache.popitem(last=False)
  outputs = {slot for kind, slot in spec.outputs if kind == "view"}
  physical = plan_memory([ei.slots for ei in items], spec.new_slots, keep=outputs)
  runner = dev.runner([(ei.prg, ei.slots, ei.threads) for ei in items], n_bufs + len(variables))
  roots = set(key.src)
  inside = any(u.op is Ops.CONTIGUOUS and u not in roots for u in key.toposort())
  return CompiledSchedule(items, spec.new_slots, physical, spec.outputs, runner, variables, inside, bool(CHECK_OOB))


# a variable's value as a kernel argument word (a negative value in two's complement)
U64_MASK = (1 << 64) - 1

# below this many loop iterations a kernel runs on one core: waking the others costs more than it saves
PARALLEL_WORK = 1 << 15


class JitError(RuntimeError):
  """A jitted function was misused: inputs that do not match what it captured, or something that cannot be captured
  (reading a tensor's values, a constant input, a return that is not tensors)."""


@dataclass(eq=False)
class Capture:
  """What TinyJit records while it captures: every kernel run, as (device, program, its arguments, threads) with the
  arguments its buffers, then its variables, each bound to the value it ran with; and the random calls made
  (mixin/random.py), which a replay makes again."""
  runs: list[tuple[str, CompiledProgram, list[Buffer | UOp], int]] = field(default_factory=list)
  rng: list[tuple[Buffer, Callable[[], Tensor]]] = field(default_factory=list)


capturing: list[Capture] = []


def capture_random(words: Tensor, redraw: Callable[[], Tensor]) -> None:
  """While TinyJit captures: notes the buffer a random call reads its key from (mixin/random.py), with the function
  that makes the same call again (advancing the generator), whose words a replay copies into that buffer."""
  if capturing: capturing[-1].rng.append((base_buffer(words.uop).arg, redraw))


def check_not_capturing(what: str) -> None:
  """Reading a tensor's values while TinyJit captures would bake them into the replay, as in tinygrad an error."""
  if capturing: raise JitError(f"{what}: cannot read tensor data while TinyJit captures, the value would be baked into the replay")


# buffers realized from a Python scalar (Tensor(2).realize()): tinygrad keeps such a constant virtual, and TinyJit
# refuses one as an input (a replay could not replace it), so ours does too
scalar_buffers: weakref.WeakSet[Buffer] = weakref.WeakSet()


@dataclass(slots=True)
class _Step:
  """One device's share of a Linear: the compiled schedule, the memory bound to its slots (inputs, then the memory
  plan's buffers), the variables' values, and what its run makes of the tensors it realizes."""
  device: str
  cs: CompiledSchedule
  bufs: list[Buffer]
  var_vals: dict[UOp, int]
  tensors: list[Tensor]
  roots: list[UOp]
  nodes: list[UOp]
  consts: set[UOp]
  scalars: list[Tensor]  # those that were a Python scalar (see scalar_buffers)
  done: bool = False  # the tensors point at the results (after the first run)


@dataclass
class Linear:
  """A planned realize (tinygrad's LINEAR): everything scheduled, compiled and bound to memory; run_linear runs it.
  src holds one ExecItem per kernel, in the order they run."""
  steps: list[_Step]

  @property
  def src(self) -> tuple[ExecItem, ...]: return tuple(ei for st in self.steps for ei in st.cs.items)


def realize_tensors(tensors: list[Tensor]) -> None:
  """Realizing is planning, then running. Sharded tensors (a tuple of devices) go through engine/multi.py (by
  way of the Tensor layer, which hands it this function), which realizes their shards here."""
  if any(type(t.device) is tuple for t in tensors):
    from tinyhybrid.tensor import realize_sharded
    realize_sharded([t for t in tensors if type(t.device) is tuple])
    tensors = [t for t in tensors if type(t.device) is not tuple]
  for st in _plan(tensors): _run_step(st)


def linear_with_vars(tensors: list[Tensor]) -> tuple[Linear, dict[str, int]]:
  """The plan that realizes these tensors and the values of the bound Variables it runs with, by name (tinygrad's
  Tensor.linear_with_vars): the tensors become their results when run_linear runs it."""
  linear = plan(tensors)
  return linear, {v.arg[0]: val for st in linear.steps for v, val in st.var_vals.items()}


def run_linear(linear: Linear, var_vals: dict[str, int] | None = None) -> None:
  """Runs a plan from linear_with_vars; var_vals (by name) may give its variables other values."""
  if var_vals:
    for st in linear.steps: st.var_vals = {v: var_vals.get(v.arg[0], val) for v, val in st.var_vals.items()}
  for st in linear.steps: _run_step(st)


def plan(tensors: list[Tensor]) -> Linear:
  if any(type(t.device) is tuple for t in tensors):
    raise NotImplementedError("linear_with_vars: a sharded tensor's copies between devices run while it is planned; realize() it")
  return Linear(_plan(tensors))


def _plan(tensors: list[Tensor], view_writes: bool = True) -> list[_Step]:
  """Normalizes the tensors' graphs, gets each device's compiled schedule (from the cache, or by scheduling, lowering
  and compiling) and binds memory to its slots. Pending writes the graphs read (unless view_writes is off: running
  one of them), and lazy tensors that must see a buffer before this plan writes it, are run first."""
  from tinyhybrid.tensor import _all_tensors, _new_memory
  if view_writes: _run_view_writes(tensors)
  by_device: dict[str, list[Tensor]] = {}
  for t in tensors:
    if not buffer_view(t.uop): by_device.setdefault(t.device, []).append(t)
  steps: list[_Step] = []
  for device, ts in by_device.items():
    # a constant (a graph that reads no buffer) is computed per tensor, as in tinygrad: two Tensor.zeros(2) realized
    # are two buffers, and a lazy tensor built the same way is handed neither (an assign to one would change it)
    consts = {u for u in {t.uop for t in ts} if not _reads_buffer(u)}
    scalars = [t for t in ts if t.uop.op is Ops.CONST and not t.uop.src] if consts else []
    seen: set[UOp] = set()
    for t in ts:
      if t.uop in consts and t.uop in seen: t.uop = _new_memory(t.uop)
      seen.add(t.uop)
    roots = [t.uop for t in ts]
    var_vals: dict[UOp, int] = {}
    key, inputs, nodes = normalize(roots, var_vals)
    # lazy tensors that read a buffer this schedule assigns to must see the old values: compute them first (a write
    # through a view is seen by every tensor on its memory instead, as in tinygrad)
    written = {id(base_buffer(u.src[0]).arg) for u in nodes if u.op is Ops.STORE and contiguous_buffer(u.src[0]) is not None}
    if written:
      mine = set(map(id, ts))
      if readers := _readers_of(written, [t for t in _all_tensors if id(t) not in mine and not buffer_view(t.uop)]):
        realize_tensors(readers)
        roots = [t.uop for t in ts]
        key, inputs, nodes = normalize(roots, var_vals)
    # a live tensor made .contiguous() that this graph computes gets its memory here anyway: it is realized with the
    # rest, as in tinygrad (a later graph over it reads that memory instead of computing it again). A cached plan
    # knows whether its graph has such a node at all
    cs = schedule_cache.get((key, device))
    if (cs is None or cs.contiguous_inside) and (inner := _live_contiguous(nodes, roots, _all_tensors)):
      ts = ts + inner
      roots = [t.uop for t in ts]
      key, inputs, nodes = normalize(roots, var_vals)
      cs = schedule_cache.get((key, device))
    if cs is None or (CHECK_OOB and not cs.proven):  # a plan made before CHECK_OOB was set is made (and proven) again
      cs = schedule_cache[(key, device)] = _compile_schedule(key, len(inputs), device, tuple(sorted(var_vals, key=lambda v: v.arg)))
      if len(schedule_cache) > SCHEDULE_CACHE_SIZE: schedule_cache.popitem(last=False)
    else:
      schedule_cache.move_to_end((key, device))
      if DEBUG >= 3: print(f"schedule cache hit: {len(cs.items)} kernels")
    # bind memory: inputs, then the plan's physical buffers
    phys: dict[int, Buffer] = {}
    bufs: list[Buffer] = list(inputs)
    for slot, p in zip(cs.new_slots, cs.physical):
      if p not in phys: phys[p] = Buffer(device, slot.size, slot.dtype)
      bufs.append(phys[p] if phys[p].size == slot.size and phys[p].dtype is slot.dtype else Buffer(device, slot.size, slot.dtype))
    steps.append(_Step(device, cs, bufs, var_vals, ts, roots, nodes, consts, scalars))
  return steps


def _run_step(st: _Step) -> None:
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
  if capturing:
    bound = [*bufs, *(v.bind(st.var_vals[v]) for v in cs.vars)]
    for ei in cs.items: capturing[-1].runs.append((st.device, ei.prg, [bound[s] for s in ei.slots], ei.threads))
  if not st.done:
    st.done = True
    _point_at_results(st)


def _point_at_results(st: _Step) -> None:
  """After a step's first run: the tensors it realized (and every live tensor whose graph holds them) read its buffers."""
  from tinyhybrid.tensor import _all_tensors
  wants_grad = {t.uop for t in list(_all_tensors) if t.requires_grad}
  history = bool(wants_grad) and any(u in wants_grad for u in st.nodes)
  becomes: dict[UOp, UOp] = {}
  for r, (kind, slot) in zip(st.roots, st.cs.outputs):
    if kind == "store":
      base = r
      while base.op is Ops.RESHAPE: base = base.src[0]
      becomes[r] = base.src[0] if base is r else UOp(Ops.RESHAPE, r.dtype, (base.src[0], *r.src[1:]), r.arg)
    elif kind == "view":
      view = buffer_uop(st.bufs[slot], shape_of(r) or ())
      becomes[r] = UOp(Ops.AFTER, r.dtype, (view, r)) if history else view
  for u in st.nodes:
    if u.op is Ops.STORE and u not in becomes: becomes[u] = u.src[0]
  own = {id(t): becomes.pop(t.uop) for t in st.tensors if t.uop in st.consts and t.uop in becomes}
  _apply_becomes(becomes)
  for t in st.tensors:
    if id(t) in own: t.uop = own[id(t)]
  for t in st.scalars:
    if (buf := contiguous_buffer(t.uop)) is not None: scalar_buffers.add(buf)


def _run_view_writes(tensors: list[Tensor]) -> None:
  """Runs the pending assigns through views (tensor.py _view_writes) into buffers these tensors read, oldest first.
  A view write has no readers to compute first (every tensor on its memory sees it), so running one runs nothing else."""
  from tinyhybrid.tensor import _view_writes
  if not _view_writes: return
  _view_writes[:] = [w for w in _view_writes if w.uop.op is Ops.STORE]  # the ones realized since are done
  pending = [w for w in _view_writes if all(w is not t for t in tensors)]
  if not pending: return
  reads = {id(u.arg) for u in UOp.sink(*[t.uop for t in tensors]).toposort() if u.op is Ops.BUFFER}
  for w in pending:
    if w.uop.op is Ops.STORE and id(base_buffer(w.uop.src[0]).arg) in reads:
      for st in _plan([w], view_writes=False): _run_step(st)  # (one may be listed twice)


def _live_contiguous(nodes: list[UOp], roots: list[UOp], live: Iterable[Tensor]) -> list[Tensor]:
  """One live tensor per CONTIGUOUS node the roots compute (not one only in a realized tensor's autograd history)."""
  conts = {u for u in nodes if u.op is Ops.CONTIGUOUS}.difference(roots)
  if not conts: return []
  found: dict[UOp, Tensor] = {}
  for t in live:
    if t.uop in conts: found.setdefault(t.uop, t)
  if not found: return []
  computed: set[UOp] = set()
  stack, seen = list(roots), set(roots)
  while stack:
    u = stack.pop()
    if u in found: computed.add(u)
    if u.op is Ops.AFTER or u.op is Ops.BUFFER: continue  # realized: its sources are history
    for s in u.src:
      if s not in seen:
        seen.add(s)
        stack.append(s)
  return [t for u, t in found.items() if u in computed]


def _reads_buffer(u: UOp) -> bool:
  return any(n.op is Ops.BUFFER for n in u.toposort())  # BUFFERs are leaves: a graph that has one meets it early


def _readers_of(written: set[int], candidates: list[Tensor]) -> list[Tensor]:
  """The candidates whose lazy graph reads one of the written buffers (not through an assign of its own), found in
  one walk over all their graphs."""
  if not candidates: return []
  reads: set[UOp] = set()
  for u in UOp.sink(*[t.uop for t in candidates]).toposort():
    if (u.op is Ops.BUFFER and id(u.arg) in written) or (u.op is not Ops.STORE and any(s in reads for s in u.src)): reads.add(u)
  return [t for t in candidates if t.uop in reads]


def _apply_becomes(becomes: dict[UOp, UOp]) -> None:
  """Points every live tensor whose graph holds a realized node at that node's buffer instead."""
  from tinyhybrid.tensor import _all_tensors
  if not becomes: return
  for t in list(_all_tensors):
    if t.uop in becomes: t.uop = becomes[t.uop]
    elif not buffer_view(t.uop): t.uop = t.uop.substitute(becomes)
