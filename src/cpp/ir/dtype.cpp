#include "tinyhybrid/dtype.h"

#include <array>
#include <bitset>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <tuple>

namespace th {

namespace {

enum class ScalarClass : uint8_t { Void, Bool, Int, UInt, Float };

struct ScalarInfo {
  const char* c_name;
  int bits;
  char fmt;
  int priority;
  ScalarClass cls;
};

constexpr std::array<ScalarInfo, kNumScalars> kScalarInfo = {{
#define TH_SCALAR_INFO(kind, name, bits, fmt, prio, cls) {name, bits, fmt, prio, ScalarClass::cls},
    TH_SCALARS(TH_SCALAR_INFO)
#undef TH_SCALAR_INFO
}};

// The short name tinygrad prints for each scalar (dtypes.<name>).
constexpr std::array<std::string_view, kNumScalars> kShortNames = {
    "void", "bool", "weakint", "char", "uchar", "short", "ushort", "int", "uint", "long", "ulong", "weakfloat",
    "fp8e4m3", "fp8e5m2", "fp8e4m3fnuz", "fp8e5m2fnuz", "half", "bfloat16", "float", "double"};

struct Aliases {
  std::string_view name;
  Scalar scalar;
};
constexpr Aliases kAliases[] = {
    {"float32", Scalar::FLOAT}, {"float16", Scalar::HALF},  {"float64", Scalar::DOUBLE}, {"int8", Scalar::INT8},
    {"uint8", Scalar::UINT8},   {"int16", Scalar::INT16},   {"uint16", Scalar::UINT16},  {"int32", Scalar::INT32},
    {"uint32", Scalar::UINT32}, {"int64", Scalar::INT64},   {"uint64", Scalar::UINT64},
};

const ScalarInfo& info(Scalar s) { return kScalarInfo[static_cast<size_t>(s)]; }

std::string_view addr_name(AddrSpace a) {
  switch (a) {
    case AddrSpace::GLOBAL: return "GLOBAL";
    case AddrSpace::LOCAL: return "LOCAL";
    case AddrSpace::REG: return "REG";
    case AddrSpace::ALU: return "ALU";
  }
  return "?";
}

// Interned storage: scalars in a fixed array, derived types in a deque (stable addresses) keyed by structure.
class DTypeTable {
 public:
  DTypeTable() {
    for (size_t i = 0; i < kNumScalars; ++i) {
      const auto s = static_cast<Scalar>(i);
      auto& d = scalars_[i];
      d.scalar = s;
      d.count = 1;
      d.pointee = nullptr;
      d.addrspace = AddrSpace::GLOBAL;
      d.size = -1;
      d.name = kScalarInfo[i].c_name;
      d.repr = "dtypes." + std::string(kShortNames[i]);
    }
  }
  const DTypeData* scalar(Scalar s) const { return &scalars_[static_cast<size_t>(s)]; }

  const DTypeData* derived(Scalar s, uint32_t count, const DTypeData* pointee, AddrSpace as, int64_t size) {
    const Key key{s, count, pointee, as, size};
    std::lock_guard lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) return it->second;
    DTypeData& d = derived_.emplace_back();
    d.scalar = s;
    d.count = count;
    d.pointee = pointee;
    d.addrspace = as;
    d.size = size;
    if (pointee) {
      const std::string sz = size >= 0 ? std::to_string(size) : "";
      std::string args = sz;
      if (as != AddrSpace::GLOBAL) args += (args.empty() ? "" : ", ") + std::string("AddrSpace.") + std::string(addr_name(as));
      d.name = pointee->name + "*";
      d.repr = pointee->repr + ".ptr(" + args + ")";
      if (count > 1) {
        d.name += std::to_string(count);
        d.repr += ".vec(" + std::to_string(count) + ")";
      }
    } else {
      d.name = std::string(info(s).c_name) + std::to_string(count);
      d.repr = scalars_[static_cast<size_t>(s)].repr + ".vec(" + std::to_string(count) + ")";
    }
    index_.emplace(key, &d);
    return &d;
  }

 private:
  using Key = std::tuple<Scalar, uint32_t, const DTypeData*, AddrSpace, int64_t>;
  std::array<DTypeData, kNumScalars> scalars_;
  std::mutex mu_;
  std::deque<DTypeData> derived_;
  std::map<Key, const DTypeData*> index_;
};

DTypeTable& table() {
  static DTypeTable t;
  return t;
}

}  // namespace

DType::DType() : p_(table().scalar(Scalar::VOID)) {}
DType DType::of(Scalar s) { return DType(table().scalar(s)); }

std::optional<DType> DType::from_name(std::string_view name) {
  for (size_t i = 0; i < kNumScalars; ++i)
    if (kShortNames[i] == name) return of(static_cast<Scalar>(i));
  for (const auto& a : kAliases)
    if (a.name == name) return of(a.scalar);
  return std::nullopt;
}

