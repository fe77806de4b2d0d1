// Value ranges (vmin/vmax) and evaluation, no Python involved.
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "check.h"
#include "tinyhybrid/const.h"
#include "tinyhybrid/core.h"
#include "tinyhybrid/symbolic.h"

using namespace th;

namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kNan = std::numeric_limits<double>::quiet_NaN();

UOpRef ci(i128 v, DType d = DType::int32()) { return UOp::const_int(d, v); }
UOpRef cf(double v, DType d = DType::float32()) { return UOp::const_float(d, v); }
UOpRef var(const char* name, i128 lo, i128 hi, DType d = DType::int32()) { return UOp::variable(name, lo, hi, d); }
UOpRef fvar(const char* name, double lo, double hi, DType d = DType::float32()) {
  return UOp::make(Ops::DEFINE_VAR, d, {}, Arg::tuple({Arg::string(name), Arg::floating(lo), Arg::floating(hi)}));
}
UOpRef op2(Ops op, const UOpRef& a, const UOpRef& b) { return alu(op, {a, b}); }

i128 lo(const UOpRef& u) { return facts_of(u.get()).vmin.as_int(); }
i128 hi(const UOpRef& u) { return facts_of(u.get()).vmax.as_int(); }
double flo(const UOpRef& u) { return facts_of(u.get()).vmin.as_float(); }
double fhi(const UOpRef& u) { return facts_of(u.get()).vmax.as_float(); }
bool blo(const UOpRef& u) { return facts_of(u.get()).vmin.as_bool(); }
bool bhi(const UOpRef& u) { return facts_of(u.get()).vmax.as_bool(); }
bool is_full(const UOpRef& u) {
  const auto [a, b] = dtype_range(u->dtype());
  return facts_of(u.get()).vmin == a && facts_of(u.get()).vmax == b;
}

// Every assignment of the variables (small ranges): the value lies in [vmin, vmax], and the bounds are reached
// when `tight` (division by zero and other undefined points are skipped).
void check_exhaustive(const UOpRef& e, const std::vector<std::pair<UOpRef, std::pair<i128, i128>>>& vars, bool tight) {
  const i128 vmin = lo(e), vmax = hi(e);
  bool seen_min = false, seen_max = false;
  std::unordered_map<std::string, Arg> vals;
  std::function<void(size_t)> walk = [&](size_t i) {
    if (i == vars.size()) {
      try {
        const i128 v = evaluate(e, vals).as_int();
        if (v < vmin || v > vmax)
          th_check::fail(__FILE__, __LINE__, render(e) + " = " + i128_to_string(v) + " outside [" + i128_to_string(vmin) +
                                                 ", " + i128_to_string(vmax) + "]");
        seen_min |= v == vmin;
        seen_max |= v == vmax;
      } catch (const UOpValueError&) {
      }
      return;
    }
    const auto& [node, bounds] = vars[i];
    for (i128 x = bounds.first; x <= bounds.second; ++x) {
      vals[node->arg().as_tuple()[0].as_str()] = Arg::integer(x);
      walk(i + 1);
    }
  };
  walk(0);
  if (tight && !(seen_min && seen_max))
    th_check::fail(__FILE__, __LINE__, render(e) + ": bounds [" + i128_to_string(vmin) + ", " + i128_to_string(vmax) + "] not reached");
}

void test_leaves() {
  CHECK(lo(ci(7)) == 7 && hi(ci(7)) == 7);
  CHECK(blo(UOp::const_bool(true)) && bhi(UOp::const_bool(true)));
  CHECK(lo(var("x", -3, 9)) == -3 && hi(var("x", -3, 9)) == 9);
  // Variable bounds past the dtype are cut to it.
  CHECK(lo(var("c", -1000, 1000, DType::of(Scalar::INT8))) == -128);
  const UOpRef x = var("x", 2, 5);
  const UOpRef bound = UOp::make(Ops::BIND, DType::int32(), {x, ci(3)});
  CHECK(lo(bound) == 2 && hi(bound) == 5);
  const UOpRef r = UOp::make(Ops::RANGE, DType::int32(), {ci(10)}, Arg::integer(0));
  CHECK(lo(r) == 0 && hi(r) == 9);
  const UOpRef rv = UOp::make(Ops::RANGE, DType::int32(), {op2(Ops::ADD, x, ci(1))}, Arg::integer(1));
  CHECK(lo(rv) == 0 && hi(rv) == 5);
  const UOpRef sp = UOp::make(Ops::SPECIAL, DType::int32(), {}, Arg::string("gidx0"));
  CHECK(is_full(sp));
  CHECK(lo(UOp::make(Ops::SPECIAL, DType::int32(), {ci(4)}, Arg::string("lidx0"))) == 0);
  CHECK(std::isinf(flo(cf(kNan))) && flo(cf(kNan)) < 0 && fhi(cf(kNan)) == kInf);  // NaN: the full range
  CHECK(flo(cf(1.5)) == 1.5);
  CHECK(facts_of(UOp::make(Ops::SINK, DType::void_(), {x}).get()).vmin.is_none());
}

