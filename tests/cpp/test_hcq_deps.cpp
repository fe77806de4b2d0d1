// The dependency tracker's overlap cases: disjoint, nested, partial overlap on each side, the same range,
// many small writes then a big one; reads after writes, writes after reads; dedup per signal.
#include <string>
#include <vector>

#include "check.h"
#include "tinyhybrid/hcq/deps.h"

using namespace th::hcq;

namespace {

// Submit k of a test ends at (sig[k], 1): each submit its own signal, so the deps name the submits.
struct Submits {
  std::vector<SignalRef> sig;
  explicit Submits(int n) {
    for (int i = 0; i < n; ++i) sig.push_back(Signal::create("s" + std::to_string(i)));
  }
  std::vector<int> ids(const std::vector<Dep>& deps) const {
    std::vector<int> out;
    for (const auto& d : deps)
      for (size_t i = 0; i < sig.size(); ++i)
        if (d.signal == sig[i]) out.push_back(static_cast<int>(i));
    return out;
  }
};

using Ids = std::vector<int>;
constexpr uint64_t kBuf = 0x1000;

// The seeds' cases: a write to [4,8) does not touch an earlier access of [0,4) (read or write).
void test_disjoint() {
  for (bool first_write : {false, true}) {
    Submits s(3);
    DepsTracker t;
    t.access(kBuf, 0, 4, first_write, s.sig[0], 1);
    CHECK(s.ids(t.access(kBuf, 4, 8, true, s.sig[1], 1)).empty());
    CHECK_EQ(s.ids(t.access(kBuf, 0, 4, true, s.sig[2], 1)), Ids{0});
    // Another buffer never depends on this one.
    CHECK(t.waits_for(kBuf + 1, 0, 100, true).empty());
  }
}

// A whole-buffer access, then writes to the middle and both ends: each waits for it; a read of the
// middle then waits only for the middle's writer.
void test_partial_and_nested() {
  for (bool first_write : {false, true}) {
    Submits s(5);
    DepsTracker t;
    t.access(kBuf, 0, 16, first_write, s.sig[0], 1);
    CHECK_EQ(s.ids(t.access(kBuf, 4, 12, true, s.sig[1], 1)), Ids{0});  // nested
    CHECK_EQ(s.ids(t.access(kBuf, 0, 4, true, s.sig[2], 1)), Ids{0});   // left part
    CHECK_EQ(s.ids(t.access(kBuf, 12, 16, true, s.sig[3], 1)), Ids{0});  // right part
    CHECK_EQ(s.ids(t.access(kBuf, 4, 12, false, s.sig[4], 1)), Ids{1});
    CHECK_EQ(t.entries(kBuf), 4u);  // three writers and one reader: the first access was cut away
  }
}

// Partial overlap on the left and on the right of an earlier write; the split keeps the uncovered parts.
void test_partial_overlap_sides() {
  Submits s(6);
  DepsTracker t;
  t.record_write(kBuf, 10, 20, s.sig[0], 1);
  CHECK_EQ(s.ids(t.access(kBuf, 5, 12, true, s.sig[1], 1)), Ids{0});   // overlaps the left end
  CHECK_EQ(s.ids(t.access(kBuf, 18, 30, true, s.sig[2], 1)), Ids{0});  // overlaps the right end
  // What is left of write 0 is [12, 18).
  CHECK_EQ(s.ids(t.waits_for(kBuf, 12, 18)), Ids{0});
  CHECK_EQ(s.ids(t.waits_for(kBuf, 11, 12)), Ids{1});
  CHECK_EQ(s.ids(t.waits_for(kBuf, 18, 19)), Ids{2});
  CHECK_EQ(s.ids(t.waits_for(kBuf, 0, 100)), (Ids{0, 1, 2}));
  CHECK(t.waits_for(kBuf, 0, 5).empty());
  CHECK(t.waits_for(kBuf, 30, 40).empty());
  CHECK(t.waits_for(kBuf, 12, 12).empty());  // an empty range touches nothing
  CHECK_THROWS(t.waits_for(kBuf, 5, 4), std::invalid_argument);
}

// The exact same range: the newer write replaces the older one.
void test_same_range() {
  Submits s(3);
  DepsTracker t;
  t.record_write(kBuf, 0, 64, s.sig[0], 1);
  CHECK_EQ(s.ids(t.access(kBuf, 0, 64, true, s.sig[1], 1)), Ids{0});
  CHECK_EQ(s.ids(t.waits_for(kBuf, 0, 64)), Ids{1});
  CHECK_EQ(t.entries(kBuf), 1u);
  // Reads of the same range by one queue keep one entry with the newest value.
  auto q = Signal::create("queue");
  for (uint64_t v = 1; v <= 5; ++v) t.record_read(kBuf, 0, 64, q, v);
  CHECK_EQ(t.entries(kBuf), 2u);
  const auto w = t.waits_for(kBuf, 0, 64, true);
  CHECK_EQ(w.size(), 2u);
  CHECK(w[1] == (Dep{q, 5}));
}

// Many small writes then one big write: the big one waits for all of them, after which it alone remains.
void test_many_small_then_big() {
  constexpr int kSmall = 100;
  Submits s(kSmall + 2);
  DepsTracker t;
  for (int i = 0; i < kSmall; ++i) t.record_write(kBuf, i * 8, i * 8 + 8, s.sig[i], 1);
  CHECK_EQ(t.entries(kBuf), size_t(kSmall));
  CHECK_EQ(s.ids(t.waits_for(kBuf, 8 * 10 + 3, 8 * 12 + 1)), (Ids{10, 11, 12}));
  const auto deps = s.ids(t.access(kBuf, 0, 8 * kSmall, true, s.sig[kSmall], 1));
  CHECK_EQ(deps.size(), size_t(kSmall));
  for (int i = 0; i < kSmall; ++i) CHECK_EQ(deps[i], i);
  CHECK_EQ(t.entries(kBuf), 1u);
  CHECK_EQ(s.ids(t.waits_for(kBuf, 40, 48)), Ids{kSmall});
}

// Reads never wait for reads; a write waits for the reads since the last write (WAR) and the write (WAW).
void test_read_write_hazards() {
  Submits s(5);
  DepsTracker t;
  t.record_write(kBuf, 0, 32, s.sig[0], 1);
  CHECK_EQ(s.ids(t.access(kBuf, 0, 16, false, s.sig[1], 1)), Ids{0});
  CHECK_EQ(s.ids(t.access(kBuf, 8, 32, false, s.sig[2], 1)), Ids{0});
  CHECK_EQ(s.ids(t.access(kBuf, 12, 20, true, s.sig[3], 1)), (Ids{0, 1, 2}));
  CHECK_EQ(s.ids(t.waits_for(kBuf, 0, 32, true)), (Ids{0, 3, 1, 2}));
  CHECK_EQ(s.ids(t.waits_for(kBuf, 12, 20, true)), Ids{3});
}

// One queue's timeline signal with several values: one dep with the largest; `skip` drops the own queue.
void test_dedup_and_skip() {
  auto q0 = Signal::create("q0"), q1 = Signal::create("q1");
  DepsTracker t;
  t.record_write(kBuf, 0, 8, q0, 3);
  t.record_write(kBuf, 8, 16, q0, 7);
  t.record_write(kBuf, 16, 24, q1, 2);
  t.record_write(kBuf, 24, 32, q0, 5);
  const auto deps = t.waits_for(kBuf, 0, 32);
  CHECK_EQ(deps.size(), 2u);
  CHECK(deps[0] == (Dep{q0, 7}));
  CHECK(deps[1] == (Dep{q1, 2}));
  const auto other = t.waits_for(kBuf, 0, 32, false, q0.get());
  CHECK_EQ(other.size(), 1u);
  CHECK(other[0] == (Dep{q1, 2}));
}

// Entries whose signal already passed can be dropped; a freed buffer forgets its entries.
void test_prune_and_forget() {
  auto q = Signal::create("q");
  DepsTracker t;
  t.record_write(kBuf, 0, 8, q, 1);
  t.record_read(kBuf, 0, 8, q, 2);
  t.record_write(kBuf + 1, 0, 8, q, 3);
  CHECK_EQ(t.prune(), 0u);
  q->set(2);
  CHECK_EQ(t.prune(), 2u);
  CHECK_EQ(t.entries(kBuf), 0u);
  CHECK_EQ(t.entries(kBuf + 1), 1u);
  t.forget(kBuf + 1);
  CHECK_EQ(t.entries(kBuf + 1), 0u);
}

}  // namespace

int main() {
  test_disjoint();
  test_partial_and_nested();
  test_partial_overlap_sides();
  test_same_range();
  test_many_small_then_big();
  test_read_write_hazards();
  test_dedup_and_skip();
  test_prune_and_forget();
  std::cout << "test_hcq_deps: ok\n";
  return 0;
}
