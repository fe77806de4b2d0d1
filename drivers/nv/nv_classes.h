// NVIDIA's command formats for Ampere and Hopper, as facts from NVIDIA's open headers (open-gpu-doc classes/, and
// open-gpu-kernel-modules' class headers): class numbers, method byte offsets and the bit fields of their data words.
// Only what the encoder (lower.cpp) writes is here. Bit ranges are inclusive [hi:lo], as the headers write them.
#pragma once
#include <cstdint>

namespace th::nv {

// Class numbers (clc86f.h, clcbc0.h, clc8b5.h, clc56f.h, clc6c0.h, clc7c0.h, clc6b5.h, clc7b5.h, clc361.h).
namespace cls {
inline constexpr uint32_t kAmpereGpfifoA = 0xC56F, kHopperGpfifoA = 0xC86F;
inline constexpr uint32_t kAmpereComputeA = 0xC6C0, kAmpereComputeB = 0xC7C0, kHopperComputeA = 0xCBC0;
inline constexpr uint32_t kAmpereDmaCopyA = 0xC6B5, kAmpereDmaCopyB = 0xC7B5, kHopperDmaCopyA = 0xC8B5;
inline constexpr uint32_t kVoltaUsermodeA = 0xC361, kAmpereUsermodeA = 0xC561, kHopperUsermodeA = 0xC661;
}  // namespace cls

// A pushbuffer method header (NVC86F_DMA_*, the same in C56F): the method's dword address in 11:0 (its byte offset
// >> 2), the subchannel in 15:13, the count of data words in 28:16, the opcode in 31:29.
namespace dma {
inline constexpr uint32_t kIncreasing = 1, kNonIncreasing = 3, kImmediate = 4, kIncreaseOnce = 5;
inline constexpr uint32_t kMaxCount = (1u << 13) - 1;
constexpr uint32_t header(uint32_t opcode, uint32_t subchannel, uint32_t method_offset, uint32_t count) {
  return (opcode << 29) | (count << 16) | (subchannel << 13) | (method_offset >> 2);
}
}  // namespace dma

// The subchannels this driver binds its objects to: host methods (below 0x100) reach the host on any subchannel.
inline constexpr uint32_t kComputeSubchannel = 1, kCopySubchannel = 4;

// Host methods of the GPFIFO class (clc86f.h; the same offsets in clc56f.h).
namespace host {
inline constexpr uint32_t kSetObject = 0x0000, kSemAddrLo = 0x005C, kSemAddrHi = 0x0060, kSemPayloadLo = 0x0064,
                          kSemPayloadHi = 0x0068, kSemExecute = 0x006C, kWfi = 0x0078;
// SEM_ADDR_HI holds address bits 24:0 above bit 32 on Hopper (C86F), 7:0 on Ampere (C56F).
inline constexpr uint32_t kSemAddrHiBitsHopper = 25, kSemAddrHiBitsAmpere = 8;
// SEM_EXECUTE: OPERATION 2:0, ACQUIRE_SWITCH_TSG 12, RELEASE_WFI 20, PAYLOAD_SIZE 24 (1: 64-bit), RELEASE_TIMESTAMP 25.
inline constexpr uint32_t kOpAcquire = 0, kOpRelease = 1, kOpAcqStrictGeq = 2, kOpAcqCircGeq = 3;
inline constexpr uint32_t kAcquireSwitchTsg = 1u << 12, kReleaseWfi = 1u << 20, kPayload64 = 1u << 24,
                          kReleaseTimestamp = 1u << 25;
inline constexpr uint32_t kWfiScopeAll = 1;  // WFI: SCOPE 0:0
}  // namespace host

// Compute class methods (clcbc0.h; the same offsets in clc6c0.h and clc7c0.h).
namespace compute {
inline constexpr uint32_t kSendPcasA = 0x02B4;           // QMD_ADDRESS_SHIFTED8: the QMD's address >> 8
inline constexpr uint32_t kSendSignalingPcas2B = 0x02C0;  // PCAS_ACTION 3:0
inline constexpr uint32_t kPcasInvalidateCopySchedule = 3;
inline constexpr uint32_t kInvalidateShaderCachesNoWfi = 0x1698;  // INSTRUCTION 0, GLOBAL_DATA 4, CONSTANT 12
inline constexpr uint32_t kInvalidateAll = (1u << 0) | (1u << 4) | (1u << 12);
}  // namespace compute

// DMA copy class methods (clc8b5.h; the same offsets in clc6b5.h and clc7b5.h).
namespace copy {
inline constexpr uint32_t kLaunchDma = 0x0300, kOffsetInUpper = 0x0400, kLineLengthIn = 0x0418;
// OFFSET_*_UPPER holds address bits above 32: 24:0 on Hopper (C8B5), 16:0 on Ampere (C6B5, C7B5).
inline constexpr uint32_t kUpperBitsHopper = 25, kUpperBitsAmpere = 17;
// LAUNCH_DMA: DATA_TRANSFER_TYPE 1:0 (2: non-pipelined), FLUSH_ENABLE 2, SRC_MEMORY_LAYOUT 7 and DST_MEMORY_LAYOUT 8
// (1: pitch), MULTI_LINE_ENABLE 9 (0: one line), SRC_TYPE 12 / DST_TYPE 13 (0: virtual).
inline constexpr uint32_t kLaunchCopy = 2u | (1u << 2) | (1u << 7) | (1u << 8);
}  // namespace copy

// The Queue Meta Data, version 03_00 (clcbc0qmd.h NVCBC0_QMDV03_00_*; every field used here has the same bits in
// clc6c0qmd.h and clc7c0qmd.h): 64 dwords, fields addressed by bit over the whole structure.
namespace qmd {
inline constexpr uint32_t kWords = 64, kBytes = 256, kAlign = 256;  // SEND_PCAS_A takes the address >> 8
struct Field {
  uint32_t hi, lo;
  constexpr uint32_t width() const { return hi - lo + 1; }
};
inline constexpr Field kSmGlobalCachingEnable{134, 134};
inline constexpr Field kInvalidateTextureHeaderCache{186, 186}, kInvalidateTextureSamplerCache{187, 187},
    kInvalidateTextureDataCache{188, 188}, kInvalidateShaderDataCache{189, 189}, kInvalidateInstructionCache{190, 190},
    kInvalidateShaderConstantCache{191, 191};
inline constexpr Field kCwdMembarType{369, 368};  // 1: L1_SYSMEMBAR
inline constexpr Field kApiVisibleCallLimit{378, 378};  // 1: NO_CHECK
inline constexpr Field kSamplerIndex{382, 382};         // 0: INDEPENDENTLY
inline constexpr Field kCtaRasterWidth{415, 384}, kCtaRasterHeight{431, 416}, kCtaRasterDepth{463, 448};
inline constexpr Field kSharedMemorySize{561, 544};
inline constexpr Field kMinSmConfigSharedMemSize{567, 562}, kMaxSmConfigSharedMemSize{574, 569},
    kTargetSmConfigSharedMemSize{662, 657};
inline constexpr Field kQmdVersion{579, 576}, kQmdMajorVersion{583, 580};
inline constexpr Field kCtaThreadDimension0{607, 592}, kCtaThreadDimension1{623, 608}, kCtaThreadDimension2{639, 624};
constexpr Field constant_buffer_valid(uint32_t i) { return {640 + i, 640 + i}; }
inline constexpr Field kRegisterCountV{656, 648};
inline constexpr Field kSharedAllocationEnable{663, 663};
inline constexpr Field kShaderLocalMemoryLowSize{759, 736};
inline constexpr Field kBarrierCount{767, 763};
constexpr Field constant_buffer_addr_lower(uint32_t i) { return {1055 + i * 64, 1024 + i * 64}; }
constexpr Field constant_buffer_addr_upper(uint32_t i) { return {1072 + i * 64, 1056 + i * 64}; }
constexpr Field constant_buffer_size_shifted4(uint32_t i) { return {1087 + i * 64, 1075 + i * 64}; }
inline constexpr Field kProgramAddressLower{1567, 1536}, kProgramAddressUpper{1584, 1568};
inline constexpr Field kShaderLocalMemoryHighSize{1623, 1600};
}  // namespace qmd

}  // namespace th::nv
