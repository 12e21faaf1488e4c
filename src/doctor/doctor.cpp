// `itera doctor`: items, probes, verdicts, the table and the results file (docs/doctor.md).
#include "itera/doctor/doctor.hpp"

#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <limits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include <fmt/format.h>

#include "itera/core/errors.hpp"
#include "itera/core/runner.hpp"
#include "itera/core/stats.hpp"
#include "itera/env/fingerprint.hpp"
#include "itera/env/versions.hpp"
#include "itera/watch/context.hpp"
#include "src/env/nvml_api.hpp"
#include "src/report/text_format.hpp"

namespace itera::doctor {

const char* to_string(verdict v) {
  switch (v) {
    case verdict::works: return "works";
    case verdict::fails: return "fails";
    case verdict::absent: return "absent";
    case verdict::skipped: return "skipped";
  }
  return "fails";
}

namespace {

constexpr const char* result_mark = "ITERA_DOCTOR_RESULT ";

std::optional<verdict> verdict_from_string(const std::string& s) {
  for (verdict v : {verdict::works, verdict::fails, verdict::absent, verdict::skipped})
    if (s == to_string(v)) return v;
  return std::nullopt;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string last_line(const std::string& text) {
  std::istringstream in(text);
  std::string line, last;
  while (std::getline(in, line)) {
    const auto first = line.find_first_not_of(" \t\r");
    if (first != std::string::npos) last = line.substr(first);
  }
  return last;
}

// Python's faulthandler (probes run with -X faulthandler) prints "Fatal Python error: ..." and the
// stacks, innermost frame first, on a crash and on the SIGABRT a timeout sends. What to quote: that
// frame and the last line printed before it; without such a dump, the last line of stderr.
std::string stderr_context(const std::string& err) {
  const auto fatal = err.find("Fatal Python error");
  if (fatal == std::string::npos) {
    const std::string tail = last_line(err);
    return tail.empty() ? "" : "; its stderr ended with: " + tail;
  }
  std::string frame;
  std::istringstream dump(err.substr(fatal));
  std::string line;
  while (std::getline(dump, line)) {
    const auto first = line.find_first_not_of(" \t");
    if (first != std::string::npos && line.compare(first, 6, "File \"") == 0) {
      frame = line.substr(first);
      break;
    }
  }
  const std::string before = last_line(err.substr(0, fatal));
  std::string out;
  if (!frame.empty()) out += "; innermost Python frame: " + frame;
  if (!before.empty()) out += "; its last output before: " + before;
  return out;
}

}  // namespace

const std::vector<std::string>& item_names() {
  static const std::vector<std::string> names = {"python", "torch", "driver", "arch", "bf16", "fp8",
                                                 "flash-attn", "xformers", "bitsandbytes", "triton",
                                                 "transformer-engine"};
  return names;
}

std::vector<std::string> parse_required(const std::vector<std::string>& names) {
  std::vector<std::string> out;
  const auto add = [&out](const std::string& n) {
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  };
  for (const auto& raw : names) {
    std::string n = lower(raw);
    std::replace(n.begin(), n.end(), '_', '-');
    if (n.empty()) continue;
    if (n == "all") {
      for (const auto& i : item_names()) add(i);
      continue;
    }
    if (n == "flash-attention" || n == "flashattn") n = "flash-attn";
    if (n == "te" || n == "transformerengine") n = "transformer-engine";
    if (n == "bnb") n = "bitsandbytes";
    if (std::find(item_names().begin(), item_names().end(), n) == item_names().end())
      throw usage_error(fmt::format("--require '{}': no such item; items are {} (or all)", raw,
                                    report::joined(item_names(), ", ")));
    add(n);
  }
  return out;
}

item_result parse_probe_output(const std::string& item, const proc::captured& run, double timeout_s) {
  item_result r;
  r.item = item;
  r.seconds = run.seconds;
  // The last result line wins: a library may print anything before it.
  std::istringstream in(run.out);
  std::string line, result_line;
  while (std::getline(in, line))
    if (line.rfind(result_mark, 0) == 0) result_line = line.substr(std::string(result_mark).size());
  if (run.timed_out) {
    r.v = verdict::fails;
    r.detail = fmt::format("timed out after {} s (hangs, or needs more than --timeout){}", report::sig3(timeout_s),
                           stderr_context(run.err));
    return r;
  }
  if (run.exit.how == proc::exit_info::kind::not_started) {
    r.v = verdict::absent;
    r.detail = run.exit.error;
    return r;
  }
  if (result_line.empty()) {
    r.v = verdict::fails;
    r.detail = run.exit.how == proc::exit_info::kind::signalled
                   ? fmt::format("crashed: {}", run.exit.describe())
                   : fmt::format("the probe {} without a result", run.exit.describe());
    r.detail += stderr_context(run.err);
    return r;
  }
  ojson j;
  try {
    j = ojson::parse(result_line);
  } catch (const std::exception& e) {
    r.v = verdict::fails;
    r.detail = fmt::format("the probe's result line is not JSON ({})", e.what());
    return r;
  }
  const auto v = verdict_from_string(j.value("verdict", std::string()));
  r.v = v.value_or(verdict::fails);
  r.version = j.value("version", std::string());
  r.detail = j.value("detail", std::string());
  if (!v) r.detail = "the probe gave an unknown verdict: " + r.detail;
  if (j.contains("facts") && j["facts"].is_object()) r.facts = j["facts"];
  if (j.contains("check") && j["check"].is_object()) {
    const ojson& c = j["check"];
    r.check.checked = true;
    r.check.passed = c.value("passed", false);
    r.check.error = c.contains("error") && c["error"].is_number() ? c["error"].get<double>()
                                                                  : std::numeric_limits<double>::infinity();
    r.check.tolerance = c.value("tolerance", 0.0);
    r.check.method = c.value("method", std::string());
  }
  // A probe that reported a result and then died (a crash at interpreter exit) still says so.
  if (run.exit.how == proc::exit_info::kind::signalled) {
    r.v = verdict::fails;
    r.detail = fmt::format("{}; then the probe {}", r.detail, run.exit.describe());
  }
  return r;
}

driver_facts read_driver() {
  driver_facts d;
  const nvml::library& nv = nvml::library::get();
  if (!nv.available) {
    d.nvml_reason = nv.reason;
  } else {
    char text[nvml::driver_version_buffer] = {};
    if (nv.system_get_driver_version != nullptr &&
        nv.system_get_driver_version(text, nvml::driver_version_buffer) == nvml::success)
      d.driver_version = std::string(text);
    int v = 0;
    if (nv.system_get_cuda_driver_version_v2 != nullptr && nv.system_get_cuda_driver_version_v2(&v) == nvml::success)
      d.nvml_cuda_version = v;
  }
  const char* env = std::getenv("ITERA_CUDA_LIBRARY");
  d.libcuda_path = env != nullptr && env[0] != '\0' ? env : "libcuda.so.1";
  dlerror();
  // The handle stays open: the driver is not unloaded from a running process.
  void* h = dlopen(d.libcuda_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* e = dlerror();
    d.libcuda_reason = fmt::format("cannot load {}: {}", d.libcuda_path, e != nullptr ? e : "unknown dlopen error");
    return d;
  }
  using version_fn = int (*)(int*);
  using init_fn = int (*)(unsigned);
  using name_fn = int (*)(int, const char**);
  if (auto get = reinterpret_cast<version_fn>(dlsym(h, "cuDriverGetVersion")); get != nullptr) {
    int v = 0;
    if (get(&v) == 0) d.libcuda_version = v;
  } else {
    d.libcuda_reason = d.libcuda_path + " has no cuDriverGetVersion";
  }
  if (auto init = reinterpret_cast<init_fn>(dlsym(h, "cuInit")); init != nullptr) {
    d.cuinit_result = init(0);
    if (*d.cuinit_result != 0) {
      const char* name = nullptr;
      auto get_name = reinterpret_cast<name_fn>(dlsym(h, "cuGetErrorName"));
      d.cuinit_error = get_name != nullptr && get_name(*d.cuinit_result, &name) == 0 && name != nullptr
                           ? std::string(name)
                           : fmt::format("CUresult {}", *d.cuinit_result);
    }
  }
  return d;
}

namespace {

// "12.4" -> 12040; nullopt when unreadable.
std::optional<int> cuda_version_number(const std::string& s) {
  int major = 0, minor = 0;
  char dot = 0;
  std::istringstream in(s);
  if (!(in >> major >> dot >> minor) || dot != '.') return std::nullopt;
  return major * 1000 + minor * 10;
}

}  // namespace

item_result driver_verdict(const driver_facts& d, const std::string& runtime_cuda, const std::string& why_unknown) {
  item_result r;
  r.item = "driver";
  const std::optional<int> supported = d.libcuda_version ? d.libcuda_version : d.nvml_cuda_version;
  const std::string source = d.libcuda_version ? "cuDriverGetVersion (" + d.libcuda_path + ")"
                             : d.nvml_cuda_version ? std::string("nvmlSystemGetCudaDriverVersion_v2")
                                                   : std::string();
  if (d.driver_version) r.facts["driver_version"] = *d.driver_version;
  if (supported) {
    r.facts["cuda_supported"] = cuda_version_string(*supported);
    r.facts["cuda_supported_from"] = source;
  }
  if (d.nvml_cuda_version) r.facts["nvml_cuda_version"] = cuda_version_string(*d.nvml_cuda_version);
  if (!d.nvml_reason.empty()) r.facts["nvml"] = d.nvml_reason;
  if (!d.libcuda_reason.empty()) r.facts["libcuda"] = d.libcuda_reason;
  if (d.cuinit_result) r.facts["cuInit"] = *d.cuinit_result == 0 ? std::string("CUDA_SUCCESS") : d.cuinit_error;
  if (!runtime_cuda.empty()) r.facts["runtime_cuda"] = runtime_cuda;
  r.version = fmt::format("{}{}", d.driver_version.value_or(""),
                          supported ? fmt::format("{}CUDA {}", d.driver_version ? " / " : "", cuda_version_string(*supported))
                                    : std::string());

  if (!d.driver_version && !supported) {
    r.v = verdict::absent;
    r.detail = fmt::format("no NVIDIA driver found: {}; {}", d.nvml_reason.empty() ? "NVML answered nothing" : d.nvml_reason,
                           d.libcuda_reason.empty() ? "libcuda gave no version" : d.libcuda_reason);
    return r;
  }
  if (d.cuinit_result && *d.cuinit_result != 0) {
    r.v = verdict::fails;
    r.detail = fmt::format("cuInit(0) failed with {}: the driver is installed but CUDA cannot use a GPU", d.cuinit_error);
    return r;
  }
  if (!supported) {
    r.v = verdict::fails;
    r.detail = fmt::format("the driver does not say which CUDA version it supports ({})",
                           d.libcuda_reason.empty() ? "nvmlSystemGetCudaDriverVersion_v2 failed" : d.libcuda_reason);
    return r;
  }
  const std::string tried = d.cuinit_result ? "cuInit succeeded; " : "";
  const std::optional<int> runtime = runtime_cuda.empty() ? std::nullopt : cuda_version_number(runtime_cuda);
  if (!runtime) {
    r.v = verdict::works;
    r.detail = fmt::format("{}supports CUDA {}; no CUDA runtime to compare with ({})", tried,
                           cuda_version_string(*supported),
                           runtime_cuda.empty() ? why_unknown : "torch reports CUDA '" + runtime_cuda + "'");
    return r;
  }
  if (*supported >= *runtime) {
    r.v = verdict::works;
    r.detail = fmt::format("{}supports CUDA {}, torch's runtime is CUDA {}", tried, cuda_version_string(*supported),
                           runtime_cuda);
  } else if (*supported / 1000 == *runtime / 1000) {
    r.v = verdict::works;
    r.detail = fmt::format("{}supports CUDA {}, older than torch's runtime {}: runs through minor version "
                           "compatibility, but kernels shipped only as newer PTX cannot be compiled by this driver",
                           tried, cuda_version_string(*supported), runtime_cuda);
  } else {
    r.v = verdict::fails;
    r.detail = fmt::format("torch's runtime is CUDA {} but this driver supports CUDA {} only: update the driver, or "
                           "install a torch built for CUDA {}.x",
                           runtime_cuda, cuda_version_string(*supported), *supported / 1000);
  }
  return r;
}

std::vector<std::string> not_working(const std::vector<item_result>& results, const std::vector<std::string>& required) {
  std::vector<std::string> out;
  for (const auto& name : required) {
    const auto it = std::find_if(results.begin(), results.end(), [&](const item_result& r) { return r.item == name; });
    if (it == results.end() || it->v != verdict::works) out.push_back(name);
  }
  return out;
}

void write_markdown(std::ostream& out, const std::vector<item_result>& results, const std::vector<std::string>& required,
                    const std::string& heading) {
  std::ostringstream doc;
  doc << "# itera doctor\n\n" << heading << "\n";
  report::md_table t;
  t.column("item", false);
  t.column("verdict", false);
  t.column("version", false);
  t.column("time", true);
  t.column("detail", false);
  for (const auto& r : results) {
    const bool is_required = std::find(required.begin(), required.end(), r.item) != required.end();
    t.rows.push_back({is_required ? r.item + " (required)" : r.item, to_string(r.v), r.version.empty() ? "-" : r.version,
                      r.seconds > 0 ? report::human_time_ns(r.seconds * 1e9) : "-", r.detail});
  }
  t.write(doc);
  doc << '\n';
  if (!required.empty()) {
    const auto missing = not_working(results, required);
    if (missing.empty()) {
      doc << fmt::format("Required: {}: all work.\n\n", report::joined(required, ", "));
    } else {
      std::vector<std::string> why;
      for (const auto& name : missing) {
        const auto it = std::find_if(results.begin(), results.end(), [&](const item_result& r) { return r.item == name; });
        why.push_back(it == results.end() ? name + " (not tried)" : fmt::format("{} ({})", name, to_string(it->v)));
      }
      doc << fmt::format("Required but not working: {}.\n\n", report::joined(why, ", "));
    }
  }
  report::write_document(out, doc.str());
}

case_record to_case(const item_result& r, const std::string& backend) {
  case_record c;
  c.workload = "doctor";
  c.workload_version = workload_version;
  c.backend = backend;
  c.axes = {{"item", r.item}};
  c.status = r.v == verdict::works ? case_status::ok : r.v == verdict::fails ? case_status::failed : case_status::skipped;
  if (r.v != verdict::works) c.message = fmt::format("{}: {}", to_string(r.v), r.detail);
  c.details["verdict"] = to_string(r.v);
  c.details["detail"] = r.detail;
  if (!r.version.empty()) c.details["version"] = r.version;
  for (const auto& [key, value] : r.facts.items())
    c.details["fact." + key] = value.is_string() ? value.get<std::string>() : value.dump();
  c.check = r.check;
  if (r.seconds > 0) {
    c.host_ns = {r.seconds * 1e9};
    if (c.status == case_status::ok) c.host_stats = summarize(c.host_ns);
  }
  return c;
}

namespace {

// The probe program in a private temporary folder for the length of the run (triton reads a
// kernel's source from its file, so the probes cannot be passed with -c).
class probe_file {
 public:
  probe_file() {
    namespace fs = std::filesystem;
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = (fs::path(tmp != nullptr && tmp[0] != '\0' ? tmp : "/tmp") / "itera-doctor-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr)
      throw std::runtime_error(fmt::format("cannot create a temporary folder '{}': {}", pattern, std::strerror(errno)));
    m_dir = pattern;
    m_path = (fs::path(m_dir) / "itera_doctor_probes.py").string();
    std::ofstream f(m_path);
    // Three lines first, so line numbers in a traceback are those of src/doctor/probes.py.
    f << "# itera doctor's probes, written from the binary (src/doctor/probes.py)\n\n\n" << probes_source();
    f.flush();
    if (!f) throw std::runtime_error(fmt::format("writing '{}' failed (disk full?)", m_path));
  }
  ~probe_file() {
    std::error_code ec;
    std::filesystem::remove_all(m_dir, ec);
  }
  probe_file(const probe_file&) = delete;
  probe_file& operator=(const probe_file&) = delete;
  const std::string& path() const { return m_path; }

 private:
  std::string m_dir, m_path;
};

std::string strip_uuid(std::string u) {
  for (const char* prefix : {"GPU-", "MIG-"})
    if (u.rfind(prefix, 0) == 0) u.erase(0, 4);
  return lower(u);
}

// The NVML device torch's cuda:0 is, by UUID when torch says it; else the first device.
std::vector<unsigned> context_devices(const item_result* torch) {
  const ojson gpu = nvml_fingerprint();
  if (!gpu.value("available", false) || !gpu.contains("devices") || gpu["devices"].empty()) return {};
  if (torch != nullptr && torch->facts.contains("uuid") && torch->facts["uuid"].is_string()) {
    const std::string want = strip_uuid(torch->facts["uuid"].get<std::string>());
    for (const auto& d : gpu["devices"])
      if (d.contains("uuid") && strip_uuid(d["uuid"].get<std::string>()) == want) return {d["index"].get<unsigned>()};
  }
  return {0};
}

}  // namespace

int run(const options& o) {
  namespace fs = std::filesystem;
  const std::vector<std::string> required = parse_required(o.require);
  if (!(o.timeout_s > 0)) throw usage_error("--timeout must be a positive number of seconds");
  if (!o.out.empty() && fs::exists(o.out))
    throw usage_error(fmt::format("'{}' already exists; choose another --out so earlier results are kept", o.out));
  if (o.python_given) {
    const proc::captured c = proc::run_captured({o.python, "-c", "import sys"}, o.timeout_s);
    if (c.exit.how == proc::exit_info::kind::not_started)
      throw usage_error(fmt::format("--python: {}", c.exit.error));
    if (c.timed_out || c.exit.code != 0)
      throw usage_error(fmt::format("--python '{}' does not run Python (`{} -c 'import sys'` {}): give a Python 3 "
                                    "interpreter",
                                    o.python, o.python, c.timed_out ? "timed out" : c.exit.describe()));
  }

  std::unique_ptr<result_stream> results;
  if (!o.out.empty()) {
    if (const fs::path parent = fs::path(o.out).parent_path(); !parent.empty()) {
      std::error_code ec;
      fs::create_directories(parent, ec);
      if (ec) throw usage_error(fmt::format("cannot create the folder of --out '{}': {}", o.out, ec.message()));
    }
    results = std::make_unique<result_stream>(o.out);
  }
  std::string backend = "cpu";
  std::vector<item_result> done;
  std::size_t written = 0;
  bool context_written = false;
  const auto flush_cases = [&]() {
    if (!results || !context_written) return;
    for (; written < done.size(); ++written) results->write(to_case(done[written], backend));
  };
  const auto write_context = [&](const item_result* torch) {
    const auto devices = context_devices(torch);
    run_context c = observer_context(o.command_line, devices);
    backend = c.backend;
    if (results) results->write(c);
    context_written = true;
    flush_cases();
  };
  const auto finished = [&](item_result r) {
    progress::log(fmt::format("itera doctor: {}: {}", r.item, to_string(r.v)));
    done.push_back(std::move(r));
    flush_cases();
  };

  probe_file probes;
  const auto probe = [&](const std::string& item) {
    const proc::captured c = proc::run_captured({o.python, "-X", "faulthandler", probes.path(), item}, o.timeout_s,
                                                {{"PYTHONUNBUFFERED", "1"}, {"PYTHONDONTWRITEBYTECODE", "1"}}, SIGABRT);
    return parse_probe_output(item, c, o.timeout_s);
  };

  item_result python = probe("python");
  if (python.v == verdict::absent && !o.python_given)
    python.detail += " (give an interpreter with --python PATH)";
  const bool have_python = python.v == verdict::works;
  const std::string python_why = fmt::format("needs python, which {}: {}", python.v == verdict::absent ? "is absent" : "fails",
                                             python.detail);
  finished(python);

  const auto skipped = [&](const std::string& item) {
    item_result r;
    r.item = item;
    r.v = verdict::skipped;
    r.detail = python_why;
    return r;
  };

  item_result torch = have_python ? probe("torch") : skipped("torch");
  const item_result torch_copy = torch;
  finished(std::move(torch));
  write_context(&torch_copy);

  std::string runtime;
  if (torch_copy.facts.contains("cuda_runtime") && torch_copy.facts["cuda_runtime"].is_string())
    runtime = torch_copy.facts["cuda_runtime"].get<std::string>();
  finished(driver_verdict(read_driver(), runtime,
                          fmt::format("torch {}: {}", to_string(torch_copy.v), torch_copy.detail)));

  for (const auto& item : item_names()) {
    if (item == "python" || item == "torch" || item == "driver") continue;
    finished(have_python ? probe(item) : skipped(item));
  }

  std::vector<std::string> heading;
  heading.push_back(fmt::format("- python: {} {}", python.facts.value("executable", o.python),
                                python.version.empty() ? "(" + std::string(to_string(python.v)) + ")" : python.version));
  if (torch_copy.facts.contains("device_name"))
    heading.push_back(fmt::format("- card: {} ({}), as torch sees cuda:0", torch_copy.facts.value("device_name", std::string()),
                                  torch_copy.facts.value("sm", std::string())));
  if (!o.out.empty()) heading.push_back("- results: " + o.out);
  std::string head;
  for (const auto& h : heading) head += report::md_cell(h) + "\n";
  write_markdown(std::cout, done, required, head);

  const auto missing = not_working(done, required);
  if (!missing.empty()) {
    progress::log(fmt::format("itera doctor: required but not working: {}", report::joined(missing, ", ")));
    return static_cast<int>(exit_code::cases_failed);
  }
  return static_cast<int>(exit_code::ok);
}

}  // namespace itera::doctor
