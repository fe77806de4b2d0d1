// The UOp Python type: a thin handle on a C++ node. One live Python object per node, so `a is b` holds for
// equal nodes; the object dies when Python drops it, and the node when nothing (Python or C++) refers to it.
#include <memory>
#include <string_view>
#include <vector>

#include "convert.h"
#include "tinyhybrid/graph.h"
#include "tinyhybrid/math.h"

namespace th::py {

namespace {

struct PyUOp {
  PyObject_HEAD
  const UOp* node;      // owned reference
  PyObject* arg_cache;  // the Python form of node->arg(), made on first access
  PyObject* dict;
  PyObject* weakrefs;
};

// The class wrappers are made of: the Python package's UOp subclass, once registered.
PyTypeObject* uop_class = &UOpType;

PyUOp* as_uop(PyObject* o) { return reinterpret_cast<PyUOp*>(o); }
UOpRef ref_of(PyObject* o) { return UOpRef(as_uop(o)->node); }

// Wrappers are made and dropped by the million (a pass reads every node of a toposort once): the memory of dropped
// ones is kept for the next, as CPython does for its tuples and floats. Held only while the GIL is.
constexpr size_t kSpareWrappers = 4096;
std::vector<PyObject*>& spare_wrappers() {
  static std::vector<PyObject*> spare;
  return spare;
}

PyObject* new_wrapper() {
  auto& spare = spare_wrappers();
  if (spare.empty()) return uop_class->tp_alloc(uop_class, 0);
  PyObject* o = spare.back();
  spare.pop_back();
  PyUOp* u = as_uop(o);
  u->node = nullptr, u->arg_cache = nullptr, u->dict = nullptr, u->weakrefs = nullptr;
  PyObject_Init(o, uop_class);  // the type (a reference to it, for a heap type) and a fresh reference count
  PyObject_GC_Track(o);
  return o;
}

Obj wrap(const UOp* n) {
  if (auto* existing = static_cast<PyObject*>(n->binding_handle())) {
    Py_INCREF(existing);
    return existing;
  }
  PyObject* o = new_wrapper();
  if (!o) return nullptr;
  UOpRef keep(n);
  as_uop(o)->node = keep.release();
  n->set_binding_handle(o);
  return o;
}

bool dtype_arg(PyObject* o, DType& out, const char* what) {
  if (is_dtype(o)) {
    out = dtype_of(o);
    return true;
  }
  PyErr_Format(PyExc_TypeError, "%s: dtype must be a DType, got %.200s", what, Py_TYPE(o)->tp_name);
  return false;
}

bool ops_arg(PyObject* o, Ops& out) {
  if (!PyLong_Check(o)) {
    PyErr_Format(PyExc_TypeError, "UOp: op must be an Ops member, got %.200s", Py_TYPE(o)->tp_name);
    return false;
  }
  int overflow = 0;
  const long v = PyLong_AsLongAndOverflow(o, &overflow);
  if (v == -1 && PyErr_Occurred()) return false;
  if (overflow || v < 0 || static_cast<size_t>(v) >= kNumOps) {
    PyErr_Format(PyExc_ValueError, "UOp: %R is not an op", o);
    return false;
  }
  out = static_cast<Ops>(v);
  return true;
}

bool src_arg(PyObject* o, std::vector<UOpRef>& out, const char* op) {
  if (!PyTuple_Check(o) && !PyList_Check(o)) {
    PyErr_Format(PyExc_TypeError, "%s: src must be a tuple of UOps, got %.200s", op, Py_TYPE(o)->tp_name);
    return false;
  }
  PyObject* seq = o;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  out.reserve(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* s = PySequence_Fast_GET_ITEM(seq, i);
    if (!is_uop(s)) {
      PyErr_Format(PyExc_TypeError, "%s: src[%zd] must be a UOp, got %.200s", op, i, Py_TYPE(s)->tp_name);
      return false;
    }
    out.push_back(ref_of(s));
  }
  return true;
}

// A Python number, bool or UOp as a math operand.
bool operand(PyObject* o, math::Operand& out) {
  if (is_uop(o)) {
    out = ref_of(o);
    return true;
  }
  PyTypeObject* t = Py_TYPE(o);
  if (t == &PyBool_Type || PyLong_Check(o) || PyFloat_Check(o)) {
    Arg a;
    if (t == &PyBool_Type) a = Arg::boolean(o == Py_True);
    else if (PyFloat_Check(o)) a = Arg::floating(PyFloat_AsDouble(o));
    else if (!to_arg(o, a)) return false;
    if (!a.is_number()) return false;
    out = a;
    return true;
  }
  return false;
}

// ---- construction ----

// Re-raises the pending Python error with the op's name in front, so bad input says which op it was for.
PyObject* name_op_in_error(Ops op, const char* what) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  // keep the kind of error (a UnicodeError is reported as the ValueError it is), with the op named in front
  PyObject* kind = type && PyErr_GivenExceptionMatches(type, PyExc_ValueError) ? PyExc_ValueError : PyExc_TypeError;
  PyErr_Format(kind, "%s: bad %s: %S", std::string(op_name(op)).c_str(), what, value ? value : Py_None);
  Py_XDECREF(type), Py_XDECREF(value), Py_XDECREF(tb);
  return nullptr;
}

PyObject* make_node(Ops op, PyObject* dtype_o, std::vector<UOpRef>& src, PyObject* arg_o, PyObject* tag_o) {
  Arg arg, tag;
  if (arg_o && !to_arg(arg_o, arg)) return name_op_in_error(op, "arg");
  if (tag_o && !to_arg(tag_o, tag)) return name_op_in_error(op, "tag");
  return guarded([&] {
    DType dtype;
    if (dtype_o && dtype_o != Py_None) {
      if (!dtype_arg(dtype_o, dtype, std::string(op_name(op)).c_str())) throw PythonError{};
    } else {
      dtype = infer_dtype(op, src, arg);
    }
    return wrap(UOp::make(op, dtype, src, std::move(arg), std::move(tag)).get());
  });
}

PyObject* uop_new(PyTypeObject*, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"op", "dtype", "src", "arg", "tag", nullptr};
  PyObject *op_o, *dtype_o = nullptr, *src_o = nullptr, *arg_o = nullptr, *tag_o = nullptr;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|OOOO:UOp", const_cast<char**>(kwlist), &op_o, &dtype_o, &src_o,
                                   &arg_o, &tag_o))
    return nullptr;
  Ops op;
  if (!ops_arg(op_o, op)) return nullptr;
  std::vector<UOpRef> src;
  if (src_o && !src_arg(src_o, src, std::string(op_name(op)).c_str())) return nullptr;
  return make_node(op, dtype_o, src, arg_o, tag_o);
}

