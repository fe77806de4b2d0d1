// Constant folding: one op over constant operands, with the exact semantics of the dtype.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "symbolic/numeric.h"
#include "tinyhybrid/symbolic.h"

namespace th {

namespace {

using num::u128;

std::optional<i128> as_int(const Arg& a) {
  if (a.kind() == Arg::Kind::Bool) return a.as_bool() ? 1 : 0;
  if (a.kind() == Arg::Kind::Int) return a.as_int();
  return std::nullopt;
}

// ---- integers (and bools, as 0/1) ----

// The int semantics of one dtype: fixed widths compute modulo 2^128 and wrap (exact, since 2^bits divides 2^128);
// weakint computes exactly and gives up on i128 overflow; bool computes on 0/1 and keeps `!= 0`.
struct IntDomain {
  Scalar s;
  bool weak;
  std::optional<i128> add(i128 a, i128 b) const {
    return weak ? num::add(a, b) : std::optional<i128>(static_cast<i128>(static_cast<u128>(a) + static_cast<u128>(b)));
  }
  std::optional<i128> sub(i128 a, i128 b) const {
    return weak ? num::sub(a, b) : std::optional<i128>(static_cast<i128>(static_cast<u128>(a) - static_cast<u128>(b)));
  }
  std::optional<i128> mul(i128 a, i128 b) const {
    return weak ? num::mul(a, b) : std::optional<i128>(static_cast<i128>(static_cast<u128>(a) * static_cast<u128>(b)));
  }
  Arg result(i128 v) const { return s == Scalar::BOOL ? Arg::boolean(v != 0) : Arg::integer(wrap_int(s, v)); }
};

std::optional<i128> int_pow(const IntDomain& d, i128 base, i128 exp) {
  if (exp < 0) return std::nullopt;  // Python would give a float; C has no such op
  i128 result = 1;
  while (exp > 0) {
    if (exp & 1) {
      const auto r = d.mul(result, base);
      if (!r) return std::nullopt;
      result = *r;
    }
    exp >>= 1;
    if (exp > 0) {
      const auto b = d.mul(base, base);
      if (!b) return std::nullopt;
      base = *b;
    }
  }
  return result;
}

// Threefry-2x32 with 20 rounds (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"): the counter is
// x (low word first), the key is `key`; the result packs the two output words, high word second.
uint64_t threefry2x32(uint64_t x, uint64_t key) {
  constexpr int kRot[8] = {13, 15, 26, 6, 17, 29, 16, 24};
  const uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  const uint32_t ks[3] = {k0, k1, k0 ^ k1 ^ 0x1BD11BDAu};
  uint32_t x0 = static_cast<uint32_t>(x) + ks[0];
  uint32_t x1 = static_cast<uint32_t>(x >> 32) + ks[1];
  for (int group = 0; group < 5; ++group) {
    for (int r = 0; r < 4; ++r) {
      x0 += x1;
      x1 = std::rotl(x1, kRot[(group % 2) * 4 + r]) ^ x0;
    }
    // Key injection after every four rounds.
    x0 += ks[(group + 1) % 3];
    x1 += ks[(group + 2) % 3] + static_cast<uint32_t>(group + 1);
  }
  return static_cast<uint64_t>(x1) << 32 | x0;
}

std::optional<Arg> fold_int(Ops op, DType dt, std::span<const Arg> in) {
  const Scalar s = dt.scalar_kind();
  const IntDomain d{s, s == Scalar::WEAKINT};
  i128 v[3] = {0, 0, 0};
  for (size_t i = 0; i < in.size(); ++i) {
    const auto x = as_int(in[i]);
    if (!x) return std::nullopt;
    // The shift amount keeps its own dtype; every other operand is a value of dt.
    v[i] = ((op == Ops::SHL || op == Ops::SHR) && i == 1) || d.weak ? *x : wrap_int(s, *x);
  }
  const i128 a = v[0], b = v[1];
  const auto done = [&](std::optional<i128> r) -> std::optional<Arg> {
    if (!r) return std::nullopt;
    return d.result(*r);
  };
  switch (op) {
    case Ops::ADD: return done(d.add(a, b));
    case Ops::SUB: return done(d.sub(a, b));
    case Ops::MUL: return done(d.mul(a, b));
    case Ops::NEG: return done(d.sub(0, a));
    case Ops::MULACC: {
      const auto p = d.mul(a, b);
      return p ? done(d.add(*p, v[2])) : std::nullopt;
    }
    case Ops::MAX: return d.result(a > b ? a : b);
    case Ops::TRUNC: return d.result(a);
    case Ops::CDIV: return b == 0 ? std::nullopt : done(num::cdiv(a, b));
    case Ops::CMOD: return b == 0 ? std::nullopt : done(num::cmod(a, b));
    case Ops::FLOORDIV: return b == 0 ? std::nullopt : done(num::floordiv(a, b));
    case Ops::FLOORMOD: return b == 0 ? std::nullopt : done(num::floormod(a, b));
    case Ops::AND: return d.result(a & b);
    case Ops::OR: return d.result(a | b);
    case Ops::XOR: return d.result(a ^ b);
    case Ops::SHL:
    case Ops::SHR: {
      if (s == Scalar::BOOL) return std::nullopt;
      const int bits = d.weak ? 127 : dt.bitsize();
      if (b < 0 || b >= bits) return std::nullopt;  // undefined in C
      const int k = static_cast<int>(b);
      if (op == Ops::SHR) return d.result(a >> k);  // unsigned values are non-negative, so this is logical there
      const auto shifted = static_cast<i128>(static_cast<u128>(a) << k);
      if (d.weak && (shifted >> k) != a) return std::nullopt;
      return d.result(shifted);
    }
    case Ops::POW: return done(int_pow(d, a, b));
    case Ops::THREEFRY:
      return d.result(static_cast<i128>(threefry2x32(static_cast<uint64_t>(static_cast<u128>(a)),
                                                     static_cast<uint64_t>(static_cast<u128>(b)))));
    default: return std::nullopt;  // FDIV and the transcendental ops need a float dtype
  }
}

// ---- floats: compute in double, round to the dtype after each op ----

// Python's float divmod (what numpy's floor_divide/remainder also compute): b != 0.
std::pair<double, double> float_divmod(double a, double b) {
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0.0) {
    if ((b < 0) != (mod < 0)) {
      mod += b;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, b);
  }
  double floordiv;
  if (div != 0.0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;  // (a - mod) / b may land just below an integer
  } else {
    floordiv = std::copysign(0.0, a / b);
  }
  return {floordiv, mod};
}

std::optional<Arg> fold_float(Ops op, DType dt, std::span<const Arg> in) {
  const Scalar s = dt.scalar_kind();
  const auto R = [s](double x) { return round_float(s, x); };
  double v[3] = {0, 0, 0};
  for (size_t i = 0; i < in.size(); ++i) v[i] = R(in[i].to_double());
  const double a = v[0], b = v[1];
  const auto out = [&](double r) -> std::optional<Arg> { return Arg::floating(R(r)); };
  switch (op) {
    case Ops::ADD: return out(a + b);
    case Ops::SUB: return out(a - b);
    case Ops::MUL: return out(a * b);
    case Ops::FDIV: return out(a / b);
    case Ops::MULACC: return out(R(a * b) + v[2]);
    case Ops::MAX: return out(num::fmax_nan(a, b));
    case Ops::NEG: return out(-a);
    case Ops::RECIPROCAL: return out(1.0 / a);
    case Ops::SQRT: return out(std::sqrt(a));
    case Ops::EXP2: return out(std::exp2(a));
    case Ops::LOG2: return out(std::log2(a));
    case Ops::SIN: return out(std::sin(a));
    case Ops::TRUNC: return out(std::trunc(a));
    case Ops::POW: return out(std::pow(a, b));
    case Ops::CMOD: return b == 0.0 ? std::nullopt : out(std::fmod(a, b));
    case Ops::CDIV: {
      // The floor of the magnitudes with the quotient's sign: trunc(a / b) without rounding a / b first.
      if (b == 0.0) return std::nullopt;
      const double q = float_divmod(std::fabs(a), std::fabs(b)).first;
      return out(std::signbit(a) != std::signbit(b) ? -q : q);
    }
    case Ops::FLOORDIV: return b == 0.0 ? std::nullopt : out(float_divmod(a, b).first);
    case Ops::FLOORMOD: return b == 0.0 ? std::nullopt : out(float_divmod(a, b).second);
    default: return std::nullopt;  // bitwise ops and shifts have no float meaning
  }
}

std::optional<Arg> compare(Ops op, const Arg& x, const Arg& y) {
  if (x.kind() == Arg::Kind::Float || y.kind() == Arg::Kind::Float) {
    const double a = x.to_double(), b = y.to_double();  // NaN: only != holds
    return Arg::boolean(op == Ops::CMPLT ? a < b : op == Ops::CMPNE ? a != b : a == b);
  }
  const i128 a = *as_int(x), b = *as_int(y);
  return Arg::boolean(op == Ops::CMPLT ? a < b : op == Ops::CMPNE ? a != b : a == b);
}

size_t arity(Ops op) {
  if (group::Unary.contains(op) || op == Ops::CAST || op == Ops::BITCAST) return 1;
  if (group::Binary.contains(op)) return 2;
  if (group::Ternary.contains(op)) return 3;
  return 0;
}

}  // namespace

std::optional<Arg> fold(Ops op, DType dtype, std::span<const Arg> operands, DType src_dtype) {
  const size_t n = arity(op);
  if (n == 0 || operands.size() != n) return std::nullopt;
  for (const Arg& a : operands)
    if (!a.is_number()) return std::nullopt;
  const DType dt = dtype.scalar();
  if (op == Ops::CAST) return num::cast_value(dt, operands[0]);
  if (op == Ops::BITCAST) return num::bitcast_value(dt, operands[0], src_dtype);
  if (group::Comparison.contains(op)) return compare(op, operands[0], operands[1]);
  if (op == Ops::WHERE) {
    const bool cond = operands[0].to_double() != 0.0;
    const Arg& chosen = operands[cond ? 1 : 2];
    // The chosen value is already of dt; the cast only normalises its kind (an int given for a float dtype).
    return num::cast_value(dt, chosen);
  }
  if (dt.is_float()) return fold_float(op, dt, operands);
  if (dt.is_int() || dt.is_bool()) return fold_int(op, dt, operands);
  return std::nullopt;
}

}  // namespace th
