"""The NVIDIA kernel-driver layer (runtime/nv_driver.py, runtime/nv_structs.py) without a GPU: the ioctl structs' sizes
and field offsets and the request numbers against the numbers in NVIDIA's open kernel module headers (driver 580, as
tinygrad's generated nv_580.py records them: written here as literals, never computed from our cdef), and the whole open
sequence against a fake kernel that answers RM and UVM like the driver: which calls, in which order, with which
parameters, and the errors' messages."""
from __future__ import annotations

from typing import Any

import pytest

from tinyhybrid.runtime import nv_structs as S
from tinyhybrid.runtime.nv_driver import NVGPU, NVDriverError
from tinyhybrid.runtime.nv_structs import ffi

# (struct, sizeof, {field: offset}) from the headers (nv-ioctl.h, nvos.h, alloc/*.h, ctrl/*.h, uvm_ioctl.h at 580)
LAYOUTS: list[tuple[str, int, dict[str, int]]] = [
  ("NVOS21_PARAMETERS", 32, {"hRoot": 0, "hObjectParent": 4, "hObjectNew": 8, "hClass": 12, "pAllocParms": 16, "paramsSize": 24, "status": 28}),
  ("NVOS54_PARAMETERS", 32, {"hClient": 0, "hObject": 4, "cmd": 8, "flags": 12, "params": 16, "paramsSize": 24, "status": 28}),
  ("NVOS00_PARAMETERS", 16, {"hRoot": 0, "hObjectParent": 4, "hObjectOld": 8, "status": 12}),
  ("NVOS02_PARAMETERS", 48, {"hObjectNew": 8, "hClass": 12, "flags": 16, "pMemory": 24, "limit": 32, "status": 40}),
  ("nv_ioctl_nvos02_parameters_with_fd", 56, {"params": 0, "fd": 48}),
  ("NVOS33_PARAMETERS", 48, {"hMemory": 8, "offset": 16, "length": 24, "pLinearAddress": 32, "status": 40, "flags": 44}),
  ("nv_ioctl_nvos33_parameters_with_fd", 56, {"params": 0, "fd": 48}),
  ("NVOS46_PARAMETERS", 64, {"hDma": 8, "hMemory": 12, "offset": 16, "length": 24, "flags": 32, "flags2": 36, "kindOverride": 40,
                             "dmaOffset": 48, "status": 56}),
  ("nv_pci_info_t", 12, {"domain": 0, "bus": 4, "slot": 5, "function": 6, "vendor_id": 8, "device_id": 10}),
  ("nv_ioctl_card_info_t", 72, {"valid": 0, "pci_info": 4, "gpu_id": 16, "interrupt_line": 20, "reg_address": 24, "reg_size": 32,
                                "fb_address": 40, "fb_size": 48, "minor_number": 56, "dev_name": 60}),
  ("nv_ioctl_register_fd_t", 4, {"ctl_fd": 0}),
  ("NV0080_ALLOC_PARAMETERS", 56, {"deviceId": 0, "hClientShare": 4, "flags": 16, "vaSpaceSize": 24, "vaStartInternal": 32,
                                   "vaLimitInternal": 40, "vaMode": 48}),
  ("NV2080_ALLOC_PARAMETERS", 4, {"subDeviceId": 0}),
  ("NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS", 24, {"offset": 0, "limit": 8, "hVASpace": 16}),
  ("NV_VASPACE_ALLOCATION_PARAMETERS", 56, {"index": 0, "flags": 4, "vaSize": 8, "vaStartInternal": 16, "vaLimitInternal": 24,
                                            "bigPageSize": 32, "vaBase": 40, "pasid": 48}),
  ("NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS", 20, {"hObjectError": 0, "hObjectEccError": 4, "hVASpace": 8, "engineType": 12,
                                                  "bIsCallingContextVgpuPlugin": 16}),
  ("NV_CTXSHARE_ALLOCATION_PARAMETERS", 12, {"hVASpace": 0, "flags": 4, "subctxId": 8}),
  ("NV_MEMORY_DESC_PARAMS", 24, {"base": 0, "size": 8, "addressSpace": 16, "cacheAttrib": 20}),
  ("NV_CHANNEL_ALLOC_PARAMS", 368, {"hObjectError": 0, "hObjectBuffer": 4, "gpFifoOffset": 8, "gpFifoEntries": 16, "flags": 20,
                                    "hContextShare": 24, "hVASpace": 28, "hUserdMemory": 32, "userdOffset": 64, "engineType": 128, "cid": 132,
                                    "subDeviceId": 136, "hObjectEccError": 140, "instanceMem": 144, "userdMem": 168, "ramfcMem": 192,
                                    "mthdbufMem": 216, "hPhysChannelGroup": 240, "internalFlags": 244, "errorNotifierMem": 248,
                                    "eccErrorNotifierMem": 272, "ProcessID": 296, "SubProcessID": 300, "encryptIv": 304, "decryptIv": 316,
                                    "hmacNonce": 328, "tpcConfigID": 360}),
  ("NV_MEMORY_ALLOCATION_PARAMS", 128, {"owner": 0, "type": 4, "flags": 8, "pitch": 20, "attr": 24, "attr2": 28, "format": 32, "rangeLo": 48,
                                        "rangeHi": 56, "size": 64, "alignment": 72, "offset": 80, "limit": 88, "address": 96, "ctagOffset": 104,
                                        "hVASpace": 108, "tag": 116, "numaNode": 120}),
  ("NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS", 1032, {"driverVersionBuffer": 0, "versionBuffer": 256, "titleBuffer": 768,
                                                           "changelistNumber": 1024, "officialChangelistNumber": 1028}),
  ("NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS", 32, {"gpuId": 0, "deviceInstance": 8, "gpuInstance": 24, "numaId": 28}),
  ("NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS", 16, {"numClasses": 0, "classList": 8}),
  ("NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS", 16, {"architecture": 0, "implementation": 4, "revision": 8, "subRevision": 12}),
  ("NV2080_CTRL_GPU_GET_GID_INFO_PARAMS", 268, {"index": 0, "flags": 4, "length": 8, "data": 12}),
  ("NV2080_CTRL_GPU_GET_NAME_STRING_PARAMS", 132, {"gpuNameStringFlags": 0, "gpuNameString": 4}),
  ("NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS", 3, {"bEnable": 0, "bSkipSubmit": 1, "bSkipEnable": 2}),
  ("NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS", 4, {"workSubmitToken": 0}),
  ("UVM_INITIALIZE_PARAMS", 16, {"flags": 0, "rmStatus": 8}),
  ("UVM_MM_INITIALIZE_PARAMS", 8, {"uvmFd": 0, "rmStatus": 4}),
  ("UVM_REGISTER_GPU_PARAMS", 40, {"gpu_uuid": 0, "numaEnabled": 16, "numaNodeId": 20, "rmCtrlFd": 24, "hClient": 28, "hSmcPartRef": 32,
                                   "rmStatus": 36}),
  ("UVM_UNREGISTER_GPU_PARAMS", 20, {"gpu_uuid": 0, "rmStatus": 16}),
  ("UVM_REGISTER_GPU_VASPACE_PARAMS", 32, {"gpuUuid": 0, "rmCtrlFd": 16, "hClient": 20, "hVaSpace": 24, "rmStatus": 28}),
  ("UVM_UNREGISTER_GPU_VASPACE_PARAMS", 20, {"gpuUuid": 0, "rmStatus": 16}),
  ("UVM_REGISTER_CHANNEL_PARAMS", 56, {"gpuUuid": 0, "rmCtrlFd": 16, "hClient": 20, "hChannel": 24, "base": 32, "length": 40, "rmStatus": 48}),
  ("UVM_UNREGISTER_CHANNEL_PARAMS", 28, {"gpuUuid": 0, "hClient": 16, "hChannel": 20, "rmStatus": 24}),
  ("UVM_CREATE_EXTERNAL_RANGE_PARAMS", 24, {"base": 0, "length": 8, "rmStatus": 16}),
  ("UvmGpuMappingAttributes", 36, {"gpuUuid": 0, "gpuMappingType": 16, "gpuCachingType": 20, "gpuFormatType": 24, "gpuElementBits": 28,
                                   "gpuCompressionType": 32}),
  ("UVM_MAP_EXTERNAL_ALLOCATION_PARAMS", 9264, {"base": 0, "length": 8, "offset": 16, "perGpuAttributes": 24, "gpuAttributesCount": 9240,
                                                "rmCtrlFd": 9248, "hClient": 9252, "hMemory": 9256, "rmStatus": 9260}),
  ("UVM_FREE_PARAMS", 24, {"base": 0, "length": 8, "rmStatus": 16}),
]


