// PatternMatcher and graph_rewrite for Python: UPats arrive as nested tuples, callbacks as Python callables.
#include <algorithm>
#include <memory>
#include <string>

#include "convert.h"
#include "tinyhybrid/graph.h"
#include "tinyhybrid/rewrite.h"

namespace th::py {

namespace {

// A Python object kept alive by C++ (rules outlive the call that made them); released with the GIL held.
struct PyRef {
  PyObject* obj;
  explicit PyRef(PyObject* o) : obj(o) { Py_XINCREF(o); }
  ~PyRef() {
    const PyGILState_STATE g = PyGILState_Ensure();
    Py_XDECREF(obj);
    PyGILState_Release(g);
  }
  PyRef(const PyRef&) = delete;
  PyRef& operator=(const PyRef&) = delete;
};

// PatternMatcher.rewrite of one node hands back whatever its rule returned (tinygrad's renderers return strings); a
// graph rewrite takes only UOps. The one-node call marks its thread, and a rule's value that is not a UOp then ends
// the matching as this exception, which holds a reference to it.
thread_local bool any_result = false;
struct OtherResult {
  PyObject* value;
};
class ResultMode {
  bool prev_;

 public:
  explicit ResultMode(bool any) : prev_(any_result) { any_result = any; }
  ~ResultMode() { any_result = prev_; }
  ResultMode(const ResultMode&) = delete;
  ResultMode& operator=(const ResultMode&) = delete;
};

// (ops | None, dtypes | None, has_arg, arg, name | None, src_mode, src, allow_any_len, is_any) -> Pattern
bool pattern_from(PyObject* t, Pattern& out) {
  if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 9) {
    PyErr_SetString(PyExc_TypeError, "internal: a compiled UPat is a 9-tuple");
    return false;
  }
  out.is_any = PyObject_IsTrue(PyTuple_GET_ITEM(t, 8)) == 1;
  PyObject* ops = PyTuple_GET_ITEM(t, 0);
  if (ops != Py_None) {
    const Py_ssize_t n = PyTuple_GET_SIZE(ops);
    for (Py_ssize_t i = 0; i < n; ++i) {
      const long v = PyLong_AsLong(PyTuple_GET_ITEM(ops, i));
      if (v < 0 || static_cast<size_t>(v) >= kNumOps) {
        if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "UPat: %ld is not an op", v);
        return false;
      }
      out.ops = out.ops | OpSet{static_cast<Ops>(v)};
    }
  }
  PyObject* dts = PyTuple_GET_ITEM(t, 1);
  if (dts != Py_None) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(dts); ++i) {
      PyObject* d = PyTuple_GET_ITEM(dts, i);
      if (!is_dtype(d)) {
        PyErr_SetString(PyExc_TypeError, "UPat: dtype must be a DType or a tuple of DTypes");
        return false;
      }
      out.dtypes.push_back(dtype_of(d));
    }
  }
  if (PyObject_IsTrue(PyTuple_GET_ITEM(t, 2)) == 1) {
    Arg a;
    if (!to_arg(PyTuple_GET_ITEM(t, 3), a)) return false;
    out.arg = std::move(a);
  }
  if (PyObject* name = PyTuple_GET_ITEM(t, 4); name != Py_None) {
    const char* s = PyUnicode_AsUTF8(name);
    if (!s) return false;
    out.name = s;
  }
  const long mode = PyLong_AsLong(PyTuple_GET_ITEM(t, 5));
  if (mode < 0 || mode > 3) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "UPat: bad src mode");
    return false;
  }
  out.src_mode = static_cast<Pattern::Src>(mode);
  PyObject* src = PyTuple_GET_ITEM(t, 6);
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(src); ++i) {
    out.src.emplace_back();
    if (!pattern_from(PyTuple_GET_ITEM(src, i), out.src.back())) return false;
  }
  out.allow_any_len = PyObject_IsTrue(PyTuple_GET_ITEM(t, 7)) == 1;
  return true;
}

