// The AMD queue (drivers/amd/amd_queue.cpp) on the mock AMD GPU (drivers/mock/amd_channel.cpp): dispatches run in
// order with their patched arguments, read by a host "kernel" through the kernarg pointer; the ring and the argument
// ring wrap (a NOP fills the ring's end) over thousands of submits; the timeline rises per submit; the dependency
// tracker orders the SDMA queue and a CPU queue by the bytes they touch.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <thread>
#include <vector>

#include "check.h"
#include "drivers/amd/amd_queue.h"
#include "drivers/mock/amd_channel.h"
#include "tinyhybrid/hcq/cpu.h"
#include "tinyhybrid/hcq/deps.h"

using namespace th;

namespace {

constexpr std::chrono::milliseconds kWait{10'000};

amd::RingChannel channel_of(const mock::MockAmdGpu& gpu) {
  amd::RingChannel c;
  c.ring = {gpu.ring(), reinterpret_cast<uint64_t>(gpu.ring()), gpu.ring_bytes()};
  c.side = {gpu.side(), reinterpret_cast<uint64_t>(gpu.side()), gpu.side_bytes()};
  c.wptr = gpu.wptr();
  c.rptr = gpu.rptr();
  c.doorbell = gpu.doorbell();
  return c;
}

constexpr uint32_t kKernargSgpr = 4;
// out[i] = a[i] + k for every work-item, its arguments (out, a, k) read through the kernarg pointer in user SGPRs 4-5.
void add_k(const mock::AmdLaunch& l) {
  const auto* args = reinterpret_cast<const uint64_t*>(l.user_data[kKernargSgpr] | (uint64_t(l.user_data[kKernargSgpr + 1]) << 32));
  auto* out = reinterpret_cast<int32_t*>(args[0]);
  const auto* a = reinterpret_cast<const int32_t*>(args[1]);
  for (uint64_t i = 0; i < uint64_t(l.grid[0]) * l.block[0]; ++i) out[i] = a[i] + static_cast<int32_t>(args[2]);
}

void test_dispatches_and_the_timeline() {
  mock::MockAmdGpu gpu(false, add_k, 4096, 1024);  // small rings: they wrap many times
  amd::AmdQueue q("amd", amd::Gen::Gfx11, amd::Engine::Compute, channel_of(gpu), gpu.signal("amd:timeline"));
  amd::Kernel k;
  k.code = 0x10000;
  k.kernarg_sgpr = kKernargSgpr;
  k.kernarg_bytes = 24;
  const hcq::Program prog("add_k", reinterpret_cast<uint64_t>(&k));
  std::vector<int32_t> a(128), out(128, 0);
  for (int i = 0; i < 128; ++i) a[i] = 3 * i;
  hcq::CommandBuffer cb;
  const uint32_t out_slot = cb.add_slot(), k_slot = cb.add_slot();
  cb.exec(prog, {hcq::Patch{out_slot}, reinterpret_cast<uint64_t>(a.data()), hcq::Patch{k_slot}}, hcq::Dims(2), hcq::Dims(64));
  constexpr int kSubmits = 2000;
  uint64_t v = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int s = 1; s <= kSubmits; ++s) v = q.submit(cb, std::vector<uint64_t>{reinterpret_cast<uint64_t>(out.data()), uint64_t(s)});
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / kSubmits;
  CHECK(q.wait(v, kWait));
  CHECK_EQ(gpu.fault(), std::string());
  CHECK_EQ(q.timeline()->value(), uint64_t(kSubmits));
  CHECK_EQ(gpu.launches(), uint64_t(kSubmits));
  for (int i = 0; i < 128; ++i) CHECK_EQ(out[i], 3 * i + kSubmits);
  std::cout << "amd queue on the mock: " << us << " us a submit (one dispatch, rings wrapping, mock running alongside)\n";
}

void test_tracker_orders_sdma_and_a_cpu_queue() {
  mock::MockAmdGpu gpu(true, nullptr);
  amd::AmdQueue copies("amd:sdma", amd::Gen::Gfx10, amd::Engine::Copy, channel_of(gpu), gpu.signal("amd:sdma:timeline"));
  hcq::CpuConfig c;
  c.name = "cpu";
  c.num_threads = 1;
  auto cpu = hcq::CpuQueue::create(c);
  hcq::DepsTracker tracker;
  auto gate = gpu.signal("gate");
  std::vector<uint8_t> src(3000), mid(3000, 0), dst(3000, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 11);
  const auto addr = [](const std::vector<uint8_t>& b) { return reinterpret_cast<uint64_t>(b.data()); };
  hcq::CommandBuffer first;  // SDMA, held by the gate: mid = src
  first.wait(gate, 1);
  first.copy(addr(mid), addr(src), 3000);
  first.access(addr(mid), 0, 3000, true);
  first.access(addr(src), 0, 3000, false);
  hcq::CommandBuffer second;  // CPU: dst = mid
  second.copy(addr(dst), addr(mid), 3000);
  second.access(addr(dst), 0, 3000, true);
  second.access(addr(mid), 0, 3000, false);
  tracker.submit(copies, first);
  const uint64_t v = tracker.submit(*cpu, second);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(cpu->timeline()->value() < v);
  gate->set(1);
  CHECK(cpu->wait(v, kWait));
  CHECK(std::memcmp(dst.data(), src.data(), 3000) == 0);
  CHECK_EQ(gpu.fault(), std::string());
}

}  // namespace

int main() {
  test_dispatches_and_the_timeline();
  test_tracker_orders_sdma_and_a_cpu_queue();
  std::cout << "test_amd_queue: ok\n";
  return 0;
}
