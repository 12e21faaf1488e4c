// itera doctor end to end: the binary, the real python3 of this machine running the embedded
// probes, a fake torch (tests/watch/fake_python) with scripted behaviours, the fake NVML. Checks the
// verdict table, the required items, the exit codes and the results file.
#include <algorithm>

#include "e2e_support.hpp"
#include "itera/core/result.hpp"

namespace {

using namespace itera;
using namespace itera::test;

bool have_python3() { return proc::run_captured({"python3", "-c", "import json"}, 30).exit.code == 0; }

#define NEED_PYTHON3()                                                 \
  if (!have_python3()) GTEST_SKIP() << "python3 is not on PATH here"; \
  static_assert(true)

// The environment of every run: the fake NVML, no libcuda (the fake driver's figure is used even on
// a machine with a GPU), and PYTHONPATH as given.
env_list doctor_env(const std::string& pythonpath, env_list extra = {}) {
  extra.emplace_back("ITERA_NVML_LIBRARY", ITERA_FAKE_NVML);
  extra.emplace_back("ITERA_CUDA_LIBRARY", "/nonexistent/libcuda.so.1");
  extra.emplace_back("PYTHONPATH", pythonpath);
  return extra;
}

// A PYTHONPATH folder with the fake torch only (no crashing or hanging extensions): quick runs.
std::string torch_only(const scratch& d) {
  const std::string dir = d / "torch_only";
  std::filesystem::create_directories(dir);
  std::filesystem::create_directory_symlink(std::string(ITERA_FAKE_PYTHON_DIR) + "/torch", dir + "/torch");
  return dir;
}

// The table row of an item: "| item | verdict | version | time | detail |".
std::string row_of(const std::string& md, const std::string& item) {
  std::istringstream in(md);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("| " + item + " ", 0) == 0) return line;
  ADD_FAILURE() << "no row for " << item << " in\n" << md;
  return "";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(doctor_e2e, every_verdict_with_crashes_and_hangs_contained) {
  NEED_PYTHON3();
  scratch d;
  const auto r = run_itera({"doctor", "--timeout", "3", "--out", d / "doctor.jsonl"}, doctor_env(ITERA_FAKE_PYTHON_DIR));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const std::string& md = r.out;
  EXPECT_TRUE(has(row_of(md, "python"), "| works")) << md;
  EXPECT_TRUE(has(row_of(md, "torch"), "| works   | 2.99.0+fake")) << row_of(md, "torch");
  EXPECT_TRUE(has(row_of(md, "driver"), "supports CUDA 12.4, torch's runtime is CUDA 12.4")) << row_of(md, "driver");
  EXPECT_TRUE(has(row_of(md, "driver"), "550.00-fake / CUDA 12.4")) << row_of(md, "driver");
  EXPECT_TRUE(has(row_of(md, "arch"), "| works   | sm_90")) << row_of(md, "arch");
  EXPECT_TRUE(has(row_of(md, "bf16"), "| works")) << row_of(md, "bf16");
  EXPECT_TRUE(has(row_of(md, "fp8"), "torch._scaled_mm e4m3 matches fp32")) << row_of(md, "fp8");
  EXPECT_TRUE(has(row_of(md, "flash-attn"), "| absent  |")) << row_of(md, "flash-attn");
  EXPECT_TRUE(has(row_of(md, "xformers"), "| fails   |")) << row_of(md, "xformers");
  EXPECT_TRUE(has(row_of(md, "xformers"), "RuntimeError: xFormers was built for PyTorch 2.0.1")) << row_of(md, "xformers");
  EXPECT_TRUE(has(row_of(md, "bitsandbytes"), "timed out after 3.00 s")) << row_of(md, "bitsandbytes");
  // Where it hung and where it crashed, from Python's faulthandler.
  EXPECT_TRUE(has(row_of(md, "bitsandbytes"), "bitsandbytes/__init__.py\", line 5 in <module>"))
      << row_of(md, "bitsandbytes");
  EXPECT_TRUE(has(row_of(md, "triton"), "crashed: killed by SIGSEGV")) << row_of(md, "triton");
  EXPECT_TRUE(has(row_of(md, "triton"), "triton/__init__.py\", line 9 in <module>; its last output before: fake "
                                        "triton: loading libtriton.so"))
      << row_of(md, "triton");
  EXPECT_TRUE(has(row_of(md, "transformer-engine"), "| absent  |")) << row_of(md, "transformer-engine");
  EXPECT_TRUE(has(md, "- card: NVIDIA H100 PCIe (sm_90), as torch sees cuda:0")) << md;

  const result_set set = read_results(d / "doctor.jsonl");
  EXPECT_EQ(set.context.device.value("name", ""), "NVIDIA H100 PCIe");
  ASSERT_EQ(set.cases.size(), 11u);
  std::map<std::string, case_status> status;
  for (const auto& c : set.cases) status[c.axes.at(0).second] = c.status;
  EXPECT_EQ(status["torch"], case_status::ok);
  EXPECT_EQ(status["fp8"], case_status::ok);
  EXPECT_EQ(status["triton"], case_status::failed);
  EXPECT_EQ(status["bitsandbytes"], case_status::failed);
  EXPECT_EQ(status["flash-attn"], case_status::skipped);
  const auto bf16 = std::find_if(set.cases.begin(), set.cases.end(),
                                 [](const case_record& c) { return c.axes.at(0).second == "bf16"; });
  ASSERT_NE(bf16, set.cases.end());
  EXPECT_TRUE(bf16->check.checked);
  EXPECT_TRUE(bf16->check.passed);
  EXPECT_GT(bf16->check.error, 0.0);
  EXPECT_LT(bf16->check.error, 0.01);
}

TEST(doctor_e2e, required_items_decide_the_exit_code) {
  NEED_PYTHON3();
  scratch d;
  const std::string py = torch_only(d);
  auto r = run_itera({"doctor", "--require", "torch,bf16,fp8,driver"}, doctor_env(py));
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "Required: torch, bf16, fp8, driver: all work.")) << r.out;
  EXPECT_TRUE(has(row_of(r.out, "fp8 (required)"), "| works")) << r.out;

  // An Ampere card: fp8 is skipped with the reason, and a required fp8 makes the run fail.
  r = run_itera({"doctor", "--require", "torch,fp8"}, doctor_env(py, {{"FAKE_TORCH_CAPABILITY", "8.0"}}));
  EXPECT_EQ(r.code, 4) << r.out << r.err;
  EXPECT_TRUE(has(row_of(r.out, "fp8"), "skipped")) << r.out;
  EXPECT_TRUE(has(row_of(r.out, "fp8"), "need sm_89 or newer (Ada, Hopper, Blackwell); this card is sm_80")) << r.out;
  EXPECT_TRUE(has(r.out, "Required but not working: fp8 (skipped).")) << r.out;
  EXPECT_TRUE(has(r.err, "required but not working: fp8")) << r.err;
  // Not required, the same stack passes.
  r = run_itera({"doctor", "--require", "torch"}, doctor_env(py, {{"FAKE_TORCH_CAPABILITY", "8.0"}}));
  EXPECT_EQ(r.code, 0) << r.out << r.err;
}

