// The DType Python type: one immortal object per interned dtype.

#include "convert.h"
#include "tinyhybrid/const.h"

#include <tuple>

namespace th::py {

namespace {

struct PyDType {
  PyObject_HEAD
  const DTypeData* d;
};

DType self_dtype(PyObject* self) { return DType(reinterpret_cast<PyDType*>(self)->d); }

PyObject* wrap(DType d) { return dtype_object(d); }

template <class F>
PyObject* guarded(F&& f) {
  try {
    return f();
  } catch (...) {
    raise_current();
    return nullptr;
  }
}

PyObject* get_priority(PyObject* s, void*) { return PyLong_FromLong(self_dtype(s).priority()); }
PyObject* get_bitsize(PyObject* s, void*) { return PyLong_FromLong(self_dtype(s).bitsize()); }
PyObject* get_itemsize(PyObject* s, void*) { return PyLong_FromLong(self_dtype(s).itemsize()); }
PyObject* get_name(PyObject* s, void*) { return PyUnicode_FromString(self_dtype(s).name().c_str()); }
PyObject* get_count(PyObject* s, void*) { return PyLong_FromLong(self_dtype(s).count()); }
PyObject* get_vcount(PyObject* s, void*) { return PyLong_FromLong(self_dtype(s).is_ptr() ? self_dtype(s).count() : 1); }
PyObject* get_is_ptr(PyObject* s, void*) { return PyBool_FromLong(self_dtype(s).is_ptr()); }
PyObject* get_base(PyObject* s, void*) { return wrap(self_dtype(s).base()); }
PyObject* get_size(PyObject* s, void*) { return PyLong_FromLongLong(self_dtype(s).ptr_size()); }
PyObject* get_fmt(PyObject* s, void*) {
  const char f = self_dtype(s).fmt();
  if (!f) Py_RETURN_NONE;
  return PyUnicode_FromStringAndSize(&f, 1);
}
PyObject* get_addrspace(PyObject* s, void*) {
  return from_arg(Arg::enumeration(EnumKind::AddrSpace, static_cast<int64_t>(self_dtype(s).addrspace())));
}
PyObject* get_min(PyObject* s, void*) { return guarded([&] { return from_arg(dtype_range(self_dtype(s)).first); }); }
PyObject* get_max(PyObject* s, void*) { return guarded([&] { return from_arg(dtype_range(self_dtype(s)).second); }); }

PyObject* get_is_float(PyObject* s, void*) { return PyBool_FromLong(self_dtype(s).is_float()); }
PyObject* get_is_int(PyObject* s, void*) { return PyBool_FromLong(self_dtype(s).is_int()); }
PyObject* get_is_unsigned(PyObject* s, void*) { return PyBool_FromLong(self_dtype(s).is_unsigned()); }
PyObject* get_is_weak(PyObject* s, void*) { return PyBool_FromLong(self_dtype(s).is_weak()); }

PyGetSetDef getset[] = {
    {"_is_float", get_is_float, nullptr, "float scalar class (weakfloat included)", nullptr},
    {"_is_int", get_is_int, nullptr, "int scalar class (weakint included)", nullptr},
    {"_is_unsigned", get_is_unsigned, nullptr, "unsigned int scalar class", nullptr},
    {"_is_weak", get_is_weak, nullptr, "weak type of untyped Python constants", nullptr},
    {"priority", get_priority, nullptr, "promotion priority", nullptr},
    {"bitsize", get_bitsize, nullptr, "bits of the scalar", nullptr},
    {"itemsize", get_itemsize, nullptr, "bytes of a value", nullptr},
    {"name", get_name, nullptr, "C name", nullptr},
    {"fmt", get_fmt, nullptr, "struct format character or None", nullptr},
    {"count", get_count, nullptr, "vector width", nullptr},
    {"v", get_vcount, nullptr, "vector width of a pointer", nullptr},
    {"is_ptr", get_is_ptr, nullptr, "whether this is a pointer type", nullptr},
    {"base", get_base, nullptr, "what a pointer points to", nullptr},
    {"size", get_size, nullptr, "pointer size in elements (-1 unknown)", nullptr},
    {"addrspace", get_addrspace, nullptr, "pointer address space", nullptr},
    {"min", get_min, nullptr, "smallest value", nullptr},
    {"max", get_max, nullptr, "largest value", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyObject* m_vec(PyObject* s, PyObject* arg) {
  int overflow = 0;
  const long long n = PyLong_Check(arg) ? PyLong_AsLongLongAndOverflow(arg, &overflow) : -1;
  if (n == -1 && PyErr_Occurred()) return nullptr;
  if (!PyLong_Check(arg)) return PyErr_Format(PyExc_TypeError, "vec: count must be an int, got %.200s", Py_TYPE(arg)->tp_name);
  if (overflow || n < 1 || n > 0xffffffffll) return PyErr_Format(PyExc_ValueError, "vec: count must be in [1, 2**32), got %R", arg);
  return guarded([&] { return wrap(self_dtype(s).vec(static_cast<uint32_t>(n))); });
}

PyObject* m_ptr(PyObject* s, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  long long size = -1;
  long addr = static_cast<long>(AddrSpace::GLOBAL);
  PyObject* size_o = nargs > 0 ? args[0] : nullptr;
  PyObject* addr_o = nargs > 1 ? args[1] : nullptr;
  for (Py_ssize_t i = 0; kwnames && i < PyTuple_GET_SIZE(kwnames); ++i) {
    const char* k = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, i));
    PyObject* v = args[nargs + i];
    if (std::string_view(k) == "size") size_o = v;
    else if (std::string_view(k) == "addrspace") addr_o = v;
    else return PyErr_Format(PyExc_TypeError, "ptr() got an unexpected keyword argument '%s'", k);
  }
  int overflow = 0;
  if (size_o && (size = PyLong_AsLongLongAndOverflow(size_o, &overflow)) == -1 && PyErr_Occurred()) return nullptr;
  if (overflow) return PyErr_Format(PyExc_ValueError, "ptr: size %R does not fit in 64 bits", size_o);
  if (addr_o && (addr = PyLong_AsLong(addr_o)) == -1 && PyErr_Occurred()) return nullptr;
  if (addr < 0 || addr > static_cast<long>(AddrSpace::ALU)) return PyErr_Format(PyExc_ValueError, "bad addrspace %ld", addr);
  return guarded([&] { return wrap(self_dtype(s).ptr(size, static_cast<AddrSpace>(addr))); });
}

PyObject* m_scalar(PyObject* s, PyObject*) { return wrap(self_dtype(s).scalar()); }

// Pickle by structure: (scalar name, count, pointer info).
PyObject* m_reduce(PyObject* s, PyObject*) {
  const DType d = self_dtype(s);
  PyObject* rebuild = PyObject_GetAttrString(reinterpret_cast<PyObject*>(&DTypeType), "_rebuild");
  if (!rebuild) return nullptr;
  const DType base = d.base();
  return Py_BuildValue("(N(sIiiL))", rebuild, std::string(scalar_short_name(d.scalar_kind())).c_str(), base.count(),
                       d.is_ptr() ? 1 : 0, static_cast<int>(d.addrspace()), static_cast<long long>(d.ptr_size()));
}

PyObject* m_rebuild(PyObject*, PyObject* args) {
  const char* name;
  unsigned count;
  int is_ptr, addr;
  long long size;
  if (!PyArg_ParseTuple(args, "sIiiL", &name, &count, &is_ptr, &addr, &size)) return nullptr;
  const auto s = DType::from_name(name);
  if (!s) return PyErr_Format(PyExc_ValueError, "unknown dtype %s", name);
  return guarded([&] {
    DType d = s->vec(count);
    if (is_ptr) d = d.ptr(size, static_cast<AddrSpace>(addr));
    return wrap(d);
  });
}

PyObject* m_from_name(PyObject*, PyObject* arg) {
  const char* name = PyUnicode_AsUTF8(arg);
  if (!name) return nullptr;
  const auto d = DType::from_name(name);
  if (!d) return PyErr_Format(PyExc_AttributeError, "no dtype named '%s'", name);
  return wrap(*d);
}

PyMethodDef methods[] = {
    {"vec", m_vec, METH_O, "the vector of n elements"},
    {"ptr", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(m_ptr)), METH_FASTCALL | METH_KEYWORDS,
     "a pointer to this type: ptr(size=-1, addrspace=AddrSpace.GLOBAL)"},
    {"scalar", m_scalar, METH_NOARGS, "the element scalar"},
    {"__reduce__", m_reduce, METH_NOARGS, nullptr},
    {"_rebuild", m_rebuild, METH_VARARGS | METH_STATIC, nullptr},
    {"from_name", m_from_name, METH_O | METH_STATIC, "the scalar dtype of a name"},
    {nullptr, nullptr, 0, nullptr},
};

PyObject* d_repr(PyObject* s) { return PyUnicode_FromString(self_dtype(s).repr().c_str()); }
Py_hash_t d_hash(PyObject* s) { return static_cast<Py_hash_t>(self_dtype(s).hash() & 0x7fffffffffffffffull); }

// Ordering as tinygrad sorts dtypes: by (priority, bitsize, name).
PyObject* d_richcompare(PyObject* a, PyObject* b, int op) {
  if (!is_dtype(a) || !is_dtype(b)) Py_RETURN_NOTIMPLEMENTED;
  const DType x = dtype_of(a), y = dtype_of(b);
  if (op == Py_EQ) return PyBool_FromLong(x == y);
  if (op == Py_NE) return PyBool_FromLong(x != y);
  const auto key = [](DType d) { return std::tuple(d.priority(), d.bitsize(), d.name(), d.count()); };
  const auto kx = key(x), ky = key(y);
  bool r = false;
  switch (op) {
    case Py_LT: r = kx < ky; break;
    case Py_LE: r = kx <= ky; break;
    case Py_GT: r = kx > ky; break;
    case Py_GE: r = kx >= ky; break;
  }
  return PyBool_FromLong(r);
}

}  // namespace

