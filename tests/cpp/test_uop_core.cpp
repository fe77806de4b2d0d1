// Builds, interns, walks and frees graphs with no Python involved.
#include <cmath>
#include <iostream>
#include <limits>
#include <stdexcept>

#include "check.h"
#include "tinyhybrid/const.h"
#include "tinyhybrid/core.h"

using namespace th;

static void test_interning() {
  const size_t before = live_uop_count();
  {
    UOpRef a = UOp::variable("a", 0, 10);
    UOpRef b = UOp::variable("a", 0, 10);
    CHECK(a == b);
    UOpRef c1 = UOp::const_int(DType::int32(), 3);
    UOpRef s1 = alu(Ops::ADD, {a, c1});
    UOpRef s2 = alu(Ops::ADD, {b, UOp::const_int(DType::int32(), 3)});
    CHECK(s1 == s2);
    CHECK(s1->dtype() == DType::int32());
    // 0, 0.0, -0.0, False are distinct constants
    UOpRef f0 = UOp::const_float(DType::float32(), 0.0), fm0 = UOp::const_float(DType::float32(), -0.0);
    CHECK(f0 != fm0);
    UOpRef nan1 = UOp::const_float(DType::float32(), std::numeric_limits<double>::quiet_NaN());
    UOpRef nan2 = UOp::const_float(DType::float32(), -std::numeric_limits<double>::quiet_NaN());
    CHECK(nan1 == nan2);
    CHECK(render(s1) == "(a+3)");
  }
  CHECK(live_uop_count() == before);
}

static void test_weak_commit_and_errors() {
  UOpRef x = UOp::variable("x", 0, 100);
  UOpRef w = UOp::make(Ops::CONST, DType::weakint(), {}, Arg::integer(2));
  UOpRef m = alu(Ops::MUL, {x, w});
  CHECK(m->src(1)->dtype() == DType::int32());
  bool threw = false;
  try {
    UOp::make(Ops::ADD, DType::int32(), {x});
  } catch (const UOpTypeError& e) {
    threw = std::string(e.what()).find("ADD") != std::string::npos;
  }
  CHECK(threw);
  threw = false;
  try {
    UOp::make(Ops::ADD, DType::int32(), {x, UOp::const_float(DType::float32(), 1.0)});
  } catch (const UOpTypeError&) {
    threw = true;
  }
  CHECK(threw);
  CHECK(UOp::const_int(DType::of(Scalar::UINT32), -4)->arg().as_int() == 4294967292);
  CHECK(UOp::const_int(DType::of(Scalar::INT8), 200)->arg().as_int() == -56);
  CHECK(round_float(Scalar::HALF, 65519.0) == 65504.0);
  CHECK(std::isinf(round_float(Scalar::HALF, 65520.0)));
}

static void test_strong_dtypes_promote_and_bytedot_takes_uint16() {
  const DType i32 = DType::int32(), i64 = DType::int64(), u8 = DType::of(Scalar::UINT8), i8 = DType::of(Scalar::INT8);
  CHECK(least_upper(i32, i64) == i64);
  CHECK(least_upper(u8, i8) == DType::of(Scalar::INT16));
  CHECK(least_upper(DType::of(Scalar::HALF), DType::of(Scalar::BFLOAT16)) == DType::float32());
  CHECK(least_upper(i64, DType::of(Scalar::UINT64)) == DType::weakfloat());
  CHECK(least_upper(DType::bool_(), i8) == i8);
  UOpRef a = UOp::variable("a", 0, 10), b = cast(UOp::variable("b", 0, 10), i64);
  UOpRef s = alu(Ops::ADD, {a, b});
  CHECK(s->dtype() == i64 && s->src(0)->op() == Ops::CAST && s->src(1) == b);
  CHECK(alu(Ops::CMPLT, {a, b})->dtype() == DType::bool_());
  const DType u16 = DType::of(Scalar::UINT16);
  CHECK(alu(Ops::BYTEDOT, {cast(a, u16), cast(a, u16)})->dtype() == DType::of(Scalar::INT16));
  bool threw = false;
  try {
    UOp::make(Ops::BYTEDOT, DType::of(Scalar::INT16), {a, a});
  } catch (const UOpTypeError& e) {
    threw = std::string(e.what()).find("uint16") != std::string::npos;
  }
  CHECK(threw);
}

static void test_deep_chain() {
  const size_t before = live_uop_count();
  {
    UOpRef a = UOp::variable("a", 0, 10);
    for (int i = 0; i < 1000000; ++i) a = alu(Ops::ADD, {a, a});
    auto order = toposort(a.get());
    CHECK(order.size() == 1000001);
    CHECK(order.front()->op() == Ops::DEFINE_VAR);
    CHECK(order.back() == a.get());
  }
  CHECK(live_uop_count() == before);
}

static void test_toposort_order_and_substitute() {
  UOpRef x = UOp::variable("x", 0, 10), y = UOp::variable("y", 0, 10);
  UOpRef s = alu(Ops::ADD, {alu(Ops::MUL, {x, y}), y});
  auto order = toposort(s.get());
  CHECK(order.size() == 4);
  CHECK(order[0] == x.get() && order[1] == y.get() && order[3] == s.get());
  SubstituteMap m{{y.get(), UOp::const_int(DType::int32(), 7)}};
  UOpRef t = substitute(s, m);
  CHECK(render(t) == "((x*7)+7)");
  // gate: don't enter MUL
  auto gated = toposort(s.get(), [](const UOp* n) { return n->op() != Ops::MUL; });
  CHECK(gated.size() == 2);
}

int main() {
  test_interning();
  test_weak_commit_and_errors();
  test_strong_dtypes_promote_and_bytedot_takes_uint16();
  test_deep_chain();
  test_toposort_order_and_substitute();
  std::cout << "test_uop_core: ok\n";
  return 0;
}
