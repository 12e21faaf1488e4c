#include <iostream>
#include <memory>

#include "apps/itera/commands.hpp"
#include "itera/analysis/fit.hpp"
#include "itera/analysis/projection.hpp"
#include "itera/core/errors.hpp"

namespace itera::cli {

command_fn add_project(CLI::App& app) {
  struct opts {
    std::string file, format = "md", validate_against;
    projection_options proj;
  };
  auto o = std::make_shared<opts>();
  auto* cmd = app.add_subcommand("project", "Project each stage's measured time to other catalogue cards (roofline)");
  cmd->add_option("results", o->file, "results file (JSON lines) from a GPU run")->required();
  cmd->add_option("--card", o->proj.cards, "catalogue card id to project to (repeatable; default: every card)");
  cmd->add_option("--source-card", o->proj.source_card, "catalogue id of the card the run was made on (default: the file's match)");
  cmd->add_option("--validate-against", o->validate_against,
                  "results of the same cases measured on another card (or the full card, when the first file is a "
                  "run limited with ITERA_CUDA_SM_LIMIT): project onto that card and report the error")
      ->excludes(cmd->get_option("--card"))
      ->excludes(cmd->get_option("--source-card"));
  cmd->add_option("--format", o->format, "md or json")->check(CLI::IsMember({"md", "json"}));
  return [o]() {
    const auto set = read_results(o->file);
    const auto& cat = catalogue::builtin();
    if (!o->validate_against.empty()) {
      const auto target = read_results(o->validate_against);
      check_common_recipe({set, target});
      const auto v = validate_projection(set, target, cat);
      if (o->format == "json") write_validation_json(std::cout, v);
      else write_validation_markdown(std::cout, v);
      return static_cast<int>(exit_code::ok);
    }
    const auto rep = project_results(set, cat, o->proj);
    if (o->format == "json") write_projection_json(std::cout, rep);
    else write_projection_markdown(std::cout, rep, cat);
    return static_cast<int>(exit_code::ok);
  };
}

}  // namespace itera::cli
