#include <fmt/format.h>

#include "workloads/transfer/transfer.hpp"

namespace itera::transfer {

double pcie_bytes_per_s(int generation, int width) {
  // Per lane and direction: gen1 2.5 GT/s and gen2 5 GT/s with 8b/10b; gen3 8, gen4 16, gen5 32,
  // gen6 64 GT/s with 128b/130b (gen6 FLIT encoding is close to that). PCIe Base Specification.
  double per_lane = 0;
  switch (generation) {
    case 1: per_lane = 2.5e9 * 8 / 10 / 8; break;
    case 2: per_lane = 5e9 * 8 / 10 / 8; break;
    case 3: per_lane = 8e9 * 128 / 130 / 8; break;
    case 4: per_lane = 16e9 * 128 / 130 / 8; break;
    case 5: per_lane = 32e9 * 128 / 130 / 8; break;
    case 6: per_lane = 64e9 * 128 / 130 / 8; break;
    default: return 0;
  }
  return per_lane * width;
}

workload_decl declaration() {
  workload_decl w;
  w.name = "transfer";
  w.version = workload_version;
  w.summary = "host-to-device and device-to-host (pinned, pageable) and device-to-device copies; GB/s against the "
              "link and the measured copy ceiling";
  w.axes = {
      {"direction", axis_kind::string, "h2d,d2h,d2d", "copy direction", {"h2d", "d2h", "d2d"}, 0, 0},
      {"memory", axis_kind::string, "pinned,pageable,device",
       "host memory kind for h2d/d2h (pinned or pageable); device for d2d", {"pinned", "pageable", "device"}, 0, 0},
      {"bytes", axis_kind::integer, "1Mi,64Mi,1Gi", "bytes per copy", {}, 1, std::int64_t{1} << 40},
  };
  w.reject = [](const axis_values& c) -> std::string {
    std::string direction, memory;
    for (const auto& [k, v] : c) {
      if (k == "direction") direction = v;
      if (k == "memory") memory = v;
    }
    if (direction == "d2d" && memory != "device")
      return fmt::format("direction=d2d copies device memory to device memory; use memory=device (not {})", memory);
    if (direction != "d2d" && memory == "device")
      return fmt::format("direction={} copies between host and device; use memory=pinned or memory=pageable", direction);
    return {};
  };
  w.suite = [](const backend& dev) -> std::vector<axis_overrides> {
    if (dev.name() == "cpu") return {{{"bytes", "1Mi,64Mi"}}};
    return {{{"bytes", "1Mi,16Mi,256Mi,1Gi"}}};
  };
  return w;
}

}  // namespace itera::transfer
