"""The NVIDIA kernel driver's ABI as runtime/nv_driver.py uses it: the cffi declarations of the ioctl argument structs,
the escape and UVM ioctl numbers, class numbers, control commands and the bit fields of their flags. Facts only, from
NVIDIA's open kernel module headers at driver 580 (kernel-open/common/inc/nv-ioctl.h, nv-ioctl-numbers.h,
src/nvidia/arch/nvalloc/unix/include/nv_escape.h, kernel-open/nvidia-uvm/uvm_ioctl.h, uvm_linux_ioctl.h and
src/common/sdk/nvidia/inc/{nvos.h, class/*.h, ctrl/*}). tests/test_nv_driver.py checks every size and offset here
against the headers' numbers. NvP64 pointers are uint64_t (8-byte aligned, as NV_ALIGN_BYTES(8) asks)."""
from __future__ import annotations

import cffi

ffi = cffi.FFI()
ffi.cdef("""
typedef struct { uint32_t hRoot, hObjectParent, hObjectNew, hClass; uint64_t pAllocParms; uint32_t paramsSize, status; } NVOS21_PARAMETERS;
typedef struct { uint32_t hClient, hObject, cmd, flags; uint64_t params; uint32_t paramsSize, status; } NVOS54_PARAMETERS;
typedef struct { uint32_t hRoot, hObjectParent, hObjectOld, status; } NVOS00_PARAMETERS;
typedef struct { uint32_t hRoot, hObjectParent, hObjectNew, hClass, flags; uint64_t pMemory, limit; uint32_t status; } NVOS02_PARAMETERS;
typedef struct { NVOS02_PARAMETERS params; int fd; } nv_ioctl_nvos02_parameters_with_fd;
typedef struct { uint32_t hClient, hDevice, hMemory; uint64_t offset, length, pLinearAddress; uint32_t status, flags; } NVOS33_PARAMETERS;
typedef struct { NVOS33_PARAMETERS params; int fd; } nv_ioctl_nvos33_parameters_with_fd;
typedef struct { uint32_t hClient, hDevice, hDma, hMemory; uint64_t offset, length; uint32_t flags, flags2, kindOverride;
                 uint64_t dmaOffset; uint32_t status; } NVOS46_PARAMETERS;
typedef struct { uint32_t domain; uint8_t bus, slot, function; uint16_t vendor_id, device_id; } nv_pci_info_t;
typedef struct { uint8_t valid; nv_pci_info_t pci_info; uint32_t gpu_id; uint16_t interrupt_line; uint64_t reg_address, reg_size,
                 fb_address, fb_size; uint32_t minor_number; uint8_t dev_name[10]; } nv_ioctl_card_info_t;
typedef struct { int ctl_fd; } nv_ioctl_register_fd_t;

typedef struct { uint32_t deviceId, hClientShare, hTargetClient, hTargetDevice, flags; uint64_t vaSpaceSize, vaStartInternal,
                 vaLimitInternal; uint32_t vaMode; } NV0080_ALLOC_PARAMETERS;
typedef struct { uint32_t subDeviceId; } NV2080_ALLOC_PARAMETERS;
typedef struct { uint64_t offset, limit; uint32_t hVASpace; } NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS;
typedef struct { uint32_t index, flags; uint64_t vaSize, vaStartInternal, vaLimitInternal; uint32_t bigPageSize; uint64_t vaBase;
                 uint32_t pasid; } NV_VASPACE_ALLOCATION_PARAMETERS;
typedef struct { uint32_t hObjectError, hObjectEccError, hVASpace, engineType; uint8_t bIsCallingContextVgpuPlugin; }
  NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS;
typedef struct { uint32_t hVASpace, flags, subctxId; } NV_CTXSHARE_ALLOCATION_PARAMETERS;
typedef struct { uint64_t base, size; uint32_t addressSpace, cacheAttrib; } NV_MEMORY_DESC_PARAMS;
typedef struct { uint32_t hObjectError, hObjectBuffer; uint64_t gpFifoOffset; uint32_t gpFifoEntries, flags, hContextShare, hVASpace;
                 uint32_t hUserdMemory[8]; uint64_t userdOffset[8]; uint32_t engineType, cid, subDeviceId, hObjectEccError;
                 NV_MEMORY_DESC_PARAMS instanceMem, userdMem, ramfcMem, mthdbufMem; uint32_t hPhysChannelGroup, internalFlags;
                 NV_MEMORY_DESC_PARAMS errorNotifierMem, eccErrorNotifierMem; uint32_t ProcessID, SubProcessID, encryptIv[3],
                 decryptIv[3], hmacNonce[8], tpcConfigID; } NV_CHANNEL_ALLOC_PARAMS;
typedef struct { uint32_t owner, type, flags, width, height; int32_t pitch; uint32_t attr, attr2, format, comprCovg, zcullCovg;
                 uint64_t rangeLo, rangeHi, size, alignment, offset, limit, address; uint32_t ctagOffset, hVASpace, internalflags, tag;
                 int32_t numaNode; } NV_MEMORY_ALLOCATION_PARAMS;

typedef struct { char driverVersionBuffer[256], versionBuffer[256], driverBranch[256], titleBuffer[256];
                 uint32_t changelistNumber, officialChangelistNumber; } NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS;
typedef struct { uint32_t gpuId, gpuFlags, deviceInstance, subDeviceInstance, sliStatus, boardId, gpuInstance; int32_t numaId; }
  NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS;
typedef struct { uint32_t numClasses; uint64_t classList; } NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS;
typedef struct { uint32_t architecture, implementation, revision; uint8_t subRevision; } NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS;
typedef struct { uint32_t index, flags, length; uint8_t data[256]; } NV2080_CTRL_GPU_GET_GID_INFO_PARAMS;
typedef struct { uint32_t gpuNameStringFlags; union { uint8_t ascii[64]; uint16_t unicode[64]; } gpuNameString; }
  NV2080_CTRL_GPU_GET_NAME_STRING_PARAMS;
typedef struct { uint8_t bEnable, bSkipSubmit, bSkipEnable; } NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS;
typedef struct { uint32_t workSubmitToken; } NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS;

typedef struct { uint8_t uuid[16]; } NvProcessorUuid;
typedef struct { uint64_t flags; uint32_t rmStatus; } UVM_INITIALIZE_PARAMS;
typedef struct { int32_t uvmFd; uint32_t rmStatus; } UVM_MM_INITIALIZE_PARAMS;
typedef struct { NvProcessorUuid gpu_uuid; uint8_t numaEnabled; int32_t numaNodeId, rmCtrlFd; uint32_t hClient, hSmcPartRef, rmStatus; }
  UVM_REGISTER_GPU_PARAMS;
typedef struct { NvProcessorUuid gpu_uuid; uint32_t rmStatus; } UVM_UNREGISTER_GPU_PARAMS;
typedef struct { NvProcessorUuid gpuUuid; int32_t rmCtrlFd; uint32_t hClient, hVaSpace, rmStatus; } UVM_REGISTER_GPU_VASPACE_PARAMS;
typedef struct { NvProcessorUuid gpuUuid; uint32_t rmStatus; } UVM_UNREGISTER_GPU_VASPACE_PARAMS;
typedef struct { NvProcessorUuid gpuUuid; int32_t rmCtrlFd; uint32_t hClient, hChannel; uint64_t base, length; uint32_t rmStatus; }
  UVM_REGISTER_CHANNEL_PARAMS;
typedef struct { NvProcessorUuid gpuUuid; uint32_t hClient, hChannel, rmStatus; } UVM_UNREGISTER_CHANNEL_PARAMS;
typedef struct { uint64_t base, length; uint32_t rmStatus; } UVM_CREATE_EXTERNAL_RANGE_PARAMS;
typedef struct { NvProcessorUuid gpuUuid; uint32_t gpuMappingType, gpuCachingType, gpuFormatType, gpuElementBits, gpuCompressionType; }
  UvmGpuMappingAttributes;
typedef struct { uint64_t base, length, offset; UvmGpuMappingAttributes perGpuAttributes[256]; uint64_t gpuAttributesCount;
                 int32_t rmCtrlFd; uint32_t hClient, hMemory, rmStatus; } UVM_MAP_EXTERNAL_ALLOCATION_PARAMS;
typedef struct { uint64_t base, length; uint32_t rmStatus; } UVM_FREE_PARAMS;

int open(const char *path, int flags, ...);
int close(int fd);
int ioctl(int fd, unsigned long request, void *arg);
void *mmap(void *addr, size_t length, int prot, int flags, int fd, long offset);
int munmap(void *addr, size_t length);
""")

