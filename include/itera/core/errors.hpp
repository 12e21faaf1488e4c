#pragma once
#include <stdexcept>
#include <string>

namespace itera {

// Process exit codes (docs/cli.md). Library code never exits; front ends map errors to these.
enum class exit_code : int {
  ok = 0,
  internal_error = 1,    // a bug or an unexpected system failure
  usage = 2,             // bad command line: unknown workload, axis, format, malformed value
  compare_refused = 3,   // `itera compare`: recipes differ in fields not named with --allow
  cases_failed = 4,      // the run finished but at least one case failed
  bad_input = 5,         // an input file is unreadable, truncated or not an itera result
};

// The user asked for something that cannot be: names what was wrong and how to fix it.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// An input file (results, data) is unreadable, truncated or foreign.
struct input_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Thrown by a workload when a case cannot run here (format the card lacks, does not fit in memory).
// The runner records the case as skipped with this reason; it is not a failure.
struct case_skipped : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace itera
