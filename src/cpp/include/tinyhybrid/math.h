// The arithmetic vocabulary of UOps: what Python's operators and tinygrad's math methods build.
#pragma once
#include <variant>

#include "tinyhybrid/uop.h"

namespace th::math {

// An operand: a node, or a plain number that becomes a constant of the other operand's dtype.
using Operand = std::variant<UOpRef, Arg>;

enum class Binary : uint8_t {
  Add, Sub, Mul, TrueDiv, FloorDiv, Mod, And, Or, Xor, Shl, Shr, Lt, Gt, Le, Ge, Ne, Eq, Max, Min, Pow
};

// `a OP b` with tinygrad's rules: numbers commit to the node's dtype (an int node meeting a float number
// becomes float32), sub is add of the negation, > and >= flip into <, min is a select (exact for unsigned).
UOpRef binary(Binary op, const Operand& a, const Operand& b);
UOpRef neg(const UOpRef& x);
UOpRef logical_not(const UOpRef& x);
UOpRef where(const UOpRef& cond, const Operand& a, const Operand& b);
UOpRef unary(Ops op, const UOpRef& x);  // EXP2, LOG2, SIN, SQRT, RECIPROCAL, TRUNC
// A constant of x's dtype (for vectors: of its scalar) holding v.
UOpRef const_like(const UOpRef& x, const Arg& v);

}  // namespace th::math
