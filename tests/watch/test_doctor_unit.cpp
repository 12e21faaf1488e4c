// itera doctor without the binary: required items, probe outputs, the driver verdict, the table.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <sstream>

#include "itera/core/errors.hpp"
#include "itera/doctor/doctor.hpp"

namespace {

using namespace itera;
using doctor::item_result;
using doctor::verdict;

TEST(doctor_required, names_aliases_and_all) {
  EXPECT_EQ(doctor::parse_required({"torch", "FP8", "flash_attn", "te", "bnb", "torch"}),
            (std::vector<std::string>{"torch", "fp8", "flash-attn", "transformer-engine", "bitsandbytes"}));
  EXPECT_EQ(doctor::parse_required({"all"}), doctor::item_names());
  try {
    doctor::parse_required({"cuda-graphs"});
    FAIL();
  } catch (const usage_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'cuda-graphs': no such item"), std::string::npos) << what;
    EXPECT_NE(what.find("transformer-engine"), std::string::npos) << what;
  }
}

proc::captured exited(int code, std::string out, std::string err = "") {
  proc::captured c;
  c.exit.how = proc::exit_info::kind::exited;
  c.exit.code = code;
  c.out = std::move(out);
  c.err = std::move(err);
  c.seconds = 1.25;
  return c;
}

TEST(doctor_probe_output, the_last_result_line_counts_whatever_came_before) {
  const auto r = doctor::parse_probe_output(
      "bf16",
      exited(0, "warning: something\nITERA_DOCTOR_RESULT {\"verdict\": \"fails\"}\n"
                "ITERA_DOCTOR_RESULT {\"item\": \"bf16\", \"verdict\": \"works\", \"version\": \"1.0\", \"detail\": \"ok\", "
                "\"facts\": {\"x\": 1}, \"check\": {\"error\": 0.003, \"tolerance\": 0.01, \"method\": \"m\", \"passed\": true}}\n"),
      60);
  EXPECT_EQ(r.v, verdict::works);
  EXPECT_EQ(r.version, "1.0");
  EXPECT_EQ(r.facts["x"], 1);
  EXPECT_TRUE(r.check.checked);
  EXPECT_TRUE(r.check.passed);
  EXPECT_DOUBLE_EQ(r.check.error, 0.003);
  EXPECT_DOUBLE_EQ(r.seconds, 1.25);
}

TEST(doctor_probe_output, crash_timeout_and_silence_are_failures_with_the_reason) {
  proc::captured crash = exited(0, "", "Fatal Python error: Segmentation fault\n\n  File \"x.py\", line 3 in <module>\n");
  crash.exit.how = proc::exit_info::kind::signalled;
  crash.exit.signal = SIGSEGV;
  crash.exit.code = 139;
  auto r = doctor::parse_probe_output("triton", crash, 60);
  EXPECT_EQ(r.v, verdict::fails);
  EXPECT_NE(r.detail.find("crashed: killed by SIGSEGV"), std::string::npos) << r.detail;
  EXPECT_NE(r.detail.find("innermost Python frame: File \"x.py\", line 3 in <module>"), std::string::npos) << r.detail;
  crash.err = "loading libfoo\nFatal Python error: Segmentation fault\n\nCurrent thread 0x1 (most recent call first):\n"
              "  File \"/lib/foo/__init__.py\", line 9 in <module>\n  File \"<frozen importlib._bootstrap>\", line 1 in x\n";
  r = doctor::parse_probe_output("foo", crash, 60);
  EXPECT_NE(r.detail.find("; innermost Python frame: File \"/lib/foo/__init__.py\", line 9 in <module>; its last "
                          "output before: loading libfoo"),
            std::string::npos)
      << r.detail;

  proc::captured slow = exited(0, "");
  slow.timed_out = true;
  r = doctor::parse_probe_output("bitsandbytes", slow, 2);
  EXPECT_EQ(r.v, verdict::fails);
  EXPECT_NE(r.detail.find("timed out after 2.00 s"), std::string::npos) << r.detail;

  r = doctor::parse_probe_output("torch", exited(1, "", "Traceback...\nImportError: boom\n"), 60);
  EXPECT_EQ(r.v, verdict::fails);
  EXPECT_NE(r.detail.find("exited with code 1 without a result"), std::string::npos) << r.detail;
  EXPECT_NE(r.detail.find("ImportError: boom"), std::string::npos) << r.detail;

  proc::captured missing;
  missing.exit = proc::not_started("python9", ENOENT);
  r = doctor::parse_probe_output("python", missing, 60);
  EXPECT_EQ(r.v, verdict::absent);
  EXPECT_NE(r.detail.find("command not found"), std::string::npos) << r.detail;
}

doctor::driver_facts driver(std::optional<int> cuda, std::optional<int> cuinit = 0) {
  doctor::driver_facts d;
  d.driver_version = "580.65.06";
  d.libcuda_version = cuda;
  d.libcuda_path = "libcuda.so.1";
  d.cuinit_result = cuinit;
  if (cuinit && *cuinit != 0) d.cuinit_error = "CUDA_ERROR_NO_DEVICE";
  return d;
}

TEST(doctor_driver, driver_against_runtime) {
  auto r = doctor::driver_verdict(driver(13000), "13.0", "");
  EXPECT_EQ(r.v, verdict::works);
  EXPECT_EQ(r.version, "580.65.06 / CUDA 13.0");
  EXPECT_NE(r.detail.find("cuInit succeeded; supports CUDA 13.0, torch's runtime is CUDA 13.0"), std::string::npos)
      << r.detail;

  r = doctor::driver_verdict(driver(12020), "12.4", "");
  EXPECT_EQ(r.v, verdict::works);
  EXPECT_NE(r.detail.find("minor version compatibility"), std::string::npos) << r.detail;

  r = doctor::driver_verdict(driver(12040), "13.0", "");
  EXPECT_EQ(r.v, verdict::fails);
  EXPECT_NE(r.detail.find("update the driver, or install a torch built for CUDA 12.x"), std::string::npos) << r.detail;

  r = doctor::driver_verdict(driver(13000, 100), "13.0", "");
  EXPECT_EQ(r.v, verdict::fails);
  EXPECT_NE(r.detail.find("cuInit(0) failed with CUDA_ERROR_NO_DEVICE"), std::string::npos) << r.detail;

  r = doctor::driver_verdict(driver(13000), "", "torch absent: no module named torch");
  EXPECT_EQ(r.v, verdict::works);
  EXPECT_NE(r.detail.find("no CUDA runtime to compare with (torch absent: no module named torch)"), std::string::npos)
      << r.detail;

  doctor::driver_facts none;
  none.nvml_reason = "cannot load libnvidia-ml.so.1";
  none.libcuda_reason = "cannot load libcuda.so.1";
  r = doctor::driver_verdict(none, "13.0", "");
  EXPECT_EQ(r.v, verdict::absent);
  EXPECT_NE(r.detail.find("no NVIDIA driver found"), std::string::npos) << r.detail;

  doctor::driver_facts nvml_only;  // no libcuda: NVML's figure is used
  nvml_only.driver_version = "550.00";
  nvml_only.nvml_cuda_version = 12040;
  r = doctor::driver_verdict(nvml_only, "12.4", "");
  EXPECT_EQ(r.v, verdict::works);
  EXPECT_EQ(r.facts["cuda_supported_from"], "nvmlSystemGetCudaDriverVersion_v2");
}

item_result result(std::string item, verdict v, std::string detail = "d") {
  item_result r;
  r.item = std::move(item);
  r.v = v;
  r.detail = std::move(detail);
  return r;
}

TEST(doctor_table, required_items_and_their_outcome) {
  const std::vector<item_result> rs = {result("torch", verdict::works), result("fp8", verdict::skipped, "needs sm_89"),
                                       result("flash-attn", verdict::absent, "no module | named flash_attn")};
  EXPECT_EQ(doctor::not_working(rs, {"torch"}), std::vector<std::string>{});
  EXPECT_EQ(doctor::not_working(rs, {"fp8", "torch", "flash-attn", "triton"}),
            (std::vector<std::string>{"fp8", "flash-attn", "triton"}));
  std::ostringstream out;
  doctor::write_markdown(out, rs, {"torch", "fp8"}, "- heading\n");
  const std::string md = out.str();
  EXPECT_NE(md.find("# itera doctor\n\n- heading\n"), std::string::npos) << md;
  EXPECT_NE(md.find("| fp8 (required)   | skipped |"), std::string::npos) << md;
  EXPECT_NE(md.find("no module \\| named flash_attn"), std::string::npos) << md;
  EXPECT_NE(md.find("Required but not working: fp8 (skipped).\n"), std::string::npos) << md;
  std::ostringstream ok;
  doctor::write_markdown(ok, rs, {"torch"}, "");
  EXPECT_NE(ok.str().find("Required: torch: all work.\n"), std::string::npos) << ok.str();
}

TEST(doctor_table, cases_carry_the_verdict_as_status) {
  item_result w = result("bf16", verdict::works);
  w.check.checked = true;
  w.check.passed = true;
  w.check.error = 0.002;
  w.seconds = 2;
  w.facts["device_name"] = "X";
  auto c = doctor::to_case(w, "cuda");
  EXPECT_EQ(c.workload, "doctor");
  EXPECT_EQ(c.axes, (std::vector<std::pair<std::string, std::string>>{{"item", "bf16"}}));
  EXPECT_EQ(c.status, case_status::ok);
  EXPECT_TRUE(c.check.checked);
  EXPECT_EQ(c.details.at("fact.device_name"), "X");
  ASSERT_TRUE(c.host_stats.has_value());
  EXPECT_DOUBLE_EQ(c.host_stats->median, 2e9);
  EXPECT_EQ(doctor::to_case(result("fp8", verdict::fails, "why"), "cuda").status, case_status::failed);
  EXPECT_EQ(doctor::to_case(result("fp8", verdict::fails, "why"), "cuda").message, "fails: why");
  EXPECT_EQ(doctor::to_case(result("xformers", verdict::absent), "cuda").status, case_status::skipped);
  EXPECT_EQ(doctor::to_case(result("fp8", verdict::skipped), "cuda").status, case_status::skipped);
}

TEST(doctor_probes, the_embedded_program_is_probes_py_from_its_fourth_line) {
  std::ifstream f(std::string(ITERA_SOURCE_DIR) + "/src/doctor/probes.py");
  ASSERT_TRUE(f) << "cannot read src/doctor/probes.py";
  std::stringstream buffer;
  buffer << f.rdbuf();
  const std::string file = buffer.str();
  std::string expected = file.substr(file.find("R\"itera_py(") + 11);
  expected = expected.substr(0, expected.rfind(")itera_py\""));
  EXPECT_EQ(std::string(doctor::probes_source()), expected);
  EXPECT_EQ(doctor::probes_source().substr(0, 25), "\n# itera doctor's probes ");
  for (const auto& item : doctor::item_names()) {
    if (item == "driver") continue;  // read by itera itself
    EXPECT_NE(doctor::probes_source().find("\"" + item + "\": probe_"), std::string::npos) << item;
  }
}

}  // namespace
