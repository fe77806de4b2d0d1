// The AMD encoder's streams on the mock command processor and SDMA engine (drivers/mock/amd_gpu.cpp), whose decoders
// are written from the formats on their own: a dispatch decodes to the program, resources, grid, block and kernarg
// pointer the encoder set (the arguments read back through it), signals and fences write their 64-bit values,
// timestamps the clock, waits poll, INDIRECT_BUFFER runs its segment, copies move bytes; malformed streams name the
// dword.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "drivers/amd/lower.h"
#include "drivers/mock/amd_gpu.h"

using namespace th;
using th::amd::Engine;
using th::amd::Gen;

namespace {

std::string fault_of(const std::function<void()>& run) {
  try {
    run();
  } catch (const mock::MockFault& e) {
    return e.what();
  }
  return "";
}

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

void test_compute_round_trip() {
  amd::Kernel k;
  k.code = 0x0000'0012'3456'7800ull;
  k.rsrc1 = 0xA1;
  k.rsrc2 = 0xB2;
  k.rsrc3 = 0xC3;
  k.kernarg_sgpr = 2;
  k.kernarg_bytes = 16;
  const hcq::Program prog("E_7", reinterpret_cast<uint64_t>(&k));
  auto ready = hcq::Signal::create("ready", 1), done = hcq::Signal::create("done");
  alignas(8) uint64_t stamp = 0;
  hcq::CommandBuffer cb;
  const uint32_t out = cb.add_slot(), n = cb.add_slot();
  cb.wait(ready, 1);
  cb.exec(prog, {hcq::Patch{out, 8}, 42}, hcq::Dims(hcq::Patch{n}, 3, 1), hcq::Dims(256, 1, 1));
  cb.barrier();
  cb.timestamp(reinterpret_cast<uint64_t>(&stamp));
  cb.signal(done, 0x0000'0005'0000'0006ull);
  const auto low = amd::lower(cb, Gen::Gfx11, Engine::Compute);
  std::vector<uint32_t> stream = low.stream, side = low.side;
  low.patch(stream, side, std::vector<uint64_t>{0xbeef'0000ull, 12}, reinterpret_cast<uint64_t>(side.data()));
  std::vector<mock::AmdLaunch> seen;
  std::vector<uint64_t> args;
  mock::AmdCommandProcessor gpu([&](const mock::AmdLaunch& l) {
    seen.push_back(l);
    const auto* kernarg = reinterpret_cast<const uint64_t*>(l.user_data[2] | (uint64_t(l.user_data[3]) << 32));
    args = {kernarg[0], kernarg[1]};
  });
  const uint64_t before = now_ns();
  gpu.run_pm4(stream);
  CHECK_EQ(seen.size(), size_t(1));
  const auto& l = seen[0];
  CHECK_EQ(l.program, k.code);
  CHECK(l.rsrc1 == 0xA1 && l.rsrc2 == 0xB2 && l.rsrc3 == 0xC3 && l.wave32);
  CHECK(l.grid[0] == 12 && l.grid[1] == 3 && l.grid[2] == 1);
  CHECK(l.block[0] == 256 && l.block[1] == 1 && l.block[2] == 1);
  CHECK(args == std::vector<uint64_t>({0xbeef'0008ull, 42}));
  CHECK(stamp >= before);
  CHECK_EQ(done->value(), 0x0000'0005'0000'0006ull);
  // the same stream through an INDIRECT_BUFFER
  done->set(0);
  const auto ib = amd::indirect_buffer(reinterpret_cast<uint64_t>(stream.data()), static_cast<uint32_t>(stream.size()));
  gpu.run_pm4(std::vector<uint32_t>(ib.begin(), ib.end()));
  CHECK_EQ(gpu.launches(), uint64_t(2));
  CHECK_EQ(done->value(), 0x0000'0005'0000'0006ull);
}

void test_sdma_round_trip() {
  std::vector<uint8_t> src(5000), dst(5000, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 3);
  auto sig = hcq::Signal::create("s"), gate = hcq::Signal::create("gate");
  alignas(8) uint64_t stamp = 0;
  hcq::CommandBuffer cb;
  cb.wait(gate, 2);
  cb.copy(reinterpret_cast<uint64_t>(dst.data()), reinterpret_cast<uint64_t>(src.data()), 4999);
  cb.timestamp(reinterpret_cast<uint64_t>(&stamp));
  cb.signal(sig, 0x0000'0009'0000'0001ull);
  const auto low = amd::lower(cb, Gen::Gfx10, Engine::Copy);
  mock::AmdCommandProcessor sdma(nullptr);
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    gate->set(2);
  });
  sdma.run_sdma(low.stream);
  opener.join();
  CHECK(std::memcmp(dst.data(), src.data(), 4999) == 0 && dst[4999] == 0);
  CHECK(stamp != 0);
  CHECK_EQ(sig->value(), 0x0000'0009'0000'0001ull);
}

void test_malformed_streams_name_the_dword() {
  mock::AmdCommandProcessor gpu(nullptr, std::chrono::milliseconds(20));
  CHECK(fault_of([&] { gpu.run_pm4(std::vector<uint32_t>{0x80000000u}); }).find("dword 0: header 0x80000000 is not a type-3 packet") != std::string::npos);
  // RELEASE_MEM announcing 7 dwords with 2 left, after a one-dword NOP packet (header + 1)
  const std::vector<uint32_t> short_stream = {0xC0001002u, 0, 0xC0064902u, 0, 0};
  CHECK(fault_of([&] { gpu.run_pm4(short_stream); }).find("dword 2: packet 0x49 announces 7 dwords, the stream has 2 left") != std::string::npos);
  CHECK(fault_of([&] { gpu.run_pm4(std::vector<uint32_t>{0xC000EE02u, 0}); }).find("unknown PM4 opcode 0xee") != std::string::npos);
  CHECK(fault_of([&] { gpu.run_sdma(std::vector<uint32_t>{0, 0x63u}); }).find("mock AMD SDMA: dword 1: unknown SDMA opcode 99") != std::string::npos);
  uint32_t never = 0;
  const std::vector<uint32_t> stuck = {0xC0053C02u, 0x15u, uint32_t(reinterpret_cast<uint64_t>(&never)),
                                       uint32_t(reinterpret_cast<uint64_t>(&never) >> 32), 1, 0xffffffffu, 4};
  CHECK(fault_of([&] { gpu.run_pm4(stuck); }).find("gave up after 20 ms (reference 1, saw 0)") != std::string::npos);
}

}  // namespace

int main() {
  test_compute_round_trip();
  test_sdma_round_trip();
  test_malformed_streams_name_the_dword();
  std::cout << "test_amd_mock: ok\n";
  return 0;
}
