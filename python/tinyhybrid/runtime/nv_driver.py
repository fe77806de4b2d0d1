"""The NVIDIA kernel-driver layer of DEV=NV: what opens a real GPU's channels through /dev/nvidiactl, /dev/nvidiaN and
/dev/nvidia-uvm, for hcq.NVQueue (drivers/nv) to submit on. Three levels:

- `Kernel`: open, ioctl, mmap, munmap, close. `OSKernel` calls libc through cffi; tests put a fake in its place, so the
  whole open sequence runs without a GPU.
- `RMClient`: the resource manager (RM) behind /dev/nvidiactl: objects are allocated under a root client by class
  number (NV_ESC_RM_ALLOC), driven by control commands (NV_ESC_RM_CONTROL) and freed (NV_ESC_RM_FREE). `UVM`: the
  unified-memory driver, which owns the GPU's virtual address space here and maps RM's memory into it.
- `NVGPU`: one GPU, opened in the steps a user-space driver takes (each a method, so bench/nv_probe.py can time and
  report them): the root client, the card, the device and subdevice, what the GPU is and which classes it lists, UVM
  and the VA space, the usermode region (the doorbell), memory, and a channel group with a compute and a copy channel.

Memory is mapped at the same address for the CPU and the GPU (one VA), carved from a range this process reserves
below 2^40 (where GPFIFO entries and QMDs reach). Every RM status other than NV_OK raises `NVDriverError` naming the
call, the class or command and the status. Struct layouts and numbers live in runtime/nv_structs.py."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from tinyhybrid.runtime import nv_structs as S
from tinyhybrid.runtime.nv_structs import ffi

MOCK_HINT = "MOCKGPU=1 runs the mock GPU"
VA_HINTS, VA_BYTES = (0x1000000000, 0x2000000000, 0x4000000000, 0x8000000000), 1 << 30  # the shared CPU/GPU range: below 2^40
CHANNEL_VA_BYTES = 64 << 20  # per channel, for UVM to map RM's context buffers into (UVM_REGISTER_CHANNEL)
PAGE = 4096


class NVDriverError(RuntimeError):
  """A kernel-driver call that failed: the message names the call, the class or control command, and the status."""


class Kernel(Protocol):
  """The system calls the layer makes. `arg` of ioctl is a cffi pointer the call reads and writes in place; a failing
  call raises OSError. mmap with fd -1 maps anonymous shared memory; fixed_address places the mapping there (inside a
  range this process reserved), else the kernel chooses."""
  def open(self, path: str) -> int: ...
  def close(self, fd: int) -> None: ...
  def ioctl(self, fd: int, request: int, arg: Any) -> None: ...
  def mmap(self, fd: int, size: int, offset: int = 0, fixed_address: int | None = None) -> int: ...
  def munmap(self, address: int, size: int) -> None: ...
  def reserve(self, size: int, hint: int) -> int: ...


class OSKernel:
  """The real system calls, through libc."""
  O_RDWR, O_CLOEXEC = 0o2, 0o2000000
  PROT_NONE, PROT_RW, MAP_SHARED, MAP_PRIVATE, MAP_FIXED, MAP_ANONYMOUS, MAP_NORESERVE = 0, 3, 0x1, 0x2, 0x10, 0x20, 0x4000

  def __init__(self) -> None: self.libc = ffi.dlopen(None)

  def _check(self, ret: int, what: str) -> int:
    if ret == -1: raise OSError(ffi.errno, f"{what}: {os.strerror(ffi.errno)}")
    return ret

  def open(self, path: str) -> int: return self._check(self.libc.open(path.encode(), self.O_RDWR | self.O_CLOEXEC, ffi.cast("int", 0)), f"open {path}")
  def close(self, fd: int) -> None: self._check(self.libc.close(fd), f"close fd {fd}")
  def ioctl(self, fd: int, request: int, arg: Any) -> None: self._check(self.libc.ioctl(fd, request, arg), f"ioctl {request:#x} on fd {fd}")

  def _mmap(self, addr: int, size: int, prot: int, flags: int, fd: int, offset: int) -> int:
    p = self.libc.mmap(ffi.cast("void *", addr), size, prot, flags, fd, offset)
    if int(ffi.cast("intptr_t", p)) == -1: raise OSError(ffi.errno, f"mmap of {size:#x} bytes (fd {fd}): {os.strerror(ffi.errno)}")
    return int(ffi.cast("uintptr_t", p))

  def mmap(self, fd: int, size: int, offset: int = 0, fixed_address: int | None = None) -> int:
    flags = self.MAP_SHARED | (self.MAP_ANONYMOUS if fd == -1 else 0) | (self.MAP_FIXED if fixed_address is not None else 0)
    return self._mmap(fixed_address or 0, size, self.PROT_RW, flags, fd, offset)

  def munmap(self, address: int, size: int) -> None: self._check(self.libc.munmap(ffi.cast("void *", address), size), f"munmap {address:#x}")

  def reserve(self, size: int, hint: int) -> int:
    return self._mmap(hint, size, self.PROT_NONE, self.MAP_PRIVATE | self.MAP_ANONYMOUS | self.MAP_NORESERVE, -1, 0)


def open_device_file(kernel: Kernel, path: str) -> int:
  """open(path), with a missing file said plainly (no driver or GPU here)."""
  try: return kernel.open(path)
  except FileNotFoundError: raise NVDriverError(f"missing {path}: no NVIDIA kernel driver or GPU here; {MOCK_HINT}") from None
  except OSError as e: raise NVDriverError(f"cannot open {path}: {e}") from None


def _addr(p: Any) -> int: return int(ffi.cast("uintptr_t", p))
def _ioctl(kernel: Kernel, fd: int, request: int, arg: Any, what: str) -> None:
  try: kernel.ioctl(fd, request, arg)
  except OSError as e: raise NVDriverError(f"{what}: the ioctl failed: {e}") from None


class RMClient:
  """The RM API on /dev/nvidiactl under one root client (NV01_ROOT_CLIENT): handles are chosen by RM."""

  def __init__(self, kernel: Kernel, ctl_fd: int):
    self.kernel, self.fd, self.root = kernel, ctl_fd, 0
    self.root = self.alloc(0, S.NV01_ROOT_CLIENT)

  def alloc(self, parent: int, cls: int, params: Any = None, what: str = "") -> int:
    """NV_ESC_RM_ALLOC: a new object of class `cls` under `parent` (params: a cffi pointer to the class's struct)."""
    a = ffi.new("NVOS21_PARAMETERS *", {"hRoot": self.root, "hObjectParent": parent, "hClass": cls})
    if params is not None: a.pAllocParms, a.paramsSize = _addr(params), ffi.sizeof(params[0])
    call = f"NV_ESC_RM_ALLOC of class {cls:#06x}{' (' + what + ')' if what else ''} under {parent:#x}"
    _ioctl(self.kernel, self.fd, S.nv_escape(S.NV_ESC_RM_ALLOC, "NVOS21_PARAMETERS"), a, call)
    if a.status != 0: raise NVDriverError(f"{call}: RM status {S.status_name(a.status)}")
    return int(a.hObjectNew)

  def control(self, obj: int, cmd: int, params: Any, what: str = "") -> Any:
    """NV_ESC_RM_CONTROL: command `cmd` on object `obj`; RM fills `params` (a cffi pointer) in place, returned."""
    a = ffi.new("NVOS54_PARAMETERS *", {"hClient": self.root, "hObject": obj, "cmd": cmd, "params": _addr(params),
                                        "paramsSize": ffi.sizeof(params[0])})
    call = f"NV_ESC_RM_CONTROL {cmd:#010x}{' (' + what + ')' if what else ''} on {obj:#x}"
    _ioctl(self.kernel, self.fd, S.nv_escape(S.NV_ESC_RM_CONTROL, "NVOS54_PARAMETERS"), a, call)
    if a.status != 0: raise NVDriverError(f"{call}: RM status {S.status_name(a.status)}")
    return params

  def free(self, parent: int, handle: int) -> None:
    """NV_ESC_RM_FREE of one object (and whatever RM keeps under it)."""
    a = ffi.new("NVOS00_PARAMETERS *", {"hRoot": self.root, "hObjectParent": parent, "hObjectOld": handle})
    call = f"NV_ESC_RM_FREE of {handle:#x} under {parent:#x}"
    _ioctl(self.kernel, self.fd, S.nv_escape(S.NV_ESC_RM_FREE, "NVOS00_PARAMETERS"), a, call)
    if a.status != 0: raise NVDriverError(f"{call}: RM status {S.status_name(a.status)}")


UVM_NAMES = {S.UVM_INITIALIZE: "UVM_INITIALIZE", S.UVM_MM_INITIALIZE: "UVM_MM_INITIALIZE", S.UVM_REGISTER_GPU: "UVM_REGISTER_GPU",
             S.UVM_UNREGISTER_GPU: "UVM_UNREGISTER_GPU", S.UVM_REGISTER_GPU_VASPACE: "UVM_REGISTER_GPU_VASPACE",
             S.UVM_UNREGISTER_GPU_VASPACE: "UVM_UNREGISTER_GPU_VASPACE", S.UVM_REGISTER_CHANNEL: "UVM_REGISTER_CHANNEL",
             S.UVM_UNREGISTER_CHANNEL: "UVM_UNREGISTER_CHANNEL", S.UVM_CREATE_EXTERNAL_RANGE: "UVM_CREATE_EXTERNAL_RANGE",
             S.UVM_MAP_EXTERNAL_ALLOCATION: "UVM_MAP_EXTERNAL_ALLOCATION", S.UVM_FREE: "UVM_FREE"}


class UVM:
  """/dev/nvidia-uvm: its requests are the bare numbers of uvm_ioctl.h, and every params struct ends in rmStatus."""

  def __init__(self, kernel: Kernel, fd: int): self.kernel, self.fd = kernel, fd

  def call(self, cmd: int, params: Any, fd: int | None = None) -> Any:
    call = f"{UVM_NAMES.get(cmd, 'UVM ioctl')} ({cmd:#x})"
    _ioctl(self.kernel, self.fd if fd is None else fd, cmd, params, call)
    if params.rmStatus != 0: raise NVDriverError(f"{call}: RM status {S.status_name(params.rmStatus)}")
    return params


@dataclass
class Memory:
  """An allocation: `host` is its CPU address (0: not mapped for the CPU), `gpu` its GPU address (== host when both)."""
  handle: int
  host: int
  gpu: int
  size: int
  where: str  # "vidmem", "sysmem" (host pages) or "rm-sysmem"

  @property
  def ring(self) -> tuple[int, int, int]: return (self.host, self.gpu, self.size)  # what hcq.NVQueue takes

  def view(self, offset: int = 0, size: int | None = None) -> Any:
    """The CPU mapping as a cffi buffer (a memoryview-like object of bytes)."""
    if not self.host: raise NVDriverError(f"{self.where} memory at GPU address {self.gpu:#x} has no CPU mapping")
    return ffi.buffer(ffi.cast("char *", self.host + offset), self.size - offset if size is None else size)


@dataclass
class Channel:
  """A GPFIFO channel as hcq.NVQueue needs it: its ring, the host addresses of GPPut/GPGet (USERD), the token."""
  engine: str  # "compute" or "copy"
  handle: int
  obj_class: int
  obj: int
  gpfifo: tuple[int, int, int]  # (host, gpu, bytes)
  entries: int
  userd_host: int
  token: int
  uvm_base: int

  @property
  def gp_put(self) -> int: return self.userd_host + S.USERD_GP_PUT
  @property
  def gp_get(self) -> int: return self.userd_host + S.USERD_GP_GET


@dataclass
class GPUInfo:
  driver: str = ""
  gpu_id: int = 0
  minor: int = 0
  pci: str = ""
  device_instance: int = 0
  name: str = ""
  arch: int = 0
  implementation: int = 0
  uuid: bytes = b""
  classes: list[int] = field(default_factory=list)

  @property
  def arch_name(self) -> str: return S.ARCHITECTURES.get(self.arch, f"{self.arch:#x}")
  @property
  def uuid_str(self) -> str:
    h = self.uuid.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _pick(listed: list[int], table: dict[int, str], what: str) -> int:
  """The first class of `table` (newest first) the GPU lists: chosen by what it supports, never assumed."""
  for cls in table:
    if cls in listed: return cls
  raise NVDriverError(f"the GPU lists no {what} class known here (knows {', '.join(f'{c:#06x}' for c in table)})")


class NVGPU:
  """One NVIDIA GPU opened through the kernel driver. `open()` runs every step; bench/nv_probe.py runs them one by one.
  `close()` undoes what was done, newest first (RM objects freed in reverse order), and returns the errors it met."""

  def __init__(self, kernel: Kernel | None = None, index: int = 0):
    self.kernel: Kernel = kernel if kernel is not None else OSKernel()
    self.index, self.info = index, GPUInfo()
    self._undo: list[tuple[str, Callable[[], None]]] = []
    self.ctl_fd = self.dev_fd = self.uvm_fd = -1
    self.rm: RMClient | None = None
    self.uvm: UVM | None = None
    self.device = self.subdevice = self.virtmem = self.vaspace = self.usermode = 0
    self.compute_class = self.dma_class = self.gpfifo_class = self.usermode_class = 0
    self.va_base = self.va_next = self.va_end = 0
    self.usermode_host = 0
    self.channels: list[Channel] = []
    self.attach_error = ""
    self._host_handle = 0x1000  # OS-descriptor memory takes a handle from the caller (NVOS02 hObjectNew)

  # ---- bookkeeping
  def _on_close(self, what: str, fn: Callable[[], None]) -> None: self._undo.append((what, fn))

  def _rm(self) -> RMClient:
    if self.rm is None: raise NVDriverError("the RM client is not open (open_control() first)")
    return self.rm

  def _uvm(self) -> UVM:
    if self.uvm is None: raise NVDriverError("UVM is not open (open_uvm() first)")
    return self.uvm

  def _open(self, path: str) -> int:
    fd = open_device_file(self.kernel, path)
    self._on_close(f"close {path}", lambda: self.kernel.close(fd))
    return fd

  def _alloc(self, parent: int, cls: int, params: Any = None, what: str = "") -> int:
    rm = self._rm()
    h = rm.alloc(parent, cls, params, what)
    self._on_close(f"RM free {what or hex(cls)}", lambda: rm.free(parent, h))
    return h

  def close(self) -> list[str]:
    errors = []
    while self._undo:
      what, fn = self._undo.pop()
      try: fn()
      except Exception as e: errors.append(f"{what}: {e}")  # noqa: BLE001 - cleanup goes on past one failure
    self.rm, self.uvm, self.channels = None, None, []
    return errors

  def open(self) -> NVGPU:
    """Every step, in order: a GPU ready to submit on (its channels in self.channels)."""
    for step in (self.open_control, self.find_gpu, self.open_device, self.query, self.read_classes, self.open_uvm, self.open_vaspace,
                 self.map_usermode, self.open_channels):
      step()
    return self

  # ---- the steps
  def open_control(self) -> str:
    """/dev/nvidiactl and the root client; returns the driver's version (NV0000 SYSTEM_GET_BUILD_VERSION_V2)."""
    self.ctl_fd = self._open("/dev/nvidiactl")
    self.rm = rm = RMClient(self.kernel, self.ctl_fd)
    self._on_close("RM free root client", lambda: rm.free(0, rm.root))
    v = rm.control(rm.root, S.NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2, ffi.new("NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS *"),
                   "SYSTEM_GET_BUILD_VERSION_V2")
    self.info.driver = ffi.string(v.driverVersionBuffer).decode(errors="replace")
    return self.info.driver

  def find_gpu(self) -> GPUInfo:
    """NV_ESC_CARD_INFO (the driver's GPUs, by minor number and gpu id), NV0000 GPU_GET_ID_INFO_V2 (the device instance
    RM knows it by), and NV_ESC_ATTACH_GPUS_TO_FD (the GPU stays attached while the control fd is open)."""
    cards = ffi.new(f"nv_ioctl_card_info_t[{S.NV_MAX_DEVICES}]")
    _ioctl(self.kernel, self.ctl_fd, S.nv_escape(S.NV_ESC_CARD_INFO, "nv_ioctl_card_info_t", S.NV_MAX_DEVICES), cards, "NV_ESC_CARD_INFO")
    valid = [c for c in cards if c.valid]
    if self.index >= len(valid): raise NVDriverError(f"NV_ESC_CARD_INFO lists {len(valid)} GPU(s); GPU {self.index} is not there")
    c = valid[self.index]
    p = c.pci_info
    self.info.gpu_id, self.info.minor = int(c.gpu_id), int(c.minor_number)
    self.info.pci = f"{p.domain:04x}:{p.bus:02x}:{p.slot:02x}.{p.function} {p.vendor_id:04x}:{p.device_id:04x}"
    ids = ffi.new("NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS *", {"gpuId": self.info.gpu_id})
    self.info.device_instance = int(self._rm().control(self._rm().root, S.NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2, ids, "GPU_GET_ID_INFO_V2").deviceInstance)
    gpus = ffi.new("uint32_t[1]", [self.info.gpu_id])
    try: _ioctl(self.kernel, self.ctl_fd, S.nv_escape(S.NV_ESC_ATTACH_GPUS_TO_FD, "uint32_t"), gpus, "NV_ESC_ATTACH_GPUS_TO_FD")
    except NVDriverError as e: self.attach_error = str(e)  # opening /dev/nvidiaN attaches it too: reported, not fatal
    return self.info

  def _device_fd(self) -> int:
    """A new fd on /dev/nvidiaN, registered with the control fd (NV_ESC_REGISTER_FD) as the driver requires of every
    device fd: one per CPU mapping, since the mmap context RM_MAP_MEMORY creates lives on the fd."""
    fd = self._open(f"/dev/nvidia{self.info.minor}")
    _ioctl(self.kernel, fd, S.nv_escape(S.NV_ESC_REGISTER_FD, "nv_ioctl_register_fd_t"), ffi.new("nv_ioctl_register_fd_t *", [self.ctl_fd]),
           "NV_ESC_REGISTER_FD")
    return fd

  def open_device(self) -> tuple[int, int]:
    """/dev/nvidiaN, then NV01_DEVICE_0 (its VA spaces allocated by us: OPTIONAL_MULTIPLE_VASPACES) and NV20_SUBDEVICE_0."""
    self.dev_fd = self._device_fd()
    root = self._rm().root
    dev = ffi.new("NV0080_ALLOC_PARAMETERS *", {"deviceId": self.info.device_instance, "hClientShare": root,
                                                "vaMode": S.NV_DEVICE_ALLOCATION_VAMODE_OPTIONAL_MULTIPLE_VASPACES})
    self.device = self._alloc(root, S.NV01_DEVICE_0, dev, "NV01_DEVICE_0")
    self.subdevice = self._alloc(self.device, S.NV20_SUBDEVICE_0, ffi.new("NV2080_ALLOC_PARAMETERS *"), "NV20_SUBDEVICE_0")
    return self.device, self.subdevice

  def query(self) -> GPUInfo:
    """The GPU's name (GPU_GET_NAME_STRING), architecture (MC_GET_ARCH_INFO) and UUID (GPU_GET_GID_INFO, binary: UVM
    names the GPU by it)."""
    rm, sub = self._rm(), self.subdevice
    name = rm.control(sub, S.NV2080_CTRL_CMD_GPU_GET_NAME_STRING, ffi.new("NV2080_CTRL_GPU_GET_NAME_STRING_PARAMS *"), "GPU_GET_NAME_STRING")
    self.info.name = bytes(ffi.buffer(name.gpuNameString.ascii)).split(b"\0")[0].decode(errors="replace")
    arch = rm.control(sub, S.NV2080_CTRL_CMD_MC_GET_ARCH_INFO, ffi.new("NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS *"), "MC_GET_ARCH_INFO")
    self.info.arch, self.info.implementation = int(arch.architecture), int(arch.implementation)
    gid = ffi.new("NV2080_CTRL_GPU_GET_GID_INFO_PARAMS *", {"flags": S.NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY, "length": 16})
    rm.control(sub, S.NV2080_CTRL_CMD_GPU_GET_GID_INFO, gid, "GPU_GET_GID_INFO")
    if gid.length != 16: raise NVDriverError(f"GPU_GET_GID_INFO returned a {gid.length}-byte UUID, not 16")
    self.info.uuid = bytes(ffi.buffer(gid.data, 16))
    return self.info

  def read_classes(self) -> dict[str, int]:
    """NV0080 GPU_GET_CLASSLIST, twice (the count, then the list); picks the GPFIFO, compute, copy and usermode classes."""
    rm = self._rm()
    n = rm.control(self.device, S.NV0080_CTRL_CMD_GPU_GET_CLASSLIST, ffi.new("NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS *"), "GPU_GET_CLASSLIST").numClasses
    lst = ffi.new(f"uint32_t[{max(int(n), 1)}]")
    p = rm.control(self.device, S.NV0080_CTRL_CMD_GPU_GET_CLASSLIST,
                   ffi.new("NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS *", {"numClasses": n, "classList": _addr(lst)}), "GPU_GET_CLASSLIST")
    self.info.classes = sorted(int(lst[i]) for i in range(min(int(p.numClasses), int(n))))
    self.gpfifo_class = _pick(self.info.classes, S.GPFIFO_CLASSES, "GPFIFO channel")
    self.compute_class = _pick(self.info.classes, S.COMPUTE_CLASSES, "compute")
    self.dma_class = _pick(self.info.classes, S.DMA_CLASSES, "DMA copy")
    self.usermode_class = _pick(self.info.classes, S.USERMODE_CLASSES, "usermode")
    return {"gpfifo": self.gpfifo_class, "compute": self.compute_class, "dma": self.dma_class, "usermode": self.usermode_class}

  def open_uvm(self) -> str:
    """/dev/nvidia-uvm: UVM_INITIALIZE, UVM_MM_INITIALIZE (on a second fd; CUDA's own call fails on some systems, so a
    failure is returned, not raised), and UVM_REGISTER_GPU by the UUID RM gave."""
    self.uvm_fd = self._open("/dev/nvidia-uvm")
    self.uvm = uvm = UVM(self.kernel, self.uvm_fd)
    uvm.call(S.UVM_INITIALIZE, ffi.new("UVM_INITIALIZE_PARAMS *"))
    mm = "ok"
    try: uvm.call(S.UVM_MM_INITIALIZE, ffi.new("UVM_MM_INITIALIZE_PARAMS *", {"uvmFd": self.uvm_fd}), fd=self._open("/dev/nvidia-uvm"))
    except NVDriverError as e: mm = str(e)
    uuid = list(self.info.uuid)
    uvm.call(S.UVM_REGISTER_GPU, ffi.new("UVM_REGISTER_GPU_PARAMS *", {"gpu_uuid": [uuid], "rmCtrlFd": -1}))
    self._on_close("UVM_UNREGISTER_GPU", lambda: uvm.call(S.UVM_UNREGISTER_GPU, ffi.new("UVM_UNREGISTER_GPU_PARAMS *", {"gpu_uuid": [uuid]})))
    return mm

  def open_vaspace(self) -> tuple[int, int]:
    """NV01_MEMORY_VIRTUAL (RM's handle for DMA mappings), FERMI_VASPACE_A (page faulting, owned by UVM), registered with
    UVM; and the process's range that CPU and GPU share (reserved PROT_NONE, below 2^40). Returns (base, size)."""
    root = self._rm().root
    self.virtmem = self._alloc(self.device, S.NV01_MEMORY_VIRTUAL, ffi.new("NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS *", {"limit": 0x1FFFFFFFFFFFF}),
                               "NV01_MEMORY_VIRTUAL")
    va = ffi.new("NV_VASPACE_ALLOCATION_PARAMETERS *", {"vaBase": 0x1000, "vaSize": 0x1FFFFFB000000,
      "flags": S.NV_VASPACE_ALLOCATION_FLAGS_ENABLE_PAGE_FAULTING | S.NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED})
    self.vaspace = self._alloc(self.device, S.FERMI_VASPACE_A, va, "FERMI_VASPACE_A")
    uvm, uuid = self._uvm(), list(self.info.uuid)
    uvm.call(S.UVM_REGISTER_GPU_VASPACE, ffi.new("UVM_REGISTER_GPU_VASPACE_PARAMS *", {"gpuUuid": [uuid], "rmCtrlFd": self.ctl_fd,
                                                                                     "hClient": root, "hVaSpace": self.vaspace}))
    self._on_close("UVM_UNREGISTER_GPU_VASPACE", lambda: uvm.call(S.UVM_UNREGISTER_GPU_VASPACE,
                                                                  ffi.new("UVM_UNREGISTER_GPU_VASPACE_PARAMS *", {"gpuUuid": [uuid]})))
    for hint in VA_HINTS:  # a hint, not MAP_FIXED: nothing already mapped is replaced; another hint when it is taken
      base = self.kernel.reserve(VA_BYTES, hint)
      if base + VA_BYTES <= 1 << 40: break
      self.kernel.munmap(base, VA_BYTES)
    else: raise NVDriverError(f"the kernel placed the shared range at {base:#x}, past 2^40 (GPFIFO entries and QMDs reach below)")
    self._on_close("munmap the shared range", lambda: self.kernel.munmap(base, VA_BYTES))
    self.va_base = self.va_next = base
    self.va_end = base + VA_BYTES
    return base, VA_BYTES

  def take_va(self, size: int, align: int = PAGE) -> int:
    """A fresh stretch of the shared range (a bump allocator: this layer frees it only at close)."""
    at = (self.va_next + align - 1) // align * align
    if at + size > self.va_end: raise NVDriverError(f"the shared range is used up ({VA_BYTES >> 20} MiB)")
    self.va_next = at + size
    return at

  def _cpu_map(self, handle: int, size: int, at: int | None, what: str) -> int:
    """NV_ESC_RM_MAP_MEMORY on the control fd names a fresh device fd, which RM gives the mapping (its mmap context);
    mmap of that fd at offset 0 then maps it. `at` places it in the shared range (None: anywhere)."""
    fd = self._device_fd()
    a = ffi.new("nv_ioctl_nvos33_parameters_with_fd *", {"params": {"hClient": self._rm().root, "hDevice": self.device, "hMemory": handle,
                                                                   "length": size}, "fd": fd})
    call = f"NV_ESC_RM_MAP_MEMORY of {what} {handle:#x}"
    _ioctl(self.kernel, self.ctl_fd, S.nv_escape(S.NV_ESC_RM_MAP_MEMORY, "nv_ioctl_nvos33_parameters_with_fd"), a, call)
    if a.params.status != 0: raise NVDriverError(f"{call}: RM status {S.status_name(a.params.status)}")
    try: host = self.kernel.mmap(fd, size, 0, at)
    except OSError as e: raise NVDriverError(f"mmap of {what} {handle:#x} ({size:#x} bytes) on /dev/nvidia{self.info.minor}: {e}") from None
    self._on_close(f"munmap {what}", lambda: self.kernel.munmap(host, size))
    return host

  def _gpu_map(self, handle: int, va: int, size: int, what: str) -> None:
    """At GPU address `va`: a UVM external range, RM's DMA mapping at that fixed offset, and UVM_MAP_EXTERNAL_ALLOCATION,
    which maps it in the VA space the channels use."""
    uvm, rm = self._uvm(), self._rm()
    uvm.call(S.UVM_CREATE_EXTERNAL_RANGE, ffi.new("UVM_CREATE_EXTERNAL_RANGE_PARAMS *", {"base": va, "length": size}))
    self._on_close(f"UVM_FREE {what}", lambda: uvm.call(S.UVM_FREE, ffi.new("UVM_FREE_PARAMS *", {"base": va, "length": size})))
    d = ffi.new("NVOS46_PARAMETERS *", {"hClient": rm.root, "hDevice": self.device, "hDma": self.virtmem, "hMemory": handle, "length": size,
                                        "flags": S.NVOS46_FLAGS_FIXED_4K_SNOOP, "dmaOffset": va})
    call = f"NV_ESC_RM_MAP_MEMORY_DMA of {what} {handle:#x} at {va:#x}"
    _ioctl(self.kernel, self.ctl_fd, S.nv_escape(S.NV_ESC_RM_MAP_MEMORY_DMA, "NVOS46_PARAMETERS"), d, call)
    if d.status != 0: raise NVDriverError(f"{call}: RM status {S.status_name(d.status)}")
    if d.dmaOffset != va: raise NVDriverError(f"{call}: RM placed it at {d.dmaOffset:#x}")
    m = ffi.new("UVM_MAP_EXTERNAL_ALLOCATION_PARAMS *", {"base": va, "length": size, "rmCtrlFd": self.ctl_fd, "hClient": rm.root,
                                                         "hMemory": handle, "gpuAttributesCount": 1})
    m.perGpuAttributes[0].gpuUuid.uuid = list(self.info.uuid)
    m.perGpuAttributes[0].gpuMappingType = S.UVM_GPU_MAPPING_TYPE_READ_WRITE
    uvm.call(S.UVM_MAP_EXTERNAL_ALLOCATION, m)

  def alloc_vidmem(self, size: int, host_mapped: bool = True, contiguous: bool = False) -> Memory:
    """Video memory (NV01_MEMORY_LOCAL_USER), mapped at one address for the GPU and (host_mapped) the CPU, through BAR1."""
    size = (size + PAGE - 1) // PAGE * PAGE
    va = self.take_va(size)
    attr = (S.NVOS32_ATTR_PHYSICALITY_CONTIGUOUS if contiguous else S.NVOS32_ATTR_PHYSICALITY_ALLOW_NONCONTIGUOUS)
    p = ffi.new("NV_MEMORY_ALLOCATION_PARAMS *", {"owner": self._rm().root, "type": S.NVOS32_TYPE_IMAGE, "size": size, "alignment": PAGE,
      "limit": size - 1, "format": S.NV_MMU_PTE_KIND_GENERIC_MEMORY, "attr": attr,
      "attr2": S.NVOS32_ATTR2_ZBC_PREFER_NO_ZBC | S.NVOS32_ATTR2_GPU_CACHEABLE_YES,
      "flags": S.NVOS32_ALLOC_FLAGS_MAP_NOT_REQUIRED | S.NVOS32_ALLOC_FLAGS_MEMORY_HANDLE_PROVIDED | S.NVOS32_ALLOC_FLAGS_ALIGNMENT_FORCE |
               S.NVOS32_ALLOC_FLAGS_IGNORE_BANK_PLACEMENT | S.NVOS32_ALLOC_FLAGS_PERSISTENT_VIDMEM})
    h = self._alloc(self.device, S.NV01_MEMORY_LOCAL_USER, p, "NV01_MEMORY_LOCAL_USER")
    host = self._cpu_map(h, size, va, "vidmem") if host_mapped else 0
    self._gpu_map(h, va, size, "vidmem")
    return Memory(h, host, va, size, "vidmem")

  def alloc_sysmem(self, size: int, at: int | None = None) -> Memory:
    """Host pages (anonymous shared memory at `at`, by default a fresh stretch of the shared range), described to RM
    (NV01_MEMORY_SYSTEM_OS_DESCRIPTOR through NV_ESC_RM_ALLOC_MEMORY on the device fd) and mapped for the GPU at their
    own address: what the CPU writes there the GPU reads, and the GPU's writes (semaphores) land where the CPU looks."""
    size = (size + PAGE - 1) // PAGE * PAGE
    if at is None: at = self.kernel.mmap(-1, size, 0, self.take_va(size))
    self._host_handle += 1
    a = ffi.new("nv_ioctl_nvos02_parameters_with_fd *", {"fd": -1, "params": {"hRoot": self._rm().root, "hObjectParent": self.device,
      "hObjectNew": self._host_handle, "hClass": S.NV01_MEMORY_SYSTEM_OS_DESCRIPTOR, "flags": S.NVOS02_HOST_FLAGS, "pMemory": at,
      "limit": size - 1}})
    call = f"NV_ESC_RM_ALLOC_MEMORY of class {S.NV01_MEMORY_SYSTEM_OS_DESCRIPTOR:#06x} (NV01_MEMORY_SYSTEM_OS_DESCRIPTOR) at {at:#x}"
    _ioctl(self.kernel, self.dev_fd, S.nv_escape(S.NV_ESC_RM_ALLOC_MEMORY, "nv_ioctl_nvos02_parameters_with_fd"), a, call)
    if a.params.status != 0: raise NVDriverError(f"{call}: RM status {S.status_name(a.params.status)}")
    h, rm, dev = int(a.params.hObjectNew), self._rm(), self.device
    self._on_close("RM free host memory", lambda: rm.free(dev, h))
    self._gpu_map(h, at, size, "sysmem")
    return Memory(h, at, at, size, "sysmem")

  def alloc_rm_sysmem(self, size: int, what: str = "notifier") -> Memory:
    """System memory RM allocates itself (NV01_MEMORY_SYSTEM, uncached, PCI), GPU-mapped only: the channels' error notifier."""
    size = (size + PAGE - 1) // PAGE * PAGE
    va = self.take_va(size)
    p = ffi.new("NV_MEMORY_ALLOCATION_PARAMS *", {"owner": self._rm().root, "type": S.NVOS32_TYPE_NOTIFIER, "size": size, "alignment": PAGE,
      "limit": size - 1, "format": S.NV_MMU_PTE_KIND_GENERIC_MEMORY,
      "attr": S.NVOS32_ATTR_PHYSICALITY_ALLOW_NONCONTIGUOUS | S.NVOS32_ATTR_LOCATION_PCI,
      "attr2": S.NVOS32_ATTR2_ZBC_PREFER_NO_ZBC | S.NVOS32_ATTR2_GPU_CACHEABLE_NO,
      "flags": S.NVOS32_ALLOC_FLAGS_MAP_NOT_REQUIRED | S.NVOS32_ALLOC_FLAGS_MEMORY_HANDLE_PROVIDED | S.NVOS32_ALLOC_FLAGS_ALIGNMENT_FORCE |
               S.NVOS32_ALLOC_FLAGS_IGNORE_BANK_PLACEMENT})
    h = self._alloc(self.device, S.NV01_MEMORY_SYSTEM, p, f"NV01_MEMORY_SYSTEM {what}")
    self._gpu_map(h, va, size, what)
    return Memory(h, 0, va, size, "rm-sysmem")

  def map_usermode(self) -> int:
    """The usermode class's registers (USERMODE_BYTES) mapped for the CPU; returns the doorbell's host address
    (NOTIFY_CHANNEL_PENDING, written with a channel's work-submit token)."""
    self.usermode = self._alloc(self.subdevice, self.usermode_class, None, S.USERMODE_CLASSES.get(self.usermode_class, "usermode"))
    self.usermode_host = self._cpu_map(self.usermode, S.USERMODE_BYTES, None, "usermode")
    return self.doorbell

  @property
  def doorbell(self) -> int: return self.usermode_host + S.USERMODE_DOORBELL

  def gpu_time(self) -> int:
    """The GPU's nanosecond timer (usermode TIME_1:TIME_0, high read around low): proof the register mapping reads."""
    if not self.usermode_host: raise NVDriverError("the usermode region is not mapped")
    t = ffi.cast("uint32_t *", self.usermode_host)
    while True:
      hi = t[S.USERMODE_TIME_1 // 4]
      lo = t[S.USERMODE_TIME_0 // 4]
      if t[S.USERMODE_TIME_1 // 4] == hi: return (hi << 32) | lo

  def open_channels(self, entries: int = 1024, ring_memory: str = "vidmem") -> list[Channel]:
    """A channel group (KEPLER_CHANNEL_GROUP_A on the graphics engine's runlist), a context share in our VA space, and
    two GPFIFO channels: compute (the compute object) and copy (the DMA copy object, a graphics copy engine). Each ring
    of `entries` 8-byte entries is followed by its USERD, in one CPU-mapped allocation (vidmem, or sysmem host pages).
    Each channel is registered with UVM and its work-submit token read; then the group is scheduled."""
    if entries & (entries - 1) or entries < 2: raise ValueError("GPFIFO entries must be a power of two")
    root = self._rm().root
    grp = ffi.new("NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS *", {"engineType": S.NV2080_ENGINE_TYPE_GRAPHICS})
    self.channel_group = self._alloc(self.device, S.KEPLER_CHANNEL_GROUP_A, grp, "KEPLER_CHANNEL_GROUP_A")
    ctx = ffi.new("NV_CTXSHARE_ALLOCATION_PARAMETERS *", {"hVASpace": self.vaspace, "flags": S.NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_ASYNC})
    self.ctxshare = self._alloc(self.channel_group, S.FERMI_CONTEXT_SHARE_A, ctx, "FERMI_CONTEXT_SHARE_A")
    self.notifier = self.alloc_rm_sysmem(1 << 20)
    stride = (entries * 8 + S.USERD_BYTES + 0xFFFF) // 0x10000 * 0x10000
    self.ring_area = self.alloc_vidmem(2 * stride, contiguous=True) if ring_memory == "vidmem" else self.alloc_sysmem(2 * stride)
    uvm, uuid = self._uvm(), list(self.info.uuid)
    self.channels = []
    for i, (engine, cls) in enumerate((("compute", self.compute_class), ("copy", self.dma_class))):
      off = i * stride
      p = ffi.new("NV_CHANNEL_ALLOC_PARAMS *", {"gpFifoOffset": self.ring_area.gpu + off, "gpFifoEntries": entries,
        "hContextShare": self.ctxshare, "hObjectError": self.notifier.handle, "hObjectBuffer": self.ring_area.handle, "engineType": 0})
      p.hUserdMemory[0], p.userdOffset[0] = self.ring_area.handle, off + entries * 8
      ch = self._alloc(self.channel_group, self.gpfifo_class, p, f"{S.GPFIFO_CLASSES[self.gpfifo_class]} ({engine})")
      obj = self._alloc(ch, cls, None, (S.COMPUTE_CLASSES if engine == "compute" else S.DMA_CLASSES)[cls])
      tok = self._rm().control(ch, S.NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN,
                               ffi.new("NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS *", [0xFFFFFFFF]), "GPFIFO_GET_WORK_SUBMIT_TOKEN")
      base = self.take_va(CHANNEL_VA_BYTES, 1 << 21)
      uvm.call(S.UVM_REGISTER_CHANNEL, ffi.new("UVM_REGISTER_CHANNEL_PARAMS *", {"gpuUuid": [uuid], "rmCtrlFd": self.ctl_fd, "hClient": root,
                                                                               "hChannel": ch, "base": base, "length": CHANNEL_VA_BYTES}))
      self._on_close(f"UVM_UNREGISTER_CHANNEL {engine}", self._unregister_channel(ch))
      self.channels.append(Channel(engine, ch, cls, obj, (self.ring_area.host + off, self.ring_area.gpu + off, entries * 8), entries,
                                   self.ring_area.host + off + entries * 8 if self.ring_area.host else 0, int(tok.workSubmitToken), base))
    self._rm().control(self.channel_group, S.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE, ffi.new("NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS *", {"bEnable": 1}),
                       "GPFIFO_SCHEDULE")
    return self.channels

  def _unregister_channel(self, ch: int) -> Callable[[], None]:
    uvm, uuid, root = self._uvm(), list(self.info.uuid), self._rm().root
    return lambda: uvm.call(S.UVM_UNREGISTER_CHANNEL, ffi.new("UVM_UNREGISTER_CHANNEL_PARAMS *", {"gpuUuid": [uuid], "hClient": root, "hChannel": ch}))

  def channel(self, engine: str) -> Channel:
    for c in self.channels:
      if c.engine == engine: return c
    raise NVDriverError(f"no {engine} channel is open")
