#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "apps/itera/commands.hpp"
#include "itera/core/errors.hpp"
#include "itera/env/fingerprint.hpp"
#include "itera/report/writers.hpp"
#include "itera/suite.hpp"

namespace itera::cli {

command_fn add_run(CLI::App& app, const std::string& command_line) {
  struct opts {
    std::string backend, out;
    run_options run;
  };
  auto o = std::make_shared<opts>();
  auto* cmd = app.add_subcommand("run", "The default suite (env, ceilings, transfer, gemm) at sizes chosen from the "
                                        "device; results and a summary into a folder");
  cmd->add_option("--backend", o->backend, "cuda or cpu (default: cuda when a GPU is usable)");
  cmd->add_option("-o,--out", o->out, "folder for results.jsonl, summary.md and env.json (default: results/run-<UTC time>)");
  add_run_options(*cmd, o->run);
  return [o, command_line]() {
    namespace fs = std::filesystem;
    validate(o->run);
    fs::path dir = o->out;
    if (dir.empty()) {
      const std::time_t now = std::time(nullptr);
      std::tm utc{};
      gmtime_r(&now, &utc);
      char stamp[32];
      std::strftime(stamp, sizeof stamp, "run-%Y%m%d-%H%M%S", &utc);
      dir = fs::path("results") / stamp;
    }
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw usage_error(fmt::format("cannot create output folder '{}': {}", dir.string(), ec.message()));
    const fs::path results = dir / "results.jsonl";
    if (fs::exists(results))
      throw usage_error(fmt::format("'{}' already exists; choose another --out so earlier results are kept",
                                    results.string()));

    auto dev = open_backend(o->backend.empty() ? default_backend_name() : o->backend);
    progress::log(fmt::format("itera: running the default suite on {} ({}) into {}", dev->device_name(), dev->name(),
                              dir.string()));
    const auto write_file = [](const fs::path& path, const auto& render) {
      std::ofstream file(path);
      render(file);
      file.flush();
      if (!file) throw std::runtime_error(fmt::format("writing '{}' failed (disk full?)", path.string()));
    };
    ojson env = environment(dev.get());
    env["formats"] = formats_table(dev.get());
    write_file(dir / "env.json", [&](std::ostream& out) { out << env.dump(2) << '\n'; });
    result_stream out(results.string());
    out.write(make_context(*dev, command_line));
    runner r(*dev, o->run, &out);
    const auto summary = run_default_suite(r);

    // The summary is rendered from the file just written: what the folder holds is what was shown.
    const auto set = read_results(results.string());
    write_file(dir / "summary.md", [&](std::ostream& out) { write_markdown(out, {set}); });
    write_markdown(std::cout, {set});
    progress::log(fmt::format("itera: {} cases, {} failed; results in {}", summary.records.size(), summary.failed,
                              dir.string()));
    return static_cast<int>(summary.failed ? exit_code::cases_failed : exit_code::ok);
  };
}

}  // namespace itera::cli
