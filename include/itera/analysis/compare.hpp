#pragma once
// The recipe gate (DESIGN.md, Definitions: Recipe). Two runs are compared only when their recipes
// agree; hardware differences alone make a GPU comparison. Any other difference refuses the
// comparison, listing the fields, unless each is named with --allow.
#include <string>
#include <vector>

#include "itera/core/result.hpp"

namespace itera {

struct field_diff {
  std::string field;   // "software.cublaslt", "case[gemm M=1024 ...].precision.output", "workload.gemm.version"
  std::string a, b;    // values, "(absent)" when missing on one side
  bool hardware = false;
  bool allowed = false;  // named with --allow
};

enum class verdict { faster, slower, same };
const char* to_string(verdict v);

struct case_comparison {
  std::string workload, axes_key;
  double a_median_ns = 0, b_median_ns = 0;
  double ratio = 0;       // b / a time: < 1 means B is faster
  double speedup = 0;     // a / b
  verdict result = verdict::same;
  std::string time_kind;  // "device" | "host"
};

struct comparison {
  std::vector<field_diff> diffs;           // every differing field
  bool refused = false;                    // a non-hardware diff not allowed
  std::vector<std::string> refused_fields; // those fields
  std::string hardware_note;               // "GPU comparison: NVIDIA H200 (A) vs NVIDIA H100 PCIe (B)"
  std::vector<case_comparison> cases;      // only when not refused
  // Matched cases not ok on both sides, so without times to compare (only when not refused):
  // "gemm M=8192 N=8192 K=8192 format=fp8_e4m3: A failed, B ok"
  std::vector<std::string> not_compared;
  std::vector<std::string> only_in_a, only_in_b;  // cases present on one side
};

// Field-level diff of the two recipes. `allow` names fields (exact, or a prefix ending in '*').
comparison compare_results(const result_set& a, const result_set& b, const std::vector<std::string>& allow);

// Same within noise when the two medians' 95% confidence intervals overlap; otherwise faster or slower.
verdict judge(const summary& a, const summary& b);

void write_comparison_markdown(std::ostream& out, const comparison& c, const result_set& a, const result_set& b);
void write_comparison_json(std::ostream& out, const comparison& c);

}  // namespace itera
