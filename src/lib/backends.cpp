#include <fmt/format.h>
#include <fmt/ranges.h>

#include "itera/core/backend.hpp"
#include "itera/core/errors.hpp"
#include "itera/cpu/cpu_backend.hpp"
#if ITERA_WITH_CUDA
#include "itera/cuda/cuda_backend.hpp"
#endif

namespace itera {

std::vector<backend_availability> available_backends() {
  std::vector<backend_availability> out;
#if ITERA_WITH_CUDA
  out.push_back(cuda_availability());
#else
  out.push_back({"cuda", false, false, "this binary was built without a CUDA toolkit"});
#endif
  out.push_back({"cpu", true, true, ""});
  return out;
}

std::string default_backend_name() {
  for (const auto& b : available_backends())
    if (b.name == "cuda" && b.usable) return "cuda";
  return "cpu";
}

std::unique_ptr<backend> open_backend(std::string_view name, int device_index) {
  if (name == "cpu") return make_cpu_backend();
  if (name == "cuda") {
    for (const auto& b : available_backends())
      if (b.name == "cuda" && !b.usable)
        throw usage_error(fmt::format("backend cuda is not usable here: {}; use --backend cpu", b.reason));
#if ITERA_WITH_CUDA
    return make_cuda_backend(device_index);
#endif
  }
  (void)device_index;
  throw usage_error(fmt::format("unknown backend '{}': choose cuda or cpu", name));
}

}  // namespace itera
