// Data types: scalars, their vector and pointer forms, and the weak types of untyped Python constants.
// Every DType is interned, so equality is pointer equality and a DType is a cheap value.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <optional>

#include "tinyhybrid/ops.h"

namespace th {

// Scalar kinds, in promotion-priority order where it matters (see priority()).
#define TH_SCALARS(X)                                                                         \
  /* kind,       name,              bits, fmt, priority, class */                              \
  X(VOID,        "void",            0,    0,   -1, Void)                                       \
  X(BOOL,        "bool",            1,    '?', 0,  Bool)                                       \
  X(WEAKINT,     "weakint",         800,  0,   0,  Int)                                        \
  X(INT8,        "signed char",     8,    'b', 1,  Int)                                        \
  X(UINT8,       "unsigned char",   8,    'B', 2,  UInt)                                       \
  X(INT16,       "short",           16,   'h', 3,  Int)                                        \
  X(UINT16,      "unsigned short",  16,   'H', 4,  UInt)                                       \
  X(INT32,       "int",             32,   'i', 5,  Int)                                        \
  X(UINT32,      "unsigned int",    32,   'I', 6,  UInt)                                       \
  X(INT64,       "long",            64,   'q', 7,  Int)                                        \
  X(UINT64,      "unsigned long",   64,   'Q', 8,  UInt)                                       \
  X(WEAKFLOAT,   "weakfloat",       800,  0,   9,  Float)                                      \
  X(FP8E4M3,     "float8_e4m3",     8,    0,   10, Float)                                      \
  X(FP8E5M2,     "float8_e5m2",     8,    0,   11, Float)                                      \
  X(FP8E4M3FNUZ, "float8_e4m3fnuz", 8,    0,   10, Float)                                      \
  X(FP8E5M2FNUZ, "float8_e5m2fnuz", 8,    0,   11, Float)                                      \
  X(HALF,        "half",            16,   'e', 12, Float)                                      \
  X(BFLOAT16,    "__bf16",          16,   0,   13, Float)                                      \
  X(FLOAT,       "float",           32,   'f', 14, Float)                                      \
  X(DOUBLE,      "double",          64,   'd', 15, Float)

enum class Scalar : uint8_t {
#define TH_SCALAR_ENUM(kind, name, bits, fmt, prio, cls) kind,
  TH_SCALARS(TH_SCALAR_ENUM)
#undef TH_SCALAR_ENUM
};
inline constexpr size_t kNumScalars = 0
#define TH_SCALAR_COUNT(...) +1
    TH_SCALARS(TH_SCALAR_COUNT)
#undef TH_SCALAR_COUNT
    ;

struct DTypeData;

class DType {
 public:
  // The scalar of a kind; DType() is void.
  DType();
  static DType of(Scalar s);
  static DType void_() { return of(Scalar::VOID); }
  static DType bool_() { return of(Scalar::BOOL); }
  static DType int32() { return of(Scalar::INT32); }
  static DType int64() { return of(Scalar::INT64); }
  static DType uint32() { return of(Scalar::UINT32); }
  static DType float32() { return of(Scalar::FLOAT); }
  static DType float64() { return of(Scalar::DOUBLE); }
  static DType weakint() { return of(Scalar::WEAKINT); }
  static DType weakfloat() { return of(Scalar::WEAKFLOAT); }
  // Lookup by a tinygrad-style short name ("float32", "int", "uchar", ...); nullopt when unknown.
  static std::optional<DType> from_name(std::string_view name);

  // A vector of `count` elements of this scalar (count 1 gives the scalar). Throws on a pointer or vector.
  DType vec(uint32_t count) const;
  // A pointer to this type. size -1 means unknown.
  DType ptr(int64_t size = -1, AddrSpace addrspace = AddrSpace::GLOBAL) const;
  // The element scalar (for a pointer: the pointee's scalar).
  DType scalar() const;
  // What a pointer points to; the type itself otherwise.
  DType base() const;

  Scalar scalar_kind() const;
  uint32_t count() const;  // vector width; 1 for scalars and pointers to scalars
  bool is_ptr() const;
  bool is_vector() const;
  AddrSpace addrspace() const;  // meaningful for pointers
  int64_t ptr_size() const;     // meaningful for pointers
  int bitsize() const;          // of the scalar
  int itemsize() const;         // bytes of the whole value (vectors included; pointers: 8)
  int priority() const;
  char fmt() const;             // struct-module format char of the scalar, 0 if none
  bool is_float() const;        // scalar class, including weakfloat
  bool is_int() const;          // signed or unsigned, including weakint
  bool is_unsigned() const;
  bool is_bool() const;
  bool is_void() const;
  bool is_weak() const;
  const std::string& name() const;    // C-style name, e.g. "float4", "float*"
  const std::string& repr() const;    // "dtypes.float", "dtypes.float.vec(4)", "dtypes.float.ptr(16)"

  bool operator==(const DType& o) const { return p_ == o.p_; }
  bool operator!=(const DType& o) const { return p_ != o.p_; }
  size_t hash() const { return reinterpret_cast<uintptr_t>(p_) >> 4; }
  const DTypeData* data() const { return p_; }
  explicit DType(const DTypeData* p) : p_(p) {}

 private:
  const DTypeData* p_;
};

// The smallest scalar both a and b (scalars, of any kind but void) promote to without loss, by tinygrad's lattice
// (dtype.py's least_upper_dtype, the same answer: the least of the common ancestors by priority, bits and name).
DType least_upper(DType a, DType b);

struct DTypeData {
  Scalar scalar;
  uint32_t count;              // vector width of the value (for pointers: of the pointer itself)
  const DTypeData* pointee;    // non-null for pointers
  AddrSpace addrspace;
  int64_t size;
  std::string name;
  std::string repr;
  mutable void* binding_handle = nullptr;  // the Python object of this dtype, owned by the binding
};

// Scalar facts, usable without a DType.
std::string_view scalar_short_name(Scalar s);  // "float32", "int8", "weakint", ...

}  // namespace th

template <>
struct std::hash<th::DType> {
  size_t operator()(const th::DType& d) const noexcept { return d.hash(); }
};
