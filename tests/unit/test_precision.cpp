// Precision against speed (include/itera/analysis/precision.hpp): cases of one run that differ only
// in weights, lm_head, kv or compute, each against its group's widest case, and the markdown
// report's table.
#include <gtest/gtest.h>

#include <sstream>

#include "itera/analysis/precision.hpp"
#include "itera/report/writers.hpp"

namespace {

using namespace itera;

case_record decode_case(const char* batch, const char* weights, const char* kv, const char* compute, double rate) {
  case_record r;
  r.workload = "llm";
  r.workload_version = 1;
  r.backend = "cuda";
  r.axes = {{"model", "llama-3.1-8b"}, {"compute", compute}, {"weights", weights}, {"kv", kv}, {"batch", batch}};
  r.host_ns = r.device_ns = {1e6, 2e6, 3e6};
  r.device_stats = summarize(r.device_ns);
  r.host_stats = summarize(r.host_ns);
  r.metrics = {{"throughput/decode_tokens_per_s", rate, "tokens/s"}, {"latency/tpot", 1.0 / rate, "s"}};
  return r;
}

std::vector<const case_record*> pointers(const std::vector<case_record>& cs) {
  std::vector<const case_record*> out;
  for (const auto& c : cs) out.push_back(&c);
  return out;
}

TEST(Precision, EachGroupAgainstItsWidestCase) {
  std::vector<case_record> cs = {decode_case("1", "fp8_e4m3", "bf16", "bf16", 400),
                                 decode_case("1", "bf16", "bf16", "bf16", 250),
                                 decode_case("1", "fp8_e4m3", "fp8_e4m3", "bf16", 420),
                                 decode_case("64", "bf16", "bf16", "bf16", 10000),
                                 decode_case("64", "fp8_e4m3", "bf16", "bf16", 15000),
                                 decode_case("8", "bf16", "bf16", "bf16", 2000),
                                 decode_case("8", "fp8_e4m3", "bf16", "bf16", 3000)};
  cs[0].metrics.push_back({"quality/logits_rel_error", 0.02, "ratio"});
  cs[0].metrics.push_back({"quality/top1_agreement", 0.97, "ratio"});
  cs[0].details["quality.reference"] = "bf16 weights on the cuda engine";
  cs[6].status = case_status::failed;  // batch 8's bf16 case is then alone: no group
  const auto rows = precision_speedups(pointers(cs));
  ASSERT_EQ(rows.size(), 5u);
  // Batch 1: the bf16 case first (the reference), then the others in the cases' order.
  EXPECT_TRUE(rows[0].reference);
  EXPECT_EQ(rows[0].rec, &cs[1]);
  EXPECT_EQ(rows[0].precision, "weights=bf16 kv=bf16 compute=bf16");
  EXPECT_EQ(rows[0].label, "batch=1");
  EXPECT_DOUBLE_EQ(rows[0].speedup, 1.0);
  EXPECT_EQ(rows[1].rec, &cs[0]);
  EXPECT_FALSE(rows[1].reference);
  EXPECT_DOUBLE_EQ(rows[1].speedup, 1.6);
  ASSERT_TRUE(rows[1].logits_rel_error && rows[1].top1_agreement && rows[1].tpot_s);
  EXPECT_DOUBLE_EQ(*rows[1].logits_rel_error, 0.02);
  EXPECT_DOUBLE_EQ(*rows[1].top1_agreement, 0.97);
  EXPECT_DOUBLE_EQ(*rows[1].tpot_s, 1.0 / 400);
  EXPECT_EQ(rows[1].quality_against, "bf16 weights on the cuda engine");
  EXPECT_EQ(rows[2].rec, &cs[2]);
  EXPECT_DOUBLE_EQ(rows[2].speedup, 420.0 / 250);
  EXPECT_FALSE(rows[2].logits_rel_error.has_value());
  // Batch 64: its own reference.
  EXPECT_EQ(rows[3].rec, &cs[3]);
  EXPECT_TRUE(rows[3].reference);
  EXPECT_EQ(rows[3].label, "batch=64");
  EXPECT_DOUBLE_EQ(rows[4].speedup, 1.5);
  EXPECT_NE(rows[3].key, rows[0].key);
}

// The llm workload's lm_head axis is a precision axis: an fp8 LM head's case sits in the group of
// the bf16 case it is measured against, which stays the reference (16bit: two bytes).
TEST(Precision, LmHeadIsAPrecisionAxis) {
  std::vector<case_record> cs = {decode_case("1", "fp8_e4m3", "bf16", "bf16", 417),
                                 decode_case("1", "fp8_e4m3", "bf16", "bf16", 399),
                                 decode_case("1", "bf16", "bf16", "bf16", 253)};
  cs[0].axes.push_back({"lm_head", "fp8_e4m3"});
  cs[1].axes.push_back({"lm_head", "16bit"});
  cs[2].axes.push_back({"lm_head", "16bit"});
  const auto rows = precision_speedups(pointers(cs));
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].rec, &cs[2]);
  EXPECT_EQ(rows[0].precision, "weights=bf16 lm_head=16bit kv=bf16 compute=bf16");
  EXPECT_EQ(rows[1].rec, &cs[0]);
  EXPECT_EQ(rows[1].precision, "weights=fp8_e4m3 lm_head=fp8_e4m3 kv=bf16 compute=bf16");
  EXPECT_DOUBLE_EQ(rows[1].speedup, 417.0 / 253);
  EXPECT_DOUBLE_EQ(rows[2].speedup, 399.0 / 253);
  EXPECT_EQ(rows[0].label, "llm");
  // Among fp8 weights alone the 16-bit LM head is the reference, wherever it is listed.
  std::vector<case_record> fp8_only = {cs[0], cs[1]};
  const auto two = precision_speedups(pointers(fp8_only));
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].rec, &fp8_only[1]);
  EXPECT_TRUE(two[0].reference);
  EXPECT_DOUBLE_EQ(two[1].speedup, 417.0 / 399);
}