// Calls fn(**{name: capture for the names it takes}, [ctx=ctx]) with one vectorcall.
RuleFn python_rule(PyObject* fn, const std::vector<std::string>& names, PyObject* pass_names, bool wants_ctx) {
  auto f = std::make_shared<PyRef>(fn);
  std::vector<size_t> slots;
  std::vector<std::string> kw;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(pass_names); ++i) {
    const std::string n = PyUnicode_AsUTF8(PyTuple_GET_ITEM(pass_names, i));
    const auto it = std::find(names.begin(), names.end(), n);
    if (it == names.end()) throw UOpValueError("rule takes '" + n + "', which its pattern does not capture");
    slots.push_back(static_cast<size_t>(it - names.begin()));
    kw.push_back(n);
  }
  if (wants_ctx) kw.push_back("ctx");
  PyObject* kwnames = PyTuple_New(static_cast<Py_ssize_t>(kw.size()));
  for (size_t i = 0; i < kw.size(); ++i) PyTuple_SET_ITEM(kwnames, static_cast<Py_ssize_t>(i), PyUnicode_FromString(kw[i].c_str()));
  auto names_ref = std::make_shared<PyRef>(kwnames);
  Py_DECREF(kwnames);
  return [f, names_ref, slots, wants_ctx](const Captured& c, void* ctx) -> UOpRef {
    constexpr size_t kMax = 16;
    PyObject* stack[kMax + 1];
    const size_t n = slots.size() + (wants_ctx ? 1 : 0);
    if (n > kMax) throw UOpValueError("a rule takes at most 16 captures");
    size_t made = 0;
    struct Release {
      PyObject** s;
      size_t* n;
      ~Release() {
        for (size_t i = 0; i < *n; ++i) Py_DECREF(s[i + 1]);
      }
    } release{stack, &made};
    for (size_t slot : slots) {
      // a name that the matching alternative of a UPat.any does not bind arrives as None
      PyObject* w = c[slot] ? uop_object(c[slot]) : (Py_INCREF(Py_None), Py_None);
      if (!w) throw PythonError{};
      stack[1 + made++] = w;
    }
    if (wants_ctx) {
      PyObject* cx = ctx ? static_cast<PyObject*>(ctx) : Py_None;
      Py_INCREF(cx);
      stack[1 + made++] = cx;
    }
    PyObject* r = PyObject_Vectorcall(f->obj, stack + 1, PY_VECTORCALL_ARGUMENTS_OFFSET, names_ref->obj);
    if (!r) throw PythonError{};
    if (r == Py_None) {
      Py_DECREF(r);
      return nullptr;
    }
    if (!is_uop(r)) {
      if (any_result) throw OtherResult{r};
      PyErr_Format(PyExc_TypeError, "a rule returned %R, which is not a tinyhybrid UOp (a rule must return one, or None)",
                   reinterpret_cast<PyObject*>(Py_TYPE(r)));
      Py_DECREF(r);
      throw PythonError{};
    }
    UOpRef out = uop_ref(r);
    Py_DECREF(r);
    return out;
  };
}

struct PyMatcher {
  PyObject_HEAD
  PatternMatcher pm;  // constructed in place
  bool calls_python;  // some rule is a Python callback, so rewriting needs the GIL
};
PyTypeObject MatcherType = {PyVarObject_HEAD_INIT(nullptr, 0)};

PyObject* wrap_matcher(PatternMatcher pm, bool calls_python) {
  auto* o = PyObject_New(PyMatcher, &MatcherType);
  if (!o) return nullptr;
  new (&o->pm) PatternMatcher(std::move(pm));
  o->calls_python = calls_python;
  return reinterpret_cast<PyObject*>(o);
}
const PatternMatcher& matcher_of(PyObject* o) { return reinterpret_cast<PyMatcher*>(o)->pm; }
bool calls_python(PyObject* o) { return reinterpret_cast<PyMatcher*>(o)->calls_python; }

