// The NV queue (drivers/nv/nv_queue.cpp) on the mock GPU (drivers/mock/nv_channel.cpp): submits run in order with
// their patch values, the timeline rises per submit, kernels launch with the arguments a host "kernel" then reads
// from the constant buffer, the rings wrap over thousands of submits, and the dependency tracker orders the NV copy
// queue and a CPU queue by the bytes they touch.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <vector>

#include "check.h"
#include "drivers/mock/nv_channel.h"
#include "drivers/nv/nv_queue.h"
#include "tinyhybrid/hcq/cpu.h"
#include "tinyhybrid/hcq/deps.h"

using namespace th;

namespace {

constexpr std::chrono::milliseconds kWait{10'000};

nv::Channel channel_of(const mock::MockNvGpu& gpu) {
  nv::Channel c;
  c.gpfifo = {gpu.gpfifo(), reinterpret_cast<uint64_t>(gpu.gpfifo()), gpu.gpfifo_bytes()};
  c.push = {gpu.push(), reinterpret_cast<uint64_t>(gpu.push()), gpu.push_bytes()};
  c.side = {gpu.side(), reinterpret_cast<uint64_t>(gpu.side()), gpu.side_bytes()};
  c.gp_put = gpu.gp_put();
  c.gp_get = gpu.gp_get();
  c.doorbell = gpu.doorbell();
  c.token = mock::MockNvGpu::kToken;
  return c;
}

// The host's stand-in for a GPU kernel: out[i] = a[i] + k for i < grid * block, its arguments (out, a, k) read from
// constant buffer 0 at the parameter offset, as the launch left them.
constexpr uint32_t kParams = 0x210;
void add_k(const mock::NvLaunch& l) {
  const auto* args = reinterpret_cast<const uint64_t*>(l.cbuf0 + kParams);
  auto* out = reinterpret_cast<int32_t*>(args[0]);
  const auto* a = reinterpret_cast<const int32_t*>(args[1]);
  const uint64_t n = uint64_t(l.grid[0]) * l.block[0];
  for (uint64_t i = 0; i < n; ++i) out[i] = a[i] + static_cast<int32_t>(args[2]);
}

void test_launches_and_the_timeline() {
  mock::MockNvGpu gpu(true, add_k, 64, 1 << 14, 1 << 14);  // small rings: thousands of submits wrap them many times
  nv::NvQueue q("nv", nv::Gen::Hopper, nv::Engine::Compute, channel_of(gpu), hcq::Signal::create("nv:timeline"));
  nv::Kernel k;
  k.code = 0x1000;
  k.param_offset = kParams;
  k.cbuf0_bytes = kParams + 3 * 8;
  k.cbuf0_bytes = (k.cbuf0_bytes + 15) / 16 * 16;
  const hcq::Program prog("add_k", reinterpret_cast<uint64_t>(&k));
  std::vector<int32_t> a(256), out(256, 0);
  for (int i = 0; i < 256; ++i) a[i] = i;
  hcq::CommandBuffer cb;
  const uint32_t out_slot = cb.add_slot(), k_slot = cb.add_slot();
  cb.exec(prog, {hcq::Patch{out_slot}, reinterpret_cast<uint64_t>(a.data()), hcq::Patch{k_slot}}, hcq::Dims(2), hcq::Dims(128));
  uint64_t v = 0;
  const auto start = std::chrono::steady_clock::now();
  constexpr int kSubmits = 3000;
  for (int s = 1; s <= kSubmits; ++s) {
    const std::vector<uint64_t> patch = {reinterpret_cast<uint64_t>(out.data()), uint64_t(s)};
    v = q.submit(cb, patch);
  }
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / kSubmits;
  CHECK(q.wait(v, kWait));
  CHECK_EQ(gpu.fault(), std::string());
  CHECK_EQ(v, uint64_t(kSubmits));
  CHECK_EQ(q.timeline()->value(), uint64_t(kSubmits));
  CHECK_EQ(gpu.launches(), uint64_t(kSubmits));
  for (int i = 0; i < 256; ++i) CHECK_EQ(out[i], i + kSubmits);  // the last submit's patched k
  std::cout << "nv queue on the mock: " << us << " us a submit (one launch, rings wrapping, mock running alongside)\n";
}

void test_tracker_orders_the_nv_copy_queue_and_a_cpu_queue() {
  mock::MockNvGpu gpu(true, nullptr);
  nv::NvQueue copies("nv:copy", nv::Gen::Hopper, nv::Engine::Copy, channel_of(gpu), hcq::Signal::create("nv:copy:timeline"));
  hcq::CpuConfig c;
  c.name = "cpu";
  c.num_threads = 1;
  auto cpu = hcq::CpuQueue::create(c);
  hcq::DepsTracker tracker;
  auto gate = hcq::Signal::create("gate");
  std::vector<uint8_t> src(4096), mid(4096, 0), dst(4096, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 13);
  const auto addr = [](const std::vector<uint8_t>& v) { return reinterpret_cast<uint64_t>(v.data()); };
  hcq::CommandBuffer first;  // on the NV copy queue, held by the gate: mid = src
  first.wait(gate, 1);
  first.copy(addr(mid), addr(src), 4096);
  first.access(addr(mid), 0, 4096, true);
  first.access(addr(src), 0, 4096, false);
  hcq::CommandBuffer second;  // on the CPU queue: dst = mid, after the NV copy wrote it
  second.copy(addr(dst), addr(mid), 4096);
  second.access(addr(dst), 0, 4096, true);
  second.access(addr(mid), 0, 4096, false);
  tracker.submit(copies, first);
  const uint64_t v = tracker.submit(*cpu, second);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(cpu->timeline()->value() < v);  // waits for the held NV copy
  gate->set(1);
  CHECK(cpu->wait(v, kWait));
  CHECK(std::memcmp(dst.data(), src.data(), 4096) == 0);
  CHECK_EQ(gpu.fault(), std::string());
}

void test_a_malformed_submit_stops_the_mock_with_the_word_named() {
  mock::MockNvGpu gpu(true, nullptr);
  nv::Channel ch = channel_of(gpu);
  const hcq::SignalRef timeline = gpu.signal("nv:timeline");
  // a segment whose method header announces more words than it has
  auto* seg = reinterpret_cast<uint32_t*>(gpu.push());
  seg[0] = 0x20050017u;
  const auto entry = nv::gpfifo_entry(reinterpret_cast<uint64_t>(seg), 2);
  std::memcpy(gpu.gpfifo(), entry.data(), 8);
  *ch.gp_put = 1;
  for (int i = 0; i < 10'000 && gpu.fault().empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(gpu.fault().find("pushbuffer word 0: method header 0x20050017 announces 5 data words") != std::string::npos);
  // its signals stopped with it: a wait for work it will never do fails at once, naming the word, every time
  for (int round = 0; round < 2; ++round) {
    const auto start = std::chrono::steady_clock::now();
    bool threw = false;
    try {
      timeline->wait(1, kWait);
    } catch (const hcq::DeviceFault& e) {
      threw = std::string(e.what()) == "the mock NVIDIA GPU stopped: " + gpu.fault();
      if (!threw) std::cerr << "unexpected fault: " << e.what() << "\n";
    }
    CHECK(threw);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(1));
  }
  timeline->set(0);
  CHECK(timeline->wait_for(0, std::chrono::milliseconds(0)));  // a value already reached is no failure
}

}  // namespace

int main() {
  test_launches_and_the_timeline();
  test_tracker_orders_the_nv_copy_queue_and_a_cpu_queue();
  test_a_malformed_submit_stops_the_mock_with_the_word_named();
  std::cout << "test_nv_queue: ok\n";
  return 0;
}
