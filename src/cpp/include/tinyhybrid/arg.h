// Arg: the payload of a UOp (and its tag). Holds Python's plain values natively so that C++ rules can
// read and compare them; anything else is an Opaque object compared and hashed by whoever made it.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tinyhybrid/dtype.h"
#include "tinyhybrid/ops.h"

namespace th {

using i128 = __int128;

// A foreign value (in practice a Python object). Implementations must make equal() and hash() agree.
class Opaque {
 public:
  virtual ~Opaque() = default;
  virtual size_t hash() const = 0;
  virtual bool equal(const Opaque& other) const = 0;
  virtual std::string repr() const = 0;
};

class Arg {
 public:
  enum class Kind : uint8_t { None, Bool, Int, Float, Str, Tuple, DType, Enum, Opaque };

  Arg() = default;  // None
  static Arg none() { return Arg(); }
  static Arg boolean(bool v);
  static Arg integer(i128 v);
  static Arg floating(double v);  // all NaNs are one value; -0.0 and 0.0 are different values
  static Arg string(std::string_view v);
  static Arg tuple(std::vector<Arg> items);
  static Arg dtype(DType d);
  static Arg enumeration(EnumKind kind, int64_t value);
  static Arg op(Ops o) { return enumeration(EnumKind::Ops, static_cast<int64_t>(o)); }
  static Arg opaque(std::shared_ptr<const Opaque> obj);

  Kind kind() const { return kind_; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_number() const { return kind_ == Kind::Bool || kind_ == Kind::Int || kind_ == Kind::Float; }
  bool as_bool() const;
  i128 as_int() const;
  double as_float() const;
  // A number of any kind as a double (bool and int convert).
  double to_double() const;
  const std::string& as_str() const;
  std::span<const Arg> as_tuple() const;
  DType as_dtype() const;
  EnumKind enum_kind() const;
  int64_t enum_value() const;
  Ops as_op() const;
  const Opaque& as_opaque() const;
  std::shared_ptr<const Opaque> opaque_ptr() const;

  size_t hash() const;
  bool operator==(const Arg& o) const;
  bool operator!=(const Arg& o) const { return !(*this == o); }
  // Python-like repr: None, True, 3, 1.5, -0.0, nan, inf, 'str', (1, 2), dtypes.int, Ops.ADD
  std::string repr() const;

 private:
  // 40 bytes: a node carries one inline, so its size matters for graph walks.
  Kind kind_ = Kind::None;
  uint8_t enum_kind_ = 0;
  union {
    bool b_;
    int64_t i_[2] = {0, 0};  // an i128 as two words, keeping the Arg 8-byte aligned
    double f_;
    const DTypeData* d_;
    int64_t e_;
  };
  // Str, Tuple and Opaque payloads: immutable, shared between copies, carrying their own hash.
  std::shared_ptr<const void> shared_;
};

std::string i128_to_string(i128 v);

}  // namespace th
