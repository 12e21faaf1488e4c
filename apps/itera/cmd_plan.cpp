#include <iostream>
#include <memory>

#include "apps/itera/commands.hpp"
#include "itera/analysis/fit.hpp"
#include "itera/analysis/plan.hpp"
#include "itera/core/errors.hpp"

namespace itera::cli {

command_fn add_plan(CLI::App& app) {
  struct opts {
    std::vector<std::string> files;
    std::string prices, format = "md";
    int days = 0;
    double target = 0;
    plan_options plan;
  };
  auto o = std::make_shared<opts>();
  auto* cmd = app.add_subcommand("plan", "Recommend card, quantity and rental duration, and print an order for the rental desk");
  cmd->add_option("results", o->files, "results files (JSON lines) sharing one recipe")->required();
  cmd->add_option("--prices", o->prices, "price file: per GPU-hour (docs/analysis.md; data/prices.example.json)")->required();
  auto* days = cmd->add_option("--days", o->days, "rental duration: 3, 7 or 30 (default: chosen, see docs/analysis.md)");
  cmd->add_option("--max-gpus", o->plan.max_gpus, "most GPUs to rent")->capture_default_str();
  auto* target = cmd->add_option("--target-rate,--target-tokens-per-s", o->target,
                                 "throughput to reach over all GPUs, in the group's unit: output tokens/s, images/s or "
                                 "steps/s (default: 1 GPU)");
  cmd->add_option("--group", o->plan.group, "k=v the workload group must contain (repeatable; default: the first end-to-end group)");
  cmd->add_option("--network", o->plan.network, "the desk's payment network id for the order")->capture_default_str();
  cmd->add_option("--format", o->format, "md or json")->check(CLI::IsMember({"md", "json"}));
  return [o, days, target]() {
    if (days->count()) o->plan.days = o->days;
    if (target->count()) o->plan.target_rate = o->target;
    const auto& cat = catalogue::builtin();
    std::vector<result_set> sets;
    for (const auto& f : o->files) sets.push_back(read_results(f));
    check_common_recipe(sets);
    const auto prices = read_prices(o->prices, cat);
    const auto p = make_plan(sets, cat, prices, o->plan);
    if (o->format == "json") write_plan_json(std::cout, p);
    else write_plan_markdown(std::cout, p);
    return static_cast<int>(exit_code::ok);
  };
}

}  // namespace itera::cli
