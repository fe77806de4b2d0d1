// Conversions between Python objects and core values. No logic of the IR lives here.
#pragma once
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <array>

#include "tinyhybrid/arg.h"
#include "tinyhybrid/dtype.h"
#include "tinyhybrid/uop.h"
#include "tinyhybrid/rewrite.h"

namespace th::py {

// Lets other threads run Python while native-only work runs; restores the GIL however the scope ends (an exception
// reaches the caller's handlers with the GIL held).
class GilRelease {
 public:
  GilRelease() : state_(PyEval_SaveThread()) {}
  ~GilRelease() { PyEval_RestoreThread(state_); }
  GilRelease(const GilRelease&) = delete;
  GilRelease& operator=(const GilRelease&) = delete;

 private:
  PyThreadState* state_;
};


// A new reference, or nullptr with a Python error set. Every function named *_or_null follows this.
using Obj = PyObject*;

// The Python classes mirroring the native enums (registered by the Python package at import).
struct EnumRegistry {
  std::array<PyObject*, kNumEnumKinds> cls{};      // the IntEnum classes
  std::array<PyObject*, kNumEnumKinds> members{};  // tuple of members in value order
};
EnumRegistry& enums();

// Python value -> Arg. Plain values map natively; anything else (hashable) becomes an opaque Python object.
// Returns false with a Python error set.
bool to_arg(PyObject* o, Arg& out);
// Arg -> new Python object (nullptr with an error set).
Obj from_arg(const Arg& a);
// Raise the current C++ exception as the matching Python exception. Call inside a catch (...) block.
void raise_current();

// Thrown through C++ when a Python callback raised: the Python error is already set and is reported as is.
struct PythonError {};

// Runs f, turning C++ exceptions into Python ones (f returns a new reference or nullptr).
template <class F>
PyObject* guarded(F&& f) {
  try {
    return f();
  } catch (const PythonError&) {
    return nullptr;
  } catch (...) {
    raise_current();
    return nullptr;
  }
}

// The DType Python type and its conversions.
extern PyTypeObject DTypeType;
bool is_dtype(PyObject* o);
DType dtype_of(PyObject* o);  // precondition: is_dtype(o)
Obj dtype_object(DType d);    // borrowed-then-increfed singleton per dtype
bool init_dtype_type(PyObject* module);

// The UOp Python type.
extern PyTypeObject UOpType;
bool init_uop_type(PyObject* module);
Obj uop_object(const UOp* u);  // the live wrapper of u or a new one
bool is_uop(PyObject* o);
UOpRef uop_ref(PyObject* o);  // precondition: is_uop(o)
// Other binding files add UOp methods and properties (call from module init, after init_uop_type).
bool add_uop_methods(PyMethodDef* defs);
bool add_uop_getset(PyGetSetDef* defs);

// PatternMatcher objects (py_rewrite.cpp): native rule sets are handed to Python through matcher_object.
bool init_rewrite(PyObject* module);
bool init_simplify(PyObject* module);
bool init_symbolic(PyObject* module);  // py_symbolic.cpp: vmin/vmax, sym_infer, fold
bool init_hcq(PyObject* module);       // py_hcq.cpp: the submodule _core.hcq
bool init_nv(PyObject* module);        // py_nv.cpp: the NV queue and the mock NV GPU, in _core.hcq
bool init_amd(PyObject* module);       // py_amd.cpp: the AMD queue and the mock AMD GPU, in _core.hcq
bool init_x86(PyObject* module);       // py_x86.cpp: the submodule _core.x86, the x86-64 assembler
bool init_spec(PyObject* module);      // py_spec.cpp: SPEC checks at pass boundaries
bool init_track(PyObject* module);     // py_track.cpp: rewrite tracking for VIZ
bool is_matcher(PyObject* o);
PyObject* matcher_object(PatternMatcher pm);
}  // namespace th::py
