// The native symbolic rules. Each rule is exact for the semantics documented in symbolic.h: integers wrap, floats
// round, -0.0 and NaN are kept (so float rules are limited to identities that hold bit for bit).
#include <algorithm>
#include <array>

#include "algebra.h"
#include "rule_sets.h"
#include "tinyhybrid/const.h"
#include "tinyhybrid/simplify.h"

namespace th {

namespace sym {

using namespace pat;
using alg::const_int;
using alg::is_int;

UOpRef same_as(const UOp* n) { return UOpRef(n); }

namespace {

// ---- constant folding ----

UOpRef fold_constants(const Captured& c, void*) {
  const UOp* a = c.root();
  if (a->nsrc() > 3) return nullptr;  // ALU ops, casts: at most three operands
  std::array<Arg, 3> vals;
  for (size_t i = 0; i < a->nsrc(); ++i) {
    const UOp* s = a->src(i).get();
    if (s->op() != Ops::CONST || s->dtype().is_vector()) return nullptr;
    vals[i] = s->arg();
  }
  const auto r = fold(a->op(), a->dtype(), std::span<const Arg>(vals.data(), a->nsrc()), a->nsrc() ? a->src(0)->dtype() : DType());
  if (!r) return nullptr;
  return UOp::const_of(a->dtype(), *r);
}

// x.cast(a).cast(b) -> x when b is x's dtype and a holds every value of it
bool lossless(DType from, DType to) {
  if (from == to || from.is_bool()) return true;
  if (from.is_weak() || to.is_weak()) return false;
  if (from.is_int() && to.is_int()) {
    const auto [flo, fhi] = dtype_range(from);
    const auto [tlo, thi] = dtype_range(to);
    return tlo.as_int() <= flo.as_int() && fhi.as_int() <= thi.as_int();
  }
  if (from.is_int() && to.is_float()) {
    const int mant = to.scalar_kind() == Scalar::DOUBLE ? 53 : to.scalar_kind() == Scalar::FLOAT ? 24 : to.scalar_kind() == Scalar::HALF ? 11 : 0;
    return from.bitsize() < mant;
  }
  if (from.is_float() && to.is_float()) {
    const auto rank = [](Scalar s) {
      switch (s) {
        case Scalar::HALF: return 1;
        case Scalar::FLOAT: return 3;
        case Scalar::DOUBLE: return 4;
        default: return 0;
      }
    };
    return rank(from.scalar_kind()) && rank(from.scalar_kind()) < rank(to.scalar_kind());
  }
  return false;
}

bool is_zero(const UOp* u) {
  const auto v = const_int(u);
  return v && *v == 0;
}

}  // namespace

std::vector<Rule> folding_rules() {
  std::vector<Rule> r;
  Pattern any_const = cvar("");
  r.push_back({op(group::ALU, {any_const}, "", Pattern::Src::Repeat), fold_constants, "fold constant ALU"});
  r.push_back({op(OpSet{Ops::CAST, Ops::BITCAST}, {cvar("c")}), fold_constants, "fold constant cast"});
  r.push_back({op(OpSet{Ops::CAST, Ops::BITCAST}, {var("x")}, "root"),
               [](const Captured& c, void*) -> UOpRef {
                 return c["root"]->dtype() == c["x"]->dtype() ? same_as(c["x"]) : nullptr;
               },
               "cast to the same dtype"});
  r.push_back({op(OpSet{Ops::CAST}, {op(OpSet{Ops::CAST}, {var("x")}, "a")}, "b"),
               [](const Captured& c, void*) -> UOpRef {
                 const UOp *x = c["x"], *a = c["a"], *b = c["b"];
                 return x->dtype() == b->dtype() && lossless(b->dtype(), a->dtype()) ? same_as(x) : nullptr;
               },
               "lossless double cast"});
  return r;
}

std::vector<Rule> identity_rules() {
  std::vector<Rule> r;
  const auto int_or_bool = [](const UOp* u) { return is_int(u->dtype()) || u->dtype().is_bool(); };
  // x+0, x|0, x^0 -> x (ints and bools: for floats -0.0+0.0 is 0.0, so only x+(-0.0) is an identity)
  r.push_back({alu(Ops::ADD, {var("x"), cvar("c")}),
               [](const Captured& c, void*) -> UOpRef {
                 const UOp *x = c["x"], *k = c["c"];
                 if (x->dtype().is_float())
                   return k->arg().kind() == Arg::Kind::Float && k->arg() == Arg::floating(-0.0) ? same_as(x) : nullptr;
                 return is_zero(k) ? same_as(x) : nullptr;
               },
               "x+0"});
  r.push_back({op(OpSet{Ops::OR, Ops::XOR}, {var("x"), cvar("c")}, "", Pattern::Src::Permute),
               [](const Captured& c, void*) -> UOpRef { return is_zero(c["c"]) ? same_as(c["x"]) : nullptr; }, "x|0, x^0"});
  r.push_back({op(OpSet{Ops::SHL, Ops::SHR}, {var("x"), cvar("c")}),
               [](const Captured& c, void*) -> UOpRef { return is_zero(c["c"]) ? same_as(c["x"]) : nullptr; }, "x<<0, x>>0"});
  // x*1 -> x holds bit for bit for every dtype; x*0 -> 0 only for ints (inf*0 and nan*0 are nan)
  r.push_back({alu(Ops::MUL, {var("x"), cvar("c")}),
               [int_or_bool](const Captured& c, void*) -> UOpRef {
                 const UOp *x = c["x"], *k = c["c"];
                 if (k->arg().is_number() && k->arg().to_double() == 1.0) return same_as(x);
                 if (int_or_bool(x) && is_zero(k)) return k->dtype() == x->dtype() ? same_as(k) : nullptr;
                 return nullptr;
               },
               "x*1, x*0"});
  r.push_back({op(OpSet{Ops::FLOORDIV, Ops::CDIV, Ops::FLOORMOD, Ops::CMOD}, {var("x"), cvar("c")}, "d"),
               [](const Captured& c, void*) -> UOpRef {
                 const auto v = const_int(c["c"]);
                 if (!v || !is_int(c["x"]->dtype())) return nullptr;
                 const bool div = c["d"]->op() == Ops::FLOORDIV || c["d"]->op() == Ops::CDIV;
                 if (*v == 1) return div ? same_as(c["x"]) : alg::cint(c["x"]->dtype(), 0);
                 if (*v == -1 && div) return UOp::make(Ops::MUL, c["x"]->dtype(), {UOpRef(c["x"]), alg::cint(c["x"]->dtype(), -1)});
                 return nullptr;
               },
               "x//1, x%1, x//-1"});
  r.push_back({op(OpSet{Ops::FLOORDIV, Ops::FLOORMOD, Ops::XOR}, {var("x"), var("x")}, "d"),
               [int_or_bool](const Captured& c, void*) -> UOpRef {
                 if (!int_or_bool(c["x"])) return nullptr;
                 return UOp::const_int(c["x"]->dtype(), c["d"]->op() == Ops::FLOORDIV ? 1 : 0);
               },
               "x//x, x%x, x^x"});
  r.push_back({op(OpSet{Ops::AND}, {var("x"), cvar("c")}, "", Pattern::Src::Permute),
               [](const Captured& c, void*) -> UOpRef {
                 const UOp *x = c["x"], *k = c["c"];
                 if (x->dtype().is_bool()) return k->arg().as_bool() ? same_as(x) : same_as(k);
                 return is_zero(k) ? same_as(k) : nullptr;
               },
               "x&0, b&True, b&False"});
  r.push_back({op(OpSet{Ops::OR}, {var("x", {DType::bool_()}), cvar("c")}, "", Pattern::Src::Permute),
               [](const Captured& c, void*) -> UOpRef { return c["c"]->arg().as_bool() ? same_as(c["c"]) : same_as(c["x"]); },
               "b|True, b|False"});
  r.push_back({op(group::Idempotent, {var("x"), var("x")}),
               [](const Captured& c, void*) { return same_as(c["x"]); }, "x&x, x|x, max(x,x)"});
  r.push_back({alu(Ops::CMPLT, {var("x"), var("x")}),
               [](const Captured&, void*) { return UOp::const_bool(false); }, "x<x"});
  r.push_back({alu(Ops::CMPNE, {var("x"), var("x")}),
               [int_or_bool](const Captured& c, void*) -> UOpRef {
                 return int_or_bool(c["x"]) ? UOp::const_bool(false) : nullptr;  // nan != nan
               },
               "x!=x"});
  r.push_back({alu(Ops::CMPEQ, {var("x"), var("x")}),
               [int_or_bool](const Captured& c, void*) -> UOpRef { return int_or_bool(c["x"]) ? UOp::const_bool(true) : nullptr; },
               "x==x"});
  r.push_back({alu(Ops::CMPNE, {var("x", {DType::bool_()}), cnst(Arg::boolean(false))}),
               [](const Captured& c, void*) { return same_as(c["x"]); }, "b!=False"});
  r.push_back({alu(Ops::CMPNE, {alu(Ops::CMPNE, {var("x", {DType::bool_()}), cnst(Arg::boolean(true))}), cnst(Arg::boolean(true))}),
               [](const Captured& c, void*) { return same_as(c["x"]); }, "not not b"});
  r.push_back({alu(Ops::XOR, {alu(Ops::XOR, {var("x"), var("y")}), var("y")}),
               [](const Captured& c, void*) { return same_as(c["x"]); }, "(x^y)^y"});
  r.push_back({alu(Ops::FLOORMOD, {named(alu(Ops::FLOORMOD, {var("x"), var("y")}), "base"), var("y")}),
               [](const Captured& c, void*) { return same_as(c["base"]); }, "(x%y)%y"});
  r.push_back({op(OpSet{Ops::TRUNC}, {var("x")}),
               [int_or_bool](const Captured& c, void*) -> UOpRef { return int_or_bool(c["x"]) ? same_as(c["x"]) : nullptr; },
               "trunc of an int"});
  // bool arithmetic is logic: MUL is AND, ADD and MAX are OR
  r.push_back({op(OpSet{Ops::MUL, Ops::ADD, Ops::MAX}, {var("x", {DType::bool_()}), var("y", {DType::bool_()})}, "o"),
               [](const Captured& c, void*) {
                 return UOp::make(c["o"]->op() == Ops::MUL ? Ops::AND : Ops::OR, DType::bool_(), {c.ref("x"), c.ref("y")});
               },
               "bool mul/add/max"});
  return r;
}

std::vector<Rule> where_rules() {
  std::vector<Rule> r;
  const Pattern where = op(OpSet{Ops::WHERE}, {var("c"), var("t"), var("f")});
  r.push_back({op(OpSet{Ops::WHERE}, {cvar("c"), var("t"), var("f")}),
               [](const Captured& c, void*) { return same_as(c["c"]->arg().as_bool() ? c["t"] : c["f"]); }, "where on a constant"});
  r.push_back({op(OpSet{Ops::WHERE}, {var("c"), var("v"), var("v")}),
               [](const Captured& c, void*) { return same_as(c["v"]); }, "where with equal branches"});
  const std::vector<DType> b{DType::bool_()};
  r.push_back({op(OpSet{Ops::WHERE}, {var("c"), cnst(Arg::boolean(true), b), cnst(Arg::boolean(false), b)}),
               [](const Captured& c, void*) { return same_as(c["c"]); }, "c.where(True, False)"});
  r.push_back({op(OpSet{Ops::WHERE}, {var("c"), cnst(Arg::boolean(false), b), cnst(Arg::boolean(true), b)}),
               [](const Captured& c, void*) {
                 return UOp::make(Ops::CMPNE, DType::bool_(), {c.ref("c"), UOp::const_bool(true)});
               },
               "c.where(False, True)"});
  r.push_back({op(OpSet{Ops::WHERE}, {alu(Ops::CMPNE, {var("c", {DType::bool_()}), cnst(Arg::boolean(true))}), var("t"), var("f")}),
               [](const Captured& c, void*) {
                 return UOp::make(Ops::WHERE, c["t"]->dtype(), {c.ref("c"), c.ref("f"), c.ref("t")});
               },
               "(not c).where(t, f)"});
  // a gated value compared with the 0 its gate gives otherwise: the gate and the compare, so a load behind the gate is
  // only needed where the gate holds (a padded or masked read tested for non-zero)
  r.push_back({alu(Ops::CMPNE, {op(OpSet{Ops::WHERE}, {var("g", b), var("x"), cvar("z")}), cvar("z2")}),
               [](const Captured& c, void*) -> UOpRef {
                 if (!is_zero(c["z"]) || !is_zero(c["z2"])) return nullptr;
                 return UOp::make(Ops::AND, DType::bool_(), {c.ref("g"), UOp::make(Ops::CMPNE, DType::bool_(), {c.ref("x"), c.ref("z2")})});
               },
               "gate.where(x, 0) != 0"});
  return r;
}

// Constants go on the right of commutative ops, so one pattern order matches them.
std::vector<Rule> ordering_rules() {
  std::vector<Rule> r;
  r.push_back({op(group::Commutative, {cvar("c"), var("x")}, "o"),
               [](const Captured& c, void*) -> UOpRef {
                 if (c["x"]->op() == Ops::CONST) return nullptr;
                 return UOp::make(c["o"]->op(), c["o"]->dtype(), {c.ref("x"), c.ref("c")});
               },
               "constant to the right"});
  // two-stage folding of exact associative ops: (x op c1) op c2 -> x op (c1 op c2); ADD/MUL of ints go through sums
  r.push_back({op(OpSet{Ops::AND, Ops::OR, Ops::MAX}, {op(OpSet{Ops::AND, Ops::OR, Ops::MAX}, {var("x"), cvar("c1")}, "i"), cvar("c2")}, "o"),
               [](const Captured& c, void*) -> UOpRef {
                 const UOp *o = c["o"], *i = c["i"];
                 if (o->op() != i->op()) return nullptr;
                 const auto v = fold(o->op(), o->dtype(), {c["c1"]->arg(), c["c2"]->arg()}, o->dtype());
                 if (!v) return nullptr;
                 return UOp::make(o->op(), o->dtype(), {c.ref("x"), UOp::const_of(o->dtype(), *v)});
               },
               "(x op c1) op c2"});
  // (x*c)*y -> (x*y)*c for ints, so the sum rules see one term with a coefficient
  r.push_back({alu(Ops::MUL, {alu(Ops::MUL, {var("x"), cvar("c")}), var("y")}),
               [](const Captured& c, void*) -> UOpRef {
                 const UOp* y = c["y"];
                 if (!is_int(y->dtype()) || y->op() == Ops::CONST) return nullptr;
                 const DType d = y->dtype();
                 return UOp::make(Ops::MUL, d, {UOp::make(Ops::MUL, d, {c.ref("x"), c.ref("y")}), c.ref("c")});
               },
               "(x*c)*y"});
  return r;
}

// Whether div is the quotient that goes with mod = a % k: a // k, or x // (c*k) where a is x // c, as floor division
// by positive constants nests (x // c // k == x // (c*k)): a flat index split into three axes and joined again,
// x//9*9 + x//3%3*3 + x%3, is x.
namespace {
bool quotient_of(const UOp* div, const UOp* mod, i128 k) {
  if (div->op() != Ops::FLOORDIV) return false;
  const UOp* a = mod->src(0).get();
  if (div->src(0).get() == a && div->src(1) == mod->src(1)) return true;
  if (a->op() != Ops::FLOORDIV || div->src(0) != a->src(0) || k <= 0) return false;
  const auto c = const_int(a->src(1).get()), d = const_int(div->src(1).get());
  return c && d && *c > 0 && *d == *c * k;
}
}  // namespace

// (a % c)*m + (a // c)*(c*m) -> a*m: the division identity, anywhere in a sum.
void recombine_divmod(alg::LinearForm& f) {
  for (size_t i = 0; i < f.terms.size(); ++i) {
    const auto [mod, m] = f.terms[i];
    if (mod->op() != Ops::FLOORMOD) continue;
    const auto k = const_int(mod->src(1).get());
    if (!k) continue;
    for (size_t j = 0; j < f.terms.size(); ++j) {
      const auto [div, dm] = f.terms[j];
      if (!quotient_of(div, mod, *k) || dm != m * *k) continue;
      f.terms[std::min(i, j)] = {mod->src(0).get(), m};
      f.terms.erase(f.terms.begin() + static_cast<std::ptrdiff_t>(std::max(i, j)));
      i = static_cast<size_t>(-1);  // the merged term may pair again
      break;
    }
  }
}

// Sums of ints in canonical linear form: like terms combine, constants gather at the end, constant multipliers
// distribute. Integer arithmetic is a ring (mod 2^bits for fixed widths), so this is exact.
std::vector<Rule> sum_rules() {
  std::vector<Rule> r;
  const auto normalize = [](const Captured& c, void*) -> UOpRef {
    auto f = alg::LinearForm::of(c.root());
    if (!f) return nullptr;
    recombine_divmod(*f);
    if (f->is_built(c.root())) return nullptr;
    return f->build();
  };
  r.push_back({op(OpSet{Ops::ADD}, {}, "", Pattern::Src::Any), normalize, "canonical sum"});
  r.push_back({alu(Ops::MUL, {var("x"), cvar("c")}),
               [normalize](const Captured& c, void* ctx) -> UOpRef {
                 const Ops inner = c["x"]->op();
                 return inner == Ops::ADD || inner == Ops::MUL ? normalize(c, ctx) : nullptr;
               },
               "constant multiplier"});
  return r;
}

}  // namespace sym

namespace {
constexpr uint8_t kSimplifiedMark = 1;  // UOp::has_mark: a fixed point of simplify()
}  // namespace

const PatternMatcher& symbolic_matcher() {
  static const PatternMatcher pm = [] {
    std::vector<Rule> all;
    for (auto* make : {sym::folding_rules, sym::identity_rules, sym::where_rules, sym::ordering_rules, sym::sum_rules,
                       sym::range_rules, sym::compare_rules, sym::divmod_rules})
      for (Rule& r : make()) all.push_back(std::move(r));
    PatternMatcher m(std::move(all));
    m.set_fixed_point_mark(kSimplifiedMark);  // the native rules read only the node (and its derived facts)
    return m;
  }();
  return pm;
}

UOpRef simplify(const UOpRef& u) {
  if (!u) return u;
  if (const NodeFacts* f = u->facts())
    if (const UOp* s = f->simplified.load(std::memory_order_acquire)) return UOpRef(s);
  UOpRef r = graph_rewrite(u, symbolic_matcher(), nullptr, false, "simplify");
  if (r.get() != u.get()) {
    const UOp* expected = nullptr;
    UOpRef kept = r;
    if (facts_of(u.get()).simplified.compare_exchange_strong(expected, kept.get(), std::memory_order_acq_rel)) kept.release();
  }
  return r;
}

}  // namespace th
