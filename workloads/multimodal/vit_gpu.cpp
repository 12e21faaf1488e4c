// The host-only parts of vit_gpu.hpp (every build): how the engine names its stages.
#include "workloads/multimodal/vit_gpu.hpp"

#include <fmt/format.h>

#include "itera/core/errors.hpp"

namespace itera::mm {

std::string_view stage_names_name(vit_stage_names n) { return n == vit_stage_names::kinds ? "kinds" : "layers"; }

vit_stage_names parse_stage_names(std::string_view name) {
  if (name == "kinds") return vit_stage_names::kinds;
  if (name == "layers") return vit_stage_names::layers;
  throw usage_error(fmt::format("stage names '{}': choose kinds (one stage per kind, the layers summed: "
                                "layers/fc1) or layers (one stage per layer: layer.3.fc1)",
                                name));
}

std::string stage_path(const vit_stage& s, vit_stage_names names) {
  if (names == vit_stage_names::layers) return s.name;
  const std::string kind(stage_kind_name(s.kind));
  return s.layer >= 0 ? "layers/" + kind : kind;
}

}  // namespace itera::mm
