#include "algebra.h"

#include "numeric.h"
#include "tinyhybrid/const.h"
#include "util/small_vector.h"

namespace th::alg {

std::optional<i128> const_int(const UOp* u) {
  if (u->op() != Ops::CONST) return std::nullopt;
  const Arg& a = u->arg();
  if (a.kind() == Arg::Kind::Int) return a.as_int();
  if (a.kind() == Arg::Kind::Bool) return a.as_bool() ? 1 : 0;
  return std::nullopt;
}

namespace {
i128 bound(const Arg& a) { return a.kind() == Arg::Kind::Bool ? i128(a.as_bool()) : a.as_int(); }
}  // namespace

i128 lo(const UOp* u) { return bound(facts_of(u).vmin); }
i128 hi(const UOp* u) { return bound(facts_of(u).vmax); }

UOpRef cint(DType d, i128 v) { return UOp::const_int(d, v); }

bool safe_range(const UOp* u) {
  const DType d = u->dtype();
  if (!is_int(d)) return false;
  if (d == DType::weakint()) return true;
  const int bits = d.bitsize();
  const i128 limit = static_cast<i128>(1) << (bits - (d.is_unsigned() ? 1 : 2));
  return lo(u) > -limit && hi(u) < limit;
}

i128 gcd(i128 a, i128 b) {
  if (a < 0) a = -a;
  if (b < 0) b = -b;
  while (b) {
    const i128 t = num::rem(a, b);
    a = b;
    b = t;
  }
  return a;
}

std::optional<LinearForm> LinearForm::of(const UOp* u, bool exact, size_t max_terms) {
  if (!is_int(u->dtype())) return std::nullopt;
  LinearForm f;
  f.dtype = u->dtype();
  struct Item {
    const UOp* node;
    i128 mult;
  };
  SmallVector<Item, 16> work{{u, 1}};
  SmallVector<Item, 16> ordered;  // terms in left-to-right order
  // Depth-first, left source first, so terms keep their order of appearance. A shared subtree is expanded once per
  // path, so the walk is capped: a DAG with heavy sharing is not a sum worth normalizing.
  size_t budget = max_terms * 8;
  while (!work.empty()) {
    if (budget-- == 0) return std::nullopt;
    const Item it = work.back();
    work.pop_back();
    const UOp* n = it.node;
    const bool flattens = n->op() == Ops::ADD || (n->op() == Ops::MUL && (const_int(n->src(0).get()) || const_int(n->src(1).get())));
    if (exact && flattens && f.dtype != DType::weakint() && !safe_range(n)) return std::nullopt;
    if (n->op() == Ops::ADD) {
      work.push_back({n->src(1).get(), it.mult});
      work.push_back({n->src(0).get(), it.mult});
      continue;
    }
    if (n->op() == Ops::MUL) {
      const auto c1 = const_int(n->src(1).get()), c0 = const_int(n->src(0).get());
      if (c1 || c0) {
        const auto m = num::mul(it.mult, c1 ? *c1 : *c0);
        if (!m) return std::nullopt;
        work.push_back({(c1 ? n->src(0) : n->src(1)).get(), *m});
        continue;
      }
    }
    if (const auto c = const_int(n)) {
      const auto v = num::mul(it.mult, *c);
      const auto s = v ? num::add(f.constant, *v) : std::nullopt;
      if (!s) return std::nullopt;
      f.constant = *s;
      continue;
    }
    ordered.push_back(it);
  }
  f.terms.reserve(ordered.size());  // one allocation, not one per doubling
  for (const Item& it : ordered) {
    bool merged = false;
    for (auto& [t, c] : f.terms) {
      if (t == it.node) {
        const auto s = num::add(c, it.mult);
        if (!s) return std::nullopt;
        c = *s;
        merged = true;
        break;
      }
    }
    if (!merged) {
      if (f.terms.size() >= max_terms) return std::nullopt;
      f.terms.emplace_back(it.node, it.mult);
    }
  }
  // Fixed-width ints are a ring modulo 2^bits: reduce coefficients so equal forms build equal nodes.
  const Scalar s = f.dtype.scalar_kind();
  for (auto& [t, c] : f.terms) c = wrap_int(s, c);
  f.constant = wrap_int(s, f.constant);
  std::erase_if(f.terms, [](const auto& tc) { return tc.second == 0; });
  return f;
}

namespace {
using Terms = std::vector<std::pair<const UOp*, i128>>;

bool is_const(const UOp* n, DType d, i128 v) {
  const auto c = const_int(n);
  return c && *c == v && n->dtype() == d;
}

// gcds[n]: the gcd of the first n coefficients, so each prefix's common factor is one lookup.
using PrefixGcds = SmallVector<i128, 16>;
PrefixGcds prefix_gcds(const Terms& t) {
  PrefixGcds g{0};
  for (const auto& tc : t) g.push_back(gcd(g.back(), tc.second));
  return g;
}

// The first n terms (the constant aside), built so that every prefix of the sum is itself in canonical form: a
// prefix whose terms share a factor g > 1 is (prefix/g)*g. Parent and child sums then agree, so rewriting reaches a
// fixed point.
UOpRef build_terms(const Terms& t, PrefixGcds& gcds, size_t n, i128 scale, DType d) {
  const i128 g = n >= 2 ? num::quot(gcds[n], scale) : 1;
  if (n >= 2 && g > 1) {
    return UOp::make(Ops::MUL, d, {build_terms(t, gcds, n, scale * g, d), cint(d, g)});
  }
  const auto [term, c] = t[n - 1];
  UOpRef last(term);
  if (const i128 k = num::quot(c, scale); k != 1) last = UOp::make(Ops::MUL, d, {last, cint(d, k)});
  return n == 1 ? last : UOp::make(Ops::ADD, d, {build_terms(t, gcds, n - 1, scale, d), last});
}

bool is_built_terms(const UOp* node, const Terms& t, PrefixGcds& gcds, size_t n, i128 scale, DType d) {
  if (node->dtype() != d) return false;
  const i128 g = n >= 2 ? num::quot(gcds[n], scale) : 1;
  if (n >= 2 && g > 1)
    return node->op() == Ops::MUL && is_const(node->src(1).get(), d, g) &&
           is_built_terms(node->src(0).get(), t, gcds, n, scale * g, d);
  const auto [term, c] = t[n - 1];
  const i128 k = num::quot(c, scale);
  const UOp* last = node;
  if (n > 1) {
    if (node->op() != Ops::ADD) return false;
    last = node->src(1).get();
  }
  if (k == 1 ? last != term : (last->op() != Ops::MUL || last->src(0).get() != term || !is_const(last->src(1).get(), d, k)))
    return false;
  return n == 1 || is_built_terms(node->src(0).get(), t, gcds, n - 1, scale, d);
}
}  // namespace

UOpRef LinearForm::build() const {
  if (terms.empty()) return cint(dtype, constant);
  PrefixGcds gcds = prefix_gcds(terms);
  UOpRef acc = build_terms(terms, gcds, terms.size(), 1, dtype);
  return constant != 0 ? UOp::make(Ops::ADD, dtype, {acc, cint(dtype, constant)}) : acc;
}

bool LinearForm::is_built(const UOp* n) const {
  if (n->dtype() != dtype) return false;
  if (terms.empty()) return is_const(n, dtype, constant);
  if (constant != 0) {
    if (n->op() != Ops::ADD || !is_const(n->src(1).get(), dtype, constant)) return false;
    n = n->src(0).get();
  }
  PrefixGcds gcds = prefix_gcds(terms);
  return is_built_terms(n, terms, gcds, terms.size(), 1, dtype);
}

i128 LinearForm::coeff_gcd() const {
  i128 g = 0;
  for (const auto& tc : terms) g = gcd(g, tc.second);
  return g;
}

UOpRef sum(DType d, const std::vector<UOpRef>& terms) {
  UOpRef acc;
  for (const UOpRef& t : terms) acc = acc ? UOp::make(Ops::ADD, d, {acc, t}) : t;
  return acc ? acc : cint(d, 0);
}

}  // namespace th::alg
