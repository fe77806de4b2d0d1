// Constant values with exact dtype semantics: integer wraparound, float rounding to the dtype's precision.
#pragma once
#include <utility>

#include "tinyhybrid/arg.h"
#include "tinyhybrid/dtype.h"

namespace th {

// Wrap an integer to the range of an int dtype (two's complement, as a C cast). weakint is unbounded.
i128 wrap_int(Scalar s, i128 v);
// Round a double to the precision of a float dtype (round-to-nearest-even; fp8 saturates per its format).
double round_float(Scalar s, double v);
// The value `v` converted as C converts to dtype `dt`'s scalar: bool -> Bool, int dtypes -> Int (wrapped),
// float dtypes -> Float (rounded). Throws UOpTypeError when v is not a number.
Arg const_for(DType dt, const Arg& v);
// The smallest and largest value of a dtype's scalar (bool: False/True; floats: -inf/inf).
std::pair<Arg, Arg> dtype_range(DType dt);
// True when every value of `v` is representable in dt exactly.
bool fits(DType dt, i128 v);

}  // namespace th
