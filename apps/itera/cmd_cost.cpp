#include <iostream>
#include <memory>

#include "apps/itera/commands.hpp"
#include "itera/analysis/cost.hpp"
#include "itera/analysis/fit.hpp"
#include "itera/core/errors.hpp"

namespace itera::cli {

command_fn add_cost(CLI::App& app) {
  struct opts {
    std::vector<std::string> files;
    std::string prices, format = "md";
    cost_options cost;
  };
  auto o = std::make_shared<opts>();
  auto* cmd = app.add_subcommand("cost", "Cost per million output tokens per card, measured or projected, from a price file");
  cmd->add_option("results", o->files, "results files (JSON lines) sharing one recipe")->required();
  cmd->add_option("--prices", o->prices, "price file: per GPU-hour (docs/analysis.md; data/prices.example.json)")->required();
  cmd->add_option("--card", o->cost.cards, "catalogue card id to show (repeatable; default: the priced cards and the measured one)");
  cmd->add_option("--format", o->format, "md or json")->check(CLI::IsMember({"md", "json"}));
  return [o]() {
    const auto& cat = catalogue::builtin();
    for (const auto& id : o->cost.cards)
      if (!cat.find(id)) throw usage_error("card '" + id + "' is not in the catalogue");
    std::vector<result_set> sets;
    for (const auto& f : o->files) sets.push_back(read_results(f));
    check_common_recipe(sets);
    const auto prices = read_prices(o->prices, cat);
    const auto rep = analyse_cost(sets, cat, prices, o->cost);
    if (o->format == "json") write_cost_json(std::cout, rep);
    else write_cost_markdown(std::cout, rep);
    return static_cast<int>(exit_code::ok);
  };
}

}  // namespace itera::cli
