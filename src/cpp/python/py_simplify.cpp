// simplify(), ssimplify() and the native symbolic rule set for Python.
#include "convert.h"
#include "tinyhybrid/simplify.h"

namespace th::py {

namespace {

PyObject* m_simplify(PyObject* self, PyObject*) {
  return guarded([&] { return uop_object(simplify(uop_ref(self)).get()); });
}

// The simplified node, or its Python value when it simplifies to a constant.
PyObject* m_ssimplify(PyObject* self, PyObject*) {
  return guarded([&] {
    const UOpRef s = simplify(uop_ref(self));
    return s->op() == Ops::CONST ? from_arg(s->arg()) : uop_object(s.get());
  });
}

PyObject* f_symbolic_matcher(PyObject*, PyObject*) { return guarded([] { return matcher_object(symbolic_matcher()); }); }

PyMethodDef uop_methods[] = {
    {"simplify", m_simplify, METH_NOARGS, "the graph rewritten with the native symbolic rules"},
    {"ssimplify", m_ssimplify, METH_NOARGS, "simplify(), as a Python number when the result is a constant"},
    {nullptr, nullptr, 0, nullptr},
};
PyMethodDef module_functions[] = {
    {"symbolic_matcher", f_symbolic_matcher, METH_NOARGS, "the native symbolic rules as a PatternMatcher"},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

bool init_simplify(PyObject* module) {
  return add_uop_methods(uop_methods) && PyModule_AddFunctions(module, module_functions) == 0;
}

}  // namespace th::py
