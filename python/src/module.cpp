// itera._itera: sessions, scopes, counters, memory marks and the C++ errors as Python exceptions.
// The Python package (python/itera/) wraps these in context managers, decorators and stream
// resolution; the hot path (a scope's enter and exit) is a direct call into the C++ API.
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "itera/core/build_info.hpp"
#include "itera/core/errors.hpp"

namespace itera::python {
namespace {

using user::counter;
using user::scope;
using user::session;

exception_types g_exceptions;

// A stage or an iteration as Python sees it: the C++ scope, the Python session object that made it
// (it keeps the session alive, and decorators make fresh scopes from it) and what it was made with.
struct py_scope {
  scope sc;
  py::object owner;
  std::string name;
  stream_arg stream;
  bool iteration = false;
};

PyObject* new_exception(py::module_& m, const char* name, py::object bases, const char* doc) {
  const std::string qualified = std::string("itera._itera.") + name;
  py::dict attrs;
  attrs["__doc__"] = py::str(doc);
  PyObject* type = PyErr_NewException(qualified.c_str(), bases.ptr(), attrs.ptr());
  if (!type) throw py::error_already_set();
  m.add_object(name, py::reinterpret_borrow<py::object>(type));
  return type;
}

void register_exceptions(py::module_& m) {
  auto& e = g_exceptions;
  e.error = new_exception(m, "Error", py::reinterpret_borrow<py::object>(PyExc_Exception),
                          "Base of every error itera raises.");
  const auto with = [&](PyObject* a, PyObject* b) {
    return py::make_tuple(py::reinterpret_borrow<py::object>(a), py::reinterpret_borrow<py::object>(b));
  };
  e.usage = new_exception(m, "UsageError", with(e.error, PyExc_ValueError),
                          "Something was asked that cannot be: the message names what was wrong and how to fix it.");
  e.stage = new_exception(m, "StageError", py::make_tuple(py::reinterpret_borrow<py::object>(e.usage)),
                          "A stage or iteration used out of order: exited twice, before it was entered, on another "
                          "thread, while a scope inside it is open, or never exited before its case ended.");
  e.device = new_exception(m, "DeviceError", with(e.error, PyExc_RuntimeError),
                           "A CUDA call failed, or a stream belongs to another device than the session's.");
  e.write = new_exception(m, "WriteError", with(e.error, PyExc_OSError),
                          "The results file could not be written (disk full, closed descriptor); lines written "
                          "before stay.");
  e.input = new_exception(m, "InputError", with(e.error, PyExc_ValueError),
                          "An input file is unreadable, truncated or not what it should be.");

  // The most derived C++ type first: stage_error is a usage_error.
  py::register_exception_translator([](std::exception_ptr p) {
    if (!p) return;
    try {
      std::rethrow_exception(p);
    } catch (const user::stage_error& x) {
      PyErr_SetString(g_exceptions.stage, x.what());
    } catch (const usage_error& x) {
      PyErr_SetString(g_exceptions.usage, x.what());
    } catch (const user::device_error& x) {
      PyErr_SetString(g_exceptions.device, x.what());
    } catch (const user::io_error& x) {
      PyErr_SetString(g_exceptions.write, x.what());
    } catch (const input_error& x) {
      PyErr_SetString(g_exceptions.input, x.what());
    }
  });
}

counter counter_from_name(std::string_view name) {
  for (std::size_t i = 0; i < user::counter_count; ++i) {
    const auto c = static_cast<counter>(i);
    if (name == user::to_string(c)) return c;
  }
  std::string known;
  for (std::size_t i = 0; i < user::counter_count; ++i)
    known += std::string(known.empty() ? "" : ", ") + user::to_string(static_cast<counter>(i));
  throw usage_error("unknown counter '" + std::string(name) + "': count one of " + known);
}

counter counter_of(py::handle what) {
  if (PyUnicode_Check(what.ptr())) {
    Py_ssize_t size = 0;
    const char* text = PyUnicode_AsUTF8AndSize(what.ptr(), &size);
    if (!text) throw py::error_already_set();
    return counter_from_name(std::string_view(text, static_cast<std::size_t>(size)));
  }
  try {
    return what.cast<counter>();
  } catch (const py::cast_error&) {
    throw usage_error("count: the counter is given by name ('items', 'bytes_read', ...) or as an itera.Counter, not a " +
                      std::string(py::str(what.get_type().attr("__name__"))));
  }
}

double number_of(py::handle what, py::handle amount) {
  const double v = PyFloat_AsDouble(amount.ptr());
  if (v == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    throw usage_error("count of " + std::string(py::str(what)) + ": the amount must be a number, not a " +
                      std::string(py::str(amount.get_type().attr("__name__"))));
  }
  return v;
}

session& session_of(const py::object& self) { return self.cast<session&>(); }

// str(value), its first reason_message_chars characters and "..." when longer; "" when str() itself
// raises (an exception whose __str__ fails) or gives text that is not UTF-8 (lone surrogates).
std::string text_of(py::handle value) {
  if (!value || value.is_none()) return {};
  auto text = py::reinterpret_steal<py::object>(PyObject_Str(value.ptr()));
  const auto limit = static_cast<Py_ssize_t>(reason_message_chars);
  const bool cut = text && PyUnicode_GetLength(text.ptr()) > limit;
  if (cut) text = py::reinterpret_steal<py::object>(PyUnicode_Substring(text.ptr(), 0, limit));
  Py_ssize_t size = 0;
  const char* utf8 = text ? PyUnicode_AsUTF8AndSize(text.ptr(), &size) : nullptr;
  if (!utf8) {
    PyErr_Clear();
    return {};
  }
  return std::string(utf8, static_cast<std::size_t>(size)) + (cut ? "..." : "");
}

py_scope make_scope(const py::object& self, std::string_view name, const stream_arg& stream, bool iteration) {
  session& s = session_of(self);
  py_scope p;
  p.sc = iteration ? s.make_iteration(to_stream(stream)) : s.make_stage(name, to_stream(stream));
  p.owner = self;
  p.name = iteration ? std::string("iteration") : std::string(name);
  p.stream = stream;
  p.iteration = iteration;
  return p;
}

void bind_session(py::module_& m) {
  // Every counter of the C++ API, under the name the results use (count/<name>).
  py::enum_<counter> counters(m, "Counter", "What a count adds to (the results name them count/<name>).");
  for (std::size_t i = 0; i < user::counter_count; ++i) {
    const auto c = static_cast<counter>(i);
    counters.value(user::to_string(c), c);
  }

  py::class_<py_scope>(m, "Scope",
                       "A stage or an iteration of a session: enter and exit it as often as needed (not nested in "
                       "itself); `with scope:` does both. Made by Session.stage / Session.iteration.")
      .def("enter", [](py_scope& s) -> py_scope& { s.sc.enter(); return s; }, py::return_value_policy::reference)
      .def("exit", [](py_scope& s) { s.sc.exit(); })
      .def("__enter__", [](py_scope& s) -> py_scope& { s.sc.enter(); return s; }, py::return_value_policy::reference)
      .def("__exit__",
           [](py_scope& s, py::handle type, py::handle, py::handle) {
             if (type.is_none()) {
               s.sc.exit();
               return false;
             }
             // An exception is on its way out: exit, but never hide it behind a stage error. A scope
             // that cannot be exited stays open, and its case fails with the reason when it ends.
             try {
               s.sc.exit();
             } catch (const user::stage_error&) {
             }
             return false;
           })
      .def_property_readonly("is_open", [](const py_scope& s) { return s.sc.is_open(); })
      .def_property_readonly("is_iteration", [](const py_scope& s) { return s.iteration; })
      .def_property_readonly("name", [](const py_scope& s) { return s.name; })
      .def_property_readonly("stream", [](const py_scope& s) { return s.stream; })
      .def_property_readonly("session", [](const py_scope& s) { return s.owner; })
      .def("__repr__", [](const py_scope& s) {
        return std::string("<itera ") + (s.iteration ? "iteration" : "stage '" + s.name + "'") +
               (s.sc.is_open() ? ", open>" : ">");
      });

  py::class_<session>(m, "_Session", "The C++ session (itera.Session is the Python class to use).")
      .def(py::init([](const std::string& name, const std::string& results_path, int device, int version,
                       std::map<std::string, std::string> fields, const std::string& label,
                       const std::string& device_clock) {
             user::session_options o;
             o.name = name;
             o.results_path = results_path;
             o.device = device;
             o.version = version;
             o.fields = std::move(fields);
             o.label = label;
             o.device_clock = device_clock;
             return std::make_unique<session>(std::move(o));
           }),
           py::arg("name"), py::arg("results_path"), py::arg("device"), py::arg("version"), py::arg("fields"),
           py::arg("label"), py::arg("device_clock") = "auto")
      .def("_begin_case", [](session& s, user::axis_list axes, std::size_t warmup) { s.begin_case(std::move(axes), warmup); },
           py::arg("axes"), py::arg("warmup"))
      .def("_end_case",
           [](session& s) {
             case_record r;
             {
               py::gil_scoped_release free;  // reading the events may wait for the device
               r = s.end_case();
             }
             return to_python(to_json(r));
           })
      .def("_fail_case",
           [](session& s, const std::string& reason) {
             case_record r;
             {
               py::gil_scoped_release free;
               r = s.fail_case(reason);
             }
             return to_python(to_json(r));
           },
           py::arg("reason"))
      .def_property_readonly("case_open", [](const session& s) { return s.case_open(); },
                             "True while a case is open: begun by begin_case / case(), or by a stage, iteration, "
                             "count or mark outside one.")
      .def("set_field", &session::set_field, py::arg("key"), py::arg("value"),
           "A recipe field of every case ended from now on (model, precision.weights, ...).")
      .def("set_case_field", &session::set_case_field, py::arg("key"), py::arg("value"),
           "A recipe field of the open case (a stage, count or mark begins one with no axes).")
      .def("_close",
           [](session& s) {
             py::gil_scoped_release free;
             s.close();
           })
      .def("make_stage",
           [](py::object self, std::string_view name, stream_arg stream) { return make_scope(self, name, stream, false); },
           py::arg("name"), py::arg("stream") = py::none(), "A stage not entered yet; the stream is a resolved handle.")
      .def("make_iteration",
           [](py::object self, stream_arg stream) { return make_scope(self, "", stream, true); },
           py::arg("stream") = py::none(), "An iteration not entered yet; the stream is a resolved handle.")
      // One binding, converting by hand: pybind11 would try overloads twice (without, then with implicit
      // conversions) for the usual count("items", 1), an int where a float is declared.
      .def("count", [](session& s, py::handle what, py::handle amount) { s.count(counter_of(what), number_of(what, amount)); },
           py::arg("what"), py::arg("amount"),
           "Adds `amount` (finite, >= 0) to a counter of the case (by name: 'bytes_read', 'items', ..., or an "
           "itera.Counter), and to the innermost open stage of this thread for bytes and flops.")
      .def("_mark_memory", [](session& s, std::string_view label, std::int64_t user_bytes) { s.mark_memory(label, user_bytes); },
           py::arg("label"), py::arg("user_bytes"))
      .def_property_readonly("context", [](const session& s) { return to_python(to_json(s.context())); },
                             "The results' context line (build, host, device, software), as a dict.")
      .def_property_readonly("cases",
                             [](const session& s) {
                               py::list out;
                               for (const auto& r : s.cases()) out.append(to_python(to_json(r)));
                               return out;
                             },
                             "The cases ended so far, as the dicts the results file holds.")
      .def_property_readonly("backend", [](const session& s) { return s.backend_name(); },
                             "'cuda' (stages may take streams of device `device`) or 'cpu' (host time only).")
      .def_property_readonly("device", [](const session& s) { return s.device(); },
                             "The CUDA device index the session records, -1 for host time only.")
      .def_property_readonly("host_only_reason", [](const session& s) { return s.host_only_reason(); },
                             "Why the session records host time only ('' when it records a device).");
}

}  // namespace

const exception_types& exceptions() { return g_exceptions; }

std::string exception_reason(py::handle type, py::handle value) {
  std::string name = "exception";
  if (type && !type.is_none()) {
    if (PyObject* n = PyObject_GetAttrString(type.ptr(), "__name__")) {
      Py_ssize_t size = 0;
      if (const char* utf8 = PyUnicode_Check(n) ? PyUnicode_AsUTF8AndSize(n, &size) : nullptr)
        name.assign(utf8, static_cast<std::size_t>(size));
      Py_DECREF(n);
    }
    PyErr_Clear();
  }
  std::string text = text_of(value);
  // One line: line breaks, tabs and other control characters become spaces (bytes below 0x20 and
  // 0x7f are never part of a multi-byte UTF-8 sequence).
  for (char& ch : text)
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = ' ';
  const auto first = text.find_first_not_of(' ');
  text = first == std::string::npos ? std::string() : text.substr(first, text.find_last_not_of(' ') - first + 1);
  return text.empty() ? name : name + ": " + text;
}

py::object to_python(const ojson& j) {
  return py::module_::import("json").attr("loads")(py::str(j.dump()));
}

}  // namespace itera::python

PYBIND11_MODULE(_itera, m) {
  namespace py = pybind11;
  using namespace itera::python;
  m.doc() = "itera's C++ user API (include/itera/user/): the compiled part of the itera package";
  register_exceptions(m);
  bind_session(m);
  bind_runner(m);

  const auto& b = itera::this_build();
  m.attr("__version__") = std::string(b.version);
  py::dict info;
  info["version"] = std::string(b.version);
  info["git_commit"] = std::string(b.git_commit);
  info["build_type"] = std::string(b.build_type);
  info["compiler"] = std::string(b.compiler);
  info["cuda_enabled"] = b.cuda_enabled;
  info["cuda_toolkit"] = std::string(b.cuda_toolkit);
  info["cuda_architectures"] = std::string(b.cuda_architectures);
  m.attr("build_info") = info;
  m.def("_exception_reason",
        [](py::handle exc) { return exception_reason(py::handle(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr()))), exc); },
        py::arg("exc"), "The failed case's message for an exception: '<type>: <message>', the message cut to 200 "
                        "characters (the runner's callbacks and `with session.case()` alike).");
  m.attr("device_auto") = itera::user::device_auto;
  m.attr("device_none") = itera::user::device_none;
}