# ---- ioctl numbers. The escapes are _IOWR('F', nr, size of the argument) on /dev/nvidiactl or /dev/nvidiaN
# (nv-ioctl-numbers.h, nv_escape.h); UVM's requests are the bare numbers of uvm_ioctl.h (UVM_IOCTL_BASE(i) == i).
NV_IOCTL_MAGIC, NV_IOCTL_BASE = ord("F"), 200
NV_ESC_CARD_INFO, NV_ESC_REGISTER_FD, NV_ESC_ATTACH_GPUS_TO_FD = NV_IOCTL_BASE + 0, NV_IOCTL_BASE + 1, NV_IOCTL_BASE + 12
NV_ESC_RM_ALLOC_MEMORY, NV_ESC_RM_FREE, NV_ESC_RM_CONTROL, NV_ESC_RM_ALLOC = 0x27, 0x29, 0x2A, 0x2B
NV_ESC_RM_MAP_MEMORY, NV_ESC_RM_MAP_MEMORY_DMA = 0x4E, 0x57
NV_MAX_DEVICES = 32  # the card-info escape fills one nv_ioctl_card_info_t per device, up to this many

UVM_INITIALIZE, UVM_MM_INITIALIZE = 0x30000001, 75
UVM_REGISTER_GPU_VASPACE, UVM_UNREGISTER_GPU_VASPACE, UVM_REGISTER_CHANNEL, UVM_UNREGISTER_CHANNEL = 25, 26, 27, 28
UVM_MAP_EXTERNAL_ALLOCATION, UVM_FREE, UVM_REGISTER_GPU, UVM_UNREGISTER_GPU, UVM_CREATE_EXTERNAL_RANGE = 33, 34, 37, 38, 73
UVM_MAX_GPUS = 256  # NV_MAX_DEVICES * UVM_PARENT_ID_MAX_SUB_PROCESSORS: the length of perGpuAttributes
UVM_GPU_MAPPING_TYPE_READ_WRITE = 1  # UvmGpuMappingTypeReadWrite (uvm_types.h)


