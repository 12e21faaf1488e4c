#pragma once
// Running workload cases in tests: short, quiet run options, and one case of a workload by its axis
// overrides on a backend.
#include <string>

#include <gtest/gtest.h>

#include "itera/core/backend.hpp"
#include "itera/core/runner.hpp"
#include "itera/core/workload.hpp"

namespace itera::test {

// One warm-up, at least 3 samples, at most 0.2 s of sampling per case, no progress lines.
inline run_options quick_run_options() {
  run_options o;
  o.warmup_min_count = 1;
  o.warmup_min_time_s = 0;
  o.stop.min_samples = 3;
  o.stop.min_time_s = 0;
  o.stop.max_time_s = 0.2;
  o.quiet = true;
  return o;
}

// `base` with each of `extra` replacing the axis of the same name, or appended.
inline axis_overrides merged(axis_overrides base, const axis_overrides& extra) {
  for (const auto& e : extra) {
    bool replaced = false;
    for (auto& b : base)
      if (b.first == e.first) b.second = e.second, replaced = true;
    if (!replaced) base.push_back(e);
  }
  return base;
}

// The single case of `w` that `overrides` give (a test failure when they give several), run on
// `backend` with quick_run_options().
inline case_record run_single_case(const workload_decl& w, const axis_overrides& overrides,
                                   const std::string& backend = "cpu") {
  const auto cases = expand_cases(w, overrides);
  EXPECT_EQ(cases.size(), 1u);
  auto dev = open_backend(backend);
  runner r(*dev, quick_run_options(), nullptr);
  return r.run_one(w, cases.at(0));
}

}  // namespace itera::test