void test_arithmetic() {
  const UOpRef x = var("x", 0, 10), y = var("y", -3, 5), z = var("z", 1, 3);
  CHECK(lo(op2(Ops::ADD, x, y)) == -3 && hi(op2(Ops::ADD, x, y)) == 15);
  CHECK(lo(op2(Ops::MUL, x, y)) == -30 && hi(op2(Ops::MUL, x, y)) == 50);
  CHECK(lo(op2(Ops::SUB, x, y)) == -5 && hi(op2(Ops::SUB, x, y)) == 13);
  CHECK(lo(op2(Ops::MAX, x, y)) == 0 && hi(op2(Ops::MAX, x, y)) == 10);
  CHECK(lo(alu(Ops::NEG, {y})) == -5 && hi(alu(Ops::NEG, {y})) == 3);
  const UOpRef e = op2(Ops::FLOORDIV, op2(Ops::ADD, op2(Ops::MUL, x, ci(4)), op2(Ops::MUL, y, ci(8))), op2(Ops::MUL, z, ci(2)));
  check_exhaustive(e, {{x, {0, 10}}, {y, {-3, 5}}, {z, {1, 3}}}, true);
  const UOpRef s = var("s", -7, 7), d = var("d", -3, -1);
  for (Ops op : {Ops::CDIV, Ops::CMOD, Ops::FLOORDIV, Ops::FLOORMOD}) {
    for (const UOpRef& div : {ci(3), ci(-3), z, d}) check_exhaustive(op2(op, s, div), {{s, {-7, 7}}, {z, {1, 3}}, {d, {-3, -1}}}, false);
    check_exhaustive(op2(op, x, ci(4)), {{x, {0, 10}}}, true);
    const UOpRef x3 = var("x3", 0, 3);
    check_exhaustive(op2(op, op2(Ops::ADD, x3, ci(8)), ci(4)), {{x3, {0, 3}}}, true);  // one quotient: exact
    check_exhaustive(op2(op, op2(Ops::ADD, x3, ci(-11)), ci(4)), {{x3, {0, 3}}}, true);
    check_exhaustive(op2(op, op2(Ops::ADD, x3, ci(-11)), ci(-4)), {{x3, {0, 3}}}, true);
    // A divisor range with 0 in it: the dtype's range.
    CHECK(is_full(op2(op, x, y)));
  }
  CHECK(lo(op2(Ops::FLOORMOD, s, ci(4))) == 0 && hi(op2(Ops::FLOORMOD, s, ci(4))) == 3);
  CHECK(lo(op2(Ops::CMOD, s, ci(4))) == -3 && hi(op2(Ops::CMOD, s, ci(4))) == 3);
  CHECK(lo(op2(Ops::CDIV, s, ci(2))) == -3 && hi(op2(Ops::CDIV, s, ci(2))) == 3);
  CHECK(lo(op2(Ops::FLOORDIV, s, ci(2))) == -4 && hi(op2(Ops::FLOORDIV, s, ci(2))) == 3);
  // Shifts, bitwise ops.
  check_exhaustive(op2(Ops::SHL, x, ci(2)), {{x, {0, 10}}}, true);
  check_exhaustive(op2(Ops::SHR, s, ci(1)), {{s, {-7, 7}}}, true);
  check_exhaustive(op2(Ops::SHR, x, var("k", 0, 3)), {{x, {0, 10}}, {var("k", 0, 3), {0, 3}}}, true);
  for (Ops op : {Ops::AND, Ops::OR, Ops::XOR}) {
    check_exhaustive(op2(op, x, var("w", 0, 6)), {{x, {0, 10}}, {var("w", 0, 6), {0, 6}}}, false);
    check_exhaustive(op2(op, s, var("n", -9, -2)), {{s, {-7, 7}}, {var("n", -9, -2), {-9, -2}}}, false);
    check_exhaustive(op2(op, var("m", -5, -1), var("n", -9, -2)), {{var("m", -5, -1), {-5, -1}}, {var("n", -9, -2), {-9, -2}}}, false);
  }
  CHECK(lo(op2(Ops::AND, s, ci(12))) == 0 && hi(op2(Ops::AND, s, ci(12))) == 12);
  CHECK(lo(op2(Ops::XOR, s, ci(-1))) == -8 && hi(op2(Ops::XOR, s, ci(-1))) == 6);
  const UOpRef u8 = var("u", 3, 10, DType::of(Scalar::UINT8));
  CHECK(lo(op2(Ops::XOR, u8, ci(255, DType::of(Scalar::UINT8)))) == 245);
}

