// th::simplify with no Python involved: results compared as rendered strings, values checked with th::evaluate.
#include <string>
#include <unordered_map>
#include <vector>

#include "check.h"
#include "tinyhybrid/core.h"
#include "tinyhybrid/simplify.h"
#include "tinyhybrid/symbolic.h"

using namespace th;

namespace {

const DType W = DType::weakint();
UOpRef ci(i128 v, DType d = W) { return UOp::const_int(d, v); }
UOpRef var(const char* name, i128 lo, i128 hi, DType d = W) { return UOp::variable(name, lo, hi, d); }
UOpRef op2(Ops op, const UOpRef& a, const UOpRef& b) { return alu(op, {a, b}); }
UOpRef add(const UOpRef& a, const UOpRef& b) { return op2(Ops::ADD, a, b); }
UOpRef mul(const UOpRef& a, const UOpRef& b) { return op2(Ops::MUL, a, b); }
UOpRef mul(const UOpRef& a, i128 k) { return op2(Ops::MUL, a, ci(k, a->dtype())); }
UOpRef add(const UOpRef& a, i128 k) { return op2(Ops::ADD, a, ci(k, a->dtype())); }
UOpRef idiv(const UOpRef& a, i128 k) { return op2(Ops::FLOORDIV, a, ci(k, a->dtype())); }
UOpRef imod(const UOpRef& a, i128 k) { return op2(Ops::FLOORMOD, a, ci(k, a->dtype())); }
UOpRef lt(const UOpRef& a, i128 k) { return op2(Ops::CMPLT, a, ci(k, a->dtype())); }

std::string S(const UOpRef& e) { return render(simplify(e)); }

#define CHECK_SIMPLIFY(expr, want) CHECK_EQ(S(expr), std::string(want))

void test_folding_and_identities() {
  CHECK_SIMPLIFY(add(ci(100, DType::of(Scalar::INT8)), ci(100, DType::of(Scalar::INT8))), "-56");
  CHECK_SIMPLIFY(add(ci(4294967295, DType::uint32()), ci(2, DType::uint32())), "1");
  CHECK_SIMPLIFY(op2(Ops::FLOORDIV, ci(-7), ci(2)), "-4");
  CHECK_SIMPLIFY(op2(Ops::FLOORMOD, ci(-7), ci(2)), "1");
  CHECK(simplify(op2(Ops::FLOORDIV, ci(7), ci(0)))->op() == Ops::FLOORDIV);  // no fold of x/0
  CHECK(simplify(add(ci(3), ci(3))) == ci(6));                          // a+a with a constant
  UOpRef x = var("x", 0, 100);
  CHECK(simplify(add(x, 0)) == x);
  CHECK(simplify(mul(x, 1)) == x);
  CHECK(simplify(mul(x, 0)) == ci(0));
  CHECK(simplify(idiv(x, 1)) == x);
  CHECK(simplify(imod(x, 1)) == ci(0));
  CHECK(simplify(mul(mul(x, -1), -1)) == x);
  UOpRef f = UOp::make(Ops::NOOP, DType::float32(), {}, Arg::string("f"));
  UOpRef fz = mul(f, UOp::const_float(DType::float32(), 0.0));
  CHECK(simplify(fz) == fz);  // nan*0 is nan: kept
  CHECK(simplify(mul(f, UOp::const_float(DType::float32(), 1.0))) == f);
  // where
  UOpRef y = var("y", 0, 100);
  CHECK(simplify(alu(Ops::WHERE, {UOp::const_bool(true), x, y})) == x);
  CHECK(simplify(alu(Ops::WHERE, {lt(x, 3), y, y})) == y);
  CHECK(simplify(alu(Ops::WHERE, {lt(x, 1000), x, y})) == x);
}

void test_sums_and_divmod() {
  UOpRef x = var("x", 0, 100), y = var("y", 0, 100), z = var("z", 1, 10);
  CHECK_SIMPLIFY(add(mul(x, 2), mul(x, 4)), "(x*6)");
  CHECK_SIMPLIFY(add(add(add(add(mul(x, 2), 5), mul(x, 4)), mul(y, 2)), y), "((((x*2)+y)*3)+5)");
  CHECK_SIMPLIFY(add(add(add(x, 3), y), 5), "((x+y)+8)");
  CHECK_SIMPLIFY(op2(Ops::FLOORDIV, add(mul(x, 4), mul(y, 8)), mul(z, 2)), "(((x+(y*2))*2)//z)");
  UOpRef u = var("u", 0, 1000, DType::uint32());
  CHECK_SIMPLIFY(idiv(op2(Ops::AND, u, ci(-4, DType::uint32())), 4), "(u//4)");
  CHECK_SIMPLIFY(add(mul(idiv(x, 4), 4), imod(x, 4)), "x");
  CHECK_SIMPLIFY(idiv(add(mul(x, 4), 3), 4), "x");
  CHECK_SIMPLIFY(imod(add(mul(x, 4), 3), 4), "3");
  CHECK_SIMPLIFY(idiv(idiv(x, 2), 3), "(x//6)");
  CHECK_SIMPLIFY(imod(imod(x, 12), 4), "(x%4)");
  // ranges decide
  CHECK(simplify(lt(x, 200)) == UOp::const_bool(true));
  CHECK(simplify(lt(x, 0)) == UOp::const_bool(false));
  CHECK(simplify(idiv(x, 200)) == ci(0));
  CHECK(simplify(imod(x, 200)) == x);
  CHECK_SIMPLIFY(lt(x, 50), "(x<50)");
}

// simplify keeps the value: every point of a small grid, on a few expressions
void test_values_kept() {
  UOpRef x = var("x", 0, 23), y = var("y", 0, 7);
  const std::vector<UOpRef> exprs = {
      add(mul(idiv(add(mul(x, 3), y), 4), 4), imod(add(mul(x, 3), y), 4)),
      idiv(add(add(mul(x, 6), mul(y, 4)), 7), 2),
      imod(add(mul(x, 8), add(y, 3)), 8),
      alu(Ops::WHERE, {lt(add(x, y), 10), idiv(x, 3), imod(y, 3)}),
      op2(Ops::MAX, idiv(add(x, 5), 3), add(mul(y, 2), -4)),
  };
  for (const UOpRef& e : exprs) {
    const UOpRef s = simplify(e);
    const auto [lo, hi] = vmin_vmax(s.get());
    for (int a = 0; a <= 23; ++a)
      for (int b = 0; b <= 7; ++b) {
        const std::unordered_map<std::string, Arg> env{{"x", Arg::integer(a)}, {"y", Arg::integer(b)}};
        const Arg want = evaluate(e, env), got = evaluate(s, env);
        if (!(want == got)) th_check::fail(__FILE__, __LINE__, render(e) + " -> " + render(s) + " differs at x=" + std::to_string(a) + " y=" + std::to_string(b));
        CHECK(lo.as_int() <= got.as_int() && got.as_int() <= hi.as_int());
      }
    CHECK(simplify(s) == s);  // a fixed point
  }
}

// A C++ rule set extends the native one through operator+.
void test_extend_symbolic_matcher() {
  using namespace th::pat;
  UOpRef x = var("x", 0, 100);
  PatternMatcher extra({Rule{op(OpSet{Ops::NOOP}, {}, "", Pattern::Src::Any),
                             [](const Captured&, void*) { return UOp::const_int(DType::weakint(), 5); }, "noop is 5"}});
  const PatternMatcher pm = symbolic_matcher() + extra;
  CHECK_EQ(pm.size(), symbolic_matcher().size() + 1);
  UOpRef e = add(add(x, UOp::make(Ops::NOOP, W, {}, Arg::string("n"))), 3);
  CHECK_EQ(render(graph_rewrite(e, pm)), std::string("(x+8)"));
}

// simplify() keeps its answer on the node: the same object again, and nothing outlives the expression.
void test_answer_kept_on_the_node() {
  const size_t live = live_uop_count();
  {
    UOpRef x = var("kx", 0, 10), y = var("ky", 0, 10);
    UOpRef e = idiv(add(mul(x, 4), mul(y, 8)), 4);
    UOpRef s = simplify(e);
    CHECK(s.get() != e.get());
    CHECK(simplify(e).get() == s.get());
    CHECK(simplify(s).get() == s.get());
    CHECK_EQ(render(s), std::string("(kx+(ky*2))"));
  }
  CHECK_EQ(live_uop_count(), live);
}

}  // namespace

int main() {
  test_folding_and_identities();
  test_sums_and_divmod();
  test_values_kept();
  test_extend_symbolic_matcher();
  test_answer_kept_on_the_node();
  std::puts("test_simplify: ok");
  return 0;
}
