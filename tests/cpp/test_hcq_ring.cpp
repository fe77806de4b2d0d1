// The CPU device's ring: wraparound, back-to-back submits, order, exec split, copy, signals and waits.
// Kernels are plain functions of this file following the CPU kernel ABI.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "tinyhybrid/hcq/command_buffer.h"
#include "tinyhybrid/hcq/cpu.h"

using namespace th::hcq;
using namespace std::chrono_literals;

namespace {

template <class T>
T* ptr(uint64_t a) {
  return reinterpret_cast<T*>(a);
}
uint64_t addr(const void* p) { return reinterpret_cast<uint64_t>(p); }

// args: counter
void k_increment(const uint64_t* a, uint32_t, uint32_t) { ++*ptr<uint64_t>(a[0]); }
// args: log, count, id. Appends id: the log shows the order kernels ran in.
void k_log(const uint64_t* a, uint32_t, uint32_t) {
  uint64_t& n = *ptr<uint64_t>(a[1]);
  ptr<uint64_t>(a[0])[n++] = a[2];
}
// args: out, in, n, cores_seen, calls. out[i] = 2*in[i]+1 over this part's share of [0, n).
void k_affine(const uint64_t* a, uint32_t core, uint32_t cores) {
  float* out = ptr<float>(a[0]);
  const float* in = ptr<const float>(a[1]);
  const uint64_t n = a[2];
  const uint64_t lo = n * core / cores, hi = n * (core + 1) / cores;
  for (uint64_t i = lo; i < hi; ++i) out[i] = 2 * in[i] + 1;
  ptr<uint32_t>(a[3])[core] = cores;
  ptr<std::atomic<uint32_t>>(a[4])[core].fetch_add(1);
}
// args: atomic counter
void k_atomic_inc(const uint64_t* a, uint32_t, uint32_t) { ptr<std::atomic<uint64_t>>(a[0])->fetch_add(1); }
// args: flag set by the host; the kernel spins until it is set (keeps the ring busy).
void k_sleep_ms(const uint64_t* a, uint32_t, uint32_t) { std::this_thread::sleep_for(std::chrono::milliseconds(a[0])); }

CpuConfig config(uint32_t threads, uint32_t slots = 16384) {
  CpuConfig c;
  c.num_threads = threads;
  c.ring_slots = slots;
  c.idle_spin = 50us;
  return c;
}

void test_basic_submit() {
  auto dev = CpuQueue::create(config(2));
  CHECK_EQ(dev->num_threads(), 2u);
  CHECK_EQ(dev->timeline()->name(), std::string("cpu:timeline"));
  uint64_t counter = 0;
  CommandBuffer cb;
  cb.exec(Program("inc", k_increment), {addr(&counter)});
  CHECK_EQ(dev->submit(cb), 1u);
  CHECK_EQ(dev->submit(cb), 2u);
  dev->synchronize();
  CHECK_EQ(counter, 2u);
  CHECK_EQ(dev->timeline()->value(), 2u);
  // An empty buffer still raises the timeline.
  CHECK_EQ(dev->submit(CommandBuffer()), 3u);
  dev->synchronize();
  CHECK_EQ(dev->timeline()->value(), 3u);
}

// One submit of 3x the ring size (it must be fed in parts) and many small ones through a tiny ring.
void test_wraparound() {
  constexpr uint32_t kSlots = 8;
  auto dev = CpuQueue::create(config(2, kSlots));
  CHECK_EQ(dev->ring_slots(), kSlots);
  std::vector<uint64_t> log(4 * kSlots + 20000);
  uint64_t count = 0;
  const Program prog("log", k_log);
  CommandBuffer big;
  for (uint64_t i = 0; i < 3 * kSlots; ++i) big.exec(prog, {addr(log.data()), addr(&count), i});
  dev->submit(big);
  dev->synchronize();
  CHECK_EQ(count, 3u * kSlots);
  for (uint64_t i = 0; i < 3 * kSlots; ++i) CHECK_EQ(log[i], i);

  // Each submit takes 2 slots (exec + timeline): the host keeps catching up with the leader.
  CommandBuffer one;
  const uint32_t id = one.add_slot();
  one.exec(prog, {addr(log.data()), addr(&count), Patch{id}});
  for (uint64_t i = 0; i < 20000; ++i) {
    const uint64_t p[] = {1000 + i};
    dev->submit(one, p);
  }
  dev->synchronize();
  CHECK_EQ(count, 3u * kSlots + 20000);
  for (uint64_t i = 0; i < 20000; ++i) CHECK_EQ(log[3 * kSlots + i], 1000 + i);
}

// 10^5 back-to-back submits of a tiny kernel and a signal: all run, in order, and the signals follow.
void test_back_to_back() {
  constexpr uint64_t kN = 100000;
  auto dev = CpuQueue::create(config(2));
  auto sig = Signal::create("test:progress");
  std::vector<uint64_t> log(kN);
  uint64_t count = 0;
  CommandBuffer cb;
  const uint32_t id = cb.add_slot(), val = cb.add_slot();
  cb.exec(Program("log", k_log), {addr(log.data()), addr(&count), Patch{id}});
  cb.signal(sig, Patch{val});
  uint64_t last_seen = 0;
  bool monotonic = true;
  for (uint64_t i = 0; i < kN; ++i) {
    const uint64_t p[] = {i, i + 1};
    CHECK_EQ(dev->submit(cb, p), i + 1);
    const uint64_t v = sig->value();  // a timeline only grows
    monotonic &= v >= last_seen;
    last_seen = v;
  }
  dev->synchronize();
  CHECK(monotonic);
  CHECK_EQ(sig->value(), kN);
  CHECK_EQ(dev->timeline()->value(), kN);
  CHECK_EQ(count, kN);
  for (uint64_t i = 0; i < kN; ++i)
    if (log[i] != i) CHECK_EQ(log[i], i);
}

void test_exec_split() {
  auto dev = CpuQueue::create(config(4));
  CHECK_EQ(dev->num_threads(), 4u);
  constexpr uint64_t kN = 1003;
  std::vector<float> in(kN), out(kN, -1.0f);
  std::iota(in.begin(), in.end(), 0.0f);
  const Program prog("affine", k_affine);
  for (uint64_t global : {uint64_t(0), uint64_t(1), uint64_t(3), uint64_t(4), uint64_t(kN)}) {
    std::fill(out.begin(), out.end(), -1.0f);
    std::vector<uint32_t> cores(4, 0);
    std::vector<std::atomic<uint32_t>> calls(4);
    CommandBuffer cb;
    cb.exec(prog, {addr(out.data()), addr(in.data()), kN, addr(cores.data()), addr(calls.data())}, Dims(global));
    dev->submit(cb);
    dev->synchronize();
    const uint32_t parts = static_cast<uint32_t>(std::min<uint64_t>(global, 4));
    for (uint32_t c = 0; c < 4; ++c) {
      CHECK_EQ(calls[c].load(), c < parts ? 1u : 0u);  // each core id exactly once
      CHECK_EQ(cores[c], c < parts ? parts : 0u);      // with the right count
    }
    for (uint64_t i = 0; i < kN; ++i) {
      const float want = parts == 0 ? -1.0f : 2 * in[i] + 1;
      if (out[i] != want) CHECK_EQ(out[i], want);
    }
  }
}

void test_copy() {
  auto dev = CpuQueue::create(config(3));
  // 3 MiB + 13 splits across the workers; the others run on one.
  for (uint64_t n : {uint64_t(0), uint64_t(1), uint64_t(4097), uint64_t(3 << 20) + 13}) {
    std::vector<unsigned char> src(n + 1), dst(n + 1, 0xee);
    for (uint64_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
    CommandBuffer cb;
    const uint32_t d = cb.add_slot(), s = cb.add_slot();
    cb.copy(Patch{d}, Patch{s}, n);
    const uint64_t p[] = {addr(dst.data()), addr(src.data())};
    dev->submit(cb, p);
    dev->synchronize();
    CHECK(std::memcmp(dst.data(), src.data(), n) == 0);
    CHECK_EQ(int(dst[n]), 0xee);  // nothing past the end
  }
}

void test_copy_patch_offset() {
  // one slot per buffer serves every range of it: the field is the slot's value plus the Patch's offset
  auto dev = CpuQueue::create(config(2));
  std::vector<unsigned char> src(64), dst(16, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i);
  CommandBuffer cb;
  const uint32_t d = cb.add_slot(), s = cb.add_slot();
  cb.copy(Patch{d, 8}, Patch{s, 40}, 8);
  const uint64_t p[] = {addr(dst.data()), addr(src.data())};
  dev->submit(cb, p);
  dev->synchronize();
  CHECK_EQ(int(dst[7]), 0);
  CHECK_EQ(int(dst[8]), 40);
  CHECK_EQ(int(dst[15]), 47);
}

void test_signal_timeout_message() {
  auto sig = Signal::create("test:never", 3);
  try {
    sig->wait(5, 50ms);
    CHECK(false);
  } catch (const SignalTimeout& e) {
    CHECK_EQ(std::string(e.what()), std::string("signal 'test:never' timed out after 50 ms waiting for value >= 5 (saw 3)"));
    CHECK_EQ(e.signal(), std::string("test:never"));
    CHECK_EQ(e.wanted(), 5u);
    CHECK_EQ(e.seen(), 3u);
  }
  CHECK(!sig->wait_for(4, 1ms));
  sig->set(4);
  CHECK(sig->wait_for(4, 0ms));
  sig->wait(4);  // already there: returns at once
  // A value set by another thread ends the wait.
  std::thread t([&] {
    std::this_thread::sleep_for(5ms);
    sig->set(9);
  });
  sig->wait(9, 10'000ms);
  t.join();
  CHECK_EQ(sig->value(), 9u);
  // The limit is time without a rise: ten rises 30 ms apart (300 ms in all) pass a 120 ms limit; a stall does not.
  std::thread rising([&] {
    for (uint64_t v = 10; v <= 19; ++v) {
      std::this_thread::sleep_for(30ms);
      sig->set(v);
    }
  });
  sig->wait(19, 120ms);
  rising.join();
  CHECK(!sig->wait_for(20, 60ms));
  // Commands finishing inside one submit count too (note_progress): the value stays, the wait goes on.
  std::thread busy([&] {
    for (int i = 0; i < 10; ++i) {
      std::this_thread::sleep_for(30ms);
      sig->note_progress();
    }
    sig->set(20);
  });
  sig->wait(20, 120ms);
  busy.join();
}

// A queued wait holds back the commands after it until the host raises the signal.
void test_device_wait_and_sync_timeout() {
  auto dev = CpuQueue::create(config(2));
  auto gate = Signal::create("test:gate");
  uint64_t counter = 0;
  CommandBuffer cb;
  const uint32_t want = cb.add_slot(1);
  cb.wait(gate, Patch{want});
  cb.exec(Program("inc", k_increment), {addr(&counter)});
  const uint64_t v = dev->submit(cb);
  std::this_thread::sleep_for(20ms);
  CHECK_EQ(dev->timeline()->value(), 0u);
  try {
    dev->synchronize(30ms);
    CHECK(false);
  } catch (const SignalTimeout& e) {
    CHECK_EQ(std::string(e.what()), std::string("signal 'cpu:timeline' timed out after 30 ms waiting for value >= 1 (saw 0)"));
  }
  gate->set(1);
  dev->synchronize();
  CHECK_EQ(counter, 1u);
  CHECK_EQ(dev->timeline()->value(), v);
  // Patched wait value: passes at once since the gate is already at 1.
  const uint64_t p[] = {1};
  dev->submit(cb, p);
  dev->synchronize();
  CHECK_EQ(counter, 2u);
  // One submit of eight 30 ms kernels (240 ms) against a 100 ms limit: each kernel that finishes is progress.
  CommandBuffer slow;
  for (int i = 0; i < 8; ++i) slow.exec(Program("sleep", k_sleep_ms), {30});
  dev->submit(slow);
  dev->synchronize(100ms);
}

void test_timestamp_and_barrier() {
  auto dev = CpuQueue::create(config(2));
  auto t0 = Signal::create("test:t0"), t1 = Signal::create("test:t1");
  alignas(8) uint64_t raw = 0;
  CommandBuffer cb;
  cb.timestamp(t0);
  cb.exec(Program("sleep", k_sleep_ms), {2});
  cb.barrier();
  cb.timestamp(t1);
  cb.timestamp(addr(&raw));
  const auto before = std::chrono::steady_clock::now().time_since_epoch();
  dev->submit(cb);
  dev->synchronize();
  const auto after = std::chrono::steady_clock::now().time_since_epoch();
  const uint64_t lo = std::chrono::duration_cast<std::chrono::nanoseconds>(before).count();
  const uint64_t hi = std::chrono::duration_cast<std::chrono::nanoseconds>(after).count();
  CHECK(lo <= t0->value() && t0->value() + 2'000'000 <= t1->value() && t1->value() <= raw && raw <= hi);
}

void test_errors() {
  auto dev = CpuQueue::create(config(1));
  CommandBuffer cb;
  const uint32_t s = cb.add_slot(7);
  cb.exec(Program("inc", k_increment), {Patch{s}});
  const uint64_t two[] = {1, 2};
  CHECK_THROWS(dev->submit(cb, two), std::invalid_argument);
  CHECK_THROWS(cb.exec(Program("inc", k_increment), {Patch{5}}), std::out_of_range);
  CHECK_EQ(cb.size(), 1u);  // the rejected command left nothing behind
  std::vector<Operand> many(layout::kMaxExecArgs + 1, Operand(0));
  CHECK_THROWS(cb.exec(Program("inc", k_increment), many), std::invalid_argument);
  CHECK_THROWS(cb.timestamp(uint64_t(12)), std::invalid_argument);
  CHECK_THROWS(Program("null", KernelFn(nullptr)), std::invalid_argument);
  CHECK_THROWS(Program::load("/nonexistent/libnothing.so", "k"), std::runtime_error);
  CHECK_THROWS(CpuQueue::create(config(1, 12)), std::invalid_argument);
  CHECK_EQ(dev->last_submitted(), 0u);
}

// Submits from several host threads interleave but none is lost.
void test_concurrent_submitters() {
  auto dev = CpuQueue::create(config(2, 64));
  std::atomic<uint64_t> counter{0};
  CommandBuffer cb;
  cb.exec(Program("inc", k_atomic_inc), {addr(&counter)});
  std::vector<std::thread> hosts;
  for (int t = 0; t < 3; ++t)
    hosts.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) dev->submit(cb);
    });
  for (auto& t : hosts) t.join();
  dev->synchronize();
  CHECK_EQ(counter.load(), 6000u);
  CHECK_EQ(dev->timeline()->value(), 6000u);
}

