"""Environment knobs and small shared utilities, with tinygrad's names (getenv, Context, DEBUG, ...)."""
from __future__ import annotations

import contextlib
import copyreg
import ctypes
import decimal
import functools
import gc
import gzip
import importlib
import marshal
import os
import pathlib
import pickle
import re
import sys
import tempfile
import threading
import time
import types
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterable, Iterator, Sequence, TypeVar

from tinyhybrid import _core
from tinyhybrid import digest

T = TypeVar("T")


def once(fn: Callable[..., T]) -> Callable[..., T]:
  """functools.cache that calls fn at most once for each arguments, also when threads ask at the same time: the first
  use of a driver or a device must not make two of it. A call that raises is not kept, as with functools.cache."""
  lock = threading.RLock()
  memo: dict[tuple, T] = {}

  @functools.wraps(fn)
  def first(*args: Any) -> T:
    if args in memo: return memo[args]
    with lock:
      if args not in memo: memo[args] = fn(*args)
      return memo[args]
  return first


@functools.cache
def getenv(key: str, default: Any = 0) -> Any:
  """The environment variable `key`, converted to the type of `default`."""
  return type(default)(os.getenv(key, default))


class ContextVar:
  """A named setting read from the environment once, and changed for a block with `Context`."""
  _cache: ClassVar[dict[str, ContextVar]] = {}
  value: int | str

  def __init__(self, key: str, default_value: int | str):
    if key in ContextVar._cache: raise RuntimeError(f"attempt to recreate ContextVar {key}")
    ContextVar._cache[key] = self
    self.key = key
    self.value = getenv(key, default_value)

  def __bool__(self) -> bool: return bool(self.value)
  def __eq__(self, x: object) -> bool: return self.value == x
  def __ne__(self, x: object) -> bool: return self.value != x
  __hash__ = object.__hash__  # one object per key: identity is its hash
  def tolist(self, obj: Any = None) -> list[Any]:
    """A comma-separated string setting as a list (of obj's attributes of those names, if obj is given)."""
    if not isinstance(self.value, str): raise TypeError(f"ContextVar {self.key} holds {self.value!r}, not a list string")
    return [getattr(obj, x) if obj is not None else x for x in self.value.split(",") if x]
  def __ge__(self, x: int) -> bool: return self.value >= x  # type: ignore[operator]
  def __gt__(self, x: int) -> bool: return self.value > x  # type: ignore[operator]
  def __lt__(self, x: int) -> bool: return self.value < x  # type: ignore[operator]
  def __le__(self, x: int) -> bool: return self.value <= x  # type: ignore[operator]
  def __repr__(self) -> str: return f"ContextVar({self.key!r}, {self.value!r})"


class Context(contextlib.ContextDecorator):
  """`with Context(DEBUG=2): ...` sets ContextVars for the block and restores them after."""

  def __init__(self, **kwargs: int | str):
    unknown = [k for k in kwargs if k not in ContextVar._cache]
    if unknown: raise KeyError(f"unknown ContextVar(s): {', '.join(unknown)}")
    self.kwargs = kwargs
    # one instance is entered again and again when it decorates a recursive function: each entry keeps its own old values
    self.olds: list[dict[str, int | str]] = []

  def __enter__(self) -> None:
    self.olds.append({k: ContextVar._cache[k].value for k in self.kwargs})
    for k, v in self.kwargs.items(): ContextVar._cache[k].value = v

  def __exit__(self, *exc: object) -> None:
    for k, v in self.olds.pop().items(): ContextVar._cache[k].value = v


DEBUG = ContextVar("DEBUG", 0)
class DevVar(ContextVar):
  """DEV, the default device (Device.DEFAULT) in tinygrad's target syntax: DEV=CL:1, DEV=NULL:CUDA:sm_90, with an
  interface before a '+' (DEV=MOCK+NV); Context(DEV=...) too. Its first target's parts read as attributes, as
  tinygrad's: DEV.device, DEV.renderer, DEV.arch, DEV.interface, DEV.indices."""
  PARTS = ("interface", "indices", "device", "renderer", "arch")

  def __getattr__(self, name: str) -> str:
    if name not in DevVar.PARTS: raise AttributeError(name)
    first = str(self.value).split(";")[0]
    iface, _, target = first.rpartition("+")
    names = [x.upper() if i < 2 else x for i, x in enumerate(target.split(":"))]
    parts = [*iface.split(":", 1), "", ""][:2] + (names + ["", "", ""])[:3]
    return parts[DevVar.PARTS.index(name)]

  def __str__(self) -> str: return str(self.value)


