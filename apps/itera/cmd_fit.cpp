#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "apps/itera/commands.hpp"
#include "itera/analysis/fit.hpp"
#include "itera/core/errors.hpp"

namespace itera::cli {

command_fn add_fit(CLI::App& app) {
  struct opts {
    std::vector<std::string> files;
    std::string format = "md";
    fit_options fit;
  };
  auto o = std::make_shared<opts>();
  auto* cmd = app.add_subcommand("fit", "Fit a memory model to measured peaks and predict the largest batch and context per card");
  cmd->add_option("results", o->files, "results files (JSON lines) sharing one recipe")->required();
  cmd->add_option("--workload", o->fit.workload, "workload whose cases to fit")->capture_default_str();
  cmd->add_option("--card", o->fit.cards, "catalogue card id to predict for (repeatable; default: every card)");
  cmd->add_option("--reserve", o->fit.reserve_fraction, "fraction of each card's nominal memory held back")
      ->capture_default_str();
  cmd->add_option("--format", o->format, "md or json")->check(CLI::IsMember({"md", "json"}));
  return [o]() {
    std::vector<result_set> sets;
    for (const auto& f : o->files) sets.push_back(read_results(f));
    check_common_recipe(sets);
    const auto reports = analyse_memory(sets, catalogue::builtin(), o->fit);
    bool any = false;
    std::string why;
    for (const auto& r : reports) {
      any = any || r.fitted;
      if (!r.fitted) why += fmt::format("\n  {} {}: {}", r.workload, r.group, r.why_not);
    }
    if (!any) throw input_error("no group of points could be fitted:" + why);
    if (o->format == "json") write_fit_json(std::cout, reports);
    else write_fit_markdown(std::cout, reports, sets);
    return static_cast<int>(exit_code::ok);
  };
}

}  // namespace itera::cli