// Whether an arg holds a Python object: comparing it with another (as interning does) runs Python code.
bool is_python(const Arg& a) {
  if (a.kind() == Arg::Kind::Opaque) return true;
  if (a.kind() != Arg::Kind::Tuple) return false;
  for (const Arg& e : a.as_tuple())
    if (is_python(e)) return true;
  return false;
}
// Whether any node of the graph carries a Python object in its arg or tag. A native rewrite of such a graph keeps
// the GIL: rebuilding those nodes compares their args under the intern table's lock, which then needs the GIL too,
// and a thread waiting for the GIL while holding that lock would deadlock with one holding the GIL and waiting for
// the lock.
bool holds_python(const UOpRef& root) {
  for (const UOp* n : toposort(root.get()))
    if (is_python(n->arg()) || is_python(n->tag())) return true;
  return false;
}

// PatternMatcher([(compiled_upat, fn, rule_name, pass_names, wants_ctx[, location]), ...])
PyObject* matcher_new(PyTypeObject*, PyObject* args, PyObject*) {
  PyObject* list;
  if (!PyArg_ParseTuple(args, "O:PatternMatcher", &list)) return nullptr;
  PyObject* seq = PySequence_Fast(list, "PatternMatcher takes a list of rules");
  if (!seq) return nullptr;
  std::vector<Rule> rules;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject* result = guarded([&]() -> PyObject* {
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject *pt, *fn, *name, *pass, *location = nullptr;
      int wants_ctx;
      PyObject* item = PySequence_Fast_GET_ITEM(seq, i);
      if (!PyTuple_Check(item))  // PyArg_ParseTuple on a non-tuple is a SystemError
        return PyErr_Format(PyExc_TypeError, "PatternMatcher: rule %zd is a %s, not a compiled rule tuple", i,
                            Py_TYPE(item)->tp_name);
      if (!PyArg_ParseTuple(item, "OOUOp|U", &pt, &fn, &name, &pass, &wants_ctx, &location)) return nullptr;
      Rule r;
      if (!pattern_from(pt, r.pattern)) return nullptr;
      r.name = PyUnicode_AsUTF8(name);
      if (location) r.location = PyUnicode_AsUTF8(location);
      r.fn = python_rule(fn, capture_names(r.pattern), pass, wants_ctx != 0);
      rules.push_back(std::move(r));
    }
    const bool any_rules = !rules.empty();
    return wrap_matcher(PatternMatcher(std::move(rules)), any_rules);
  });
  Py_DECREF(seq);
  return result;
}

void matcher_dealloc(PyObject* self) {
  reinterpret_cast<PyMatcher*>(self)->pm.~PatternMatcher();
  PyObject_Free(self);
}

PyObject* matcher_add(PyObject* a, PyObject* b) {
  if (Py_TYPE(a) != &MatcherType || Py_TYPE(b) != &MatcherType) Py_RETURN_NOTIMPLEMENTED;
  return guarded([&] { return wrap_matcher(matcher_of(a) + matcher_of(b), calls_python(a) || calls_python(b)); });
}

Py_ssize_t matcher_len(PyObject* self) { return static_cast<Py_ssize_t>(matcher_of(self).size()); }

PyObject* matcher_rewrite(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 1 || nargs > 2 || !is_uop(args[0])) return PyErr_Format(PyExc_TypeError, "rewrite(uop, ctx=None)");
  void* ctx = nargs > 1 && args[1] != Py_None ? args[1] : nullptr;
  return guarded([&]() -> PyObject* {
    const UOpRef u = uop_ref(args[0]);
    UOpRef r;
    try {
      const ResultMode any(true);
      r = matcher_of(self).rewrite(u.get(), ctx);
    } catch (const OtherResult& o) {
      return o.value;
    }
    if (!r) Py_RETURN_NONE;
    return uop_object(r.get());
  });
}

PyObject* matcher_rule_names(PyObject* self, PyObject*) {
  const PatternMatcher& pm = matcher_of(self);
  PyObject* l = PyList_New(static_cast<Py_ssize_t>(pm.size()));
  for (size_t i = 0; l && i < pm.size(); ++i)
    PyList_SET_ITEM(l, static_cast<Py_ssize_t>(i), PyUnicode_FromString(pm.rule(i).name.c_str()));
  return l;
}