DEV = DevVar("DEV", "")
BEAM = ContextVar("BEAM", 0)
TRAINING = ContextVar("TRAINING", 0)  # as Tensor.training, for tinygrad scripts that say Context(TRAINING=1)
JIT = ContextVar("JIT", 1)
# a long submit (a TinyJit replay) reaches a device in batches of this many commands, then twice as many, ... (tinygrad's
# name; 0: in one piece), so the device starts on it while the host still hands it over
JIT_BATCH_SIZE = ContextVar("JIT_BATCH_SIZE", 32)
CAPTURING = ContextVar("CAPTURING", 1)  # 0: what runs now inside a TinyJit capture is not replayed
NOOPT = ContextVar("NOOPT", 0)
# tensor cores (codegen/tc.py), tinygrad's names: TC=0 never uses them; TC_SELECT picks one of the renderer's (-1: the
# first that fits); TC_OPT is how hard to try (0: only shapes that fit exactly, the only level implemented here)
TC = ContextVar("TC", 1)
USE_TC = TC  # tinygrad's Python name for it
TC_SELECT = ContextVar("TC_SELECT", -1)
TC_OPT = ContextVar("TC_OPT", 0)
SPEC = ContextVar("SPEC", 0)
CHECK_OOB = ContextVar("CHECK_OOB", 0)
# allreduce algorithm over sharded tensors (tinygrad's switches): RING=2 / ALL2ALL=2 force one; at 1 (RING's default)
# the algorithm is used for more than 2 devices and more than RING_ALLREDUCE_THRESHOLD elements, else every device
# copies every other device's value (naive)
RING = ContextVar("RING", 1)
ALL2ALL = ContextVar("ALL2ALL", 0)
# VIZ=1: record every rewrite and serve the page when the script ends (-1: serve while it runs, never wait at exit);
# it turns PROFILE on, and TRACK_MATCH_STATS to 2 (record and save every match), as in tinygrad
VIZ = ContextVar("VIZ", 0)
TRACK_MATCH_STATS = ContextVar("TRACK_MATCH_STATS", 2 if VIZ.value else 0)
PROFILE = ContextVar("PROFILE", 1 if VIZ.value else 0)
DEFAULT_FLOAT = ContextVar("DEFAULT_FLOAT", "float32")
DEFAULT_INT = ContextVar("DEFAULT_INT", "int32")
# tinygrad's cache switches: CACHELEVEL=0 neither reads nor writes cached values (BEAM's choices, diskcache_get/put;
# compiled kernels are still kept, as build output); IGNORE_BEAM_CACHE=1 searches again and stores the new choice
CACHELEVEL = ContextVar("CACHELEVEL", 2)
IGNORE_BEAM_CACHE = ContextVar("IGNORE_BEAM_CACHE", 0)
# tinygrad's backend switches, read by its programs and tests; tinyhybrid has none of these backends, so they stay off
IMAGE = ContextVar("IMAGE", 0)
CPU_LLVM = ContextVar("CPU_LLVM", 0)
AMD_LLVM = ContextVar("AMD_LLVM", 0)
EMULATE = ContextVar("EMULATE", "")
# the scheduler's and planner's switches: SPLIT_REDUCEOP=0 keeps a GPU's long reduces in one kernel (see
# schedule/kernelize.pm_split_reduces); NOLOCALS=1 plans GPU kernels without work-groups (one work-item per group)
SPLIT_REDUCEOP = ContextVar("SPLIT_REDUCEOP", 1)
# TRANSCENDENTAL=2 computes exp2, log2 and sin of every float type from other ops (codegen/decomp/transcendental.py), as the
# renderers do for a type they have no instruction for (PTX's float64)
TRANSCENDENTAL = ContextVar("TRANSCENDENTAL", 1)
NOLOCALS = ContextVar("NOLOCALS", 0)
# the CPU device's worker threads (0: the CPUs this process may use), and the threads that compile kernels and time
# BEAM's candidates (PARALLEL; 0: one)
NUM_CPU_THREADS = ContextVar("NUM_CPU_THREADS", _core.hcq.usable_cpu_count())
PARALLEL = ContextVar("PARALLEL", NUM_CPU_THREADS.value // max(1, getenv("PYTEST_XDIST_WORKER_COUNT", 1)))
# tinygrad's other switches, importable and accepted by Context(...) so that its scripts run unchanged; none changes a
# value here.
# WINO: convolutions stay direct (no Winograd rewrite); FLOAT16, ALLOW_TF32: no implicit precision change is made;
# NO_MEMORY_PLANNER, PCONTIG, USE_ATOMICS, FUSE_OPTIM, DISABLE_FAST_IDIV, MAX_KERNEL_BUFFERS, MAX_BUFFER_SIZE,
# TUPLE_ORDER: scheduling details of tinygrad's; SCACHE, CCACHE: caches this project keeps always;
# VALIDATE_WITH_CPU, CAPTURE_PROCESS_REPLAY, DEBUG_RANGEIFY, TRACEMETA, NO_COLOR, NULL_ALLOW_COPYOUT,
# ALLOW_DEVICE_USAGE, DISALLOW_BROADCAST, ALLREDUCE_CAST, OPENPILOT_HACKS, EMULATED_DTYPES: debugging and special builds
WINO, FLOAT16, ALLOW_TF32 = ContextVar("WINO", 0), ContextVar("FLOAT16", 0), ContextVar("ALLOW_TF32", 0)
NO_MEMORY_PLANNER = ContextVar("NO_MEMORY_PLANNER", 0)
PCONTIG, USE_ATOMICS, FUSE_OPTIM = ContextVar("PCONTIG", 0), ContextVar("USE_ATOMICS", 0), ContextVar("FUSE_OPTIM", 0)
DISABLE_FAST_IDIV = ContextVar("DISABLE_FAST_IDIV", 1)
MAX_KERNEL_BUFFERS, MAX_BUFFER_SIZE, TUPLE_ORDER = ContextVar("MAX_KERNEL_BUFFERS", 0), ContextVar("MAX_BUFFER_SIZE", 0), ContextVar("TUPLE_ORDER", 1)
SCACHE = ContextVar("SCACHE", 1)
CCACHE, VALIDATE_WITH_CPU = ContextVar("CCACHE", 1), ContextVar("VALIDATE_WITH_CPU", 0)
# freed device memory is kept for the next buffer of its size (Allocator.free); LRU=0: it goes back at once
LRU = ContextVar("LRU", 1)
CAPTURE_PROCESS_REPLAY, DEBUG_RANGEIFY = ContextVar("CAPTURE_PROCESS_REPLAY", 0), ContextVar("DEBUG_RANGEIFY", 0)
TRACEMETA, NO_COLOR = ContextVar("TRACEMETA", 1), ContextVar("NO_COLOR", 0)
NULL_ALLOW_COPYOUT, ALLOW_DEVICE_USAGE = ContextVar("NULL_ALLOW_COPYOUT", 0), ContextVar("ALLOW_DEVICE_USAGE", 1)
DISALLOW_BROADCAST, ALLREDUCE_CAST = ContextVar("DISALLOW_BROADCAST", 0), ContextVar("ALLREDUCE_CAST", 1)
OPENPILOT_HACKS, EMULATED_DTYPES = ContextVar("OPENPILOT_HACKS", 0), ContextVar("EMULATED_DTYPES", "")
CI = os.getenv("CI", "") != ""
OSX = sys.platform == "darwin"
WIN = sys.platform == "win32"


def is_training(tensor_cls: type) -> bool:
  """Whether layers run in training mode: Tensor.training (Tensor.train()) or Context(TRAINING=1)."""
  return bool(getattr(tensor_cls, "training", False) or TRAINING)


class GlobalCounters:
  """What the kernels run since the last reset() did, as in tinygrad: how many ran, their operations and memory
  traffic (estimated when a kernel is lowered: its arithmetic per iteration times its iterations, the bytes of its
  buffers), and their time (measured only with DEBUG>=2). mem_used, the bytes of buffers allocated now, is never
  reset."""
  global_ops: ClassVar[int] = 0
  global_mem: ClassVar[int] = 0
  time_sum_s: ClassVar[float] = 0.0
  kernel_count: ClassVar[int] = 0
  mem_used: ClassVar[int] = 0

  @staticmethod
  def reset() -> None: GlobalCounters.global_ops, GlobalCounters.global_mem, GlobalCounters.time_sum_s, GlobalCounters.kernel_count = 0, 0, 0.0, 0


_COLORS = ("black", "red", "green", "yellow", "blue", "magenta", "cyan", "white")


def colored(st: str, color: str | None, background: bool = False) -> str:
  """st in an ANSI color (tinygrad's helper); an upper-case name is the bright variant."""
  if color is None: return st
  code = _COLORS.index(color.lower()) + (40 if background else 30) + (60 if color.isupper() else 0)
  return f"\x1b[{code}m{st}\x1b[0m"


def fetch(url: str, name: str | pathlib.Path | None = None, subdir: str | None = None, gunzip: bool = False,
          allow_caching: bool = not getenv("DISABLE_HTTP_CACHE"), headers: dict[str, str] | None = None,
          sha256: str | None = None) -> pathlib.Path:
  """The file at url, downloaded once into the cache (TINYHYBRID_CACHE/downloads, under `subdir`) with a progress bar
  and kept by `name` (default: a hash of the url, headers and gunzip; a Path or a name with a '/' is the file itself);
  gunzip unpacks it on the way, and a sha256 given must match. A local path ("/..." or "./...") is returned as it is,
  as in tinygrad. A download that fails leaves nothing behind."""
  if url.startswith(("/", ".")): return pathlib.Path(url)
  import urllib.request  # here: http and ssl cost every process that imports tinyhybrid 5 MB and 15 ms
  from tqdm import tqdm
  from tinyhybrid.runtime import diskcache
  if name is not None and (isinstance(name, pathlib.Path) or "/" in name): path = pathlib.Path(name)
  else:
    key = "\0".join([url, str(gunzip), *(f"{k.strip()}:{v.strip()}" for k, v in sorted((headers or {}).items()))])
    path = diskcache.cache_root() / "downloads" / (subdir or "") / (name or digest.sha256(key.encode()).hexdigest()[:24])
  if allow_caching and path.exists(): return path
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = diskcache.temp_beside(path)
  try:
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=60) as r, open(tmp, "wb") as f:
      total = int(r.headers.get("content-length") or 0) or None
      with tqdm(total=total, unit="B", unit_scale=True, desc=path.name, disable=total is None or total < (1 << 20)) as bar:
        while chunk := r.read(1 << 20):
          f.write(chunk)
          bar.update(len(chunk))
    if gunzip: tmp.write_bytes(gzip.decompress(tmp.read_bytes()))
    if sha256 is not None and (got := digest.sha256(tmp.read_bytes()).hexdigest()) != sha256.lower():
      raise RuntimeError(f"fetch {url}: sha256 {got}, expected {sha256}")
    os.replace(tmp, path)
  finally: tmp.unlink(missing_ok=True)
  return path


