#include "tinyhybrid/track.h"

#include <deque>
#include <iterator>
#include <mutex>
#include <unordered_map>

namespace th::track {

namespace {

// The process-wide recorder. Rewrites may run on several threads (native rule sets rewrite without the GIL), so
// every append takes the lock; it is only ever taken while tracking is on.
class Recorder {
 public:
  uint32_t begin(std::string_view name, const UOp* root, uint32_t flags, uint32_t parent) {
    std::scoped_lock lock(mu_);
    const uint32_t id = next_call_++;
    put({kCallBegin, id, parent, string(name), node(root), flags});
    return id;
  }
  void step(uint32_t call, std::string_view rule_name, std::string_view rule_loc, const UOp* before, const UOp* after) {
    std::scoped_lock lock(mu_);
    put({kStep, call, string(rule_name), string(rule_loc), node(before), node(after)});
  }
  void end(uint32_t call, const UOp* result) {
    std::scoped_lock lock(mu_);
    put({kCallEnd, call, result ? node(result) : kNone});
  }
  void group_begin(std::string_view kind) {
    std::scoped_lock lock(mu_);
    put({kGroupBegin, string(kind)});
  }
  void group_end(std::string_view name, std::string_view text) {
    std::scoped_lock lock(mu_);
    put({kGroupEnd, string(name), string(text)});
  }
  Trace take() {
    std::scoped_lock lock(mu_);
    Trace t{std::move(words_), {std::make_move_iterator(strings_.begin()), std::make_move_iterator(strings_.end())},
            std::move(nodes_)};
    words_.clear();
    strings_.clear();
    nodes_.clear();
    string_ids_.clear();
    node_ids_.clear();
    return t;
  }

 private:
  void put(std::initializer_list<uint32_t> w) { words_.insert(words_.end(), w); }
  uint32_t string(std::string_view s) {
    if (auto it = string_ids_.find(s); it != string_ids_.end()) return it->second;
    const auto id = static_cast<uint32_t>(strings_.size());
    string_ids_.emplace(strings_.emplace_back(s), id);
    return id;
  }
  uint32_t node(const UOp* n) {
    const auto [it, added] = node_ids_.try_emplace(n, static_cast<uint32_t>(nodes_.size()));
    if (added) nodes_.emplace_back(n);  // held: the address stays this node's for as long as the id means it
    return it->second;
  }

  std::mutex mu_;
  std::vector<uint32_t> words_;
  std::deque<std::string> strings_;  // a deque: its elements never move, so the map's keys can view them
  std::unordered_map<std::string_view, uint32_t> string_ids_;
  std::vector<UOpRef> nodes_;
  std::unordered_map<const UOp*, uint32_t> node_ids_;
  uint32_t next_call_ = 0;  // not restarted by take(): a call running across a take keeps its id
};

Recorder& recorder() {
  // never destroyed: a trace still held at exit would otherwise release its nodes after the interpreter (whose
  // objects some args are) is gone
  static Recorder* r = new Recorder;
  return *r;
}

// The innermost call running on this thread, the parent of a call started inside it.
thread_local uint32_t current_call = kNone;

}  // namespace

void enable(bool on) { detail::enabled.store(on, std::memory_order_relaxed); }

Trace take() { return recorder().take(); }

Call::Call(std::string_view name, const UOp* root, uint32_t flags) : parent_(current_call) {
  id_ = recorder().begin(name, root, flags, parent_);
  current_call = id_;
}

Call::~Call() {
  if (!finished_) recorder().end(id_, nullptr);
  current_call = parent_;
}

void Call::step(std::string_view rule_name, std::string_view rule_location, const UOp* before, const UOp* after) {
  recorder().step(id_, rule_name, rule_location, before, after);
}

void Call::finish(const UOp* result) {
  recorder().end(id_, result);
  finished_ = true;
}

void stage(std::string_view name, const UOp* before, const UOp* after) {
  if (!enabled()) return;
  Call c(name, before, kStage);
  c.finish(after);
}

void group_begin(std::string_view kind) {
  if (enabled()) recorder().group_begin(kind);
}

void group_end(std::string_view name, std::string_view text) {
  if (enabled()) recorder().group_end(name, text);
}

}  // namespace th::track
