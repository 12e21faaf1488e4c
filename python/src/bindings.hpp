#pragma once
// The Python module over itera's C++ user API (include/itera/user/): what module.cpp and runner.cpp
// share. The module holds no measuring logic of its own: sessions, scopes and the runner are the
// C++ API's; this layer converts arguments, maps C++ errors to Python exceptions and lets Python
// callables play the runner's callback (docs/python.md).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "itera/core/result.hpp"
#include "itera/user/session.hpp"

namespace itera::python {

namespace py = pybind11;

// A stream argument as the Python layer resolves it (itera/_streams.py): None, or the cudaStream_t's
// value. The legacy default stream arrives as cudaStreamLegacy (1), never as 0, which the C++ API
// reads as "no stream".
using stream_arg = std::optional<std::uintptr_t>;
inline void* to_stream(const stream_arg& s) { return s ? reinterpret_cast<void*>(*s) : nullptr; }

// A JSON value as Python objects (dict, list, str, float, ...), through the json module: the same
// text the results file holds.
py::object to_python(const ojson& j);

// How a Python exception becomes a failed case's message, for `with session.case()` (through
// itera._itera._exception_reason) and for the runner's callbacks alike: "<type>: <message>" (the type
// alone when the message is empty), the message cut to reason_message_chars characters ("..." then)
// and its line breaks and other control characters turned into spaces, so that one line of a report
// holds it. R18: the message is the program's own text, kept as it is otherwise. Needs the GIL.
inline constexpr std::size_t reason_message_chars = 200;
std::string exception_reason(py::handle type, py::handle value);

// The exception classes, created at import (module.cpp).
struct exception_types {
  PyObject* error = nullptr;     // itera.Error(Exception): base of all below
  PyObject* usage = nullptr;     // itera.UsageError(Error, ValueError)
  PyObject* stage = nullptr;     // itera.StageError(UsageError)
  PyObject* device = nullptr;    // itera.DeviceError(Error, RuntimeError)
  PyObject* write = nullptr;     // itera.WriteError(Error, OSError)
  PyObject* input = nullptr;     // itera.InputError(Error, ValueError)
};
const exception_types& exceptions();

void bind_runner(py::module_& m);

}  // namespace itera::python