def prod(xs: Iterator[Any] | list[Any] | tuple[Any, ...], start: Any = 1) -> Any:
  """The product of the items (1 for none)."""
  return functools.reduce(lambda a, b: a * b, xs, start)


def all_same(items: list[Any] | tuple[Any, ...]) -> bool:
  return all(x == items[0] for x in items)


def flatten(items: Any) -> list[Any]:
  return [x for sub in items for x in sub]


def dedup(items: Iterable[Any]) -> list[Any]:
  """The items without repeats, first occurrences in order."""
  return list(dict.fromkeys(items))


def argfix(*x: Any) -> tuple[Any, ...]:
  """f(1, 2), f((1, 2)) and f([1, 2]) all as (1, 2): how tinygrad's shape arguments are read."""
  return tuple(x[0]) if len(x) == 1 and isinstance(x[0], (tuple, list)) else x


def postorder(root: Any, children: Callable[[Any], Iterable[Any]], done: Any = ()) -> list[Any]:
  """The nodes under root (itself included) that are not in `done`, each after its children: the order a recursive
  pass would finish them in, walked with an explicit stack so a graph as deep as a 10^5-op chain does not recurse."""
  out: list[Any] = []
  seen = {root}
  stack = [(root, iter(children(root)))]
  while stack:
    node, it = stack[-1]
    for c in it:
      if c not in seen and c not in done:
        seen.add(c)
        stack.append((c, iter(children(c))))
        break
    else:
      stack.pop()
      out.append(node)
  return out


