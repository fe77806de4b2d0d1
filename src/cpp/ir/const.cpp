#include "tinyhybrid/const.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "tinyhybrid/uop.h"

namespace th {

namespace {

int int_bits(Scalar s) { return DType::of(s).bitsize(); }

// Round to a binary float format with `mbits` stored mantissa bits and exponent range [emin, emax],
// round-to-nearest-even, gradual underflow. Values past the largest finite become inf (or max when saturating).
double round_to_format(double v, int mbits, int emin, int emax, double max_finite, bool has_inf) {
  if (std::isnan(v) || std::isinf(v) || v == 0.0) return has_inf || !std::isinf(v) ? v : std::copysign(max_finite, v);
  int e;
  std::frexp(std::fabs(v), &e);  // |v| = m * 2^e, m in [0.5, 1)
  const int exp = std::max(e - 1, emin);
  const double quantum = std::ldexp(1.0, exp - mbits);
  const double r = std::nearbyint(v / quantum) * quantum;  // default rounding mode: nearest-even
  if (std::fabs(r) > max_finite) {
    // Past the largest finite: inf if the value rounds beyond the halfway point to the next binade.
    (void)emax;
    return has_inf ? std::copysign(std::numeric_limits<double>::infinity(), v) : std::copysign(max_finite, v);
  }
  return r;
}

}  // namespace

i128 wrap_int(Scalar s, i128 v) {
  const DType dt = DType::of(s);
  if (s == Scalar::WEAKINT) return v;
  if (s == Scalar::BOOL) return v != 0;
  const int bits = int_bits(s);
  const auto mask = (static_cast<unsigned __int128>(1) << bits) - 1;
  auto u = static_cast<unsigned __int128>(v) & mask;
  if (!dt.is_unsigned() && (u >> (bits - 1)) & 1) return static_cast<i128>(u) - (static_cast<i128>(1) << bits);
  return static_cast<i128>(u);
}

double round_float(Scalar s, double v) {
  switch (s) {
    case Scalar::FLOAT: return static_cast<double>(static_cast<float>(v));
    case Scalar::HALF: return round_to_format(v, 10, -14, 15, 65504.0, true);
    case Scalar::BFLOAT16: return round_to_format(v, 7, -126, 127, 3.3895313892515355e38, true);
    case Scalar::FP8E4M3: return round_to_format(v, 3, -6, 8, 448.0, false);
    case Scalar::FP8E5M2: return round_to_format(v, 2, -14, 15, 57344.0, true);
    case Scalar::FP8E4M3FNUZ: return round_to_format(v, 3, -7, 7, 240.0, false);
    case Scalar::FP8E5M2FNUZ: return round_to_format(v, 2, -15, 15, 57344.0, false);
    default: return v;
  }
}

Arg const_for(DType dt, const Arg& v) {
  if (!v.is_number()) throw UOpTypeError("CONST: arg must be a bool, int or float for " + dt.repr() + ", got " + v.repr());
  const Scalar s = dt.scalar_kind();
  if (dt.is_bool()) {
    if (v.kind() == Arg::Kind::Bool) return v;
    return Arg::boolean(v.to_double() != 0.0);
  }
  if (dt.is_int()) {
    switch (v.kind()) {
      case Arg::Kind::Bool: return Arg::integer(v.as_bool() ? 1 : 0);
      case Arg::Kind::Int: return Arg::integer(wrap_int(s, v.as_int()));
      default: {
        const double f = v.as_float();
        if (!std::isfinite(f) || std::fabs(f) >= 1.7e38)
          throw UOpValueError("CONST: " + v.repr() + " is not representable in " + dt.repr());
        return Arg::integer(wrap_int(s, static_cast<i128>(std::trunc(f))));
      }
    }
  }
  if (dt.is_float()) return Arg::floating(round_float(s, v.to_double()));
  throw UOpTypeError("CONST: no constants of " + dt.repr());
}

std::pair<Arg, Arg> dtype_range(DType dt) {
  const Scalar s = dt.scalar_kind();
  if (dt.is_bool()) return {Arg::boolean(false), Arg::boolean(true)};
  if (dt.is_float()) {
    const double inf = std::numeric_limits<double>::infinity();
    return {Arg::floating(-inf), Arg::floating(inf)};
  }
  if (s == Scalar::WEAKINT) {
    const i128 big = static_cast<i128>(std::numeric_limits<int64_t>::max()) * 4;
    return {Arg::integer(-big), Arg::integer(big)};
  }
  if (dt.is_int()) {
    const int bits = int_bits(s);
    if (dt.is_unsigned()) return {Arg::integer(0), Arg::integer((static_cast<i128>(1) << bits) - 1)};
    return {Arg::integer(-(static_cast<i128>(1) << (bits - 1))), Arg::integer((static_cast<i128>(1) << (bits - 1)) - 1)};
  }
  return {Arg(), Arg()};
}

bool fits(DType dt, i128 v) {
  if (!dt.is_int()) return false;
  const auto [lo, hi] = dtype_range(dt);
  return lo.as_int() <= v && v <= hi.as_int();
}

}  // namespace th
