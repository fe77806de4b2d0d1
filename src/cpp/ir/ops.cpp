#include "tinyhybrid/ops.h"

#include <array>

namespace th {

namespace {
constexpr std::array<std::string_view, kNumOps> kOpNames = {
#define TH_OP_NAME(name) #name,
    TH_OPS_LIST(TH_OP_NAME)
#undef TH_OP_NAME
};
constexpr std::array<std::string_view, 12> kAxisNames = {
#define TH_AXIS_NAME(name) #name,
    TH_AXIS_TYPES(TH_AXIS_NAME)
#undef TH_AXIS_NAME
};
constexpr std::array<std::string_view, 4> kAddrNames = {
#define TH_ADDR_NAME(name) #name,
    TH_ADDR_SPACES(TH_ADDR_NAME)
#undef TH_ADDR_NAME
};
}  // namespace

std::string_view op_name(Ops op) {
  const auto i = static_cast<size_t>(op);
  return i < kNumOps ? kOpNames[i] : std::string_view("<bad op>");
}

std::optional<Ops> op_from_name(std::string_view name) {
  for (size_t i = 0; i < kNumOps; ++i)
    if (kOpNames[i] == name) return static_cast<Ops>(i);
  return std::nullopt;
}

std::string_view enum_kind_name(EnumKind kind) {
  switch (kind) {
    case EnumKind::Ops: return "Ops";
    case EnumKind::AxisType: return "AxisType";
    case EnumKind::AddrSpace: return "AddrSpace";
  }
  return "<bad enum>";
}

std::span<const std::string_view> enum_member_names(EnumKind kind) {
  switch (kind) {
    case EnumKind::Ops: return kOpNames;
    case EnumKind::AxisType: return kAxisNames;
    case EnumKind::AddrSpace: return kAddrNames;
  }
  return {};
}

}  // namespace th
