#pragma once
// Message text for .cu files. They cannot include fmt: nvcc's front end rejects fmt 9's constexpr
// code in C++20 mode (Debian 12's libfmt-dev with CUDA 13.0), so they build messages with streams.
#include <cstdio>
#include <sstream>
#include <string>

namespace itera::cuda {

// Streams every part in turn: cat("M=", m, " needs ", what). Pass integers wider than a char.
template <typename... Parts>
std::string cat(const Parts&... parts) {
  std::ostringstream s;
  (s << ... << parts);
  return s.str();
}

// Three significant digits, as "%.3g": errors and tolerances in messages.
inline std::string sig3(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", v);
  return text;
}

}  // namespace itera::cuda
