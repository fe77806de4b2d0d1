// The device-independent command stream: layout, patch sites, retained references, the lowered cache
// (what a GPU queue would use), a stand-in queue built on the Queue interface, and thread-count detection.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "check.h"
#include "drivers/cpu/threads.h"
#include "tinyhybrid/hcq/command_buffer.h"
#include "tinyhybrid/hcq/cpu.h"
#include "tinyhybrid/hcq/queue.h"

using namespace th::hcq;
namespace L = th::hcq::layout;

namespace {

void k_nop(const uint64_t*, uint32_t, uint32_t) {}

void test_layout_and_sites() {
  auto sig = Signal::create("s");
  CommandBuffer cb;
  const uint32_t a = cb.add_slot(0xa0), n = cb.add_slot(16), v = cb.add_slot(9);
  cb.wait(sig, 3);
  cb.exec(Program("nop", k_nop), {Patch{a}, 0xb0, Patch{n}, Operand(uint64_t(-1))}, Dims(Patch{n}, 2), Dims(4));
  cb.signal(sig, Patch{v});
  cb.copy(0x10, Patch{a}, 32);
  cb.barrier();
  cb.timestamp(sig);
  CHECK_EQ(cb.size(), 6u);
  CHECK_EQ(cb.num_slots(), 3u);

  const auto w = cb.command(0);
  CHECK(w.size() == L::kSignalWords && L::op_of(w[0]) == Op::Wait && w[1] == sig->address() && w[2] == 3);
  const auto e = cb.command(1);
  CHECK_EQ(e.size(), size_t(L::kExecArgs + 4));
  CHECK(L::op_of(e[0]) == Op::Exec && e[L::kExecFn] == Program("nop", k_nop).address());
  // Slot operands hold the slot's default until a submit patches them.
  const std::vector<uint64_t> dims(e.begin() + L::kExecGlobal, e.begin() + L::kExecArgs);
  CHECK_EQ(dims, (std::vector<uint64_t>{16, 2, 1, 4, 1, 1}));
  const std::vector<uint64_t> args(e.begin() + L::kExecArgs, e.end());
  CHECK_EQ(args, (std::vector<uint64_t>{0xa0, 0xb0, 16, ~uint64_t(0)}));
  CHECK(L::op_of(cb.command(4)[0]) == Op::Barrier && cb.command(4).size() == 1);
  CHECK(L::op_of(cb.command(5)[0]) == Op::Timestamp && cb.command(5)[1] == sig->address());
  CHECK_THROWS(cb.command(6), std::out_of_range);

  // Patch sites in command order: (command, word, slot).
  std::vector<std::vector<uint32_t>> sites;
  for (const auto& s : cb.sites()) sites.push_back({s.command, s.word, s.slot});
  const std::vector<std::vector<uint32_t>> want = {
      {1, L::kExecGlobal, n}, {1, L::kExecArgs, a}, {1, L::kExecArgs + 2, n}, {2, L::kSignalValue, v}, {3, L::kCopySrc, a}};
  CHECK(sites == want);
  CHECK_EQ(std::string(op_name(Op::Copy)), std::string("copy"));
  cb.set_default(a, 0xa1);
  CHECK_EQ(cb.slot_defaults()[a], 0xa1u);
  CHECK_THROWS(cb.set_default(9, 0), std::out_of_range);
}

void test_retained_copy_on_write() {
  std::weak_ptr<Signal> weak;
  std::shared_ptr<const void> held;
  {
    CommandBuffer cb;
    auto s1 = Signal::create("s1");
    weak = s1;
    cb.signal(s1, 1);
    cb.signal(s1, 2);  // the same signal is kept once
    held = cb.retained();
    const auto* refs = static_cast<const std::vector<std::shared_ptr<const void>>*>(held.get());
    CHECK_EQ(refs->size(), 1u);
    cb.signal(Signal::create("s2"), 1);  // a submit holds `held`: the buffer copies before adding
    CHECK_EQ(refs->size(), 1u);
    CHECK(cb.retained() != held);
  }
  CHECK(!weak.expired());  // `held` (a running submit) still keeps it
  held.reset();
  CHECK(weak.expired());
}

// A queue that "lowers" the stream once per buffer version, as a GPU encoder would, and counts the work.
class FakeGpuQueue final : public Queue {
 public:
  struct Lowered {
    std::vector<uint32_t> dwords;  // e.g. 32-bit packets
  };
  const std::string& name() const noexcept override { return name_; }
  const SignalRef& timeline() const noexcept override { return timeline_; }
  bool would_block(const CommandBuffer&) const override { return false; }
  uint64_t last_submitted() const noexcept override { return submitted_; }
  uint64_t submit(const CommandBuffer& cb, std::span<const uint64_t> patches) override {
    auto native = std::static_pointer_cast<const Lowered>(cb.lowered(this));
    if (!native) {
      ++lowerings;
      auto l = std::make_shared<Lowered>();
      for (uint64_t w : cb.words()) l->dwords.push_back(static_cast<uint32_t>(w));
      cb.set_lowered(this, l);
      native = l;
    }
    last_patches.assign(patches.begin(), patches.end());
    timeline_->set(++submitted_);
    return submitted_;
  }
  int lowerings = 0;
  std::vector<uint64_t> last_patches;

