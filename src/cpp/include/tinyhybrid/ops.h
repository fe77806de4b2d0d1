// The operation set of the UOp IR and the groups passes dispatch on.
#pragma once
#include <array>
#include <bitset>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string_view>

namespace th {

// X-macro: one list drives the enum, the names and the Python enum built from them.
// The order is the linearizer's tie-break priority (defines first, control flow late).
#define TH_OPS_LIST(X)                                                                                   \
  /* defines and special */                                                                             \
  X(SPECIAL) X(BUFFER) X(DEFINE_VAR) X(UNIQUE) X(DEVICE)                                                \
  /* non-op nodes */                                                                                    \
  X(NOOP) X(REWRITE_ERROR) X(PARAM) X(FUNCTION) X(CALL) X(BIND)                                         \
  X(PROGRAM) X(LINEAR) X(SOURCE) X(BINARY)                                                              \
  X(SINK) X(AFTER) X(GROUP)                                                                             \
  X(STACK) X(VECTORIZE) X(GEP) X(TUPLE) X(GETTUPLE) X(GETADDR)                                          \
  /* memory */                                                                                          \
  X(INDEX) X(SHRINK) X(LOAD) X(STORE)                                                                   \
  /* math */                                                                                            \
  X(WMMA)                                                                                               \
  X(CAST) X(BITCAST) X(EXP2) X(LOG2) X(SIN) X(SQRT) X(RECIPROCAL) X(NEG) X(TRUNC)                       \
  X(ADD) X(MUL) X(SHL) X(SHR) X(CDIV) X(MAX) X(CMOD) X(CMPLT) X(CMPNE) X(CMPEQ)                         \
  X(XOR) X(OR) X(AND) X(THREEFRY) X(SUB) X(FDIV) X(POW) X(FLOORDIV) X(FLOORMOD)                         \
  X(WHERE) X(MULACC) X(BYTEDOT)                                                                         \
  /* control flow, constants, custom code */                                                            \
  X(BARRIER) X(RANGE) X(IF) X(END) X(ENDIF) X(CONST) X(CUSTOM) X(CUSTOMI) X(INS)                        \
  /* tensor-graph only */                                                                               \
  X(CONTIGUOUS) X(CONTIGUOUS_BACKWARD) X(DETACH) X(STAGE) X(COPY) X(MSELECT) X(MSTACK) X(CUSTOM_FUNCTION) \
  X(RESHAPE) X(PERMUTE) X(EXPAND) X(PAD) X(FLIP) X(UNSHARD)                                             \
  X(REDUCE) X(ALLREDUCE) X(IOTA)                                                                        \
  /* pattern compiler */                                                                                \
  X(PYLITERAL)

enum class Ops : uint8_t {
#define TH_OP_ENUM(name) name,
  TH_OPS_LIST(TH_OP_ENUM)
#undef TH_OP_ENUM
};

inline constexpr size_t kNumOps = 0
#define TH_OP_COUNT(name) +1
    TH_OPS_LIST(TH_OP_COUNT)
#undef TH_OP_COUNT
    ;

std::string_view op_name(Ops op);
std::optional<Ops> op_from_name(std::string_view name);

// A set of ops, usable in constant expressions; the matcher dispatches on these.
class OpSet {
 public:
  constexpr OpSet() = default;
  constexpr OpSet(std::initializer_list<Ops> ops) {
    for (Ops o : ops) bits_[index(o)] |= bit(o);
  }
  constexpr bool contains(Ops o) const { return (bits_[index(o)] & bit(o)) != 0; }
  constexpr OpSet operator|(const OpSet& o) const {
    OpSet r;
    for (size_t i = 0; i < kWords; ++i) r.bits_[i] = bits_[i] | o.bits_[i];
    return r;
  }
  constexpr bool empty() const {
    for (auto w : bits_) if (w) return false;
    return true;
  }
  constexpr bool operator==(const OpSet&) const = default;

