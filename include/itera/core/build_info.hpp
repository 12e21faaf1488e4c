#pragma once
#include <string_view>

namespace itera {

// Facts about this binary, fixed at configure time (cmake/build_info.cpp.in).
struct build_info {
  std::string_view version;
  std::string_view git_commit;
  std::string_view build_type;
  std::string_view compiler;
  bool cuda_enabled;
  std::string_view cuda_toolkit;        // empty without CUDA
  std::string_view cuda_architectures;  // CMAKE_CUDA_ARCHITECTURES, e.g. "80;89;90a"
};

const build_info& this_build();

}  // namespace itera
