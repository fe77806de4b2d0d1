// Rewrite tracking (tinyhybrid/track.h): nothing recorded while off; with it on, every graph_rewrite's name, root,
// fired rules (name, source location, nodes before and after) and result, nested calls, failed calls, the caller's
// stages and groups; the trace holds its nodes until it is dropped; several threads record at once.
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "tinyhybrid/core.h"
#include "tinyhybrid/rewrite.h"
#include "tinyhybrid/simplify.h"
#include "tinyhybrid/track.h"

using namespace th;
using namespace th::pat;

namespace {

UOpRef leaf(const std::string& name) { return UOp::make(Ops::NOOP, DType::int32(), {}, Arg::string(name)); }
UOpRef ci(i128 v) { return UOp::const_int(DType::int32(), v); }
UOpRef add(const UOpRef& a, const UOpRef& b) { return UOp::make(Ops::ADD, a->dtype(), {a, b}); }
UOpRef mul(const UOpRef& a, const UOpRef& b) { return UOp::make(Ops::MUL, a->dtype(), {a, b}); }

// x + 0 -> x and x * 1 -> x, each built on its own line (their recorded locations)
PatternMatcher identities() {
  std::vector<Rule> r;
  r.push_back({var("x") + cnst(Arg::integer(0)), [](const Captured& c, void*) { return c.ref("x"); }, "add zero"});
  r.push_back({var("x") * cnst(Arg::integer(1)), [](const Captured& c, void*) { return c.ref("x"); }, "mul one"});
  return PatternMatcher(std::move(r));
}

// A decoded record: its kind and its operand words.
struct Rec {
  uint32_t kind;
  std::vector<uint32_t> w;
};

std::vector<Rec> decode(const track::Trace& t) {
  std::vector<Rec> out;
  for (size_t i = 0; i < t.words.size();) {
    const uint32_t kind = t.words[i];
    const size_t n = kind == track::kCallBegin ? 5 : kind == track::kStep ? 5 : kind == track::kCallEnd ? 2 : kind == track::kGroupBegin ? 1 : 2;
    CHECK(kind >= track::kCallBegin && kind <= track::kGroupEnd);
    CHECK(i + 1 + n <= t.words.size());
    out.push_back({kind, std::vector<uint32_t>(t.words.begin() + static_cast<long>(i) + 1, t.words.begin() + static_cast<long>(i + 1 + n))});
    i += 1 + n;
  }
  return out;
}

void test_off_records_nothing() {
  track::enable(false);
  const UOpRef x = leaf("x");
  CHECK(graph_rewrite(add(x, ci(0)), identities()) == x);
  track::stage("lower", x.get(), x.get());
  track::group_begin("kernel");
  const track::Trace t = track::take();
  CHECK(t.words.empty() && t.strings.empty() && t.nodes.empty());
}

void test_calls_and_steps() {
  const UOpRef x = leaf("x");
  const UOpRef root = mul(add(x, ci(0)), ci(1));
  track::enable(true);
  const UOpRef out = graph_rewrite(root, identities(), nullptr, false, "identities");
  track::enable(false);
  CHECK(out == x);
  const track::Trace t = track::take();
  const std::vector<Rec> recs = decode(t);
  CHECK_EQ(recs.size(), size_t(4));  // begin, two steps, end
  CHECK_EQ(recs[0].kind, uint32_t(track::kCallBegin));
  const uint32_t call = recs[0].w[0];
  CHECK_EQ(recs[0].w[1], track::kNone);  // no parent
  CHECK_EQ(t.strings.at(recs[0].w[2]), std::string("identities"));
  CHECK(t.nodes.at(recs[0].w[3]) == root);
  CHECK_EQ(recs[0].w[4], uint32_t(0));
  // top-down: the inner add is rewritten first, then the mul (whose source is x by then)
  CHECK(recs[1].kind == track::kStep && recs[2].kind == track::kStep);
  CHECK_EQ(recs[1].w[0], call);
  CHECK_EQ(t.strings.at(recs[1].w[1]), std::string("add zero"));
  CHECK(t.strings.at(recs[1].w[2]).starts_with("tests/cpp/test_track.cpp:"));
  CHECK(t.nodes.at(recs[1].w[3]) == root->src(0) && t.nodes.at(recs[1].w[4]) == x);
  CHECK_EQ(t.strings.at(recs[2].w[1]), std::string("mul one"));
  CHECK(t.strings.at(recs[2].w[2]) != t.strings.at(recs[1].w[2]));  // two lines
  CHECK(t.nodes.at(recs[2].w[3]) == mul(x, ci(1)) && t.nodes.at(recs[2].w[4]) == x);
  CHECK(recs[3].kind == track::kCallEnd && recs[3].w[0] == call && t.nodes.at(recs[3].w[1]) == x);
  // a node is listed once however often it is named
  for (size_t i = 0; i < t.nodes.size(); ++i)
    for (size_t j = i + 1; j < t.nodes.size(); ++j) CHECK(t.nodes[i] != t.nodes[j]);
  // string and node ids restart after a take; call ids go on
  track::enable(true);
  graph_rewrite(add(x, ci(0)), identities());
  track::enable(false);
  const track::Trace again = track::take();
  const std::vector<Rec> r2 = decode(again);
  CHECK_EQ(r2.at(0).w[0], call + 1);
  CHECK_EQ(r2[0].w[2], uint32_t(0));
  CHECK_EQ(again.strings.at(r2[0].w[2]), std::string("graph_rewrite"));  // the name of an unnamed call
}

void test_nested_failed_stage_group() {
  const UOpRef x = leaf("x"), y = leaf("y");
  // a rule whose callback runs a rewrite of its own: the inner call names the outer as its parent
  std::vector<Rule> outer_rules;
  outer_rules.push_back({op(OpSet{Ops::SINK}, {var("a")}),
                         [](const Captured& c, void*) -> UOpRef {
                           UOpRef inner = graph_rewrite(c.ref("a"), identities(), nullptr, false, "inner");
                           return inner == c.ref("a") ? nullptr : UOp::make(Ops::SINK, DType::void_(), {inner});
                         },
                         "simplify the sink's source"});
  const PatternMatcher outer(std::move(outer_rules));
  // a loop: x -> y -> x
  std::vector<Rule> loop;
  loop.push_back({op(OpSet{Ops::NOOP}, {}, "n", Pattern::Src::Any),
                  [x, y](const Captured& c, void*) { return c.root() == x.get() ? y : x; }, "swap"});
  const PatternMatcher looping(std::move(loop));

  track::enable(true);
  track::group_begin("kernel");
  track::stage("lower", x.get(), add(x, ci(0)).get());
  graph_rewrite(UOp::make(Ops::SINK, DType::void_(), {add(x, ci(0))}), outer, nullptr, false, "outer");
  CHECK_THROWS(graph_rewrite(x, looping, nullptr, true, "looping"), RewriteError);
  track::group_end("E_4", "void E_4() {}");
  track::enable(false);
  const track::Trace t = track::take();
  const std::vector<Rec> recs = decode(t);
  CHECK_EQ(recs.front().kind, uint32_t(track::kGroupBegin));
  CHECK_EQ(t.strings.at(recs.front().w[0]), std::string("kernel"));
  CHECK_EQ(recs.back().kind, uint32_t(track::kGroupEnd));
  CHECK_EQ(t.strings.at(recs.back().w[0]), std::string("E_4"));
  CHECK_EQ(t.strings.at(recs.back().w[1]), std::string("void E_4() {}"));
  // the stage: a finished call with no steps, flagged as a stage
  CHECK(recs[1].kind == track::kCallBegin && recs[1].w[4] == track::kStage);
  CHECK(recs[2].kind == track::kCallEnd && recs[2].w[0] == recs[1].w[0] && t.nodes.at(recs[2].w[1]) == add(x, ci(0)));
  uint32_t outer_id = track::kNone, inner_parent = 0, looping_id = track::kNone;
  bool looping_failed = false, inner_seen = false;
  for (const Rec& r : recs) {
    if (r.kind == track::kCallBegin && t.strings.at(r.w[2]) == "outer") outer_id = r.w[0];
    if (r.kind == track::kCallBegin && t.strings.at(r.w[2]) == "inner" && !inner_seen) {
      inner_seen = true;
      inner_parent = r.w[1];
    }
    if (r.kind == track::kCallBegin && t.strings.at(r.w[2]) == "looping") {
      looping_id = r.w[0];
      CHECK_EQ(r.w[4], track::kBottomUp);
      CHECK_EQ(r.w[1], track::kNone);  // the outer call had ended: the nesting was unwound
    }
    if (r.kind == track::kCallEnd && r.w[0] == looping_id) looping_failed = r.w[1] == track::kNone;
  }
  CHECK(inner_seen && outer_id != track::kNone && inner_parent == outer_id);
  CHECK(looping_failed);
}

void test_native_rules_and_lifetimes() {
  const size_t before = live_uop_count();
  {
    track::enable(true);
    simplify(add(UOp::variable("i", 0, 9), ci(0)));
    track::enable(false);
    const track::Trace t = track::take();
    const std::vector<Rec> recs = decode(t);
    CHECK(recs.size() >= 3);
    CHECK_EQ(t.strings.at(recs[0].w[2]), std::string("simplify"));
    // the native symbolic rules name the file and line that built them
    CHECK(recs[1].kind == track::kStep && t.strings.at(recs[1].w[2]).starts_with("src/cpp/symbolic/"));
    CHECK(live_uop_count() > before);  // the trace holds its nodes
  }
  CHECK_EQ(live_uop_count(), before);  // and lets them go with it
}

void test_threads() {
  track::enable(true);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([k] {
      const UOpRef v = leaf("t" + std::to_string(k));
      for (int i = 0; i < 50; ++i) graph_rewrite(add(mul(v, ci(1)), ci(0)), identities(), nullptr, false, "threaded");
    });
  for (std::thread& th : threads) th.join();
  track::enable(false);
  const track::Trace t = track::take();
  const std::vector<Rec> recs = decode(t);
  size_t begins = 0, ends = 0, steps = 0;
  for (const Rec& r : recs) {
    begins += r.kind == track::kCallBegin;
    ends += r.kind == track::kCallEnd;
    steps += r.kind == track::kStep;
    if (r.kind == track::kCallBegin) CHECK_EQ(r.w[1], track::kNone);  // no thread's call is another's parent
  }
  CHECK_EQ(begins, size_t(200));
  CHECK_EQ(ends, size_t(200));
  CHECK_EQ(steps, size_t(400));
}

}  // namespace

int main() {
  const size_t before = live_uop_count();
  test_off_records_nothing();
  test_calls_and_steps();
  test_nested_failed_stage_group();
  test_native_rules_and_lifetimes();
  test_threads();
  CHECK_EQ(live_uop_count(), before);
  std::puts("test_track: ok");
  return 0;
}