 private:
  static constexpr size_t kWords = (kNumOps + 63) / 64;
  static constexpr size_t index(Ops o) { return static_cast<size_t>(o) / 64; }
  static constexpr uint64_t bit(Ops o) { return uint64_t{1} << (static_cast<size_t>(o) % 64); }
  std::array<uint64_t, kWords> bits_{};
};

namespace group {
inline constexpr OpSet Unary{Ops::EXP2, Ops::LOG2, Ops::SIN, Ops::SQRT, Ops::RECIPROCAL, Ops::NEG, Ops::TRUNC};
inline constexpr OpSet Binary{Ops::ADD,   Ops::MUL,   Ops::CDIV,  Ops::MAX, Ops::CMOD,     Ops::CMPLT,   Ops::CMPNE,
                              Ops::CMPEQ, Ops::XOR,   Ops::SHL,   Ops::SHR, Ops::OR,       Ops::AND,     Ops::THREEFRY,
                              Ops::SUB,   Ops::FDIV,  Ops::POW,   Ops::FLOORDIV, Ops::FLOORMOD};
inline constexpr OpSet Ternary{Ops::WHERE, Ops::MULACC};
inline constexpr OpSet ALU = Unary | Binary | Ternary;
inline constexpr OpSet Elementwise = ALU | OpSet{Ops::CAST, Ops::BITCAST};
// ALU ops tinygrad's IR lacks (a renderer's own instruction, decomposed for the others), kept out of the groups above,
// which tinygrad's programs read by name: the passes dispatch on these
inline constexpr OpSet AnyALU = ALU | OpSet{Ops::BYTEDOT};
inline constexpr OpSet AnyElementwise = Elementwise | OpSet{Ops::BYTEDOT};
inline constexpr OpSet Movement{Ops::RESHAPE, Ops::EXPAND, Ops::PERMUTE, Ops::PAD, Ops::SHRINK, Ops::FLIP};
inline constexpr OpSet Commutative{Ops::ADD, Ops::MUL, Ops::MAX, Ops::CMPNE, Ops::CMPEQ, Ops::XOR, Ops::AND, Ops::OR};
inline constexpr OpSet Associative{Ops::ADD, Ops::MUL, Ops::AND, Ops::OR, Ops::MAX};
inline constexpr OpSet Idempotent{Ops::OR, Ops::AND, Ops::MAX};
inline constexpr OpSet Comparison{Ops::CMPLT, Ops::CMPNE, Ops::CMPEQ};
inline constexpr OpSet Reduce{Ops::ADD, Ops::MUL, Ops::MAX};
inline constexpr OpSet Defines{Ops::PARAM, Ops::BUFFER, Ops::DEFINE_VAR};
inline constexpr OpSet Irreducible{Ops::CONST, Ops::SPECIAL, Ops::RANGE, Ops::PARAM, Ops::GETADDR, Ops::DEFINE_VAR};
}  // namespace group

// Native enums that may appear inside args; Python mirrors them as IntEnums built from these names.
#define TH_AXIS_TYPES(X) \
  X(DEVICE) X(GLOBAL) X(WARP) X(LOCAL) X(WEAK) X(GROUP_REDUCE) X(REDUCE) X(UPCAST) X(UNROLL) X(THREAD) X(PLACEHOLDER) X(LOOP)
enum class AxisType : uint8_t {
#define TH_AXIS_ENUM(name) name,
  TH_AXIS_TYPES(TH_AXIS_ENUM)
#undef TH_AXIS_ENUM
};
#define TH_ADDR_SPACES(X) X(GLOBAL) X(LOCAL) X(REG) X(ALU)
enum class AddrSpace : uint8_t {
#define TH_ADDR_ENUM(name) name,
  TH_ADDR_SPACES(TH_ADDR_ENUM)
#undef TH_ADDR_ENUM
};

// Enum kinds an Arg can carry natively.
enum class EnumKind : uint8_t { Ops, AxisType, AddrSpace };
inline constexpr size_t kNumEnumKinds = 3;
std::string_view enum_kind_name(EnumKind kind);
// The member names of an enum kind, in value order.
std::span<const std::string_view> enum_member_names(EnumKind kind);

}  // namespace th