void uop_dealloc(PyObject* self) {
  PyObject_GC_UnTrack(self);
  PyUOp* u = as_uop(self);
  if (u->weakrefs) PyObject_ClearWeakRefs(self);
  Py_CLEAR(u->arg_cache);
  Py_CLEAR(u->dict);
  if (u->node) {
    if (u->node->binding_handle() == self) u->node->set_binding_handle(nullptr);
    UOpRef::adopt(std::exchange(u->node, nullptr));  // drops the reference
  }
  // A heap subclass's own dealloc (subtype_dealloc) releases the type reference after this returns.
  if (auto& spare = spare_wrappers(); Py_TYPE(self) == uop_class && spare.size() < kSpareWrappers) spare.push_back(self);
  else Py_TYPE(self)->tp_free(self);
}

int uop_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(as_uop(self)->dict);
  Py_VISIT(as_uop(self)->arg_cache);
  return 0;
}

int uop_clear(PyObject* self) {
  Py_CLEAR(as_uop(self)->dict);
  Py_CLEAR(as_uop(self)->arg_cache);
  return 0;
}

// ---- attributes ----

// Read for every node a pass looks at: straight to the registered Ops member, no Arg in between.
PyObject* get_op(PyObject* self, void*) {
  const auto op = static_cast<Py_ssize_t>(as_uop(self)->node->op());
  if (PyObject* members = enums().members[static_cast<size_t>(EnumKind::Ops)]; members && op < PyTuple_GET_SIZE(members)) {
    PyObject* m = PyTuple_GET_ITEM(members, op);
    Py_INCREF(m);
    return m;
  }
  return from_arg(Arg::op(as_uop(self)->node->op()));
}
PyObject* get_dtype(PyObject* self, void*) { return dtype_object(as_uop(self)->node->dtype()); }
PyObject* get_src(PyObject* self, void*) {
  const UOp* n = as_uop(self)->node;
  PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(n->nsrc()));
  if (!t) return nullptr;
  for (size_t i = 0; i < n->nsrc(); ++i) {
    PyObject* s = wrap(n->src(i).get());
    if (!s) {
      Py_DECREF(t);
      return nullptr;
    }
    PyTuple_SET_ITEM(t, static_cast<Py_ssize_t>(i), s);
  }
  return t;
}
PyObject* get_arg(PyObject* self, void*) {
  PyUOp* u = as_uop(self);
  if (!u->arg_cache && !(u->arg_cache = from_arg(u->node->arg()))) return nullptr;
  Py_INCREF(u->arg_cache);
  return u->arg_cache;
}
PyObject* get_tag(PyObject* self, void*) { return from_arg(as_uop(self)->node->tag()); }

