#include "tinyhybrid/math.h"

#include "tinyhybrid/const.h"

namespace th::math {

namespace {

DType dtype_for_number(const Arg& v) {
  switch (v.kind()) {
    case Arg::Kind::Bool: return DType::bool_();
    case Arg::Kind::Int: return DType::weakint();
    case Arg::Kind::Float: return DType::weakfloat();
    default: throw UOpTypeError("expected a number operand, got " + v.repr());
  }
}

// Both operands as nodes of one dtype.
std::pair<UOpRef, UOpRef> resolve(const Operand& a, const Operand& b) {
  const UOpRef* na = std::get_if<UOpRef>(&a);
  const UOpRef* nb = std::get_if<UOpRef>(&b);
  if (na && nb) return {*na, *nb};
  if (!na && !nb) {
    const Arg& x = std::get<Arg>(a);
    const Arg& y = std::get<Arg>(b);
    return {UOp::const_of(dtype_for_number(x), x), UOp::const_of(dtype_for_number(y), y)};
  }
  UOpRef node = na ? *na : *nb;
  const Arg& num = na ? std::get<Arg>(b) : std::get<Arg>(a);
  if (num.kind() == Arg::Kind::Float && !node->dtype().is_float()) node = cast(node, DType::float32().vec(node->dtype().count()));
  UOpRef c = const_like(node, num);
  if (node->dtype().is_vector()) c = UOp::make(Ops::STACK, node->dtype(), std::vector<UOpRef>(node->dtype().count(), c));
  return na ? std::pair{node, c} : std::pair{c, node};
}

}  // namespace

UOpRef const_like(const UOpRef& x, const Arg& v) { return UOp::const_of(x->dtype().scalar(), v); }

UOpRef neg(const UOpRef& x) {
  if (x->dtype().is_bool()) return logical_not(x);
  return alu(Ops::MUL, {x, const_like(x, Arg::integer(-1))});
}

UOpRef logical_not(const UOpRef& x) { return alu(Ops::CMPNE, {x, const_like(x, Arg::boolean(true))}); }

UOpRef binary(Binary op, const Operand& a, const Operand& b) {
  // x - number is x + (-number): the negation happens on the number, as Python would.
  if (const Arg* n = std::get_if<Arg>(&b); op == Binary::Sub && n && std::holds_alternative<UOpRef>(a)) {
    if (n->kind() == Arg::Kind::Int) return binary(Binary::Add, a, Arg::integer(-n->as_int()));
    if (n->kind() == Arg::Kind::Float) return binary(Binary::Add, a, Arg::floating(-n->as_float()));
  }
  auto [x, y] = resolve(a, b);
  switch (op) {
    case Binary::Add: return alu(Ops::ADD, {x, y});
    case Binary::Sub: return alu(Ops::ADD, {x, neg(y)});
    case Binary::Mul: return alu(Ops::MUL, {x, y});
    case Binary::TrueDiv: {
      if (!x->dtype().is_float()) x = cast(x, DType::float32());
      if (!y->dtype().is_float()) y = cast(y, x->dtype());
      return alu(Ops::MUL, {x, alu(Ops::RECIPROCAL, {y})});
    }
    case Binary::FloorDiv: return alu(Ops::FLOORDIV, {x, y});
    case Binary::Mod: return alu(Ops::FLOORMOD, {x, y});
    case Binary::And: return alu(Ops::AND, {x, y});
    case Binary::Or: return alu(Ops::OR, {x, y});
    case Binary::Xor: return alu(Ops::XOR, {x, y});
    case Binary::Shl: return alu(Ops::SHL, {x, y});
    case Binary::Shr: return alu(Ops::SHR, {x, y});
    case Binary::Lt: return alu(Ops::CMPLT, {x, y});
    case Binary::Gt: return alu(Ops::CMPLT, {y, x});
    case Binary::Le: return logical_not(alu(Ops::CMPLT, {y, x}));
    case Binary::Ge: return logical_not(alu(Ops::CMPLT, {x, y}));
    case Binary::Ne: return alu(Ops::CMPNE, {x, y});
    case Binary::Eq: return alu(Ops::CMPEQ, {x, y});
    case Binary::Max: return alu(Ops::MAX, {x, y});
    case Binary::Min: return alu(Ops::WHERE, {alu(Ops::CMPLT, {x, y}), x, y});
    case Binary::Pow: return alu(Ops::POW, {x, y});
  }
  throw UOpValueError("unknown binary operator");
}

UOpRef where(const UOpRef& cond, const Operand& a, const Operand& b) {
  auto [x, y] = resolve(a, b);
  return alu(Ops::WHERE, {cond, x, y});
}

UOpRef unary(Ops op, const UOpRef& x) {
  if (!group::Unary.contains(op)) throw UOpValueError(std::string(op_name(op)) + " is not a unary op");
  if (op != Ops::NEG && op != Ops::TRUNC && !x->dtype().is_float())
    throw UOpTypeError(std::string(op_name(op)) + ": needs a float dtype, got " + x->dtype().repr());
  return alu(op, {x});
}

}  // namespace th::math
