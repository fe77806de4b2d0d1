#include "tinyhybrid/arg.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace th {

namespace {
constexpr size_t mix(size_t h, size_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}
size_t hash_i128(i128 v) {
  const auto u = static_cast<unsigned __int128>(v);
  return mix(static_cast<size_t>(u), static_cast<size_t>(u >> 64));
}
[[noreturn]] void wrong_kind(const char* want, const Arg& a) {
  throw std::invalid_argument(std::string("Arg is not ") + want + ": " + a.repr());
}
struct StrData {
  size_t hash;
  std::string text;
};
struct TupleData {
  size_t hash;
  std::vector<Arg> items;
};
i128 load_i128(const int64_t (&w)[2]) {
  i128 v;
  std::memcpy(&v, w, sizeof v);
  return v;
}
}  // namespace

Arg Arg::boolean(bool v) {
  Arg a;
  a.kind_ = Kind::Bool;
  a.b_ = v;
  return a;
}

Arg Arg::integer(i128 v) {
  Arg a;
  a.kind_ = Kind::Int;
  std::memcpy(a.i_, &v, sizeof v);
  return a;
}

Arg Arg::floating(double v) {
  Arg a;
  a.kind_ = Kind::Float;
  a.f_ = std::isnan(v) ? std::numeric_limits<double>::quiet_NaN() : v;
  return a;
}

Arg Arg::string(std::string_view v) {
  Arg a;
  a.kind_ = Kind::Str;
  a.shared_ = std::make_shared<const StrData>(StrData{mix(4, std::hash<std::string_view>{}(v)), std::string(v)});
  return a;
}

Arg Arg::tuple(std::vector<Arg> items) {
  Arg a;
  a.kind_ = Kind::Tuple;
  size_t h = 5;
  for (const Arg& x : items) h = mix(h, x.hash());
  h = mix(h, items.size());
  a.shared_ = std::make_shared<const TupleData>(TupleData{h, std::move(items)});
  return a;
}

Arg Arg::dtype(DType d) {
  Arg a;
  a.kind_ = Kind::DType;
  a.d_ = d.data();
  return a;
}

Arg Arg::enumeration(EnumKind kind, int64_t value) {
  Arg a;
  a.kind_ = Kind::Enum;
  a.enum_kind_ = static_cast<uint8_t>(kind);
  a.e_ = value;
  return a;
}

Arg Arg::opaque(std::shared_ptr<const Opaque> obj) {
  if (!obj) return Arg();
  Arg a;
  a.kind_ = Kind::Opaque;
  a.shared_ = std::move(obj);
  return a;
}

bool Arg::as_bool() const {
  if (kind_ != Kind::Bool) wrong_kind("a bool", *this);
  return b_;
}
i128 Arg::as_int() const {
  if (kind_ != Kind::Int) wrong_kind("an int", *this);
  return load_i128(i_);
}
double Arg::as_float() const {
  if (kind_ != Kind::Float) wrong_kind("a float", *this);
  return f_;
}
double Arg::to_double() const {
  switch (kind_) {
    case Kind::Bool: return b_ ? 1.0 : 0.0;
    case Kind::Int: return static_cast<double>(load_i128(i_));
    case Kind::Float: return f_;
    default: wrong_kind("a number", *this);
  }
}
const std::string& Arg::as_str() const {
  if (kind_ != Kind::Str) wrong_kind("a str", *this);
  return static_cast<const StrData*>(shared_.get())->text;
}
std::span<const Arg> Arg::as_tuple() const {
  if (kind_ != Kind::Tuple) wrong_kind("a tuple", *this);
  return static_cast<const TupleData*>(shared_.get())->items;
}
DType Arg::as_dtype() const {
  if (kind_ != Kind::DType) wrong_kind("a dtype", *this);
  return DType(d_);
}
EnumKind Arg::enum_kind() const {
  if (kind_ != Kind::Enum) wrong_kind("an enum", *this);
  return static_cast<EnumKind>(enum_kind_);
}
int64_t Arg::enum_value() const {
  if (kind_ != Kind::Enum) wrong_kind("an enum", *this);
  return e_;
}
Ops Arg::as_op() const {
  if (kind_ != Kind::Enum || static_cast<EnumKind>(enum_kind_) != EnumKind::Ops) wrong_kind("an Ops", *this);
  return static_cast<Ops>(e_);
}
const Opaque& Arg::as_opaque() const {
  if (kind_ != Kind::Opaque) wrong_kind("an opaque object", *this);
  return *static_cast<const Opaque*>(shared_.get());
}
std::shared_ptr<const Opaque> Arg::opaque_ptr() const {
  if (kind_ != Kind::Opaque) wrong_kind("an opaque object", *this);
  return std::shared_ptr<const Opaque>(shared_, static_cast<const Opaque*>(shared_.get()));
}