def _iowr(magic: int, nr: int, size: int) -> int:
  """Linux's _IOWR(magic, nr, size): direction read|write (3) in bits 31:30, the size in 29:16 (14 bits), the type in
  15:8, the number in 7:0."""
  assert 0 <= size < (1 << 14), f"ioctl argument of {size} bytes does not fit _IOC_SIZE"
  return (3 << 30) | (size << 16) | (magic << 8) | nr


def nv_escape(nr: int, ctype: str, count: int = 1) -> int:
  """The request number of escape `nr` whose argument is `count` of `ctype` (the driver reads the size from it)."""
  return _iowr(NV_IOCTL_MAGIC, nr, ffi.sizeof(ctype) * count)


# ---- classes (nvos.h's class list and class/cl*.h). Newest first: the first one the GPU lists is used.
NV01_ROOT_CLIENT, NV01_DEVICE_0, NV20_SUBDEVICE_0 = 0x41, 0x80, 0x2080
NV01_MEMORY_SYSTEM, NV01_MEMORY_LOCAL_USER, NV01_MEMORY_VIRTUAL, NV01_MEMORY_SYSTEM_OS_DESCRIPTOR = 0x3E, 0x40, 0x70, 0x71
FERMI_VASPACE_A, FERMI_CONTEXT_SHARE_A, KEPLER_CHANNEL_GROUP_A = 0x90F1, 0x9067, 0xA06C
GPFIFO_CLASSES = {0xC96F: "BLACKWELL_CHANNEL_GPFIFO_A", 0xC86F: "HOPPER_CHANNEL_GPFIFO_A", 0xC56F: "AMPERE_CHANNEL_GPFIFO_A"}
COMPUTE_CLASSES = {0xCEC0: "BLACKWELL_COMPUTE_B", 0xCDC0: "BLACKWELL_COMPUTE_A", 0xCBC0: "HOPPER_COMPUTE_A", 0xC9C0: "ADA_COMPUTE_A",
                   0xC7C0: "AMPERE_COMPUTE_B", 0xC6C0: "AMPERE_COMPUTE_A"}