void test_wrap_makes_full_range() {
  const UOpRef big = var("b", 0, INT32_MAX);
  CHECK(is_full(op2(Ops::ADD, big, ci(1))));
  CHECK(hi(op2(Ops::ADD, var("b2", 0, INT32_MAX - 1), ci(1))) == INT32_MAX);
  const UOpRef u = var("u", 0, 10, DType::uint32());
  CHECK(is_full(op2(Ops::ADD, u, ci(UINT32_MAX, DType::uint32()))));  // u - 1 wraps at 0
  CHECK(is_full(op2(Ops::SHL, var("s8", 1, 2, DType::of(Scalar::INT8)), ci(7, DType::of(Scalar::INT8)))));
  // weakint is unbounded.
  const UOpRef w = UOp::variable("w", 0, INT64_MAX, DType::weakint());
  CHECK(hi(op2(Ops::MUL, w, UOp::const_int(DType::weakint(), 4))) == static_cast<i128>(INT64_MAX) * 4);
}

void test_comparisons_and_where() {
  const UOpRef x = var("x", 0, 10), y = var("y", 11, 20);
  CHECK(blo(op2(Ops::CMPLT, x, ci(11))) && bhi(op2(Ops::CMPLT, x, ci(11))));
  CHECK(!blo(op2(Ops::CMPLT, x, ci(0))) && !bhi(op2(Ops::CMPLT, x, ci(0))));
  CHECK(!blo(op2(Ops::CMPLT, x, ci(5))) && bhi(op2(Ops::CMPLT, x, ci(5))));
  CHECK(blo(op2(Ops::CMPNE, x, y)) && bhi(op2(Ops::CMPNE, x, y)));
  CHECK(!blo(op2(Ops::CMPEQ, x, y)) && !bhi(op2(Ops::CMPEQ, x, y)));
  CHECK(!blo(op2(Ops::CMPEQ, x, ci(3))) && bhi(op2(Ops::CMPEQ, x, ci(3))));
  const UOpRef w = alu(Ops::WHERE, {op2(Ops::CMPLT, x, ci(5)), x, y});
  CHECK(lo(w) == 0 && hi(w) == 20);
  const UOpRef decided = alu(Ops::WHERE, {op2(Ops::CMPLT, x, y), x, y});
  CHECK(lo(decided) == 0 && hi(decided) == 10);
  // Float comparisons are decided only between ranges that exclude NaN.
  const UOpRef f = fvar("f", 0.0, 1.0);
  CHECK(blo(op2(Ops::CMPLT, f, cf(2.0))));
  CHECK(!blo(op2(Ops::CMPLT, fvar("g", -kInf, kInf), cf(kInf))));
  CHECK(!blo(op2(Ops::CMPNE, cf(kNan), cf(kNan))) && bhi(op2(Ops::CMPNE, cf(kNan), cf(kNan))));
}

void test_casts() {
  const DType i32 = DType::int32(), i8 = DType::of(Scalar::INT8);
  // float -> int: the part of the source inside the destination; a source wholly outside says nothing.
  const UOpRef a = cast(fvar("a", 2e9, 3e9), i32);
  CHECK(lo(a) == 2000000000 && hi(a) == INT32_MAX);
  CHECK(is_full(cast(fvar("b", 3e9, 4e9), i32)));
  CHECK(is_full(cast(fvar("c", -4e9, -3e9), i32)));
  CHECK(is_full(cast(cf(kInf), i32)));
  CHECK(lo(cast(fvar("d", -2.7, 3.9), i32)) == -2 && hi(cast(fvar("d", -2.7, 3.9), i32)) == 3);
  // int -> int wraps (C conversion), so a source that does not fit gives the destination's full range.
  CHECK(is_full(cast(var("e", 200, 300), i8)));
  CHECK(is_full(cast(var("e2", 100, 300), i8)));
  CHECK(lo(cast(var("e3", -100, 100), i8)) == -100);
  CHECK(is_full(cast(var("e4", -1, 5), DType::uint32())));
  // int -> float rounds the bounds; weak destinations do not clamp.
  const UOpRef g = cast(var("g", 5, 7), DType::weakfloat());
  CHECK(flo(g) == 5.0 && fhi(g) == 7.0);
  const UOpRef h = cast(var("h", 0, 16777217), DType::float32());
  CHECK(fhi(h) == 16777216.0);
  CHECK(fhi(cast(var("k", 0, 100000), DType::of(Scalar::HALF))) == kInf);
  // to bool
  CHECK(blo(cast(var("p", 1, 5), DType::bool_())));
  CHECK(!bhi(cast(ci(0), DType::bool_())));
  CHECK(!blo(cast(var("q", 0, 5), DType::bool_())) && bhi(cast(var("q", 0, 5), DType::bool_())));
  // bitcast of a known int folds; otherwise the full range.
  CHECK(flo(bitcast(ci(0x3f800000), DType::float32())) == 1.0);
  CHECK(is_full(bitcast(var("r", 0, 5), DType::float32())));
}

