// Node builders with tinygrad's conventions: inferred dtypes, and weak constants that commit to the other side.
#include <vector>

#include "tinyhybrid/const.h"
#include "tinyhybrid/uop.h"

namespace th {

namespace {
// A weak node adopts the dtype of a strong partner: a weak CONST is rebuilt, anything else is cast.
UOpRef commit(const UOpRef& weak, DType to) {
  if (weak->op() == Ops::CONST) return UOp::make(Ops::CONST, to, {}, weak->arg());
  return UOp::make(Ops::CAST, to, {weak});
}

bool promotable(DType d) { return !d.is_weak() && !d.is_ptr() && !d.is_void(); }

bool can_commit(DType weak, DType strong) {
  if (!weak.is_weak() || strong.is_weak()) return false;
  if (weak.scalar_kind() == Scalar::WEAKINT) return strong.is_int() || strong.is_float();
  return strong.is_float();
}
}  // namespace

UOpRef alu(Ops op, std::span<const UOpRef> src) {
  std::vector<UOpRef> s(src.begin(), src.end());
  // The value operands: all for binary ops, the two branches for WHERE.
  const size_t first = op == Ops::WHERE ? 1 : 0;
  const bool shift = op == Ops::SHL || op == Ops::SHR;
  if (s.size() >= first + 2 && !shift) {
    for (size_t i = first; i < s.size(); ++i) {
      for (size_t j = first; j < s.size(); ++j) {
        if (i != j && s[i] && s[j] && can_commit(s[i]->dtype(), s[j]->dtype())) s[i] = commit(s[i], s[j]->dtype());
      }
    }
    // weakint with weakfloat: both become weakfloat
    for (size_t i = first; i < s.size(); ++i)
      for (size_t j = first; j < s.size(); ++j)
        if (s[i] && s[j] && s[i]->dtype() == DType::weakint() && s[j]->dtype() == DType::weakfloat())
          s[i] = commit(s[i], DType::weakfloat());
    // two strong values of different dtypes (an int and a long Variable added) both become the least dtype both
    // promote to, as tinygrad's arithmetic casts them
    if (op != Ops::BYTEDOT && s.size() == first + 2 && s[first] && s[first + 1]) {
      const DType a = s[first]->dtype(), b = s[first + 1]->dtype();
      if (a != b && promotable(a) && promotable(b) && a.count() == b.count()) {
        const DType to = least_upper(a.scalar(), b.scalar()).vec(a.count());
        s[first] = cast(s[first], to);
        s[first + 1] = cast(s[first + 1], to);
      }
    }
  }
  if (shift && s.size() == 2 && s[1] && s[0] && s[1]->dtype().is_weak()) s[1] = commit(s[1], s[0]->dtype());
  return UOp::make(op, infer_dtype(op, s, Arg()), s);
}

UOpRef alu(Ops op, std::initializer_list<UOpRef> src) {
  return alu(op, std::span<const UOpRef>(src.begin(), src.size()));
}

UOpRef cast(const UOpRef& x, DType to) {
  if (x->dtype() == to) return x;
  return UOp::make(Ops::CAST, to, {x});
}

UOpRef bitcast(const UOpRef& x, DType to) {
  if (x->dtype() == to) return x;
  return UOp::make(Ops::BITCAST, to, {x});
}

}  // namespace th
