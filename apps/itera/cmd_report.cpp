#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "apps/itera/commands.hpp"
#include "itera/core/errors.hpp"
#include "itera/report/html.hpp"
#include "itera/report/writers.hpp"

namespace itera::cli {

command_fn add_report(CLI::App& app) {
  struct opts {
    std::vector<std::string> files;
    std::string format = "md";
    std::string out;
    std::string prices;
  };
  auto o = std::make_shared<opts>();
  auto* cmd = app.add_subcommand("report", "Re-render saved results");
  cmd->add_option("files", o->files, "results files (JSON lines) written by bench or run")->required();
  cmd->add_option("--format", o->format, "md, csv, json or html (one self-contained page with charts, docs/report.md)")
      ->check(CLI::IsMember({"md", "csv", "json", "html"}));
  cmd->add_option("--out", o->out, "write to this file instead of stdout (replaced if it exists; never one of the inputs)");
  cmd->add_option("--prices", o->prices,
                  "with --format html: price file per GPU-hour (data/prices.example.json) for the section "
                  "\"Cost per million tokens\" (docs/report.md)");
  return [o]() {
    check_report_prices_option(o->format, o->prices);
    std::vector<result_set> sets;
    for (const auto& f : o->files) {
      sets.push_back(read_results(f));
      if (sets.back().truncated)
        progress::log("itera: " + f + " ends with a cut-short line (a run killed while writing); the cases before it are shown");
    }
    html_cost cost;
    if (!o->prices.empty()) {
      cost = html_cost_of(sets, o->prices);
      if (!cost.report) progress::log("itera: no cost chart: " + cost.unavailable);
    }
    const auto render = [&](std::ostream& out) {
      if (o->format == "html") write_html(out, sets, cost);
      else write_results(out, parse_output_format(o->format), sets);
    };
    if (o->out.empty() || o->out == "-") {
      render(std::cout);
      return static_cast<int>(exit_code::ok);
    }
    std::error_code ec;
    for (const auto& f : o->files)
      if (std::filesystem::equivalent(f, o->out, ec))
        throw usage_error("itera report: --out " + o->out + " is one of the results files; results are never overwritten");
    // Written beside the target and renamed over it, so a failed write never leaves half a report.
    const std::string tmp = o->out + ".tmp";
    {
      std::ofstream file(tmp, std::ios::binary | std::ios::trunc);
      if (!file) throw usage_error("itera report: cannot write " + tmp + " (--out " + o->out + ")");
      render(file);
      file.flush();
      if (!file) {
        std::filesystem::remove(tmp, ec);
        throw std::runtime_error("itera report: writing " + o->out + " failed (disk full?)");
      }
    }
    std::filesystem::rename(tmp, o->out, ec);
    if (ec) {
      std::filesystem::remove(tmp, ec);
      throw usage_error("itera report: cannot write " + o->out + ": " + ec.message());
    }
    progress::log("itera: wrote " + o->out);
    return static_cast<int>(exit_code::ok);
  };
}

}  // namespace itera::cli
