#!/usr/bin/env python3
"""Probe a real NVIDIA GPU through tinyhybrid's kernel-driver layer (python/tinyhybrid/runtime/nv_driver.py), stage
by stage, and print one JSON line per stage: {"stage", "ok", "ms", what it read, or "error"}. It stops at the first
stage that fails, frees what it opened (newest first) and ends with a summary line. It never raises past main and
exits 0, also where there is no GPU (the first stage then says /dev/nvidiactl is missing).

    python3 bench/nv_probe.py                 # everything
    TH_PROBE_RINGS=sysmem python3 bench/nv_probe.py   # the GPFIFO rings and USERD in host memory instead of vidmem

The stages: control, find_gpu, device, query, classes, uvm, vaspace, usermode, sysmem, vidmem, channels, then two
submits with a 2-second limit each: `submit_raw` writes a GPFIFO entry and a pushbuffer semaphore release by hand
(the host methods of the GPFIFO class, clc86f.h) on the compute channel; `submit_nvqueue` runs the project's C++
encoder (hcq.NVQueue over the real ring, USERD and doorbell; a command buffer holding one signal, then the queue's
timeline release) on the copy channel when tinyhybrid._core imports, and the hand-written release there otherwise.
Both are host semaphore methods, which every channel's engine takes (a signal needs no compute or copy object). hcq.Signal has no binding that places it at
a given address, so the probe maps the host page of each signal it creates (memory it allocated) for the GPU at that
page's own address: the address the encoder writes into the release is then the GPU's too.

Imports: nv_driver needs only cffi. The tinyhybrid package is not imported (its __init__ needs the C++ module); the
C++ module is looked for in TH_CORE_DIR, build/py3XX and build/editable (a build for this Python)."""
from __future__ import annotations

import json
import os
import platform
import signal
import sys
import time
import types
from typing import Any, Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STAGE_LIMIT_S = 30  # an ioctl that blocks longer is interrupted (SIGALRM): the probe times out rather than hangs
WAIT_S = 2.0


def _stub_packages() -> None:
  """tinyhybrid and tinyhybrid.runtime as bare packages: their modules import without running the package __init__."""
  pkg = os.path.join(ROOT, "python", "tinyhybrid")
  tag = f"py{sys.version_info.major}{sys.version_info.minor}"
  core_dirs = [d for d in (os.environ.get("TH_CORE_DIR"), os.path.join(ROOT, "build", tag), os.path.join(ROOT, "build", "editable")) if d]
  if "tinyhybrid" not in sys.modules:
    m = types.ModuleType("tinyhybrid")
    m.__path__ = [pkg, *core_dirs]
    sys.modules["tinyhybrid"] = m
  if "tinyhybrid.runtime" not in sys.modules:
    r = types.ModuleType("tinyhybrid.runtime")
    r.__path__ = [os.path.join(pkg, "runtime")]
    sys.modules["tinyhybrid.runtime"] = r


def emit(rec: dict[str, Any]) -> None: print(json.dumps(rec), flush=True)


class _StageTimeout(Exception): pass


def _alarm(signum: int, frame: Any) -> None: raise _StageTimeout(f"the stage ran past {STAGE_LIMIT_S} s")


def make_fence() -> tuple[Callable[[], None], str]:
  """A full memory fence (x86 MFENCE) the hand-written submit runs between GPPut and the doorbell: writes through a
  write-combined BAR1 mapping are otherwise not ordered before the uncached doorbell write. Built as four bytes of code
  in a page of our own; elsewhere (or if the page cannot be executable) a no-op, and the submit rings twice."""
  from tinyhybrid.runtime.nv_structs import ffi
  if platform.machine() not in ("x86_64", "AMD64"): return (lambda: None), "none (not x86-64)"
  libc = ffi.dlopen(None)
  p = libc.mmap(ffi.NULL, 4096, 7, 0x22, -1, 0)  # PROT_READ|WRITE|EXEC, MAP_PRIVATE|MAP_ANONYMOUS
  if int(ffi.cast("intptr_t", p)) == -1: return (lambda: None), "none (no executable page)"
  ffi.memmove(p, b"\x0f\xae\xf0\xc3", 4)  # mfence; ret
  fn = ffi.cast("void (*)(void)", p)
  return (lambda: fn()), "mfence"


