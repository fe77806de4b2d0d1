// Value ranges (vmin/vmax): computed bottom-up over a toposort, once per node, and kept on the node.
// The bounds must hold under the semantics fold() gives each op, so ranges that would wrap become the dtype's range.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "symbolic/numeric.h"
#include "tinyhybrid/graph.h"
#include "tinyhybrid/symbolic.h"

namespace th {

namespace {

using num::u128;
constexpr double kInf = std::numeric_limits<double>::infinity();

struct IR {
  i128 lo, hi;
};
struct FR {
  double lo, hi;
};
using OIR = std::optional<IR>;

NodeFacts full(DType dt) {
  auto [lo, hi] = dtype_range(dt);
  return {std::move(lo), std::move(hi)};
}

const NodeFacts& src_facts(const UOp* n, size_t i) { return *n->src(i)->facts(); }

// A source's range as integers (bools as 0/1); nullopt for float or valueless sources.
OIR int_range(const NodeFacts& f) {
  const auto get = [](const Arg& a) -> std::optional<i128> {
    if (a.kind() == Arg::Kind::Bool) return a.as_bool() ? 1 : 0;
    if (a.kind() == Arg::Kind::Int) return a.as_int();
    return std::nullopt;
  };
  const auto lo = get(f.vmin), hi = get(f.vmax);
  if (!lo || !hi) return std::nullopt;
  return IR{*lo, *hi};
}
std::optional<FR> float_range(const NodeFacts& f) {
  if (!f.vmin.is_number() || !f.vmax.is_number()) return std::nullopt;
  return FR{f.vmin.to_double(), f.vmax.to_double()};
}
// The full float range is also what "may be NaN" looks like.
bool is_full(const FR& r) { return r.lo == -kInf && r.hi == kInf; }
bool is_point(const NodeFacts& f) { return f.vmin.is_number() && f.vmin == f.vmax; }

NodeFacts make_int(DType dt, const OIR& r) {
  if (!r) return full(dt);
  if (dt.is_bool()) {
    if (r->lo < 0 || r->hi > 1) return full(dt);
    return {Arg::boolean(r->lo == 1), Arg::boolean(r->hi == 1)};
  }
  if (dt.scalar_kind() != Scalar::WEAKINT && !(fits(dt, r->lo) && fits(dt, r->hi))) return full(dt);
  return {Arg::integer(r->lo), Arg::integer(r->hi)};
}

NodeFacts make_float(DType dt, const std::optional<FR>& r) {
  if (!r) return full(dt);
  const Scalar s = dt.scalar_kind();
  const double lo = round_float(s, r->lo), hi = round_float(s, r->hi);
  if (std::isnan(lo) || std::isnan(hi)) return full(dt);
  return {Arg::floating(lo), Arg::floating(hi)};
}

NodeFacts make_bool(bool lo, bool hi) { return {Arg::boolean(lo), Arg::boolean(hi)}; }

// ---- integer interval arithmetic (checked: an overflow gives nullopt, which becomes the dtype's range) ----

OIR corners(std::initializer_list<std::optional<i128>> vals) {
  IR r{num::kI128Max, num::kI128Min};
  for (const auto& v : vals) {
    if (!v) return std::nullopt;
    r.lo = std::min(r.lo, *v);
    r.hi = std::max(r.hi, *v);
  }
  return r;
}
OIR both(std::optional<i128> lo, std::optional<i128> hi) {
  if (!lo || !hi) return std::nullopt;
  return IR{*lo, *hi};
}
OIR add(const OIR& a, const OIR& b) { return a && b ? both(num::add(a->lo, b->lo), num::add(a->hi, b->hi)) : std::nullopt; }
OIR sub(const IR& a, const IR& b) { return both(num::sub(a.lo, b.hi), num::sub(a.hi, b.lo)); }
OIR mul(const IR& a, const IR& b) {
  return corners({num::mul(a.lo, b.lo), num::mul(a.lo, b.hi), num::mul(a.hi, b.lo), num::mul(a.hi, b.hi)});
}

// Division by a divisor range of one sign: the quotient is monotone in each operand, so the corners bound it.
OIR div(const IR& a, const IR& b, bool floor) {
  if (a.lo > a.hi) return IR{0, 0};  // an empty numerator (a RANGE with end 0)
  if (b.lo <= 0 && b.hi >= 0) return std::nullopt;
  const auto q = [floor](i128 x, i128 y) { return floor ? num::floordiv(x, y) : num::cdiv(x, y); };
  return corners({q(a.lo, b.lo), q(a.lo, b.hi), q(a.hi, b.lo), q(a.hi, b.hi)});
}

// C remainder: the dividend's sign, smaller in magnitude than both the dividend and the divisor.
OIR cmod(const IR& a, const IR& b) {
  if (a.lo > a.hi) return IR{0, 0};
  if (b.lo <= 0 && b.hi >= 0) return std::nullopt;
  if (b.lo == b.hi && b.lo != num::kI128Min) {
    // One divisor: where the dividend stays within one multiple of it, the remainder is monotone.
    const i128 m = b.lo < 0 ? -b.lo : b.lo;
    if (a.lo >= 0 && a.lo / m == a.hi / m) return IR{a.lo % m, a.hi % m};
    if (a.hi <= 0 && a.lo != num::kI128Min && -a.hi / m == -a.lo / m) return IR{-(-a.lo % m), -(-a.hi % m)};
  }
  const i128 top = std::max(b.lo == num::kI128Min ? num::kI128Max : (b.lo < 0 ? -b.lo : b.lo), b.hi < 0 ? -b.hi : b.hi) - 1;
  return IR{a.lo >= 0 ? 0 : std::max(a.lo, -top), a.hi <= 0 ? 0 : std::min(a.hi, top)};
}

// Python remainder: the divisor's sign.
OIR floormod(const IR& a, const IR& b) {
  if (a.lo > a.hi) return IR{0, 0};
  if (b.lo <= 0 && b.hi >= 0) return std::nullopt;
  if (b.lo == b.hi) {
    const i128 c = b.lo;
    const auto qa = num::floordiv(a.lo, c), qb = num::floordiv(a.hi, c);
    if (qa && qb && *qa == *qb) return IR{num::floormod(a.lo, c), num::floormod(a.hi, c)};
    return c > 0 ? IR{0, c - 1} : IR{c + 1, 0};
  }
  if (b.lo > 0) return IR{0, a.lo >= 0 ? std::min(a.hi, b.hi - 1) : b.hi - 1};
  return IR{a.hi <= 0 ? std::max(a.lo, b.lo + 1) : b.lo + 1, 0};
}

// All ones up to the highest set bit of x >= 0: a bound for OR and XOR of values up to x.
i128 fill_bits(i128 x) {
  i128 m = 0;
  while (m < x) m = m * 2 + 1;
  return m;
}

OIR bit_and(const IR& a, const IR& b) {
  if (a.lo >= 0 && b.lo >= 0) return IR{0, std::min(a.hi, b.hi)};
  if (a.lo >= 0) return IR{0, a.hi};  // a & b keeps a subset of a's bits
  if (b.lo >= 0) return IR{0, b.hi};
  // Both may be negative: the shared high ones bound it below, and a negative result lies below both.
  const i128 lo = ~fill_bits(~std::min(a.lo, b.lo));
  if (a.hi < 0 && b.hi < 0) return IR{lo, std::min(a.hi, b.hi)};
  return IR{lo, std::max(a.hi, b.hi)};
}

OIR bit_or(const IR& a, const IR& b) {
  if (a.lo >= 0 && b.lo >= 0) return IR{std::max(a.lo, b.lo), fill_bits(std::max(a.hi, b.hi))};
  if (a.hi < 0 && b.hi < 0) return IR{std::max(a.lo, b.lo), -1};
  // A negative operand makes the result negative and no smaller than that operand.
  return IR{std::min(a.lo, b.lo), std::max<i128>(-1, fill_bits(std::max<i128>({a.hi, b.hi, 0})))};
}

OIR bit_xor(DType dt, const IR& a, const IR& b) {
  // x ^ all-ones is the bitwise not, which reverses the order.
  const i128 ones = dt.is_unsigned() ? dtype_range(dt).second.as_int() : -1;
  if (b.lo == b.hi && b.lo == ones) return dt.is_unsigned() ? IR{ones - a.hi, ones - a.lo} : IR{~a.hi, ~a.lo};
  if (a.lo == a.hi && a.lo == ones) return dt.is_unsigned() ? IR{ones - b.hi, ones - b.lo} : IR{~b.hi, ~b.lo};
  if (a.lo >= 0 && b.lo >= 0) return IR{0, fill_bits(std::max(a.hi, b.hi))};
  if (a.hi < 0 && b.hi < 0) return IR{0, fill_bits(std::max(~a.lo, ~b.lo))};  // a ^ b == ~a ^ ~b
  return std::nullopt;
}

// A shift is a multiplication or floor division by a power of two, as long as the amount is defined.
OIR shift(Ops op, DType dt, const IR& a, const IR& k) {
  const int bits = dt.scalar_kind() == Scalar::WEAKINT ? 127 : dt.bitsize();
  if (k.lo < 0 || k.hi >= bits || k.lo > k.hi) return std::nullopt;
  const IR p{i128{1} << static_cast<int>(k.lo), i128{1} << static_cast<int>(k.hi)};
  return op == Ops::SHL ? mul(a, p) : div(a, p, true);
}

template <class T>
NodeFacts compare(Ops op, T alo, T ahi, T blo, T bhi) {
  const bool disjoint = ahi < blo || bhi < alo;
  const bool same_point = alo == ahi && blo == bhi && alo == blo;
  switch (op) {
    case Ops::CMPLT: return make_bool(ahi < blo, alo < bhi);
    case Ops::CMPNE: return make_bool(disjoint, !same_point);
    default: return make_bool(same_point, !disjoint);  // CMPEQ
  }
}

NodeFacts int_alu(const UOp* n, DType dt) {
  const Ops op = n->op();
  IR s[3]{};
  for (size_t i = 0; i < n->nsrc() && i < 3; ++i) {
    const auto r = int_range(src_facts(n, i));
    if (!r) return full(dt);
    s[i] = *r;
  }
  const IR &a = s[0], &b = s[1];
  switch (op) {
    case Ops::ADD: return make_int(dt, add(a, b));
    case Ops::SUB: return make_int(dt, sub(a, b));
    case Ops::MUL: return make_int(dt, mul(a, b));
    case Ops::MULACC: return make_int(dt, add(mul(a, b), s[2]));
    case Ops::NEG: return make_int(dt, both(num::neg(a.hi), num::neg(a.lo)));
    case Ops::MAX: return make_int(dt, IR{std::max(a.lo, b.lo), std::max(a.hi, b.hi)});
    case Ops::TRUNC: return make_int(dt, a);
    case Ops::CDIV: return make_int(dt, div(a, b, false));
    case Ops::FLOORDIV: return make_int(dt, div(a, b, true));
    case Ops::CMOD: return make_int(dt, cmod(a, b));
    case Ops::FLOORMOD: return make_int(dt, floormod(a, b));
    case Ops::SHL:
    case Ops::SHR: return make_int(dt, shift(op, dt, a, b));
    case Ops::AND:
      if (dt.is_bool()) return make_bool(a.lo && b.lo, a.hi && b.hi);
      return make_int(dt, bit_and(a, b));
    case Ops::OR:
      if (dt.is_bool()) return make_bool(a.lo || b.lo, a.hi || b.hi);
      return make_int(dt, bit_or(a, b));
    case Ops::XOR:
      if (dt.is_bool()) {
        if (a.lo == a.hi) return a.lo ? make_bool(!b.hi, !b.lo) : make_bool(b.lo, b.hi);
        if (b.lo == b.hi) return b.lo ? make_bool(!a.hi, !a.lo) : make_bool(a.lo, a.hi);
        return full(dt);
      }
      return make_int(dt, bit_xor(dt, a, b));
    default: return full(dt);
  }
}

NodeFacts float_alu(const UOp* n, DType dt) {
  const Ops op = n->op();
  FR s[3]{};
  for (size_t i = 0; i < n->nsrc() && i < 3; ++i) {
    const auto r = float_range(src_facts(n, i));
    if (!r || is_full(*r)) return full(dt);  // a source that may be NaN makes this one so too
    s[i] = *r;
  }
  const Scalar sc = dt.scalar_kind();
  const auto R = [sc](double x) { return round_float(sc, x); };
  const FR &a = s[0], &b = s[1];
  const auto has_zero = [](const FR& r) { return r.lo <= 0.0 && r.hi >= 0.0; };
  const auto has_inf = [](const FR& r) { return std::isinf(r.lo) || std::isinf(r.hi); };
  // Rounding is monotone, so rounded corners bound the rounded results; the checks reject the NaN cases
  // (inf - inf, 0 * inf, 0 / 0, inf / inf) that lie inside the operand ranges.
  const auto product = [&](const FR& x, const FR& y) -> std::optional<FR> {
    if ((has_zero(x) && has_inf(y)) || (has_zero(y) && has_inf(x))) return std::nullopt;
    const double c[4] = {R(x.lo * y.lo), R(x.lo * y.hi), R(x.hi * y.lo), R(x.hi * y.hi)};
    return FR{*std::min_element(c, c + 4), *std::max_element(c, c + 4)};
  };
  const auto sum = [&](const FR& x, const FR& y) -> std::optional<FR> {
    if ((x.hi == kInf && y.lo == -kInf) || (x.lo == -kInf && y.hi == kInf)) return std::nullopt;
    return FR{R(x.lo + y.lo), R(x.hi + y.hi)};
  };
  switch (op) {
    case Ops::ADD: return make_float(dt, sum(a, b));
    case Ops::SUB: return make_float(dt, sum(a, FR{-b.hi, -b.lo}));
    case Ops::MUL: return make_float(dt, product(a, b));
    case Ops::MULACC: {
      const auto p = product(a, b);
      return make_float(dt, p ? sum(*p, s[2]) : std::nullopt);
    }
    case Ops::FDIV: {
      if (has_zero(b) || (has_inf(a) && has_inf(b))) return full(dt);
      const double c[4] = {R(a.lo / b.lo), R(a.lo / b.hi), R(a.hi / b.lo), R(a.hi / b.hi)};
      return make_float(dt, FR{*std::min_element(c, c + 4), *std::max_element(c, c + 4)});
    }
    case Ops::MAX: return make_float(dt, FR{std::max(a.lo, b.lo), std::max(a.hi, b.hi)});
    case Ops::NEG: return make_float(dt, FR{-a.hi, -a.lo});
    case Ops::RECIPROCAL: return has_zero(a) ? full(dt) : make_float(dt, FR{1.0 / a.hi, 1.0 / a.lo});
    case Ops::SQRT: return a.lo < 0 ? full(dt) : make_float(dt, FR{std::sqrt(a.lo), std::sqrt(a.hi)});
    case Ops::LOG2: return a.lo < 0 ? full(dt) : make_float(dt, FR{std::log2(a.lo), std::log2(a.hi)});
    case Ops::EXP2: return make_float(dt, FR{std::exp2(a.lo), std::exp2(a.hi)});
    case Ops::SIN: return has_inf(a) ? full(dt) : make_float(dt, FR{-1.0, 1.0});
    case Ops::TRUNC: return make_float(dt, FR{std::trunc(a.lo), std::trunc(a.hi)});
    default: return full(dt);  // POW, float division and modulo: not bounded here
  }
}

NodeFacts union_of(DType dt, const NodeFacts& x, const NodeFacts& y) {
  if (dt.is_float()) {
    const auto a = float_range(x), b = float_range(y);
    if (!a || !b) return full(dt);
    return make_float(dt, FR{std::min(a->lo, b->lo), std::max(a->hi, b->hi)});
  }
  const auto a = int_range(x), b = int_range(y);
  if (!a || !b) return full(dt);
  return make_int(dt, IR{std::min(a->lo, b->lo), std::max(a->hi, b->hi)});
}

NodeFacts alu_range(const UOp* n, DType dt) {
  const Ops op = n->op();
  // Known int or bool operands: the folded value is exact (floats are left out: a 0.0 bound may be -0.0).
  bool points = n->nsrc() > 0;
  for (const UOpRef& s : n->src()) points = points && !s->dtype().is_float() && is_point(*s->facts());
  if (points) {
    std::vector<Arg> vals;
    for (const UOpRef& s : n->src()) vals.push_back(s->facts()->vmin);
    if (const auto v = fold(op, dt, vals, n->src(0)->dtype())) {
      if (dt.is_float()) return make_float(dt, FR{v->to_double(), v->to_double()});
      return {*v, *v};
    }
  }
  if (group::Comparison.contains(op)) {
    const NodeFacts &x = src_facts(n, 0), &y = src_facts(n, 1);
    if (n->src(0)->dtype().is_float() || n->src(1)->dtype().is_float()) {
      const auto a = float_range(x), b = float_range(y);
      if (!a || !b || is_full(*a) || is_full(*b)) return make_bool(false, true);
      return compare(op, a->lo, a->hi, b->lo, b->hi);
    }
    const auto a = int_range(x), b = int_range(y);
    if (!a || !b) return make_bool(false, true);
    return compare(op, a->lo, a->hi, b->lo, b->hi);
  }
  if (op == Ops::WHERE) {
    const NodeFacts& c = src_facts(n, 0);
    if (c.vmin.kind() == Arg::Kind::Bool && c.vmin.as_bool()) return src_facts(n, 1);
    if (c.vmax.kind() == Arg::Kind::Bool && !c.vmax.as_bool()) return src_facts(n, 2);
    // (a < b).where(a, b) is min(a, b) and (a < b).where(b, a) is max(a, b): tighter than either branch's range
    if (const UOp* cmp = n->src(0).get(); cmp->op() == Ops::CMPLT && (dt.is_int() || dt.is_bool())) {
      const UOp *a = cmp->src(0).get(), *b = cmp->src(1).get(), *t = n->src(1).get(), *f = n->src(2).get();
      const auto ra = int_range(src_facts(cmp, 0)), rb = int_range(src_facts(cmp, 1));
      if (ra && rb && t == a && f == b) return make_int(dt, IR{std::min(ra->lo, rb->lo), std::min(ra->hi, rb->hi)});
      if (ra && rb && t == b && f == a) return make_int(dt, IR{std::max(ra->lo, rb->lo), std::max(ra->hi, rb->hi)});
    }
    return union_of(dt, src_facts(n, 1), src_facts(n, 2));
  }
  if (dt.is_float()) return float_alu(n, dt);
  if (dt.is_int() || dt.is_bool()) return int_alu(n, dt);
  return full(dt);
}

NodeFacts cast_range(const UOp* n, DType dt) {
  const NodeFacts& f = src_facts(n, 0);
  const bool from_float = n->src(0)->dtype().is_float();
  const auto fr = float_range(f);
  if (!fr) return full(dt);
  if (dt.is_bool()) {
    if (fr->lo > 0 || fr->hi < 0) return make_bool(true, true);  // NaN casts to true too
    if (fr->lo == 0 && fr->hi == 0) return make_bool(false, false);
    return full(dt);
  }
  if (dt.is_int()) {
    if (!from_float) {
      const auto r = int_range(f);
      return make_int(dt, r);
    }
    // Float to int: out-of-range values are undefined behaviour, so the part of the source inside the
    // destination bounds the result; a source entirely outside (or possibly NaN) says nothing.
    if (is_full(*fr)) return full(dt);
    const auto lo = num::trunc_saturate(fr->lo), hi = num::trunc_saturate(fr->hi);
    if (dt.scalar_kind() == Scalar::WEAKINT) return make_int(dt, both(lo, hi));
    const i128 dmin = dtype_range(dt).first.as_int(), dmax = dtype_range(dt).second.as_int();
    if (*lo > dmax || *hi < dmin) return full(dt);
    return make_int(dt, IR{std::max(*lo, dmin), std::min(*hi, dmax)});
  }
  if (dt.is_float()) {
    if (from_float) return is_full(*fr) ? full(dt) : make_float(dt, fr);
    const auto r = int_range(f);
    if (!r) return full(dt);
    const Scalar s = dt.scalar_kind();
    return make_float(dt, FR{num::int_to_float(s, r->lo), num::int_to_float(s, r->hi)});
  }
  return full(dt);
}

NodeFacts var_range(DType dt, const Arg& arg) {
  if (arg.kind() != Arg::Kind::Tuple || arg.as_tuple().size() != 3) return full(dt);
  const Arg &lo = arg.as_tuple()[1], &hi = arg.as_tuple()[2];
  if (!lo.is_number() || !hi.is_number()) return full(dt);
  if (dt.is_float()) return make_float(dt, FR{lo.to_double(), hi.to_double()});
  if (!dt.is_int()) return full(dt);
  // Bounds given as floats admit the integers between them.
  const auto bound = [](const Arg& a, bool upper) -> std::optional<i128> {
    if (a.kind() == Arg::Kind::Float) return num::trunc_saturate(upper ? std::floor(a.as_float()) : std::ceil(a.as_float()));
    return a.kind() == Arg::Kind::Bool ? i128{a.as_bool()} : a.as_int();
  };
  auto l = bound(lo, false), h = bound(hi, true);
  if (!l || !h) return full(dt);
  if (dt.scalar_kind() != Scalar::WEAKINT) {
    const i128 dmin = dtype_range(dt).first.as_int(), dmax = dtype_range(dt).second.as_int();
    if (*l > dmax || *h < dmin) return full(dt);
    l = std::max(*l, dmin);
    h = std::min(*h, dmax);
  }
  return make_int(dt, IR{*l, *h});
}

NodeFacts compute(const UOp* n) {
  const DType dt = n->dtype();
  if (dt.is_void()) return {};
  const Ops op = n->op();
  switch (op) {
    case Ops::CONST: {
      const Arg& v = n->arg();
      if (!v.is_number()) return full(dt);
      if (dt.is_float()) return make_float(dt, FR{v.to_double(), v.to_double()});  // NaN: the full range
      const auto c = num::cast_value(dt, v);
      return c ? NodeFacts{*c, *c} : full(dt);
    }
    case Ops::DEFINE_VAR: return var_range(dt, n->arg());
    case Ops::BIND:
    case Ops::AFTER:
    case Ops::GEP:
    case Ops::INDEX:
      if (n->nsrc() > 0 && n->src(0)->dtype().scalar() == dt.scalar()) return src_facts(n, 0);
      return full(dt);
    case Ops::RANGE:
    case Ops::SPECIAL: {
      // 0 .. end-1; a SPECIAL without an end source has only its dtype to go on.
      if (n->nsrc() == 0) return full(dt);
      const auto end = int_range(src_facts(n, 0));
      return make_int(dt, end ? both(0, num::sub(end->hi, 1)) : std::nullopt);
    }
    case Ops::STACK:
    case Ops::VECTORIZE: {
      if (n->nsrc() == 0) return full(dt);
      NodeFacts r = src_facts(n, 0);
      for (size_t i = 1; i < n->nsrc(); ++i) r = union_of(dt, r, src_facts(n, i));
      return r;
    }
    case Ops::CAST: return n->nsrc() == 1 ? cast_range(n, dt) : full(dt);
    case Ops::BITCAST: {
      if (n->nsrc() != 1) return full(dt);
      const NodeFacts& f = src_facts(n, 0);
      if (!n->src(0)->dtype().is_float() && is_point(f))
        if (const auto v = fold(Ops::BITCAST, dt, {f.vmin}, n->src(0)->dtype()))
          return dt.is_float() ? make_float(dt, FR{v->to_double(), v->to_double()}) : NodeFacts{*v, *v};
      return full(dt);
    }
    default:
      if (group::ALU.contains(op) && n->nsrc() == (group::Unary.contains(op) ? 1u : group::Binary.contains(op) ? 2u : 3u))
        return alu_range(n, dt);
      return full(dt);
  }
}

}  // namespace

NodeFacts::~NodeFacts() {
  if (const UOp* s = simplified.load(std::memory_order_relaxed)) UOpRef::adopt(s);  // released here
}

const NodeFacts& facts_of(const UOp* u) {
  if (const NodeFacts* f = u->facts()) return *f;
  // The common case in a rewrite: a new node over sources that already have their facts. No walk needed.
  bool sources_done = true;
  for (const UOpRef& s : u->src()) sources_done = sources_done && s->facts() != nullptr;
  if (sources_done) return *u->install_facts(std::make_unique<NodeFacts>(compute(u)));
  // A few new nodes under it (a rule's result): a short post-order walk on a fixed stack, without the toposort's
  // allocations. A node shared along two paths may be pushed twice (its facts are then installed once); past the
  // stack's size the toposort takes over.
  {
    constexpr size_t kStack = 32;
    std::array<const UOp*, kStack> stack;
    size_t n = 0, pushes = 0;
    stack[n++] = u;
    while (n && pushes < 4 * kStack) {
      const UOp* top = stack[n - 1];
      bool ready = true;
      for (const UOpRef& s : top->src())
        if (!s->facts()) {
          if (n == kStack) break;
          stack[n++] = s.get();
          ++pushes;
          ready = false;
        }
      if (!ready) continue;
      if (n == kStack && std::any_of(top->src().begin(), top->src().end(), [](const UOpRef& s) { return !s->facts(); })) break;
      --n;
      if (!top->facts()) top->install_facts(std::make_unique<NodeFacts>(compute(top)));
    }
    if (const NodeFacts* f = u->facts()) return *f;
  }
  // Only nodes without facts are walked; the toposort lists sources first, so each node finds its sources done.
  const auto order = toposort(u, [](const UOp* n) { return n->facts() == nullptr; });
  for (const UOp* n : order)
    if (!n->facts()) n->install_facts(std::make_unique<NodeFacts>(compute(n)));
  return *u->facts();
}

}  // namespace th
