// Patterns are data: a Pattern tree (what tinygrad calls a UPat) compiles into small matching programs of
// Check/Capture/ForEach instructions over registers, one program per ordering of its permuted sources.
#pragma once
#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tinyhybrid/uop.h"

namespace th {

struct Pattern {
  // How `src` constrains a node's sources.
  enum class Src : uint8_t {
    Any,      // sources are not looked at
    Ordered,  // src[i] matches source i (a tuple in tinygrad)
    Permute,  // some ordering of the sources matches src (a list in tinygrad)
    Repeat,   // src[0] matches every source (a single UPat in tinygrad)
  };
  OpSet ops;                   // empty: any op
  std::vector<DType> dtypes;   // empty: any dtype; else the node's dtype is one of these
  std::optional<Arg> arg;      // compared as Python compares (1 == 1.0 == True)
  std::string name;            // capture name; empty: not captured
  Src src_mode = Src::Any;
  std::vector<Pattern> src;
  bool allow_any_len = false;  // Ordered/Permute: the node may have more sources than src
  bool is_any = false;         // matches when any pattern in `src` matches (tinygrad's UPat.any)

  std::string repr() const;
};

// Whether a pattern's arg accepts a node's arg (numbers by value, across bool/int/float; others exactly).
bool arg_matches(const Arg& pattern, const Arg& node);

// A compiled pattern: straight-line code without choice points (permutations were expanded at compile time).
struct MatchProgram {
  struct Instr {
    enum class Kind : uint8_t { Check, Capture, ForEach } kind = Kind::Check;
    uint16_t reg = 0;         // the register holding the node the instruction looks at
    // Check: op/dtype/arg constraints, then load sources into registers [first_out, first_out + nload)
    bool check_ops = false;
    bool exact_len = false;
    uint16_t nsrc = 0;        // required source count (exact_len) or minimum
    uint16_t nload = 0;
    uint16_t first_out = 0;
    int32_t dtypes = -1;      // index into dtype_sets
    int32_t arg = -1;         // index into args
    OpSet ops;
    // Capture: the slot the node is bound to (or compared with, when already bound)
    uint16_t slot = 0;
    // ForEach: run sub-program `sub` with its root register set to each source of the node
    int32_t sub = -1;
  };
  struct Sub {
    uint16_t root_reg;
    std::vector<Instr> code;
  };
  // What the program's first checks demand of the root: its source count and the ops of its first two sources.
  // The matcher tests this before running the program; most rules fail here, for the cost of a few bit tests.
  struct Guard {
    uint16_t nsrc = 0;
    bool exact_len = false;
    std::array<bool, 2> has_src_ops{};
    std::array<OpSet, 2> src_ops;
    bool admits(const UOp* n) const {
      if (exact_len ? n->nsrc() != nsrc : n->nsrc() < nsrc) return false;
      for (size_t k = 0; k < 2; ++k)
        if (has_src_ops[k] && !src_ops[k].contains(n->src(k)->op())) return false;
      return true;
    }
  };
  std::vector<Instr> code;
  std::vector<Sub> subs;
  Guard guard;
  std::vector<std::vector<DType>> dtype_sets;
  std::vector<Arg> args;
  uint16_t nregs = 1;  // register 0 holds the root
};

// Capture names of a pattern, in order of first appearance; slot i is names[i].
std::vector<std::string> capture_names(const Pattern& p);
// All programs for a pattern (one per ordering of each Permute source list). Slots follow `names`.
std::vector<MatchProgram> compile_pattern(const Pattern& p, const std::vector<std::string>& names);
// Runs a program on a node; fills `slots` (size names.size(), reset by the caller) on success.
bool run_program(const MatchProgram& prog, const UOp* node, const UOp** slots);

// A small DSL to write native rules the way tinygrad writes UPats.
namespace pat {
Pattern any(std::string name = {});
Pattern var(std::string name, std::vector<DType> dtypes = {});
Pattern cvar(std::string name, std::vector<DType> dtypes = {});  // a CONST
Pattern cnst(Arg value, std::vector<DType> dtypes = {});          // a CONST with this value
Pattern op(OpSet ops, std::vector<Pattern> src, std::string name = {}, Pattern::Src mode = Pattern::Src::Ordered);
// Commutative ops match in either order (Permute), others in order.
Pattern alu(Ops o, std::vector<Pattern> src, std::string name = {});
Pattern named(Pattern p, std::string name);
Pattern with_dtypes(Pattern p, std::vector<DType> dtypes);
Pattern one_of(std::vector<Pattern> alternatives);
Pattern operator+(Pattern a, Pattern b);
Pattern operator*(Pattern a, Pattern b);
}  // namespace pat

}  // namespace th
