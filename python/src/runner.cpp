// The runner from Python: a Python callable plays the system under test. The C++ runner (offline
// sweep, Poisson server, single stream: include/itera/user/runner.hpp) calls it from its own threads,
// so each call takes the GIL; the run itself lets the GIL go. An exception from the callable becomes
// the case's error (its type and message, as the C++ runner records a C++ exception's what()), the
// run goes on with the next configuration, and the Python layer raises itera.CallbackError at the end
// with the first exception as its cause. KeyboardInterrupt and SystemExit stop the run: the calls
// left fail at once, and the interrupt is raised again when the runner returns.
#include <atomic>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "itera/core/errors.hpp"
#include "itera/user/runner.hpp"

namespace itera::python {
namespace {

using user::call;
using user::session;

// The Python view of one call, valid while its callback runs.
struct py_call {
  call* c = nullptr;
  call& get() const {
    if (!c)
      throw usage_error("this Call object is used after its callback returned: read what you need from it inside "
                        "the callback");
    return *c;
  }
};

// The Python callable and what its calls raised. Touched only with the GIL held.
struct callback_box {
  py::object fn;
  py::object first_error;  // the first exception a call raised, with its traceback
  py::object interrupt;    // a KeyboardInterrupt / SystemExit that stopped the run
  std::atomic<bool> stop{false};
};

std::string describe(py::error_already_set& e) { return exception_reason(e.type(), e.value()); }

// The C++ callback around a Python callable. Builds no Python object without the GIL, and lets no
// Python exception object cross into the runner (it may destroy it on a thread without the GIL).
user::callback wrap(const std::shared_ptr<callback_box>& box) {
  return [box](call& c) {
    if (box->stop.load(std::memory_order_relaxed))
      throw std::runtime_error("not called: the run was interrupted (KeyboardInterrupt or SystemExit)");
    std::string failure;
    {
      py::gil_scoped_acquire gil;
      auto view = std::make_shared<py_call>();
      view->c = &c;
      try {
        py::object arg = py::cast(view);
        box->fn(arg);
      } catch (py::error_already_set& e) {
        failure = describe(e);
        if (!e.matches(PyExc_Exception)) {  // KeyboardInterrupt, SystemExit, GeneratorExit
          box->stop.store(true, std::memory_order_relaxed);
          if (box->interrupt.is_none()) box->interrupt = e.value();
        }
        if (box->first_error.is_none()) {
          py::object value = e.value();
          if (e.trace() && !e.trace().is_none()) PyException_SetTraceback(value.ptr(), e.trace().ptr());
          box->first_error = value;
        }
        if (failure.empty()) failure = "exception";
      }
      view->c = nullptr;
    }
    if (!failure.empty()) throw std::runtime_error(failure);
  };
}

// Runs `run` without the GIL, then returns (summary, first exception or None, interrupt or None).
template <class Run>
py::tuple drive(py::object fn, Run&& run) {
  if (!PyCallable_Check(fn.ptr()))
    throw usage_error("the callback is not callable: pass a function that takes one argument (an itera.Call)");
  auto box = std::make_shared<callback_box>();
  box->fn = std::move(fn);
  box->first_error = py::none();
  box->interrupt = py::none();
  user::run_summary summary;
  {
    const user::callback cb = wrap(box);
    py::gil_scoped_release free;
    summary = run(cb);
  }
  py::dict out;
  py::list cases;
  for (const auto& r : summary.cases) cases.append(to_python(to_json(r)));
  out["cases"] = cases;
  out["failed"] = summary.failed;
  out["first_failure"] = summary.first_failure;
  return py::make_tuple(out, box->first_error, box->interrupt);
}

stopping_rule rule(std::size_t min_samples, std::size_t max_samples, double min_time_s, double max_time_s,
                   double noise_target) {
  stopping_rule r;
  r.min_samples = min_samples;
  r.max_samples = max_samples;
  r.min_time_s = min_time_s;
  r.max_time_s = max_time_s;
  r.noise_target = noise_target;
  return r;
}

}  // namespace

void bind_runner(py::module_& m) {
  py::class_<py_call, std::shared_ptr<py_call>>(
      m, "Call", "One call of the runner's callback: valid while the callback runs.")
      .def_property_readonly("index", [](const py_call& p) { return p.get().index(); },
                             "offline: the call's number in its case (warm-up first); else the request's")
      .def_property_readonly("batch", [](const py_call& p) { return p.get().batch(); },
                             "offline: items this call processes; server and single stream: 1")
      .def_property_readonly("scheduled_s", [](const py_call& p) { return p.get().scheduled_s(); },
                             "server: scheduled arrival, s from the run's start; single stream: when issued")
      .def_property_readonly("warmup", [](const py_call& p) { return p.get().warmup(); },
                             "a warm-up call: timed apart, never sampled")
      .def("token", [](const py_call& p, std::int64_t n) { p.get().token(n); }, py::arg("n") = 1,
           "`n` output tokens became available to the client now (TTFT, TPOT, ITL; each counts as an output token).")
      .def("__repr__", [](const py_call& p) {
        if (!p.c) return std::string("<itera.Call, finished>");
        return "<itera.Call index=" + std::to_string(p.c->index()) + " batch=" + std::to_string(p.c->batch()) +
               (p.c->warmup() ? " warm-up>" : ">");
      });

  m.def(
      "_run_offline",
      [](session& s, py::object fn, std::vector<std::int64_t> batches, user::axis_list axes, stream_arg stream,
         std::size_t warmup_min_count, double warmup_min_time_s, std::size_t min_samples, std::size_t max_samples,
         double min_time_s, double max_time_s, double noise_target) {
        user::offline_options o;
        o.batches = std::move(batches);
        o.axes = std::move(axes);
        o.stream = to_stream(stream);
        o.warmup_min_count = warmup_min_count;
        o.warmup_min_time_s = warmup_min_time_s;
        o.stop = rule(min_samples, max_samples, min_time_s, max_time_s, noise_target);
        return drive(std::move(fn), [&](const user::callback& cb) { return user::run_offline(s, o, cb); });
      },
      py::arg("session"), py::arg("fn"), py::arg("batches"), py::arg("axes"), py::arg("stream"),
      py::arg("warmup_min_count"), py::arg("warmup_min_time_s"), py::arg("min_samples"), py::arg("max_samples"),
      py::arg("min_time_s"), py::arg("max_time_s"), py::arg("noise_target"));

  m.def(
      "_run_server",
      [](session& s, py::object fn, std::vector<double> rates, std::vector<std::int64_t> concurrency,
         std::size_t requests, std::uint64_t seed, double ttft_s, double tpot_s, double e2e_s,
         std::size_t warmup_requests, user::axis_list axes, stream_arg stream) {
        user::server_options o;
        o.rates = std::move(rates);
        o.concurrency = std::move(concurrency);
        o.requests = requests;
        o.seed = seed;
        o.targets = {ttft_s, tpot_s, e2e_s};
        o.warmup_requests = warmup_requests;
        o.axes = std::move(axes);
        o.stream = to_stream(stream);
        return drive(std::move(fn), [&](const user::callback& cb) { return user::run_server(s, o, cb); });
      },
      py::arg("session"), py::arg("fn"), py::arg("rates"), py::arg("concurrency"), py::arg("requests"),
      py::arg("seed"), py::arg("ttft_s"), py::arg("tpot_s"), py::arg("e2e_s"), py::arg("warmup_requests"),
      py::arg("axes"), py::arg("stream"));

  m.def(
      "_run_single_stream",
      [](session& s, py::object fn, std::size_t requests, double ttft_s, double tpot_s, double e2e_s,
         std::size_t warmup_requests, user::axis_list axes, stream_arg stream) {
        user::single_stream_options o;
        o.requests = requests;
        o.targets = {ttft_s, tpot_s, e2e_s};
        o.warmup_requests = warmup_requests;
        o.axes = std::move(axes);
        o.stream = to_stream(stream);
        return drive(std::move(fn), [&](const user::callback& cb) { return user::run_single_stream(s, o, cb); });
      },
      py::arg("session"), py::arg("fn"), py::arg("requests"), py::arg("ttft_s"), py::arg("tpot_s"), py::arg("e2e_s"),
      py::arg("warmup_requests"), py::arg("axes"), py::arg("stream"));
}

}  // namespace itera::python