@pytest.mark.parametrize("name,size,offsets", LAYOUTS, ids=[x[0] for x in LAYOUTS])
def test_struct_layout(name: str, size: int, offsets: dict[str, int]):
  assert ffi.sizeof(name) == size
  for f, off in offsets.items(): assert ffi.offsetof(name, f) == off, f"{name}.{f}"


def test_ioctl_numbers():
  # _IOWR('F', nr, size): 0xC0000000 | size << 16 | 'F' << 8 | nr
  assert S.nv_escape(S.NV_ESC_RM_ALLOC, "NVOS21_PARAMETERS") == 0xC020462B
  assert S.nv_escape(S.NV_ESC_RM_CONTROL, "NVOS54_PARAMETERS") == 0xC020462A
  assert S.nv_escape(S.NV_ESC_RM_FREE, "NVOS00_PARAMETERS") == 0xC0104629
  assert S.nv_escape(S.NV_ESC_RM_ALLOC_MEMORY, "nv_ioctl_nvos02_parameters_with_fd") == 0xC0384627
  assert S.nv_escape(S.NV_ESC_RM_MAP_MEMORY, "nv_ioctl_nvos33_parameters_with_fd") == 0xC038464E
  assert S.nv_escape(S.NV_ESC_RM_MAP_MEMORY_DMA, "NVOS46_PARAMETERS") == 0xC0404657
  assert S.nv_escape(S.NV_ESC_CARD_INFO, "nv_ioctl_card_info_t", 32) == 0xC90046C8  # 32 * 72 bytes
  assert S.nv_escape(S.NV_ESC_REGISTER_FD, "nv_ioctl_register_fd_t") == 0xC00446C9
  assert S.nv_escape(S.NV_ESC_ATTACH_GPUS_TO_FD, "uint32_t") == 0xC00446D4
  # uvm_ioctl.h / uvm_linux_ioctl.h: bare numbers
  assert (S.UVM_INITIALIZE, S.UVM_MM_INITIALIZE, S.UVM_REGISTER_GPU, S.UVM_UNREGISTER_GPU) == (0x30000001, 75, 37, 38)
  assert (S.UVM_REGISTER_GPU_VASPACE, S.UVM_REGISTER_CHANNEL, S.UVM_MAP_EXTERNAL_ALLOCATION, S.UVM_FREE, S.UVM_CREATE_EXTERNAL_RANGE) == \
    (25, 27, 33, 34, 73)