PyTypeObject DTypeType = {PyVarObject_HEAD_INIT(nullptr, 0)};

bool is_dtype(PyObject* o) { return Py_TYPE(o) == &DTypeType; }
DType dtype_of(PyObject* o) { return DType(reinterpret_cast<PyDType*>(o)->d); }

Obj dtype_object(DType d) {
  auto* obj = static_cast<PyObject*>(d.data()->binding_handle);
  if (!obj) {
    auto* p = PyObject_New(PyDType, &DTypeType);
    if (!p) return nullptr;
    p->d = d.data();
    obj = reinterpret_cast<PyObject*>(p);
    d.data()->binding_handle = obj;  // the interned dtype keeps this reference forever
  }
  Py_INCREF(obj);
  return obj;
}

bool init_dtype_type(PyObject* module) {
  DTypeType.tp_name = "tinyhybrid._core.DType";
  DTypeType.tp_basicsize = sizeof(PyDType);
  DTypeType.tp_flags = Py_TPFLAGS_DEFAULT;
  DTypeType.tp_doc = "A data type: a scalar, or its vector or pointer form. Interned: compare with `is` or ==.";
  DTypeType.tp_getset = getset;
  DTypeType.tp_methods = methods;
  DTypeType.tp_repr = d_repr;
  DTypeType.tp_hash = d_hash;
  DTypeType.tp_richcompare = d_richcompare;
  if (PyType_Ready(&DTypeType) < 0) return false;
  Py_INCREF(&DTypeType);
  return PyModule_AddObject(module, "DType", reinterpret_cast<PyObject*>(&DTypeType)) == 0;
}

}  // namespace th::py