DMA_CLASSES = {0xCAB5: "BLACKWELL_DMA_COPY_B", 0xC9B5: "BLACKWELL_DMA_COPY_A", 0xC8B5: "HOPPER_DMA_COPY_A", 0xC7B5: "AMPERE_DMA_COPY_B",
               0xC6B5: "AMPERE_DMA_COPY_A"}
USERMODE_CLASSES = {0xC761: "BLACKWELL_USERMODE_A", 0xC661: "HOPPER_USERMODE_A", 0xC561: "AMPERE_USERMODE_A", 0xC461: "TURING_USERMODE_A"}

# ---- RM control commands (ctrl0000*.h, ctrl0080gpu.h, ctrl2080gpu.h, ctrl2080mc.h, ctrla06c.h, ctrlc36f.h)
NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2, NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2 = 0x13E, 0x205
NV0080_CTRL_CMD_GPU_GET_CLASSLIST = 0x800201
NV2080_CTRL_CMD_GPU_GET_NAME_STRING, NV2080_CTRL_CMD_GPU_GET_GID_INFO, NV2080_CTRL_CMD_MC_GET_ARCH_INFO = 0x20800110, 0x2080014A, 0x20801701
NVA06C_CTRL_CMD_GPFIFO_SCHEDULE, NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN = 0xA06C0101, 0xC36F0108
NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY = 2
ARCHITECTURES = {0x160: "TU100", 0x170: "GA100", 0x190: "AD100", 0x180: "GH100", 0x1A0: "GB100", 0x1B0: "GB200"}  # MC_ARCH_INFO

# ---- flags (nvos.h, alloc/*.h): each value placed at its field's low bit
NV2080_ENGINE_TYPE_GRAPHICS = 1
NV_DEVICE_ALLOCATION_VAMODE_OPTIONAL_MULTIPLE_VASPACES = 0
NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED, NV_VASPACE_ALLOCATION_FLAGS_ENABLE_PAGE_FAULTING = 1 << 3, 1 << 6
NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_ASYNC = 1
# NVOS02 (an OS descriptor of host pages): PHYSICALITY 7:4 NONCONTIGUOUS, COHERENCY 15:12 CACHED, MAPPING 31:30 NO_MAP
NVOS02_HOST_FLAGS = (1 << 4) | (1 << 12) | (1 << 30)
# NVOS32 attr: PAGE_SIZE 24:23 (HUGE 3), LOCATION 26:25 (PCI 1), PHYSICALITY 28:27 (CONTIGUOUS 2, ALLOW_NONCONTIGUOUS 3)
NVOS32_ATTR_PAGE_SIZE_HUGE, NVOS32_ATTR_LOCATION_PCI = 3 << 23, 1 << 25
NVOS32_ATTR_PHYSICALITY_CONTIGUOUS, NVOS32_ATTR_PHYSICALITY_ALLOW_NONCONTIGUOUS = 2 << 27, 3 << 27
# attr2: ZBC 1:0 (PREFER_NO_ZBC 1), GPU_CACHEABLE 3:2 (YES 1, NO 2), PAGE_SIZE_HUGE 21:20 (2MB 1)
NVOS32_ATTR2_ZBC_PREFER_NO_ZBC, NVOS32_ATTR2_GPU_CACHEABLE_YES, NVOS32_ATTR2_GPU_CACHEABLE_NO = 1, 1 << 2, 2 << 2
NVOS32_ATTR2_PAGE_SIZE_HUGE_2MB = 1 << 20
NVOS32_ALLOC_FLAGS_IGNORE_BANK_PLACEMENT, NVOS32_ALLOC_FLAGS_ALIGNMENT_FORCE = 0x1, 0x100
NVOS32_ALLOC_FLAGS_MEMORY_HANDLE_PROVIDED, NVOS32_ALLOC_FLAGS_MAP_NOT_REQUIRED, NVOS32_ALLOC_FLAGS_PERSISTENT_VIDMEM = 0x4000, 0x8000, 0x10000
NVOS32_TYPE_IMAGE, NVOS32_TYPE_NOTIFIER = 0, 13
NV_MMU_PTE_KIND_GENERIC_MEMORY = 0x6  # the `format` (PTE kind) of plain pitch memory, Turing on
# NVOS46 (a DMA mapping): CACHE_SNOOP 4:4 ENABLE, PAGE_SIZE 11:8 (4KB 1), DMA_OFFSET_FIXED 15:15 TRUE
NVOS46_FLAGS_FIXED_4K_SNOOP = (1 << 4) | (1 << 8) | (1 << 15)

