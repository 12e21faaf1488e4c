#include "itera/analysis/rates.hpp"

namespace itera {

const std::vector<rate_basis>& rate_bases() {
  static const std::vector<rate_basis> bases = {
      {"throughput/output_tokens_per_s", "output tokens/s", 1e6, "million output tokens", "M tokens"},
      {"throughput/images_per_s", "images/s", 1e3, "thousand images", "1k images"},
      {"throughput/steps_per_s", "steps/s", 1, "training step", "step"},
  };
  return bases;
}

const rate_basis* rate_basis_of(const case_record& r) {
  for (const auto& b : rate_bases())
    if (r.find_metric(b.metric)) return &b;
  return nullptr;
}

std::string rate_metric_names() {
  std::string s;
  const auto& b = rate_bases();
  for (std::size_t i = 0; i < b.size(); ++i) s += (i == 0 ? "" : i + 1 == b.size() ? " or " : ", ") + b[i].metric;
  return s;
}

}  // namespace itera
