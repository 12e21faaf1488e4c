// Golden-file tests: fixed result sets pushed through every writer, compared byte for byte with
// tests/golden/expected/. The sets are built here in code; tests/golden/fixtures/ holds the same
// sets as JSON-lines files (the second one cut short on its last line, like a killed run), and a
// test reads those back and checks they render to the same markdown.
//
// After an intended change of output, regenerate the expected files and the fixtures with
//   ITERA_UPDATE_GOLDEN=1 ./build/tests/itera_unit_tests --gtest_filter='Writer*'
// and review the diff (git diff tests/golden) before committing it.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "itera/analysis/compare.hpp"
#include "itera/core/errors.hpp"
#include "itera/core/result.hpp"
#include "itera/report/writers.hpp"

namespace itera {
namespace {

namespace fs = std::filesystem;

bool updating_golden() {
  const char* v = std::getenv("ITERA_UPDATE_GOLDEN");
  return v && std::string(v) == "1";
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// First differing line, so a failure says where without dumping two whole files.
std::string first_difference(const std::string& expected, const std::string& actual) {
  std::istringstream e(expected), a(actual);
  std::string le, la;
  for (int line = 1;; ++line) {
    const bool he = static_cast<bool>(std::getline(e, le));
    const bool ha = static_cast<bool>(std::getline(a, la));
    if (!he && !ha) return "files differ only in their final newline";
    if (!he || !ha || le != la)
      return "line " + std::to_string(line) + "\n  expected: " + (he ? le : "(end of file)") +
             "\n  actual:   " + (ha ? la : "(end of file)");
  }
}

void expect_golden(const std::string& name, const std::string& actual) {
  const fs::path path = fs::path(ITERA_GOLDEN_DIR) / name;
  if (updating_golden()) {
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << actual;
    return;
  }
  ASSERT_TRUE(fs::exists(path)) << path << " is missing; run the tests with ITERA_UPDATE_GOLDEN=1 to create it";
  const std::string expected = read_file(path);
  EXPECT_TRUE(expected == actual) << name << " differs from the golden file: " << first_difference(expected, actual)
                                  << "\n(ITERA_UPDATE_GOLDEN=1 regenerates it after an intended change)";
}

// Hand-made statistics: the writers only render them, so their values need not come from samples.
summary fixed_summary(std::size_t n, double median, double spread) {
  summary s;
  s.count = n;
  s.median = median;
  s.min = median * (1 - 2 * spread);
  s.max = median * (1 + 6 * spread);
  s.mean = median * (1 + spread / 2);
  s.stdev = median * spread;
  for (double q : {0.90, 0.95, 0.99, 0.999})
    s.percentiles.push_back({q, median * (1 + 10 * spread * (q - 0.5)), std::pow(q, static_cast<double>(n)) <= 0.05});
  s.median_ci_low = median * (1 - spread / 4);
  s.median_ci_high = median * (1 + spread / 4);
  s.relative_noise = n < 6 ? std::numeric_limits<double>::infinity() : spread / 4;
  return s;
}

std::vector<double> fixed_samples(std::size_t n, double median, double spread) {
  std::vector<double> v;
  for (std::size_t i = 0; i < n; ++i) v.push_back(median * (1 + spread * (static_cast<double>((i * 7) % 11) - 5) / 5));
  return v;
}

case_record gemm_case(const std::string& format, const std::string& out_precision) {
  case_record r;
  r.workload = "gemm";
  r.workload_version = 2;
  r.backend = "cuda";
  r.axes = {{"M", "8192"}, {"N", "8192"}, {"K", "8192"}, {"format", format}};
  r.fields = {{"precision.input", format},
              {"precision.compute", format},
              {"precision.accumulate", "fp32"},
              {"precision.output", out_precision},
              {"library", "cublasLt"}};
  r.device_time_method = "cuda_graph_events";
  r.flops = 2.0 * 8192 * 8192 * 8192;
  r.bytes_read = 2.0 * 8192 * 8192 * 2;
  r.bytes_written = 8192.0 * 8192 * 2;
  r.warmup_count = 3;
  r.warmup_ns = 4.5e6;
  r.check = {true, true, 1.2e-3, 2e-2, "cpu reference over 64 sampled rows"};
  r.throttle.available = true;
  r.throttle.sm_clock_mhz_min = 1980;
  r.throttle.sm_clock_mhz_max = 1980;
  r.throttle.temperature_c_max = 61;
  r.throttle.power_w_max = 655.5;
  return r;
}

void set_timing(case_record& r, std::size_t n, double median, double spread, bool device) {
  r.host_ns = fixed_samples(n, median * 1.01 + 4000, spread);
  r.host_stats = fixed_summary(n, median * 1.01 + 4000, spread);
  if (device) {
    r.device_ns = fixed_samples(n, median, spread);
    r.device_stats = fixed_summary(n, median, spread);
  }
  r.stop_reason = "converged";
}

// A cuda run: two workloads, ceilings (one that failed), a throttled case, a failed and a skipped
// case, stages, and constant as well as varying axes and recipe fields.
result_set h200_set() {
  result_set s;
  s.source = "h200_run.jsonl";
  run_context& c = s.context;
  c.itera_version = "0.1.0";
  c.git_commit = "0123456789abcdef0123456789abcdef01234567";
  c.build_type = "Release";
  c.cuda_architectures = "80;89;90a";
  c.started_utc = "2025-06-01T12:00:00Z";
  c.command = "itera run --out results";
  c.backend = "cuda";
  c.host = {{"cpu_model", "AMD EPYC 9654 96-Core Processor"},
            {"logical_cores", 32},
            {"memory_total_bytes", 270582939648ULL},
            {"os", "Debian GNU/Linux 12 (bookworm)"}};
  c.device = {{"name", "NVIDIA H200"},
              {"memory_total_bytes", 150754820096ULL},
              {"compute_capability", "9.0"},
              {"sm_count", 132},
              {"power_limit_w", 700},
              {"pcie", {{"generation_max", 5}, {"width_max", 16}}},
              {"variant", {{"id", "h200-sxm-141gb"}, {"name", "NVIDIA H200 SXM 141GB"}}}};
  c.software = {{"driver", "580.65.06"}, {"cuda_runtime", "13.0"}, {"cublaslt", "13.0.0"}, {"nccl", "2.27.3"}};

  s.ceilings = {{"copy.d2d", 4.23e12, "B/s", "transfer direction=d2d bytes=1073741824"},
                {"gemm.bf16", 7.71e14, "FLOP/s", "gemm M=8192 N=8192 K=8192 format=bf16"},
                {"gemm.fp16", 7.3e14, "FLOP/s", "gemm M=8192 N=8192 K=8192 format=fp16"}};

  case_record d2d;
  d2d.workload = "transfer";
  d2d.workload_version = 1;
  d2d.backend = "cuda";
  d2d.role = "ceiling";
  d2d.axes = {{"direction", "d2d"}, {"memory", "device"}, {"bytes", "1073741824"}};
  d2d.device_time_method = "cuda_events";
  d2d.bytes_read = d2d.bytes_written = 1073741824;
  set_timing(d2d, 40, 507.6e3, 0.004, true);
  d2d.metrics = {{"throughput/bytes", 4.23e12, "B/s"}};
  s.cases.push_back(d2d);

  case_record fp8_ceiling = gemm_case("fp8_e4m3", "bf16");
  fp8_ceiling.role = "ceiling";
  fp8_ceiling.status = case_status::failed;
  fp8_ceiling.message = "cublasLtMatmul: CUBLAS_STATUS_NOT_SUPPORTED (no algorithm for this layout)";
  fp8_ceiling.check = {};
  s.cases.push_back(fp8_ceiling);

  const char* directions[] = {"h2d", "d2h"};
  const char* memories[] = {"pinned", "pageable"};
  const double medians[2][2] = {{19.7e6, 147.1e6}, {19.5e6, 80.1e6}};
  for (int d = 0; d < 2; ++d) {
    for (int m = 0; m < 2; ++m) {
      case_record t;
      t.workload = "transfer";
      t.workload_version = 1;
      t.backend = "cuda";
      t.axes = {{"direction", directions[d]}, {"memory", memories[m]}, {"bytes", "1073741824"}};
      t.device_time_method = "cuda_events";
      t.bytes_read = t.bytes_written = 1073741824;
      set_timing(t, 24, medians[d][m], 0.01 * (1 + m), true);
      t.metrics = {{"throughput/bytes", 1073741824 / (medians[d][m] * 1e-9), "B/s"}, {"link/theoretical", 63.015e9, "B/s"}};
      if (d == 0 && m == 0) {
        t.stages = {{"upload", 0, 24, 24 * 19.9e6, 24 * 19.7e6, "cuda_events", 1073741824.0 * 24, 0, 0, 1073741824, 1073741824, {}}};
      }
      s.cases.push_back(t);
    }
  }

  case_record bf16 = gemm_case("bf16", "bf16");
  set_timing(bf16, 120, 1.4807e6, 0.002, true);
  bf16.metrics = {{"throughput/flops", bf16.flops / 1.4807e-3, "FLOP/s"},
                  {"utilisation/gemm.bf16", bf16.flops / 1.4807e-3 / 7.71e14, "1"}};
  bf16.stages = {{"prepare", 0, 1, 3.1e8, -1, "", 0, 0, 0, 0, 0, {}},
                 {"compute", 0, 120, 120 * 1.4961e6, 120 * 1.4807e6, "cuda_graph_events", 120 * bf16.bytes_read,
                  120 * bf16.bytes_written, 120 * bf16.flops, 402653184 + 33554432, 402653184, {}},
                 {"compute/verify", 1, 1, 2.05e9, -1, "", 0, 0, 0, 402653184, 402653184, {}}};
  s.cases.push_back(bf16);

  case_record fp16 = gemm_case("fp16", "fp16");
  set_timing(fp16, 96, 1.6312e6, 0.0031, true);
  fp16.metrics = {{"throughput/flops", fp16.flops / 1.6312e-3, "FLOP/s"},
                  {"utilisation/gemm.fp16", fp16.flops / 1.6312e-3 / 7.3e14, "1"}};
  fp16.throttle.reasons = {"sw_power_cap", "hw_thermal_slowdown"};
  fp16.throttle.reasons_mask = 0x24;
  fp16.throttle.sm_clock_mhz_min = 1755;
  fp16.device_stats->drift = 0.031;  // slowed as it throttled: the note says so
  fp16.host_stats->drift = 0.004;
  fp16.stop_reason = "max_time";
  s.cases.push_back(fp16);

  case_record fp8 = gemm_case("fp8_e4m3", "bf16");
  fp8.status = case_status::failed;
  fp8.message = "output does not match the cpu reference";
  fp8.check = {true, false, 0.31, 0.05, "cpu reference over 64 sampled rows"};
  s.cases.push_back(fp8);

  case_record fp4 = gemm_case("fp4_e2m1", "bf16");
  fp4.status = case_status::skipped;
  fp4.message = "fp4_e2m1 needs compute capability 10.0, this card has 9.0";
  fp4.check = {};
  fp4.fields.clear();  // the runner records no recipe fields for a case that never started
  fp4.device_time_method.clear();
  fp4.warmup_count = 0;
  fp4.warmup_ns = 0;
  s.cases.push_back(fp4);
  return s;
}

// A cpu-backend smoke run: host times only, GFLOP/s, a case with too few samples for a noise
// estimate, and a message that needs CSV quoting.
result_set cpu_set() {
  result_set s;
  s.source = "cpu_smoke.jsonl";
  s.truncated = true;  // its fixture ends in a half-written line
  run_context& c = s.context;
  c.itera_version = "0.1.0";
  c.git_commit = "0123456789abcdef0123456789abcdef01234567";
  c.build_type = "Debug";
  c.started_utc = "2025-06-01T13:30:00Z";
  c.command = "itera bench gemm --backend cpu --axis M=64,128";
  c.backend = "cpu";
  c.host = {{"cpu_model", "Intel(R) Xeon(R) Platinum 8480+"}, {"logical_cores", 16}};
  c.software = {{"openblas", "0.3.21"}};
  for (const char* m : {"64", "128"}) {
    case_record r;
    r.workload = "gemm";
    r.workload_version = 2;
    r.backend = "cpu";
    r.axes = {{"M", m}, {"N", "64"}, {"K", "64"}, {"format", "fp32"}};
    r.fields = {{"precision.input", "fp32"}, {"precision.compute", "fp32"}, {"precision.accumulate", "fp32"},
                {"precision.output", "fp32"}, {"library", "openblas"}};
    r.flops = 2.0 * std::stod(m) * 64 * 64;
    r.bytes_read = (std::stod(m) * 64 + 64 * 64) * 4;
    r.bytes_written = std::stod(m) * 64 * 4;
    r.warmup_count = 1;
    r.warmup_ns = 9000;
    r.check = {true, true, 3e-7, 1e-5, "cpu reference, all rows"};
    const bool small = std::string(m) == "128";
    r.host_ns = fixed_samples(small ? 5 : 50, small ? 61.5e3 : 30.9e3, 0.02);
    r.host_stats = fixed_summary(small ? 5 : 50, small ? 61.5e3 : 30.9e3, 0.02);
    r.stop_reason = small ? "max_samples" : "converged";
    r.metrics = {{"throughput/flops", r.flops / (r.host_stats->median * 1e-9), "FLOP/s"}};
    s.cases.push_back(r);
  }
  case_record bad;
  bad.workload = "transfer";
  bad.workload_version = 1;
  bad.backend = "cpu";
  bad.axes = {{"direction", "h2d"}, {"memory", "pinned"}, {"bytes", "1048576"}};
  bad.status = case_status::skipped;
  bad.message = "the cpu backend has no device memory, \"h2d\" is a plain memcpy; use direction=d2d";
  s.cases.push_back(bad);
  return s;
}

std::vector<result_set> golden_sets() { return {h200_set(), cpu_set()}; }

template <class F>
std::string render(F&& f) {
  std::ostringstream out;
  f(out);
  return out.str();
}

const fs::path fixtures_dir = fs::path(ITERA_SOURCE_DIR) / "tests/golden/fixtures";

// Writes a set as a results file; `cut_last` appends the first part of one more case line with no
// newline, as a run killed mid-write leaves it.
void write_fixture(const result_set& s, bool cut_last) {
  fs::create_directories(fixtures_dir);
  const fs::path p = fixtures_dir / s.source;
  fs::remove(p);  // result_stream never overwrites: regenerating replaces the fixture on purpose
  {
    result_stream out(p.string());
    out.write(s.context);
    for (const auto& c : s.ceilings) out.write(c);
    for (const auto& r : s.cases) out.write(r);
  }
  if (cut_last) {
    std::string line = to_json(s.cases.front()).dump();
    std::ofstream(p, std::ios::binary | std::ios::app) << line.substr(0, line.size() / 2);
  }
}

TEST(WriterGolden, Markdown) {
  expect_golden("results.md", render([](std::ostream& o) { write_markdown(o, golden_sets()); }));
}

TEST(WriterGolden, Csv) { expect_golden("results.csv", render([](std::ostream& o) { write_csv(o, golden_sets()); })); }

TEST(WriterGolden, Json) { expect_golden("results.json", render([](std::ostream& o) { write_json(o, golden_sets()); })); }

TEST(WriterGolden, WriteResultsDispatchesOnFormat) {
  const auto sets = golden_sets();
  for (auto f : {output_format::md, output_format::csv, output_format::json}) {
    const std::string via_dispatch = render([&](std::ostream& o) { write_results(o, f, sets); });
    const std::string direct = render([&](std::ostream& o) {
      if (f == output_format::md) write_markdown(o, sets);
      if (f == output_format::csv) write_csv(o, sets);
      if (f == output_format::json) write_json(o, sets);
    });
    EXPECT_EQ(via_dispatch, direct);
  }
}

// The fixtures on disk are the same sets: reading them back renders the same markdown, and the
// second one is reported as cut short with its earlier cases kept.
TEST(WriterGolden, FixturesRenderLikeTheSetsInCode) {
  if (updating_golden()) {
    write_fixture(h200_set(), false);
    write_fixture(cpu_set(), true);
  }
  std::vector<result_set> read;
  for (const char* name : {"h200_run.jsonl", "cpu_smoke.jsonl"}) {
    result_set s = read_results((fixtures_dir / name).string());
    s.source = name;
    read.push_back(std::move(s));
  }
  EXPECT_FALSE(read[0].truncated);
  EXPECT_TRUE(read[1].truncated);
  const auto expected = golden_sets();
  EXPECT_EQ(render([&](std::ostream& o) { write_markdown(o, read); }),
            render([&](std::ostream& o) { write_markdown(o, expected); }));
  EXPECT_EQ(render([&](std::ostream& o) { write_csv(o, read); }), render([&](std::ostream& o) { write_csv(o, expected); }));
}

TEST(WriterGolden, MarkdownOfNothing) {
  EXPECT_EQ(render([](std::ostream& o) { write_markdown(o, {}); }), "# itera results\n\nNo results.\n");
  result_set empty;
  empty.source = "empty.jsonl";
  empty.context.backend = "cpu";
  const std::string md = render([&](std::ostream& o) { write_markdown(o, {empty}); });
  EXPECT_NE(md.find("No cases."), std::string::npos);
}

TEST(WriterFormat, ParseOutputFormat) {
  EXPECT_EQ(parse_output_format("md"), output_format::md);
  EXPECT_EQ(parse_output_format("csv"), output_format::csv);
  EXPECT_EQ(parse_output_format("json"), output_format::json);
  try {
    parse_output_format("html");
    FAIL() << "html is not a format yet";
  } catch (const usage_error& e) {
    EXPECT_STREQ(e.what(), "unknown format 'html': expected md, csv or json");
  }
}

ojson env_with_gpu() {
  return ojson::parse(R"json({
    "itera": {"version": "0.1.0", "git_commit": "0123456789ab", "build_type": "Release",
              "cuda_architectures": "80;89;90a", "backends": ["cpu", "cuda"]},
    "host": {"cpu_model": "AMD EPYC 9654 96-Core Processor", "logical_cores": 32,
             "memory_total_bytes": 270582939648, "os": "Debian GNU/Linux 12 (bookworm)", "kernel": "6.1.0-37-amd64"},
    "gpu": {"available": true, "driver_version": "580.65.06", "cuda_driver_version": "13.0",
            "devices": [{"index": 0, "name": "NVIDIA H200", "uuid": "GPU-00000000-1111-2222-3333-444444444444",
                         "variant": {"id": "h200-sxm-141gb", "name": "NVIDIA H200 SXM 141GB", "form_factor": "SXM5"},
                         "compute_capability": "9.0", "sm_count": 132,
                         "memory": {"total_bytes": 150754820096, "free_bytes": 150129213440, "bus_width_bits": 6144,
                                    "max_clock_mhz": 3201, "theoretical_bandwidth_gbs": 4916.736},
                         "power_limit_w": {"current": 700, "default": 700, "max": 700},
                         "sm_clock_mhz": {"current": 1980, "max": 1980},
                         "pcie": {"generation": {"current": 5, "max": 5}, "width": {"current": 16, "max": 16}},
                         "nvlink_links_up": 18, "ecc": true, "mig": "disabled", "throttle_reasons": [],
                         "temperature_c": 34}]},
    "libraries": {"cuda_runtime": "13.0", "cublaslt": "13.0.0", "nccl": "2.27.3",
                  "nvjpeg": "not found", "cupti": "13.0"},
    "formats": [
      {"format": "fp32", "hardware_supported": true, "compiled": true, "runs": true, "error": 1.1920929e-07, "tolerance": 1e-05, "note": ""},
      {"format": "bf16", "hardware_supported": true, "compiled": true, "runs": true, "error": 0.0021, "tolerance": 0.02, "note": ""},
      {"format": "fp8_e4m3", "hardware_supported": true, "compiled": true, "runs": false, "error": null, "tolerance": 0.05,
       "note": "cublasLtMatmul: CUBLAS_STATUS_NOT_SUPPORTED | no heuristic"},
      {"format": "fp4_e2m1", "hardware_supported": false, "compiled": false, "runs": false, "note": "needs sm_100"}
    ],
    "notes": "formats are tried, not read from a datasheet"
  })json");
}

TEST(WriterGolden, EnvMarkdownWithGpu) {
  expect_golden("env_gpu.md", render([](std::ostream& o) { write_env_markdown(o, env_with_gpu()); }));
}

TEST(WriterGolden, EnvMarkdownWithoutGpu) {
  ojson env = env_with_gpu();
  env["gpu"] = {{"available", false}, {"reason", "NVML not found: libnvidia-ml.so.1: cannot open shared object file"}};
  env.erase("formats");
  expect_golden("env_no_gpu.md", render([&](std::ostream& o) { write_env_markdown(o, env); }));
}

// Missing or oddly shaped keys render something rather than throw: the env JSON grows over time.
TEST(WriterFormat, EnvMarkdownSurvivesOddInput) {
  for (const char* text : {"null", "{}", "[]", "42", R"({"gpu": null})", R"({"gpu": {"devices": "none"}})",
                           R"({"gpu": {"available": true, "devices": [1, "x", null, {}]}})", R"({"formats": [1, 2]})",
                           R"({"host": [], "libraries": "none", "formats": {"fp32": true}})"}) {
    SCOPED_TRACE(text);
    EXPECT_NO_THROW(render([&](std::ostream& o) { write_env_markdown(o, ojson::parse(text)); }));
  }
}

// Comparison output: the H200 run against the same recipe on an H100 PCIe, and a refused one.
result_set h100_set() {
  result_set s = h200_set();
  s.source = "h100_run.jsonl";
  s.context.started_utc = "2025-06-02T09:00:00Z";
  s.context.device = {{"name", "NVIDIA H100 PCIe"},
                      {"memory_total_bytes", 85520809984ULL},
                      {"compute_capability", "9.0"},
                      {"sm_count", 114},
                      {"power_limit_w", 350},
                      {"pcie", {{"generation_max", 5}, {"width_max", 16}}},
                      {"variant", {{"id", "h100-pcie-80gb"}, {"name", "NVIDIA H100 PCIe 80GB"}}}};
  for (auto& r : s.cases) {
    if (r.workload == "gemm" && r.status == case_status::ok) {
      const double m = r.device_stats->median * 2.07;
      r.device_stats = fixed_summary(r.device_stats->count, m, 0.003);
    }
    if (r.workload == "transfer" && r.axes[0].second == "d2h" && r.axes[1].second == "pinned")
      r.device_stats = fixed_summary(24, r.device_stats->median * 1.001, 0.01);
    if (r.workload == "transfer" && r.axes[1].second == "pageable")
      r.device_stats = fixed_summary(24, r.device_stats->median * 0.7, 0.01);
  }
  s.cases.pop_back();  // fp4 only in A
  return s;
}

TEST(WriterGolden, ComparisonAcrossGpus) {
  const result_set a = h200_set(), b = h100_set();
  const comparison c = compare_results(a, b, {"cases"});  // fp4 ran only in A
  ASSERT_FALSE(c.refused);
  expect_golden("compare_gpu.md", render([&](std::ostream& o) { write_comparison_markdown(o, c, a, b); }));
  expect_golden("compare_gpu.json", render([&](std::ostream& o) { write_comparison_json(o, c); }));
}

TEST(WriterGolden, ComparisonRefused) {
  const result_set a = h200_set();
  result_set b = h200_set();
  b.source = "h200_rerun.jsonl";
  b.context.software["cublaslt"] = "12.9.1";
  for (auto& r : b.cases)
    if (r.workload == "gemm" && r.axes[3].second == "bf16") r.fields["precision.output"] = "fp32";
  const comparison c = compare_results(a, b, {});
  ASSERT_TRUE(c.refused);
  expect_golden("compare_refused.md", render([&](std::ostream& o) { write_comparison_markdown(o, c, a, b); }));
  expect_golden("compare_refused.json", render([&](std::ostream& o) { write_comparison_json(o, c); }));
}

}  // namespace
}  // namespace itera
