// Submits through the dependency tracker on two CPU queues: a read after a held write waits for it, disjoint bytes
// do not, a write after a read waits for the read, a group's members do not wait on one another, and the host's
// waits_for names what it must wait for. Also the CPU queue's parallelism bounds and a shared core budget.
#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <vector>

#include "check.h"
#include "tinyhybrid/hcq/cpu.h"
#include "tinyhybrid/hcq/deps.h"

using namespace th::hcq;

namespace {

uint64_t addr(const void* p) { return reinterpret_cast<uint64_t>(p); }

std::unique_ptr<CpuQueue> make_queue(const char* name, std::shared_ptr<CoreShare> share = nullptr) {
  CpuConfig c;
  c.name = name;
  c.num_threads = 2;
  c.share = std::move(share);
  return CpuQueue::create(c);
}

// A copy of [src_off, src_off + n) of src into dst at dst_off, with its accesses declared.
CommandBuffer copy_cb(const void* dst, uint64_t dst_off, const void* src, uint64_t src_off, uint64_t n, const SignalRef& gate = nullptr) {
  CommandBuffer cb;
  if (gate) cb.wait(gate, 1);
  cb.copy(addr(dst) + dst_off, addr(src) + src_off, n);
  cb.access(addr(dst), dst_off, dst_off + n, true);
  cb.access(addr(src), src_off, src_off + n, false);
  return cb;
}

void test_raw_waw_war_across_queues() {
  auto a = make_queue("A"), b = make_queue("B");
  DepsTracker t;
  auto gate = Signal::create("gate");
  std::vector<uint8_t> x(128, 0), y(128), out_lo(64, 0), out_hi(64, 0), z(128, 7);
  std::iota(y.begin(), y.end(), uint8_t(0));
  const auto held = copy_cb(x.data(), 0, y.data(), 0, 64, gate);  // A: x[0:64] = y[0:64] once the gate opens
  t.submit(*a, held);
  // The host may read x[64:128] (nobody writes it) but not x[0:64].
  CHECK(t.waits_for(addr(x.data()), 64, 128).empty());
  CHECK_EQ(t.waits_for(addr(x.data()), 0, 64).size(), size_t(1));
  const auto hi = copy_cb(out_hi.data(), 0, x.data(), 64, 64);
  const uint64_t v_hi = t.submit(*b, hi);
  CHECK(b->wait(v_hi, std::chrono::milliseconds(5000)));  // disjoint from A's write: done while A is held
  CHECK(a->timeline()->value() < a->last_submitted());
  const auto lo = copy_cb(out_lo.data(), 0, x.data(), 0, 64);
  const uint64_t v_lo = t.submit(*b, lo);
  const auto war = copy_cb(y.data(), 0, z.data(), 0, 64);  // overwrites what A has yet to read
  const uint64_t v_war = t.submit(*b, war);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(b->timeline()->value() < v_lo);
  gate->set(1);
  CHECK(b->wait(v_war, std::chrono::milliseconds(5000)));
  for (int i = 0; i < 64; ++i) {
    CHECK_EQ(int(out_lo[i]), i);
    CHECK_EQ(int(x[i]), i);
    CHECK_EQ(int(y[i]), 7);
  }
  t.prune();  // everything passed: nothing is left to wait for
  CHECK_EQ(t.entries(addr(x.data())) + t.entries(addr(y.data())), size_t(0));
}

// A group orders itself: B's member waits for A's through a signal of the group, not for all of A's submit.
void test_group_members_do_not_wait_on_each_other() {
  auto a = make_queue("A"), b = make_queue("B");
  DepsTracker t;
  auto handoff = Signal::create("handoff");
  std::vector<uint8_t> x(64, 0), y(64, 0), src(64, 9);
  CommandBuffer ca;  // A writes x, signals B, then waits for B's write of y before reading it
  ca.copy(addr(x.data()), addr(src.data()), 64);
  ca.signal(handoff, 1);
  ca.wait(handoff, 2);
  ca.copy(addr(src.data()), addr(y.data()), 64);
  ca.access(addr(x.data()), 0, 64, true);
  ca.access(addr(y.data()), 0, 64, false);
  CommandBuffer cb;  // B reads x after A's signal, writes y, signals A
  cb.wait(handoff, 1);
  cb.copy(addr(y.data()), addr(x.data()), 64);
  cb.signal(handoff, 2);
  cb.access(addr(x.data()), 0, 64, false);
  cb.access(addr(y.data()), 0, 64, true);
  const Submission group[] = {{a.get(), &ca}, {b.get(), &cb}};
  const auto values = t.submit(group);  // B waiting for all of A would deadlock: A waits for B
  CHECK(a->wait(values[0], std::chrono::milliseconds(5000)));
  CHECK(b->wait(values[1], std::chrono::milliseconds(5000)));
  CHECK_EQ(int(y[10]), 9);
  CHECK_THROWS(t.submit(*a, ca, std::vector<uint64_t>{1}), std::invalid_argument);  // a patch for no slot
}

void test_core_budget() {
  CoreShare s(2);
  CHECK_EQ(s.cores(), 2u);
  CHECK_EQ(s.acquire(5), 2u);  // as many as are free
  std::atomic<bool> got{false};
  std::thread t([&] {
    CHECK_EQ(s.acquire(1), 1u);  // none free: waits for a release
    got = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  CHECK(!got.load());
  s.release(2);
  t.join();
  CHECK(got.load());
  s.release(1);
  CHECK_EQ(s.acquire(0), 1u);  // at least one
  s.release(1);
}

void test_parallelism_and_shared_cores() {
  auto share = std::make_shared<CoreShare>();
  auto a = make_queue("A", share);
  CHECK_EQ(a->parallelism(), 2u);
  CHECK_THROWS(a->set_parallelism(0), std::invalid_argument);
  CHECK_THROWS(a->set_parallelism(3), std::invalid_argument);
  a->set_parallelism(1);
  CHECK_EQ(a->parallelism(), 1u);
  auto gate = Signal::create("gate");
  CommandBuffer held;
  held.wait(gate, 1);
  const uint64_t v = a->submit(held);
  for (int i = 0; i < 1000 && share->busy.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK_EQ(share->busy.load(), 1u);  // the held queue has work
  gate->set(1);
  CHECK(a->wait(v, std::chrono::milliseconds(5000)));
  for (int i = 0; i < 1000 && share->busy.load() != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK_EQ(share->busy.load(), 0u);
}

}  // namespace

int main() {
  test_raw_waw_war_across_queues();
  test_group_members_do_not_wait_on_each_other();
  test_core_budget();
  test_parallelism_and_shared_cores();
  std::cout << "test_hcq_submit: ok\n";
  return 0;
}