PyGetSetDef uop_getset[] = {
    {"op", get_op, nullptr, "the operation (an Ops member)", nullptr},
    {"dtype", get_dtype, nullptr, "the value's dtype", nullptr},
    {"src", get_src, nullptr, "the source nodes", nullptr},
    {"arg", get_arg, nullptr, "the op's argument", nullptr},
    {"tag", get_tag, nullptr, "a free-form marker that is part of the node's identity", nullptr},
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

// ---- toposort results ----

struct TopoData {
  std::vector<UOpRef> roots;  // keep the walked graph alive
  std::vector<const UOp*> order;
  std::unique_ptr<NodeSet> members;  // built on the first `in`
};
struct PyTopo {
  PyObject_HEAD
  TopoData data;  // constructed in place by make_topo, destroyed by topo_dealloc
};
PyTypeObject TopoType = {PyVarObject_HEAD_INIT(nullptr, 0)};

struct PyTopoIter {
  PyObject_HEAD
  PyObject* topo;
  Py_ssize_t i;
  Py_ssize_t step;
};
PyTypeObject TopoIterType = {PyVarObject_HEAD_INIT(nullptr, 0)};

PyTopo* as_topo(PyObject* o) { return reinterpret_cast<PyTopo*>(o); }

PyObject* make_topo(std::vector<UOpRef> roots, std::vector<const UOp*> order) {
  PyTopo* t = PyObject_New(PyTopo, &TopoType);
  if (!t) return nullptr;
  new (&t->data) TopoData{std::move(roots), std::move(order), nullptr};
  return reinterpret_cast<PyObject*>(t);
}

void topo_dealloc(PyObject* self) {
  as_topo(self)->data.~TopoData();
  PyObject_Free(self);
}
Py_ssize_t topo_len(PyObject* self) { return static_cast<Py_ssize_t>(as_topo(self)->data.order.size()); }
PyObject* topo_item(PyObject* self, Py_ssize_t i) {
  const auto& order = as_topo(self)->data.order;
  // Python already added len() to a negative index (sq_item's contract): what is still negative is out of range
  if (i < 0 || static_cast<size_t>(i) >= order.size()) {
    PyErr_SetString(PyExc_IndexError, "toposort index out of range");
    return nullptr;
  }
  return wrap(order[static_cast<size_t>(i)]);
}
int topo_contains(PyObject* self, PyObject* o) {
  if (!is_uop(o)) return 0;
  TopoData& t = as_topo(self)->data;
  if (!t.members) {
    t.members = std::make_unique<NodeSet>(t.order.size());
    for (const UOp* n : t.order) t.members->insert(n);
  }
  return t.members->contains(as_uop(o)->node);
}
PyObject* topo_iter_make(PyObject* self, bool reverse) {
  PyTopoIter* it = PyObject_New(PyTopoIter, &TopoIterType);
  if (!it) return nullptr;
  Py_INCREF(self);
  it->topo = self;
  it->step = reverse ? -1 : 1;
  it->i = reverse ? topo_len(self) - 1 : 0;
  return reinterpret_cast<PyObject*>(it);
}
PyObject* topo_iter(PyObject* self) { return topo_iter_make(self, false); }
PyObject* topo_reversed(PyObject* self, PyObject*) { return topo_iter_make(self, true); }
PyObject* topo_repr(PyObject* self) { return PyUnicode_FromFormat("<toposort of %zd UOps>", topo_len(self)); }

void topo_iter_dealloc(PyObject* self) {
  Py_DECREF(reinterpret_cast<PyTopoIter*>(self)->topo);
  PyObject_Free(self);
}
PyObject* topo_iter_next(PyObject* self) {
  auto* it = reinterpret_cast<PyTopoIter*>(self);
  if (it->i < 0 || it->i >= topo_len(it->topo)) return nullptr;
  PyObject* r = wrap(as_topo(it->topo)->data.order[static_cast<size_t>(it->i)]);
  it->i += it->step;
  return r;
}

PySequenceMethods topo_seq = {topo_len, nullptr, nullptr, topo_item, nullptr, nullptr, nullptr, topo_contains, nullptr, nullptr};
PyMethodDef topo_methods[] = {
    {"__reversed__", topo_reversed, METH_NOARGS, nullptr},
    {nullptr, nullptr, 0, nullptr},
};

// ---- methods ----

// Keyword handling for FASTCALL methods: returns the value bound to `name` or nullptr.
PyObject* kwarg(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames, std::string_view name) {
  if (!kwnames) return nullptr;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); ++i)
    if (PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, i)) == name) return args[nargs + i];
  return nullptr;
}