def test_header_numbers():
  assert (S.NV01_ROOT_CLIENT, S.NV01_DEVICE_0, S.NV20_SUBDEVICE_0, S.NV01_MEMORY_VIRTUAL) == (0x41, 0x80, 0x2080, 0x70)
  assert (S.NV01_MEMORY_SYSTEM, S.NV01_MEMORY_LOCAL_USER, S.NV01_MEMORY_SYSTEM_OS_DESCRIPTOR) == (0x3E, 0x40, 0x71)
  assert (S.FERMI_VASPACE_A, S.FERMI_CONTEXT_SHARE_A, S.KEPLER_CHANNEL_GROUP_A) == (0x90F1, 0x9067, 0xA06C)
  assert {"HOPPER_CHANNEL_GPFIFO_A": 0xC86F, "HOPPER_COMPUTE_A": 0xCBC0, "HOPPER_DMA_COPY_A": 0xC8B5, "HOPPER_USERMODE_A": 0xC661} == \
    {n: c for t in (S.GPFIFO_CLASSES, S.COMPUTE_CLASSES, S.DMA_CLASSES, S.USERMODE_CLASSES) for c, n in t.items() if n.startswith("HOPPER")}
  assert (S.NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2, S.NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2, S.NV0080_CTRL_CMD_GPU_GET_CLASSLIST) == \
    (0x13E, 0x205, 0x800201)
  assert (S.NV2080_CTRL_CMD_GPU_GET_NAME_STRING, S.NV2080_CTRL_CMD_GPU_GET_GID_INFO, S.NV2080_CTRL_CMD_MC_GET_ARCH_INFO) == \
    (0x20800110, 0x2080014A, 0x20801701)
  assert (S.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE, S.NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN) == (0xA06C0101, 0xC36F0108)
  assert S.ARCHITECTURES[0x180] == "GH100"
  assert (S.USERD_GP_GET, S.USERD_GP_PUT, S.USERMODE_DOORBELL, S.USERMODE_TIME_0) == (0x88, 0x8C, 0x90, 0x80)  # clc86f.h, clc361.h
  assert S.NVOS02_HOST_FLAGS == 0x40001010  # PHYSICALITY_NONCONTIGUOUS 7:4, COHERENCY_CACHED 15:12, MAPPING_NO_MAP 31:30
  assert S.NVOS46_FLAGS_FIXED_4K_SNOOP == 0x8110  # CACHE_SNOOP_ENABLE 4:4, PAGE_SIZE_4KB 11:8, DMA_OFFSET_FIXED_TRUE 15:15
  assert S.NV_VASPACE_ALLOCATION_FLAGS_ENABLE_PAGE_FAULTING | S.NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED == 0x48  # BIT(6) | BIT(3)
  assert {k: S.NV_STATUS_NAMES[k] for k in (0x1F, 0x22, 0x33, 0x51, 0x56, 0x68)} == {
    31: "NV_ERR_INVALID_ARGUMENT", 34: "NV_ERR_INVALID_CLASS", 51: "NV_ERR_INVALID_OBJECT_HANDLE", 81: "NV_ERR_NO_MEMORY",
    86: "NV_ERR_NOT_SUPPORTED", 104: "NV_ERR_UVM_ADDRESS_IN_USE"}