PyMethodDef matcher_methods[] = {
    {"rewrite", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(matcher_rewrite)), METH_FASTCALL,
     "rewrite(uop, ctx=None): what the first matching rule returned for this node (a UOp, or any value), or None"},
    {"rule_names", matcher_rule_names, METH_NOARGS, "the rules' names, in order"},
    {nullptr, nullptr, 0, nullptr},
};
PyNumberMethods matcher_number = [] {
  PyNumberMethods n{};
  n.nb_add = matcher_add;
  return n;
}();
PySequenceMethods matcher_seq = [] {
  PySequenceMethods s{};
  s.sq_length = matcher_len;
  return s;
}();

// graph_rewrite(sink, pm, ctx=None, bottom_up=False, name=None, max_rewrites=None)
PyObject* py_graph_rewrite(PyObject*, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"sink", "pm", "ctx", "bottom_up", "name", "max_rewrites", nullptr};
  PyObject *sink, *pm, *ctx = Py_None, *name = Py_None, *max_rw = Py_None;
  int bottom_up = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO!|OpOO:graph_rewrite", const_cast<char**>(kwlist), &sink,
                                   &MatcherType, &pm, &ctx, &bottom_up, &name, &max_rw))
    return nullptr;
  if (!is_uop(sink)) return PyErr_Format(PyExc_TypeError, "graph_rewrite: sink must be a UOp");
  RewriteLimits limits;
  if (max_rw != Py_None) {
    const long long v = PyLong_AsLongLong(max_rw);
    if (v < 0) return PyErr_Occurred() ? nullptr : PyErr_Format(PyExc_ValueError, "max_rewrites must be >= 0");
    limits.max_rewrites = static_cast<size_t>(v);
  }
  std::string nm = name == Py_None ? "" : PyUnicode_AsUTF8(name);
  return guarded([&] {
    const ResultMode uops_only(false);  // (a rule of a one-node rewrite may run a graph rewrite)
    try {
      const UOpRef root = uop_ref(sink);
      UOpRef r;
      if (calls_python(pm) || holds_python(root)) {
        r = graph_rewrite(root, matcher_of(pm), ctx == Py_None ? nullptr : ctx, bottom_up != 0, nm, limits);
      } else {  // native rules only: no Python runs until it returns
        GilRelease nogil;
        r = graph_rewrite(root, matcher_of(pm), nullptr, bottom_up != 0, nm, limits);
      }
      return uop_object(r.get());
    } catch (const RewriteError& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
      throw PythonError{};
    }
  });
}

PyMethodDef module_functions[] = {
    {"graph_rewrite", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_graph_rewrite)),
     METH_VARARGS | METH_KEYWORDS, "rewrite a graph to a fixed point with a PatternMatcher"},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

bool is_matcher(PyObject* o) { return Py_TYPE(o) == &MatcherType; }
PyObject* matcher_object(PatternMatcher pm) { return wrap_matcher(std::move(pm), false); }

bool init_rewrite(PyObject* module) {
  MatcherType.tp_name = "tinyhybrid._core.PatternMatcher";
  MatcherType.tp_basicsize = sizeof(PyMatcher);
  MatcherType.tp_flags = Py_TPFLAGS_DEFAULT;
  MatcherType.tp_doc = "Compiled rewrite rules, dispatched by root op. Combine with +.";
  MatcherType.tp_new = matcher_new;
  MatcherType.tp_dealloc = matcher_dealloc;
  MatcherType.tp_methods = matcher_methods;
  MatcherType.tp_as_number = &matcher_number;
  MatcherType.tp_as_sequence = &matcher_seq;
  if (PyType_Ready(&MatcherType) < 0) return false;
  Py_INCREF(&MatcherType);
  if (PyModule_AddObject(module, "PatternMatcher", reinterpret_cast<PyObject*>(&MatcherType)) < 0) return false;
  return PyModule_AddFunctions(module, module_functions) == 0;
}

}  // namespace th::py
