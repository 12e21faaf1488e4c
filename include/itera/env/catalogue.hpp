#pragma once
// The card catalogue: data/catalogue.json, one entry per card variant with its memory, bandwidth,
// dense peak per format, TDP, form factor, interconnect, architecture and the source of each figure.
// Later issues use it for projection, cost and the rental desk.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace itera {

struct catalogue_card {
  std::string id;              // "h100-sxm-80gb"
  std::string name;            // "NVIDIA H100 SXM 80GB"
  std::string architecture;    // "Hopper"
  int compute_capability = 0;  // x10: 90
  std::string form_factor;     // "SXM5", "PCIe", "NVL (PCIe)"
  double memory_gb = 0;
  std::string memory_type;
  double bandwidth_gbs = 0;
  double tdp_w = 0;
  std::string interconnect;    // "NVLink 4 900 GB/s; PCIe Gen5 x16"
  std::map<std::string, double> dense_tflops;  // "fp32", "tf32", "fp16", "bf16", "fp8_e4m3", "int8" (TOPS)
  std::vector<std::string> nvml_names;  // names NVML reports for it
  std::string source;          // datasheet citation
};

class catalogue {
 public:
  static const catalogue& builtin();  // data/catalogue.json, compiled into the binary at build time
  static catalogue from_json(const nlohmann::ordered_json& j);  // throws input_error when malformed
  const std::vector<catalogue_card>& cards() const { return m_cards; }
  const catalogue_card* find(const std::string& id) const;

  // Matches a device to the exact variant by NVML name, memory size and power limit (H100 PCIe vs
  // SXM vs NVL, A100 40 vs 80 GB, H200 SXM vs NVL). Returns nullptr with `why` set when nothing fits.
  const catalogue_card* match(const std::string& nvml_name, double memory_gib, double power_limit_w,
                              std::string* why = nullptr) const;

 private:
  std::vector<catalogue_card> m_cards;
};

}  // namespace itera
