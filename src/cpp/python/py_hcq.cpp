// tinyhybrid._core.hcq: signals, command buffers, the CPU device and the dependency tracker for Python.
// Conversions only; the queue logic lives in src/cpp/hcq and drivers/cpu. Waits release the GIL; a
// submit releases it only when the ring is full (the common submit is far cheaper than a GIL hand-off).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "convert.h"
#include "pybind_init.h"
#include "tinyhybrid/hcq/command_buffer.h"
#include "tinyhybrid/hcq/cpu.h"
#include "tinyhybrid/hcq/deps.h"
#include "tinyhybrid/hcq/wait.h"

namespace th::py {

namespace {

namespace pb = pybind11;
using namespace th::hcq;

std::chrono::milliseconds to_timeout(std::optional<double> ms) {
  if (!ms) return kNoTimeout;
  if (!(*ms >= 0)) throw pb::value_error("timeout_ms must be >= 0 or None");
  if (*ms >= 1e15) return kNoTimeout;  // ~30000 years (and inf): no limit, without overflowing the clock arithmetic
  return std::chrono::milliseconds(static_cast<int64_t>(*ms));
}

// Runs wait_for(slice) -> bool with the GIL released, in slices, so that Ctrl-C (or any signal handler
// raising) ends a long wait between slices. False when `timeout` passed with no activity (wait_while_busy).
template <class WaitFor>
bool wait_interruptible(WaitFor&& wait_for, const Signal& signal, std::chrono::milliseconds timeout) {
  constexpr std::chrono::milliseconds kSlice{100};
  const auto slice = [&](std::chrono::milliseconds ms) {
    bool reached;
    {
      const pb::gil_scoped_release nogil;
      reached = wait_for(ms);
    }
    if (!reached && PyErr_CheckSignals() != 0) throw pb::error_already_set();
    return reached;
  };
  return wait_while_busy(slice, [&] { return signal.activity(); }, timeout, kSlice);
}

void wait_queue(Queue& q, uint64_t value, std::optional<double> timeout_ms) {
  if (q.timeline()->value() >= value && q.wait(value, std::chrono::milliseconds(0))) return;  // done: no GIL hand-off
  const auto t = to_timeout(timeout_ms);
  if (!wait_interruptible([&](std::chrono::milliseconds slice) { return q.wait(value, slice); }, *q.timeline(), t))
    throw SignalTimeout(q.timeline()->name(), value, q.timeline()->value(), t);
}

// A Python int (or anything with __index__) as a 64-bit word: negative values in two's complement.
uint64_t to_word(pb::handle h, const char* what) {
  PyObject* idx = PyNumber_Index(h.ptr());
  if (idx == nullptr) {
    PyErr_Clear();
    throw pb::type_error(std::string(what) + ": expected an int or hcq.Patch, got " + std::string(pb::str(pb::type::of(h).attr("__name__"))));
  }
  const pb::object owned = pb::reinterpret_steal<pb::object>(idx);
  const unsigned long long u = PyLong_AsUnsignedLongLong(idx);
  if (!(u == static_cast<unsigned long long>(-1) && PyErr_Occurred())) return u;
  PyErr_Clear();
  const long long s = PyLong_AsLongLong(idx);
  if (s == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    throw pb::value_error(std::string(what) + ": " + std::string(pb::repr(h)) + " does not fit in 64 bits");
  }
  return static_cast<uint64_t>(s);
}

Operand to_operand(pb::handle h, const char* what) {
  if (pb::isinstance<Patch>(h)) return Operand(h.cast<Patch>());
  return Operand(to_word(h, what));
}

Dims to_dims(pb::handle seq, const char* what) {
  const auto items = pb::reinterpret_borrow<pb::sequence>(seq);
  const size_t n = items.size();
  if (n == 0 || n > 3) throw pb::value_error(std::string(what) + ": expected 1 to 3 dimensions, got " + std::to_string(n));
  Dims d;
  Operand* out[3] = {&d.x, &d.y, &d.z};
  for (size_t i = 0; i < n; ++i) *out[i] = to_operand(items[i], what);
  return d;
}

void check_operands(const CommandBuffer& cb, const std::vector<Operand>& ops, const char* what) {
  for (const auto& op : ops)
    if (op.patched() && op.slot >= cb.num_slots())
      throw pb::index_error(std::string(what) + ": Patch(" + std::to_string(op.slot) + ") names no slot (the buffer has " +
                            std::to_string(cb.num_slots()) + ")");
}

// Turn the operands at `positions` into new slots (their values become the slots' defaults).
pb::list make_slots(CommandBuffer& cb, std::vector<Operand>& ops, const std::vector<size_t>& positions, const char* what) {
  pb::list slots;
  for (size_t p : positions) {
    if (p >= ops.size())
      throw pb::index_error(std::string(what) + ": patch position " + std::to_string(p) + " out of range (" +
                            std::to_string(ops.size()) + " operands)");
    if (ops[p].patched()) throw pb::value_error(std::string(what) + ": operand " + std::to_string(p) + " is already a Patch");
    const uint32_t s = cb.add_slot(ops[p].value);
    ops[p] = Operand(Patch{s});
    slots.append(s);
  }
  return slots;
}

pb::object signal_command(CommandBuffer& cb, bool is_wait, const SignalRef& sig, pb::handle value, bool patch) {
  const char* what = is_wait ? "CommandBuffer.wait" : "CommandBuffer.signal";
  Operand v = to_operand(value, what);
  pb::object slot = pb::none();
  if (patch) {
    if (v.patched()) throw pb::value_error(std::string(what) + ": value is already a Patch");
    v = Operand(Patch{cb.add_slot(v.value)});
    slot = pb::int_(v.slot);
  }
  is_wait ? cb.wait(sig, v) : cb.signal(sig, v);
  return slot;
}

// Patch values from a list/tuple of ints (the hot path of a JIT replay), into `small` when they fit, else `big`.
std::span<const uint64_t> to_patches(pb::handle patches, size_t want, const std::string& who, std::array<uint64_t, 64>& small,
                                     std::vector<uint64_t>& big) {
  if (patches.is_none()) return {};
  PyObject* seq = PySequence_Fast(patches.ptr(), "submit: patches must be a sequence of ints");
  if (seq == nullptr) throw pb::error_already_set();
  const pb::object owned = pb::reinterpret_steal<pb::object>(seq);
  const size_t n = static_cast<size_t>(PySequence_Fast_GET_SIZE(seq));
  if (n != want)
    throw pb::value_error(who + ": submit got " + std::to_string(n) + " patch values for a command buffer with " +
                          std::to_string(want) + " slots");
  uint64_t* out = small.data();
  if (n > small.size()) {
    big.resize(n);
    out = big.data();
  }
  PyObject** items = PySequence_Fast_ITEMS(seq);
  for (size_t i = 0; i < n; ++i) {
    // Exact ints (addresses, sizes) take the direct path; anything else goes through __index__.
    const unsigned long long u = PyLong_CheckExact(items[i]) ? PyLong_AsUnsignedLongLong(items[i]) : 0;
    if (PyLong_CheckExact(items[i]) && !(u == static_cast<unsigned long long>(-1) && PyErr_Occurred())) {
      out[i] = u;
    } else {
      PyErr_Clear();
      out[i] = to_word(items[i], "CPUQueue.submit");
    }
  }
  return {out, n};
}

uint64_t submit_values(Queue& q, const CommandBuffer& cb, std::span<const uint64_t> values) {
  if (q.would_block(cb)) {
    const pb::gil_scoped_release nogil;
    return q.submit(cb, values);
  }
  return q.submit(cb, values);
}

uint64_t submit(Queue& q, const CommandBuffer& cb, pb::handle patches) {
  std::array<uint64_t, 64> small;
  std::vector<uint64_t> big;
  return submit_values(q, cb, to_patches(patches, cb.num_slots(), q.name(), small, big));
}

uint64_t tracked_submit(DepsTracker& t, Queue& q, const CommandBuffer& cb, pb::handle patches) {
  std::array<uint64_t, 64> small;
  std::vector<uint64_t> big;
  const auto values = to_patches(patches, cb.num_slots(), q.name(), small, big);
  if (q.would_block(cb)) {
    const pb::gil_scoped_release nogil;
    return t.submit(q, cb, values);
  }
  return t.submit(q, cb, values);
}

std::vector<uint64_t> tracked_group(DepsTracker& t, const pb::sequence& members) {
  std::vector<Submission> group;
  std::vector<std::vector<uint64_t>> values(members.size());
  group.reserve(members.size());
  bool blocks = false;
  for (size_t i = 0; i < members.size(); ++i) {
    const auto m = members[i].cast<pb::tuple>();
    if (m.size() != 3) throw pb::value_error("DepsTracker.submit_group: each member is (queue, cmdbuf, patches)");
    Queue& q = m[0].cast<Queue&>();
    const CommandBuffer& cb = m[1].cast<const CommandBuffer&>();
    std::array<uint64_t, 64> small;
    const auto got = to_patches(m[2], cb.num_slots(), q.name(), small, values[i]);
    if (got.data() == small.data()) values[i].assign(got.begin(), got.end());
    group.push_back({&q, &cb, values[i]});
    blocks = blocks || q.would_block(cb);
  }
  if (blocks) {
    const pb::gil_scoped_release nogil;
    return t.submit(group);
  }
  return t.submit(group);
}

// The host's wait before it touches memory: until every submit it must wait for (see DepsTracker) completed.
void host_wait(const DepsTracker& t, uint64_t buffer, uint64_t begin, uint64_t end, bool write, std::optional<double> timeout_ms) {
  for (const Dep& d : t.waits_for(buffer, begin, end, write)) {
    if (d.signal->value() >= d.value) {
      d.signal->check(d.value);
      continue;
    }
    const auto limit = to_timeout(timeout_ms);
    if (!wait_interruptible([&](std::chrono::milliseconds slice) { return d.signal->wait_for(d.value, slice); }, *d.signal, limit))
      throw SignalTimeout(d.signal->name(), d.value, d.signal->value(), limit);
  }
}

}  // namespace

bool init_hcq(PyObject* module) {
  return define_guarded([&] {
    auto parent = pb::reinterpret_borrow<pb::module_>(module);
    pb::module_ m = parent.def_submodule("hcq", "hardware command queues: signals, command buffers, the CPU device");

    // tinygrad raises RuntimeError for a device timeout; Python code that catches TimeoutError catches it too
    pb::register_exception<SignalTimeout>(m, "SignalTimeout", pb::make_tuple(pb::handle(PyExc_TimeoutError), pb::handle(PyExc_RuntimeError)));
    // a kernel that faulted on the device, raised by the next wait that covers it (tinygrad raises RuntimeError)
    pb::register_exception<DeviceFault>(m, "DeviceFault", PyExc_RuntimeError);

    pb::class_<Signal, SignalRef>(m, "Signal", "a 64-bit timeline value: waits end when it reaches a value")
        .def(pb::init([](std::string name, uint64_t value) { return Signal::create(std::move(name), value); }),
             pb::arg("name") = "signal", pb::arg("value") = 0)
        .def_property_readonly("value", &Signal::value)
        .def_property_readonly("name", &Signal::name)
        .def_property_readonly("address", &Signal::address, "where the value lives (what command streams encode)")
        .def("set", &Signal::set, pb::arg("value"))
        .def("note_progress", &Signal::note_progress, "a command of the next submit finished: progress for waits' time limits")
        .def("fault", &Signal::fault, pb::arg("value"), pb::arg("what"),
             "reports a device-side error in the work that raises the signal to value: the first wait that covers it raises "
             "hcq.DeviceFault with `what` (a device whose kernels run outside a queue's own workers, such as a mock's)")
        .def("wait",
             [](const Signal& s, uint64_t value, std::optional<double> timeout_ms) {
               if (s.value() >= value) return;
               const auto t = to_timeout(timeout_ms);
               if (!wait_interruptible([&](std::chrono::milliseconds slice) { return s.wait_for(value, slice); }, s, t))
                 throw SignalTimeout(s.name(), value, s.value(), t);
             },
             pb::arg("value"), pb::arg("timeout_ms") = double(kDefaultTimeout.count()),
             "until value >= `value`; raises SignalTimeout (a TimeoutError) after timeout_ms (None: never)")
        .def("__repr__", [](const Signal& s) { return "<Signal '" + s.name() + "' value=" + std::to_string(s.value()) + ">"; });

    pb::class_<Program>(m, "Program", "a kernel: void f(const uint64_t* args, uint32_t core_id, uint32_t num_cores)")
        .def(pb::init([](pb::handle address, std::string name) { return Program(std::move(name), to_word(address, "Program")); }),
             pb::arg("address"), pb::arg("name") = "kernel", "a function the caller keeps loaded (e.g. from ctypes)")
        .def_static("load", &Program::load, pb::arg("path"), pb::arg("symbol"), "dlopen + dlsym; the library stays loaded while used")
        .def_property_readonly("name", &Program::name)
        .def_property_readonly("address", &Program::address)
        .def("__repr__", [](const Program& p) { return "<Program '" + p.name() + "' at " + std::to_string(p.address()) + ">"; });

    pb::class_<Patch>(m, "Patch", "an operand taken from a patch slot at submit")
        .def(pb::init([](uint32_t slot, uint64_t offset) { return Patch{slot, offset}; }), pb::arg("slot"), pb::arg("offset") = 0,
             "the field gets the slot's value plus offset (a byte offset into a patched buffer)")
        .def_readonly("slot", &Patch::slot)
        .def_readonly("offset", &Patch::offset)
        .def("__repr__", [](const Patch& p) {
          return "Patch(" + std::to_string(p.slot) + (p.offset ? ", " + std::to_string(p.offset) : std::string()) + ")";
        });

    pb::class_<CommandBuffer>(m, "CommandBuffer", "commands encoded once, submitted many times with patched slots")
        .def(pb::init<>())
        .def("add_slot", &CommandBuffer::add_slot, pb::arg("initial") = 0, "a new patch slot; returns its index")
        .def("set_default", &CommandBuffer::set_default, pb::arg("slot"), pb::arg("value"))
        .def("wait",
             [](CommandBuffer& cb, const SignalRef& s, pb::handle v, bool patch) { return signal_command(cb, true, s, v, patch); },
             pb::arg("signal"), pb::arg("value"), pb::arg("patch") = false,
             "wait until signal >= value; with patch=True the value becomes a new slot, whose index is returned")
        .def("signal",
             [](CommandBuffer& cb, const SignalRef& s, pb::handle v, bool patch) { return signal_command(cb, false, s, v, patch); },
             pb::arg("signal"), pb::arg("value"), pb::arg("patch") = false)
        .def("exec",
             [](CommandBuffer& cb, const Program& prog, pb::sequence args, pb::handle global_size, pb::handle local_size,
                std::vector<size_t> patch) {
               std::vector<Operand> ops;
               ops.reserve(args.size());
               for (auto a : args) ops.push_back(to_operand(a, "CommandBuffer.exec"));
               const Dims g = to_dims(global_size, "CommandBuffer.exec global_size"), l = to_dims(local_size, "CommandBuffer.exec local_size");
               check_operands(cb, ops, "CommandBuffer.exec");  // before make_slots: a rejected exec adds no slots
               if (ops.size() > layout::kMaxExecArgs)
                 throw pb::value_error("CommandBuffer.exec: program '" + prog.name() + "' gets " + std::to_string(ops.size()) +
                                       " arguments; a command holds at most " + std::to_string(layout::kMaxExecArgs));
               pb::list slots = make_slots(cb, ops, patch, "CommandBuffer.exec");
               cb.exec(prog, ops, g, l);
               return slots;
             },
             pb::arg("program"), pb::arg("args"), pb::arg("global_size") = pb::make_tuple(1), pb::arg("local_size") = pb::make_tuple(1),
             pb::arg("patch") = std::vector<size_t>{},
             "args: ints or Patch; the args at the `patch` positions become new slots, whose indices are returned")
        .def("copy",
             [](CommandBuffer& cb, pb::handle dst, pb::handle src, pb::handle nbytes, std::vector<size_t> patch) {
               std::vector<Operand> ops = {to_operand(dst, "CommandBuffer.copy"), to_operand(src, "CommandBuffer.copy"),
                                           to_operand(nbytes, "CommandBuffer.copy")};
               check_operands(cb, ops, "CommandBuffer.copy");
               pb::list slots = make_slots(cb, ops, patch, "CommandBuffer.copy");
               cb.copy(ops[0], ops[1], ops[2]);
               return slots;
             },
             pb::arg("dst"), pb::arg("src"), pb::arg("nbytes"), pb::arg("patch") = std::vector<size_t>{},
             "non-overlapping memcpy; positions in `patch` (0 dst, 1 src, 2 nbytes) become new slots")
        .def("timestamp", [](CommandBuffer& cb, const SignalRef& s) { cb.timestamp(s); }, pb::arg("signal"),
             "the signal receives the monotonic clock in ns (time.monotonic_ns())")
        .def("timestamp", [](CommandBuffer& cb, pb::handle address) { cb.timestamp(to_word(address, "CommandBuffer.timestamp")); },
             pb::arg("address"))
        .def("barrier", &CommandBuffer::barrier)
        .def("access",
             [](CommandBuffer& cb, pb::handle buffer, uint64_t begin, std::optional<uint64_t> end, bool write) {
               cb.access(to_operand(buffer, "CommandBuffer.access"), begin, end.value_or(Access::kWhole), write);
             },
             pb::arg("buffer"), pb::arg("begin") = 0, pb::arg("end") = pb::none(), pb::arg("write") = false,
             "declares that a submit reads (or writes) bytes [begin, end) of the memory at `buffer` (an address or a Patch; "
             "end None: to its end), for the dependency tracker")
        .def("__len__", &CommandBuffer::size)
        .def_property_readonly("num_slots", &CommandBuffer::num_slots)
        .def_property_readonly("slot_defaults", [](const CommandBuffer& cb) {
          return std::vector<uint64_t>(cb.slot_defaults().begin(), cb.slot_defaults().end());
        })
        .def_property_readonly("words", [](const CommandBuffer& cb) { return std::vector<uint64_t>(cb.words().begin(), cb.words().end()); },
                               "the encoded stream (for inspection)");

    pb::class_<Queue>(m, "Queue", "where command buffers run, in order; its timeline rises by one per submit")
        .def_property_readonly("name", &Queue::name)
        .def_property_readonly("timeline", &Queue::timeline)
        .def_property_readonly("last_submitted", &Queue::last_submitted)
        .def("submit", [](Queue& q, const CommandBuffer& cb, pb::handle patches) { return submit(q, cb, patches); },
             pb::arg("cmdbuf"), pb::arg("patches") = pb::none(),
             "patch (one int per slot, or None for the defaults) and run; returns the timeline value that marks it done")
        .def("would_block", &Queue::would_block, pb::arg("cmdbuf"))
        .def("synchronize", [](Queue& q, std::optional<double> timeout_ms) { wait_queue(q, q.last_submitted(), timeout_ms); },
             pb::arg("timeout_ms") = double(kDefaultTimeout.count()),
             "until all submits completed (GIL released); SignalTimeout after timeout_ms (None: never)")
        .def("wait", [](Queue& q, uint64_t value, std::optional<double> timeout_ms) { wait_queue(q, value, timeout_ms); },
             pb::arg("value"), pb::arg("timeout_ms") = double(kDefaultTimeout.count()),
             "until the submit that returned `value` (and all before it) completed");

    pb::class_<CoreShare, std::shared_ptr<CoreShare>>(m, "CoreShare", "cores split among the CPU queues that have work at once")
        .def(pb::init<uint32_t>(), pb::arg("cores") = 0, "cores=0: the usable CPUs")
        .def_property_readonly("cores", &CoreShare::cores)
        .def_property_readonly("busy", [](const CoreShare& s) { return s.busy.load(); }, "sharing queues with work now");

    pb::class_<CpuQueue, Queue>(m, "CPUQueue", "a command ring run by worker threads of this process")
        .def(pb::init([](uint32_t num_threads, uint32_t ring_slots, std::string name, uint32_t idle_spin_us, std::shared_ptr<CoreShare> share,
                         uint32_t batch, bool pin) {
               CpuConfig c;
               c.batch = batch;
               c.pin = pin;
               c.name = std::move(name);
               c.num_threads = num_threads;
               c.ring_slots = ring_slots;
               c.idle_spin = std::chrono::microseconds(idle_spin_us);
               c.share = std::move(share);
               return CpuQueue::create(c);
             }),
             pb::arg("num_threads") = 0, pb::arg("ring_slots") = 16384, pb::arg("name") = "cpu", pb::arg("idle_spin_us") = 200,
             pb::arg("share") = pb::none(), pb::arg("batch") = CpuConfig{}.batch, pb::arg("pin") = false,
             "num_threads=0: NUM_CPU_THREADS or the usable CPUs (affinity, cgroup quota); a long submit reaches the workers "
             "after its first `batch` commands, then after twice as many more, ... (0: at its end); pin: each worker on a "
             "CPU of its own where the workers are as many as the process's CPUs")
        .def_property_readonly("num_threads", &CpuQueue::num_threads)
        .def_property_readonly("ring_slots", &CpuQueue::ring_slots)
        .def_property("parallelism", &CpuQueue::parallelism, &CpuQueue::set_parallelism,
                      "the most workers an exec or copy runs on, in [1, num_threads]");

    pb::class_<DepsTracker>(m, "DepsTracker", "which submits an access of a buffer's byte range must wait for")
        .def(pb::init<>())
        .def("waits_for",
             [](const DepsTracker& t, uint64_t buf, uint64_t begin, uint64_t end, bool write, const SignalRef& skip) {
               pb::list out;
               for (const auto& d : t.waits_for(buf, begin, end, write, skip.get())) out.append(pb::make_tuple(d.signal, d.value));
               return out;
             },
             pb::arg("buffer"), pb::arg("begin"), pb::arg("end"), pb::arg("write") = false, pb::arg("skip") = SignalRef(),
             "[(signal, value)]: one per signal, largest value")
        .def("record_write", &DepsTracker::record_write, pb::arg("buffer"), pb::arg("begin"), pb::arg("end"), pb::arg("signal"), pb::arg("value"))
        .def("record_read", &DepsTracker::record_read, pb::arg("buffer"), pb::arg("begin"), pb::arg("end"), pb::arg("signal"), pb::arg("value"))
        .def("access",
             [](DepsTracker& t, uint64_t buf, uint64_t begin, uint64_t end, bool write, const SignalRef& sig, uint64_t value,
                const SignalRef& skip) {
               pb::list out;
               for (const auto& d : t.access(buf, begin, end, write, sig, value, skip.get())) out.append(pb::make_tuple(d.signal, d.value));
               return out;
             },
             pb::arg("buffer"), pb::arg("begin"), pb::arg("end"), pb::arg("write"), pb::arg("signal"), pb::arg("value"),
             pb::arg("skip") = SignalRef())
        .def("submit", &tracked_submit, pb::arg("queue"), pb::arg("cmdbuf"), pb::arg("patches") = pb::none(),
             "queue.submit after the waits the buffer's declared accesses need on other queues; records the accesses")
        .def("submit_group", &tracked_group, pb::arg("members"),
             "[(queue, cmdbuf, patches)] submitted in order, each after its waits on earlier work (not on one another)")
        .def("wait", &host_wait, pb::arg("buffer"), pb::arg("begin") = 0, pb::arg("end") = Access::kWhole,
             pb::arg("write") = false, pb::arg("timeout_ms") = double(kDefaultTimeout.count()),
             "until the host may read (or, write=True, write or free) the range: the submits it must wait for completed")
        .def("prune", &DepsTracker::prune)
        .def("forget", &DepsTracker::forget, pb::arg("buffer"))
        .def("entries", &DepsTracker::entries, pb::arg("buffer"));

    m.def("usable_cpu_count", &usable_cpu_count, "CPUs this process may use (affinity, cgroup quota)");
    m.def("default_cpu_threads", &default_cpu_threads, "NUM_CPU_THREADS or usable_cpu_count()");
    m.attr("MAX_EXEC_ARGS") = layout::kMaxExecArgs;
    m.attr("WHOLE") = Access::kWhole;
  });
}

}  // namespace th::py
