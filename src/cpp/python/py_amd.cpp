// tinyhybrid._core.hcq's AMD pieces: the kernel descriptor, the AMD queue over a ring's memory and registers (from
// KFD's ioctls, or from the mock), and the mock AMD GPU. Conversions only: the queue logic lives in drivers/amd, the
// mock in drivers/mock. Submit and wait come from hcq.Queue.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <tuple>

#include "convert.h"
#include "mock_dispatch.h"
#include "drivers/amd/amd_queue.h"
#include "drivers/mock/amd_channel.h"
#include "pybind_init.h"

namespace th::py {

namespace {

namespace pb = pybind11;

using RegionSpec = std::tuple<uint64_t, uint64_t, uint64_t>;  // (host address, GPU address, bytes)

amd::Region region_of(const RegionSpec& r) { return {reinterpret_cast<uint8_t*>(std::get<0>(r)), std::get<1>(r), std::get<2>(r)}; }

RegionSpec spec_of(uint8_t* host, size_t bytes) { return {reinterpret_cast<uint64_t>(host), reinterpret_cast<uint64_t>(host), bytes}; }

mock::AmdCommandProcessor::Dispatcher dispatcher_of(const pb::object& fn) {
  if (fn.is_none()) return nullptr;
  auto d = std::make_shared<PyDispatch>(fn);
  return [d](const mock::AmdLaunch& l) {
    (*d)("the dispatch of the program at " + mock::hex(l.program), [&](const pb::object& f) {
      pb::tuple user(16);
      for (size_t i = 0; i < 16; ++i) user[i] = l.user_data[i];
      f(l.program, pb::make_tuple(l.grid[0], l.grid[1], l.grid[2]), pb::make_tuple(l.block[0], l.block[1], l.block[2]), user);
    });
  };
}

}  // namespace

bool init_amd(PyObject* module) {
  return define_guarded([&] {
    auto m = pb::reinterpret_borrow<pb::module_>(module).attr("hcq").cast<pb::module_>();

    pb::class_<amd::Kernel, std::shared_ptr<amd::Kernel>>(m, "AMDKernel", "a GPU kernel as its dispatch needs it (its kernel descriptor)")
        .def(pb::init([](uint64_t code, uint32_t rsrc1, uint32_t rsrc2, uint32_t rsrc3, uint32_t kernarg_sgpr, uint32_t kernarg_bytes, bool wave32) {
               return std::make_shared<amd::Kernel>(amd::Kernel{code, rsrc1, rsrc2, rsrc3, kernarg_sgpr, kernarg_bytes, wave32});
             }),
             pb::arg("code"), pb::arg("rsrc1") = 0, pb::arg("rsrc2") = 0, pb::arg("rsrc3") = 0, pb::arg("kernarg_sgpr") = 0,
             pb::arg("kernarg_bytes") = 0, pb::arg("wave32") = true)
        .def("program",
             [](const std::shared_ptr<amd::Kernel>& k, std::string name) {
               return hcq::Program(std::move(name), reinterpret_cast<uint64_t>(k.get()), k);
             },
             pb::arg("name"), "the hcq.Program an exec runs (it keeps this descriptor alive)");

    pb::class_<amd::AmdQueue, hcq::Queue>(m, "AMDQueue", "an AMD ring's queue: PM4 compute or SDMA copy")
        .def(pb::init([](std::string name, bool gfx11, const std::string& engine, const RegionSpec& ring, const RegionSpec& side, uint64_t wptr,
                         uint64_t rptr, uint64_t doorbell, hcq::SignalRef timeline, const pb::object&) {
               if (engine != "compute" && engine != "sdma") throw pb::value_error("AMDQueue: engine must be 'compute' or 'sdma', not '" + engine + "'");
               amd::RingChannel c;
               c.ring = region_of(ring);
               c.side = region_of(side);
               c.wptr = reinterpret_cast<volatile uint64_t*>(wptr);
               c.rptr = reinterpret_cast<const volatile uint64_t*>(rptr);
               c.doorbell = reinterpret_cast<volatile uint64_t*>(doorbell);
               return std::make_unique<amd::AmdQueue>(std::move(name), gfx11 ? amd::Gen::Gfx11 : amd::Gen::Gfx10,
                                                      engine == "compute" ? amd::Engine::Compute : amd::Engine::Copy, c, std::move(timeline));
             }),
             pb::arg("name"), pb::arg("gfx11"), pb::arg("engine"), pb::arg("ring"), pb::arg("side"), pb::arg("wptr"), pb::arg("rptr"),
             pb::arg("doorbell"), pb::arg("timeline"), pb::arg("owner"), pb::keep_alive<1, 11>(),
             "regions are (host address, GPU address, bytes); wptr, rptr and doorbell are host addresses of 64-bit registers; "
             "owner (the ring's memory: a MockAMDGPU, or the driver's mappings) lives as long as the queue");

    pb::class_<mock::MockAmdGpu, MockHolder<mock::MockAmdGpu>>(m, "MockAMDGPU", "a mock AMD GPU behind one ring (MOCKGPU=1): it decodes and runs PM4 or SDMA")
        .def(pb::init([](bool sdma, size_t ring_bytes, size_t side_bytes, const pb::object& dispatch) {
               return MockHolder<mock::MockAmdGpu>(std::make_unique<mock::MockAmdGpu>(sdma, dispatcher_of(dispatch), ring_bytes, side_bytes).release());
             }),
             pb::arg("sdma") = false, pb::arg("ring_bytes") = 1 << 16, pb::arg("side_bytes") = 1 << 20, pb::arg("dispatch") = pb::none(),
             "dispatch(program, grid, block, user_data) runs each dispatch the mock decodes (from its thread, with the GIL); an "
             "error it raises stops the mock, as a fault")
        .def_property_readonly("ring", [](const mock::MockAmdGpu& g) { return spec_of(g.ring(), g.ring_bytes()); })
        .def_property_readonly("side", [](const mock::MockAmdGpu& g) { return spec_of(g.side(), g.side_bytes()); })
        .def_property_readonly("wptr", [](const mock::MockAmdGpu& g) { return reinterpret_cast<uint64_t>(g.wptr()); })
        .def_property_readonly("rptr", [](const mock::MockAmdGpu& g) { return reinterpret_cast<uint64_t>(g.rptr()); })
        .def_property_readonly("doorbell", [](const mock::MockAmdGpu& g) { return reinterpret_cast<uint64_t>(g.doorbell()); })
        .def("signal", &mock::MockAmdGpu::signal, pb::arg("name"), pb::arg("value") = 0, "an hcq.Signal in the mock's GPU memory")
        .def_property_readonly("launches", &mock::MockAmdGpu::launches, "dispatches decoded so far")
        .def_property_readonly("fault", &mock::MockAmdGpu::fault, "the malformed-stream error that stopped it, or ''");
  });
}

}  // namespace th::py
