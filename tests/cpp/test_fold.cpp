// Constant folding with exact dtype semantics, no Python involved.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "check.h"
#include "tinyhybrid/const.h"
#include "tinyhybrid/symbolic.h"

using namespace th;

namespace {

const double kNan = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

DType dt(Scalar s) { return DType::of(s); }
Arg I(i128 v) { return Arg::integer(v); }
Arg F(double v) { return Arg::floating(v); }
Arg B(bool v) { return Arg::boolean(v); }

i128 ival(std::optional<Arg> a) {
  CHECK(a.has_value());
  CHECK(a->kind() == Arg::Kind::Int);
  return a->as_int();
}
double fval(std::optional<Arg> a) {
  CHECK(a.has_value());
  CHECK(a->kind() == Arg::Kind::Float);
  return a->as_float();
}
bool bval(std::optional<Arg> a) {
  CHECK(a.has_value());
  CHECK(a->kind() == Arg::Kind::Bool);
  return a->as_bool();
}
// Bit-exact float comparison: tells -0.0 from 0.0; NaN equals NaN.
bool same(double a, double b) { return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof a) == 0; }

void test_wraparound() {
  CHECK(ival(fold(Ops::ADD, dt(Scalar::INT8), {I(100), I(100)})) == -56);
  CHECK(ival(fold(Ops::ADD, dt(Scalar::UINT8), {I(200), I(100)})) == 44);
  CHECK(ival(fold(Ops::SUB, dt(Scalar::UINT8), {I(0), I(1)})) == 255);
  CHECK(ival(fold(Ops::MUL, dt(Scalar::INT16), {I(300), I(300)})) == 90000 - 65536);
  CHECK(ival(fold(Ops::ADD, dt(Scalar::UINT16), {I(65535), I(2)})) == 1);
  CHECK(ival(fold(Ops::ADD, DType::int32(), {I(INT32_MAX), I(1)})) == INT32_MIN);
  CHECK(ival(fold(Ops::SUB, DType::uint32(), {I(0), I(1)})) == UINT32_MAX);
  CHECK(ival(fold(Ops::ADD, DType::int64(), {I(INT64_MAX), I(1)})) == INT64_MIN);
  CHECK(ival(fold(Ops::SUB, dt(Scalar::UINT64), {I(0), I(1)})) == static_cast<i128>(UINT64_MAX));
  // uint64 * uint64 overflows even i128 before wrapping; the result is still exact modulo 2^64.
  CHECK(ival(fold(Ops::MUL, dt(Scalar::UINT64), {I(UINT64_MAX), I(UINT64_MAX)})) == 1);
  CHECK(ival(fold(Ops::NEG, dt(Scalar::INT8), {I(-128)})) == -128);
  CHECK(ival(fold(Ops::NEG, dt(Scalar::UINT8), {I(1)})) == 255);
  CHECK(ival(fold(Ops::MULACC, dt(Scalar::INT8), {I(16), I(8), I(1)})) == -127);
  // weakint is unbounded up to i128, and gives up past it.
  const i128 big = i128{1} << 100;
  CHECK(ival(fold(Ops::ADD, DType::weakint(), {I(big), I(big)})) == big * 2);
  CHECK(!fold(Ops::MUL, DType::weakint(), {I(big), I(big)}));
  CHECK(!fold(Ops::ADD, DType::weakint(), {I(big << 26), I(big << 26)}));
  // Operands outside the dtype are taken as the dtype would hold them.
  CHECK(ival(fold(Ops::ADD, dt(Scalar::INT8), {I(256 + 1), I(0)})) == 1);
}