PyObject* m_toposort(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  PyObject* gate = nargs > 0 ? args[0] : kwarg(args, nargs, kwnames, "gate");
  return guarded([&]() -> PyObject* {
    Gate g;
    if (gate && gate != Py_None) {
      g = [gate](const UOp* n) {
        PyObject* w = wrap(n);
        if (!w) throw PythonError{};
        PyObject* r = PyObject_CallOneArg(gate, w);
        Py_DECREF(w);
        if (!r) throw PythonError{};
        const int truth = PyObject_IsTrue(r);
        Py_DECREF(r);
        if (truth < 0) throw PythonError{};
        return truth == 1;
      };
    }
    UOpRef root = ref_of(self);
    auto order = toposort(root.get(), g);
    return make_topo({root}, std::move(order));
  });
}

PyObject* m_backward_slice(PyObject* self, void*) {
  return guarded([&] {
    UOpRef root = ref_of(self);
    return make_topo({root}, backward_slice(root.get()));
  });
}

PyObject* m_replace(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (nargs) return PyErr_Format(PyExc_TypeError, "replace() takes keyword arguments only");
  const UOp* n = as_uop(self)->node;
  Ops op = n->op();
  DType dtype = n->dtype();
  std::vector<UOpRef> src(n->src().begin(), n->src().end());
  Arg arg = n->arg(), tag = n->tag();
  for (Py_ssize_t i = 0; kwnames && i < PyTuple_GET_SIZE(kwnames); ++i) {
    const std::string_view k = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, i));
    PyObject* v = args[i];
    if (k == "op") {
      if (!ops_arg(v, op)) return nullptr;
    } else if (k == "dtype") {
      if (!dtype_arg(v, dtype, "replace")) return nullptr;
    } else if (k == "src") {
      src.clear();
      if (!src_arg(v, src, "replace")) return nullptr;
    } else if (k == "arg") {
      if (!to_arg(v, arg)) return nullptr;
    } else if (k == "tag") {
      if (!to_arg(v, tag)) return nullptr;
    } else {
      return PyErr_Format(PyExc_TypeError, "replace() got an unexpected keyword argument '%s'", std::string(k).c_str());
    }
  }
  return guarded([&] { return wrap(UOp::make(op, dtype, src, std::move(arg), std::move(tag)).get()); });
}

PyObject* m_substitute(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject*) {
  if (nargs < 1 || !PyDict_Check(args[0])) return PyErr_Format(PyExc_TypeError, "substitute() takes a dict of UOp -> UOp");
  SubstituteMap map;
  PyObject *k, *v;
  Py_ssize_t pos = 0;
  while (PyDict_Next(args[0], &pos, &k, &v)) {
    if (!is_uop(k) || !is_uop(v)) return PyErr_Format(PyExc_TypeError, "substitute() maps UOps to UOps");
    map.emplace(as_uop(k)->node, ref_of(v));
  }
  return guarded([&] { return wrap(substitute(ref_of(self), map).get()); });
}

PyObject* m_render(PyObject* self, PyObject*, PyObject*) {
  return guarded([&] { return PyUnicode_FromString(render(ref_of(self)).c_str()); });
}