// Destroying a device finishes what was submitted; a wait nobody will satisfy does not hang it.
void test_shutdown() {
  uint64_t counter = 0;
  {
    auto dev = CpuQueue::create(config(2));
    CommandBuffer cb;
    cb.exec(Program("sleep", k_sleep_ms), {1});
    cb.exec(Program("inc", k_increment), {addr(&counter)});
    for (int i = 0; i < 5; ++i) dev->submit(cb);
  }
  CHECK_EQ(counter, 5u);
  {
    auto dev = CpuQueue::create(config(2, 4));
    auto never = Signal::create("test:never");
    CommandBuffer cb;
    cb.wait(never, 1);
    dev->submit(cb);
    CHECK(dev->would_block(cb) == false);  // 2 of 4 slots used
    dev->submit(cb);
    CHECK(dev->would_block(cb));  // the wait holds the ring: 4 of 4 slots
  }
}

// The command buffer keeps what it references; a submit keeps it until the work is done.
void test_lifetimes() {
  auto dev = CpuQueue::create(config(2));
  std::weak_ptr<Signal> weak;
  {
    auto gate = Signal::create("test:gate");
    weak = gate;
    CommandBuffer cb;
    cb.wait(gate, 1);
    cb.signal(gate, 2);
    dev->submit(cb);
    gate->set(1);
  }  // the buffer and our reference are gone; the running submit still holds the signal
  dev->synchronize();
  CHECK(weak.expired());
}

}  // namespace

int main() {
  test_basic_submit();
  test_wraparound();
  test_back_to_back();
  test_exec_split();
  test_copy();
  test_copy_patch_offset();
  test_signal_timeout_message();
  test_device_wait_and_sync_timeout();
  test_timestamp_and_barrier();
  test_errors();
  test_concurrent_submitters();
  test_shutdown();
  test_lifetimes();
  std::cout << "test_hcq_ring: ok\n";
  return 0;
}
