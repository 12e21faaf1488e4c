#pragma once
// Precision against speed (DESIGN.md R6, R10; docs/report.md, "Precision against speed"): the
// cases of one run that differ only in their precision axes (weights, lm_head, kv, compute), each
// case's decode rate against its group's reference case, beside the quality figures the case
// measured.
// Rates from one run only: the same binary's decode step differs by up to 17% between fresh H200
// machines (docs/perf/2026-11-30-decode-step-4.md), so a speed-up across runs would measure the
// machines.
#include <optional>
#include <string>
#include <vector>

#include "itera/core/result.hpp"

namespace itera {

struct precision_row {
  std::string key;        // the group: the workload and every other axis, "llm k=v k=v"
  std::string label;      // the axes besides precision that vary between the cases, or the workload
  std::string precision;  // the case's precision axes, "weights=fp8_e4m3 kv=bf16 compute=bf16"
  const case_record* rec = nullptr;
  bool reference = false;  // the group's reference (speedup 1)
  double rate = 0;         // throughput/decode_tokens_per_s
  std::optional<double> tpot_s;
  double speedup = 1;      // rate over the reference's
  std::optional<double> logits_rel_error, top1_agreement;  // quality/*: against quality_against
  std::string quality_against;                              // the case's detail quality.reference
};

// The precision axes' names, in the order a row's label lists them.
const std::vector<std::string>& precision_axes();

// Groups of two or more ok cases with a decode rate (throughput/decode_tokens_per_s) that agree on
// every axis but the precision axes. The reference of a group is its widest case: the most bytes
// a weight, then an LM head's weight, then a cached value, then bf16 compute before fp16 (the
// storage a 16-bit checkpoint runs in). Rows in the cases' order, each group's reference first.
std::vector<precision_row> precision_speedups(const std::vector<const case_record*>& cases);

}  // namespace itera
