// The AMD encoder (drivers/amd/lower.cpp) word for word. Every expected word is composed by hand from the published
// formats (Linux amdgpu nvd.h and soc15d.h for PM4, sdma_v6_0_0_pkt_open.h / navi10_sdma_pkt_open.h for SDMA, Mesa's
// gfx10/gfx11 register database for the compute registers, HSA's hsa.h for AQL), not from the encoder's constants.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "check.h"
#include "drivers/amd/lower.h"

using namespace th;
using th::amd::Engine;
using th::amd::Gen;

namespace {

// PM4 type-3 header: TYPE 31:30 = 3, COUNT 29:16 = body dwords - 1, IT_OPCODE 15:8, SHADER_TYPE bit 1 (compute).
constexpr uint32_t pkt3(uint32_t op, uint32_t body) { return 0xC0000000u | ((body - 1) << 16) | (op << 8) | 2u; }

void test_pm4_signal_wait_timestamp() {
  hcq::CommandBuffer cb;
  cb.signal(hcq::Signal::create("s"), 0x0000'0001'0000'0002ull);
  const uint64_t sig = cb.words()[1];  // the signal's address, as the stream holds it
  cb.wait(hcq::Signal::create("t"), 7);
  const uint64_t wsig = cb.words()[4];
  cb.timestamp(0x1'2345'6780ull);
  const auto low = amd::lower(cb, Gen::Gfx11, Engine::Compute);
  CHECK_EQ(pkt3(0x49, 7), 0xC0064902u);  // RELEASE_MEM, 8 dwords in all
  // RELEASE_MEM dw1: CACHE_FLUSH_AND_INV_TS_EVENT (0x14) | EVENT_INDEX 5 (end of pipe) << 8 | GLM_WB (12) | GLM_INV (13) |
  // GL2_WB (21) | GCR_SEQ (22) | CACHE_POLICY bypass (3 << 25)
  const uint32_t event = 0x14u | (5u << 8) | (1u << 12) | (1u << 13) | (1u << 21) | (1u << 22) | (3u << 25);
  CHECK_EQ(event, 0x06603514u);
  const std::vector<uint32_t> want = {
      0xC0064902u, event, 2u << 29, uint32_t(sig), uint32_t(sig >> 32), 2u, 1u, 0u,  // DATA_SEL 2: 64-bit data
      0xC0053C02u, 0x15u, uint32_t(wsig), uint32_t(wsig >> 32), 7u, 0xffffffffu, 4u,  // WAIT_REG_MEM: >= (5), memory (1 << 4)
      0xC0064902u, event, 3u << 29, 0x23456780u, 0x1u, 0u, 0u, 0u,                       // DATA_SEL 3: the GPU clock
  };
  CHECK(low.stream == want);
}

void test_pm4_dispatch() {
  amd::Kernel k;
  k.code = 0x0000'0012'3456'7800ull;
  k.rsrc1 = 0x11;
  k.rsrc2 = 0x22;
  k.rsrc3 = 0x33;
  k.kernarg_sgpr = 4;
  k.kernarg_bytes = 24;
  const hcq::Program prog("E_4", reinterpret_cast<uint64_t>(&k));
  hcq::CommandBuffer cb;
  const uint32_t out = cb.add_slot(), n = cb.add_slot();
  cb.exec(prog, {hcq::Patch{out}, 5}, hcq::Dims(hcq::Patch{n}, 2, 1), hcq::Dims(64, 1, 1));
  cb.exec(prog, {0, 0}, hcq::Dims(1), hcq::Dims(1));
  const auto low = amd::lower(cb, Gen::Gfx10, Engine::Compute);
  // SET_SH_REG (0x76): the offset dword is the register's dword address - 0x2C00
  const std::vector<uint32_t> first = {
      pkt3(0x76, 3), 0x20C, 0x34567800u >> 8 | (0x12u << 24), 0x0u,  // COMPUTE_PGM_LO (0xB830): address >> 8, PGM_HI: >> 40
      pkt3(0x76, 3), 0x212, 0x11, 0x22,                              // COMPUTE_PGM_RSRC1 (0xB848), RSRC2
      pkt3(0x76, 2), 0x228, 0x33,                                    // COMPUTE_PGM_RSRC3 (0xB8A0)
      pkt3(0x76, 2), 0x218, 0,                                       // COMPUTE_TMPRING_SIZE (0xB860)
      pkt3(0x76, 4), 0x21B, 0, 0, 0,                                 // COMPUTE_RESTART_X/Y/Z (0xB86C)
      pkt3(0x76, 4), 0x204, 0, 0, 0,                                 // COMPUTE_START_X/Y/Z (0xB810)
      pkt3(0x76, 2), 0x215, 0,                                       // COMPUTE_RESOURCE_LIMITS (0xB854)
      pkt3(0x76, 3), 0x244, 0, 0,                                    // COMPUTE_USER_DATA_4/5 (0xB910): the kernarg address
      pkt3(0x76, 4), 0x207, 64, 1, 1,                                // COMPUTE_NUM_THREAD_X/Y/Z (0xB81C)
      pkt3(0x15, 4), 0, 2, 1,                                        // DISPATCH_DIRECT: dims (x patched)
      (1u << 0) | (1u << 2) | (1u << 6) | (1u << 15),                // COMPUTE_SHADER_EN, FORCE_START_AT_000, ORDER_MODE, CS_W32_EN
  };
  CHECK(std::vector<uint32_t>(low.stream.begin(), low.stream.begin() + first.size()) == first);
  // before the second launch, CS_PARTIAL_FLUSH: EVENT_WRITE (0x46), EVENT_TYPE 7 | EVENT_INDEX 4 << 8
  CHECK_EQ(low.stream[first.size()], pkt3(0x46, 1));
  CHECK_EQ(low.stream[first.size() + 1], 0x407u);
  // patching: the kernarg address (the side area) into USER_DATA_4/5, the grid's x, the arguments
  std::vector<uint32_t> stream = low.stream, side = low.side;
  low.patch(stream, side, std::vector<uint64_t>{0x0000'0007'0000'1000ull, 96}, 0x0000'00ab'0000'0100ull);
  CHECK_EQ(stream[29], 0x100u);  // USER_DATA_4: the kernarg address, low
  CHECK_EQ(stream[30], 0xabu);
  CHECK_EQ(stream[37], 96u);  // DISPATCH_DIRECT's x
  CHECK(side[0] == 0x1000u && side[1] == 7u && side[2] == 5u && side[3] == 0u);
  CHECK_EQ(stream[first.size() + 2 + 29], 0x100u + 32);  // the second launch's arguments, 16-byte aligned after the first's
}

void test_sdma() {
  hcq::CommandBuffer cb;
  cb.copy(0x0000'0022'0000'0000ull, 0x0000'0011'0000'0100ull, 4096);
  const uint64_t sig_value = 0x0000'0003'0000'0004ull;
  auto s = hcq::Signal::create("s");
  cb.signal(s, sig_value);
  cb.wait(s, 9);
  cb.timestamp(0x5000);
  const auto low = amd::lower(cb, Gen::Gfx11, Engine::Copy);
  const uint64_t a = s->address();
  const std::vector<uint32_t> want = {
      0x00000001u, 4095u, 0u, 0x100u, 0x11u, 0u, 0x22u,                  // COPY_LINEAR: op 1, sub 0; COUNT = bytes - 1; src, dst
      0x00030005u, uint32_t(a), uint32_t(a >> 32), 4u,                   // FENCE (op 5, MTYPE 3 << 16): the low word
      0x00030005u, uint32_t(a + 4), uint32_t((a + 4) >> 32), 3u,         // then the high word at +4
      0x8u | (5u << 28) | (1u << 31), uint32_t(a), uint32_t(a >> 32), 9u, 0xffffffffu, 0xAu | (0xfffu << 16),  // POLL_REGMEM >=
      0x0000020Du, 0x5000u, 0u,                                          // TIMESTAMP (op 13), GET_GLOBAL (sub 2)
  };
  CHECK(low.stream == want);
  // SDMA v5 copies at most 0x3fff00 bytes a packet: 8 MiB takes three
  hcq::CommandBuffer big;
  big.copy(0x10000000, 0x20000000, 8 << 20);
  const auto pieces = amd::lower(big, Gen::Gfx10, Engine::Copy);
  CHECK_EQ(pieces.stream.size(), size_t(3 * 7));
  CHECK_EQ(pieces.stream[1], 0x3fff00u - 1);
  CHECK_EQ(pieces.stream[7 + 3], 0x20000000u + 0x3fff00u);
  CHECK_EQ(pieces.stream[14 + 1], uint32_t((8u << 20) - 2 * 0x3fff00u - 1));
  CHECK_THROWS(amd::lower(cb, Gen::Gfx11, Engine::Compute), std::invalid_argument);
}

void test_aql_and_indirect_buffer() {
  const uint32_t grid[3] = {1024, 2, 1};
  const uint16_t block[3] = {256, 1, 1};
  const auto p = amd::aql_dispatch(0x1111'2222'3333'4400ull, 0x5555'6666'7777'8800ull, grid, block, 2, 16, 4096, 0xABCDull);
  // header: KERNEL_DISPATCH (2) | BARRIER (bit 8) | acquire SYSTEM (2 << 9) | release SYSTEM (2 << 11); setup: 2 dims
  CHECK_EQ(p[0], (2u | (1u << 8) | (2u << 9) | (2u << 11)) | (2u << 16));
  CHECK_EQ(p[1], 256u | (1u << 16));               // workgroup_size_x @4, _y @6
  CHECK_EQ(p[2], 1u);                              // workgroup_size_z @8, reserved0 @10
  CHECK(p[3] == 1024 && p[4] == 2 && p[5] == 1);   // grid_size_x/y/z @12/16/20
  CHECK(p[6] == 16 && p[7] == 4096);               // private_segment_size @24, group_segment_size @28
  CHECK(p[8] == 0x33334400u && p[9] == 0x11112222u);  // kernel_object @32
  CHECK(p[10] == 0x77778800u && p[11] == 0x55556666u);  // kernarg_address @40
  CHECK(p[14] == 0xABCDu && p[15] == 0);           // completion_signal @56
  const std::vector<uint64_t> deps = {0x10, 0x20};
  const auto b = amd::aql_barrier_and(deps, 0x30);
  CHECK_EQ(b[0], 3u | (1u << 8) | (2u << 9) | (2u << 11));  // BARRIER_AND (3)
  CHECK(b[2] == 0x10 && b[4] == 0x20 && b[6] == 0 && b[14] == 0x30);  // dep_signal[0..] @8, completion @56
  const auto ib = amd::indirect_buffer(0x0000'0001'0000'1000ull, 100, 3);
  CHECK(ib[0] == pkt3(0x3F, 3) && ib[1] == 0x1000u && ib[2] == 1u);
  CHECK_EQ(ib[3], 100u | (1u << 23) | (3u << 24));  // IB_SIZE, VALID (bit 23), VMID 27:24
}

void test_refusals() {
  amd::Kernel k;
  k.kernarg_bytes = 8;
  const hcq::Program prog("small_args", reinterpret_cast<uint64_t>(&k));
  hcq::CommandBuffer cb;
  cb.exec(prog, {1, 2});
  bool named = false;
  try {
    amd::lower(cb, Gen::Gfx11, Engine::Compute);
  } catch (const std::invalid_argument& e) {
    named = std::string(e.what()).find("kernel 'small_args' takes 2 argument words, past its kernarg segment of 8 bytes") != std::string::npos;
  }
  CHECK(named);
  CHECK_THROWS(amd::lower(cb, Gen::Gfx11, Engine::Copy), std::invalid_argument);
}

}  // namespace

int main() {
  test_pm4_signal_wait_timestamp();
  test_pm4_dispatch();
  test_sdma();
  test_aql_and_indirect_buffer();
  test_refusals();
  std::cout << "test_amd_encode: ok\n";
  return 0;
}
