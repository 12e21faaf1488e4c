// itera: measure what a GPU application really does. Subcommands live one per file beside this.
#include <cstdio>
#include <exception>
#include <iostream>

#include <fmt/format.h>

#include "apps/itera/commands.hpp"
#include "itera/core/build_info.hpp"
#include "itera/core/errors.hpp"

int main(int argc, char** argv) {
  using itera::exit_code;
  std::string command_line;
  for (int i = 0; i < argc; ++i) command_line += (i ? " " : "") + std::string(argv[i]);

  CLI::App app{"itera: measure what a GPU application really does (docs/cli.md)", "itera"};
  app.set_version_flag("--version", fmt::format("itera {} ({})", itera::this_build().version, itera::this_build().git_commit));
  app.require_subcommand(1);
  std::vector<std::pair<CLI::App*, itera::cli::command_fn>> commands;
  const auto add = [&](itera::cli::command_fn fn) { commands.emplace_back(app.get_subcommands({}).back(), std::move(fn)); };
  add(itera::cli::add_env(app));
  add(itera::cli::add_list(app));
  add(itera::cli::add_bench(app, command_line));
  add(itera::cli::add_run(app, command_line));
  add(itera::cli::add_report(app));
  add(itera::cli::add_compare(app));
  add(itera::cli::add_fit(app, command_line));
  add(itera::cli::add_project(app));
  add(itera::cli::add_cost(app));
  add(itera::cli::add_plan(app));
  add(itera::cli::add_data(app));
  add(itera::cli::add_watch(app, command_line));
  add(itera::cli::add_doctor(app, command_line));

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);  // prints the parser's message on stderr
    return static_cast<int>(exit_code::usage);
  }

  try {
    for (auto& [sub, fn] : commands) {
      if (!sub->parsed()) continue;
      const int code = fn();
      std::cout.flush();
      if (!std::cout) {
        std::fprintf(stderr, "itera: error: writing to standard output failed (disk full or closed pipe?)\n");
        return static_cast<int>(exit_code::internal_error);
      }
      return code;
    }
    return static_cast<int>(exit_code::usage);
  } catch (const itera::usage_error& e) {
    std::fprintf(stderr, "itera: error: %s\n", e.what());
    return static_cast<int>(exit_code::usage);
  } catch (const itera::input_error& e) {
    std::fprintf(stderr, "itera: error: %s\n", e.what());
    return static_cast<int>(exit_code::bad_input);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "itera: internal error: %s\n", e.what());
    return static_cast<int>(exit_code::internal_error);
  }
}
