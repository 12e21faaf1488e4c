// The desk's log lines (stderr, or a test's sink).
#include "itera/desk/log.hpp"

#include <cstdio>
#include <mutex>

namespace itera::desk {

namespace {
std::mutex g_mutex;
log_sink g_sink;
}  // namespace

void set_log_sink(log_sink sink) {
  std::lock_guard lock(g_mutex);
  g_sink = std::move(sink);
}

void log_line(const std::string& line) {
  std::lock_guard lock(g_mutex);
  if (g_sink) {
    g_sink(line);
    return;
  }
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fputc('\n', stderr);
}

}  // namespace itera::desk
