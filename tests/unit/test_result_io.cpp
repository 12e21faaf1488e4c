// Results files: what result_stream writes, read_results reads back; foreign, empty, unknown-schema
// files are refused with input_error; a file cut short on its last line keeps the cases before it.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>
#include <unistd.h>

#include <gtest/gtest.h>

#include "itera/core/errors.hpp"
#include "itera/core/result.hpp"

namespace itera {
namespace {

namespace fs = std::filesystem;

class ResultIo : public ::testing::Test {
 protected:
  void SetUp() override {
    m_dir = fs::path(::testing::TempDir()) /
            ("itera_result_io_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(m_dir);
  }
  void TearDown() override { fs::remove_all(m_dir); }
  std::string path(const std::string& name) const { return (m_dir / name).string(); }
  void write_text(const std::string& name, const std::string& text) const {
    std::ofstream(path(name), std::ios::binary) << text;
  }

  fs::path m_dir;
};

run_context sample_context() {
  run_context c;
  c.itera_version = "0.1.0";
  c.git_commit = "abc";
  c.build_type = "Release";
  c.started_utc = "2025-06-01T12:00:00Z";
  c.command = "itera bench gemm";
  c.backend = "cpu";
  c.host = {{"cpu_model", "test cpu"}, {"logical_cores", 4}};
  c.software = {{"openblas", "0.3.21"}};
  return c;
}

case_record sample_case(const std::string& m) {
  case_record r;
  r.workload = "gemm";
  r.workload_version = 2;
  r.backend = "cpu";
  r.axes = {{"M", m}, {"N", "64"}, {"K", "32"}, {"format", "fp32"}};
  r.fields = {{"precision.input", "fp32"}, {"precision.output", "fp32"}};
  r.host_ns = {100.5, 101.25, 99.75};
  summary s;
  s.count = 3;
  s.min = 99.75;
  s.max = 101.25;
  s.mean = 100.5;
  s.median = 100.5;
  s.stdev = 0.75;
  s.percentiles = {{0.9, 101.1, false}, {0.999, 101.2485, false}};
  s.median_ci_low = 99.75;
  s.median_ci_high = 101.25;
  s.relative_noise = std::numeric_limits<double>::infinity();
  r.host_stats = s;
  r.metrics = {{"throughput/flops", 1.5e9, "FLOP/s"}};
  r.check = {true, true, 1e-7, 1e-5, "cpu"};
  r.throttle.reasons = {"sw_power_cap"};
  r.stages = {{"compute", 0, 3, 301.5, -1, "", 10, 20, 30, 4096, 0, {100.0, 101.5, 100.0}}};
  return r;
}

TEST_F(ResultIo, DriftRoundTripsAndIsAbsentFromOlderResults) {
  summary s;
  s.drift = 0.025;
  const ojson j = to_json(s);
  EXPECT_EQ(j.at("drift").get<double>(), 0.025);
  EXPECT_EQ(summary_from_json(j).drift, 0.025);
  ojson older = j;
  older.erase("drift");  // results written before drift was recorded
  EXPECT_TRUE(std::isnan(summary_from_json(older).drift));
}

TEST_F(ResultIo, RoundTripsWhatResultStreamWrites) {
  {
    result_stream out(path("run.jsonl"));
    out.write(sample_context());
    out.write(ceiling{"gemm.fp32", 2e12, "FLOP/s", "gemm M=1024"});
    out.write(sample_case("64"));
    out.write(sample_case("128"));
  }
  const result_set s = read_results(path("run.jsonl"));
  EXPECT_EQ(s.source, path("run.jsonl"));
  EXPECT_FALSE(s.truncated);
  EXPECT_EQ(s.context.itera_version, "0.1.0");
  EXPECT_EQ(s.context.backend, "cpu");
  EXPECT_EQ(s.context.host, sample_context().host);
  EXPECT_EQ(s.context.software, sample_context().software);
  ASSERT_EQ(s.ceilings.size(), 1u);
  EXPECT_EQ(s.ceilings[0].key, "gemm.fp32");
  EXPECT_EQ(s.ceilings[0].value, 2e12);
  ASSERT_EQ(s.cases.size(), 2u);
  const case_record& r = s.cases[1];
  EXPECT_EQ(r.axes_key(), "M=128 N=64 K=32 format=fp32");
  EXPECT_EQ(r.fields.at("precision.output"), "fp32");
  EXPECT_EQ(r.host_ns, sample_case("128").host_ns);
  ASSERT_TRUE(r.host_stats.has_value());
  EXPECT_FALSE(r.device_stats.has_value());
  EXPECT_EQ(r.host_stats->median, 100.5);
  EXPECT_TRUE(std::isinf(r.host_stats->relative_noise));  // null in JSON, infinity again in memory
  EXPECT_TRUE(std::isnan(r.host_stats->drift));            // not measured (3 samples): null, NaN again
  ASSERT_EQ(r.host_stats->percentiles.size(), 2u);
  EXPECT_EQ(r.host_stats->percentiles[1].q, 0.999);
  EXPECT_EQ(r.throttle.reasons, std::vector<std::string>{"sw_power_cap"});
  ASSERT_EQ(r.stages.size(), 1u);
  EXPECT_EQ(r.stages[0].memory_peak_bytes, 4096u);
  EXPECT_EQ(r.stages[0].repetition_ns, (std::vector<double>{100.0, 101.5, 100.0}));
  // Writing what was read gives the same lines: nothing is lost on the way.
  EXPECT_EQ(to_json(r), to_json(sample_case("128")));
}

TEST_F(ResultIo, KeepsRepetitionTimesOfTopLevelStagesOnly) {
  case_record r = sample_case("64");
  r.stages.push_back({"compute/inner", 1, 3, 90, -1, "", 0, 0, 0, 0, 0, {30.0, 30.0, 30.0}});
  const ojson j = to_json(r);
  EXPECT_TRUE(j.at("stages").at(0).contains("repetition_ns"));
  EXPECT_FALSE(j.at("stages").at(1).contains("repetition_ns")) << "nested stages keep their totals alone";
  r.stages[0].repetition_ns.clear();
  EXPECT_FALSE(to_json(r).at("stages").at(0).contains("repetition_ns")) << "none marked: none written";
  {
    result_stream out(path("run.jsonl"));
    out.write(sample_context());
    out.write(r);
  }
  const result_set s = read_results(path("run.jsonl"));
  ASSERT_EQ(s.cases.size(), 1u);
  EXPECT_TRUE(s.cases[0].stages[0].repetition_ns.empty()) << "results written before repetitions were kept";
  EXPECT_TRUE(s.cases[0].stages[1].repetition_ns.empty()) << "a nested stage's are not written";
  EXPECT_EQ(s.cases[0].stages[0].per_repetition_ns(3), 301.5 / 3) << "their mean instead";
}

TEST_F(ResultIo, KeepsNoRepetitionTimesForManyTopLevelStages) {
  case_record r = sample_case("64");
  r.stages.clear();
  for (int i = 0; i < 33; ++i) r.stages.push_back({"layer." + std::to_string(i), 0, 3, 90, 60, "", 0, 0, 0, 0, 0, {20.0, 20.0, 20.0}});
  for (const auto& st : to_json(r).at("stages")) EXPECT_FALSE(st.contains("repetition_ns"));
  r.stages.pop_back();
  for (const auto& st : to_json(r).at("stages")) EXPECT_TRUE(st.contains("repetition_ns")) << "32 are kept";
}

TEST_F(ResultIo, RejectsAForeignJsonFile) {
  write_text("package.json", "{\"name\": \"left-pad\", \"version\": \"1.3.0\"}\n");
  try {
    read_results(path("package.json"));
    FAIL() << "a foreign JSON file was accepted";
  } catch (const input_error& e) {
    EXPECT_NE(std::string(e.what()).find("not an itera results file"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("package.json"), std::string::npos) << e.what();
  }
}

TEST_F(ResultIo, RejectsTextThatIsNotJson) {
  write_text("notes.txt", "hello\nworld\n");
  EXPECT_THROW(read_results(path("notes.txt")), input_error);
}

TEST_F(ResultIo, RejectsAnEmptyFile) {
  write_text("empty.jsonl", "");
  try {
    read_results(path("empty.jsonl"));
    FAIL() << "an empty file was accepted";
  } catch (const input_error& e) {
    EXPECT_NE(std::string(e.what()).find("empty"), std::string::npos) << e.what();
  }
}

TEST_F(ResultIo, RejectsAMissingFile) { EXPECT_THROW(read_results(path("absent.jsonl")), input_error); }

TEST_F(ResultIo, RejectsAnUnknownSchema) {
  ojson c = to_json(sample_context());
  c["schema"] = "itera.result/99";
  write_text("future.jsonl", c.dump() + "\n");
  try {
    read_results(path("future.jsonl"));
    FAIL() << "an unknown schema was accepted";
  } catch (const input_error& e) {
    EXPECT_NE(std::string(e.what()).find("itera.result/99"), std::string::npos) << e.what();
  }
}

TEST_F(ResultIo, KeepsTheCasesBeforeALastLineCutShort) {
  {
    result_stream out(path("killed.jsonl"));
    out.write(sample_context());
    out.write(sample_case("64"));
    out.write(sample_case("128"));
  }
  const std::string cut = to_json(sample_case("256")).dump();
  std::ofstream(path("killed.jsonl"), std::ios::binary | std::ios::app) << cut.substr(0, cut.size() / 3);
  const result_set s = read_results(path("killed.jsonl"));
  EXPECT_TRUE(s.truncated);
  ASSERT_EQ(s.cases.size(), 2u);
  EXPECT_EQ(s.cases[1].axes_key(), "M=128 N=64 K=32 format=fp32");
}

// A kill can land anywhere in a long line, also just after a nested object's closing brace.
TEST_F(ResultIo, KeepsTheCasesWhenTheCutLandsOnABrace) {
  {
    result_stream out(path("brace.jsonl"));
    out.write(sample_context());
    out.write(sample_case("64"));
  }
  const std::string line = to_json(sample_case("128")).dump();
  const auto brace = line.find('}');
  ASSERT_NE(brace, std::string::npos);
  std::ofstream(path("brace.jsonl"), std::ios::binary | std::ios::app) << line.substr(0, brace + 1);
  const result_set s = read_results(path("brace.jsonl"));
  EXPECT_TRUE(s.truncated);
  EXPECT_EQ(s.cases.size(), 1u);
}

TEST_F(ResultIo, NeverOverwritesAResultsFile) {
  write_text("kept.jsonl", "earlier results\n");
  EXPECT_THROW(result_stream out(path("kept.jsonl")), usage_error);
  std::ifstream in(path("kept.jsonl"));
  std::string first;
  std::getline(in, first);
  EXPECT_EQ(first, "earlier results");
}

TEST_F(ResultIo, AFolderIsNamedAsSuch) {
  try {
    read_results(m_dir.string());
    FAIL() << "a folder was read";
  } catch (const input_error& e) {
    EXPECT_NE(std::string(e.what()).find("is a folder"), std::string::npos) << e.what();
  }
}

TEST_F(ResultIo, RejectsAMalformedLineInTheMiddle) {
  {
    result_stream out(path("bad.jsonl"));
    out.write(sample_context());
  }
  std::ofstream(path("bad.jsonl"), std::ios::binary | std::ios::app) << "{\"type\":\"case\"\n"
                                                                     << to_json(sample_case("64")).dump() << "\n";
  EXPECT_THROW(read_results(path("bad.jsonl")), input_error);
}

}  // namespace
}  // namespace itera
