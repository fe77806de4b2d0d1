// tinyhybrid._core.hcq's NV pieces: the kernel descriptor, the NV queue over a GPFIFO channel's memory and registers
// (from the kernel driver's ioctls, or from the mock), and the mock GPU. Conversions only: the queue logic lives in
// drivers/nv, the mock in drivers/mock. Submit and wait come from hcq.Queue.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <tuple>

#include "convert.h"
#include "mock_dispatch.h"
#include "pybind_init.h"
#include "drivers/mock/nv_channel.h"
#include "drivers/nv/nv_queue.h"

namespace th::py {

namespace {

namespace pb = pybind11;

using RingSpec = std::tuple<uint64_t, uint64_t, uint64_t>;  // (host address, GPU address, bytes)

nv::Ring ring_of(const RingSpec& r) { return {reinterpret_cast<uint8_t*>(std::get<0>(r)), std::get<1>(r), std::get<2>(r)}; }

nv::Engine engine_of(const std::string& e) {
  if (e == "compute") return nv::Engine::Compute;
  if (e == "copy") return nv::Engine::Copy;
  throw pb::value_error("NVQueue: engine must be 'compute' or 'copy', not '" + e + "'");
}

mock::NvCommandProcessor::Dispatcher dispatcher_of(const pb::object& fn) {
  if (fn.is_none()) return nullptr;
  auto d = std::make_shared<PyDispatch>(fn);
  return [d](const mock::NvLaunch& l) {
    (*d)("the launch of QMD " + mock::hex(l.qmd), [&](const pb::object& f) {
      f(l.program, pb::make_tuple(l.grid[0], l.grid[1], l.grid[2]), pb::make_tuple(l.block[0], l.block[1], l.block[2]), l.cbuf0, l.cbuf0_bytes);
    });
  };
}

}  // namespace

bool init_nv(PyObject* module) {
  return define_guarded([&] {
    auto m = pb::reinterpret_borrow<pb::module_>(module).attr("hcq").cast<pb::module_>();

    pb::class_<nv::Kernel, std::shared_ptr<nv::Kernel>>(m, "NVKernel", "a GPU kernel as its launch (the QMD) needs it")
        .def(pb::init([](uint64_t code, uint32_t registers, uint32_t shared_bytes, uint32_t local_bytes, uint32_t param_offset,
                         uint32_t cbuf0_bytes) {
               return std::make_shared<nv::Kernel>(nv::Kernel{code, registers, shared_bytes, local_bytes, param_offset, cbuf0_bytes});
             }),
             pb::arg("code"), pb::arg("registers"), pb::arg("shared_bytes") = 0, pb::arg("local_bytes") = 0,
             pb::arg("param_offset"), pb::arg("cbuf0_bytes"))
        .def("program",
             [](const std::shared_ptr<nv::Kernel>& k, std::string name) {
               return hcq::Program(std::move(name), reinterpret_cast<uint64_t>(k.get()), k);
             },
             pb::arg("name"), "the hcq.Program an exec runs (it keeps this descriptor alive)");

    pb::class_<nv::NvQueue, hcq::Queue>(m, "NVQueue", "an NVIDIA GPFIFO channel's queue: compute (subchannel 1) or copy (4)")
        .def(pb::init([](std::string name, bool hopper, const std::string& engine, const RingSpec& gpfifo, const RingSpec& push,
                         const RingSpec& side, uint64_t gp_put, uint64_t gp_get, uint64_t doorbell, uint32_t token, hcq::SignalRef timeline,
                         const pb::object&) {
               nv::Channel c;
               c.gpfifo = ring_of(gpfifo);
               c.push = ring_of(push);
               c.side = ring_of(side);
               c.gp_put = reinterpret_cast<volatile uint32_t*>(gp_put);
               c.gp_get = reinterpret_cast<const volatile uint32_t*>(gp_get);
               c.doorbell = reinterpret_cast<volatile uint32_t*>(doorbell);
               c.token = token;
               return std::make_unique<nv::NvQueue>(std::move(name), hopper ? nv::Gen::Hopper : nv::Gen::Ampere, engine_of(engine), c,
                                                    std::move(timeline));
             }),
             pb::arg("name"), pb::arg("hopper"), pb::arg("engine"), pb::arg("gpfifo"), pb::arg("push"), pb::arg("side"), pb::arg("gp_put"),
             pb::arg("gp_get"), pb::arg("doorbell"), pb::arg("token"), pb::arg("timeline"), pb::arg("owner"), pb::keep_alive<1, 13>(),
             "rings are (host address, GPU address, bytes); gp_put, gp_get and doorbell are host addresses of the registers; "
             "owner (the channel's memory: a MockNVGPU, or the driver's mappings) lives as long as the queue");

    pb::class_<mock::MockNvGpu, MockHolder<mock::MockNvGpu>>(m, "MockNVGPU", "a mock NVIDIA GPU behind one GPFIFO channel (MOCKGPU=1): it decodes and runs the streams")
        .def(pb::init([](bool hopper, uint32_t gpfifo_entries, size_t push_bytes, size_t side_bytes, const pb::object& dispatch) {
               return MockHolder<mock::MockNvGpu>(std::make_unique<mock::MockNvGpu>(hopper, dispatcher_of(dispatch), gpfifo_entries, push_bytes, side_bytes).release());
             }),
             pb::arg("hopper") = true, pb::arg("gpfifo_entries") = 1024, pb::arg("push_bytes") = 1 << 20, pb::arg("side_bytes") = 4 << 20,
             pb::arg("dispatch") = pb::none(),
             "dispatch(program, grid, block, cbuf0, cbuf0_bytes) runs each launch the mock decodes (from its thread, with the GIL); "
             "an error it raises stops the mock, as a fault")
        .def_property_readonly("gpfifo", [](const mock::MockNvGpu& g) {
          return RingSpec(reinterpret_cast<uint64_t>(g.gpfifo()), reinterpret_cast<uint64_t>(g.gpfifo()), g.gpfifo_bytes());
        })
        .def_property_readonly("push", [](const mock::MockNvGpu& g) {
          return RingSpec(reinterpret_cast<uint64_t>(g.push()), reinterpret_cast<uint64_t>(g.push()), g.push_bytes());
        })
        .def_property_readonly("side", [](const mock::MockNvGpu& g) {
          return RingSpec(reinterpret_cast<uint64_t>(g.side()), reinterpret_cast<uint64_t>(g.side()), g.side_bytes());
        })
        .def_property_readonly("gp_put", [](const mock::MockNvGpu& g) { return reinterpret_cast<uint64_t>(g.gp_put()); })
        .def_property_readonly("gp_get", [](const mock::MockNvGpu& g) { return reinterpret_cast<uint64_t>(g.gp_get()); })
        .def_property_readonly("doorbell", [](const mock::MockNvGpu& g) { return reinterpret_cast<uint64_t>(g.doorbell()); })
        .def_property_readonly_static("token", [](const pb::object&) { return mock::MockNvGpu::kToken; })
        .def("signal", &mock::MockNvGpu::signal, pb::arg("name"), pb::arg("value") = 0,
             "an hcq.Signal in the mock's GPU memory, below 2^40 (where Ampere's semaphores reach)")
        .def_property_readonly("launches", &mock::MockNvGpu::launches, "kernel launches decoded so far")
        .def_property_readonly("fault", &mock::MockNvGpu::fault, "the malformed-stream error that stopped it, or ''");
  });
}

}  // namespace th::py
