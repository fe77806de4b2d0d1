// CAST and BITCAST of constant values, with C's conversion semantics and exact float rounding.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "symbolic/numeric.h"

namespace th::num {

namespace {

// Significand bits (with the implicit one) of each float format: what an integer rounds to.
int precision(Scalar s) {
  switch (s) {
    case Scalar::FLOAT: return 24;
    case Scalar::HALF: return 11;
    case Scalar::BFLOAT16: return 8;
    case Scalar::FP8E4M3:
    case Scalar::FP8E4M3FNUZ: return 4;
    case Scalar::FP8E5M2:
    case Scalar::FP8E5M2FNUZ: return 3;
    default: return 53;
  }
}

int bit_length(u128 m) {
  const auto hi = static_cast<uint64_t>(m >> 64);
  if (hi) return 128 - std::countl_zero(hi);
  return 64 - std::countl_zero(static_cast<uint64_t>(m));
}

uint64_t low_mask(int bits) { return bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1; }

// IEEE binary16 encoding of a value already rounded to half precision.
uint64_t encode_half(double v) {
  const uint64_t sign = std::signbit(v) ? 0x8000 : 0;
  if (std::isnan(v)) return 0x7e00;
  const double f = std::fabs(v);
  if (std::isinf(f)) return sign | 0x7c00;
  if (f < 0x1p-14) return sign | static_cast<uint64_t>(f * 0x1p24);  // subnormal: an exact multiple of 2^-24
  int e;
  std::frexp(f, &e);  // f = m * 2^e, m in [0.5, 1)
  const int exp = e - 1;
  const auto mant = static_cast<uint64_t>(std::ldexp(f, -exp) * 1024.0) - 1024;
  return sign | static_cast<uint64_t>(exp + 15) << 10 | mant;
}

double decode_half(uint64_t b) {
  const double sign = (b & 0x8000) ? -1.0 : 1.0;
  const int exp = static_cast<int>((b >> 10) & 0x1f);
  const auto mant = static_cast<double>(b & 0x3ff);
  if (exp == 31) return mant != 0 ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  if (exp == 0) return sign * std::ldexp(mant, -24);
  return sign * std::ldexp(1024.0 + mant, exp - 25);
}

// The bit pattern of a value of scalar `s` (nullopt for formats without a supported encoding).
std::optional<uint64_t> encode(Scalar s, const Arg& v) {
  const DType dt = DType::of(s);
  if (dt.is_bool()) return v.kind() == Arg::Kind::Float ? std::nullopt : std::optional<uint64_t>(v.to_double() != 0);
  if (dt.is_int()) {
    if (v.kind() == Arg::Kind::Float) return std::nullopt;
    const i128 i = v.kind() == Arg::Kind::Bool ? i128{v.as_bool()} : v.as_int();
    return static_cast<uint64_t>(static_cast<u128>(i)) & low_mask(dt.bitsize());
  }
  const double f = round_float(s, v.to_double());
  switch (s) {
    case Scalar::FLOAT: return std::bit_cast<uint32_t>(static_cast<float>(f));
    case Scalar::DOUBLE: return std::bit_cast<uint64_t>(f);
    case Scalar::HALF: return encode_half(f);
    case Scalar::BFLOAT16: return std::bit_cast<uint32_t>(static_cast<float>(f)) >> 16;
    default: return std::nullopt;  // fp8 formats: their NaN/inf encodings differ per format; not folded
  }
}

std::optional<Arg> decode(Scalar s, uint64_t b) {
  const DType dt = DType::of(s);
  if (dt.is_bool()) return b <= 1 ? std::optional<Arg>(Arg::boolean(b == 1)) : std::nullopt;
  if (dt.is_int()) return Arg::integer(wrap_int(s, static_cast<i128>(b)));
  switch (s) {
    case Scalar::FLOAT: return Arg::floating(std::bit_cast<float>(static_cast<uint32_t>(b)));
    case Scalar::DOUBLE: return Arg::floating(std::bit_cast<double>(b));
    case Scalar::HALF: return Arg::floating(decode_half(b));
    case Scalar::BFLOAT16: return Arg::floating(std::bit_cast<float>(static_cast<uint32_t>(b << 16)));
    default: return std::nullopt;
  }
}

// The source scalar of a BITCAST given without one: any int or bool value has one bit pattern per size,
// a float value needs the format, which is only unambiguous for 4 and 8 bytes.
std::optional<Scalar> infer_source(const Arg& v, int bytes) {
  if (v.kind() == Arg::Kind::Float) {
    if (bytes == 4) return Scalar::FLOAT;
    if (bytes == 8) return Scalar::DOUBLE;
    return std::nullopt;
  }
  switch (bytes) {
    case 1: return v.kind() == Arg::Kind::Bool ? Scalar::BOOL : Scalar::UINT8;
    case 2: return Scalar::UINT16;
    case 4: return Scalar::UINT32;
    case 8: return Scalar::UINT64;
    default: return std::nullopt;
  }
}

}  // namespace

double int_to_float(Scalar s, i128 v) {
  if (v == 0) return 0.0;
  const bool negative = v < 0;
  const u128 m = negative ? u128{0} - static_cast<u128>(v) : static_cast<u128>(v);
  const int p = precision(s);
  const int len = bit_length(m);
  double r;
  if (len <= p) {
    r = static_cast<double>(static_cast<uint64_t>(m));  // below 2^53: exact
  } else {
    // Round to p significant bits in the integer domain, so the only rounding is this one.
    const int shift = len - p;
    u128 q = m >> shift;
    const u128 rem = m & ((u128{1} << shift) - 1);
    const u128 half = u128{1} << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
    r = std::ldexp(static_cast<double>(static_cast<uint64_t>(q)), shift);
  }
  // round_float is exact here except past the format's largest finite (inf, or saturation for fp8).
  return round_float(s, negative ? -r : r);
}

std::optional<Arg> cast_value(DType to, const Arg& v) {
  if (!v.is_number()) return std::nullopt;
  const DType t = to.scalar();
  const Scalar s = t.scalar_kind();
  if (t.is_bool()) {
    if (v.kind() == Arg::Kind::Bool) return v;
    if (v.kind() == Arg::Kind::Int) return Arg::boolean(v.as_int() != 0);
    return Arg::boolean(v.as_float() != 0.0);  // NaN is true, as in C
  }
  if (t.is_int()) {
    if (v.kind() == Arg::Kind::Bool) return Arg::integer(v.as_bool() ? 1 : 0);
    if (v.kind() == Arg::Kind::Int) return Arg::integer(wrap_int(s, v.as_int()));
    // Float to int: truncation; NaN, inf and values past the dtype are undefined behaviour in C, so no value.
    const double f = v.as_float();
    if (!std::isfinite(f)) return std::nullopt;
    const auto i = trunc_saturate(f);
    if (!i || *i >= (i128{1} << 126) || *i <= -(i128{1} << 126)) return std::nullopt;
    if (s != Scalar::WEAKINT && !fits(t, *i)) return std::nullopt;
    return Arg::integer(*i);
  }
  if (t.is_float()) {
    if (v.kind() == Arg::Kind::Bool) return Arg::floating(v.as_bool() ? 1.0 : 0.0);
    if (v.kind() == Arg::Kind::Int) return Arg::floating(int_to_float(s, v.as_int()));
    return Arg::floating(round_float(s, v.as_float()));
  }
  return std::nullopt;
}

std::optional<Arg> bitcast_value(DType to, const Arg& v, DType from) {
  if (!v.is_number()) return std::nullopt;
  const DType t = to.scalar();
  if (t.is_void() || t.is_weak()) return std::nullopt;
  const int bytes = t.is_bool() ? 1 : t.bitsize() / 8;
  Scalar src;
  if (from.is_void()) {
    const auto inferred = infer_source(v, bytes);
    if (!inferred) return std::nullopt;
    src = *inferred;
  } else {
    const DType f = from.scalar();
    if (f.is_void() || f.is_weak() || (f.is_bool() ? 1 : f.bitsize() / 8) != bytes) return std::nullopt;
    src = f.scalar_kind();
  }
  const auto bits = encode(src, v);
  if (!bits) return std::nullopt;
  return decode(t.scalar_kind(), *bits);
}

}  // namespace th::num