HOPPER_CLASSES = [0x41, 0x80, 0x2080, 0x90F1, 0x9067, 0xA06C, 0xC56F, 0xC86F, 0xC6C0, 0xCBC0, 0xC6B5, 0xC8B5, 0xC361, 0xC461, 0xC561, 0xC661]
UUID = bytes(range(0xA0, 0xB0))


class FakeKernel:
  """Answers the NVIDIA escapes and UVM requests the way the driver does on success, hands out handles, and records
  every call: ("open", path), ("RM_ALLOC", class, parent, params bytes), ("RM_CONTROL", cmd), ("RM_FREE", handle), ..."""

  def __init__(self, missing: tuple[str, ...] = (), classes: list[int] | None = None, fail: dict[int, int] | None = None):
    self.missing, self.classes, self.fail = missing, classes or HOPPER_CLASSES, fail or {}
    self.calls: list[tuple[Any, ...]] = []
    self.fds: dict[int, str] = {}
    self.next_fd, self.next_handle, self.tokens = 10, 0xCAF00000, 0x100
    self.keep: list[Any] = []
    self.alloc_params: dict[int, Any] = {}  # handle -> a copy of its alloc params (cffi struct)

  def open(self, path: str) -> int:
    if path in self.missing: raise FileNotFoundError(2, "No such file or directory")
    self.next_fd += 1
    self.fds[self.next_fd] = path
    self.calls.append(("open", path))
    return self.next_fd

  def close(self, fd: int) -> None: self.calls.append(("close", self.fds.pop(fd)))

  def mmap(self, fd: int, size: int, offset: int = 0, fixed_address: int | None = None) -> int:
    self.calls.append(("mmap", self.fds.get(fd, "anon"), size, fixed_address))
    if fixed_address is not None: return fixed_address
    buf = ffi.new(f"uint8_t[{size}]")
    self.keep.append(buf)
    return int(ffi.cast("uintptr_t", buf))

  def munmap(self, address: int, size: int) -> None: self.calls.append(("munmap", size))
  def reserve(self, size: int, hint: int) -> int: return hint

  def _handle(self) -> int:
    self.next_handle += 1
    return self.next_handle

  def ioctl(self, fd: int, request: int, arg: Any) -> None:
    if self.fds[fd] == "/dev/nvidia-uvm":  # its requests are bare numbers
      self.calls.append(("UVM", request))
      arg.rmStatus = self.fail.get(request, 0)
      return
    assert (request >> 30) == 3 and (request >> 8) & 0xFF == ord("F"), hex(request)
    nr, size = request & 0xFF, (request >> 16) & 0x3FFF
    t = ffi.typeof(arg)
    assert size == (ffi.sizeof(arg) if t.kind == "array" else ffi.sizeof(t.item)), f"request {request:#x} for {t}"
    if nr == S.NV_ESC_RM_ALLOC:
      assert self.fds[fd] == "/dev/nvidiactl"
      copy = None
      if arg.pAllocParms:
        copy = ffi.new("uint8_t[]", arg.paramsSize)
        ffi.memmove(copy, ffi.cast("void *", arg.pAllocParms), arg.paramsSize)
      arg.hObjectNew = self._handle()
      self.alloc_params[arg.hObjectNew] = copy
      self.calls.append(("RM_ALLOC", arg.hClass, arg.hObjectParent, arg.hObjectNew))
      arg.status = self.fail.get(arg.hClass, 0)
    elif nr == S.NV_ESC_RM_CONTROL:
      self.calls.append(("RM_CONTROL", arg.cmd, arg.hObject))
      self._control(arg.cmd, ffi.cast("void *", arg.params))
      arg.status = self.fail.get(arg.cmd, 0)
    elif nr == S.NV_ESC_RM_FREE: self.calls.append(("RM_FREE", arg.hObjectOld))
    elif nr == S.NV_ESC_CARD_INFO:
      arg[0].valid, arg[0].gpu_id, arg[0].minor_number, arg[0].pci_info.vendor_id, arg[0].pci_info.device_id = 1, 0x100, 0, 0x10DE, 0x2335
      self.calls.append(("CARD_INFO",))
    elif nr == S.NV_ESC_REGISTER_FD: self.calls.append(("REGISTER_FD", self.fds[fd], arg.ctl_fd))
    elif nr == S.NV_ESC_ATTACH_GPUS_TO_FD:
      self.calls.append(("ATTACH_GPUS_TO_FD", arg[0]))
      if self.fail.get(nr): raise OSError(self.fail[nr], "Invalid argument")
    elif nr == S.NV_ESC_RM_MAP_MEMORY: self.calls.append(("RM_MAP_MEMORY", arg.params.hMemory, self.fds[arg.fd]))
    elif nr == S.NV_ESC_RM_ALLOC_MEMORY:
      assert self.fds[fd].startswith("/dev/nvidia") and fd != 0
      self.calls.append(("RM_ALLOC_MEMORY", arg.params.hClass, arg.params.pMemory, arg.params.limit))
    elif nr == S.NV_ESC_RM_MAP_MEMORY_DMA: self.calls.append(("RM_MAP_MEMORY_DMA", arg.hMemory, arg.dmaOffset, arg.flags))
    else: raise AssertionError(f"unexpected escape {nr:#x}")

  def _control(self, cmd: int, p: Any) -> None:
    if cmd == S.NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2:
      ffi.cast("NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS *", p).driverVersionBuffer = b"580.159.04"
    elif cmd == S.NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2: ffi.cast("NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS *", p).deviceInstance = 0
    elif cmd == S.NV2080_CTRL_CMD_GPU_GET_NAME_STRING:
      ffi.memmove(ffi.cast("NV2080_CTRL_GPU_GET_NAME_STRING_PARAMS *", p).gpuNameString.ascii, b"NVIDIA H200\0", 12)
    elif cmd == S.NV2080_CTRL_CMD_MC_GET_ARCH_INFO: ffi.cast("NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS *", p).architecture = 0x180
    elif cmd == S.NV2080_CTRL_CMD_GPU_GET_GID_INFO:
      g = ffi.cast("NV2080_CTRL_GPU_GET_GID_INFO_PARAMS *", p)
      assert g.flags == 2 and g.length == 16  # FORMAT_BINARY
      ffi.memmove(g.data, UUID, 16)
    elif cmd == S.NV0080_CTRL_CMD_GPU_GET_CLASSLIST:
      c = ffi.cast("NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS *", p)
      if c.classList:
        lst = ffi.cast("uint32_t *", c.classList)
        for i, k in enumerate(self.classes[:c.numClasses]): lst[i] = k
      c.numClasses = len(self.classes)
    elif cmd == S.NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN:
      self.tokens += 1
      ffi.cast("NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS *", p).workSubmitToken = self.tokens

  def of(self, kind: str) -> list[tuple[Any, ...]]: return [c for c in self.calls if c[0] == kind]
  def params(self, handle: int, ctype: str) -> Any: return ffi.cast(ctype + " *", self.alloc_params[handle])


