// itera doctor [--python PATH] [--require ITEM,...] [--out FILE] [--timeout S]
#include <memory>

#include "apps/itera/commands.hpp"
#include "itera/doctor/doctor.hpp"

namespace itera::cli {

command_fn add_doctor(CLI::App& app, const std::string& command_line) {
  auto o = std::make_shared<doctor::options>();
  auto* cmd = app.add_subcommand("doctor", "Checks the stack against the card by trying each item (driver against the "
                                           "CUDA runtime, torch and its architectures, bf16 and fp8 products, "
                                           "attention and quantisation extensions, triton): a verdict table");
  cmd->add_option("--python", o->python, "the Python interpreter whose packages are checked")->capture_default_str()
      ->each([o](const std::string&) { o->python_given = true; });
  cmd->add_option("--require", o->require,
                  "items that must work, comma-separated (python, torch, driver, arch, bf16, fp8, flash-attn, "
                  "xformers, bitsandbytes, triton, transformer-engine, or all); exit code 4 when one does not")
      ->delimiter(',');
  cmd->add_option("-o,--out", o->out, "also write the verdicts as an itera results file (JSON lines)");
  cmd->add_option("--timeout", o->timeout_s, "seconds each item may take before it counts as failed")
      ->capture_default_str();
  o->command_line = command_line;
  return [o]() { return doctor::run(*o); };
}

}  // namespace itera::cli
