#include "convert.h"

#include <stdexcept>
#include <string>

namespace th::py {

EnumRegistry& enums() {
  static EnumRegistry registry;
  return registry;
}

namespace {

// A Python object inside an Arg: hashed and compared by Python, with the GIL taken when needed.
class PyOpaque final : public Opaque {
 public:
  PyOpaque(PyObject* o, size_t h) : obj_(o), hash_(h) { Py_INCREF(o); }
  ~PyOpaque() override {
    const PyGILState_STATE g = PyGILState_Ensure();
    Py_DECREF(obj_);
    PyGILState_Release(g);
  }
  size_t hash() const override { return hash_; }
  bool equal(const Opaque& other) const override {
    const auto* o = dynamic_cast<const PyOpaque*>(&other);
    if (!o) return false;
    if (o->obj_ == obj_) return true;
    const PyGILState_STATE g = PyGILState_Ensure();
    const int r = PyObject_RichCompareBool(obj_, o->obj_, Py_EQ);
    if (r < 0) PyErr_Clear();
    PyGILState_Release(g);
    return r == 1;
  }
  std::string repr() const override {
    const PyGILState_STATE g = PyGILState_Ensure();
    std::string s = "<?>";
    if (PyObject* r = PyObject_Repr(obj_)) {
      if (const char* c = PyUnicode_AsUTF8(r)) s = c;
      Py_DECREF(r);
    }
    PyErr_Clear();
    PyGILState_Release(g);
    return s;
  }
  PyObject* object() const { return obj_; }

 private:
  PyObject* obj_;
  size_t hash_;
};

bool int_to_arg(PyObject* o, Arg& out) {
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
  if (!overflow) {
    if (v == -1 && PyErr_Occurred()) return false;
    out = Arg::integer(v);
    return true;
  }
  // Beyond 64 bits: try 128 through the byte form; past that it stays a Python object.
  unsigned char bytes[16];
#if PY_VERSION_HEX >= 0x030D0000
  const int r = _PyLong_AsByteArray(reinterpret_cast<PyLongObject*>(o), bytes, 16, 1, 1, 0);
#else
  const int r = _PyLong_AsByteArray(reinterpret_cast<PyLongObject*>(o), bytes, 16, 1, 1);
#endif
  if (r < 0) {
    PyErr_Clear();
    return false;
  }
  unsigned __int128 u = 0;
  for (int i = 15; i >= 0; --i) u = (u << 8) | bytes[i];
  out = Arg::integer(static_cast<i128>(u));
  return true;
}

PyObject* int_from_i128(i128 v) {
  if (v >= INT64_MIN && v <= INT64_MAX) return PyLong_FromLongLong(static_cast<long long>(v));
  unsigned char bytes[16];
  auto u = static_cast<unsigned __int128>(v);
  for (int i = 0; i < 16; ++i) {
    bytes[i] = static_cast<unsigned char>(u & 0xff);
    u >>= 8;
  }
  return _PyLong_FromByteArray(bytes, 16, 1, 1);
}

}  // namespace

namespace {
// Tuples nest; past this depth an arg is refused instead of recursing the C stack away.
constexpr int kMaxArgDepth = 256;
thread_local int arg_depth = 0;
struct DepthGuard {
  DepthGuard() { ++arg_depth; }
  ~DepthGuard() { --arg_depth; }
};
}  // namespace

bool to_arg(PyObject* o, Arg& out) {
  const DepthGuard guard;
  if (arg_depth > kMaxArgDepth) {
    PyErr_Format(PyExc_ValueError, "arg nests tuples more than %d deep", kMaxArgDepth);
    return false;
  }
  if (o == Py_None) {
    out = Arg();
    return true;
  }
  PyTypeObject* t = Py_TYPE(o);
  if (t == &PyBool_Type) {
    out = Arg::boolean(o == Py_True);
    return true;
  }
  if (t == &PyLong_Type) {
    if (int_to_arg(o, out)) return true;
    if (PyErr_Occurred()) return false;
  } else if (t == &PyFloat_Type) {
    out = Arg::floating(PyFloat_AS_DOUBLE(o));
    return true;
  } else if (t == &PyUnicode_Type) {
    Py_ssize_t n;
    const char* s = PyUnicode_AsUTF8AndSize(o, &n);
    if (!s) return false;
    out = Arg::string(std::string_view(s, static_cast<size_t>(n)));
    return true;
  } else if (t == &PyTuple_Type) {
    const Py_ssize_t n = PyTuple_GET_SIZE(o);
    std::vector<Arg> items(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i)
      if (!to_arg(PyTuple_GET_ITEM(o, i), items[static_cast<size_t>(i)])) return false;
    out = Arg::tuple(std::move(items));
    return true;
  } else if (t == &DTypeType) {
    out = Arg::dtype(dtype_of(o));
    return true;
  } else {
    const auto& reg = enums();
    for (size_t k = 0; k < kNumEnumKinds; ++k) {
      if (reg.cls[k] && reinterpret_cast<PyObject*>(t) == reg.cls[k]) {
        const long v = PyLong_AsLong(o);
        if (v == -1 && PyErr_Occurred()) return false;
        out = Arg::enumeration(static_cast<EnumKind>(k), v);
        return true;
      }
    }
  }
  const Py_hash_t h = PyObject_Hash(o);
  if (h == -1) {
    PyErr_Format(PyExc_TypeError, "a UOp arg must be hashable, got %.200s", t->tp_name);
    return false;
  }
  out = Arg::opaque(std::make_shared<const PyOpaque>(o, static_cast<size_t>(h)));
  return true;
}

Obj from_arg(const Arg& a) {
  switch (a.kind()) {
    case Arg::Kind::None: Py_RETURN_NONE;
    case Arg::Kind::Bool: return PyBool_FromLong(a.as_bool());
    case Arg::Kind::Int: return int_from_i128(a.as_int());
    case Arg::Kind::Float: return PyFloat_FromDouble(a.as_float());
    case Arg::Kind::Str: return PyUnicode_FromStringAndSize(a.as_str().data(), static_cast<Py_ssize_t>(a.as_str().size()));
    case Arg::Kind::Tuple: {
      const auto items = a.as_tuple();
      PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(items.size()));
      if (!t) return nullptr;
      for (size_t i = 0; i < items.size(); ++i) {
        PyObject* x = from_arg(items[i]);
        if (!x) {
          Py_DECREF(t);
          return nullptr;
        }
        PyTuple_SET_ITEM(t, static_cast<Py_ssize_t>(i), x);
      }
      return t;
    }
    case Arg::Kind::DType: return dtype_object(a.as_dtype());
    case Arg::Kind::Enum: {
      const auto k = static_cast<size_t>(a.enum_kind());
      PyObject* members = enums().members[k];
      const int64_t v = a.enum_value();
      if (members && v >= 0 && v < PyTuple_GET_SIZE(members)) {
        PyObject* m = PyTuple_GET_ITEM(members, v);
        Py_INCREF(m);
        return m;
      }
      return PyLong_FromLongLong(v);
    }
    case Arg::Kind::Opaque: {
      PyObject* o = static_cast<const PyOpaque&>(a.as_opaque()).object();
      Py_INCREF(o);
      return o;
    }
  }
  Py_RETURN_NONE;
}

void raise_current() {
  try {
    throw;
  } catch (const UOpTypeError& e) {
    PyErr_SetString(PyExc_TypeError, e.what());
  } catch (const UOpValueError& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const std::invalid_argument& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const std::out_of_range& e) {
    PyErr_SetString(PyExc_IndexError, e.what());
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "unknown C++ exception");
  }
}

}  // namespace th::py