def hand_submit(gpu: Any, ch: Any, push: Any, sem_off: int, value: int, fence: Callable[[], None]) -> dict[str, Any]:
  """One GPFIFO entry pointing at six pushbuffer words: SEM_ADDR_LO..SEM_EXECUTE (host methods 0x5C-0x6C, subchannel 0)
  releasing a 64-bit `value` at push.gpu + sem_off after WFI. Then GPPut, a fence, the doorbell; waits up to WAIT_S."""
  from tinyhybrid.runtime.nv_structs import ffi
  sem_gpu = push.gpu + sem_off
  words = [(1 << 29) | (5 << 16) | (0 << 13) | (0x5C >> 2),  # INCREASING, count 5, subchannel 0, SEM_ADDR_LO
           sem_gpu & 0xFFFFFFFF, (sem_gpu >> 32) & 0x1FFFFFF, value & 0xFFFFFFFF, value >> 32,
           1 | (1 << 20) | (1 << 24)]  # OPERATION_RELEASE, RELEASE_WFI_EN, PAYLOAD_SIZE_64BIT
  sem = ffi.cast("uint64_t *", push.host + sem_off)
  sem[0] = 0
  pb = ffi.cast("uint32_t *", push.host)
  for i, w in enumerate(words): pb[i] = w
  gp_get, gp_put = ffi.cast("uint32_t *", ch.gp_get), ffi.cast("uint32_t *", ch.gp_put)
  put = 0  # the channel's first entry: the probe submits once per channel (USERD's own values are in the channels stage)
  entry = ffi.cast("uint32_t *", ch.gpfifo[0] + (put % ch.entries) * 8)
  entry[0] = push.gpu & 0xFFFFFFFC  # GP_ENTRY0_GET (address 31:2)
  entry[1] = ((push.gpu >> 32) & 0xFF) | (len(words) << 10)  # GET_HI 7:0, LEVEL_MAIN, LENGTH 30:10
  fence()
  gp_put[0] = (put + 1) % ch.entries
  fence()
  db = ffi.cast("uint32_t *", gpu.doorbell)
  db[0] = ch.token
  t0, rang = time.monotonic(), 1
  while sem[0] != value and time.monotonic() - t0 < WAIT_S:
    if rang == 1 and time.monotonic() - t0 > 0.2: db[0], rang = ch.token, 2  # once more, in case GPPut was late
    time.sleep(0.0005)
  got = int(sem[0])
  rec = {"channel": ch.engine, "via": "hand-written GPFIFO entry + SEM release", "gp_get": int(gp_get[0]), "gp_put": int(gp_put[0]),
         "value_seen": got, "value_wanted": value, "wait_ms": round((time.monotonic() - t0) * 1000, 3), "doorbells": rang}
  if got != value: raise RuntimeError(f"semaphore not released within {WAIT_S} s: " + json.dumps(rec))
  return rec


def nvqueue_submit(gpu: Any, ch: Any, push: Any, side: Any) -> dict[str, Any]:
  """hcq.NVQueue (drivers/nv's encoder) over the real channel: one command buffer with one signal, then the queue's
  timeline release; waits up to WAIT_S for the timeline."""
  from tinyhybrid._core import hcq  # type: ignore[import-not-found]
  timeline, user = hcq.Signal("nv_probe:timeline"), hcq.Signal("nv_probe:signal")
  pages = sorted({s.address & ~0xFFF for s in (timeline, user)})
  for p in pages: gpu.alloc_sysmem(4096, at=p)  # the signals' own pages, at their own addresses
  hopper = gpu.gpfifo_class >= 0xC86F
  q = hcq.NVQueue("NV:probe", hopper, ch.engine, ch.gpfifo, push.ring, side.ring, ch.gp_put, ch.gp_get, gpu.doorbell, ch.token, timeline, gpu)
  cb = hcq.CommandBuffer()
  cb.signal(user, 7)
  t0 = time.monotonic()
  v = q.submit(cb)
  from tinyhybrid.runtime.nv_structs import ffi
  rec: dict[str, Any] = {"channel": ch.engine, "via": "hcq.NVQueue", "hopper": hopper, "signal_pages": [hex(p) for p in pages], "submitted": v}
  try: q.wait(v, timeout_ms=WAIT_S * 1000)
  except Exception as e:  # noqa: BLE001 - SignalTimeout: report what the GPU got to
    rec.update(gp_get=int(ffi.cast("uint32_t *", ch.gp_get)[0]), gp_put=int(ffi.cast("uint32_t *", ch.gp_put)[0]), timeline=timeline.value,
               signal=user.value)
    raise RuntimeError(f"{type(e).__name__}: {e}; " + json.dumps(rec)) from None
  rec.update(wait_ms=round((time.monotonic() - t0) * 1000, 3), timeline=timeline.value, signal=user.value,
             gp_get=int(ffi.cast("uint32_t *", ch.gp_get)[0]))
  gpu._probe_keep = (q, timeline, user)  # the GPU mappings of the signals' pages go at close; the signals outlive them
  if user.value != 7: raise RuntimeError("the timeline was released but the command buffer's signal was not: " + json.dumps(rec))
  return rec


