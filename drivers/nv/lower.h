// Lowering HCQ's device-independent command stream (hcq::CommandBuffer) to an NVIDIA GPU's: pushbuffer methods for
// a GPFIFO channel whose compute object sits on subchannel 1 (a compute queue) or whose DMA copy object sits on
// subchannel 4 (a copy queue), and the QMDs and constant buffers the launches read from GPU memory (the side area).
// A buffer is lowered once; a submit copies the words and writes only the patch sites (slot values, and the side
// area's address where the words point into it).
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "drivers/nv/nv_classes.h"
#include "tinyhybrid/hcq/command_buffer.h"
#include "tinyhybrid/hcq/lowered.h"

namespace th::nv {

enum class Gen : uint8_t { Ampere, Hopper };
enum class Engine : uint8_t { Compute, Copy };

// A GPU kernel as its launch needs it. An exec command's function word is the host address of one of these (kept
// alive by the program that owns it), as a CPU exec's is a host function.
struct Kernel {
  uint64_t code = 0;          // GPU address of its first instruction
  uint32_t registers = 0;     // per thread
  uint32_t shared_bytes = 0;  // static shared memory per block
  uint32_t local_bytes = 0;   // local memory (stack, spills) per thread
  uint32_t param_offset = 0;  // where its arguments start in constant buffer 0 (the cubin's EIATTR_PARAM_CBANK)
  uint32_t cbuf0_bytes = 0;   // constant buffer 0's size, arguments included
};

using Site = hcq::LoweredSite;
using Lowered = hcq::Lowered;

// The side area (QMDs and constant buffers) must be 256-byte aligned and end below 2^40, where SEND_PCAS_A reaches:
// std::invalid_argument otherwise.
void check_side_area(uint64_t side_base, uint64_t bytes);

// Throws std::invalid_argument naming the command for what the engine cannot run (an exec on the copy engine, a copy
// on the compute engine) and for a kernel whose arguments do not fit its constant buffer.
Lowered lower(const hcq::CommandBuffer& cb, Gen gen, Engine engine);

// The six words of a host semaphore release of a 64-bit value at `address`, after the work before it is idle (what
// ends each submit: the queue's timeline).
std::array<uint32_t, 6> semaphore_release(Gen gen, uint64_t address, uint64_t value);

// The GPFIFO entry (two words, NVC86F_GP_ENTRY0/1) that runs `dwords` pushbuffer words at GPU address `address`
// (4-byte aligned, below 2^40): GET in ENTRY0 31:2; GET_HI in ENTRY1 7:0, LENGTH 30:10, SYNC 31 (wait before fetching).
std::array<uint32_t, 2> gpfifo_entry(uint64_t address, uint32_t dwords, bool sync_wait = false);

// Writes v into a field of a QMD (std::invalid_argument naming the field's bits when v does not fit), and reads one.
void set_field(std::span<uint32_t> words, qmd::Field f, uint64_t v);
uint64_t get_field(std::span<const uint32_t> words, qmd::Field f);

}  // namespace th::nv