def ceildiv(num: Any, amt: Any) -> Any:
  """num / amt rounded up. A symbolic num that is never negative (a UOp) is (num + amt - 1) // amt, which simplifies
  where -(-num // amt) would not."""
  if hasattr(num, "vmin") and num.vmin >= 0 and (amt > 0 if isinstance(amt, int) else amt.vmin > 0): return (num + amt - 1) // amt
  return int(r) if isinstance(r := -(-num // amt), float) else r
def round_up(num: int, amt: int) -> int: return ceildiv(num, amt) * amt
def round_down(num: int, amt: int) -> int: return num // amt * amt
def next_power2(x: int) -> int: return 1 if x <= 1 else 1 << (x - 1).bit_length()
def all_int(t: Sequence[Any]) -> bool: return all(isinstance(s, int) for s in t)
def argsort(x: Sequence[Any]) -> Any: return type(x)(sorted(range(len(x)), key=x.__getitem__))  # type: ignore[call-arg]
def make_tuple(x: int | Sequence[int], cnt: int) -> tuple[int, ...]: return (x,) * cnt if isinstance(x, int) else tuple(x)
def to_tuple(x: Any) -> tuple[Any, ...]: return x if isinstance(x, tuple) else (x,)
def is_image_shape(shape: Any) -> bool: return shape is not None and len(shape) == 3 and shape[-1] == 4
def cmod(x: int, y: int) -> int: return x - cdiv(x, y) * y  # C's remainder: the sign of x
def floordiv(x: int, y: int) -> int: return x // y if y != 0 else 0
def floormod(x: int, y: int) -> int: return x - floordiv(x, y) * y
def lo32(x: Any) -> Any: return x & 0xFFFFFFFF
def hi32(x: Any) -> Any: return x >> 32
def data64(x: Any) -> tuple[Any, Any]: return (x >> 32, x & 0xFFFFFFFF)  # (high, low)
def data64_le(x: Any) -> tuple[Any, Any]: return (x & 0xFFFFFFFF, x >> 32)  # (low, high)
def to_be32(v: int) -> int: return int.from_bytes((v & 0xFFFFFFFF).to_bytes(4, "little"), "big")
def to_be64(v: int) -> int: return int.from_bytes((v & (1 << 64) - 1).to_bytes(8, "little"), "big")
def i2u(bits: int, value: int) -> int: return value if value >= 0 else (1 << bits) + value


def get_shape(x: Any) -> tuple[int, ...]:
  """The shape of nested sequences (a str, a 0-d array and a scalar have none); ragged nesting is a ValueError."""
  if not hasattr(x, "__len__") or isinstance(x, str) or getattr(x, "shape", None) == (): return ()
  subs = [get_shape(xi) for xi in x]
  if not all_same(subs): raise ValueError(f"inhomogeneous shape from {x}")
  return (len(subs),) + (subs[0] if subs else ())


def fully_flatten(x: Any) -> list[Any]:
  """The leaves of nested sequences (or arrays) in order; a 0-d array gives its one value."""
  if not (hasattr(x, "__len__") and hasattr(x, "__getitem__")) or isinstance(x, str): return [x]
  if getattr(x, "shape", None) == (): return [x[()]]
  return [leaf for sub in x for leaf in fully_flatten(sub)]


def merge_dicts(ds: Iterable[dict[Any, Any]]) -> dict[Any, Any]:
  """The union of dicts; one key with two values is a RuntimeError."""
  out: dict[Any, Any] = {}
  for d in ds:
    for k, v in d.items():
      if k in out and out[k] != v: raise RuntimeError(f"merge_dicts: {k!r} has two values, {out[k]!r} and {v!r}")
      out[k] = v
  return out


def strip_parens(s: str) -> str:
  """s without one pair of outer parentheses, when they enclose all of it."""
  if not (s[:1] == "(" and s[-1:] == ")"): return s
  depth = 0
  for c in s[1:-1]:
    depth += (c == "(") - (c == ")")
    if depth < 0: return s
  return s[1:-1] if depth == 0 else s


def flat_to_grouped(padding: Sequence[T]) -> tuple[tuple[T, T], ...]:
  """torch's flat padding (left, right, top, bottom, ...) as ((..., (top, bottom), (left, right))."""
  return tuple(zip(padding[-2::-2], padding[::-2]))


def resolve_pool_pads(padding: int | Sequence[int], dims: int) -> Sequence[int]:
  """A pool's padding as 2*dims numbers in flat (torch) order, from an int, one per dim, or 2*dims of them."""
  if isinstance(padding, int): return [padding] * 2 * dims
  if len(padding) == 2 * dims: return padding
  if len(padding) != dims: raise ValueError(f"Padding must be an int or a sequence of length {dims} or {2 * dims}, but got {padding=} with {dims=}.")
  return [p for p in padding for _ in range(2)][::-1]


def get_child(obj: Any, key: str) -> Any:
  """obj's member at a dotted path ("layers.0.attn.wq"): numbers index, names look up a dict key or an attribute."""
  for k in key.split("."):
    obj = obj[int(k)] if k.isnumeric() else obj[k] if isinstance(obj, dict) else getattr(obj, k)
  return obj


def canonicalize_strides(shape: Sequence[Any], strides: Sequence[Any]) -> tuple[Any, ...]:
  return tuple(0 if s == 1 else st for s, st in zip(shape, strides))  # a dimension of size 1 moves nowhere


@functools.cache
def strides_for_shape(shape: tuple[Any, ...]) -> tuple[Any, ...]:
  """The row-major strides of shape, 0 for its dimensions of size 1 (tinygrad's)."""
  if not shape: return ()
  strides = [1]
  for d in reversed(shape[1:]): strides.append(strides[-1] * d)
  return canonicalize_strides(shape, strides[::-1])


def to_function_name(s: str) -> str:
  """s as a C identifier: letters, digits and _ kept, any other character as its two hex digits."""
  return "".join(c if c.isascii() and (c.isalnum() or c == "_") else f"{ord(c):02X}" for c in ansistrip(s))


def ansilen(s: str) -> int: return len(ansistrip(s))
def ansipad(s: str, w: int) -> str: return s + " " * max(w - ansilen(s), 0)


def fromimport(mod: str, frm: str) -> Any: return getattr(__import__(mod, fromlist=[frm]), frm)
def size_to_str(n: int) -> str:
  return next((f"{n / d:.2f} {unit}" for d, unit in ((1 << 30, "GB"), (1 << 20, "MB"), (1 << 10, "KB")) if n >= d), f"{n} B")
def colorize_float(x: float) -> str: return colored(f"{x:7.2f}x", "green" if x < 0.75 else "red" if x > 1.15 else "yellow")
def pluralize(st: str, cnt: int) -> str: return f"{cnt} {st}" + ("" if cnt == 1 else "s")


class count:  # noqa: N801 (tinygrad's name)
  """itertools.count that pickles (itertools' stopped pickling in Python 3.14)."""
  def __init__(self, start: int = 0, step: int = 1): self.n, self.step = start, step
  def __iter__(self) -> count: return self
  def __next__(self) -> int:
    self.n += self.step
    return self.n - self.step


# code objects and modules pickle (tinygrad's helpers make them so): a rule's lambda travels as its code and the
# globals it names (uop.ops.deconstruct_function), and a module among those globals as its name. Code is marshalled,
# so it loads only into the Python version that wrote it, which is what pickling to a worker process needs.
def _load_code(raw: bytes) -> types.CodeType: return marshal.loads(raw)
copyreg.pickle(types.CodeType, lambda code: (_load_code, (marshal.dumps(code),)))
copyreg.pickle(types.ModuleType, lambda module: (importlib.import_module, (module.__name__,)))


class disable_gc(contextlib.ContextDecorator):  # noqa: N801 (tinygrad's name)
  """Turns the garbage collector off for a block (or a decorated call), back to how it was after."""
  def _recreate_cm(self) -> disable_gc: return type(self)()  # a recursive call gets its own saved state
  def __enter__(self) -> None:
    self.was_enabled = gc.isenabled()
    gc.disable()
  def __exit__(self, *exc: object) -> None:
    if self.was_enabled: gc.enable()


# host-side spans and markers for a profile, as tinygrad records them (PROFILE=1); devices keep their own events
def perf_counter_us() -> decimal.Decimal: return decimal.Decimal(time.perf_counter_ns()) / 1000


@dataclass(frozen=True)
class TracingKey:
  display_name: str
  keys: tuple[Any, ...] = ()
  ret: Any = None
  tb: tuple[tuple[Any, ...], ...] | None = None


class ProfileEvent:
  pass


@dataclass
class ProfileRangeEvent(ProfileEvent):
  device: str
  name: str | TracingKey
  st: decimal.Decimal
  en: decimal.Decimal | None = None
  profile_key: bytes | None = None


@dataclass(frozen=True)
class ProfilePointEvent(ProfileEvent):
  device: str
  name: str
  key: Any
  arg: Any = field(default_factory=dict)
  ts: decimal.Decimal = field(default_factory=perf_counter_us)


cpu_events: list[ProfileEvent] = []


@contextlib.contextmanager
def cpu_profile(name: str | TracingKey, device: str = "TINY", display: bool = True, profile_key: bytes | None = None) -> Iterator[ProfileRangeEvent]:
  """A span of host time: yields its event, which gets its end (and, under PROFILE, joins cpu_events) on exit."""
  ev = ProfileRangeEvent(device, name, perf_counter_us(), profile_key=profile_key)
  try: yield ev
  finally:
    ev.en = perf_counter_us()
    if PROFILE and display: cpu_events.append(ev)


def profile_marker(name: str, color: str = "gray") -> None:
  cpu_events.append(ProfilePointEvent("TINY", "marker", None, {"name": name, "color": color}))


def system(cmd: str, **kwargs: Any) -> str:
  """A command's stdout and stderr, stripped; a nonzero exit is a RuntimeError with its output."""
  import subprocess
  try: return subprocess.check_output(cmd.split(), stderr=subprocess.STDOUT, **kwargs).decode().strip()
  except subprocess.CalledProcessError as e:
    raise RuntimeError(f"system: '{cmd}' failed with exit code {e.returncode}\n{(e.output or b'').decode().strip()}") from e


class Timing(contextlib.ContextDecorator):
  """`with Timing("load "):` prints how long the block took, in ms (and on_exit(ns)'s text after it)."""
  def __init__(self, prefix: str = "", on_exit: Callable[[int], str] | None = None, enabled: bool = True):
    self.prefix, self.on_exit, self.enabled = prefix, on_exit, enabled

  def __enter__(self) -> None: self.st = time.perf_counter_ns()

  def __exit__(self, *exc: object) -> None:
    self.et = time.perf_counter_ns() - self.st
    if self.enabled: print(f"{self.prefix}{self.et * 1e-6:6.2f} ms" + (self.on_exit(self.et) if self.on_exit else ""))


def temp(name: str, append_user: bool = False) -> str:
  """A path for `name` in the system's temporary directory (tinygrad's helper)."""
  return str(pathlib.Path(tempfile.gettempdir()) / (f"{name}.{os.getenv('USER', 'user')}" if append_user else name))


def mv_address(mv: memoryview) -> int:
  """The address of a memoryview's first byte (read-only ones too)."""
  import numpy as np
  return int(np.frombuffer(mv, dtype=np.uint8).ctypes.data)


# ** tinygrad's small helpers, which its scripts and tests import from here **

def time_to_str(t: float, w: int = 8) -> str:
  """A duration in seconds as a fixed-width string in s, ms or us."""
  return next((f"{t * d:{w}.2f}{unit}" for d, unit in ((1, "s "), (1e3, "ms")) if t > 10 / d), f"{t * 1e6:{w}.2f}us")


def ansistrip(s: str) -> str: return re.sub(r"\x1b\[(K|.*?m)", "", s)


def word_wrap(x: str, wrap: int = 80) -> str:
  """x broken into lines of at most `wrap` visible characters (ANSI color codes take no width)."""
  out: list[str] = []
  for line in x.splitlines() or [x]:
    while len(ansistrip(line)) > wrap:
      i = vis = 0
      while vis < wrap and i < len(line):
        m = re.match(r"\x1b\[(K|.*?m)", line[i:])
        i, vis = (i + m.end(), vis) if m is not None else (i + 1, vis + 1)
      out.append(line[:i])
      line = line[i:]
    out.append(line)
  return "\n".join(out)


def pad_bytes(b: bytes, align: int) -> bytes:
  """b padded with zero bytes to a multiple of align."""
  return b + b"\x00" * (-len(b) % align)
def cdiv(x: int, y: int) -> int: return abs(x) // abs(y) * (1, -1)[x * y < 0] if y != 0 else 0  # C's division, 0 by 0
def getbits(value: int, start: int, end: int) -> int: return (value >> start) & ((1 << (end - start + 1)) - 1)  # bits start..end
def polyN(x: Any, p: Sequence[float]) -> Any: return functools.reduce(lambda acc, c: acc * x + c, p, 0.0)  # noqa: N802 (tinygrad's name)


def partition(items: Iterable[T], pred: Callable[[T], bool]) -> tuple[list[T], list[T]]:
  """(the items pred holds for, the others), each in order."""
  yes: list[T] = []
  no: list[T] = []
  for x in items: (yes if pred(x) else no).append(x)
  return yes, no


def unwrap(x: T | None) -> T:
  if x is None: raise ValueError("unwrap: got None")
  return x


def get_single_element(x: Sequence[T]) -> T:
  if len(x) != 1: raise ValueError(f"expected one element, got {len(x)}: {x!r}")
  return x[0]


def to_mv(ptr: int, size: int) -> memoryview: return memoryview((ctypes.c_uint8 * size).from_address(ptr)).cast("B")
def from_mv(mv: memoryview, to_type: Any = ctypes.c_char) -> Any: return (to_type * len(mv)).from_buffer(mv)
def flat_mv(mv: memoryview) -> memoryview: return mv if len(mv) == 0 else mv.cast("B", shape=(mv.nbytes,))


class Profiling(contextlib.ContextDecorator):
  """cProfile around a block; prints the top `frac` of functions by `sort` (and writes the stats to fn, if given)."""
  def __init__(self, enabled: bool = True, sort: str = "cumtime", frac: float = 0.2, fn: str | None = None, ts: float = 1):
    self.enabled, self.sort, self.frac, self.fn, self.scale = enabled, sort, frac, fn, 1e3 / ts

  def __enter__(self) -> None:
    import cProfile
    self.pr = cProfile.Profile()
    if self.enabled: self.pr.enable()

  def __exit__(self, *exc: object) -> None:
    if not self.enabled: return
    self.pr.disable()
    if self.fn: self.pr.dump_stats(self.fn)
    import pstats
    stats = pstats.Stats(self.pr).strip_dirs().sort_stats(self.sort)
    fcns = stats.fcn_list  # type: ignore[attr-defined]
    for fcn in fcns[:int(len(fcns) * self.frac)]:
      _, calls, tottime, cumtime, _ = stats.stats[fcn]  # type: ignore[attr-defined]
      print(f"n:{calls:8d}  tm:{tottime * self.scale:7.2f}ms  tot:{cumtime * self.scale:7.2f}ms", colored(f"{fcn[0]}:{fcn[1]}:{fcn[2]}", "yellow"))


# tinygrad's key-value cache (diskcache_get/put, @diskcache), kept as entries of our on-disk cache: a value is pickled,
# so, as there, only a cache this user wrote should be read
def _kv_path(table: str, key: Any) -> pathlib.Path:
  from tinyhybrid.runtime import diskcache
  return diskcache.subdir("kv") / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', table)}-{digest.sha256(pickle.dumps(key)).hexdigest()[:32]}"


def diskcache_get(table: str, key: Any) -> Any:
  """The value put under (table, key), or None."""
  from tinyhybrid.runtime import diskcache
  if CACHELEVEL < 1: return None
  blob = diskcache.read(_kv_path(table, key))
  return None if blob is None else pickle.loads(blob)


def diskcache_put(table: str, key: Any, val: Any, prepickled: bool = False) -> Any:
  from tinyhybrid.runtime import diskcache
  if CACHELEVEL >= 1: diskcache.write(_kv_path(table, key), val if prepickled else pickle.dumps(val))
  return val


def diskcache_clear() -> None:
  import shutil

  from tinyhybrid.runtime import diskcache
  shutil.rmtree(diskcache.cache_root() / "kv", ignore_errors=True)


def diskcache(fn: Callable[..., T]) -> Callable[..., T]:
  """Memoizes fn on disk by its arguments (which must pickle)."""
  @functools.wraps(fn)
  def cached(*args: Any, **kwargs: Any) -> T:
    table, key = f"cache_{fn.__name__}", digest.sha256(pickle.dumps((args, kwargs))).hexdigest()
    if (ret := diskcache_get(table, key)) is not None: return ret
    return diskcache_put(table, key, fn(*args, **kwargs))
  return cached


def __getattr__(name: str) -> Any:
  # tinygrad's helpers export the device target (DEV's parser); ours is defined with the devices, which build on this
  # module, so it is looked up when first asked for
  if name == "Target":
    from tinyhybrid.device import Target
    return Target
  # tinygrad scripts import its progress bars from here: tqdm's, imported when asked for (it brings email and
  # importlib.metadata, 3 MB in every process)
  if name in ("tqdm", "trange"):
    import tqdm
    return getattr(tqdm, name)
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