def opened(**kw: Any) -> tuple[NVGPU, FakeKernel]:
  k = FakeKernel(**kw)
  return NVGPU(k).open(), k


def test_open_sequence():
  gpu, k = opened()
  allocs = [c[1] for c in k.of("RM_ALLOC")]
  assert allocs == [0x41, 0x80, 0x2080, 0x70, 0x90F1, 0xC661, 0xA06C, 0x9067, 0x3E, 0x40, 0xC86F, 0xCBC0, 0xC86F, 0xC8B5]
  assert [c[1] for c in k.of("RM_CONTROL")] == [0x13E, 0x205, 0x20800110, 0x20801701, 0x2080014A, 0x800201, 0x800201, 0xC36F0108, 0xC36F0108,
                                                 0xA06C0101]
  assert [c[1] for c in k.of("UVM")] == [0x30000001, 75, 37, 25, 73, 33, 73, 33, 27, 27]
  assert k.of("CARD_INFO") and k.of("ATTACH_GPUS_TO_FD") == [("ATTACH_GPUS_TO_FD", 0x100)]
  # every /dev/nvidia0 fd is registered with the control fd, the first right after it opens
  ctl = next(fd for fd, p in k.fds.items() if p == "/dev/nvidiactl")
  assert k.calls.index(("open", "/dev/nvidia0")) + 1 == k.calls.index(("REGISTER_FD", "/dev/nvidia0", ctl))
  assert len(k.of("REGISTER_FD")) == 1 + 2  # the device fd, then one per CPU mapping (usermode, the ring area)
  assert (gpu.info.name, gpu.info.arch_name, gpu.info.uuid, gpu.info.driver) == ("NVIDIA H200", "GH100", UUID, "580.159.04")
  assert gpu.info.uuid_str == "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf"
  assert (gpu.gpfifo_class, gpu.compute_class, gpu.dma_class, gpu.usermode_class) == (0xC86F, 0xCBC0, 0xC8B5, 0xC661)