PyObject* m_reduce(PyObject* self, PyObject*) {
  const UOp* n = as_uop(self)->node;
  PyObject* op = get_op(self, nullptr);
  PyObject* dtype = get_dtype(self, nullptr);
  PyObject* src = get_src(self, nullptr);
  PyObject* arg = get_arg(self, nullptr);
  PyObject* tag = from_arg(n->tag());
  if (!op || !dtype || !src || !arg || !tag) {
    Py_XDECREF(op), Py_XDECREF(dtype), Py_XDECREF(src), Py_XDECREF(arg), Py_XDECREF(tag);
    return nullptr;
  }
  return Py_BuildValue("(O(NNNNN))", reinterpret_cast<PyObject*>(Py_TYPE(self)), op, dtype, src, arg, tag);
}

// UOp.const(dtype, value) or UOp.const(value, dtype): the value committed to the dtype.
PyObject* m_const(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  PyObject* a = nargs > 0 ? args[0] : nullptr;
  PyObject* b = nargs > 1 ? args[1] : kwarg(args, nargs, kwnames, "dtype");
  if (PyObject* bv = kwarg(args, nargs, kwnames, "b")) { b = a; a = bv; }
  if (!a) return PyErr_Format(PyExc_TypeError, "const() needs a value");
  PyObject* dt = (a && is_dtype(a)) ? a : (b && is_dtype(b)) ? b : nullptr;
  PyObject* value = dt == a ? b : a;
  if (!value) return PyErr_Format(PyExc_TypeError, "const() needs a value");
  if (is_uop(value)) {
    if (!dt) { Py_INCREF(value); return value; }
    return guarded([&] { return wrap(cast(ref_of(value), dtype_of(dt)).get()); });
  }
  if (PyTuple_Check(value)) {
    // A vector constant: one CONST per lane, stacked.
    const Py_ssize_t n = PyTuple_GET_SIZE(value);
    std::vector<Arg> lanes(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i)
      if (!to_arg(PyTuple_GET_ITEM(value, i), lanes[static_cast<size_t>(i)])) return nullptr;
    return guarded([&] {
      DType s = dt ? dtype_of(dt).scalar() : infer_dtype(Ops::CONST, {}, lanes.empty() ? Arg() : lanes[0]);
      std::vector<UOpRef> srcs;
      for (const Arg& l : lanes) srcs.push_back(UOp::const_of(s, l));
      return wrap(UOp::make(Ops::STACK, s.vec(static_cast<uint32_t>(n)), srcs).get());
    });
  }
  Arg v;
  if (!to_arg(value, v)) return nullptr;
  return guarded([&] {
    const DType d = dt ? dtype_of(dt) : infer_dtype(Ops::CONST, {}, v);
    return wrap(UOp::const_of(d, v).get());
  });
}

PyObject* m_variable(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  PyObject* name = nargs > 0 ? args[0] : kwarg(args, nargs, kwnames, "name");
  PyObject* lo = nargs > 1 ? args[1] : kwarg(args, nargs, kwnames, "min_val");
  PyObject* hi = nargs > 2 ? args[2] : kwarg(args, nargs, kwnames, "max_val");
  PyObject* dt = nargs > 3 ? args[3] : kwarg(args, nargs, kwnames, "dtype");
  if (!name || !lo || !hi) return PyErr_Format(PyExc_TypeError, "variable(name, min_val, max_val, dtype=dtypes.int)");
  if (!PyUnicode_Check(name)) return PyErr_Format(PyExc_TypeError, "variable: name must be a str");
  Arg n, a, b;
  if (!to_arg(name, n) || !to_arg(lo, a) || !to_arg(hi, b)) return name_op_in_error(Ops::DEFINE_VAR, "variable bound or name");
  DType dtype = DType::int32();
  if (dt && dt != Py_None && !dtype_arg(dt, dtype, "variable")) return nullptr;
  return guarded([&] {
    return wrap(UOp::make(Ops::DEFINE_VAR, dtype, {}, Arg::tuple({n, a, b})).get());
  });
}

PyObject* m_alu(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 1) return PyErr_Format(PyExc_TypeError, "alu(op, *src)");
  Ops op;
  if (!ops_arg(args[0], op)) return nullptr;
  std::vector<UOpRef> src{ref_of(self)};
  for (Py_ssize_t i = 1; i < nargs; ++i) {
    if (!is_uop(args[i])) return PyErr_Format(PyExc_TypeError, "alu: sources must be UOps");
    src.push_back(ref_of(args[i]));
  }
  return guarded([&] { return wrap(alu(op, src).get()); });
}

