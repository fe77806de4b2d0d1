// Integer algebra for the symbolic rules: constants, ranges, and sums as linear forms (sum of c_i*t_i plus k).
#pragma once
#include <optional>
#include <vector>

#include "tinyhybrid/symbolic.h"
#include "tinyhybrid/uop.h"

namespace th::alg {

// Ints and weakint: the dtypes index arithmetic uses (bool is not one).
inline bool is_int(DType d) { return d.is_int() && !d.is_vector() && !d.is_ptr(); }
// The value of an int or bool CONST.
std::optional<i128> const_int(const UOp* u);
// The integer range of an int/bool node.
i128 lo(const UOp* u);
i128 hi(const UOp* u);
UOpRef cint(DType d, i128 v);
// Ranges far enough from the dtype's limits that rewritten forms of the expression cannot wrap.
bool safe_range(const UOp* u);

// sum(coeff_i * term_i) + constant, terms in order of first appearance, like terms combined, none zero.
struct LinearForm {
  DType dtype;
  std::vector<std::pair<const UOp*, i128>> terms;
  i128 constant = 0;

  // Flattens ADDs and multiplications by constants. nullopt: not an int expression, too many terms, or overflow.
  // As a ring identity (mod 2^bits) the form always holds; `exact` also requires that no fixed-width node it flattens
  // can wrap (by its range), so the form is the true integer value, as division, modulo and comparison need.
  static std::optional<LinearForm> of(const UOp* u, bool exact = false, size_t max_terms = 256);
  // The canonical node: ((t0*c0 + t1*c1) + ...) + k, coefficient 1 omitted, constant last, 0 when empty; two or more
  // terms with a common factor g > 1 share one multiply: ((t0*c0/g + ...) * g) + k.
  UOpRef build() const;
  // Whether `n` is exactly what build() would make (checked without making anything).
  bool is_built(const UOp* n) const;
  // gcd of the coefficients (0 when there are no terms).
  i128 coeff_gcd() const;
};

// Left-associated sum of the nodes (0 of dtype when empty).
UOpRef sum(DType d, const std::vector<UOpRef>& terms);
i128 gcd(i128 a, i128 b);

}  // namespace th::alg