void test_division() {
  struct Case {
    i128 a, b, cdiv, cmod, fdiv, fmod;
  };
  const Case cases[] = {{7, 2, 3, 1, 3, 1}, {-7, 2, -3, -1, -4, 1}, {7, -2, -3, 1, -4, -1}, {-7, -2, 3, -1, 3, -1},
                        {6, 3, 2, 0, 2, 0},  {-6, 3, -2, 0, -2, 0}, {0, -5, 0, 0, 0, 0}};
  for (const Case& c : cases) {
    CHECK(ival(fold(Ops::CDIV, DType::int32(), {I(c.a), I(c.b)})) == c.cdiv);
    CHECK(ival(fold(Ops::CMOD, DType::int32(), {I(c.a), I(c.b)})) == c.cmod);
    CHECK(ival(fold(Ops::FLOORDIV, DType::int32(), {I(c.a), I(c.b)})) == c.fdiv);
    CHECK(ival(fold(Ops::FLOORMOD, DType::int32(), {I(c.a), I(c.b)})) == c.fmod);
    CHECK(ival(fold(Ops::FLOORDIV, DType::weakint(), {I(c.a), I(c.b)})) == c.fdiv);
  }
  for (Ops op : {Ops::CDIV, Ops::CMOD, Ops::FLOORDIV, Ops::FLOORMOD}) {
    CHECK(!fold(op, DType::int32(), {I(5), I(0)}));
    CHECK(!fold(op, DType::float32(), {F(5), F(0)}));
  }
  // INT_MIN / -1 wraps back to INT_MIN in a fixed width; in weakint only i128's own minimum overflows.
  CHECK(ival(fold(Ops::CDIV, DType::int32(), {I(INT32_MIN), I(-1)})) == INT32_MIN);
  CHECK(ival(fold(Ops::CMOD, DType::int32(), {I(INT32_MIN), I(-1)})) == 0);
  CHECK(ival(fold(Ops::FLOORDIV, DType::weakint(), {I(INT64_MIN), I(-1)})) == -static_cast<i128>(INT64_MIN));
  // Unsigned operands are the wrapped (non-negative) values.
  CHECK(ival(fold(Ops::CDIV, DType::uint32(), {I(-1), I(2)})) == UINT32_MAX / 2);
  // Floats: Python's floor division and remainder, C's fmod.
  CHECK(fval(fold(Ops::FLOORDIV, DType::float64(), {F(-7.5), F(2)})) == -4.0);
  CHECK(fval(fold(Ops::FLOORMOD, DType::float64(), {F(-7.5), F(2)})) == 0.5);
  CHECK(fval(fold(Ops::CMOD, DType::float64(), {F(-7.5), F(2)})) == -1.5);
  CHECK(fval(fold(Ops::CDIV, DType::float64(), {F(-7.5), F(2)})) == -3.0);
}

void test_shifts_and_bits() {
  CHECK(ival(fold(Ops::SHL, dt(Scalar::INT8), {I(1), I(7)})) == -128);
  CHECK(ival(fold(Ops::SHL, dt(Scalar::UINT8), {I(0xff), I(4)})) == 0xf0);
  CHECK(ival(fold(Ops::SHR, dt(Scalar::UINT8), {I(255), I(3)})) == 31);
  CHECK(ival(fold(Ops::SHR, dt(Scalar::INT8), {I(-128), I(1)})) == -64);  // arithmetic for signed
  CHECK(!fold(Ops::SHL, dt(Scalar::INT8), {I(1), I(8)}));
  CHECK(!fold(Ops::SHR, DType::int32(), {I(1), I(-1)}));
  CHECK(ival(fold(Ops::SHL, DType::int64(), {I(1), I(63)})) == INT64_MIN);
  CHECK(ival(fold(Ops::SHL, DType::weakint(), {I(1), I(100)})) == (i128{1} << 100));
  CHECK(!fold(Ops::SHL, DType::weakint(), {I(3), I(126)}));
  CHECK(ival(fold(Ops::AND, DType::int32(), {I(-4), I(7)})) == 4);
  CHECK(ival(fold(Ops::OR, dt(Scalar::UINT8), {I(0xf0), I(0x0f)})) == 0xff);
  CHECK(ival(fold(Ops::XOR, dt(Scalar::INT8), {I(-1), I(0x0f)})) == -16);
  CHECK(bval(fold(Ops::XOR, DType::bool_(), {B(true), B(true)})) == false);
  CHECK(bval(fold(Ops::AND, DType::bool_(), {B(true), B(false)})) == false);
  CHECK(bval(fold(Ops::OR, DType::bool_(), {B(true), B(false)})) == true);
  // bool arithmetic is on 0/1, kept as `!= 0`
  CHECK(bval(fold(Ops::ADD, DType::bool_(), {B(true), B(true)})) == true);
  CHECK(bval(fold(Ops::MUL, DType::bool_(), {B(true), B(false)})) == false);
  CHECK(!fold(Ops::AND, DType::float32(), {F(1), F(1)}));
}