def test_alloc_params():
  gpu, k = opened()
  root = gpu.rm.root
  dev = k.params(gpu.device, "NV0080_ALLOC_PARAMETERS")
  assert (dev.hClientShare, dev.vaMode) == (root, 0)
  va = k.params(gpu.vaspace, "NV_VASPACE_ALLOCATION_PARAMETERS")
  assert (va.vaBase, va.flags) == (0x1000, 0x48)
  assert k.params(gpu.channel_group, "NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS").engineType == 1  # NV2080_ENGINE_TYPE_GRAPHICS
  ctx = k.params(gpu.ctxshare, "NV_CTXSHARE_ALLOCATION_PARAMETERS")
  assert (ctx.hVASpace, ctx.flags) == (gpu.vaspace, 1)  # SUBCONTEXT_ASYNC
  area = gpu.ring_area
  assert area.where == "vidmem" and area.host == area.gpu and area.gpu + area.size <= 1 << 40
  vid = k.params(area.handle, "NV_MEMORY_ALLOCATION_PARAMS")
  assert (vid.owner, vid.size, vid.limit, vid.attr >> 27, vid.format) == (root, area.size, area.size - 1, 2, 6)  # PHYSICALITY_CONTIGUOUS
  stride = area.size // 2
  for i, ch in enumerate(gpu.channels):
    p = k.params(ch.handle, "NV_CHANNEL_ALLOC_PARAMS")
    assert (p.gpFifoOffset, p.gpFifoEntries, p.hUserdMemory[0], p.userdOffset[0]) == (area.gpu + i * stride, 1024, area.handle, i * stride + 8192)
    assert (p.hObjectBuffer, p.hObjectError, p.hContextShare, p.engineType) == (area.handle, gpu.notifier.handle, gpu.ctxshare, 0)
    assert ch.gpfifo == (area.host + i * stride, area.gpu + i * stride, 8192) and ch.gp_put == area.host + i * stride + 8192 + 0x8C
    assert ch.token == 0x101 + i
  assert [c.engine for c in gpu.channels] == ["compute", "copy"]
  assert gpu.doorbell == gpu.usermode_host + 0x90
  # the UVM channel ranges and buffers sit in the one shared range, apart
  spans = sorted([(c.uvm_base, c.uvm_base + (64 << 20)) for c in gpu.channels] + [(area.gpu, area.gpu + area.size),
                 (gpu.notifier.gpu, gpu.notifier.gpu + gpu.notifier.size)])
  assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])) and spans[0][0] >= gpu.va_base and spans[-1][1] <= gpu.va_end
  assert k.of("RM_MAP_MEMORY_DMA")[-1] == ("RM_MAP_MEMORY_DMA", area.handle, area.gpu, 0x8110)