def pattern_check(mem: Any, seed: int) -> dict[str, Any]:
  n = min(mem.size, 1 << 16)
  data = bytes((i * 131 + seed) & 0xFF for i in range(n))
  buf = mem.view(0, n)
  buf[:] = data
  back = bytes(buf)
  bad = next((i for i in range(n) if back[i] != data[i]), None)
  if bad is not None: raise RuntimeError(f"{mem.where} at {mem.host:#x}: byte {bad} reads {back[bad]:#x}, wrote {data[bad]:#x}")
  return {"bytes_checked": n}


def main() -> int:
  t_start = time.monotonic()
  passed: list[str] = []
  failed: dict[str, Any] = {}
  gpu: Any = None
  try:
    _stub_packages()
    from tinyhybrid.runtime import nv_driver as D
    from tinyhybrid.runtime import nv_structs as S
    gpu = D.NVGPU()
  except Exception as e:  # noqa: BLE001
    emit({"stage": "import", "ok": False, "ms": 0.0, "error": f"{type(e).__name__}: {e}"})
    emit({"summary": True, "ok": False, "passed": [], "failed_stage": "import", "error": str(e)})
    return 0
  st: dict[str, Any] = {}

  def stage(name: str, fn: Callable[[], dict[str, Any]]) -> bool:
    if failed: return False
    t0 = time.monotonic()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(STAGE_LIMIT_S)
    try:
      out = fn()
      ok = True
    except BaseException as e:  # noqa: BLE001 - every failure is reported, none escapes main
      out, ok = {"error": f"{type(e).__name__}: {e}"}, False
    finally:
      signal.alarm(0)
      signal.signal(signal.SIGALRM, old)
    emit({"stage": name, "ok": ok, "ms": round((time.monotonic() - t0) * 1000, 3), **out})
    if ok: passed.append(name)
    else: failed.update(stage=name, error=out["error"])
    return ok

  def s_control() -> dict[str, Any]: return {"driver": gpu.open_control(), "root_client": hex(gpu.rm.root)}

  def s_find() -> dict[str, Any]:
    i = gpu.find_gpu()
    return {"gpu_id": hex(i.gpu_id), "minor": i.minor, "pci": i.pci, "device_instance": i.device_instance,
            "attach_gpus_to_fd": gpu.attach_error or "ok"}

  def s_device() -> dict[str, Any]:
    d, s = gpu.open_device()
    return {"device": hex(d), "subdevice": hex(s), "dev_fd": gpu.dev_fd}

  def s_query() -> dict[str, Any]:
    i = gpu.query()
    return {"name": i.name, "arch": hex(i.arch), "arch_name": i.arch_name, "implementation": hex(i.implementation), "uuid": i.uuid_str}

  def s_classes() -> dict[str, Any]:
    chosen = gpu.read_classes()
    return {"chosen": {k: hex(v) for k, v in chosen.items()}, "num_classes": len(gpu.info.classes), "classes": [hex(c) for c in gpu.info.classes]}

  def s_uvm() -> dict[str, Any]:
    mm = gpu.open_uvm()
    return {"uvm_fd": gpu.uvm_fd, "mm_initialize": mm}

  def s_vaspace() -> dict[str, Any]:
    base, size = gpu.open_vaspace()
    return {"virtmem": hex(gpu.virtmem), "vaspace": hex(gpu.vaspace), "shared_range": hex(base), "shared_bytes": size}

  def s_usermode() -> dict[str, Any]:
    db = gpu.map_usermode()
    t1 = gpu.gpu_time()
    time.sleep(0.01)
    t2 = gpu.gpu_time()
    return {"class": hex(gpu.usermode_class), "host": hex(gpu.usermode_host), "doorbell": hex(db), "gpu_time": t1, "gpu_time_advanced_ns": t2 - t1}

  def s_sysmem() -> dict[str, Any]:
    st["push"] = m = gpu.alloc_sysmem(1 << 20)
    st["side"] = gpu.alloc_sysmem(1 << 20)
    return {"host": hex(m.host), "gpu": hex(m.gpu), "size": m.size, "handle": hex(m.handle), **pattern_check(m, 1)}

  def s_vidmem() -> dict[str, Any]:
    try:
      m = gpu.alloc_vidmem(2 << 20)
    except D.NVDriverError as e:  # then without the CPU (BAR1) mapping: the rings go to host memory
      try: m = gpu.alloc_vidmem(2 << 20, host_mapped=False)
      except D.NVDriverError as e2: raise D.NVDriverError(f"CPU+GPU mapped: {e}; GPU only: {e2}") from None
      st["rings"] = "sysmem"
      return {"gpu": hex(m.gpu), "size": m.size, "host_mapped": False, "host_mapped_error": str(e), "rings_go_to": "sysmem"}
    st.setdefault("rings", os.environ.get("TH_PROBE_RINGS", "vidmem"))
    return {"host": hex(m.host), "gpu": hex(m.gpu), "size": m.size, "handle": hex(m.handle), "host_mapped": True, **pattern_check(m, 2),
            "rings_go_to": st["rings"]}

  def s_channels() -> dict[str, Any]:
    first_error: dict[str, str] = {}
    try: chs = gpu.open_channels(ring_memory=st.get("rings", "vidmem"))
    except D.NVDriverError as e:  # once more with the rings and USERD in host memory, when vidmem ones failed
      if st.get("rings", "vidmem") != "vidmem": raise
      first_error = {"vidmem_rings_error": str(e)}
      chs = gpu.open_channels(ring_memory="sysmem")
    return {**first_error, "group": hex(gpu.channel_group), "ctxshare": hex(gpu.ctxshare), "rings": gpu.ring_area.where,
            "channels": [{"engine": c.engine, "handle": hex(c.handle), "class": hex(gpu.gpfifo_class), "object_class": hex(c.obj_class),
                          "gpfifo_host": hex(c.gpfifo[0]), "gpfifo_gpu": hex(c.gpfifo[1]), "entries": c.entries, "userd_host": hex(c.userd_host),
                          "token": hex(c.token), "uvm_channel_va": hex(c.uvm_base), "gp_get": int(S.ffi.cast("uint32_t *", c.gp_get)[0]),
                          "gp_put": int(S.ffi.cast("uint32_t *", c.gp_put)[0])} for c in chs]}

  fence, fence_kind = (lambda: None), "none"

  def s_submit_raw() -> dict[str, Any]:
    nonlocal fence, fence_kind
    fence, fence_kind = make_fence()
    return {"fence": fence_kind, **hand_submit(gpu, gpu.channel("compute"), st["push"], 0x8000, 0x1234_5678_9ABC, fence)}

  def s_submit_nvqueue() -> dict[str, Any]:
    try:
      import tinyhybrid._core  # type: ignore[import-not-found]  # noqa: F401
    except Exception as e:  # noqa: BLE001 - no C++ module for this Python: the hand-written release instead
      rec = hand_submit(gpu, gpu.channel("copy"), st["push"], 0x9000, 0x42, fence)
      return {"nvqueue": f"not run: tinyhybrid._core does not import ({type(e).__name__}: {e})", **rec}
    return nvqueue_submit(gpu, gpu.channel("copy"), st["push"], st["side"])

  for name, fn in (("control", s_control), ("find_gpu", s_find), ("device", s_device), ("query", s_query), ("classes", s_classes),
                   ("uvm", s_uvm), ("vaspace", s_vaspace), ("usermode", s_usermode), ("sysmem", s_sysmem), ("vidmem", s_vidmem),
                   ("channels", s_channels), ("submit_raw", s_submit_raw), ("submit_nvqueue", s_submit_nvqueue)):
    if not stage(name, fn): break

  t0 = time.monotonic()
  try: errors = gpu.close()
  except BaseException as e:  # noqa: BLE001
    errors = [f"{type(e).__name__}: {e}"]
  emit({"stage": "close", "ok": not errors, "ms": round((time.monotonic() - t0) * 1000, 3), "errors": errors})
  emit({"summary": True, "ok": not failed, "passed": passed, "failed_stage": failed.get("stage"), "error": failed.get("error"),
        "close_errors": len(errors), "total_ms": round((time.monotonic() - t_start) * 1000, 3), "python": platform.python_version()})
  return 0


if __name__ == "__main__":
  try: rc = main()
  except BaseException as e:  # noqa: BLE001 - never past main
    emit({"summary": True, "ok": False, "error": f"{type(e).__name__}: {e}"})
    rc = 0
  sys.exit(rc)
