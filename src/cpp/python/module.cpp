// tinyhybrid._core: the Python face of the C++ core. Conversions only; the logic lives in the core.
#include <pybind11/pybind11.h>

#include "convert.h"
#include "tinyhybrid/ops.h"
#include "tinyhybrid/uop.h"

namespace py = pybind11;

PYBIND11_MODULE(_core, m) {
  m.doc() = "tinyhybrid's compiled core: UOp nodes, dtypes, graph algorithms";
  for (auto init : {th::py::init_dtype_type, th::py::init_uop_type, th::py::init_rewrite, th::py::init_simplify, th::py::init_symbolic, th::py::init_hcq, th::py::init_nv, th::py::init_amd, th::py::init_x86, th::py::init_track, th::py::init_spec})
    if (!init(m.ptr())) throw py::error_already_set();

  m.def("enum_names", [](int kind) {
    if (kind < 0 || static_cast<size_t>(kind) >= th::kNumEnumKinds) throw py::value_error("no such enum kind");
    py::tuple names(th::enum_member_names(static_cast<th::EnumKind>(kind)).size());
    size_t i = 0;
    for (auto n : th::enum_member_names(static_cast<th::EnumKind>(kind))) names[i++] = py::str(n.data(), n.size());
    return names;
  }, "the member names of a native enum kind (0 Ops, 1 AxisType, 2 AddrSpace), in value order");
  m.def("register_enum", [](int kind, py::object cls) {
    if (kind < 0 || static_cast<size_t>(kind) >= th::kNumEnumKinds) throw py::value_error("no such enum kind");
    auto& reg = th::py::enums();
    py::tuple members(py::len(cls));
    size_t i = 0;
    for (auto member : cls) members[i++] = member;
    reg.cls[kind] = cls.release().ptr();
    reg.members[kind] = members.release().ptr();
  }, "make args of this native enum kind convert to and from the given IntEnum class");
  m.def("op_groups", [] {
    namespace g = th::group;
    const std::pair<const char*, th::OpSet> groups[] = {
        {"Unary", g::Unary},           {"Binary", g::Binary},           {"Ternary", g::Ternary},
        {"ALU", g::ALU},               {"Elementwise", g::Elementwise}, {"Movement", g::Movement},
        {"AnyALU", g::AnyALU},         {"AnyElementwise", g::AnyElementwise},
        {"Commutative", g::Commutative}, {"Associative", g::Associative}, {"Idempotent", g::Idempotent},
        {"Comparison", g::Comparison}, {"Reduce", g::Reduce},           {"Defines", g::Defines},
        {"Irreducible", g::Irreducible}};
    py::dict out;
    for (const auto& [name, set] : groups) {
      py::list members;
      for (size_t i = 0; i < th::kNumOps; ++i)
        if (set.contains(static_cast<th::Ops>(i))) members.append(i);
      out[name] = members;
    }
    return out;
  }, "the op groups passes dispatch on, as lists of op values");
  m.def("live_uop_count", &th::live_uop_count, "the number of UOp nodes alive in the intern table");
  m.def("scalar_names", [] {
    py::list names;
    for (size_t i = 0; i < th::kNumScalars; ++i) {
      auto n = th::scalar_short_name(static_cast<th::Scalar>(i));
      names.append(py::str(n.data(), n.size()));
    }
    return names;
  }, "the short names of the scalar dtypes");
}
