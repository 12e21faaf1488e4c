// itera watch [--interval MS] [--out FILE] [--device all|N,...] [--label TEXT] -- CMD ARGS...
#include <memory>

#include <fmt/format.h>

#include "apps/itera/commands.hpp"
#include "itera/core/errors.hpp"
#include "itera/watch/watch.hpp"

namespace itera::cli {

command_fn add_watch(CLI::App& app, const std::string& command_line) {
  auto o = std::make_shared<watch::options>();
  auto* cmd = app.add_subcommand("watch", "Runs any program and samples NVML for it (memory of its processes, GPU "
                                          "busy, clocks, power, throttling, PCIe) into a results file and a timeline; "
                                          "passes its exit code on");
  cmd->add_option("--interval", o->interval_ms, "milliseconds between samples (10 to 60000)")->capture_default_str();
  cmd->add_option("-o,--out", o->out,
                  "results file (JSON lines; default results/watch-<UTC time>.jsonl); the timeline goes beside it as "
                  "<name>.timeline.jsonl");
  cmd->add_option("--device", o->devices, "GPUs to sample: all, or NVML indices such as 0 or 0,2 (nvidia-smi's order)")
      ->capture_default_str();
  cmd->add_option("--label", o->label,
                  "record this label instead of the command line (the command line is otherwise recorded as typed)");
  cmd->add_option("command", o->command, "the program to run and its arguments, after --");
  cmd->footer("Put the command after --, e.g.: itera watch --interval 50 -- python3 train.py --epochs 1");
  // Options of the command given without -- land here, and are refused with the fix.
  cmd->allow_extras();
  o->command_line = command_line;
  return [o, cmd]() {
    for (const auto& extra : cmd->remaining()) {
      if (extra == "--") continue;  // the separator itself
      throw usage_error(fmt::format("'{}' is not an option of itera watch; put the command to watch after --, e.g. "
                                    "itera watch [options] -- python3 -c ...",
                                    extra));
    }
    return watch::run(*o);
  };
}

}  // namespace itera::cli
