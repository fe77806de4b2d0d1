// What the pybind11-defined submodules' init functions share: the definitions run inside a guard that turns a C++ or
// Python error into the Python error the import raises (an init function reports failure by returning false).
#pragma once
#include <pybind11/pybind11.h>

#include <exception>

namespace th::py {

template <class Define>
bool define_guarded(Define&& define) noexcept {
  try {
    define();
    return true;
  } catch (pybind11::error_already_set& e) {
    e.restore();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_ImportError, e.what());
  }
  return false;
}

}  // namespace th::py
