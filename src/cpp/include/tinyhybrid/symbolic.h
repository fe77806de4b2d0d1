// The value semantics of the symbolic engine: constant folding with exact dtype semantics, value ranges
// (vmin/vmax) kept on the nodes, and evaluation of expressions with variables. Everything here is iterative.
//
// Semantics a rule writer relies on:
//  * Integers wrap to their dtype (two's complement); weakint is unbounded (an i128 overflow does not fold).
//    CDIV/CMOD truncate (C), FLOORDIV/FLOORMOD floor (Python). Division or modulo by zero never folds.
//    Shifts by a negative amount or by >= the dtype's bit width never fold.
//  * Floats compute in double and round to the dtype after every op (MULACC rounds the product, then the sum).
//    FDIV and RECIPROCAL follow IEEE (x/0 = +-inf, 0/0 = nan). MAX propagates NaN and prefers +0.0 over -0.0,
//    so it is commutative (IEEE 754-2019 maximum, numpy.maximum, torch.maximum).
//  * CAST float->int truncates; a NaN, infinite or out-of-range source (C undefined behaviour) does not fold.
//  * CAST int->int wraps and BITCAST reinterprets bits (float32/64, half, bfloat16 and ints of the same size;
//    fp8 bit patterns do not fold). NaN payloads are not kept: every NaN is the canonical quiet NaN.
//  * Ranges are sound for these semantics: an int range that would wrap becomes the dtype's full range (also for
//    CAST int->int when the source range does not fit). CAST float->int keeps the part of the source range that
//    overlaps the destination (the rest is undefined behaviour); no overlap, or a source that may be NaN, gives the
//    destination's full range. A divisor range containing 0 gives the dtype's full range.
//    A float range bounds the non-NaN values; a float node that may be NaN always has the full range
//    [-inf, inf], so a narrower float range also proves the node is never NaN. Float comparisons are decided
//    only between such NaN-free ranges. A NaN CONST has the full range.
//    RANGE is 0 .. end.vmax-1 (an empty loop gives vmin 0 > vmax -1, as in tinygrad); SPECIAL likewise when it has
//    an end source, else its dtype's range; DEFINE_VAR is its (name, min, max) arg cut to the dtype; BIND, AFTER,
//    GEP and INDEX pass their first source's range on.
#pragma once
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>

#include "tinyhybrid/arg.h"
#include "tinyhybrid/dtype.h"
#include "tinyhybrid/facts.h"
#include "tinyhybrid/ops.h"
#include "tinyhybrid/uop.h"

namespace th {

// Folds `op` over constant operands (Args of the operand dtype's kind: Bool, Int or Float) into a value of
// `dtype` (the result dtype; comparisons give bool). Handles every op of group::ALU, CAST and BITCAST.
// `src_dtype` is the first operand's dtype; only BITCAST needs it (without it the source is inferred from the
// value's kind and the result's size, which cannot tell half from bfloat16). nullopt: not foldable.
std::optional<Arg> fold(Ops op, DType dtype, std::span<const Arg> operands, DType src_dtype = DType());
inline std::optional<Arg> fold(Ops op, DType dtype, std::initializer_list<Arg> operands, DType src_dtype = DType()) {
  return fold(op, dtype, std::span<const Arg>(operands.begin(), operands.size()), src_dtype);
}

// The value range of a node, computed once for it and every node below it that lacks one, and kept on the nodes.
// vmin/vmax are of the node's scalar kind (bool, int or float); both are None for void nodes.
const NodeFacts& facts_of(const UOp* u);
inline std::pair<Arg, Arg> vmin_vmax(const UOp* u) {
  const NodeFacts& f = facts_of(u);
  return {f.vmin, f.vmax};
}

// The value of an expression with its variables (DEFINE_VAR, by name) set. A BIND gives its bound constant unless
// `vars` names its variable. Throws UOpValueError naming the op when a value cannot be computed (a variable
// without a value, a division by zero, an op that has no value such as LOAD).
Arg evaluate(const UOpRef& u, const std::unordered_map<std::string, Arg>& vars);

}  // namespace th
