// Kernel faults on the CPU queue: a kernel's invalid store (on the leader or on a helper part) is reported as a
// DeviceFault at the first wait that reaches its submit, naming the queue and the kernel; the rest of that submit is
// skipped, waits of earlier values do not throw, and the queue runs later submits. The tracker keeps a faulted
// submit's entries until the fault is raised.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "check.h"
#include "tinyhybrid/hcq/cpu.h"
#include "tinyhybrid/hcq/deps.h"

using namespace th::hcq;

namespace {

constexpr std::chrono::milliseconds kWait{10'000};

// args: out (uint32[cores]), faulting core, address: every part writes out[core], the faulting one then stores to
// the address.
__attribute__((no_sanitize("address", "undefined"))) void store_at(const uint64_t* args, uint32_t core, uint32_t) {
  reinterpret_cast<uint32_t*>(args[0])[core] = core + 1;
  if (core == args[1]) *reinterpret_cast<volatile uint32_t*>(args[2]) = 7;
}

std::unique_ptr<CpuQueue> make_queue(const char* name) {
  CpuConfig c;
  c.name = name;
  c.num_threads = 2;
  return CpuQueue::create(c);
}

std::string fault_of(Queue& q, uint64_t value) {
  try {
    q.wait(value, kWait);
  } catch (const DeviceFault& e) {
    CHECK_EQ(e.value(), value);
    return e.what();
  }
  return "";
}

void test_fault_on_the_leader() {
  auto q = make_queue("q");
  uint32_t out[2] = {0, 0};
  uint8_t dst[4] = {0, 0, 0, 0};
  const uint8_t src[4] = {1, 2, 3, 4};
  CommandBuffer ok, bad;
  ok.exec(Program("fine", store_at), {reinterpret_cast<uint64_t>(out), 99, 0});
  bad.exec(Program("store_at", store_at), {reinterpret_cast<uint64_t>(out), 0, 16});
  bad.copy(reinterpret_cast<uint64_t>(dst), reinterpret_cast<uint64_t>(src), 4);
  const uint64_t first = q->submit(ok), second = q->submit(bad);
  CHECK(q->wait(first, kWait));  // not the faulted submit
  const std::string what = fault_of(*q, second);
  CHECK_EQ(what, std::string("q: kernel 'store_at' faulted: SIGSEGV (invalid memory access at 0x10) in submit 2; "
                             "the rest of that submit did not run"));
  CHECK(dst[0] == 0 && dst[3] == 0);
  CHECK(q->wait(second, kWait));  // raised once
  CommandBuffer again;
  again.copy(reinterpret_cast<uint64_t>(dst), reinterpret_cast<uint64_t>(src), 4);
  CHECK(q->wait(q->submit(again), kWait));
  CHECK(dst[0] == 1 && dst[3] == 4);
}

void test_fault_on_a_helper_part_surfaces_through_the_tracker() {
  auto q = make_queue("h");
  DepsTracker tracker;
  uint32_t out[2] = {0, 0};
  CommandBuffer bad;
  bad.exec(Program("split", store_at), {reinterpret_cast<uint64_t>(out), 1, 8}, Dims(2));
  bad.access(reinterpret_cast<uint64_t>(out), 0, sizeof(out), true);
  const uint64_t v = tracker.submit(*q, bad);
  // the signal has passed, yet its entries stay until the fault is raised: a host wait on the memory finds it
  for (int i = 0; i < 10'000 && q->timeline()->value() < v; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK_EQ(tracker.prune(), size_t(0));
  const auto deps = tracker.waits_for(reinterpret_cast<uint64_t>(out), 0, sizeof(out));
  CHECK_EQ(deps.size(), size_t(1));
  bool raised = false;
  try {
    deps[0].signal->wait(deps[0].value);
  } catch (const DeviceFault& e) {
    raised = std::string(e.what()).find("kernel 'split' faulted: SIGSEGV (invalid memory access at 0x8)") != std::string::npos;
  }
  CHECK(raised);
  CHECK_EQ(out[0], 1u);
  CHECK_EQ(tracker.prune(), size_t(1));
}

}  // namespace

int main() {
  test_fault_on_the_leader();
  test_fault_on_a_helper_part_surfaces_through_the_tracker();
  std::cout << "test_hcq_fault: ok\n";
  return 0;
}
