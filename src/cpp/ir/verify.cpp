#include "verify.h"

#include <string>

namespace th {

namespace {

[[noreturn]] void type_error(Ops op, const std::string& msg) {
  throw UOpTypeError(std::string(op_name(op)) + ": " + msg);
}
[[noreturn]] void value_error(Ops op, const std::string& msg) {
  throw UOpValueError(std::string(op_name(op)) + ": " + msg);
}

void expect_nsrc(Ops op, std::span<const UOpRef> src, size_t n) {
  if (src.size() != n)
    type_error(op, "expected " + std::to_string(n) + " source" + (n == 1 ? "" : "s") + ", got " + std::to_string(src.size()));
}

void expect_value(Ops op, std::span<const UOpRef> src) {
  for (const UOpRef& s : src)
    if (s->dtype().is_void()) type_error(op, "source " + std::string(op_name(s->op())) + " has no value (dtypes.void)");
}

void expect_same_dtypes(Ops op, std::span<const UOpRef> src) {
  for (size_t i = 1; i < src.size(); ++i)
    if (src[i]->dtype() != src[0]->dtype())
      type_error(op, "source dtypes differ: " + src[0]->dtype().repr() + " and " + src[i]->dtype().repr());
}

void expect_result(Ops op, DType dtype, DType want) {
  if (dtype != want) type_error(op, "result dtype " + dtype.repr() + " does not match " + want.repr());
}

}  // namespace

void verify_node(Ops op, DType dtype, std::span<const UOpRef> src, const Arg& arg) {
  if (static_cast<size_t>(op) >= kNumOps) value_error(op, "not an op");
  for (const UOpRef& s : src)
    if (!s) type_error(op, "a source is null");
  if (group::Unary.contains(op)) {
    expect_nsrc(op, src, 1);
    expect_value(op, src);
    expect_result(op, dtype, src[0]->dtype());
  } else if (group::Binary.contains(op)) {
    expect_nsrc(op, src, 2);
    expect_value(op, src);
    const DType a = src[0]->dtype();
    if ((op == Ops::SHL || op == Ops::SHR) && src[1]->dtype().is_int()) {
      if (!a.is_int()) type_error(op, "shifts need an int dtype, got " + a.repr());
    } else {
      expect_same_dtypes(op, src);
    }
    expect_result(op, dtype, infer_dtype(op, src, arg));
    if ((op == Ops::XOR || op == Ops::OR || op == Ops::AND) && a.is_float())
      type_error(op, "bitwise ops need an int or bool dtype, got " + a.repr());
  } else if (op == Ops::BYTEDOT) {
    expect_nsrc(op, src, 2);
    expect_value(op, src);
    expect_same_dtypes(op, src);
    if (src[0]->dtype().scalar() != DType::of(Scalar::UINT16))
      type_error(op, "takes uint16 lanes of two bytes each, got " + src[0]->dtype().repr());
    expect_result(op, dtype, infer_dtype(op, src, arg));
  } else if (op == Ops::WHERE) {
    expect_nsrc(op, src, 3);
    expect_value(op, src);
    if (src[0]->dtype().scalar() != DType::bool_())
      type_error(op, "condition must be bool, got " + src[0]->dtype().repr());
    expect_same_dtypes(op, src.subspan(1));
    expect_result(op, dtype, src[1]->dtype());
  } else if (op == Ops::MULACC) {
    expect_nsrc(op, src, 3);
    expect_same_dtypes(op, src);
    expect_result(op, dtype, src[0]->dtype());
  } else if (op == Ops::CAST || op == Ops::BITCAST) {
    expect_nsrc(op, src, 1);
    expect_value(op, src);
    if (dtype.is_void()) type_error(op, "cannot cast to dtypes.void");
    if (op == Ops::BITCAST && !src[0]->dtype().is_ptr() && !dtype.is_ptr() && !dtype.is_weak() &&
        !src[0]->dtype().is_weak() && dtype.itemsize() != src[0]->dtype().itemsize())
      value_error(op, "itemsize differs: " + src[0]->dtype().repr() + " (" + std::to_string(src[0]->dtype().itemsize()) +
                          " bytes) to " + dtype.repr() + " (" + std::to_string(dtype.itemsize()) + " bytes)");
  } else if (op == Ops::CONST) {
    expect_nsrc(op, src, 0);
    if (dtype.is_void() || dtype.is_ptr()) type_error(op, "a constant needs a value dtype, got " + dtype.repr());
  } else if (op == Ops::DEFINE_VAR) {
    expect_nsrc(op, src, 0);
    const auto bad = [&] { type_error(op, "arg must be (name: str, min: int, max: int), got " + arg.repr()); };
    if (arg.kind() != Arg::Kind::Tuple) bad();
    const auto t = arg.as_tuple();
    if (t.size() != 3 || t[0].kind() != Arg::Kind::Str || !t[1].is_number() || !t[2].is_number()) bad();
    if (t[1].to_double() > t[2].to_double()) value_error(op, "min " + t[1].repr() + " exceeds max " + t[2].repr());
    if (!dtype.is_int() && !dtype.is_float()) type_error(op, "a variable needs a number dtype, got " + dtype.repr());
  } else if (op == Ops::BIND) {
    expect_nsrc(op, src, 2);
    if (src[0]->op() != Ops::DEFINE_VAR || src[1]->op() != Ops::CONST)
      type_error(op, "binds a DEFINE_VAR to a CONST, got " + std::string(op_name(src[0]->op())) + " and " +
                         std::string(op_name(src[1]->op())));
  } else if (op == Ops::REDUCE || op == Ops::ALLREDUCE) {
    if (src.empty()) type_error(op, "expected at least 1 source");
  } else if (op == Ops::RANGE) {
    if (src.empty()) type_error(op, "expected its end as the first source");
    if (!src[0]->dtype().is_int()) type_error(op, "the end must be an int, got " + src[0]->dtype().repr());
  }
}

DType infer_dtype(Ops op, std::span<const UOpRef> src, const Arg& arg) {
  if (group::Comparison.contains(op) && !src.empty() && src[0]) return DType::bool_().vec(src[0]->dtype().count());
  if (op == Ops::BYTEDOT && !src.empty() && src[0]) return DType::of(Scalar::INT16).vec(src[0]->dtype().count());
  if ((op == Ops::WHERE) && src.size() == 3 && src[1]) return src[1]->dtype();
  if (group::ALU.contains(op) && !src.empty() && src[0]) return src[0]->dtype();
  switch (op) {
    case Ops::CONST:
      switch (arg.kind()) {
        case Arg::Kind::Bool: return DType::bool_();
        case Arg::Kind::Int: return DType::weakint();
        case Arg::Kind::Float: return DType::weakfloat();
        default: return DType::void_();
      }
    case Ops::DEFINE_VAR: return DType::int32();
    case Ops::BIND: return src.empty() || !src[0] ? DType::void_() : src[0]->dtype();
    case Ops::RANGE: return src.empty() || !src[0] ? DType::int32() : src[0]->dtype();
    case Ops::LOAD:
    case Ops::AFTER:
    case Ops::REDUCE:
    case Ops::ALLREDUCE:
    case Ops::CONTIGUOUS:
    case Ops::CONTIGUOUS_BACKWARD:
    case Ops::DETACH:
    case Ops::COPY:
    case Ops::RESHAPE:
    case Ops::PERMUTE:
    case Ops::EXPAND:
    case Ops::PAD:
    case Ops::FLIP:
    case Ops::SHRINK:
    case Ops::INDEX:
    case Ops::MSELECT:
    case Ops::MSTACK:
    case Ops::UNSHARD:
      return src.empty() || !src[0] ? DType::void_() : src[0]->dtype();
    default: return DType::void_();
  }
}

}  // namespace th
