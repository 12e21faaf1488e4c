#include <algorithm>
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "apps/itera/commands.hpp"
#include "itera/core/errors.hpp"
#include "itera/report/writers.hpp"
#include "itera/suite.hpp"

namespace itera::cli {

command_fn add_bench(CLI::App& app, const std::string& command_line) {
  struct opts {
    std::string workload, backend, out, format = "md";
    std::vector<std::string> axes;
    bool no_ceilings = false;
    run_options run;
  };
  auto o = std::make_shared<opts>();
  auto* cmd = app.add_subcommand("bench", "Run one workload over the product of its axes");
  cmd->add_option("workload", o->workload, "workload name (`itera list`)")->required();
  cmd->add_option("--backend", o->backend, "cuda or cpu (default: cuda when a GPU is usable)");
  cmd->add_option("-a,--axis", o->axes, "NAME=V1,V2 or NAME=FIRST-LAST*FACTOR (repeatable)");
  cmd->add_option("-o,--out", o->out, "also write JSON lines results to this file");
  cmd->add_option("--format", o->format, "stdout rendering: md, csv or json")->check(CLI::IsMember({"md", "csv", "json"}));
  cmd->add_flag("--no-ceilings", o->no_ceilings, "skip measuring the ceilings (no utilisation figures)");
  add_run_options(*cmd, o->run);
  return [o, command_line]() {
    validate(o->run);
    const auto& w = builtin_workloads().get(o->workload);
    axis_overrides overrides;
    for (const auto& a : o->axes) overrides.push_back(split_axis_flag(a));
    const auto cases = expand_cases(w, overrides);  // bad axes fail before any device work
    if (o->out == "-")
      throw usage_error("--out - would mix JSON lines into the rendered results on stdout; name a file, or use "
                        "--format json for JSON on stdout");

    auto dev = open_backend(o->backend.empty() ? default_backend_name() : o->backend);
    std::unique_ptr<result_stream> out;
    if (!o->out.empty()) out = std::make_unique<result_stream>(o->out);
    result_set set;
    set.source = o->out.empty() ? "(bench)" : o->out;
    set.context = make_context(*dev, command_line);
    if (out) out->write(set.context);

    runner r(*dev, o->run, out.get());
    if (!o->no_ceilings) {
      std::vector<std::string> formats;
      // The GEMM ceilings the cases compare with: gemm's formats, llm's weight formats.
      for (const auto& c : cases)
        for (const auto& [k, v] : c)
          if ((k == "format" || k == "weights") && std::find(formats.begin(), formats.end(), v) == formats.end())
            formats.push_back(v);
      progress::log(fmt::format("itera: measuring ceilings on {} ({})", dev->device_name(), dev->name()));
      measure_ceilings(r, formats);
    }
    set.ceilings = r.ceilings_in_order();
    set.cases = r.run(w, cases);
    write_results(std::cout, parse_output_format(o->format), {set});
    if (out) progress::log(fmt::format("itera: results in {}", out->path()));
    return static_cast<int>(r.failed_count() ? exit_code::cases_failed : exit_code::ok);
  };
}

}  // namespace itera::cli