template <bool Bit>
PyObject* m_cast(PyObject* self, PyObject* dt) {
  DType d;
  if (!dtype_arg(dt, d, Bit ? "bitcast" : "cast")) return nullptr;
  return guarded([&] { return wrap((Bit ? bitcast(ref_of(self), d) : cast(ref_of(self), d)).get()); });
}

PyObject* m_where(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  math::Operand a, b;
  if (nargs != 2 || !operand(args[0], a) || !operand(args[1], b))
    return PyErr_Occurred() ? nullptr : PyErr_Format(PyExc_TypeError, "where(a, b) takes two UOps or numbers");
  return guarded([&] { return wrap(math::where(ref_of(self), a, b).get()); });
}

template <math::Binary B>
PyObject* m_binary(PyObject* self, PyObject* other) {
  math::Operand b;
  if (!operand(other, b)) {
    if (PyErr_Occurred()) return nullptr;
    return PyErr_Format(PyExc_TypeError, "expected a UOp or a number, got %.200s", Py_TYPE(other)->tp_name);
  }
  return guarded([&] { return wrap(math::binary(B, ref_of(self), b).get()); });
}

template <Ops Op>
PyObject* m_unary(PyObject* self, PyObject*) {
  return guarded([&] { return wrap(math::unary(Op, ref_of(self)).get()); });
}
PyObject* m_neg(PyObject* self, PyObject*) { return guarded([&] { return wrap(math::neg(ref_of(self)).get()); }); }
PyObject* m_logical_not(PyObject* self, PyObject*) {
  return guarded([&] { return wrap(math::logical_not(ref_of(self)).get()); });
}
PyObject* m_const_like(PyObject* self, PyObject* v) {
  Arg a;
  if (!to_arg(v, a)) return nullptr;
  return guarded([&] { return wrap(math::const_like(ref_of(self), a).get()); });
}

PyObject* m_sink(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  std::vector<UOpRef> src;
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    if (args[i] == Py_None) continue;
    if (!is_uop(args[i])) return PyErr_Format(PyExc_TypeError, "sink: sources must be UOps");
    src.push_back(ref_of(args[i]));
  }
  return guarded([&] { return wrap(UOp::make(Ops::SINK, DType::void_(), src).get()); });
}

#define TH_FASTCALL_KW(f) reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(f)), METH_FASTCALL | METH_KEYWORDS
#define TH_FASTCALL(f) reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(f)), METH_FASTCALL

PyMethodDef uop_methods[] = {
    {"const", TH_FASTCALL_KW(m_const) | METH_STATIC, "UOp.const(dtype, value): a constant"},
    {"variable", TH_FASTCALL_KW(m_variable) | METH_STATIC, "UOp.variable(name, min_val, max_val, dtype=dtypes.int)"},
    {"sink", TH_FASTCALL(m_sink) | METH_STATIC, "UOp.sink(*srcs): a SINK over the sources"},
    {"alu", TH_FASTCALL(m_alu), "self.alu(op, *src)"},
    {"cast", m_cast<false>, METH_O, "cast to a dtype"},
    {"bitcast", m_cast<true>, METH_O, "reinterpret the bits as a dtype"},
    {"where", TH_FASTCALL(m_where), "self ? a : b"},
    {"maximum", m_binary<math::Binary::Max>, METH_O, nullptr},
    {"minimum", m_binary<math::Binary::Min>, METH_O, nullptr},
    {"ne", m_binary<math::Binary::Ne>, METH_O, nullptr},
    {"eq", m_binary<math::Binary::Eq>, METH_O, nullptr},
    {"lt", m_binary<math::Binary::Lt>, METH_O, nullptr},
    {"pow", m_binary<math::Binary::Pow>, METH_O, nullptr},
    {"reciprocal", m_unary<Ops::RECIPROCAL>, METH_NOARGS, nullptr},
    {"sqrt", m_unary<Ops::SQRT>, METH_NOARGS, nullptr},
    {"exp2", m_unary<Ops::EXP2>, METH_NOARGS, nullptr},
    {"log2", m_unary<Ops::LOG2>, METH_NOARGS, nullptr},
    {"sin", m_unary<Ops::SIN>, METH_NOARGS, nullptr},
    {"trunc", m_unary<Ops::TRUNC>, METH_NOARGS, nullptr},
    {"neg", m_neg, METH_NOARGS, nullptr},
    {"logical_not", m_logical_not, METH_NOARGS, nullptr},
    {"const_like", m_const_like, METH_O, "a constant of this node's dtype"},
    {"toposort", TH_FASTCALL_KW(m_toposort), "nodes in order, sources before users"},
    {"replace", TH_FASTCALL_KW(m_replace), "the node with some fields replaced"},
    {"substitute", TH_FASTCALL_KW(m_substitute), "replace nodes by a dict, rebuilding their users"},
    {"render", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(m_render)), METH_VARARGS | METH_KEYWORDS,
     "an expression string"},
    {"__reduce__", m_reduce, METH_NOARGS, nullptr},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef* all_getset() {
  static PyGetSetDef defs[] = {
      uop_getset[0], uop_getset[1], uop_getset[2], uop_getset[3], uop_getset[4], uop_getset[5],
      {"backward_slice", m_backward_slice, nullptr, "every node below this one", nullptr},
      {nullptr, nullptr, nullptr, nullptr, nullptr},
  };
  return defs;
}

