// Lowering HCQ's command stream to an AMD GPU's: PM4 packets for a compute queue (the kernel's registers set with
// SET_SH_REG, then DISPATCH_DIRECT; RELEASE_MEM signals and timestamps, WAIT_REG_MEM waits), SDMA packets for a copy
// queue (COPY_LINEAR, FENCE, POLL_REGMEM, TIMESTAMP), and AQL dispatch and barrier packets. Kernel arguments live in a
// side area the kernel reads through its kernarg pointer (two user SGPRs).
#pragma once
#include <array>
#include <cstdint>
#include <span>

#include "drivers/amd/amd_packets.h"
#include "tinyhybrid/hcq/command_buffer.h"
#include "tinyhybrid/hcq/lowered.h"

namespace th::amd {

enum class Gen : uint8_t { Gfx10, Gfx11 };  // RDNA1-2 (SDMA v5), RDNA3 (SDMA v6)
enum class Engine : uint8_t { Compute, Copy };

// A GPU kernel as its dispatch needs it, from its code object's kernel descriptor. An exec command's function word
// is the host address of one of these, kept alive by the program that owns it.
struct Kernel {
  uint64_t code = 0;  // GPU address of the first instruction (256-byte aligned)
  uint32_t rsrc1 = 0, rsrc2 = 0, rsrc3 = 0;  // COMPUTE_PGM_RSRC1/2/3
  uint32_t kernarg_sgpr = 0;                  // the user SGPR pair that receives the kernarg address
  uint32_t kernarg_bytes = 0;                 // the kernarg segment's size
  bool wave32 = true;
};

// Throws std::invalid_argument naming the command for what the engine cannot run and for a kernel whose arguments
// do not fit its kernarg segment.
hcq::Lowered lower(const hcq::CommandBuffer& cb, Gen gen, Engine engine);

// The 64-byte AQL kernel-dispatch packet (hsa_kernel_dispatch_packet_t) as 16 dwords, its header included: a queue
// writes dwords 1.. first and the header (the low half of dword 0) last. grid is in work-items, as AQL counts it.
std::array<uint32_t, 16> aql_dispatch(uint64_t kernel_object, uint64_t kernarg, const uint32_t grid[3], const uint16_t block[3],
                                      uint32_t dims, uint32_t private_bytes, uint32_t group_bytes, uint64_t completion_signal);
// The barrier-AND packet: waits for up to five signals (0: none) and then raises the completion signal.
std::array<uint32_t, 16> aql_barrier_and(std::span<const uint64_t> deps, uint64_t completion_signal);

// A PM4 INDIRECT_BUFFER to `dwords` words at GPU address `address` (4-byte aligned), for a compute ring.
std::array<uint32_t, 4> indirect_buffer(uint64_t address, uint32_t dwords, uint32_t vmid = 0);

}  // namespace th::amd