void test_compare_where_pow() {
  CHECK(bval(fold(Ops::CMPLT, DType::bool_(), {I(-1), I(0)})));
  CHECK(!bval(fold(Ops::CMPNE, DType::bool_(), {I(3), I(3)})));
  CHECK(bval(fold(Ops::CMPEQ, DType::bool_(), {I(3), I(3)})));
  CHECK(!bval(fold(Ops::CMPLT, DType::bool_(), {F(kNan), F(1)})));
  CHECK(!bval(fold(Ops::CMPLT, DType::bool_(), {F(1), F(kNan)})));
  CHECK(bval(fold(Ops::CMPNE, DType::bool_(), {F(kNan), F(kNan)})));
  CHECK(!bval(fold(Ops::CMPEQ, DType::bool_(), {F(kNan), F(kNan)})));
  CHECK(bval(fold(Ops::CMPEQ, DType::bool_(), {F(-0.0), F(0.0)})));
  CHECK(bval(fold(Ops::CMPLT, DType::bool_(), {B(false), B(true)})));
  CHECK(ival(fold(Ops::WHERE, DType::int32(), {B(true), I(1), I(2)})) == 1);
  CHECK(fval(fold(Ops::WHERE, DType::float32(), {B(false), F(1), F(2.5)})) == 2.5);
  CHECK(ival(fold(Ops::POW, DType::int32(), {I(3), I(4)})) == 81);
  CHECK(ival(fold(Ops::POW, dt(Scalar::INT8), {I(2), I(7)})) == -128);
  CHECK(ival(fold(Ops::POW, DType::int32(), {I(0), I(0)})) == 1);
  CHECK(!fold(Ops::POW, DType::int32(), {I(2), I(-1)}));
  CHECK(fval(fold(Ops::POW, DType::float32(), {F(2), F(0.5)})) == static_cast<double>(std::sqrt(2.0f)));
  CHECK(!fold(Ops::FDIV, DType::int32(), {I(1), I(2)}));
  CHECK(!fold(Ops::ADD, DType::int32(), {I(1)}));  // wrong arity
  CHECK(!fold(Ops::LOAD, DType::int32(), {I(1)}));
}

void test_floats() {
  const DType f32 = DType::float32(), f64 = DType::float64(), half = dt(Scalar::HALF);
  CHECK(fval(fold(Ops::ADD, f32, {F(0.1f), F(0.2f)})) == static_cast<double>(0.1f + 0.2f));
  CHECK(fval(fold(Ops::MUL, f32, {F(1.0000001f), F(3.3f)})) == static_cast<double>(1.0000001f * 3.3f));
  CHECK(fval(fold(Ops::FDIV, f32, {F(1), F(3)})) == static_cast<double>(1.0f / 3.0f));
  // -0.0 survives where IEEE keeps it, and not where it does not.
  CHECK(same(fval(fold(Ops::MUL, f32, {F(0.0), F(-1)})), -0.0));
  CHECK(same(fval(fold(Ops::ADD, f32, {F(-0.0), F(0.0)})), 0.0));
  CHECK(same(fval(fold(Ops::ADD, f64, {F(-0.0), F(-0.0)})), -0.0));
  CHECK(same(fval(fold(Ops::NEG, f32, {F(0.0)})), -0.0));
  CHECK(same(fval(fold(Ops::TRUNC, f32, {F(-0.5)})), -0.0));
  CHECK(same(fval(fold(Ops::FDIV, f32, {F(1), F(0.0)})), kInf));
  CHECK(same(fval(fold(Ops::FDIV, f32, {F(1), F(-0.0)})), -kInf));
  CHECK(std::isnan(fval(fold(Ops::FDIV, f32, {F(0), F(0)}))));
  CHECK(same(fval(fold(Ops::RECIPROCAL, f32, {F(-0.0)})), -kInf));
  CHECK(std::isnan(fval(fold(Ops::SQRT, f32, {F(-1)}))));
  CHECK(same(fval(fold(Ops::SQRT, f32, {F(-0.0)})), -0.0));
  CHECK(same(fval(fold(Ops::LOG2, f32, {F(0)})), -kInf));
  CHECK(std::isnan(fval(fold(Ops::LOG2, f32, {F(-1)}))));
  CHECK(fval(fold(Ops::EXP2, f32, {F(10)})) == 1024.0);
  CHECK(same(fval(fold(Ops::EXP2, f32, {F(1000)})), kInf));
  CHECK(std::isnan(fval(fold(Ops::SIN, f32, {F(kInf)}))));
  CHECK(fval(fold(Ops::TRUNC, f32, {F(-2.5)})) == -2.0);
  CHECK(same(fval(fold(Ops::ADD, f32, {F(3e38), F(3e38)})), kInf));  // overflows float32, not double
  // MAX propagates NaN and prefers +0.0, in either operand order.
  CHECK(std::isnan(fval(fold(Ops::MAX, f32, {F(kNan), F(1)}))));
  CHECK(std::isnan(fval(fold(Ops::MAX, f32, {F(1), F(kNan)}))));
  CHECK(same(fval(fold(Ops::MAX, f32, {F(-0.0), F(0.0)})), 0.0));
  CHECK(same(fval(fold(Ops::MAX, f32, {F(0.0), F(-0.0)})), 0.0));
  CHECK(fval(fold(Ops::MAX, f32, {F(-kInf), F(-3)})) == -3.0);
  // MULACC rounds the product before the sum, as a*b+c in the dtype does.
  const float a = 1.0f + 0x1p-12f, c = -1.0f;
  CHECK(fval(fold(Ops::MULACC, f32, {F(a), F(a), F(c)})) == static_cast<double>(a * a + c));
  // half rounds after each op: ties to even, and past 65504 to inf.
  CHECK(fval(fold(Ops::ADD, half, {F(1), F(0x1p-11)})) == 1.0);
  CHECK(fval(fold(Ops::ADD, half, {F(1), F(3 * 0x1p-11)})) == 1.0 + 0x1p-9);
  CHECK(same(fval(fold(Ops::ADD, half, {F(65504), F(16)})), kInf));
  CHECK(fval(fold(Ops::ADD, half, {F(65504), F(15)})) == 65504.0);
  CHECK(fval(fold(Ops::MUL, dt(Scalar::BFLOAT16), {F(1.0 + 0x1p-7), F(1.0 + 0x1p-7)})) == 1.0 + 0x1p-6);
  // fp8 e4m3 has no inf: it saturates.
  CHECK(fval(fold(Ops::MUL, dt(Scalar::FP8E4M3), {F(448), F(2)})) == 448.0);
}

