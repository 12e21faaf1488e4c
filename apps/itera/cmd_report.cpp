#include <iostream>
#include <memory>

#include "apps/itera/commands.hpp"
#include "itera/core/errors.hpp"
#include "itera/report/writers.hpp"

namespace itera::cli {

command_fn add_report(CLI::App& app) {
  struct opts {
    std::vector<std::string> files;
    std::string format = "md";
  };
  auto o = std::make_shared<opts>();
  auto* cmd = app.add_subcommand("report", "Re-render saved results");
  cmd->add_option("files", o->files, "results files (JSON lines) written by bench or run")->required();
  cmd->add_option("--format", o->format, "md, csv or json")->check(CLI::IsMember({"md", "csv", "json"}));
  return [o]() {
    std::vector<result_set> sets;
    for (const auto& f : o->files) {
      sets.push_back(read_results(f));
      if (sets.back().truncated)
        progress::log("itera: " + f + " ends with a cut-short line (a run killed while writing); the cases before it are shown");
    }
    write_results(std::cout, parse_output_format(o->format), sets);
    return static_cast<int>(exit_code::ok);
  };
}

}  // namespace itera::cli
