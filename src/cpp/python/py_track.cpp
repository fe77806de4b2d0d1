// Rewrite tracking (tinyhybrid/track.h) for Python: switches, the caller's marks, and the trace taken whole.
#include "convert.h"
#include "tinyhybrid/track.h"

namespace th::py {

namespace {

PyObject* f_enable(PyObject*, PyObject* on) {
  const int v = PyObject_IsTrue(on);
  if (v < 0) return nullptr;
  track::enable(v != 0);
  Py_RETURN_NONE;
}

PyObject* f_enabled(PyObject*, PyObject*) { return PyBool_FromLong(track::enabled()); }

// (words: bytes of native-endian uint32, strings: list[str], nodes: list[UOp])
PyObject* f_take(PyObject*, PyObject*) {
  return guarded([]() -> PyObject* {
    track::Trace t = track::take();
    PyObject* words = PyBytes_FromStringAndSize(reinterpret_cast<const char*>(t.words.data()),
                                                static_cast<Py_ssize_t>(t.words.size() * sizeof(uint32_t)));
    PyObject* strings = PyList_New(static_cast<Py_ssize_t>(t.strings.size()));
    PyObject* nodes = PyList_New(static_cast<Py_ssize_t>(t.nodes.size()));
    bool ok = words && strings && nodes;
    for (size_t i = 0; ok && i < t.strings.size(); ++i) {
      // errors="replace": a kernel source or a name with stray bytes still arrives
      PyObject* s = PyUnicode_DecodeUTF8(t.strings[i].data(), static_cast<Py_ssize_t>(t.strings[i].size()), "replace");
      ok = s != nullptr;
      if (ok) PyList_SET_ITEM(strings, static_cast<Py_ssize_t>(i), s);
    }
    for (size_t i = 0; ok && i < t.nodes.size(); ++i) {
      PyObject* u = uop_object(t.nodes[i].get());
      ok = u != nullptr;
      if (ok) PyList_SET_ITEM(nodes, static_cast<Py_ssize_t>(i), u);
    }
    PyObject* out = ok ? PyTuple_Pack(3, words, strings, nodes) : nullptr;
    Py_XDECREF(words);
    Py_XDECREF(strings);
    Py_XDECREF(nodes);
    return out;
  });
}

PyObject* f_stage(PyObject*, PyObject* args) {
  const char* name;
  PyObject *before, *after;
  if (!PyArg_ParseTuple(args, "sO!O!:track_stage", &name, &UOpType, &before, &UOpType, &after)) return nullptr;
  return guarded([&]() -> PyObject* {
    track::stage(name, uop_ref(before).get(), uop_ref(after).get());
    Py_RETURN_NONE;
  });
}

PyObject* f_group_begin(PyObject*, PyObject* args) {
  const char* kind;
  if (!PyArg_ParseTuple(args, "s:track_group_begin", &kind)) return nullptr;
  return guarded([&]() -> PyObject* {
    track::group_begin(kind);
    Py_RETURN_NONE;
  });
}

PyObject* f_group_end(PyObject*, PyObject* args) {
  const char *name, *text = "";
  Py_ssize_t name_len, text_len = 0;
  if (!PyArg_ParseTuple(args, "s#|s#:track_group_end", &name, &name_len, &text, &text_len)) return nullptr;
  return guarded([&]() -> PyObject* {
    track::group_end({name, static_cast<size_t>(name_len)}, {text, static_cast<size_t>(text_len)});
    Py_RETURN_NONE;
  });
}

PyMethodDef module_functions[] = {
    {"track_enable", f_enable, METH_O, "track_enable(on): record every graph_rewrite (VIZ, TRACK_MATCH_STATS)"},
    {"track_enabled", f_enabled, METH_NOARGS, "whether graph_rewrites are being recorded"},
    {"track_take", f_take, METH_NOARGS,
     "the trace recorded so far as (words, strings, nodes), see tinyhybrid/track.h; the recorder starts over"},
    {"track_stage", f_stage, METH_VARARGS, "track_stage(name, before, after): record a pass that is not a graph_rewrite"},
    {"track_group_begin", f_group_begin, METH_VARARGS, "track_group_begin(kind): the calls that follow form a group"},
    {"track_group_end", f_group_end, METH_VARARGS, "track_group_end(name, text=''): close the innermost group"},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

bool init_track(PyObject* module) { return PyModule_AddFunctions(module, module_functions) == 0; }

}  // namespace th::py
