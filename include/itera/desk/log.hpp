#pragma once
// The desk's log: one line per event, to stderr unless a test installs its own sink. Callers pass
// only what is safe to keep (R18): method, route, status, references, counts. Never contact details,
// tokens, passwords or transaction ids.
#include <functional>
#include <string>

namespace itera::desk {

using log_sink = std::function<void(const std::string& line)>;
void set_log_sink(log_sink sink);  // empty: back to stderr
void log_line(const std::string& line);

}  // namespace itera::desk
