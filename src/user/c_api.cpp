// The C API (include/itera/itera.h): opaque handles over the C++ API, exceptions turned into status
// codes with a thread-local message. Compiled into libitera.so only, with hidden visibility: the
// functions declared ITERA_API are all it exports.
#include "itera/itera.h"

#include <cstring>
#include <new>
#include <string>

#include <fmt/format.h>

#include "itera/core/build_info.hpp"
#include "itera/user/runner.hpp"
#include "itera/user/session.hpp"

struct itera_session {
  itera::user::session s;
};

struct itera_scope {
  itera::user::scope sc;
};

namespace {

using namespace itera::user;

thread_local std::string t_last_error;

itera_status fail(itera_status status, const char* what) noexcept {
  try {
    t_last_error = what;
  } catch (...) {
    t_last_error.clear();
  }
  return status;
}

// A run whose cases failed: the runner wrote them and went on; the caller hears it here.
struct cases_failed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <class F>
itera_status guard(F&& f) noexcept {
  try {
    f();
    return ITERA_OK;
  } catch (const stage_error& e) {
    return fail(ITERA_ERROR_STAGE, e.what());
  } catch (const itera::usage_error& e) {
    return fail(ITERA_ERROR_USAGE, e.what());
  } catch (const itera::input_error& e) {
    return fail(ITERA_ERROR_USAGE, e.what());
  } catch (const device_error& e) {
    return fail(ITERA_ERROR_DEVICE, e.what());
  } catch (const io_error& e) {
    return fail(ITERA_ERROR_IO, e.what());
  } catch (const cases_failed& e) {
    return fail(ITERA_ERROR_CALLBACK, e.what());
  } catch (const std::bad_alloc&) {
    return fail(ITERA_ERROR_INTERNAL, "out of memory");
  } catch (const std::exception& e) {
    return fail(ITERA_ERROR_INTERNAL, e.what());
  } catch (...) {
    return fail(ITERA_ERROR_INTERNAL, "unknown exception");
  }
}

template <class T>
T& need(T* p, const char* what) {
  if (p == nullptr) throw itera::usage_error(fmt::format("{} is NULL", what));
  return *p;
}

const char* need_text(const char* p, const char* what) {
  if (p == nullptr) throw itera::usage_error(fmt::format("{} is NULL: give a string", what));
  return p;
}

axis_list read_axes(const char* const* names, const char* const* values, std::size_t count) {
  axis_list axes;
  if (count == 0) return axes;
  if (names == nullptr || values == nullptr)
    throw itera::usage_error(fmt::format("{} axes announced but the names or values array is NULL", count));
  for (std::size_t i = 0; i < count; ++i) {
    if (names[i] == nullptr || values[i] == nullptr)
      throw itera::usage_error(fmt::format("axis {}: its name or value is NULL", i));
    axes.emplace_back(names[i], values[i]);
  }
  return axes;
}

itera_run_options read_run_options(const itera_run_options* in) {
  itera_run_options o;
  itera_run_options_init(&o);
  if (in == nullptr) return o;
  if (in->struct_size < sizeof(std::size_t) || in->struct_size > sizeof(itera_run_options))
    throw itera::usage_error(fmt::format("itera_run_options.struct_size is {}: initialise the options with "
                                         "itera_run_options_init (this library knows sizes up to {})",
                                         in->struct_size, sizeof(itera_run_options)));
  // A caller built against an older header passes a prefix of today's struct: the rest keeps its defaults.
  std::memcpy(&o, in, in->struct_size);
  o.struct_size = sizeof(itera_run_options);
  return o;
}

itera::stopping_rule stop_rule(const itera_run_options& o) {
  itera::stopping_rule r;
  r.min_samples = o.min_samples;
  r.max_samples = o.max_samples;
  r.min_time_s = o.min_time_s;
  r.max_time_s = o.max_time_s;
  r.noise_target = o.noise_target;
  return r;
}

callback wrap(itera_callback cb, void* user) {
  if (cb == nullptr) throw itera::usage_error("the callback is NULL");
  return [cb, user](call& c) {
    const int rc = cb(reinterpret_cast<itera_call*>(&c), user);
    if (rc != 0) throw std::runtime_error(fmt::format("the callback returned {}", rc));
  };
}

void check_summary(const run_summary& s) {
  if (s.failed == 0) return;
  throw cases_failed(fmt::format("{} of {} cases failed (written as failed, with what they measured); the first: {}",
                                 s.failed, s.cases.size(), s.first_failure));
}

call& as_call(itera_call* c) { return *reinterpret_cast<call*>(&need(c, "call")); }
const call& as_call(const itera_call* c) {
  if (c == nullptr) throw itera::usage_error("call is NULL");
  return *reinterpret_cast<const call*>(c);
}

}  // namespace