TEST(Precision, TheReferenceIsTheWidestWeightsThenCacheThenBf16Compute) {
  {
    const std::vector<case_record> cs = {decode_case("1", "bf16", "bf16", "fp16", 260),
                                         decode_case("1", "bf16", "bf16", "bf16", 250)};
    const auto rows = precision_speedups(pointers(cs));
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_EQ(rows[0].rec, &cs[1]) << "bf16 compute before fp16 at equal widths";
    EXPECT_DOUBLE_EQ(rows[1].speedup, 1.04);
    EXPECT_EQ(rows[0].label, "llm") << "no other axis varies: the workload names the group";
  }
  {
    const std::vector<case_record> cs = {decode_case("1", "bf16", "fp8_e4m3", "bf16", 300),
                                         decode_case("1", "fp32", "fp8_e4m3", "bf16", 100),
                                         decode_case("1", "fp8_e4m3", "bf16", "bf16", 500)};
    const auto rows = precision_speedups(pointers(cs));
    ASSERT_EQ(rows.size(), 3u);
    EXPECT_EQ(rows[0].rec, &cs[1]) << "fp32 weights are the widest, whatever the cache";
    EXPECT_DOUBLE_EQ(rows[1].speedup, 3.0);
    EXPECT_DOUBLE_EQ(rows[2].speedup, 5.0);
  }
  {
    const std::vector<case_record> cs = {decode_case("1", "fp8_e4m3", "fp8_e4m3", "bf16", 420),
                                         decode_case("1", "fp8_e4m3", "bf16", "bf16", 400)};
    const auto rows = precision_speedups(pointers(cs));
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_EQ(rows[0].rec, &cs[1]) << "at equal weights the wider cache";
  }
}

TEST(Precision, CasesWithoutARateOrPrecisionAxesAreLeftOut) {
  std::vector<case_record> cs = {decode_case("1", "bf16", "bf16", "bf16", 250), decode_case("1", "fp8_e4m3", "bf16", "bf16", 0)};
  EXPECT_TRUE(precision_speedups(pointers(cs)).empty()) << "a zero rate divides nothing";
  case_record gemm;
  gemm.workload = "gemm";
  gemm.axes = {{"M", "1024"}};
  gemm.metrics = {{"throughput/decode_tokens_per_s", 1, "tokens/s"}};
  case_record gemm2 = gemm;
  gemm2.axes = {{"M", "2048"}};
  EXPECT_TRUE(precision_speedups({&gemm, &gemm2}).empty());
}

result_set run_of(std::vector<case_record> cases) {
  result_set set;
  set.source = "sweep";
  set.context.backend = "cuda";
  set.cases = std::move(cases);
  return set;
}

TEST(Precision, TheMarkdownReportDividesOnlyWithinARun) {
  std::ostringstream one;
  write_results(one, output_format::md,
                {run_of({decode_case("1", "bf16", "bf16", "bf16", 250), decode_case("1", "fp8_e4m3", "bf16", "bf16", 400)})});
  const std::string md = one.str();
  const auto at = md.find("Precision against speed");
  ASSERT_NE(at, std::string::npos) << md;
  const std::string table = md.substr(at);
  EXPECT_NE(table.find("weights=bf16 kv=bf16 compute=bf16 (reference)"), std::string::npos) << table;
  const auto fp8 = table.find("weights=fp8_e4m3 kv=bf16 compute=bf16 ");
  ASSERT_NE(fp8, std::string::npos) << table;
  EXPECT_NE(table.find("1.600x", fp8), std::string::npos) << table;
  EXPECT_NE(table.find("2.50 ms", fp8), std::string::npos) << "TPOT: " << table;

  // The same two cases as two runs (two machines, say): nothing divided.
  std::ostringstream two;
  write_results(two, output_format::md,
                {run_of({decode_case("1", "bf16", "bf16", "bf16", 250)}), run_of({decode_case("1", "fp8_e4m3", "bf16", "bf16", 400)})});
  EXPECT_EQ(two.str().find("Precision against speed"), std::string::npos) << two.str();
}

}  // namespace
