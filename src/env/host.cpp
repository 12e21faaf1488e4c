// The host half of the fingerprint, from /proc, /etc/os-release and uname. The hostname is left out
// on purpose (R18: reports hold metrics, not who ran them).
#include <sched.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include "itera/env/fingerprint.hpp"

namespace itera {

namespace {

std::string trim(std::string s) {
  const auto first = s.find_first_not_of(" \t\"'");
  if (first == std::string::npos) return {};
  const auto last = s.find_last_not_of(" \t\"'\r\n");
  return s.substr(first, last - first + 1);
}

// "key : value" lines (/proc/cpuinfo, /proc/meminfo) and "KEY=value" lines (/etc/os-release).
bool split_line(const std::string& line, char sep, std::string& key, std::string& value) {
  const auto pos = line.find(sep);
  if (pos == std::string::npos) return false;
  key = trim(line.substr(0, pos));
  value = trim(line.substr(pos + 1));
  return true;
}

}  // namespace

ojson host_fingerprint() {
  ojson h;
  struct utsname uts {};
  const bool have_uname = uname(&uts) == 0;

  std::string cpu_model;
  std::set<std::string> sockets;
  if (std::ifstream in("/proc/cpuinfo"); in) {
    std::string line, key, value;
    while (std::getline(in, line)) {
      if (!split_line(line, ':', key, value)) continue;
      if (key == "model name" && cpu_model.empty()) cpu_model = value;
      if (key == "physical id") sockets.insert(value);
    }
  }
  // Arm kernels often print no "model name": the architecture is the honest fallback.
  if (cpu_model.empty()) cpu_model = have_uname ? uts.machine : "unknown";
  h["cpu_model"] = cpu_model;
  if (have_uname) h["arch"] = uts.machine;

  h["logical_cores"] = std::thread::hardware_concurrency();
  if (const long online = sysconf(_SC_NPROCESSORS_ONLN); online > 0) h["online_cpus"] = online;
  // What this process may run on (taskset, cgroup cpusets in containers): the cores a cpu-backend
  // run really gets.
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) == 0) h["cpus_allowed"] = CPU_COUNT(&allowed);
  if (!sockets.empty()) h["sockets"] = sockets.size();

  if (std::ifstream in("/proc/meminfo"); in) {
    std::string line, key, value;
    while (std::getline(in, line)) {
      if (!split_line(line, ':', key, value)) continue;
      if (key != "MemTotal" && key != "MemAvailable") continue;
      const unsigned long long kib = std::strtoull(value.c_str(), nullptr, 10);  // "131072000 kB"
      h[key == "MemTotal" ? "memory_total_bytes" : "memory_available_bytes"] = kib * 1024ULL;
    }
  }

  std::string os;
  for (const char* path : {"/etc/os-release", "/usr/lib/os-release"}) {
    std::ifstream in(path);
    std::string line, key, value;
    while (in && std::getline(in, line)) {
      if (split_line(line, '=', key, value) && key == "PRETTY_NAME") os = value;
    }
    if (!os.empty()) break;
  }
  h["os"] = os.empty() ? (have_uname ? uts.sysname : "unknown") : os;
  if (have_uname) h["kernel"] = uts.release;
  return h;
}

}  // namespace itera