extern "C" {

int itera_abi_version(void) { return ITERA_C_ABI_VERSION; }

const char* itera_version(void) {
  static const std::string version(itera::this_build().version);
  return version.c_str();
}

const char* itera_last_error(void) { return t_last_error.c_str(); }

const char* itera_status_name(itera_status status) {
  switch (status) {
    case ITERA_OK: return "ITERA_OK";
    case ITERA_ERROR_USAGE: return "ITERA_ERROR_USAGE";
    case ITERA_ERROR_STAGE: return "ITERA_ERROR_STAGE";
    case ITERA_ERROR_DEVICE: return "ITERA_ERROR_DEVICE";
    case ITERA_ERROR_IO: return "ITERA_ERROR_IO";
    case ITERA_ERROR_CALLBACK: return "ITERA_ERROR_CALLBACK";
    case ITERA_ERROR_INTERNAL: return "ITERA_ERROR_INTERNAL";
  }
  return "ITERA_ERROR_UNKNOWN";
}

void itera_session_options_init(itera_session_options* o) {
  if (o == nullptr) return;
  std::memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->device = ITERA_DEVICE_AUTO;
  o->version = 1;
}

itera_status itera_session_open(const itera_session_options* options, itera_session** out) {
  return guard([&] {
    need(out, "the session output pointer");
    *out = nullptr;
    const auto& in = need(options, "options");
    if (in.struct_size < offsetof(itera_session_options, label) + sizeof(const char*) ||
        in.struct_size > sizeof(itera_session_options))
      throw itera::usage_error(fmt::format("itera_session_options.struct_size is {}: initialise the options with "
                                           "itera_session_options_init",
                                           in.struct_size));
    session_options o;
    o.name = need_text(in.name, "itera_session_options.name");
    o.results_path = in.results_path ? in.results_path : "";
    o.device = in.device;
    o.version = in.version;
    o.label = in.label ? in.label : "";
    // Appended after label: callers built against the older header pass a smaller struct_size.
    if (in.struct_size >= offsetof(itera_session_options, device_clock) + sizeof(const char*) && in.device_clock)
      o.device_clock = in.device_clock;
    *out = new itera_session{session(std::move(o))};
  });
}

itera_status itera_session_set_field(itera_session* s, const char* key, const char* value) {
  return guard([&] { need(s, "session").s.set_field(need_text(key, "key"), need_text(value, "value")); });
}

itera_status itera_session_close(itera_session* s) {
  if (s == nullptr) return ITERA_OK;
  const itera_status status = guard([&] { s->s.close(); });
  delete s;
  return status;
}

const char* itera_session_backend(const itera_session* s) {
  if (s == nullptr) return "";
  return s->s.backend_name().c_str();
}

int itera_session_device(const itera_session* s) { return s == nullptr ? -1 : s->s.device(); }

itera_status itera_case_begin(itera_session* s, const char* const* names, const char* const* values, size_t count,
                              uint32_t warmup_iterations) {
  return guard([&] { need(s, "session").s.begin_case(read_axes(names, values, count), warmup_iterations); });
}

itera_status itera_case_set_field(itera_session* s, const char* key, const char* value) {
  return guard([&] { need(s, "session").s.set_case_field(need_text(key, "key"), need_text(value, "value")); });
}

itera_status itera_case_end(itera_session* s) {
  return guard([&] { (void)need(s, "session").s.end_case(); });
}

itera_status itera_session_fail_case(itera_session* s, const char* reason) {
  return guard([&] { (void)need(s, "session").s.fail_case(need_text(reason, "the reason")); });
}

int itera_session_case_open(const itera_session* s) {
  if (s == nullptr) return 0;
  try {
    return s->s.case_open() ? 1 : 0;
  } catch (...) {  // a session moved from: none here, but nothing may escape a C function
    return 0;
  }
}

itera_status itera_scope_create(itera_session* s, const char* name, void* stream, itera_scope** out) {
  return guard([&] {
    need(out, "the scope output pointer");
    *out = nullptr;
    auto sc = need(s, "session").s.make_stage(need_text(name, "stage name"), stream);
    *out = new itera_scope{std::move(sc)};
  });
}

itera_status itera_iteration_create(itera_session* s, void* stream, itera_scope** out) {
  return guard([&] {
    need(out, "the scope output pointer");
    *out = nullptr;
    auto sc = need(s, "session").s.make_iteration(stream);
    *out = new itera_scope{std::move(sc)};
  });
}

itera_status itera_scope_enter(itera_scope* scope) {
  return guard([&] { need(scope, "scope").sc.enter(); });
}

itera_status itera_scope_exit(itera_scope* scope) {
  return guard([&] { need(scope, "scope").sc.exit(); });
}

void itera_scope_destroy(itera_scope* scope) { delete scope; }

itera_status itera_count(itera_session* s, itera_counter what, double amount) {
  return guard([&] {
    const int index = static_cast<int>(what);
    if (index < 0 || index >= static_cast<int>(counter_count))
      throw itera::usage_error(fmt::format("counter {} does not exist: use one of ITERA_COUNT_* (0 to {})", index,
                                           counter_count - 1));
    need(s, "session").s.count(static_cast<counter>(index), amount);
  });
}

itera_status itera_memory_mark(itera_session* s, const char* label, int64_t user_bytes) {
  return guard([&] { need(s, "session").s.mark_memory(need_text(label, "memory mark label"), user_bytes); });
}

int64_t itera_call_index(const itera_call* c) {
  return c == nullptr ? -1 : as_call(c).index();
}
int64_t itera_call_batch(const itera_call* c) { return c == nullptr ? 0 : as_call(c).batch(); }
double itera_call_scheduled_s(const itera_call* c) { return c == nullptr ? 0.0 : as_call(c).scheduled_s(); }
int itera_call_is_warmup(const itera_call* c) { return c != nullptr && as_call(c).warmup() ? 1 : 0; }

itera_status itera_call_token(itera_call* c, int64_t n) {
  return guard([&] { as_call(c).token(n); });
}

void itera_run_options_init(itera_run_options* o) {
  if (o == nullptr) return;
  std::memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  const itera::stopping_rule stop;
  o->warmup_min_count = 3;
  o->warmup_min_time_s = 0.05;
  o->min_samples = stop.min_samples;
  o->max_samples = stop.max_samples;
  o->min_time_s = stop.min_time_s;
  o->max_time_s = stop.max_time_s;
  o->noise_target = stop.noise_target;
  o->requests = 200;
  o->seed = 1;
  o->warmup_requests = 1;
}

itera_status itera_run_offline(itera_session* s, const itera_run_options* options, const int64_t* batches,
                               size_t batch_count, itera_callback cb, void* user) {
  return guard([&] {
    auto& sess = need(s, "session").s;
    const itera_run_options o = read_run_options(options);
    if (batch_count > 0 && batches == nullptr) throw itera::usage_error("batches is NULL");
    offline_options opt;
    opt.batches.assign(batches, batches + batch_count);
    opt.axes = read_axes(o.axis_names, o.axis_values, o.axis_count);
    opt.stream = o.stream;
    opt.warmup_min_count = o.warmup_min_count;
    opt.warmup_min_time_s = o.warmup_min_time_s;
    opt.stop = stop_rule(o);
    check_summary(run_offline(sess, opt, wrap(cb, user)));
  });
}

itera_status itera_run_server(itera_session* s, const itera_run_options* options, const double* rates,
                              size_t rate_count, const int64_t* concurrency, size_t concurrency_count,
                              itera_callback cb, void* user) {
  return guard([&] {
    auto& sess = need(s, "session").s;
    const itera_run_options o = read_run_options(options);
    if (rate_count > 0 && rates == nullptr) throw itera::usage_error("rates is NULL");
    if (concurrency_count > 0 && concurrency == nullptr) throw itera::usage_error("concurrency is NULL");
    server_options opt;
    opt.rates.assign(rates, rates + rate_count);
    opt.concurrency.assign(concurrency, concurrency + concurrency_count);
    opt.requests = o.requests;
    opt.seed = o.seed;
    opt.targets = {o.ttft_target_s, o.tpot_target_s, o.e2e_target_s};
    opt.warmup_requests = o.warmup_requests;
    opt.axes = read_axes(o.axis_names, o.axis_values, o.axis_count);
    opt.stream = o.stream;
    check_summary(run_server(sess, opt, wrap(cb, user)));
  });
}

itera_status itera_run_single_stream(itera_session* s, const itera_run_options* options, itera_callback cb,
                                     void* user) {
  return guard([&] {
    auto& sess = need(s, "session").s;
    const itera_run_options o = read_run_options(options);
    single_stream_options opt;
    opt.requests = o.requests;
    opt.targets = {o.ttft_target_s, o.tpot_target_s, o.e2e_target_s};
    opt.warmup_requests = o.warmup_requests;
    opt.axes = read_axes(o.axis_names, o.axis_values, o.axis_count);
    opt.stream = o.stream;
    check_summary(run_single_stream(sess, opt, wrap(cb, user)));
  });
}

}  // extern "C"