DType DType::vec(uint32_t count) const {
  if (is_ptr() || is_vector()) throw std::invalid_argument("vec: " + p_->repr + " is not a scalar");
  if (count == 0) throw std::invalid_argument("vec: count must be positive");
  if (count == 1 || is_void()) return *this;
  return DType(table().derived(p_->scalar, count, nullptr, AddrSpace::GLOBAL, -1));
}

DType DType::ptr(int64_t size, AddrSpace addrspace) const {
  if (is_ptr()) throw std::invalid_argument("ptr: " + p_->repr + " is already a pointer");
  return DType(table().derived(p_->scalar, 1, p_, addrspace, size < 0 ? -1 : size));
}

DType DType::scalar() const { return of(p_->scalar); }
DType DType::base() const { return p_->pointee ? DType(p_->pointee) : *this; }
Scalar DType::scalar_kind() const { return p_->scalar; }
uint32_t DType::count() const { return p_->count; }
bool DType::is_ptr() const { return p_->pointee != nullptr; }
bool DType::is_vector() const { return !p_->pointee && p_->count > 1; }
AddrSpace DType::addrspace() const { return p_->addrspace; }
int64_t DType::ptr_size() const { return p_->size; }
int DType::bitsize() const { return info(p_->scalar).bits; }
int DType::itemsize() const {
  if (p_->pointee) return 8;
  return static_cast<int>(((info(p_->scalar).bits + 7) / 8) * p_->count);
}
int DType::priority() const { return info(p_->scalar).priority; }

namespace {
using ScalarSet = std::bitset<kNumScalars>;

// each kind's direct parents in the promotion lattice
std::span<const Scalar> promotes_to(Scalar s) {
  using S = Scalar;
  static constexpr S kBool[] = {S::WEAKINT}, kWeakInt[] = {S::INT8, S::UINT8}, kInt8[] = {S::INT16},
                     kInt16[] = {S::INT32}, kInt32[] = {S::INT64}, kToWeakFloat[] = {S::WEAKFLOAT},
                     kUint8[] = {S::INT16, S::UINT16}, kUint16[] = {S::INT32, S::UINT32}, kUint32[] = {S::INT64, S::UINT64},
                     kWeakFloat[] = {S::FP8E4M3, S::FP8E5M2, S::FP8E4M3FNUZ, S::FP8E5M2FNUZ},
                     kFp8[] = {S::HALF, S::BFLOAT16}, kHalf[] = {S::FLOAT}, kFloat[] = {S::DOUBLE};
  switch (s) {
    case S::BOOL: return kBool;
    case S::WEAKINT: return kWeakInt;
    case S::INT8: return kInt8;
    case S::INT16: return kInt16;
    case S::INT32: return kInt32;
    case S::INT64:
    case S::UINT64: return kToWeakFloat;
    case S::UINT8: return kUint8;
    case S::UINT16: return kUint16;
    case S::UINT32: return kUint32;
    case S::WEAKFLOAT: return kWeakFloat;
    case S::FP8E4M3:
    case S::FP8E5M2:
    case S::FP8E4M3FNUZ:
    case S::FP8E5M2FNUZ: return kFp8;
    case S::HALF:
    case S::BFLOAT16: return kHalf;
    case S::FLOAT: return kFloat;
    default: return {};
  }
}

ScalarSet ancestors(Scalar s) {
  ScalarSet out;
  out.set(static_cast<size_t>(s));
  for (Scalar p : promotes_to(s)) out |= ancestors(p);
  return out;
}
}  // namespace

DType least_upper(DType a, DType b) {
  const ScalarSet common = ancestors(a.scalar_kind()) & ancestors(b.scalar_kind());
  std::optional<DType> best;
  const auto key = [](DType d) { return std::tuple(d.priority(), d.bitsize(), d.name()); };
  for (size_t i = 0; i < kNumScalars; ++i) {
    if (!common.test(i)) continue;
    const DType d = DType::of(static_cast<Scalar>(i));
    if (!best || key(d) < key(*best)) best = d;
  }
  if (!best) throw std::invalid_argument("no dtype that " + a.repr() + " and " + b.repr() + " both promote to");
  return *best;
}
char DType::fmt() const { return info(p_->scalar).fmt; }
bool DType::is_float() const { return info(p_->scalar).cls == ScalarClass::Float; }
bool DType::is_int() const {
  const auto c = info(p_->scalar).cls;
  return c == ScalarClass::Int || c == ScalarClass::UInt;
}
bool DType::is_unsigned() const { return info(p_->scalar).cls == ScalarClass::UInt; }
bool DType::is_bool() const { return p_->scalar == Scalar::BOOL; }
bool DType::is_void() const { return p_->scalar == Scalar::VOID; }
bool DType::is_weak() const { return p_->scalar == Scalar::WEAKINT || p_->scalar == Scalar::WEAKFLOAT; }
const std::string& DType::name() const { return p_->name; }
const std::string& DType::repr() const { return p_->repr; }

std::string_view scalar_short_name(Scalar s) { return kShortNames[static_cast<size_t>(s)]; }

}  // namespace th