// ---- number protocol: operators on UOps and Python numbers, in either order ----

template <math::Binary B>
PyObject* nb_binary(PyObject* a, PyObject* b) {
  math::Operand x, y;
  if (!operand(a, x) || !operand(b, y)) {
    if (PyErr_Occurred()) return nullptr;
    Py_RETURN_NOTIMPLEMENTED;
  }
  return guarded([&] { return wrap(math::binary(B, x, y).get()); });
}
PyObject* nb_neg(PyObject* a) { return m_neg(a, nullptr); }

PyNumberMethods uop_number = [] {
  PyNumberMethods n{};
  n.nb_add = nb_binary<math::Binary::Add>;
  n.nb_subtract = nb_binary<math::Binary::Sub>;
  n.nb_multiply = nb_binary<math::Binary::Mul>;
  n.nb_true_divide = nb_binary<math::Binary::TrueDiv>;
  n.nb_floor_divide = nb_binary<math::Binary::FloorDiv>;
  n.nb_remainder = nb_binary<math::Binary::Mod>;
  n.nb_and = nb_binary<math::Binary::And>;
  n.nb_or = nb_binary<math::Binary::Or>;
  n.nb_xor = nb_binary<math::Binary::Xor>;
  n.nb_lshift = nb_binary<math::Binary::Shl>;
  n.nb_rshift = nb_binary<math::Binary::Shr>;
  n.nb_negative = nb_neg;
  return n;
}();

// == is identity (nodes are interned); the other comparisons build comparison nodes, as in tinygrad.
PyObject* uop_richcompare(PyObject* a, PyObject* b, int op) {
  if (op == Py_EQ) return PyBool_FromLong(a == b);
  switch (op) {
    case Py_NE: return nb_binary<math::Binary::Ne>(a, b);
    case Py_LT: return nb_binary<math::Binary::Lt>(a, b);
    case Py_GT: return nb_binary<math::Binary::Gt>(a, b);
    case Py_LE: return nb_binary<math::Binary::Le>(a, b);
    case Py_GE: return nb_binary<math::Binary::Ge>(a, b);
  }
  Py_RETURN_NOTIMPLEMENTED;
}

Py_hash_t uop_hash(PyObject* self) {
  return static_cast<Py_hash_t>((reinterpret_cast<uintptr_t>(as_uop(self)->node) >> 4) & 0x7fffffffffffffffull);
}

PyObject* uop_repr(PyObject* self) {
  return guarded([&] { return PyUnicode_FromString(repr(ref_of(self)).c_str()); });
}

}  // namespace

PyTypeObject UOpType = {PyVarObject_HEAD_INIT(nullptr, 0)};

bool is_uop(PyObject* o) { return PyObject_TypeCheck(o, &UOpType); }
Obj uop_object(const UOp* u) { return wrap(u); }
UOpRef uop_ref(PyObject* o) { return ref_of(o); }

