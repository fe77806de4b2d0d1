// What the mock GPUs' bindings share: a Python function that runs the launches a mock decodes, called from the mock's
// engine thread, and the holder that lets a mock stop while that thread waits for the GIL.
#pragma once
#include <pybind11/pybind11.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "drivers/mock/mock_common.h"

namespace th::py {

// Takes the GIL for each call; a Python error becomes the MockFault that stops the mock. Dropped with the GIL held.
class PyDispatch {
 public:
  explicit PyDispatch(pybind11::object fn) : fn_(std::move(fn)) {}
  PyDispatch(const PyDispatch&) = delete;
  PyDispatch& operator=(const PyDispatch&) = delete;
  ~PyDispatch() {
    const pybind11::gil_scoped_acquire gil;
    fn_ = pybind11::object();
  }
  // call(fn) converts the launch and calls fn; `what` names the launch in a fault.
  void operator()(const std::string& what, const std::function<void(const pybind11::object&)>& call) const {
    const pybind11::gil_scoped_acquire gil;
    try {
      call(fn_);
    } catch (pybind11::error_already_set& e) {
      throw mock::MockFault("the dispatcher failed on " + what + ": " + e.what());
    }
  }

 private:
  pybind11::object fn_;
};

// The mock's engine thread may be waiting for the GIL inside a dispatch: the GIL is released while the mock stops.
template <class Gpu>
struct DeleteWithoutGil {
  void operator()(Gpu* g) const {
    const pybind11::gil_scoped_release nogil;
    std::default_delete<Gpu>()(g);
  }
};
template <class Gpu>
using MockHolder = std::unique_ptr<Gpu, DeleteWithoutGil<Gpu>>;

}  // namespace th::py
