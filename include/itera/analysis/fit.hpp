#pragma once
// Memory fit (DESIGN.md R5, R12; docs/analysis.md). From the measured peaks of a sweep, fit
//   peak = fixed + per_token x (batch x context) + per_sample x batch
// by least squares, check it on points left out of the fit, and predict the largest batch and
// context that fit each card size of the catalogue.
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "itera/core/result.hpp"
#include "itera/env/catalogue.hpp"

namespace itera {

// One case with a measured peak.
struct memory_point {
  std::string source;    // results file
  std::string case_key;  // the case's axes key
  double batch = 0, context = 0;  // sequences, tokens (prompt + output)
  double peak_bytes = 0;          // memory/measured_peak
  std::optional<double> plan_bytes;             // memory/plan/total: the workload's own plan
  std::optional<double> free_before_bytes;      // memory/free_before
  std::optional<double> workload_largest_batch; // memory/largest_batch: the plan's edge on that device
};

// Points sharing every memory-relevant axis but batch and context.
struct memory_group {
  std::string workload;
  std::string key;  // "model=llama-3.1-8b weights=bf16 ..."
  std::vector<memory_point> points;
};

// Cases of `workload` (all workloads when empty) that are ok and carry memory/measured_peak, grouped.
// For llm the axes that do not change memory (loop, seed, rate, requests, targets, prompts file)
// and the size axes (batch, prompt, output, context) are left out of the group key.
std::vector<memory_group> collect_memory_points(const std::vector<result_set>& sets, const std::string& workload);

struct memory_model {
  double fixed_bytes = 0, per_token_bytes = 0, per_sample_bytes = 0;
  double predict(double batch, double context) const {
    return fixed_bytes + per_token_bytes * batch * context + per_sample_bytes * batch;
  }
  // Largest whole batch at `context` (largest context at `batch`) whose prediction is at most
  // `usable_bytes`; 0 when none fits, -1 when unbounded (a non-positive marginal term).
  long long largest_batch(double context, double usable_bytes) const;
  long long largest_context(double batch, double usable_bytes) const;
};

inline constexpr std::size_t min_fit_combinations = 3;

// Least squares over the points. Throws input_error when fewer than 3 distinct (batch, context)
// combinations exist (saying how many are needed) or when they cannot separate the three terms
// (every point at one context, or one batch, or otherwise collinear).
memory_model fit_memory(const std::vector<memory_point>& points);

struct loo_check {
  double batch = 0, context = 0;
  double measured_bytes = 0;
  std::optional<double> predicted_bytes;  // absent when the rest could not be fitted
  std::optional<double> rel_error;        // |predicted - measured| / measured
  std::string why_not;                    // why it could not be tested
};

struct card_size_prediction {
  double memory_gb = 0;              // nominal, from the catalogue
  std::vector<std::string> card_ids;
  double usable_bytes = 0;           // memory_gb x 2^30 x (1 - reserve)
  std::vector<long long> largest_batch;    // one per measured context (fit_report::contexts)
  std::vector<long long> largest_context;  // one per measured batch (fit_report::batches)
};

struct fit_report {
  std::string workload, group;
  std::vector<memory_point> points;
  bool fitted = false;
  std::string why_not;  // when not fitted
  memory_model model;
  std::vector<loo_check> loo;  // one per distinct (batch, context)
  std::size_t loo_tested = 0;
  double loo_max_rel_error = 0, loo_mean_rel_error = 0;
  double plan_max_rel_error = -1;  // |plan - measured| / measured over points with a plan; -1 without
  std::vector<double> contexts, batches;  // distinct measured values, ascending
  double reserve_fraction = 0;
  std::vector<card_size_prediction> cards;
  // On the measured device: the fit's largest batch at its free memory against the workload's own.
  struct device_check {
    double context = 0, batch = 0, free_bytes = 0;
    long long fit_largest_batch = 0;
    double workload_largest_batch = 0;
  };
  std::vector<device_check> device;
};

struct fit_options {
  std::string workload = "llm";
  std::vector<std::string> cards;  // catalogue ids; empty: every card
  double reserve_fraction = 0.08;
};

// One report per group. Throws usage_error for an unknown card id and input_error when no group has
// a measured point.
std::vector<fit_report> analyse_memory(const std::vector<result_set>& sets, const catalogue& cat, const fit_options& o);

void write_fit_markdown(std::ostream& out, const std::vector<fit_report>& reports, const std::vector<result_set>& sets);
void write_fit_json(std::ostream& out, const std::vector<fit_report>& reports);

// Sets read together must share the recipe apart from their cases (the compare gate with
// "cases" and per-case fields allowed); throws input_error naming the refused fields.
void check_common_recipe(const std::vector<result_set>& sets);

}  // namespace itera

namespace itera::analysis {

// A markdown table for the analysis commands: cells padded so the raw text reads as a table,
// numeric columns right-aligned, '|' escaped.
struct text_table {
  std::vector<std::string> headers;
  std::vector<bool> right;
  std::vector<std::vector<std::string>> rows;
  void column(std::string name, bool numeric) {
    headers.push_back(std::move(name));
    right.push_back(numeric);
  }
  void write(std::ostream& out) const;
};

std::string gib_text(double bytes);         // "15.16 GiB"
std::string percent_text(double fraction);  // "1.23%"
std::string time_text(double ns);           // "4.41 ms", "807 us"
// The catalogue id of the card a results file was measured on (context.device.variant.id); empty
// when it has none (a cpu run, a card not in the catalogue).
std::string catalogue_id_of(const result_set& set);

}  // namespace itera::analysis
