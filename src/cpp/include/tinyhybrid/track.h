// Rewrite tracking for VIZ and TRACK_MATCH_STATS: what every graph_rewrite did, recorded compactly into one buffer
// that the reader takes whole. Off (the default), graph_rewrite pays one predictable branch per call.
//
// The buffer is a stream of 32-bit words. Strings and nodes are numbered in tables beside it; a node id keeps its
// node alive until the trace is taken, so a whole graph can be walked from its root later. Records:
//   kCallBegin  call parent name root flags   a graph_rewrite starts (parent: the call it runs inside, or kNone;
//                                             flags: kBottomUp, kStage)
//   kStep       call rule_name rule_loc before after   a rule replaced `before` (the node as the rewrite saw it)
//   kCallEnd    call result                   result is kNone when the rewrite raised
//   kGroupBegin kind                          the caller's marks: a unit of work (a kernel) begins ...
//   kGroupEnd   name text                     ... and ends, with its name and a text (a kernel's source)
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tinyhybrid/uop.h"

namespace th::track {

enum Record : uint32_t { kCallBegin = 1, kStep = 2, kCallEnd = 3, kGroupBegin = 4, kGroupEnd = 5 };
inline constexpr uint32_t kNone = 0xFFFFFFFFu;
inline constexpr uint32_t kBottomUp = 1, kStage = 2;

namespace detail {
inline std::atomic<bool> enabled{false};
}

// Whether rewrites are being recorded. One relaxed load: the only cost tracking adds while it is off.
inline bool enabled() noexcept { return detail::enabled.load(std::memory_order_relaxed); }
void enable(bool on);

// Everything recorded since the last take().
struct Trace {
  std::vector<uint32_t> words;
  std::vector<std::string> strings;
  std::vector<UOpRef> nodes;
};
// The trace so far; the recorder starts over empty. String and node ids restart at 0; call ids go on counting, so a
// call still running across a take is named the same in the next trace.
Trace take();

// One graph_rewrite, recorded from construction to finish(). Made by the engine only while tracking is on; a call
// destroyed without finish() (an exception left the rewrite) is recorded as failed. Calls nest per thread: a rewrite
// started from inside a rule's callback names the outer one as its parent.
class Call {
 public:
  Call(std::string_view name, const UOp* root, uint32_t flags);
  ~Call();
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  void step(std::string_view rule_name, std::string_view rule_location, const UOp* before, const UOp* after);
  void finish(const UOp* result);

 private:
  uint32_t id_;
  uint32_t parent_;
  bool finished_ = false;
};

// A pass that is not a graph_rewrite (the caller's own lowering step), recorded as a finished call without steps.
void stage(std::string_view name, const UOp* before, const UOp* after);
// The caller's grouping of the calls between the two marks (groups nest).
void group_begin(std::string_view kind);
void group_end(std::string_view name, std::string_view text = {});

}  // namespace th::track