# ---- the channel's registers (clc86f.h's Nvc86fControl, USERD; clc361.h, the usermode region)
USERD_GP_GET, USERD_GP_PUT, USERD_BYTES = 0x88, 0x8C, 0x200  # NVC86F_... USERD is 512 bytes (NV_RAMUSERD__SIZE)
USERMODE_BYTES, USERMODE_TIME_0, USERMODE_TIME_1, USERMODE_DOORBELL = 0x10000, 0x80, 0x84, 0x90  # NVC361_NOTIFY_CHANNEL_PENDING

# ---- RM status codes (nvstatuscodes.h): the ones a bring-up meets
NV_STATUS_NAMES = {0x0: "NV_OK", 0xFFFF: "NV_ERR_GENERIC", 0x2: "NV_ERR_BUFFER_TOO_SMALL", 0xF: "NV_ERR_GPU_IS_LOST", 0x17: "NV_ERR_IN_USE",
                   0x1A: "NV_ERR_INSUFFICIENT_RESOURCES", 0x1B: "NV_ERR_INSUFFICIENT_PERMISSIONS", 0x1E: "NV_ERR_INVALID_ADDRESS",
                   0x1F: "NV_ERR_INVALID_ARGUMENT", 0x21: "NV_ERR_INVALID_CHANNEL", 0x22: "NV_ERR_INVALID_CLASS", 0x23: "NV_ERR_INVALID_CLIENT",
                   0x24: "NV_ERR_INVALID_COMMAND", 0x26: "NV_ERR_INVALID_DEVICE", 0x29: "NV_ERR_INVALID_FLAGS", 0x2E: "NV_ERR_INVALID_LIMIT",
                   0x31: "NV_ERR_INVALID_OBJECT", 0x32: "NV_ERR_INVALID_OBJECT_BUFFER", 0x33: "NV_ERR_INVALID_OBJECT_HANDLE",
                   0x34: "NV_ERR_INVALID_OBJECT_NEW", 0x36: "NV_ERR_INVALID_OBJECT_PARENT", 0x37: "NV_ERR_INVALID_OFFSET",
                   0x38: "NV_ERR_INVALID_OPERATION", 0x3A: "NV_ERR_INVALID_PARAM_STRUCT", 0x3B: "NV_ERR_INVALID_PARAMETER",
                   0x3D: "NV_ERR_INVALID_POINTER", 0x3F: "NV_ERR_INVALID_REQUEST", 0x40: "NV_ERR_INVALID_STATE", 0x51: "NV_ERR_NO_MEMORY",
                   0x55: "NV_ERR_NOT_READY", 0x56: "NV_ERR_NOT_SUPPORTED", 0x57: "NV_ERR_OBJECT_NOT_FOUND", 0x59: "NV_ERR_OPERATING_SYSTEM",
                   0x5B: "NV_ERR_OUT_OF_RANGE", 0x63: "NV_ERR_STATE_IN_USE", 0x65: "NV_ERR_TIMEOUT", 0x68: "NV_ERR_UVM_ADDRESS_IN_USE",
                   0x6B: "NV_ERR_PRIV_SEC_VIOLATION"}


def status_name(status: int) -> str:
  """'0x1f (NV_ERR_INVALID_ARGUMENT)': an RM status in hex, with its name where it is a common one."""
  name = NV_STATUS_NAMES.get(status)
  return f"{status:#x} ({name})" if name else f"{status:#x}"
