// The NV encoder (drivers/nv/lower.cpp) word for word. Every expected word here is composed by hand from the
// published formats (NVIDIA's open-gpu-doc class headers clc86f.h/clc56f.h, clcbc0.h, clc8b5.h and clcbc0qmd.h), not
// from the encoder's constants: method headers (opcode 31:29, count 28:16, subchannel 15:13, dword address 11:0), the
// host semaphore methods at 0x5C-0x6C and SEM_EXECUTE's bits, the copy class at 0x300/0x400/0x418, the compute launch
// at 0x2B4/0x2C0, QMD V03_00 fields read back by bit position, GPFIFO entries, and patching.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "check.h"
#include "drivers/nv/lower.h"

using namespace th;
using th::nv::Engine;
using th::nv::Gen;

namespace {

// Bits [hi:lo] of a word array, read independently of the encoder's field helpers.
uint64_t bits(const std::vector<uint32_t>& w, uint32_t qmd_word0, uint32_t hi, uint32_t lo) {
  uint64_t v = 0;
  for (uint32_t b = lo; b <= hi; ++b) v |= uint64_t((w[qmd_word0 + b / 32] >> (b % 32)) & 1) << (b - lo);
  return v;
}

void test_semaphores() {
  auto sig = hcq::Signal::create("s");
  const uint64_t a = sig->address();
  hcq::CommandBuffer cb;
  cb.signal(sig, 0x1122334455667788ull);
  cb.wait(sig, 5);
  const auto low = nv::lower(cb, Gen::Hopper, Engine::Compute);
  // increasing method (opcode 1), 5 words, subchannel 0, SEM_ADDR_LO = 0x5C -> dword 0x17
  const uint32_t header = (1u << 29) | (5u << 16) | 0x17;
  CHECK_EQ(header, 0x20050017u);
  const std::vector<uint32_t> want = {
      header, uint32_t(a), uint32_t(a >> 32), 0x55667788u, 0x11223344u,
      0x01100001u,  // SEM_EXECUTE: RELEASE (1), RELEASE_WFI (bit 20), PAYLOAD_SIZE 64BIT (bit 24)
      header, uint32_t(a), uint32_t(a >> 32), 5u, 0u,
      0x01001002u,  // ACQ_STRICT_GEQ (2), ACQUIRE_SWITCH_TSG (bit 12), PAYLOAD_SIZE 64BIT
  };
  CHECK(low.stream == want);
  CHECK(low.side.empty() && low.sites.empty());
}

void test_timestamp_and_barrier() {
  hcq::CommandBuffer cb;
  cb.timestamp(0x10000010ull);
  cb.barrier();
  const auto low = nv::lower(cb, Gen::Ampere, Engine::Copy);
  // the report's time lands at the address: the release goes 8 bytes before it, with RELEASE_TIMESTAMP (bit 25)
  const std::vector<uint32_t> want = {0x20050017u, 0x10000008u, 0u, 0u, 0u, 0x03100001u,
                                      (1u << 29) | (1u << 16) | (0x78 >> 2), 1u};  // WFI 0x78, SCOPE ALL
  CHECK(low.stream == want);
}

void test_copy() {
  hcq::CommandBuffer cb;
  cb.copy(0x0000'00ab'cdef'0000ull, 0x0000'0012'3456'7800ull, 4096);
  const auto low = nv::lower(cb, Gen::Hopper, Engine::Copy);
  const uint32_t sub4 = 4u << 13;
  const std::vector<uint32_t> want = {
      (1u << 29) | (4u << 16) | sub4 | (0x400 >> 2), 0x12u, 0x34567800u, 0xabu, 0xcdef0000u,  // OFFSET_IN_UPPER ... OFFSET_OUT_LOWER
      (1u << 29) | (2u << 16) | sub4 | (0x418 >> 2), 4096u, 1u,                              // LINE_LENGTH_IN, LINE_COUNT
      (1u << 29) | (1u << 16) | sub4 | (0x300 >> 2),
      0x186u,  // LAUNCH_DMA: NON_PIPELINED (2), FLUSH_ENABLE (bit 2), SRC and DST PITCH (bits 7, 8), virtual addresses
  };
  CHECK_EQ(want[0], 0x20048100u);
  CHECK(low.stream == want);
  // a copy of 5 GiB goes in pieces of 2 GiB: the third starts 4 GiB in
  hcq::CommandBuffer big;
  big.copy(0x1'0000'0000ull, 0x2'0000'0000ull, 5ull << 30);
  const auto pieces = nv::lower(big, Gen::Hopper, Engine::Copy);
  CHECK_EQ(pieces.stream.size(), size_t(3 * 10));
  CHECK_EQ(pieces.stream[20 + 1], 0x3u);  // source upper: 0x2'0000'0000 + 4 GiB
  CHECK_EQ(pieces.stream[20 + 6], uint32_t(1u << 30));
  CHECK_THROWS(nv::lower(cb, Gen::Hopper, Engine::Compute), std::invalid_argument);
}

void test_launch() {
  nv::Kernel k;
  k.code = 0x0000'0042'1000'0000ull;
  k.registers = 32;
  k.shared_bytes = 1000;
  k.local_bytes = 20;
  k.param_offset = 0x210;
  k.cbuf0_bytes = 0x230;
  const hcq::Program prog("E_4", reinterpret_cast<uint64_t>(&k));
  hcq::CommandBuffer cb;
  const uint32_t out = cb.add_slot(), n = cb.add_slot();
  cb.exec(prog, {hcq::Patch{out, 64}, 0x1234'5678'9abc'def0ull}, hcq::Dims(hcq::Patch{n}, 3, 1), hcq::Dims(128, 2, 1));
  cb.exec(prog, {0, 0}, hcq::Dims(1), hcq::Dims(1));
  const auto low = nv::lower(cb, Gen::Hopper, Engine::Compute);
  // per launch: a QMD (64 words) and the constant buffer (0x230 bytes, 140 words), each starting 256-byte aligned
  CHECK_EQ(low.side.size(), size_t(256 + 64 + 140));
  const auto& q = low.side;
  CHECK_EQ(bits(q, 0, 583, 580), 3u);  // QMD_MAJOR_VERSION
  CHECK_EQ(bits(q, 0, 579, 576), 0u);  // QMD_VERSION
  CHECK_EQ(bits(q, 0, 191, 186), 0x3fu);  // the six INVALIDATE_* caches
  CHECK_EQ(bits(q, 0, 431, 416), 3u);     // CTA_RASTER_HEIGHT
  CHECK_EQ(bits(q, 0, 463, 448), 1u);     // CTA_RASTER_DEPTH
  CHECK_EQ(bits(q, 0, 607, 592), 128u);   // CTA_THREAD_DIMENSION0
  CHECK_EQ(bits(q, 0, 623, 608), 2u);
  CHECK_EQ(bits(q, 0, 561, 544), 1024u);  // SHARED_MEMORY_SIZE, rounded up to 128
  CHECK_EQ(bits(q, 0, 656, 648), 32u);    // REGISTER_COUNT_V
  CHECK_EQ(bits(q, 0, 759, 736), 32u);    // SHADER_LOCAL_MEMORY_LOW_SIZE, rounded up to 16
  CHECK_EQ(bits(q, 0, 640, 640), 1u);     // CONSTANT_BUFFER_VALID(0)
  CHECK_EQ(bits(q, 0, 1087, 1075), 0x23u);  // CONSTANT_BUFFER_SIZE_SHIFTED4(0)
  CHECK_EQ(bits(q, 0, 1567, 1536), 0x10000000u);  // PROGRAM_ADDRESS_LOWER
  CHECK_EQ(bits(q, 0, 1584, 1568), 0x42u);        // PROGRAM_ADDRESS_UPPER
  // the literal argument, in the constant buffer at param_offset + 8 (after the patched one)
  CHECK_EQ(q[64 + 0x210 / 4 + 2], 0x9abcdef0u);
  CHECK_EQ(q[64 + 0x210 / 4 + 3], 0x12345678u);
  // methods: the first launch, then a wait for idle before the second
  const uint32_t sub1 = 1u << 13;
  CHECK_EQ(low.stream.size(), size_t(4 + 2 + 4));
  CHECK_EQ(low.stream[0], (1u << 29) | (1u << 16) | sub1 | (0x2B4 >> 2));  // SEND_PCAS_A
  CHECK_EQ(low.stream[2], (1u << 29) | (1u << 16) | sub1 | (0x2C0 >> 2));  // SEND_SIGNALING_PCAS2_B
  CHECK_EQ(low.stream[3], 3u);                                             // INVALIDATE_COPY_SCHEDULE
  CHECK_EQ(low.stream[4], (1u << 29) | (1u << 16) | (0x78 >> 2));          // WFI
  // patching: slots and the side area's address
  std::vector<uint32_t> push = low.stream, side = low.side;
  const uint64_t side_base = 0x0000'0077'0000'0000ull;
  const std::vector<uint64_t> slots = {0x0000'0055'aaaa'0000ull, 4096};
  low.patch(push, side, slots, side_base);
  CHECK_EQ(push[1], uint32_t(side_base >> 8));                          // the first QMD at the side area's start
  CHECK_EQ(push[7], uint32_t((side_base + 256 * 4) >> 8));              // the second after the first QMD and buffer
  CHECK_EQ(bits(side, 0, 415, 384), 4096u);                             // CTA_RASTER_WIDTH from slot n
  CHECK_EQ(bits(side, 0, 1055, 1024), uint32_t(side_base + 256));       // CONSTANT_BUFFER_ADDR_LOWER(0)
  CHECK_EQ(bits(side, 0, 1072, 1056), 0x77u);                           // CONSTANT_BUFFER_ADDR_UPPER(0)
  CHECK_EQ(side[64 + 0x210 / 4], 0xaaaa0040u);                          // slot out + 64
  CHECK_EQ(side[64 + 0x210 / 4 + 1], 0x55u);
  CHECK_EQ(bits(side, 0, 431, 416), 3u);                                // a patch keeps the word's other fields
  // only the patched words differ from the lowered template
  size_t changed = 0;
  for (size_t i = 0; i < side.size(); ++i) changed += side[i] != low.side[i];
  for (size_t i = 0; i < push.size(); ++i) changed += push[i] != low.stream[i];
  CHECK(changed <= low.sites.size());
}

void test_refusals() {
  nv::Kernel k;
  k.param_offset = 0x160;
  k.cbuf0_bytes = 0x170;  // room for two argument words
  const hcq::Program prog("too_many", reinterpret_cast<uint64_t>(&k));
  hcq::CommandBuffer cb;
  cb.exec(prog, {1, 2, 3});
  bool named = false;
  try {
    nv::lower(cb, Gen::Ampere, Engine::Compute);
  } catch (const std::invalid_argument& e) {
    named = std::string(e.what()).find("kernel 'too_many' takes 3 argument words") != std::string::npos;
  }
  CHECK(named);
  CHECK_THROWS(nv::lower(cb, Gen::Ampere, Engine::Copy), std::invalid_argument);
}

void test_gpfifo_entry() {
  const auto e = nv::gpfifo_entry(0x12'3456'7890ull, 100);
  CHECK_EQ(e[0], 0x34567890u);                // GET: address bits 31:2 in place
  CHECK_EQ(e[1], 0x12u | (100u << 10));       // GET_HI 7:0, LENGTH 30:10
  const auto sync = nv::gpfifo_entry(0x1000, 1, true);
  CHECK_EQ(sync[1], (1u << 10) | (1u << 31));  // SYNC: wait
  CHECK_THROWS(nv::gpfifo_entry(0x1002, 1), std::invalid_argument);
  CHECK_THROWS(nv::gpfifo_entry(1ull << 40, 1), std::invalid_argument);
}

void test_qmd_fields() {
  std::vector<uint32_t> w(64, 0xffffffffu);
  nv::set_field(w, {1072, 1056}, 0x1abcd);  // a 17-bit field within a word
  CHECK_EQ(bits(w, 0, 1072, 1056), 0x1abcdu);
  CHECK_EQ(bits(w, 0, 1055, 1024), 0xffffffffu);  // its neighbours unchanged
  CHECK_EQ(bits(w, 0, 1087, 1073), 0x7fffu);
  CHECK_EQ(nv::get_field(w, {1072, 1056}), 0x1abcdu);
  CHECK_THROWS(nv::set_field(w, {583, 580}, 16), std::invalid_argument);
}

}  // namespace

int main() {
  test_semaphores();
  test_timestamp_and_barrier();
  test_copy();
  test_launch();
  test_refusals();
  test_gpfifo_entry();
  test_qmd_fields();
  std::cout << "test_nv_encode: ok\n";
  return 0;
}