void test_casts() {
  const DType f32 = DType::float32();
  CHECK(fval(fold(Ops::CAST, f32, {I(16777217)})) == 16777216.0);
  // 2^60 + 2^36 + 1 is just above the midpoint of two floats; through double it would look like a tie.
  const i128 v = (i128{1} << 60) + (i128{1} << 36) + 1;
  CHECK(fval(fold(Ops::CAST, f32, {I(v)})) == std::ldexp(1.0, 60) + std::ldexp(1.0, 37));
  CHECK(fval(fold(Ops::CAST, f32, {I(-v)})) == -(std::ldexp(1.0, 60) + std::ldexp(1.0, 37)));
  CHECK(fval(fold(Ops::CAST, DType::float64(), {I(UINT64_MAX)})) == std::ldexp(1.0, 64));
  CHECK(same(fval(fold(Ops::CAST, dt(Scalar::HALF), {I(70000)})), kInf));
  CHECK(ival(fold(Ops::CAST, DType::int32(), {F(2.7)})) == 2);
  CHECK(ival(fold(Ops::CAST, DType::int32(), {F(-2.7)})) == -2);
  CHECK(ival(fold(Ops::CAST, dt(Scalar::UINT8), {F(-0.5)})) == 0);
  CHECK(!fold(Ops::CAST, dt(Scalar::UINT8), {F(-1.0)}));
  CHECK(!fold(Ops::CAST, dt(Scalar::INT8), {F(300.0)}));
  CHECK(ival(fold(Ops::CAST, dt(Scalar::INT8), {F(127.9)})) == 127);
  CHECK(!fold(Ops::CAST, DType::int32(), {F(kNan)}));
  CHECK(!fold(Ops::CAST, DType::int64(), {F(kInf)}));
  CHECK(!fold(Ops::CAST, DType::int64(), {F(0x1p63)}));
  CHECK(ival(fold(Ops::CAST, dt(Scalar::UINT64), {F(0x1p63)})) == (i128{1} << 63));
  CHECK(ival(fold(Ops::CAST, DType::weakint(), {F(1e30)})) == static_cast<i128>(1e30));
  CHECK(ival(fold(Ops::CAST, dt(Scalar::UINT8), {I(300)})) == 44);
  CHECK(ival(fold(Ops::CAST, DType::uint32(), {I(-1)})) == UINT32_MAX);
  CHECK(ival(fold(Ops::CAST, dt(Scalar::INT8), {I(200)})) == -56);
  CHECK(bval(fold(Ops::CAST, DType::bool_(), {F(kNan)})));
  CHECK(!bval(fold(Ops::CAST, DType::bool_(), {F(-0.0)})));
  CHECK(bval(fold(Ops::CAST, DType::bool_(), {I(-5)})));
  CHECK(ival(fold(Ops::CAST, DType::int32(), {B(true)})) == 1);
  CHECK(fval(fold(Ops::CAST, f32, {B(true)})) == 1.0);
  CHECK(fval(fold(Ops::CAST, f32, {F(0.1)})) == static_cast<double>(0.1f));
  CHECK(same(fval(fold(Ops::CAST, dt(Scalar::HALF), {F(-0.0)})), -0.0));
}