size_t Arg::hash() const {
  switch (kind_) {
    case Kind::None: return 0x9e3779b97f4a7c15ull;
    case Kind::Bool: return mix(1, b_);
    case Kind::Int: return mix(2, hash_i128(load_i128(i_)));
    case Kind::Float: return mix(3, std::bit_cast<uint64_t>(f_));
    case Kind::Str: return static_cast<const StrData*>(shared_.get())->hash;
    case Kind::Tuple: return static_cast<const TupleData*>(shared_.get())->hash;
    case Kind::DType: return mix(6, reinterpret_cast<uintptr_t>(d_) >> 4);
    case Kind::Enum: return mix(mix(7, enum_kind_), static_cast<size_t>(e_));
    case Kind::Opaque: return mix(8, as_opaque().hash());
  }
  return 0;
}

bool Arg::operator==(const Arg& o) const {
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::None: return true;
    case Kind::Bool: return b_ == o.b_;
    case Kind::Int: return i_[0] == o.i_[0] && i_[1] == o.i_[1];
    case Kind::Float: return std::bit_cast<uint64_t>(f_) == std::bit_cast<uint64_t>(o.f_);
    case Kind::Str: return shared_ == o.shared_ || (hash() == o.hash() && as_str() == o.as_str());
    case Kind::Tuple: {
      if (shared_ == o.shared_) return true;
      if (hash() != o.hash()) return false;
      const auto a = as_tuple(), b = o.as_tuple();
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i)
        if (a[i] != b[i]) return false;
      return true;
    }
    case Kind::DType: return d_ == o.d_;
    case Kind::Enum: return enum_kind_ == o.enum_kind_ && e_ == o.e_;
    case Kind::Opaque: return shared_ == o.shared_ || as_opaque().equal(o.as_opaque());
  }
  return false;
}

std::string i128_to_string(i128 v) {
  if (v == 0) return "0";
  const bool neg = v < 0;
  auto u = neg ? -static_cast<unsigned __int128>(v) : static_cast<unsigned __int128>(v);
  std::string s;
  while (u) {
    s.push_back(static_cast<char>('0' + static_cast<int>(u % 10)));
    u /= 10;
  }
  if (neg) s.push_back('-');
  return {s.rbegin(), s.rend()};
}

namespace {
std::string float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  // Shortest round-trip form, as Python prints it.
  char buf[64];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  if (s.find_first_of(".eninf") == std::string::npos) s += ".0";
  return s;
}
}  // namespace

std::string Arg::repr() const {
  switch (kind_) {
    case Kind::None: return "None";
    case Kind::Bool: return b_ ? "True" : "False";
    case Kind::Int: return i128_to_string(load_i128(i_));
    case Kind::Float: return float_repr(f_);
    case Kind::Str: {
      std::string s = "'";
      for (char c : as_str()) {
        if (c == '\'' || c == '\\') s.push_back('\\');
        if (c == '\n') { s += "\\n"; continue; }
        s.push_back(c);
      }
      return s + "'";
    }
    case Kind::Tuple: {
      const auto items = as_tuple();
      std::string s = "(";
      for (size_t i = 0; i < items.size(); ++i) s += (i ? ", " : "") + items[i].repr();
      return s + (items.size() == 1 ? ",)" : ")");
    }
    case Kind::DType: return DType(d_).repr();
    case Kind::Enum: {
      const auto kind = static_cast<EnumKind>(enum_kind_);
      const auto names = enum_member_names(kind);
      const std::string member = e_ >= 0 && static_cast<size_t>(e_) < names.size() ? std::string(names[e_]) : std::to_string(e_);
      return std::string(enum_kind_name(kind)) + "." + member;
    }
    case Kind::Opaque: return as_opaque().repr();
  }
  return "?";
}

}  // namespace th