bool add_uop_methods(PyMethodDef* defs) {
  for (PyMethodDef* d = defs; d->ml_name; ++d) {
    PyObject* descr;
    if (d->ml_flags & METH_STATIC) {
      PyObject* fn = PyCFunction_New(d, nullptr);
      descr = fn ? PyStaticMethod_New(fn) : nullptr;
      Py_XDECREF(fn);
    } else {
      descr = PyDescr_NewMethod(&UOpType, d);
    }
    if (!descr || PyDict_SetItemString(UOpType.tp_dict, d->ml_name, descr) < 0) return false;
    Py_DECREF(descr);
  }
  PyType_Modified(&UOpType);
  return true;
}

bool add_uop_getset(PyGetSetDef* defs) {
  for (PyGetSetDef* d = defs; d->name; ++d) {
    PyObject* descr = PyDescr_NewGetSet(&UOpType, d);
    if (!descr || PyDict_SetItemString(UOpType.tp_dict, d->name, descr) < 0) return false;
    Py_DECREF(descr);
  }
  PyType_Modified(&UOpType);
  return true;
}

PyObject* register_uop_class(PyObject*, PyObject* cls) {
  if (!PyType_Check(cls) || !PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(cls), &UOpType))
    return PyErr_Format(PyExc_TypeError, "the UOp class must subclass _core.UOp");
  Py_INCREF(cls);
  uop_class = reinterpret_cast<PyTypeObject*>(cls);
  // (kept memory is of the old class's size)
  for (PyObject* o : spare_wrappers()) PyObject_GC_Del(o);
  spare_wrappers().clear();
  Py_RETURN_NONE;
}

bool init_uop_type(PyObject* module) {
  UOpType.tp_name = "tinyhybrid._core.UOp";
  UOpType.tp_basicsize = sizeof(PyUOp);
  UOpType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC;
  UOpType.tp_doc = "A node of the UOp graph: UOp(op, dtype=None, src=(), arg=None, tag=None). Interned and immutable.";
  UOpType.tp_new = uop_new;
  UOpType.tp_dealloc = uop_dealloc;
  UOpType.tp_traverse = uop_traverse;
  UOpType.tp_clear = uop_clear;
  UOpType.tp_getset = all_getset();
  UOpType.tp_methods = uop_methods;
  UOpType.tp_as_number = &uop_number;
  UOpType.tp_richcompare = uop_richcompare;
  UOpType.tp_hash = uop_hash;
  UOpType.tp_repr = uop_repr;
  UOpType.tp_dictoffset = offsetof(PyUOp, dict);
  UOpType.tp_weaklistoffset = offsetof(PyUOp, weakrefs);
  if (PyType_Ready(&UOpType) < 0) return false;

  TopoType.tp_name = "tinyhybrid._core.Toposort";
  TopoType.tp_basicsize = sizeof(PyTopo);
  TopoType.tp_flags = Py_TPFLAGS_DEFAULT;
  TopoType.tp_doc = "A toposort kept on the C++ side; UOp objects are made as they are read.";
  TopoType.tp_dealloc = topo_dealloc;
  TopoType.tp_as_sequence = &topo_seq;
  TopoType.tp_iter = topo_iter;
  TopoType.tp_methods = topo_methods;
  TopoType.tp_repr = topo_repr;
  if (PyType_Ready(&TopoType) < 0) return false;

  TopoIterType.tp_name = "tinyhybrid._core.ToposortIterator";
  TopoIterType.tp_basicsize = sizeof(PyTopoIter);
  TopoIterType.tp_flags = Py_TPFLAGS_DEFAULT;
  TopoIterType.tp_dealloc = topo_iter_dealloc;
  TopoIterType.tp_iter = PyObject_SelfIter;
  TopoIterType.tp_iternext = topo_iter_next;
  if (PyType_Ready(&TopoIterType) < 0) return false;

  static PyMethodDef reg = {"register_uop_class", register_uop_class, METH_O,
                            "make wrappers of this UOp subclass (the Python package's UOp)"};
  PyObject* f = PyCFunction_New(&reg, nullptr);
  if (!f || PyModule_AddObject(module, "register_uop_class", f) < 0) return false;
  Py_INCREF(&UOpType);
  return PyModule_AddObject(module, "UOp", reinterpret_cast<PyObject*>(&UOpType)) == 0 &&
         PyModule_AddObject(module, "Toposort", reinterpret_cast<PyObject*>(&TopoType)) == 0;
}

}  // namespace th::py
