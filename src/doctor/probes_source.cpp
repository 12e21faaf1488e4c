// The doctor's probe program, compiled in: probes.py is at once a Python file and the body of this
// raw string literal (see its first lines), so the build tracks it like a header and the binary
// carries the probes wherever it goes.
#include "itera/doctor/doctor.hpp"

namespace itera::doctor {

namespace {
constexpr std::string_view source =
#include "probes.py"
    ;
}  // namespace

std::string_view probes_source() {
  // Starts with the newline that ends the opening delimiter's line (line 4 of probes.py).
  return source;
}

}  // namespace itera::doctor
