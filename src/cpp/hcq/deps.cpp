#include "tinyhybrid/hcq/deps.h"

#include <algorithm>
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

std::vector<Dep> DepsTracker::waits_for(uint64_t buffer, uint64_t begin, uint64_t end, bool write, const Signal* skip) const {
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

void DepsTracker::record_write(uint64_t buffer, uint64_t begin, uint64_t end, SignalRef signal, uint64_t value) {
  check_range(begin, end);
  if (begin == end) return;
  if (!signal) throw std::invalid_argument("DepsTracker.record_write: null signal");
  Ranges& r = buffers_[buffer];
  // Later accesses wait for this write, and this write waited for everything it covers: those go.
  cut(r.writes, begin, end);
  cut(r.reads, begin, end);
  r.writes.push_back({begin, end, std::move(signal), value});
}

void DepsTracker::record_read(uint64_t buffer, uint64_t begin, uint64_t end, SignalRef signal, uint64_t value) {
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

std::vector<Dep> DepsTracker::access(uint64_t buffer, uint64_t begin, uint64_t end, bool write, const SignalRef& signal,
                                     uint64_t value, const Signal* skip) {
  std::vector<Dep> deps = waits_for(buffer, begin, end, write, skip);
  if (write) {
    record_write(buffer, begin, end, signal, value);
  } else {
    record_read(buffer, begin, end, signal, value);
  }
  return deps;
}

size_t DepsTracker::prune() {
  size_t dropped = 0;
  auto done = [&](const Entry& e) {
    const bool d = e.signal->value() >= e.value;
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

void DepsTracker::forget(uint64_t buffer) { buffers_.erase(buffer); }

size_t DepsTracker::entries(uint64_t buffer) const {
  const auto it = buffers_.find(buffer);
  return it == buffers_.end() ? 0 : it->second.writes.size() + it->second.reads.size();
}

}  // namespace th::hcq
