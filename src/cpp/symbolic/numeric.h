// Internal numeric helpers shared by folding, casting and range analysis (not part of the public API).
#pragma once
#include <cmath>
#include <limits>
#include <optional>

#include "tinyhybrid/arg.h"
#include "tinyhybrid/const.h"
#include "tinyhybrid/dtype.h"

namespace th::num {

using u128 = unsigned __int128;
inline constexpr i128 kI128Max = static_cast<i128>(~u128{0} >> 1);
inline constexpr i128 kI128Min = -kI128Max - 1;

// Checked i128 arithmetic: nullopt on overflow (weakint and range bounds use these).
inline std::optional<i128> add(i128 a, i128 b) {
  i128 r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}
inline std::optional<i128> sub(i128 a, i128 b) {
  i128 r;
  if (__builtin_sub_overflow(a, b, &r)) return std::nullopt;
  return r;
}
inline std::optional<i128> mul(i128 a, i128 b) {
  i128 r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}
inline std::optional<i128> neg(i128 a) { return sub(0, a); }

inline bool fits64(i128 v) { return v >= std::numeric_limits<int64_t>::min() && v <= std::numeric_limits<int64_t>::max(); }
// a / b truncating, through a 64-bit division when both fit (i128 division is a slow library call), b != 0 and
// not kI128Min / -1.
inline i128 quot(i128 a, i128 b) {
  if (fits64(a) && fits64(b) && !(a == std::numeric_limits<int64_t>::min() && b == -1))
    return static_cast<int64_t>(a) / static_cast<int64_t>(b);
  return a / b;
}
inline i128 rem(i128 a, i128 b) {
  if (b == -1) return 0;
  if (fits64(a) && fits64(b)) return static_cast<int64_t>(a) % static_cast<int64_t>(b);
  return a % b;
}

// Divisions for b != 0; nullopt only for kI128Min / -1, the one quotient i128 cannot hold.
inline std::optional<i128> cdiv(i128 a, i128 b) {
  if (a == kI128Min && b == -1) return std::nullopt;
  return a / b;
}
inline i128 cmod(i128 a, i128 b) { return b == -1 ? 0 : a % b; }
inline std::optional<i128> floordiv(i128 a, i128 b) {
  const auto q = cdiv(a, b);
  if (!q) return std::nullopt;
  return cmod(a, b) != 0 && ((a < 0) != (b < 0)) ? *q - 1 : *q;
}
inline i128 floormod(i128 a, i128 b) {
  const i128 r = cmod(a, b);
  return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
}

// A double as an i128 after truncation toward zero, saturating at +-2^126 (beyond every dtype's range,
// so a clamp to the dtype still sees it out of range). NaN gives nullopt.
inline std::optional<i128> trunc_saturate(double v) {
  if (std::isnan(v)) return std::nullopt;
  constexpr double kLimit = 85070591730234615865843651857942052864.0;  // 2^126
  if (v >= kLimit) return static_cast<i128>(1) << 126;
  if (v <= -kLimit) return -(static_cast<i128>(1) << 126);
  return static_cast<i128>(std::trunc(v));
}

// An integer as the nearest value of a float dtype (round to nearest even, as the C conversion does).
// Correct also past 2^53, where going through double would round twice.
double int_to_float(Scalar s, i128 v);

// IEEE 754-2019 maximum: NaN if either is NaN, +0.0 over -0.0; symmetric in its operands.
inline double fmax_nan(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}

// CAST of one value to the scalar of `to`, with C semantics; nullopt where C leaves it undefined.
std::optional<Arg> cast_value(DType to, const Arg& v);
// BITCAST of one value between same-size scalars; `from` may be void (then inferred from the value, see fold()).
std::optional<Arg> bitcast_value(DType to, const Arg& v, DType from);

}  // namespace th::num
