// SPEC checks for Python: spec_check(root, stage, level, pass) and spec_check_linear(program, level, pass).
#include <string>
#include <vector>

#include "convert.h"
#include "tinyhybrid/spec.h"

namespace th::py {

namespace {

bool stage_arg(PyObject* o, SpecStage& out) {
  const char* s = PyUnicode_Check(o) ? PyUnicode_AsUTF8(o) : nullptr;
  if (!s) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "spec_check: stage must be a str, got %.200s", Py_TYPE(o)->tp_name);
    return false;
  }
  if (const auto st = spec_stage_from_name(s)) {
    out = *st;
    return true;
  }
  PyErr_Format(PyExc_ValueError, "spec_check: no stage %R (tensor graph, kernel graph, lowered, linearized)", o);
  return false;
}

PyObject* f_spec_check(PyObject*, PyObject* args) {
  PyObject *root, *stage_o;
  int level;
  const char* pass;
  if (!PyArg_ParseTuple(args, "OOis:spec_check", &root, &stage_o, &level, &pass)) return nullptr;
  if (!is_uop(root)) return PyErr_Format(PyExc_TypeError, "spec_check: root must be a UOp, got %.200s", Py_TYPE(root)->tp_name);
  SpecStage stage;
  if (!stage_arg(stage_o, stage)) return nullptr;
  return guarded([&] {
    spec_check(uop_ref(root), stage, level, pass);
    Py_RETURN_NONE;
  });
}

PyObject* f_spec_check_linear(PyObject*, PyObject* args) {
  PyObject* seq_o;
  int level;
  const char* pass;
  if (!PyArg_ParseTuple(args, "Ois:spec_check_linear", &seq_o, &level, &pass)) return nullptr;
  PyObject* seq = PySequence_Fast(seq_o, "spec_check_linear: program must be a sequence of UOps");
  if (!seq) return nullptr;
  std::vector<UOpRef> hold;
  std::vector<const UOp*> program;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* u = PySequence_Fast_GET_ITEM(seq, i);
    if (!is_uop(u)) {
      Py_DECREF(seq);
      return PyErr_Format(PyExc_TypeError, "spec_check_linear: program[%zd] must be a UOp, got %.200s", i, Py_TYPE(u)->tp_name);
    }
    hold.push_back(uop_ref(u));
    program.push_back(hold.back().get());
  }
  Py_DECREF(seq);
  return guarded([&] {
    spec_check_linear(program, level, pass);
    Py_RETURN_NONE;
  });
}

PyMethodDef module_functions[] = {
    {"spec_check", f_spec_check, METH_VARARGS,
     "spec_check(root, stage, level, pass): raise RuntimeError at the first node under root that breaks a SPEC rule"},
    {"spec_check_linear", f_spec_check_linear, METH_VARARGS,
     "spec_check_linear(program, level, pass): the same for a linearized program (sources listed before users)"},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

bool init_spec(PyObject* module) { return PyModule_AddFunctions(module, module_functions) == 0; }

}  // namespace th::py
