#pragma once
// One file per subcommand; each adds itself to the CLI11 app and returns the exit code its run
// produced. Commands print results to stdout and everything else to stderr.
#include <CLI/CLI.hpp>

#include <functional>
#include <string>

#include "itera/core/runner.hpp"

namespace itera::cli {

using command_fn = std::function<int()>;

command_fn add_env(CLI::App& app);
command_fn add_list(CLI::App& app);
command_fn add_bench(CLI::App& app, const std::string& command_line);
command_fn add_run(CLI::App& app, const std::string& command_line);
command_fn add_report(CLI::App& app);
command_fn add_compare(CLI::App& app);
command_fn add_fit(CLI::App& app, const std::string& command_line);
command_fn add_project(CLI::App& app);
command_fn add_cost(CLI::App& app);
command_fn add_plan(CLI::App& app);
command_fn add_data(CLI::App& app);
command_fn add_watch(CLI::App& app, const std::string& command_line);
command_fn add_doctor(CLI::App& app, const std::string& command_line);

// Timing flags shared by bench and run (stopping rule, warm-up, verification, --quiet).
void add_run_options(CLI::App& cmd, run_options& options);

// "NAME=V1,V2" -> {NAME, "V1,V2"}; usage_error when there is no '='.
std::pair<std::string, std::string> split_axis_flag(const std::string& flag);

}  // namespace itera::cli
