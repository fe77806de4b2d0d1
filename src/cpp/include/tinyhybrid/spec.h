// SPEC: the type rules of each op (dtype, sources, arg) at each boundary of the compiler pipeline. Node construction
// (verify_node) already refuses what no graph may hold; these rules say what a graph may hold at one stage: a tensor
// graph holds no loads, a lowered kernel no movement ops, a linearized program lists sources before their users.
// Level 1 rules hold from the tensor graph on; level 2 adds the stricter rules of the late stages.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

#include "tinyhybrid/uop.h"

namespace th {

enum class SpecStage : uint8_t { Tensor, Kernel, Lowered, Linear };
inline constexpr size_t kNumSpecStages = 4;
std::string_view spec_stage_name(SpecStage s);  // "tensor graph", "kernel graph", "lowered", "linearized"
std::optional<SpecStage> spec_stage_from_name(std::string_view name);

// The first node that breaks a rule, in sources-before-users order: everything it is built from passes, so the node
// and its sources are the smallest subgraph that fails.
struct SpecViolation {
  SpecStage stage;
  const UOp* node;       // valid while the checked graph is
  std::string rule;      // the rule's name
  std::string detail;    // what the node has instead
};

// A violation as an exception: the message names the pass, the stage, the op and the rule, and prints the failing
// subgraph (cut after a few dozen lines).
struct SpecError : std::runtime_error {
  explicit SpecError(const std::string& msg) : std::runtime_error(msg) {}
};

// The first violation in the graph under root (nullopt: it passes), checking rules up to `level` (1 or 2).
std::optional<SpecViolation> spec_find(const UOp* root, SpecStage stage, int level);
// The same for a linearized program, which also must list every node's sources before it.
std::optional<SpecViolation> spec_find_linear(std::span<const UOp* const> program, int level);

// Throw SpecError for the first violation; `pass` names the pass whose output this is.
void spec_check(const UOpRef& root, SpecStage stage, int level, std::string_view pass);
void spec_check_linear(std::span<const UOp* const> program, int level, std::string_view pass);

// The message spec_check throws for a violation.
std::string spec_message(const SpecViolation& v, std::string_view pass);

}  // namespace th