 private:
  std::string name_ = "fake";
  SignalRef timeline_ = Signal::create("fake:timeline");
  uint64_t submitted_ = 0;
};

void test_lowered_cache() {
  FakeGpuQueue q;
  CommandBuffer cb;
  const uint32_t s = cb.add_slot();
  cb.exec(Program("nop", k_nop), {Patch{s}});
  const uint64_t p[] = {5};
  for (int i = 0; i < 3; ++i) q.submit(cb, p);
  CHECK_EQ(q.lowerings, 1);
  cb.barrier();  // a new version is lowered again
  q.submit(cb, p);
  CHECK_EQ(q.lowerings, 2);
  FakeGpuQueue other;  // the cache belongs to one queue
  other.submit(cb, p);
  CHECK_EQ(other.lowerings, 1);
  q.synchronize();
  CHECK_EQ(q.timeline()->value(), 4u);
}

struct TempDir {
  std::filesystem::path path;
  TempDir() : path(std::filesystem::temp_directory_path() / ("th_cgroup_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  void write(const std::string& rel, const std::string& text) const {
    std::filesystem::create_directories((path / rel).parent_path());
    std::ofstream(path / rel) << text;
  }
};

void test_cgroup_limits() {
  {
    TempDir d;
    CHECK(!th::cpu::cgroup_cpu_limit(d.path.string(), "0::/\n").has_value());
    d.write("cpu.max", "max 100000\n");
    CHECK(!th::cpu::cgroup_cpu_limit(d.path.string(), "0::/\n").has_value());
    d.write("cpu.max", "250000 100000\n");
    CHECK_EQ(th::cpu::cgroup_cpu_limit(d.path.string(), "0::/\n").value_or(-1), 2.5);
    // A tighter limit on the process's own (nested) cgroup wins.
    d.write("user/job/cpu.max", "50000 100000\n");
    CHECK_EQ(th::cpu::cgroup_cpu_limit(d.path.string(), "0::/user/job\n").value_or(-1), 0.5);
  }
  {
    TempDir d;  // cgroup v1
    d.write("cpu/cpu.cfs_quota_us", "-1\n");
    d.write("cpu/cpu.cfs_period_us", "100000\n");
    const std::string self = "4:memory:/x\n1:cpu,cpuacct:/\n";
    CHECK(!th::cpu::cgroup_cpu_limit(d.path.string(), self).has_value());
    d.write("cpu/cpu.cfs_quota_us", "300000\n");
    CHECK_EQ(th::cpu::cgroup_cpu_limit(d.path.string(), self).value_or(-1), 3.0);
  }
  CHECK(usable_cpu_count() >= 1);
  ::setenv("NUM_CPU_THREADS", "3", 1);
  CHECK_EQ(default_cpu_threads(), 3u);
  ::setenv("NUM_CPU_THREADS", "zero", 1);
  CHECK_EQ(default_cpu_threads(), usable_cpu_count());
  ::unsetenv("NUM_CPU_THREADS");
}

}  // namespace

int main() {
  test_layout_and_sites();
  test_retained_copy_on_write();
  test_lowered_cache();
  test_cgroup_limits();
  std::cout << "test_hcq_cmdbuf: ok\n";
  return 0;
}
