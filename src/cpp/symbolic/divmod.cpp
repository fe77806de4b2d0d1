// Rules that use value ranges: facts a range decides, comparisons in canonical form, and floor division and
// modulo of sums (the heart of index simplification).
#include <algorithm>

#include "algebra.h"
#include "numeric.h"
#include "rule_sets.h"

namespace th::sym {

using namespace pat;
using alg::const_int;
using alg::hi;
using alg::is_int;
using alg::LinearForm;
using alg::lo;

namespace {

UOpRef make2(Ops o, DType d, UOpRef a, UOpRef b) { return UOp::make(o, d, {std::move(a), std::move(b)}); }

// ---- ranges ----

UOpRef constant_by_range(const Captured& c, void*) {
  const UOp* x = c.root();
  const DType d = x->dtype();
  if (!(is_int(d) || d.is_bool()) || d.is_vector()) return nullptr;
  const NodeFacts& f = facts_of(x);  // read in place: copying the two Args costs more than the test
  if (!(f.vmin == f.vmax)) return nullptr;
  return UOp::const_of(d, f.vmin);
}

// ---- comparisons ----

// sum < c with the constant moved right, common factors divided out, and a small non-negative part dropped.
UOpRef canonical_lt(const Captured& c, void*) {
  const UOp* x = c["x"];
  const auto k = const_int(c["c"]);
  if (!k || !is_int(x->dtype()) || !alg::safe_range(x)) return nullptr;
  auto f = LinearForm::of(x, true);
  if (!f || f->terms.empty()) return nullptr;
  i128 bound = *k - f->constant;
  bool changed = f->constant != 0;
  f->constant = 0;
  // g*S < bound  <=>  S < ceil(bound / g)
  if (const i128 g = f->coeff_gcd(); g > 1) {
    for (auto& tc : f->terms) tc.second /= g;
    bound = -*num::floordiv(-bound, g);
    changed = true;
  }
  // S + P < bound with P in [0, d) and d dividing S and bound: S < bound (as multiples of d)
  if (f->terms.size() > 1) {
    i128 d = bound;
    std::vector<std::pair<const UOp*, i128>> big, small;
    for (const auto& tc : f->terms) (tc.second == 1 ? small : big).push_back(tc);
    for (const auto& tc : big) d = alg::gcd(d, tc.second);
    if (!big.empty() && !small.empty() && d > 1) {
      i128 plo = 0, phi = 0;
      for (const auto& tc : small) plo += lo(tc.first), phi += hi(tc.first);
      if (plo >= 0 && phi < d) {
        for (auto& tc : big) tc.second /= d;
        f->terms = big;
        bound /= d;
        changed = true;
      }
    }
  }
  if (!changed) return nullptr;
  return make2(Ops::CMPLT, DType::bool_(), f->build(), alg::cint(x->dtype(), bound));
}

// ---- floor division and modulo by a positive constant ----

struct DivInputs {
  const UOp* root;
  const UOp* x;
  i128 c;
  bool is_mod;
};

// (a % m) // c -> (a // c) % (m / c) and (a % m) % c -> a % c when c divides m
UOpRef nested_mod(const DivInputs& in) {
  if (in.x->op() != Ops::FLOORMOD) return nullptr;
  const auto m = const_int(in.x->src(1).get());
  if (!m || *m <= 0 || *m % in.c) return nullptr;
  const DType d = in.x->dtype();
  const UOpRef a = in.x->src(0);
  if (in.is_mod) return make2(Ops::FLOORMOD, d, a, alg::cint(d, in.c));
  return make2(Ops::FLOORMOD, d, make2(Ops::FLOORDIV, d, a, alg::cint(d, in.c)), alg::cint(d, *m / in.c));
}

// (x // c1) // c2 -> x // (c1*c2)
UOpRef nested_div(const DivInputs& in) {
  if (in.is_mod || in.x->op() != Ops::FLOORDIV) return nullptr;
  const auto c1 = const_int(in.x->src(1).get());
  if (!c1 || *c1 <= 0) return nullptr;
  const auto p = num::mul(*c1, in.c);
  const DType d = in.x->dtype();
  if (!p || (d != DType::weakint() && !fits(d, *p))) return nullptr;
  return make2(Ops::FLOORDIV, d, in.x->src(0), alg::cint(d, *p));
}

// (y // c1 + a) // c -> (y + a*c1) // (c1*c), the nested floor division identity
UOpRef merge_div_with_constant(const DivInputs& in, const LinearForm& f) {
  if (in.is_mod || f.terms.size() != 1 || f.terms[0].second != 1 || f.terms[0].first->op() != Ops::FLOORDIV) return nullptr;
  const UOp* inner = f.terms[0].first;
  const auto c1 = const_int(inner->src(1).get());
  if (!c1 || *c1 <= 0) return nullptr;
  const auto shift = num::mul(f.constant, *c1), div = num::mul(*c1, in.c);
  if (!shift || !div) return nullptr;
  const DType d = f.dtype;
  if (d != DType::weakint()) {
    // the new numerator y + shift must not wrap either
    const UOp* y = inner->src(0).get();
    const auto nlo = num::add(lo(y), *shift), nhi = num::add(hi(y), *shift);
    const i128 limit = static_cast<i128>(1) << (d.bitsize() - (d.is_unsigned() ? 1 : 2));
    if (!nlo || !nhi || *nlo <= -limit || *nhi >= limit || (d.is_unsigned() && *nlo < 0) || !fits(d, *div)) return nullptr;
  }
  return make2(Ops::FLOORDIV, d, make2(Ops::ADD, d, inner->src(0), alg::cint(d, *shift)), alg::cint(d, *div));
}

// Range of sum(r_i * t_i) + k.
std::optional<std::pair<i128, i128>> range_of(const std::vector<std::pair<const UOp*, i128>>& terms, i128 k) {
  i128 mn = k, mx = k;
  for (const auto& [t, r] : terms) {
    const auto a = num::mul(r, lo(t)), b = num::mul(r, hi(t));
    if (!a || !b) return std::nullopt;
    const auto nmn = num::add(mn, std::min(*a, *b)), nmx = num::add(mx, std::max(*a, *b));
    if (!nmn || !nmx) return std::nullopt;
    mn = *nmn, mx = *nmx;
  }
  return std::pair{mn, mx};
}

// x = sum(c_i t_i) + k. Write c_i = c*q_i + r_i with small |r_i|; when R = sum(r_i t_i) + (k mod c) stays within one
// period, x // c = sum(q_i t_i) + k//c + R//c exactly, and x % c = R - c*(R//c).
UOpRef congruence(const DivInputs& in, const LinearForm& f) {
  const i128 c = in.c;
  const size_t n = f.terms.size();
  if (n > 12) return nullptr;
  // each term's remainder choices: the nearest to zero, both when tied or when the term is alone
  std::vector<std::vector<i128>> choices(n);
  size_t combos = 1;
  for (size_t i = 0; i < n; ++i) {
    const i128 r = num::floormod(f.terms[i].second, c);
    if (r == 0 || 2 * r == c || n == 1) choices[i] = r == 0 ? std::vector<i128>{0} : std::vector<i128>{r, r - c};
    else choices[i] = {std::abs(static_cast<long double>(r)) <= std::abs(static_cast<long double>(r - c)) ? r : r - c};
    combos *= choices[i].size();
    if (combos > 64) return nullptr;
  }
  const i128 kq = *num::floordiv(f.constant, c), kr = num::floormod(f.constant, c);
  std::vector<size_t> pick(n, 0);
  for (size_t combo = 0; combo < combos; ++combo) {
    size_t rest = combo;
    std::vector<std::pair<const UOp*, i128>> rem(n);
    for (size_t i = 0; i < n; ++i) {
      rem[i] = {f.terms[i].first, choices[i][rest % choices[i].size()]};
      rest /= choices[i].size();
    }
    const auto range = range_of(rem, kr);
    if (!range) continue;
    const i128 q0 = *num::floordiv(range->first, c);
    if (q0 != *num::floordiv(range->second, c)) continue;
    LinearForm out{f.dtype, {}, 0};
    if (in.is_mod) {
      out.terms = rem;
      out.constant = kr - q0 * c;
    } else {
      for (size_t i = 0; i < n; ++i) out.terms.emplace_back(f.terms[i].first, (f.terms[i].second - rem[i].second) / c);
      out.constant = kq + q0;
    }
    std::erase_if(out.terms, [](const auto& tc) { return tc.second == 0; });
    return out.build();
  }
  return nullptr;
}

// g = gcd(coefficients, c) > 1: x // c = (x/g with the constant's quotient) // (c/g), and the modulo likewise.
UOpRef common_factor(const DivInputs& in, const LinearForm& f) {
  const i128 g = alg::gcd(f.coeff_gcd(), in.c);
  if (g <= 1 || f.terms.empty()) return nullptr;
  LinearForm inner = f;
  for (auto& tc : inner.terms) tc.second /= g;
  const i128 kq = *num::floordiv(f.constant, g), kr = num::floormod(f.constant, g);
  inner.constant = kq;
  const DType d = f.dtype;
  const UOpRef cg = alg::cint(d, in.c / g);
  if (!in.is_mod) return make2(Ops::FLOORDIV, d, inner.build(), cg);
  UOpRef m = make2(Ops::MUL, d, make2(Ops::FLOORMOD, d, inner.build(), cg), alg::cint(d, g));
  return kr ? make2(Ops::ADD, d, m, alg::cint(d, kr)) : m;
}

// x = A + B with every coefficient of A a multiple of g (g dividing c) and B + (k mod g) within [0, g): B never
// carries into A's multiples of g, so x // c = (A/g + k//g) // (c/g) and x % c = ((A/g + k//g) % (c/g))*g + B + k%g.
// (16r + lane) // 32 with lane < 16 is r // 2: a vector lane's offset inside an aligned group.
UOpRef aligned_part(const DivInputs& in, const LinearForm& f) {
  if (f.terms.size() < 2) return nullptr;
  i128 g = 0;
  std::vector<std::pair<const UOp*, i128>> big, small;
  for (const auto& tc : f.terms) (alg::gcd(tc.second, in.c) > 1 ? big : small).push_back(tc);
  if (big.empty() || small.empty()) return nullptr;
  for (const auto& tc : big) g = alg::gcd(g, tc.second);
  g = alg::gcd(g, in.c);
  const i128 kq = *num::floordiv(f.constant, g), kr = num::floormod(f.constant, g);
  const auto range = range_of(small, kr);
  if (!range || range->first < 0 || range->second >= g) return nullptr;
  LinearForm outer{f.dtype, big, kq};
  for (auto& tc : outer.terms) tc.second /= g;
  const DType d = f.dtype;
  const UOpRef cg = alg::cint(d, in.c / g);
  if (!in.is_mod) return make2(Ops::FLOORDIV, d, outer.build(), cg);
  LinearForm low{d, small, kr};
  return make2(Ops::ADD, d, make2(Ops::MUL, d, make2(Ops::FLOORMOD, d, outer.build(), cg), alg::cint(d, g)), low.build());
}

// Pull whole multiples of c out: x // c = sum(q_i t_i) + kq + (sum(r_i t_i) + kr) // c with 0 <= r_i, kr < c.
// Only done when it moves something (a coefficient >= c or a constant outside [0, c)).
UOpRef split_quotient(const DivInputs& in, const LinearForm& f) {
  const i128 c = in.c;
  bool moves = f.constant < 0 || f.constant >= c;
  for (const auto& tc : f.terms) moves |= tc.second >= c;
  if (!moves) return nullptr;
  LinearForm quo{f.dtype, {}, 0}, rem{f.dtype, {}, 0};
  for (const auto& [t, coef] : f.terms) {
    if (coef >= c) {
      quo.terms.emplace_back(t, *num::floordiv(coef, c));
      if (const i128 r = num::floormod(coef, c)) rem.terms.emplace_back(t, r);
    } else {
      rem.terms.emplace_back(t, coef);
    }
  }
  quo.constant = *num::floordiv(f.constant, c);
  rem.constant = num::floormod(f.constant, c);
  const DType d = f.dtype;
  if (in.is_mod) return make2(Ops::FLOORMOD, d, rem.build(), alg::cint(d, c));
  if (rem.terms.empty()) return quo.build();  // rem.constant < c: its quotient is 0
  return make2(Ops::ADD, d, quo.build(), make2(Ops::FLOORDIV, d, rem.build(), alg::cint(d, c)));
}

// (a % m)*k + rest, modulo c with c | m: the inner modulo does not matter
UOpRef drop_inner_mod(const DivInputs& in, const LinearForm& f) {
  if (!in.is_mod) return nullptr;
  LinearForm g = f;
  bool changed = false;
  for (auto& [t, coef] : g.terms) {
    if (t->op() != Ops::FLOORMOD) continue;
    const auto m = const_int(t->src(1).get());
    if (!m || *m <= 0 || *m % in.c) continue;
    t = t->src(0).get();
    changed = true;
  }
  if (!changed) return nullptr;
  return make2(Ops::FLOORMOD, f.dtype, g.build(), alg::cint(f.dtype, in.c));
}

// (x & mask) // 2^k -> x // 2^k when the mask keeps every bit at or above k
UOpRef mask_then_shift(const DivInputs& in) {
  if (in.is_mod || in.x->op() != Ops::AND || (in.c & (in.c - 1)) != 0) return nullptr;
  const DType d = in.x->dtype();
  for (int side = 0; side < 2; ++side) {
    const auto mask = const_int(in.x->src(1 - side).get());
    if (!mask) continue;
    const i128 all = wrap_int(d.scalar_kind(), -1);
    if (wrap_int(d.scalar_kind(), *mask | (in.c - 1)) == all)
      return make2(Ops::FLOORDIV, d, in.x->src(side), alg::cint(d, in.c));
  }
  return nullptr;
}

UOpRef div_by_constant(const Captured& cap, void*) {
  const UOp* root = cap.root();
  const UOp* x = cap["x"];
  const auto c = const_int(cap["c"]);
  if (!c || *c <= 0 || !is_int(x->dtype())) return nullptr;
  const DivInputs in{root, x, *c, root->op() == Ops::FLOORMOD};
  if (UOpRef r = mask_then_shift(in)) return r;
  // fixed-width ints: the rules below reason about true integer values, so x must not be able to wrap
  if (x->dtype() != DType::weakint() && !alg::safe_range(x)) return nullptr;
  if (UOpRef r = nested_mod(in)) return r;
  if (UOpRef r = nested_div(in)) return r;
  const auto f = LinearForm::of(x, true);
  if (!f) return nullptr;
  if (UOpRef r = drop_inner_mod(in, *f)) return r;
  if (UOpRef r = merge_div_with_constant(in, *f)) return r;
  if (UOpRef r = congruence(in, *f)) return r;
  if (UOpRef r = common_factor(in, *f)) return r;
  if (UOpRef r = aligned_part(in, *f)) return r;
  return split_quotient(in, *f);
}

// ---- division by a variable divisor ----

// What `term` is when divided exactly by the single term `t` (coefficient 1): t itself, or a product with t.
const UOp* quotient_by(const UOp* term, const UOp* t) {
  if (term == t) return nullptr;
  if (term->op() == Ops::MUL) {
    if (term->src(0).get() == t) return term->src(1).get();
    if (term->src(1).get() == t) return term->src(0).get();
  }
  return nullptr;
}

UOpRef div_by_variable(const Captured& cap, void*) {
  const UOp* root = cap.root();
  const UOp *x = cap["x"], *y = cap["y"];
  const DType d = x->dtype();
  if (!is_int(d) || y->op() == Ops::CONST || x->dtype() != d) return nullptr;
  if (d != DType::weakint() && (!alg::safe_range(x) || !alg::safe_range(y))) return nullptr;
  const bool is_mod = root->op() == Ops::FLOORMOD;
  const auto fx = LinearForm::of(x, true), fy = LinearForm::of(y, true);
  if (!fx || !fy || fy->terms.empty()) return nullptr;
  // a common constant factor: (g*A) // (g*B) = A // B, (g*A) % (g*B) = g*(A % B)
  i128 g = alg::gcd(alg::gcd(fx->coeff_gcd(), fx->constant), alg::gcd(fy->coeff_gcd(), fy->constant));
  if (g > 1) {
    LinearForm a = *fx, b = *fy;
    for (auto& tc : a.terms) tc.second /= g;
    for (auto& tc : b.terms) tc.second /= g;
    a.constant /= g, b.constant /= g;
    UOpRef r = make2(root->op(), d, a.build(), b.build());
    return is_mod ? make2(Ops::MUL, d, r, alg::cint(d, g)) : r;
  }
  // a single positive divisor term t: (t*u + v) // t = u + v // t and (t*u + v) % t = v % t
  if (fy->terms.size() != 1 || fy->terms[0].second != 1 || fy->constant != 0 || lo(y) <= 0) return nullptr;
  const UOp* t = fy->terms[0].first;
  std::vector<UOpRef> quo;
  LinearForm rest{d, {}, fx->constant};
  for (const auto& [term, coef] : fx->terms) {
    if (term == t) {
      quo.push_back(alg::cint(d, coef));
    } else if (const UOp* q = quotient_by(term, t)) {
      quo.push_back(coef == 1 ? UOpRef(q) : make2(Ops::MUL, d, UOpRef(q), alg::cint(d, coef)));
    } else {
      rest.terms.emplace_back(term, coef);
    }
  }
  if (quo.empty()) return nullptr;
  const UOpRef rem = make2(root->op(), d, rest.build(), UOpRef(y));
  if (is_mod) return rem;
  quo.push_back(rem);
  return alg::sum(d, quo);
}

}  // namespace

std::vector<Rule> range_rules() {
  std::vector<Rule> r;
  const OpSet decidable{Ops::CMPLT, Ops::CMPNE, Ops::CMPEQ, Ops::FLOORDIV, Ops::FLOORMOD, Ops::CDIV, Ops::CMOD,
                        Ops::MAX, Ops::AND, Ops::OR, Ops::SHR, Ops::BIND, Ops::RANGE};
  r.push_back({op(decidable, {}, "", Pattern::Src::Any), constant_by_range, "constant by range"});
  r.push_back({alu(Ops::MAX, {var("x"), var("y")}),
               [](const Captured& c, void*) -> UOpRef {
                 const UOp *x = c["x"], *y = c["y"];
                 if (!is_int(x->dtype())) return nullptr;
                 if (lo(x) >= hi(y)) return same_as(x);
                 if (hi(x) <= lo(y)) return same_as(y);
                 return nullptr;
               },
               "max decided by range"});
  return r;
}

std::vector<Rule> compare_rules() {
  std::vector<Rule> r;
  r.push_back({alu(Ops::CMPLT, {var("x"), cvar("c")}), canonical_lt, "canonical x<c"});
  // x//d < c  <=>  x < c*d  (d > 0)
  r.push_back({alu(Ops::CMPLT, {alu(Ops::FLOORDIV, {var("x"), cvar("d")}), cvar("c")}),
               [](const Captured& cap, void*) -> UOpRef {
                 const auto d = const_int(cap["d"]), c = const_int(cap["c"]);
                 const UOp* x = cap["x"];
                 if (!d || !c || *d <= 0 || !is_int(x->dtype())) return nullptr;
                 const auto p = num::mul(*c, *d);
                 if (!p || (x->dtype() != DType::weakint() && !fits(x->dtype(), *p))) return nullptr;
                 return make2(Ops::CMPLT, DType::bool_(), UOpRef(x), alg::cint(x->dtype(), *p));
               },
               "x//d<c"});
  // -x < -y  <=>  y < x
  r.push_back({alu(Ops::CMPLT, {alu(Ops::MUL, {var("x"), cnst(Arg::integer(-1))}), alu(Ops::MUL, {var("y"), cnst(Arg::integer(-1))})}),
               [](const Captured& c, void*) -> UOpRef {
                 if (c["x"]->dtype() != DType::weakint()) return nullptr;
                 return make2(Ops::CMPLT, DType::bool_(), c.ref("y"), c.ref("x"));
               },
               "-x<-y"});
  return r;
}

std::vector<Rule> divmod_rules() {
  std::vector<Rule> r;
  r.push_back({op(OpSet{Ops::FLOORDIV, Ops::FLOORMOD}, {var("x"), cvar("c")}), div_by_constant, "div/mod by a constant"});
  r.push_back({op(OpSet{Ops::FLOORDIV, Ops::FLOORMOD}, {var("x"), var("y")}), div_by_variable, "div/mod by a variable"});
  return r;
}

}  // namespace th::sym
