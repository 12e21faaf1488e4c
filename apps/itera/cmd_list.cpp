#include <iostream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "apps/itera/commands.hpp"
#include "itera/core/errors.hpp"

namespace itera::cli {

command_fn add_list(CLI::App& app) {
  auto format = std::make_shared<std::string>("md");
  auto* cmd = app.add_subcommand("list", "Workloads, their axes with defaults, and the backends available here");
  cmd->add_option("--format", *format, "md or json")->check(CLI::IsMember({"md", "json"}));
  return [format]() {
    const auto backends = available_backends();
    const auto& workloads = builtin_workloads().all();
    if (*format == "json") {
      ojson j = {{"backends", ojson::array()}, {"workloads", ojson::array()}};
      for (const auto& b : backends)
        j["backends"].push_back({{"name", b.name}, {"compiled", b.compiled}, {"usable", b.usable}, {"reason", b.reason}});
      for (const auto& w : workloads) {
        ojson axes = ojson::array();
        for (const auto& a : w.axes)
          axes.push_back({{"name", a.name},
                          {"kind", a.kind == axis_kind::integer ? "integer" : "string"},
                          {"default", a.defaults},
                          {"choices", a.choices},
                          {"help", a.help}});
        std::vector<std::string> impl;
        for (const auto& [name, fn] : w.backends) impl.push_back(name);
        j["workloads"].push_back(
            {{"name", w.name}, {"version", w.version}, {"summary", w.summary}, {"backends", impl}, {"axes", axes}});
      }
      std::cout << j.dump(2) << '\n';
      return static_cast<int>(exit_code::ok);
    }
    std::cout << "## Backends\n\n| backend | compiled | usable here | why not |\n| --- | --- | --- | --- |\n";
    for (const auto& b : backends)
      std::cout << fmt::format("| {} | {} | {} | {} |\n", b.name, b.compiled ? "yes" : "no", b.usable ? "yes" : "no",
                               b.reason);
    for (const auto& w : workloads) {
      std::vector<std::string> impl;
      for (const auto& [name, fn] : w.backends) impl.push_back(name);
      std::cout << fmt::format("\n## {} (version {}; backends: {})\n\n{}\n\n| axis | default | accepts | meaning |\n"
                               "| --- | --- | --- | --- |\n",
                               w.name, w.version, fmt::join(impl, ", "), w.summary);
      for (const auto& a : w.axes) {
        const std::string accepts = a.kind == axis_kind::integer
                                        ? fmt::format("integers {}..{}, lists, ranges", a.min_value, a.max_value)
                                        : fmt::format("{}", fmt::join(a.choices, ", "));
        std::cout << fmt::format("| {} | {} | {} | {} |\n", a.name, a.defaults, accepts, a.help);
      }
    }
    return static_cast<int>(exit_code::ok);
  };
}

}  // namespace itera::cli