TEST(doctor_e2e, wrong_numbers_missing_kernels_and_old_drivers_fail) {
  NEED_PYTHON3();
  scratch d;
  const std::string py = torch_only(d);
  auto r = run_itera({"doctor", "--require", "bf16"}, doctor_env(py, {{"FAKE_TORCH_BF16", "broken"}}));
  EXPECT_EQ(r.code, 4);
  EXPECT_TRUE(has(row_of(r.out, "bf16"), "| fails")) << r.out;
  EXPECT_TRUE(has(row_of(r.out, "bf16"), "relative error 0.5 > tolerance 0.01")) << r.out;

  r = run_itera({"doctor", "--require", "arch"}, doctor_env(py, {{"FAKE_TORCH_ARCHS", "sm_70,sm_75"}}));
  EXPECT_EQ(r.code, 4);
  EXPECT_TRUE(has(row_of(r.out, "arch"), "was built for sm_70, sm_75; none runs on sm_90")) << r.out;

  r = run_itera({"doctor", "--require", "driver"}, doctor_env(py, {{"FAKE_NVML_CUDA_VERSION", "11080"}}));
  EXPECT_EQ(r.code, 4);
  EXPECT_TRUE(has(row_of(r.out, "driver"), "torch's runtime is CUDA 12.4 but this driver supports CUDA 11.8 only"))
      << r.out;

  r = run_itera({"doctor", "--require", "fp8"}, doctor_env(py, {{"FAKE_TORCH_SCALED_MM", "crash"}}));
  EXPECT_EQ(r.code, 4);
  EXPECT_TRUE(has(row_of(r.out, "fp8"), "crashed: killed by SIGSEGV")) << r.out;
  EXPECT_TRUE(has(row_of(r.out, "bf16"), "| works")) << "a crash must cost its item only:\n" << r.out;
}

TEST(doctor_e2e, without_torch_the_items_needing_it_are_skipped) {
  NEED_PYTHON3();
  scratch d;
  std::filesystem::create_directories(d / "empty");
  auto r = run_itera({"doctor", "--out", d / "d.jsonl"},
                     doctor_env(d / "empty", {{"ITERA_NVML_LIBRARY", d / "no-nvml.so"}}));
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(has(row_of(r.out, "torch"), "| absent")) << r.out;
  EXPECT_TRUE(has(row_of(r.out, "bf16"), "needs torch, which is absent")) << r.out;
  EXPECT_TRUE(has(row_of(r.out, "driver"), "| absent")) << r.out;
  EXPECT_TRUE(has(row_of(r.out, "flash-attn"), "| absent")) << r.out;
  const result_set set = read_results(d / "d.jsonl");
  EXPECT_EQ(set.context.backend, "cpu");
  EXPECT_EQ(set.cases.size(), 11u);

  r = run_itera({"doctor", "--require", "torch"}, doctor_env(d / "empty"));
  EXPECT_EQ(r.code, 4);
  r = run_itera({"doctor", "--require", "torch"}, doctor_env(d / "empty", {{"FAKE_TORCH_IMPORT", "error"}}));
  EXPECT_EQ(r.code, 4);
}

TEST(doctor_e2e, bad_options_are_usage_errors) {
  scratch d;
  auto r = run_itera({"doctor", "--python", d / "no-python"}, doctor_env(""));
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "--python: cannot run")) << r.err;
  r = run_itera({"doctor", "--require", "torch,cuda-graphs"}, doctor_env(""));
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "'cuda-graphs': no such item; items are python, torch, driver")) << r.err;
  std::ofstream(d / "taken.jsonl") << "x\n";
  r = run_itera({"doctor", "--out", d / "taken.jsonl"}, doctor_env(""));
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "already exists")) << r.err;
  r = run_itera({"doctor", "--python", "sh"}, doctor_env(""));  // runs, but is no Python
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "does not run Python")) << r.err;
}

}  // namespace
