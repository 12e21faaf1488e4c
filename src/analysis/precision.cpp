// Precision against speed within one run: include/itera/analysis/precision.hpp.
#include "itera/analysis/precision.hpp"

#include <algorithm>
#include <map>
#include <tuple>

namespace itera {
namespace {

bool is_precision_axis(const std::string& name) {
  const auto& p = precision_axes();
  return std::find(p.begin(), p.end(), name) != p.end();
}

// Bytes a value of the named storage type; 0 where the name is not one. "16bit": the llm
// workload's LM head in the weights' 16-bit type.
int bytes_of(const std::string* type) {
  if (!type) return 0;
  if (*type == "fp32") return 4;
  if (*type == "bf16" || *type == "fp16" || *type == "16bit") return 2;
  if (type->rfind("fp8", 0) == 0) return 1;
  return 0;
}

// Wider first: more bytes a weight, then an LM head's weight, then a cached value, then bf16
// compute before the others.
std::tuple<int, int, int, int> width_of(const case_record& r) {
  const std::string* compute = r.find_axis("compute");
  return {bytes_of(r.find_axis("weights")), bytes_of(r.find_axis("lm_head")), bytes_of(r.find_axis("kv")),
          compute && *compute == "bf16" ? 1 : 0};
}

std::optional<double> metric_of(const case_record& r, const std::string& name) {
  if (const metric* m = r.find_metric(name)) return m->value;
  return std::nullopt;
}

}  // namespace

const std::vector<std::string>& precision_axes() {
  static const std::vector<std::string> names = {"weights", "lm_head", "kv", "compute"};
  return names;
}

std::vector<precision_row> precision_speedups(const std::vector<const case_record*>& cases) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<precision_row>> groups;
  for (const auto* r : cases) {
    const auto rate = metric_of(*r, "throughput/decode_tokens_per_s");
    if (r->status != case_status::ok || !rate || *rate <= 0) continue;
    precision_row row;
    row.rec = r;
    row.rate = *rate;
    row.tpot_s = metric_of(*r, "latency/tpot");
    row.logits_rel_error = metric_of(*r, "quality/logits_rel_error");
    row.top1_agreement = metric_of(*r, "quality/top1_agreement");
    if (auto it = r->details.find("quality.reference"); it != r->details.end()) row.quality_against = it->second;
    for (const auto& name : precision_axes())
      if (const std::string* v = r->find_axis(name)) row.precision += (row.precision.empty() ? "" : " ") + name + "=" + *v;
    if (row.precision.empty()) continue;
    row.key = r->workload;
    for (const auto& [name, value] : r->axes)
      if (!is_precision_axis(name)) row.key += " " + name + "=" + value;
    auto [it, fresh] = groups.try_emplace(row.key);
    if (fresh) order.push_back(row.key);
    it->second.push_back(std::move(row));
  }
  // The label: the axes besides precision whose values differ between the cases with a rate.
  std::map<std::string, std::string> first_value;
  std::map<std::string, bool> varies;
  for (const auto& key : order)
    for (const auto& row : groups[key])
      for (const auto& [name, value] : row.rec->axes) {
        if (is_precision_axis(name)) continue;
        auto [it, fresh] = first_value.try_emplace(name, value);
        if (!fresh && it->second != value) varies[name] = true;
      }
  std::vector<precision_row> out;
  for (const auto& key : order) {
    for (auto& row : groups[key]) {
      row.label.clear();
      for (const auto& [name, value] : row.rec->axes)
        if (varies[name]) row.label += (row.label.empty() ? "" : " ") + name + "=" + value;
      if (row.label.empty()) row.label = row.rec->workload;
    }
    auto& g = groups[key];
    if (g.size() < 2) continue;
    // The widest case; the first of equals.
    std::size_t ref = 0;
    for (std::size_t i = 1; i < g.size(); ++i)
      if (width_of(*g[i].rec) > width_of(*g[ref].rec)) ref = i;
    g[ref].reference = true;
    const double base = g[ref].rate;
    out.push_back(g[ref]);
    for (std::size_t i = 0; i < g.size(); ++i) {
      g[i].speedup = g[i].rate / base;
      if (i != ref) out.push_back(g[i]);
    }
  }
  return out;
}

}  // namespace itera
