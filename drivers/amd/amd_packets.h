// AMD's command formats for RDNA (gfx10, gfx11), as facts from the Linux amdgpu headers (nvd.h, soc15d.h,
// navi10_sdma_pkt_open.h, sdma_v6_0_0_pkt_open.h), Mesa's register database and sid.h, and HSA's hsa.h for AQL.
// Only what the encoder (lower.cpp) writes is here. Bit ranges are inclusive [hi:lo].
#pragma once
#include <cstdint>

namespace th::amd {

// PM4 type-3 packets: TYPE 31:30 = 3, COUNT 29:16 = dwords after the header minus 1, IT_OPCODE 15:8, SHADER_TYPE 1
// (1: compute, what a compute ring sets).
namespace pm4 {
constexpr uint32_t header(uint32_t opcode, uint32_t body_dwords) {
  return (3u << 30) | (((body_dwords - 1) & 0x3fff) << 16) | (opcode << 8) | (1u << 1);
}
inline constexpr uint32_t kNop = 0x10, kDispatchDirect = 0x15, kWaitRegMem = 0x3C, kIndirectBuffer = 0x3F, kEventWrite = 0x46,
                          kReleaseMem = 0x49, kAcquireMem = 0x58, kSetShReg = 0x76;
inline constexpr uint32_t kShRegStart = 0x2C00;  // SET_SH_REG's offset dword is the register's dword address minus this

// Compute registers, dword addresses (the same on gfx10 and gfx11).
inline constexpr uint32_t kComputeStartX = 0x2E04, kComputeNumThreadX = 0x2E07, kComputePgmLo = 0x2E0C, kComputePgmRsrc1 = 0x2E12,
                          kComputeResourceLimits = 0x2E15, kComputeTmpringSize = 0x2E18, kComputeRestartX = 0x2E1B,
                          kComputePgmRsrc3 = 0x2E28, kComputeUserData0 = 0x2E40;

// DISPATCH_INITIATOR: COMPUTE_SHADER_EN 0, FORCE_START_AT_000 2, ORDER_MODE 6, CS_W32_EN 15.
inline constexpr uint32_t kInitiator = (1u << 0) | (1u << 2) | (1u << 6), kCsW32En = 1u << 15;

// RELEASE_MEM dw1: EVENT_TYPE 5:0, EVENT_INDEX 11:8 (5: end of pipe), the GCR bits 23:12 (GLM_WB 12, GLM_INV 13,
// GL2_WB 21, GCR_SEQ 22), CACHE_POLICY 26:25 (3: bypass). dw2: DATA_SEL 31:29 (2: 64-bit data, 3: 64-bit GPU clock),
// INT_SEL 26:24, DST_SEL 17:16 (0: memory).
inline constexpr uint32_t kCacheFlushAndInvTsEvent = 0x14;
inline constexpr uint32_t kReleaseEvent = kCacheFlushAndInvTsEvent | (5u << 8) | (1u << 12) | (1u << 13) | (1u << 21) | (1u << 22) | (3u << 25);
inline constexpr uint32_t kDataSel64 = 2u << 29, kDataSelClock = 3u << 29;

// WAIT_REG_MEM dw1: FUNCTION 2:0 (5: >=), MEM_SPACE 5:4 (1: memory), OPERATION 7:6 (0), ENGINE 8 (0: ME).
inline constexpr uint32_t kWaitGeqMemory = 5u | (1u << 4);
inline constexpr uint32_t kPollInterval = 4;

// EVENT_WRITE: EVENT_TYPE 5:0, EVENT_INDEX 11:8; CS_PARTIAL_FLUSH is type 7 with index 4.
inline constexpr uint32_t kCsPartialFlush = 7u | (4u << 8);
// ACQUIRE_MEM dw7 GCR_CNTL: GLI_INV 1:0 (1: all), GLM_WB 4, GLM_INV 5, GLK_INV 7, GLV_INV 8, GL1_INV 9, GL2_INV 14,
// GL2_WB 15: the full invalidate and write-back the kernel driver's mem_sync uses.
inline constexpr uint32_t kGcrAll = 1u | (1u << 4) | (1u << 5) | (1u << 7) | (1u << 8) | (1u << 9) | (1u << 14) | (1u << 15);
// INDIRECT_BUFFER dw3: IB_SIZE 19:0 (dwords), VALID 23 (compute rings), VMID 27:24.
inline constexpr uint32_t kIbValid = 1u << 23;
}  // namespace pm4

// SDMA packets: OP 7:0, SUB_OP 15:8 in the header.
namespace sdma {
inline constexpr uint32_t kNop = 0, kCopy = 1, kFence = 5, kPollRegmem = 8, kTimestamp = 13;
inline constexpr uint32_t kSubCopyLinear = 0, kSubTimestampGetGlobal = 2;
constexpr uint32_t header(uint32_t op, uint32_t sub_op = 0) { return op | (sub_op << 8); }
// FENCE header MTYPE 18:16 (3: uncached). POLL_REGMEM header FUNC 30:28 (5: >=), MEM_POLL 31; dw5 INTERVAL 15:0,
// RETRY_COUNT 27:16 (0xfff: indefinitely).
inline constexpr uint32_t kFenceUncached = 3u << 16;
inline constexpr uint32_t kPollGeqMemory = (5u << 28) | (1u << 31);
inline constexpr uint32_t kPollIntervalRetry = 0xA | (0xfffu << 16);
// COPY_LINEAR's count is bytes minus 1, in 22 bits on SDMA v5 (gfx10) and 30 on v6 (gfx11); Mesa copies at most
// 0x3fff00 or 0x3fffff00 bytes a packet.
inline constexpr uint64_t kMaxCopyV5 = 0x3fff00, kMaxCopyV6 = 0x3fffff00;
}  // namespace sdma

// AQL (hsa.h): 64-byte packets. The header's TYPE 7:0 (2: kernel dispatch, 3: barrier-AND), BARRIER 8, acquire
// fence scope 10:9, release fence scope 12:11 (2: system); setup's DIMENSIONS 1:0.
namespace aql {
inline constexpr uint16_t kKernelDispatch = 2, kBarrierAnd = 3, kInvalid = 1;
inline constexpr uint16_t kBarrier = 1u << 8, kAcquireSystem = 2u << 9, kReleaseSystem = 2u << 11;
}  // namespace aql

}  // namespace th::amd
