#pragma once
// The throughputs a cost is per (docs/analysis.md "Cost and plan"): output tokens of a language
// model, images of a vision or multimodal pipeline, steps of a training run. A case's rate is the
// first of these metrics it carries; workloads and the user API name their throughput this way.
#include <string>
#include <vector>

#include "itera/core/result.hpp"

namespace itera {

struct rate_basis {
  std::string metric;       // "throughput/output_tokens_per_s"
  std::string rate_label;   // "output tokens/s"
  double per = 0;           // the amount a cost is quoted for, in the metric's items: 1e6 tokens
  std::string per_label;    // "million output tokens"
  std::string short_label;  // "M tokens", for table headers
};

// In order of precedence: tokens, images, training steps.
const std::vector<rate_basis>& rate_bases();

// The first basis whose metric `r` carries; nullptr when it carries none.
const rate_basis* rate_basis_of(const case_record& r);

// "throughput/output_tokens_per_s, throughput/images_per_s or throughput/steps_per_s", for errors.
std::string rate_metric_names();

}  // namespace itera
