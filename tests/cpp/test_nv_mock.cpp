// The NV encoder's streams run on the mock command processor (drivers/mock/nv_gpu.cpp), whose decoder is written
// from the formats on its own: semaphores release and acquire (64-bit payloads, timestamps), copies move bytes, a
// launch's QMD decodes to the grid, block, program and constant buffer the encoder wrote, and a GPFIFO entry runs its
// segment. Malformed streams and stuck acquires are MockFaults naming the word, never hangs.
#include <sys/mman.h>

#include <chrono>
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "drivers/mock/nv_gpu.h"
#include "drivers/nv/lower.h"

using namespace th;
using th::nv::Engine;
using th::nv::Gen;

namespace {

// GPU memory for the mock: mapped below 2^40, where a QMD's address (SEND_PCAS_A takes it >> 8 in 32 bits) and a
// GPFIFO entry's reach.
struct LowMemory {
  explicit LowMemory(uintptr_t at, size_t bytes) : bytes(bytes) {
    base = mmap(reinterpret_cast<void*>(at), bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    CHECK(base == reinterpret_cast<void*>(at));
  }
  ~LowMemory() { munmap(base, bytes); }
  LowMemory(const LowMemory&) = delete;
  LowMemory& operator=(const LowMemory&) = delete;
  uint32_t* words() const { return static_cast<uint32_t*>(base); }
  void* base;
  size_t bytes;
};

struct Run {
  std::vector<uint32_t> push;
  std::span<uint32_t> side;  // in low memory
};

Run lowered(const hcq::CommandBuffer& cb, Engine engine, const std::vector<uint64_t>& slots, const LowMemory* side = nullptr) {
  const auto low = nv::lower(cb, Gen::Hopper, engine);
  Run r{low.stream, {}};
  if (side != nullptr) {
    CHECK(low.side.size() * 4 <= side->bytes);
    r.side = std::span<uint32_t>(side->words(), low.side.size());
    std::copy(low.side.begin(), low.side.end(), r.side.begin());
  }
  low.patch(r.push, r.side, slots, reinterpret_cast<uint64_t>(r.side.data()));
  return r;
}

std::string fault_of(mock::NvCommandProcessor& gpu, const std::vector<uint32_t>& words) {
  try {
    gpu.run(words);
  } catch (const mock::MockFault& e) {
    return e.what();
  }
  return "";
}

void test_compute_stream_round_trip() {
  nv::Kernel k;
  k.code = 0x7000'0000'1000ull;
  k.registers = 24;
  k.shared_bytes = 256;
  k.param_offset = 0x210;
  k.cbuf0_bytes = 0x220;
  const hcq::Program prog("E_8", reinterpret_cast<uint64_t>(&k));
  auto ready = hcq::Signal::create("ready", 1), done = hcq::Signal::create("done");
  alignas(16) uint64_t stamp[2] = {0, 0};
  hcq::CommandBuffer cb;
  const uint32_t out = cb.add_slot(), n = cb.add_slot(), value = cb.add_slot();
  cb.wait(ready, 1);
  cb.exec(prog, {hcq::Patch{out, 16}, 7}, hcq::Dims(hcq::Patch{n}, 2, 1), hcq::Dims(32, 4, 1));
  cb.timestamp(reinterpret_cast<uint64_t>(&stamp[1]));
  cb.signal(done, hcq::Patch{value});
  const LowMemory side(0x50000000, 1 << 16);
  const Run r = lowered(cb, Engine::Compute, {0xdead'0000ull, 48, 0x1'0000'0002ull}, &side);
  std::vector<mock::NvLaunch> seen;
  std::vector<uint64_t> args;
  mock::NvCommandProcessor gpu(true, [&](const mock::NvLaunch& l) {
    seen.push_back(l);
    const auto* cbuf = reinterpret_cast<const uint64_t*>(l.cbuf0 + 0x210);
    args = {cbuf[0], cbuf[1]};
  });
  const uint64_t before = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
  gpu.run(r.push);
  CHECK_EQ(seen.size(), size_t(1));
  const auto& l = seen[0];
  CHECK_EQ(l.program, k.code);
  CHECK(l.grid[0] == 48 && l.grid[1] == 2 && l.grid[2] == 1);
  CHECK(l.block[0] == 32 && l.block[1] == 4 && l.block[2] == 1);
  CHECK_EQ(l.cbuf0_bytes, 0x220u);
  CHECK_EQ(l.shared_bytes, 256u);
  CHECK_EQ(l.registers, 24u);
  CHECK_EQ(l.qmd, reinterpret_cast<uint64_t>(r.side.data()));
  CHECK(args == std::vector<uint64_t>({0xdead'0010ull, 7}));
  CHECK_EQ(done->value(), 0x1'0000'0002ull);
  CHECK(stamp[1] >= before);  // the time lands at the timestamp's address
}

void test_copy_stream() {
  std::vector<uint8_t> src(3000), dst(3000, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7);
  hcq::CommandBuffer cb;
  cb.copy(reinterpret_cast<uint64_t>(dst.data()) + 8, reinterpret_cast<uint64_t>(src.data()), 2000);
  const Run r = lowered(cb, Engine::Copy, {});
  mock::NvCommandProcessor gpu(true, nullptr);
  gpu.run(r.push);
  CHECK(std::memcmp(dst.data() + 8, src.data(), 2000) == 0);
  CHECK(dst[0] == 0 && dst[2008] == 0);
}

void test_gpfifo_entry_runs_its_segment() {
  // a GPFIFO entry reaches 40 bits of address: the segment and the semaphore sit in memory mapped low
  void* low = mmap(reinterpret_cast<void*>(0x40000000), 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  CHECK(low != MAP_FAILED);
  auto* sem = static_cast<uint64_t*>(low);
  auto signal = hcq::Signal::external("low", reinterpret_cast<std::atomic<uint64_t>*>(sem), nullptr);
  hcq::CommandBuffer cb;
  cb.signal(signal, 99);
  const auto lowered_cb = nv::lower(cb, Gen::Ampere, Engine::Compute);
  auto* segment = static_cast<uint32_t*>(low) + 1024;
  std::memcpy(segment, lowered_cb.stream.data(), lowered_cb.stream.size() * 4);
  const auto entry = nv::gpfifo_entry(reinterpret_cast<uint64_t>(segment), static_cast<uint32_t>(lowered_cb.stream.size()));
  mock::NvCommandProcessor gpu(false, nullptr);
  gpu.run_entry(entry[0], entry[1]);
  CHECK_EQ(*sem, 99u);
  munmap(low, 1 << 16);
}

void test_acquire_waits_for_the_release() {
  auto gate = hcq::Signal::create("gate");
  hcq::CommandBuffer cb;
  cb.wait(gate, 3);
  const Run r = lowered(cb, Engine::Compute, {});
  mock::NvCommandProcessor gpu(true, nullptr);
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    gate->set(3);
  });
  const auto start = std::chrono::steady_clock::now();
  gpu.run(r.push);
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(25));
  opener.join();
  mock::NvCommandProcessor impatient(true, nullptr, std::chrono::milliseconds(20));
  hcq::CommandBuffer stuck;
  stuck.wait(gate, 5);
  const std::string what = fault_of(impatient, lowered(stuck, Engine::Compute, {}).push);
  CHECK(what.find("pushbuffer word 5: semaphore acquire at") != std::string::npos);
  CHECK(what.find("waited 20 ms for 5 (saw 3)") != std::string::npos);
}

void test_malformed_streams_name_the_word() {
  mock::NvCommandProcessor gpu(true, nullptr);
  // an increasing method announcing 5 words in a segment of 3
  CHECK(fault_of(gpu, {0x20050017u, 0, 0}).find("pushbuffer word 0: method header 0x20050017 announces 5 data words, the segment has 2 left") !=
        std::string::npos);
  // a compute method the mock does not know (0x1234 on subchannel 1), after a valid host NOP
  CHECK(fault_of(gpu, {(1u << 29) | (1u << 16) | (0x08 >> 2), 0, (1u << 29) | (1u << 16) | (1u << 13) | (0x1234 >> 2), 5})
            .find("pushbuffer word 3: unknown compute method 0x1234") != std::string::npos);
  // an opcode that is not a method
  CHECK(fault_of(gpu, {0xE0000000u}).find("has opcode 7") != std::string::npos);
  // a launch whose QMD is not version 3.0
  const LowMemory qmd(0x60000000, 4096);  // zeros: version 0.0
  const uint64_t at = reinterpret_cast<uint64_t>(qmd.base);
  CHECK(fault_of(gpu, {(1u << 29) | (1u << 16) | (1u << 13) | (0x2B4 >> 2), uint32_t(at >> 8),
                       (1u << 29) | (1u << 16) | (1u << 13) | (0x2C0 >> 2), 3})
            .find("pushbuffer word 3: QMD at") != std::string::npos);
  // a method on a subchannel with no object
  CHECK(fault_of(gpu, {(1u << 29) | (1u << 16) | (2u << 13) | (0x300 >> 2), 0}).find("subchannel 2, which has no object") != std::string::npos);
}

}  // namespace

int main() {
  test_compute_stream_round_trip();
  test_copy_stream();
  test_gpfifo_entry_runs_its_segment();
  test_acquire_waits_for_the_release();
  test_malformed_streams_name_the_word();
  std::cout << "test_nv_mock: ok\n";
  return 0;
}
