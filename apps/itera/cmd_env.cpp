#include <iostream>
#include <memory>

#include "apps/itera/commands.hpp"
#include "itera/core/errors.hpp"
#include "itera/env/fingerprint.hpp"
#include "itera/report/writers.hpp"
#include "itera/suite.hpp"

namespace itera::cli {

command_fn add_env(CLI::App& app) {
  struct opts {
    std::string format = "md";
    bool no_formats = false;
  };
  auto o = std::make_shared<opts>();
  auto* cmd = app.add_subcommand("env", "Fingerprint of the host, the GPU (exact variant), the software and the formats "
                                        "that really run");
  cmd->add_option("--format", o->format, "md or json")->check(CLI::IsMember({"md", "json"}));
  cmd->add_flag("--no-formats", o->no_formats, "skip the formats table (it runs a small GEMM per format)");
  return [o]() {
    std::unique_ptr<backend> dev;
    const auto name = default_backend_name();
    if (name == "cuda") dev = open_backend(name);
    ojson env = environment(dev.get());
    if (!o->no_formats) env["formats"] = formats_table(dev.get());
    if (o->format == "json") std::cout << env.dump(2) << '\n';
    else write_env_markdown(std::cout, env);
    return static_cast<int>(exit_code::ok);
  };
}

}  // namespace itera::cli
