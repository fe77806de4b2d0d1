// UOp.vmin / UOp.vmax / UOp.sym_infer and the module functions fold() and sym_infer(). Conversions only.
#include <string>
#include <unordered_map>
#include <vector>

#include "convert.h"
#include "tinyhybrid/symbolic.h"

namespace th::py {

namespace {

PyObject* range_bound(PyObject* self, bool lower) {
  return guarded([&] {
    const UOpRef u = uop_ref(self);
    const NodeFacts* f = u->facts();
    if (!f) {
      GilRelease nogil;
      f = &facts_of(u.get());
    }
    return from_arg(lower ? f->vmin : f->vmax);
  });
}
PyObject* get_vmin(PyObject* self, void*) { return range_bound(self, true); }
PyObject* get_vmax(PyObject* self, void*) { return range_bound(self, false); }

// The variable name a var_vals key stands for: a str, a DEFINE_VAR, or a BIND of one.
bool key_name(PyObject* k, std::string& out) {
  if (PyUnicode_Check(k)) {
    const char* s = PyUnicode_AsUTF8(k);
    if (!s) return false;
    out = s;
    return true;
  }
  if (is_uop(k)) {
    UOpRef u = uop_ref(k);
    if (u->op() == Ops::BIND && u->nsrc() > 0) u = u->src(0);
    const Arg& a = u->arg();
    if (u->op() == Ops::DEFINE_VAR && a.kind() == Arg::Kind::Tuple && !a.as_tuple().empty() &&
        a.as_tuple()[0].kind() == Arg::Kind::Str) {
      out = a.as_tuple()[0].as_str();
      return true;
    }
  }
  PyErr_Format(PyExc_TypeError, "sym_infer: var_vals keys must be variable names or variable UOps, got %.200s",
               Py_TYPE(k)->tp_name);
  return false;
}

bool var_vals_arg(PyObject* d, std::unordered_map<std::string, Arg>& out) {
  if (d == Py_None) return true;
  if (!PyDict_Check(d)) {
    PyErr_Format(PyExc_TypeError, "sym_infer: var_vals must be a dict, got %.200s", Py_TYPE(d)->tp_name);
    return false;
  }
  PyObject *k, *v;
  Py_ssize_t pos = 0;
  while (PyDict_Next(d, &pos, &k, &v)) {
    std::string name;
    Arg value;
    if (!key_name(k, name) || !to_arg(v, value)) return false;
    if (!value.is_number()) {
      PyErr_Format(PyExc_TypeError, "sym_infer: the value of '%s' must be a number, got %.200s", name.c_str(),
                   Py_TYPE(v)->tp_name);
      return false;
    }
    out[name] = std::move(value);
  }
  return true;
}

PyObject* infer(PyObject* uop, PyObject* var_vals) {
  std::unordered_map<std::string, Arg> vars;
  if (!var_vals_arg(var_vals, vars)) return nullptr;
  return guarded([&] { return from_arg(evaluate(uop_ref(uop), vars)); });
}

PyObject* m_sym_infer(PyObject* self, PyObject* var_vals) { return infer(self, var_vals); }

// sym_infer(x, var_vals): a UOp's value; plain numbers are returned as they are.
PyObject* f_sym_infer(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) return PyErr_Format(PyExc_TypeError, "sym_infer(uop_or_int, var_vals) takes 2 arguments");
  if (!is_uop(args[0])) {
    Py_INCREF(args[0]);
    return args[0];
  }
  return infer(args[0], args[1]);
}

// fold(op, dtype, *operands, src_dtype=None): the folded Python value, or None when it does not fold.
PyObject* f_fold(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  DType src_dtype;
  for (Py_ssize_t i = 0; kwnames && i < PyTuple_GET_SIZE(kwnames); ++i) {
    const char* k = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, i));
    if (!k) return nullptr;
    PyObject* v = args[nargs + i];
    if (std::string(k) != "src_dtype") return PyErr_Format(PyExc_TypeError, "fold() got an unexpected keyword '%s'", k);
    if (v == Py_None) continue;
    if (!is_dtype(v)) return PyErr_Format(PyExc_TypeError, "fold: src_dtype must be a DType");
    src_dtype = dtype_of(v);
  }
  if (nargs < 2) return PyErr_Format(PyExc_TypeError, "fold(op, dtype, *operands, src_dtype=None)");
  if (!PyLong_Check(args[0])) return PyErr_Format(PyExc_TypeError, "fold: op must be an Ops member");
  const long op = PyLong_AsLong(args[0]);
  if (op == -1 && PyErr_Occurred()) return nullptr;
  if (op < 0 || static_cast<size_t>(op) >= kNumOps) return PyErr_Format(PyExc_ValueError, "fold: %ld is not an op", op);
  if (!is_dtype(args[1])) return PyErr_Format(PyExc_TypeError, "fold: dtype must be a DType");
  std::vector<Arg> operands(static_cast<size_t>(nargs - 2));
  for (Py_ssize_t i = 2; i < nargs; ++i) {
    Arg& a = operands[static_cast<size_t>(i - 2)];
    if (!to_arg(args[i], a)) return nullptr;
    if (a.kind() == Arg::Kind::Opaque && PyLong_Check(args[i])) {
      // An int beyond 128 bits: no dtype holds it, so nothing folds.
      Py_RETURN_NONE;
    }
    if (!a.is_number())
      return PyErr_Format(PyExc_TypeError, "fold: operands must be numbers, got %.200s", Py_TYPE(args[i])->tp_name);
  }
  return guarded([&]() -> PyObject* {
    const auto r = fold(static_cast<Ops>(op), dtype_of(args[1]), operands, src_dtype);
    if (!r) Py_RETURN_NONE;
    return from_arg(*r);
  });
}

PyGetSetDef uop_getset[] = {
    {"vmin", get_vmin, nullptr, "the smallest value this node can take (computed once, kept on the node)", nullptr},
    {"vmax", get_vmax, nullptr, "the largest value this node can take (computed once, kept on the node)", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyMethodDef uop_methods[] = {
    {"sym_infer", m_sym_infer, METH_O,
     "sym_infer(var_vals): the value with the variables set (var_vals maps names or variable UOps to numbers)"},
    {nullptr, nullptr, 0, nullptr},
};

PyMethodDef module_functions[] = {
    {"fold", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(f_fold)), METH_FASTCALL | METH_KEYWORDS,
     "fold(op, dtype, *operands, src_dtype=None): op folded over constant operands with dtype's semantics, or None"},
    {"sym_infer", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(f_sym_infer)), METH_FASTCALL,
     "sym_infer(uop_or_int, var_vals): the value of a UOp with its variables set; numbers are returned unchanged"},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

bool init_symbolic(PyObject* module) {
  return add_uop_getset(uop_getset) && add_uop_methods(uop_methods) && PyModule_AddFunctions(module, module_functions) == 0;
}

}  // namespace th::py
