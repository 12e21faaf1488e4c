#pragma once
// Projection to other cards (DESIGN.md R8; docs/analysis.md). Each stage of a measured case is
// classified compute- or bandwidth-bound by its arithmetic intensity against the source card's
// ridge point, and its time scaled by (source peak / target peak) of the binding resource;
// transfers scale by the PCIe link, host stages are not projected. Always labelled "projected".
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "itera/core/result.hpp"
#include "itera/env/catalogue.hpp"

namespace itera {

enum class stage_bound { compute, bandwidth, transfer, host, unknown };
const char* to_string(stage_bound b);

// PCIe bandwidth per direction from a catalogue interconnect text ("... PCIe Gen5 x16 128 GB/s"):
// generation x lanes x the per-lane rate after line coding. nullopt when the text names no PCIe link.
std::optional<double> pcie_bytes_per_s(const std::string& interconnect);

struct stage_work {
  std::string path;
  stage_bound bound = stage_bound::unknown;
  double time_ns = 0;       // measured per repetition (device time; host time for host stages)
  double flops = 0, bytes = 0;  // per repetition
  std::string work_source;  // "declared", "derived from throughput/prefill_flops", "remainder of the case's work", ""
  double intensity = 0;     // FLOP per byte; 0 without bytes
  std::string format;       // GEMM format whose peak bounds a compute stage
  double achieved = 0;      // FLOP/s or B/s of the binding resource
  double source_peak = 0;   // the binding resource's peak on the source card
  std::string source_peak_from;  // "measured ceiling gemm.bf16" | "catalogue"
};

struct stage_projection {
  double time_ns = 0;
  double target_peak = 0;
  std::string note;  // "fp8_e4m3 not on this card: bf16 peak"
};

struct card_projection {
  std::string card_id;
  bool is_source = false;
  std::vector<stage_projection> stages;  // parallel to case_projection::stages
  double case_time_ns = 0;
  std::optional<double> rate;  // the case's throughput (rate_metric) scaled by measured / projected case time
  bool fits = true;  // memory/measured_peak within the card's usable memory (nominal GiB less 8%)
};

struct case_projection {
  std::string workload, case_key;
  double measured_time_ns = 0;   // median per repetition
  std::string time_kind;         // "device" | "host"
  double unattributed_ns = 0;    // case time not covered by stages: carried over unchanged
  std::string rate_metric;             // rates.hpp: the case's throughput metric, empty without one
  std::string rate_label;              // "output tokens/s"
  std::optional<double> measured_rate;
  std::optional<double> measured_peak_bytes;  // memory/measured_peak
  std::vector<stage_work> stages;
  std::vector<card_projection> cards;
  // Validation on the source card itself: source from the measured ceilings, target from the
  // catalogue peaks of the same card. Error = projected / measured - 1, per stage and total.
  std::vector<double> self_error;  // parallel to stages (0 for host stages)
  double self_total_error = 0;
  std::vector<double> roofline_fraction;  // (work at catalogue peak) / measured time: the achieved fraction
};

struct projection_report {
  std::string source;        // results file
  std::string source_card;   // catalogue id
  std::vector<std::string> ceilings_used;  // measured ceilings found in the file
  std::vector<case_projection> cases;
  std::vector<std::string> not_projected;  // "llm <axes>: no stages with a device time"
};

struct projection_options {
  std::vector<std::string> cards;  // target ids; empty: every card
  std::string source_card;         // override the file's catalogue match
};

// Throws input_error when the file's device has no catalogue match (and no override) or no case
// can be projected; usage_error for an unknown card id.
projection_report project_results(const result_set& set, const catalogue& cat, const projection_options& o);

void write_projection_markdown(std::ostream& out, const projection_report& r, const catalogue& cat);
void write_projection_json(std::ostream& out, const projection_report& r);

}  // namespace itera

namespace itera {

// Validation of the projection against a measurement (docs/analysis.md "Validating the
// projection"): the cases of `source` projected onto the card `target` was measured on, beside
// `target`'s own measured times. `source` may be another card, or the same card deliberately
// limited (ITERA_CUDA_SM_LIMIT: the backend's stream on a green context with part of the SMs).
struct stage_check {
  std::string path;
  stage_bound bound = stage_bound::unknown;
  double projected_ns = 0, measured_ns = 0;
  double error = 0;  // projected / measured - 1
  // The same scaling to the target's own measured ceiling of the binding resource instead of its
  // datasheet peak: what is left is the scaling model's error alone. Absent without that ceiling.
  std::optional<double> at_ceilings_ns, at_ceilings_error;
};
struct case_check {
  std::string workload, case_key;
  double source_ns = 0;     // measured on the source, per repetition
  double projected_ns = 0;  // projected onto the target card
  double measured_ns = 0;   // measured on the target, per repetition
  double error = 0;         // projected / measured - 1
  std::optional<double> at_ceilings_ns, at_ceilings_error;  // stage_check's, over the case
  std::vector<stage_check> stages;  // stages both runs have, device-timed on the target
};
struct projection_validation {
  std::string source_file, target_file;
  std::string target_card;  // catalogue id the target ran on
  std::string source_device, target_device;  // "NVIDIA H200 (66 of 132 SMs)"
  std::vector<std::pair<std::string, std::pair<double, double>>> ceilings;  // key -> (source, target) measured
  std::vector<case_check> cases;
  std::vector<std::string> unmatched;  // source cases with no measured twin in the target
  double mean_abs_error = 0, max_abs_error = 0;
  std::optional<double> mean_abs_error_at_ceilings;
};

// Throws input_error when the target's device has no catalogue match or no case is in both runs.
projection_validation validate_projection(const result_set& source, const result_set& target, const catalogue& cat);
void write_validation_markdown(std::ostream& out, const projection_validation& v);
void write_validation_json(std::ostream& out, const projection_validation& v);

}  // namespace itera
