// The SPEC rules, as a table: each row says which ops at which stages (from which level) must pass which check.
#include "tinyhybrid/spec.h"

#include <vector>

#include "tinyhybrid/graph.h"

namespace th {

namespace {

enum class Check : uint8_t {
  NotInStage,      // the op does not belong to the stage at all
  NSrcAtLeast,     // a = minimum
  NSrcAtMost,      // a = maximum
  NSrcExactly,     // a = count
  ResultVoid,
  ResultValue,     // not void, not a pointer
  ResultPtr,
  ResultSameAsSrc, // dtype == src[a].dtype
  SrcPtr,          // src[a] is a pointer
  SrcInt,          // src[a] has an int (scalar class) dtype
  SrcBool,         // src[a] has a bool (scalar class) dtype
  SrcOp,           // src[a] is op b (an Ops value)
  SrcsFromAreOp,   // src[a:] are all op b
  ArgKind,         // the arg is of kind a (an Arg::Kind value)
  VectorizeLanes,  // as many sources as lanes, each one lane of the result's scalar dtype (a = 1: count only)
  GepLanes,        // arg is a tuple of lane indices inside the source, one per lane of the result
  ReduceRanges,    // arg is (op, n): sources from n on are RANGEs
};

constexpr uint8_t stage_bit(SpecStage s) { return uint8_t(1u << static_cast<unsigned>(s)); }
constexpr uint8_t kTensor = stage_bit(SpecStage::Tensor), kKernel = stage_bit(SpecStage::Kernel),
                  kLowered = stage_bit(SpecStage::Lowered), kLinear = stage_bit(SpecStage::Linear);
constexpr uint8_t kGraph = kTensor | kKernel, kLate = kLowered | kLinear, kAll = kGraph | kLate;

struct Rule {
  OpSet ops;
  uint8_t stages;
  uint8_t level;
  Check check;
  int a = 0;
  int b = 0;
  std::string_view name;
};

constexpr int op_int(Ops o) { return static_cast<int>(o); }
constexpr int kind_int(Arg::Kind k) { return static_cast<int>(k); }

// Ops of the tensor graph that lowering must have replaced, and ops lowering introduces.
constexpr OpSet kTensorOnly{Ops::RESHAPE, Ops::PERMUTE, Ops::EXPAND, Ops::PAD, Ops::FLIP, Ops::SHRINK, Ops::CONTIGUOUS,
                            Ops::CONTIGUOUS_BACKWARD, Ops::DETACH, Ops::COPY, Ops::BUFFER, Ops::UNIQUE, Ops::IOTA,
                            Ops::MSELECT, Ops::MSTACK, Ops::UNSHARD, Ops::ALLREDUCE, Ops::STAGE, Ops::CUSTOM_FUNCTION};
constexpr OpSet kKernelOnly{Ops::PARAM, Ops::INDEX, Ops::LOAD, Ops::RANGE, Ops::END, Ops::SPECIAL, Ops::GEP,
                            Ops::VECTORIZE, Ops::IF, Ops::ENDIF, Ops::BARRIER};
constexpr OpSet kMovement{Ops::RESHAPE, Ops::PERMUTE, Ops::EXPAND, Ops::PAD, Ops::FLIP, Ops::SHRINK};
constexpr OpSet kStructural{Ops::SINK, Ops::GROUP, Ops::END};

// clang-format off
constexpr Rule kRules[] = {
  // where each op may appear
  {kTensorOnly, kLate, 1, Check::NotInStage, 0, 0, "tensor-graph ops are gone after lowering"},
  {kKernelOnly, kGraph, 1, Check::NotInStage, 0, 0, "kernel ops appear only once a kernel is lowered"},
  {OpSet{Ops::PYLITERAL, Ops::REWRITE_ERROR}, kAll, 1, Check::NotInStage, 0, 0, "pattern and error markers never reach a pass boundary"},
  // every stage
  {group::AnyALU, kAll, 1, Check::ResultValue, 0, 0, "ALU results are values"},
  {group::AnyALU, kAll, 1, Check::ResultSameAsSrc, 0, 0, "ALU results have their operands' dtype"},  // comparisons: below
  {OpSet{Ops::WHERE}, kAll, 1, Check::SrcBool, 0, 0, "WHERE's condition is bool"},
  {OpSet{Ops::CAST, Ops::BITCAST}, kAll, 1, Check::NSrcExactly, 1, 0, "a cast has one source"},
  {OpSet{Ops::CAST, Ops::BITCAST}, kAll, 1, Check::ResultValue, 0, 0, "a cast makes a value"},
  {OpSet{Ops::CONST}, kAll, 1, Check::NSrcExactly, 0, 0, "a constant has no sources"},
  {OpSet{Ops::CONST}, kAll, 1, Check::ResultValue, 0, 0, "a constant is a value"},
  {OpSet{Ops::DEFINE_VAR}, kAll, 1, Check::ArgKind, kind_int(Arg::Kind::Tuple), 0, "a variable's arg is (name, min, max)"},
  {OpSet{Ops::BIND}, kAll, 1, Check::SrcOp, 0, op_int(Ops::DEFINE_VAR), "BIND binds a DEFINE_VAR"},
  {OpSet{Ops::BIND}, kAll, 1, Check::SrcOp, 1, op_int(Ops::CONST), "BIND binds to a CONST"},
  {kStructural, kAll, 1, Check::ResultVoid, 0, 0, "SINK, GROUP and END have no value"},
  // tensor and kernel graphs
  {kMovement, kGraph, 1, Check::NSrcAtLeast, 1, 0, "a movement op has a source"},
  {kMovement, kGraph, 1, Check::ResultSameAsSrc, 0, 0, "a movement op keeps its source's dtype"},
  {kMovement, kGraph, 2, Check::ArgKind, kind_int(Arg::Kind::Tuple), 0, "a movement op's arg is a tuple"},
  {OpSet{Ops::BUFFER}, kGraph, 1, Check::NSrcExactly, 0, 0, "a buffer has no sources"},
  {OpSet{Ops::BUFFER}, kGraph, 1, Check::ResultValue, 0, 0, "a buffer holds values"},
  {OpSet{Ops::CONTIGUOUS, Ops::DETACH, Ops::CONTIGUOUS_BACKWARD}, kGraph, 1, Check::NSrcAtLeast, 1, 0, "CONTIGUOUS and DETACH wrap a source"},
  {OpSet{Ops::CONTIGUOUS, Ops::DETACH, Ops::CONTIGUOUS_BACKWARD}, kGraph, 1, Check::ResultSameAsSrc, 0, 0, "CONTIGUOUS and DETACH keep their source's dtype"},
  {OpSet{Ops::REDUCE}, kGraph, 1, Check::NSrcExactly, 1, 0, "a tensor REDUCE has one source"},
  {OpSet{Ops::REDUCE}, kGraph, 1, Check::ResultSameAsSrc, 0, 0, "a REDUCE keeps its source's dtype"},
  {OpSet{Ops::REDUCE}, kGraph, 2, Check::ArgKind, kind_int(Arg::Kind::Tuple), 0, "a tensor REDUCE's arg is (op, axes)"},
  {OpSet{Ops::STORE}, kGraph, 1, Check::NSrcExactly, 2, 0, "a tensor STORE is (target, value)"},
  {OpSet{Ops::SINK}, kTensor, 2, Check::NSrcAtLeast, 1, 0, "a tensor graph's SINK holds its roots"},
  // lowered kernels and linearized programs
  {OpSet{Ops::PARAM}, kLate, 1, Check::NSrcExactly, 0, 0, "a PARAM has no sources"},
  {OpSet{Ops::PARAM}, kLate, 1, Check::ResultPtr, 0, 0, "a PARAM is a pointer"},
  {OpSet{Ops::PARAM}, kLate, 2, Check::ArgKind, kind_int(Arg::Kind::Int), 0, "a PARAM's arg is its argument slot"},
  {OpSet{Ops::INDEX}, kLate, 1, Check::NSrcAtLeast, 2, 0, "an INDEX is (pointer, index, [gate])"},
  {OpSet{Ops::INDEX}, kLate, 1, Check::NSrcAtMost, 3, 0, "an INDEX is (pointer, index, [gate])"},
  {OpSet{Ops::INDEX}, kLate, 1, Check::SrcPtr, 0, 0, "an INDEX indexes a pointer"},
  {OpSet{Ops::INDEX}, kLate, 1, Check::SrcInt, 1, 0, "an INDEX's index is an int"},
  {OpSet{Ops::LOAD}, kLate, 1, Check::NSrcAtLeast, 1, 0, "a LOAD reads an address"},
  {OpSet{Ops::LOAD}, kLate, 1, Check::ResultValue, 0, 0, "a LOAD makes a value"},
  {OpSet{Ops::LOAD}, kLate, 2, Check::SrcOp, 0, op_int(Ops::INDEX), "a LOAD reads through an INDEX"},
  {OpSet{Ops::STORE}, kLate, 1, Check::NSrcAtLeast, 2, 0, "a STORE is (address, value, ...)"},
  {OpSet{Ops::STORE}, kLate, 1, Check::ResultVoid, 0, 0, "a lowered STORE has no value"},
  {OpSet{Ops::STORE}, kLate, 2, Check::SrcOp, 0, op_int(Ops::INDEX), "a STORE writes through an INDEX"},
  {OpSet{Ops::RANGE}, kLate, 1, Check::NSrcAtLeast, 1, 0, "a RANGE has its end as first source"},
  {OpSet{Ops::RANGE}, kLate, 1, Check::SrcInt, 0, 0, "a RANGE's end is an int"},
  {OpSet{Ops::RANGE}, kLate, 1, Check::ResultSameAsSrc, 0, 0, "a RANGE counts in its end's dtype"},
  {OpSet{Ops::RANGE}, kLate, 2, Check::ArgKind, kind_int(Arg::Kind::Tuple), 0, "a RANGE's arg is (axis, kind)"},
  {OpSet{Ops::END}, kLate, 1, Check::NSrcAtLeast, 1, 0, "an END closes something"},
  {OpSet{Ops::END}, kLate, 2, Check::SrcsFromAreOp, 1, op_int(Ops::RANGE), "an END closes RANGEs"},
  {OpSet{Ops::VECTORIZE}, kLate, 1, Check::VectorizeLanes, 1, 0, "a VECTORIZE has one source per lane"},
  {OpSet{Ops::VECTORIZE}, kLate, 2, Check::VectorizeLanes, 0, 0, "a VECTORIZE's sources are lanes of its scalar dtype"},
  {OpSet{Ops::GEP}, kLate, 1, Check::NSrcExactly, 1, 0, "a GEP takes lanes of one source"},
  {OpSet{Ops::GEP}, kLate, 2, Check::GepLanes, 0, 0, "a GEP's arg picks one existing lane per result lane"},
  {OpSet{Ops::REDUCE}, kLate, 1, Check::NSrcAtLeast, 1, 0, "a REDUCE has values to reduce"},
  {OpSet{Ops::REDUCE}, kLate, 2, Check::ReduceRanges, 0, 0, "a lowered REDUCE's arg is (op, n) with RANGEs from source n on"},
  {OpSet{Ops::SINK}, kLate, 2, Check::NSrcAtLeast, 1, 0, "a kernel's SINK holds its stores"},
};
// clang-format on

std::string dtype_of_src(const UOp* n, size_t i) { return n->src(i)->dtype().repr(); }

// The reason n fails the rule, or nullopt when it passes.
std::optional<std::string> failure(const Rule& r, const UOp* n) {
  const DType d = n->dtype();
  const size_t ns = n->nsrc();
  const auto need_src = [&](size_t i) -> std::optional<std::string> {
    if (i >= ns) return "it has " + std::to_string(ns) + " sources";
    return std::nullopt;
  };
  switch (r.check) {
    case Check::NotInStage: return "the op itself";
    case Check::NSrcAtLeast:
      if (ns < size_t(r.a)) return std::to_string(ns) + " sources";
      return std::nullopt;
    case Check::NSrcAtMost:
      if (ns > size_t(r.a)) return std::to_string(ns) + " sources";
      return std::nullopt;
    case Check::NSrcExactly:
      if (ns != size_t(r.a)) return std::to_string(ns) + " sources";
      return std::nullopt;
    case Check::ResultVoid:
      if (!d.is_void()) return "dtype " + d.repr();
      return std::nullopt;
    case Check::ResultValue:
      if (d.is_void() || d.is_ptr()) return "dtype " + d.repr();
      return std::nullopt;
    case Check::ResultPtr:
      if (!d.is_ptr()) return "dtype " + d.repr();
      return std::nullopt;
    case Check::ResultSameAsSrc: {
      if (auto e = need_src(size_t(r.a))) return e;
      // an ALU op's dtype is the one its builder infers (comparisons make bools of their operands' width, WHERE its
      // branches', BYTEDOT int16); any other op keeps its source's
      const DType want = group::AnyALU.contains(n->op()) ? infer_dtype(n->op(), n->src(), n->arg()) : n->src(size_t(r.a))->dtype();
      if ((n->op() == Ops::SHL || n->op() == Ops::SHR) && d == n->src(0)->dtype()) return std::nullopt;
      if (d != want) return "dtype " + d.repr() + ", expected " + want.repr();
      return std::nullopt;
    }
    case Check::SrcPtr:
      if (auto e = need_src(size_t(r.a))) return e;
      if (!n->src(size_t(r.a))->dtype().is_ptr()) return "source " + std::to_string(r.a) + " has dtype " + dtype_of_src(n, size_t(r.a));
      return std::nullopt;
    case Check::SrcInt:
      if (auto e = need_src(size_t(r.a))) return e;
      if (!n->src(size_t(r.a))->dtype().is_int()) return "source " + std::to_string(r.a) + " has dtype " + dtype_of_src(n, size_t(r.a));
      return std::nullopt;
    case Check::SrcBool:
      if (auto e = need_src(size_t(r.a))) return e;
      if (!n->src(size_t(r.a))->dtype().is_bool()) return "source " + std::to_string(r.a) + " has dtype " + dtype_of_src(n, size_t(r.a));
      return std::nullopt;
    case Check::SrcOp:
      if (auto e = need_src(size_t(r.a))) return e;
      if (n->src(size_t(r.a))->op() != static_cast<Ops>(r.b))
        return "source " + std::to_string(r.a) + " is " + std::string(op_name(n->src(size_t(r.a))->op()));
      return std::nullopt;
    case Check::SrcsFromAreOp:
      for (size_t i = size_t(r.a); i < ns; ++i)
        if (n->src(i)->op() != static_cast<Ops>(r.b))
          return "source " + std::to_string(i) + " is " + std::string(op_name(n->src(i)->op()));
      return std::nullopt;
    case Check::ArgKind:
      if (n->arg().kind() != static_cast<Arg::Kind>(r.a)) return "arg " + n->arg().repr();
      return std::nullopt;
    case Check::VectorizeLanes: {
      if (ns != d.count()) return std::to_string(ns) + " sources for " + d.repr();
      if (r.a == 1) return std::nullopt;
      for (size_t i = 0; i < ns; ++i)
        if (n->src(i)->dtype() != d.scalar())
          return "source " + std::to_string(i) + " has dtype " + dtype_of_src(n, i) + ", expected " + d.scalar().repr();
      return std::nullopt;
    }
    case Check::GepLanes: {
      if (ns != 1) return std::to_string(ns) + " sources";
      if (n->arg().kind() != Arg::Kind::Tuple) return "arg " + n->arg().repr();
      const auto lanes = n->arg().as_tuple();
      if (lanes.size() != d.count()) return "arg " + n->arg().repr() + " for " + d.repr();
      const uint32_t width = n->src(0)->dtype().count();
      for (const Arg& l : lanes)
        if (l.kind() != Arg::Kind::Int || l.as_int() < 0 || l.as_int() >= width)
          return "lane " + l.repr() + " of a source with " + std::to_string(width) + " lanes";
      return std::nullopt;
    }
    case Check::ReduceRanges: {
      const Arg& a = n->arg();
      if (a.kind() != Arg::Kind::Tuple || a.as_tuple().size() < 2 || a.as_tuple()[1].kind() != Arg::Kind::Int)
        return "arg " + a.repr();
      const i128 first = a.as_tuple()[1].as_int();
      if (first < 1 || first > i128(ns)) return "arg " + a.repr() + " with " + std::to_string(ns) + " sources";
      for (size_t i = size_t(first); i < ns; ++i)
        if (n->src(i)->op() != Ops::RANGE) return "source " + std::to_string(i) + " is " + std::string(op_name(n->src(i)->op()));
      return std::nullopt;
    }
  }
  return std::nullopt;
}

// The rules that apply at one stage and level, by op: built once per (stage, level).
using RuleIndex = std::vector<std::vector<const Rule*>>;
const RuleIndex& rules_for(SpecStage stage, int level) {
  static const auto table = [] {
    std::vector<RuleIndex> t(kNumSpecStages * 2, RuleIndex(kNumOps));
    for (size_t s = 0; s < kNumSpecStages; ++s)
      for (int lv = 1; lv <= 2; ++lv)
        for (const Rule& r : kRules)
          if ((r.stages & (1u << s)) && r.level <= lv)
            for (size_t o = 0; o < kNumOps; ++o)
              if (r.ops.contains(static_cast<Ops>(o))) t[s * 2 + size_t(lv - 1)][o].push_back(&r);
    return t;
  }();
  return table[static_cast<size_t>(stage) * 2 + size_t(level >= 2 ? 1 : 0)];
}

std::optional<SpecViolation> check_node(const RuleIndex& idx, SpecStage stage, const UOp* n) {
  for (const Rule* r : idx[static_cast<size_t>(n->op())])
    if (auto why = failure(*r, n)) return SpecViolation{stage, n, std::string(r->name), std::move(*why)};
  return std::nullopt;
}

constexpr size_t kMaxReprLines = 40;

}  // namespace

std::string_view spec_stage_name(SpecStage s) {
  switch (s) {
    case SpecStage::Tensor: return "tensor graph";
    case SpecStage::Kernel: return "kernel graph";
    case SpecStage::Lowered: return "lowered";
    case SpecStage::Linear: return "linearized";
  }
  return "?";
}

std::optional<SpecStage> spec_stage_from_name(std::string_view name) {
  for (size_t s = 0; s < kNumSpecStages; ++s)
    if (spec_stage_name(static_cast<SpecStage>(s)) == name) return static_cast<SpecStage>(s);
  return std::nullopt;
}

std::optional<SpecViolation> spec_find(const UOp* root, SpecStage stage, int level) {
  if (level <= 0 || !root) return std::nullopt;
  const RuleIndex& idx = rules_for(stage, level);
  for (const UOp* n : toposort(root))
    if (auto v = check_node(idx, stage, n)) return v;
  return std::nullopt;
}

std::optional<SpecViolation> spec_find_linear(std::span<const UOp* const> program, int level) {
  if (level <= 0) return std::nullopt;
  const RuleIndex& idx = rules_for(SpecStage::Linear, level);
  NodeSet placed(program.size());
  for (const UOp* n : program) {
    for (size_t i = 0; i < n->nsrc(); ++i)
      if (!placed.contains(n->src(i).get()))
        return SpecViolation{SpecStage::Linear, n, "a linearized program lists sources before their users",
                             "source " + std::to_string(i) + " (" + std::string(op_name(n->src(i)->op())) + ") comes later or not at all"};
    if (auto v = check_node(idx, SpecStage::Linear, n)) return v;
    placed.insert(n);
  }
  return std::nullopt;
}

std::string spec_message(const SpecViolation& v, std::string_view pass) {
  std::string graph = repr(UOpRef(v.node));
  size_t lines = 0, cut = std::string::npos;
  for (size_t i = 0; i < graph.size(); ++i)
    if (graph[i] == '\n' && ++lines == kMaxReprLines) {
      cut = i;
      break;
    }
  if (cut != std::string::npos) graph = graph.substr(0, cut) + "\n  ...";
  return "SPEC: " + std::string(pass) + " (" + std::string(spec_stage_name(v.stage)) + "): " +
         std::string(op_name(v.node->op())) + " breaks rule '" + v.rule + "': " + v.detail +
         "\nsmallest failing subgraph:\n" + graph;
}

void spec_check(const UOpRef& root, SpecStage stage, int level, std::string_view pass) {
  if (auto v = spec_find(root.get(), stage, level)) throw SpecError(spec_message(*v, pass));
}

void spec_check_linear(std::span<const UOp* const> program, int level, std::string_view pass) {
  if (auto v = spec_find_linear(program, level)) throw SpecError(spec_message(*v, pass));
}

}  // namespace th