def test_sysmem_is_an_os_descriptor_at_its_own_address():
  gpu, k = opened()
  m = gpu.alloc_sysmem(5000)
  assert (m.size, m.host, m.gpu) == (8192, m.host, m.host)
  assert k.of("RM_ALLOC_MEMORY")[-1] == ("RM_ALLOC_MEMORY", 0x71, m.host, 8191)
  assert k.of("mmap")[-1] == ("mmap", "anon", 8192, m.host)
  assert [c[1] for c in k.of("UVM")[-2:]] == [73, 33]  # CREATE_EXTERNAL_RANGE, MAP_EXTERNAL_ALLOCATION


def test_picks_classes_the_gpu_lists():
  gpu, _ = opened(classes=[0x41, 0x80, 0x2080, 0xC56F, 0xC6C0, 0xC7C0, 0xC6B5, 0xC7B5, 0xC561])
  assert (gpu.gpfifo_class, gpu.compute_class, gpu.dma_class, gpu.usermode_class) == (0xC56F, 0xC7C0, 0xC7B5, 0xC561)
  with pytest.raises(NVDriverError, match="no compute class"): opened(classes=[0xC86F, 0xC8B5, 0xC661])


def test_close_frees_in_reverse():
  gpu, k = opened()
  allocated = [c[3] for c in k.of("RM_ALLOC")]
  n = len(k.calls)
  assert gpu.close() == []
  after = k.calls[n:]
  freed = [c[1] for c in after if c[0] == "RM_FREE"]
  assert freed == list(reversed(allocated))  # the root client last
  assert ("UVM", S.UVM_UNREGISTER_GPU) in after and after.index(("UVM", S.UVM_UNREGISTER_GPU)) < after.index(("RM_FREE", gpu.device))
  assert not k.fds  # every fd closed
  assert k.calls[-1] == ("close", "/dev/nvidiactl")


def test_missing_device_file():
  gpu = NVGPU(FakeKernel(missing=("/dev/nvidiactl",)))
  with pytest.raises(NVDriverError, match=r"missing /dev/nvidiactl.*MOCKGPU=1"): gpu.open()
  assert gpu.close() == []
  with pytest.raises(RuntimeError, match=r"missing /dev/nvidia-uvm"): NVGPU(FakeKernel(missing=("/dev/nvidia-uvm",))).open()


def test_rm_status_errors_name_the_call():
  with pytest.raises(RuntimeError, match=r"NV_ESC_RM_ALLOC of class 0xa06c \(KEPLER_CHANNEL_GROUP_A\).*0x1f \(NV_ERR_INVALID_ARGUMENT\)"):
    opened(fail={0xA06C: 0x1F})
  with pytest.raises(RuntimeError, match=r"NV_ESC_RM_CONTROL 0xa06c0101 \(GPFIFO_SCHEDULE\).*0x56 \(NV_ERR_NOT_SUPPORTED\)"):
    opened(fail={0xA06C0101: 0x56})
  with pytest.raises(RuntimeError, match=r"UVM_REGISTER_GPU \(0x25\): RM status 0x12$"): opened(fail={S.UVM_REGISTER_GPU: 0x12})


def test_mm_initialize_failure_is_reported_not_raised():
  k = FakeKernel(fail={S.UVM_MM_INITIALIZE: 0x1F})
  gpu = NVGPU(k)
  for step in (gpu.open_control, gpu.find_gpu, gpu.open_device, gpu.query, gpu.read_classes): step()
  assert "0x1f (NV_ERR_INVALID_ARGUMENT)" in gpu.open_uvm()


def test_attach_failure_is_reported_not_raised():
  gpu, _ = opened(fail={S.NV_ESC_ATTACH_GPUS_TO_FD: 22})
  assert gpu.attach_error.startswith("NV_ESC_ATTACH_GPUS_TO_FD: the ioctl failed") and len(gpu.channels) == 2
