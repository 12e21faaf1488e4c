#include <iostream>
#include <memory>

#include "apps/itera/commands.hpp"
#include "itera/analysis/compare.hpp"
#include "itera/core/errors.hpp"

namespace itera::cli {

command_fn add_compare(CLI::App& app) {
  struct opts {
    std::string a, b, format = "md";
    std::vector<std::string> allow;
  };
  auto o = std::make_shared<opts>();
  auto* cmd = app.add_subcommand("compare", "Compare two runs made with a common recipe (the recipe gate)");
  cmd->add_option("a", o->a, "baseline results file")->required();
  cmd->add_option("b", o->b, "results file to compare with the baseline")->required();
  cmd->add_option("--allow", o->allow, "compare even though this recipe field differs (exact, or a prefix ending in *)");
  cmd->add_option("--format", o->format, "md or json")->check(CLI::IsMember({"md", "json"}));
  return [o]() {
    const auto a = read_results(o->a);
    const auto b = read_results(o->b);
    const auto c = compare_results(a, b, o->allow);
    if (o->format == "json") write_comparison_json(std::cout, c);
    else write_comparison_markdown(std::cout, c, a, b);
    return static_cast<int>(c.refused ? exit_code::compare_refused : exit_code::ok);
  };
}

}  // namespace itera::cli
