#include <fmt/format.h>

#include "apps/itera/commands.hpp"
#include "itera/core/errors.hpp"

namespace itera::cli {

void add_run_options(CLI::App& cmd, run_options& o) {
  cmd.add_option("--warmup", o.warmup_min_count, "warm-up repetitions at least (not sampled)")->capture_default_str();
  cmd.add_option("--warmup-time", o.warmup_min_time_s, "warm-up seconds at least")->capture_default_str();
  cmd.add_option("--min-samples", o.stop.min_samples, "repetitions sampled at least")->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd.add_option("--max-samples", o.stop.max_samples, "repetitions sampled at most")->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd.add_option("--min-time", o.stop.min_time_s, "seconds of measurement before the noise target may stop a case")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd.add_option("--max-time", o.stop.max_time_s, "seconds of measurement at most per case")->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd.add_option("--noise", o.stop.noise_target,
                 "stop when the median's 95% confidence half-width is below this fraction of it")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd.add_flag("--no-verify", [&o](std::int64_t) { o.verify = false; }, "skip verification against the cpu reference");
  cmd.add_flag("-q,--quiet", o.quiet, "no progress line on stderr");
}

std::pair<std::string, std::string> split_axis_flag(const std::string& flag) {
  const auto eq = flag.find('=');
  if (eq == std::string::npos || eq == 0)
    throw usage_error(fmt::format("--axis '{}' has no NAME=VALUES form; write for example --axis M=1024,2048", flag));
  return {flag.substr(0, eq), flag.substr(eq + 1)};
}

}  // namespace itera::cli