void test_bitcasts() {
  const DType f32 = DType::float32(), i32 = DType::int32(), u32 = DType::uint32();
  CHECK(ival(fold(Ops::BITCAST, i32, {F(1.0)}, f32)) == 0x3f800000);
  CHECK(ival(fold(Ops::BITCAST, i32, {F(-2.0)}, f32)) == static_cast<int32_t>(0xc0000000u));
  CHECK(fval(fold(Ops::BITCAST, f32, {I(0x7f800000)}, u32)) == kInf);
  CHECK(std::isnan(fval(fold(Ops::BITCAST, f32, {I(-1)}, i32))));
  CHECK(ival(fold(Ops::BITCAST, DType::int64(), {F(-0.0)}, DType::float64())) == INT64_MIN);
  CHECK(fval(fold(Ops::BITCAST, DType::float64(), {I(0x3ff0000000000000)}, DType::int64())) == 1.0);
  CHECK(ival(fold(Ops::BITCAST, dt(Scalar::INT16), {F(1.0)}, dt(Scalar::HALF))) == 0x3c00);
  CHECK(ival(fold(Ops::BITCAST, dt(Scalar::UINT16), {F(-0x1p-24)}, dt(Scalar::HALF))) == 0x8001);
  CHECK(ival(fold(Ops::BITCAST, dt(Scalar::UINT16), {F(65504)}, dt(Scalar::HALF))) == 0x7bff);
  CHECK(fval(fold(Ops::BITCAST, dt(Scalar::HALF), {I(0x3555)}, dt(Scalar::UINT16))) == 0x1.554p-2);
  CHECK(std::isnan(fval(fold(Ops::BITCAST, dt(Scalar::HALF), {I(-1)}, dt(Scalar::INT16)))));
  CHECK(ival(fold(Ops::BITCAST, dt(Scalar::UINT16), {F(1.0)}, dt(Scalar::BFLOAT16))) == 0x3f80);
  CHECK(fval(fold(Ops::BITCAST, dt(Scalar::BFLOAT16), {I(0xc000)}, dt(Scalar::UINT16))) == -2.0);
  CHECK(ival(fold(Ops::BITCAST, u32, {I(-1)}, i32)) == UINT32_MAX);
  CHECK(!fold(Ops::BITCAST, i32, {I(1)}, DType::int64()));  // sizes differ
  // Without the source dtype: ints and 4/8-byte floats are unambiguous, 2-byte floats are not.
  CHECK(ival(fold(Ops::BITCAST, i32, {F(1.0)})) == 0x3f800000);
  CHECK(fval(fold(Ops::BITCAST, f32, {I(0x40000000)})) == 2.0);
  CHECK(!fold(Ops::BITCAST, dt(Scalar::INT16), {F(1.0)}));
}

void test_threefry() {
  // Known answers of Threefry-2x32-20 (Random123): counter and key words packed low word first.
  const DType u64 = dt(Scalar::UINT64);
  CHECK(ival(fold(Ops::THREEFRY, u64, {I(0), I(0)})) == static_cast<i128>(0x99ba4efe6b200159ull));
  CHECK(ival(fold(Ops::THREEFRY, u64, {I(0x85a308d3243f6a88ull), I(0x0370734413198a2eull)})) ==
        static_cast<i128>(0x483df7a0c4923a9cull));
  CHECK(ival(fold(Ops::THREEFRY, u64, {I(0xffffffffffffffffull), I(0xffffffffffffffffull)})) ==
        static_cast<i128>(0xbb002be71cb996fcull));
}

}  // namespace

int main() {
  test_wraparound();
  test_division();
  test_shifts_and_bits();
  test_compare_where_pow();
  test_floats();
  test_casts();
  test_bitcasts();
  test_threefry();
  std::cout << "test_fold: ok\n";
  return 0;
}
