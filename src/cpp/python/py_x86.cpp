// tinyhybrid._core.x86: the x86-64 assembler (drivers/cpu/x86_encode.h). Conversions only: Python tuples become
// x86::Instr, the assembler's std::invalid_argument becomes ValueError.
#include <pybind11/pybind11.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "convert.h"
#include "drivers/cpu/x86_encode.h"
#include "pybind_init.h"

namespace th::py {

namespace {

namespace pb = pybind11;

std::string repr(PyObject* o) { return pb::repr(pb::handle(o)).cast<std::string>(); }

// A str's UTF-8 without a copy (CPython caches it in the object); nullopt for anything else.
std::optional<std::string_view> str_view(PyObject* o) {
  if (!PyUnicode_Check(o)) return std::nullopt;
  Py_ssize_t n = 0;
  const char* s = PyUnicode_AsUTF8AndSize(o, &n);
  if (!s) throw pb::error_already_set();
  return std::string_view(s, static_cast<size_t>(n));
}

// Turns one call's instruction tuples into x86::Instr, naming the instruction in any error.
class Converter {
 public:
  std::vector<x86::Instr> program(const pb::iterable& instrs) {
    std::vector<x86::Instr> out;
    if (pb::isinstance<pb::sequence>(instrs)) out.reserve(pb::len(instrs));
    for (const pb::handle item : instrs) {
      item_ = item.ptr();
      out.push_back(instr());
      ++index_;
    }
    return out;
  }

 private:
  [[noreturn]] void bad(const std::string& why) const {
    throw pb::value_error("x86.assemble: instruction " + std::to_string(index_) + " " + repr(item_) + ": " + why);
  }

  x86::Instr instr() {
    if (!PyTuple_Check(item_) || PyTuple_GET_SIZE(item_) == 0) bad("an instruction is a tuple (mnemonic, *operands)");
    const Py_ssize_t n = PyTuple_GET_SIZE(item_);
    const auto mnemonic = str_view(PyTuple_GET_ITEM(item_, 0));
    if (!mnemonic) bad("an instruction's mnemonic is a str");
    x86::Instr in;
    in.mnemonic = std::string(*mnemonic);
    if (in.mnemonic == "label" && n == 2) {
      in.ops.emplace_back(x86::LabelRef{label(PyTuple_GET_ITEM(item_, 1))});
    } else if (in.mnemonic == "data") {
      PyObject* data = n == 2 ? PyTuple_GET_ITEM(item_, 1) : nullptr;
      if (!data || !PyObject_CheckBuffer(data)) bad("('data', bytes) takes one bytes-like object");
      Py_buffer view;
      if (PyObject_GetBuffer(data, &view, PyBUF_C_CONTIGUOUS) != 0) throw pb::error_already_set();
      const auto* bytes = static_cast<const uint8_t*>(view.buf);
      in.data.assign(bytes, bytes + view.len);
      PyBuffer_Release(&view);
    } else {
      in.ops.reserve(static_cast<size_t>(n - 1));
      for (Py_ssize_t i = 1; i < n; ++i) in.ops.push_back(operand(PyTuple_GET_ITEM(item_, i)));
    }
    return in;
  }

  x86::Reg reg(PyObject* name) const {
    const auto s = str_view(name);
    if (!s) bad("a register is named by a str, not " + repr(name));
    const auto r = x86::parse_reg(*s);
    if (!r) bad("unknown register " + repr(name));
    return *r;
  }

  // An int the width of a register: -2**63 up to 2**64 - 1 (an unsigned 64-bit value keeps its bits).
  int64_t imm(PyObject* v) const {
    if (!PyLong_Check(v)) bad("expected an int, not " + repr(v));
    int overflow = 0;
    const long long s = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (!overflow) return s;
    const unsigned long long u = PyLong_AsUnsignedLongLong(v);
    if (PyErr_Occurred()) {
      PyErr_Clear();
      bad("the immediate " + repr(v) + " does not fit 64 bits");
    }
    return static_cast<int64_t>(u);
  }

  std::string label(PyObject* name) const {
    const auto s = str_view(name);
    if (!s) bad("a label is named by a str, not " + repr(name));
    return std::string(*s);
  }

  x86::Operand operand(PyObject* op) {
    if (PyUnicode_Check(op)) return reg(op);
    if (PyLong_Check(op)) return x86::Imm{imm(op)};
    const Py_ssize_t n = PyTuple_Check(op) ? PyTuple_GET_SIZE(op) : 0;
    const auto kind = n ? str_view(PyTuple_GET_ITEM(op, 0)) : std::nullopt;
    const auto at = [&](Py_ssize_t i) { return PyTuple_GET_ITEM(op, i); };
    if (kind == "mem" && (n == 6 || n == 7)) {
      x86::Mem m;
      const int64_t size = imm(at(1)), scale = imm(at(4)), disp = imm(at(5));
      if (size < 0 || size > 4096 || scale < 0 || scale > 8) bad("a memory size or scale out of range");
      if (disp < INT32_MIN || disp > INT32_MAX) bad("a memory displacement must fit 32 signed bits");
      m.size_bytes = static_cast<int>(size), m.scale = static_cast<int>(scale), m.disp = static_cast<int32_t>(disp);
      if (at(2) != Py_None) m.base = reg(at(2));
      if (at(3) != Py_None) m.index = reg(at(3));
      if (n == 7 && at(6) != Py_None) m.label = label(at(6));
      return m;
    }
    if (kind == "label" && n == 2) return x86::LabelRef{label(at(1))};
    if (kind == "mask" && n == 3) {
      const int zeroing = PyObject_IsTrue(at(2));
      if (zeroing < 0) throw pb::error_already_set();
      return x86::Mask{reg(at(1)), zeroing == 1};
    }
    bad("an operand is a register name, an int, ('mem', size, base, index, scale, disp[, label]), ('label', name) or ('mask', k, "
        "zeroing), not " + repr(op));
  }

  PyObject* item_ = nullptr;
  size_t index_ = 0;
};

}  // namespace

bool init_x86(PyObject* module) {
  return define_guarded([&] {
    auto parent = pb::reinterpret_borrow<pb::module_>(module);
    pb::module_ m = parent.def_submodule("x86", "an x86-64 assembler for generated code (legacy, VEX and EVEX encodings)");
    m.def(
        "assemble",
        [](const pb::iterable& instrs) {
          const auto program = Converter().program(instrs);
          x86::Assembled out;
          {
            pb::gil_scoped_release unlocked;
            out = x86::assemble(program);
          }
          pb::dict labels;
          for (const auto& [name, offset] : out.labels) labels[pb::str(name)] = offset;
          return pb::make_tuple(pb::bytes(reinterpret_cast<const char*>(out.code.data()), out.code.size()), labels);
        },
        pb::arg("instrs"),
        "machine code and label offsets for a list of (mnemonic, *operands) tuples in Intel order. An operand is a register "
        "name, an int, ('mem', size_bytes, base, index, scale, disp[, label]), ('label', name) or ('mask', 'k1', zeroing). "
        "Pseudo-instructions: ('label', name), ('align', n[, fill]), ('data', bytes). Raises ValueError naming the "
        "instruction it cannot encode.");
    m.def(
        "mnemonics",
        [] {
          pb::list out;
          for (const auto name : x86::mnemonics()) out.append(pb::str(name.data(), name.size()));
          return out;
        },
        "every mnemonic assemble takes, sorted (a locked one is written 'lock ' + mnemonic)");
  });
}

}  // namespace th::py
