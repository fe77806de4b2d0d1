#include "tinyhybrid/hcq/deps.h"

#include <algorithm>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>

namespace th::hcq {

namespace {

void check_range(uint64_t begin, uint64_t end) {
  if (end < begin)
    throw std::invalid_argument("DepsTracker: range end " + std::to_string(end) + " is before its begin " + std::to_string(begin));
}

bool overlaps(uint64_t b0, uint64_t e0, uint64_t b1, uint64_t e1) { return b0 < e1 && b1 < e0; }

void add_dep(std::vector<Dep>& out, const SignalRef& s, uint64_t v) {
  for (auto& d : out)
    if (d.signal == s) {
      d.value = std::max(d.value, v);
      return;
    }
  out.push_back({s, v});
}

// Keep only the parts of each entry outside [begin, end).
template <class Entry>
void cut(std::vector<Entry>& entries, uint64_t begin, uint64_t end) {
  std::vector<Entry> kept;
  kept.reserve(entries.size() + 1);
  for (auto& e : entries) {
    if (!overlaps(e.begin, e.end, begin, end)) {
      kept.push_back(std::move(e));
      continue;
    }
    if (e.begin < begin) kept.push_back({e.begin, begin, e.signal, e.value});
    if (end < e.end) kept.push_back({end, e.end, e.signal, e.value});
  }
  entries = std::move(kept);
}

}  // namespace

std::vector<Dep> DepsTracker::waits_locked(uint64_t buffer, uint64_t begin, uint64_t end, bool write, const Signal* skip) const {
  check_range(begin, end);
  std::vector<Dep> out;
  const auto it = buffers_.find(buffer);
  if (it == buffers_.end() || begin == end) return out;
  auto collect = [&](const std::vector<Entry>& entries) {
    for (const auto& e : entries)
      if (e.signal.get() != skip && overlaps(e.begin, e.end, begin, end)) add_dep(out, e.signal, e.value);
  };
  collect(it->second.writes);
  if (write) collect(it->second.reads);
  return out;
}

void DepsTracker::write_locked(uint64_t buffer, uint64_t begin, uint64_t end, SignalRef signal, uint64_t value) {
  check_range(begin, end);
  if (begin == end) return;
  if (!signal) throw std::invalid_argument("DepsTracker.record_write: null signal");
  Ranges& r = buffers_[buffer];
  // Later accesses wait for this write, and this write waited for everything it covers: those go.
  cut(r.writes, begin, end);
  cut(r.reads, begin, end);
  r.writes.push_back({begin, end, std::move(signal), value});
}

void DepsTracker::read_locked(uint64_t buffer, uint64_t begin, uint64_t end, SignalRef signal, uint64_t value) {
  check_range(begin, end);
  if (begin == end) return;
  if (!signal) throw std::invalid_argument("DepsTracker.record_read: null signal");
  Ranges& r = buffers_[buffer];
  // Repeated reads of a range by one queue keep one entry (the latest), not one per submit.
  for (auto& e : r.reads)
    if (e.begin == begin && e.end == end && e.signal == signal) {
      e.value = std::max(e.value, value);
      return;
    }
  r.reads.push_back({begin, end, std::move(signal), value});
}

std::vector<Dep> DepsTracker::waits_for(uint64_t buffer, uint64_t begin, uint64_t end, bool write, const Signal* skip) const {
  const std::lock_guard lock(mu_);
  return waits_locked(buffer, begin, end, write, skip);
}

void DepsTracker::record_write(uint64_t buffer, uint64_t begin, uint64_t end, SignalRef signal, uint64_t value) {
  const std::lock_guard lock(mu_);
  write_locked(buffer, begin, end, std::move(signal), value);
  recorded();
}

void DepsTracker::record_read(uint64_t buffer, uint64_t begin, uint64_t end, SignalRef signal, uint64_t value) {
  const std::lock_guard lock(mu_);
  read_locked(buffer, begin, end, std::move(signal), value);
  recorded();
}

std::vector<Dep> DepsTracker::access(uint64_t buffer, uint64_t begin, uint64_t end, bool write, const SignalRef& signal,
                                     uint64_t value, const Signal* skip) {
  const std::lock_guard lock(mu_);
  std::vector<Dep> deps = waits_locked(buffer, begin, end, write, skip);
  write ? write_locked(buffer, begin, end, signal, value) : read_locked(buffer, begin, end, signal, value);
  recorded();
  return deps;
}

std::vector<uint64_t> DepsTracker::submit(std::span<const Submission> group) {
  struct Resolved {
    uint64_t buffer, begin, end;
    bool write;
  };
  std::vector<std::vector<Resolved>> accesses(group.size());
  std::vector<std::vector<Dep>> waits(group.size());
  const std::lock_guard lock(mu_);
  // Every member's waits come from the state before the group: a member recorded first would make the next wait
  // for all of it, where the group's own signals order only parts of it.
  for (size_t i = 0; i < group.size(); ++i) {
    const Submission& s = group[i];
    const CommandBuffer& cb = *s.cmdbuf;
    if (!s.patches.empty() && s.patches.size() != cb.num_slots())
      throw std::invalid_argument(s.queue->name() + ": submit got " + std::to_string(s.patches.size()) +
                                  " patch values for a command buffer with " + std::to_string(cb.num_slots()) + " slots");
    const auto patches = s.patches.empty() ? cb.slot_defaults() : s.patches;
    const Signal* own = s.queue->timeline().get();
    for (const Access& a : cb.accesses()) {
      const uint64_t base = a.buffer.patched() ? patches[a.buffer.slot] + a.buffer.value : a.buffer.value;
      accesses[i].push_back({base, a.begin, a.end, a.write});
      for (const Dep& d : waits_locked(base, a.begin, a.end, a.write, own))
        if (d.signal->value() < d.value) add_dep(waits[i], d.signal, d.value);
    }
  }
  std::vector<uint64_t> values;
  values.reserve(group.size());
  auto record = [&] {
    for (size_t i = 0; i < values.size(); ++i) {
      for (const Resolved& r : accesses[i])
        r.write ? write_locked(r.buffer, r.begin, r.end, group[i].queue->timeline(), values[i])
                : read_locked(r.buffer, r.begin, r.end, group[i].queue->timeline(), values[i]);
      recorded(accesses[i].size());
    }
  };
  try {
    for (size_t i = 0; i < group.size(); ++i) {
      if (!waits[i].empty()) {
        CommandBuffer before;
        for (const Dep& d : waits[i]) before.wait(d.signal, d.value);
        group[i].queue->submit(before);
      }
      values.push_back(group[i].queue->submit(*group[i].cmdbuf, group[i].patches));
    }
  } catch (...) {
    record();  // what was submitted runs: later accesses must still wait for it
    throw;
  }
  record();
  return values;
}

uint64_t DepsTracker::submit(Queue& queue, const CommandBuffer& cb, std::span<const uint64_t> patches) {
  const Submission one{&queue, &cb, patches};
  return submit(std::span<const Submission>(&one, 1))[0];
}

void DepsTracker::recorded(size_t n) {
  if ((records_ += n) < prune_at_) return;
  records_ = 0;
  prune_locked();
  size_t live = 0;
  for (const auto& [_, r] : buffers_) live += r.writes.size() + r.reads.size();
  prune_at_ = std::max(kFirstPrune, 2 * live);
}

size_t DepsTracker::prune() {
  const std::lock_guard lock(mu_);
  return prune_locked();
}

size_t DepsTracker::prune_locked() {
  size_t dropped = 0;
  auto done = [&](const Entry& e) {
    // a faulted signal's entries stay: a host wait on their memory is where the fault surfaces
    const bool d = e.signal->value() >= e.value && !e.signal->faulted();
    dropped += d;
    return d;
  };
  for (auto it = buffers_.begin(); it != buffers_.end();) {
    std::erase_if(it->second.writes, done);
    std::erase_if(it->second.reads, done);
    if (it->second.writes.empty() && it->second.reads.empty()) {
      it = buffers_.erase(it);
    } else {
      ++it;
    }
  }
  return dropped;
}

void DepsTracker::forget(uint64_t buffer) {
  const std::lock_guard lock(mu_);
  buffers_.erase(buffer);
}

void DepsTracker::clear() {
  const std::lock_guard lock(mu_);
  buffers_.clear();
}

size_t DepsTracker::entries(uint64_t buffer) const {
  const std::lock_guard lock(mu_);
  const auto it = buffers_.find(buffer);
  return it == buffers_.end() ? 0 : it->second.writes.size() + it->second.reads.size();
}

}  // namespace th::hcq
