#pragma once
// Helpers for the user API's tests: a scratch folder per test, host-only sessions, lookups in records.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "itera/core/result.hpp"
#include "itera/core/timer.hpp"
#include "itera/user/session.hpp"

namespace itera::user::test {

inline std::filesystem::path scratch(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  auto dir = std::filesystem::temp_directory_path() /
             (std::string("itera-user-") + info->test_suite_name() + "-" + info->name() + "-" +
              std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / name;
  std::filesystem::remove(path);
  return path;
}

inline session_options host_options(const std::string& results_path = "") {
  session_options o;
  o.name = "app";
  o.results_path = results_path;
  o.device = device_none;
  return o;
}

// Busy host work of about `us` microseconds on the steady clock (sleeping would overshoot more).
inline void busy_us(double us) {
  const auto end = host_now_ns() + static_cast<std::int64_t>(us * 1e3);
  while (host_now_ns() < end) {
  }
}

inline const stage_record* stage_of(const case_record& r, const std::string& path) {
  for (const auto& s : r.stages)
    if (s.path == path) return &s;
  return nullptr;
}

inline double metric_of(const case_record& r, const std::string& name) {
  const metric* m = r.find_metric(name);
  return m ? m->value : -1.0;
}

inline std::string detail_of(const case_record& r, const std::string& key) {
  const auto it = r.details.find(key);
  return it == r.details.end() ? std::string() : it->second;
}

inline std::string axis_of(const case_record& r, const std::string& name) {
  for (const auto& [k, v] : r.axes)
    if (k == name) return v;
  return {};
}

}  // namespace itera::user::test