void test_floats() {
  const UOpRef x = fvar("x", 0.0, 1.0), y = fvar("y", -2.0, 3.0);
  CHECK(flo(op2(Ops::MUL, x, y)) == -2.0 && fhi(op2(Ops::MUL, x, y)) == 3.0);
  CHECK(flo(op2(Ops::ADD, x, y)) == -2.0 && fhi(op2(Ops::ADD, x, y)) == 4.0);
  CHECK(is_full(alu(Ops::SQRT, {y})));
  CHECK(fhi(alu(Ops::SQRT, {x})) == 1.0);
  CHECK(flo(alu(Ops::RECIPROCAL, {fvar("z", 1.0, 2.0)})) == 0.5);
  CHECK(is_full(alu(Ops::RECIPROCAL, {y})));
  CHECK(flo(alu(Ops::EXP2, {y})) == 0.25 && fhi(alu(Ops::EXP2, {y})) == 8.0);
  CHECK(flo(alu(Ops::SIN, {y})) == -1.0);
  // 0 * inf and inf - inf are NaN: such a node gets the full range, not a NaN bound.
  const UOpRef inf_range = fvar("i", 1.0, kInf);
  CHECK(is_full(op2(Ops::MUL, x, inf_range)));
  CHECK(is_full(op2(Ops::ADD, inf_range, fvar("j", -kInf, 0.0))));
  CHECK(fhi(op2(Ops::ADD, inf_range, inf_range)) == kInf && flo(op2(Ops::ADD, inf_range, inf_range)) == 2.0);
  // rounding to the dtype: float32 bounds are float32 values
  CHECK(fhi(op2(Ops::ADD, fvar("t", 0.0, 1.0), cf(1e-9))) == 1.0);
}

void test_evaluate() {
  const UOpRef x = var("x", 0, 10), y = var("y", -3, 5);
  const UOpRef e = op2(Ops::FLOORDIV, op2(Ops::ADD, op2(Ops::MUL, x, ci(4)), y), ci(3));
  CHECK(evaluate(e, {{"x", Arg::integer(3)}, {"y", Arg::integer(-2)}}).as_int() == 3);
  CHECK(evaluate(x, {{"x", Arg::integer(4)}}).as_int() == 4);
  CHECK_THROWS(evaluate(e, {{"x", Arg::integer(3)}}), UOpValueError);
  bool named = false;
  try {
    evaluate(op2(Ops::FLOORDIV, x, y), {{"x", Arg::integer(3)}, {"y", Arg::integer(0)}});
  } catch (const UOpValueError& err) {
    named = std::string(err.what()).find("FLOORDIV") != std::string::npos &&
            std::string(err.what()).find("division by zero") != std::string::npos;
  }
  CHECK(named);
  // A BIND gives its value unless the variable is set.
  const UOpRef b = op2(Ops::ADD, UOp::make(Ops::BIND, DType::int32(), {x, ci(7)}), ci(1));
  CHECK(evaluate(b, {}).as_int() == 8);
  CHECK(evaluate(b, {{"x", Arg::integer(1)}}).as_int() == 2);
  CHECK(evaluate(op2(Ops::ADD, ci(INT32_MAX), x), {{"x", Arg::integer(1)}}).as_int() == INT32_MIN);
  CHECK_THROWS(evaluate(UOp::make(Ops::RANGE, DType::int32(), {ci(4)}, Arg::integer(0)), {}), UOpValueError);
}

void test_deep_chain() {
  // 10^6 nodes: ranges and evaluation are iterative, and the facts stay on the nodes.
  const UOpRef x = var("x", 0, 10, DType::int64());
  UOpRef n = x;
  for (int i = 0; i < 1000000; ++i) n = op2(i % 2 ? Ops::ADD : Ops::MAX, n, ci(1, DType::int64()));
  CHECK(lo(n) == 500000 + 1 && hi(n) == 500000 + 10);
  const NodeFacts* first = n->facts();
  CHECK(first != nullptr && &facts_of(n.get()) == first);
  CHECK(evaluate(n, {{"x", Arg::integer(5)}}).as_int() == 500005);
  // A user added on top computes only its own facts.
  const UOpRef top = op2(Ops::MUL, n, ci(2, DType::int64()));
  CHECK(hi(top) == 2 * (500000 + 10));
}

}  // namespace

int main() {
  test_leaves();
  test_arithmetic();
  test_wrap_makes_full_range();
  test_comparisons_and_where();
  test_casts();
  test_floats();
  test_evaluate();
  test_deep_chain();
  std::cout << "test_range: ok\n";
  return 0;
}
