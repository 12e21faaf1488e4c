#include "src/report/text_format.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace itera::report {

namespace {

// Rounds to 3 significant digits first, so the choice of decimals (and of unit) is made on the
// value that will be printed: 999.7 ns prints as "1.00 us", not "1000 ns".
double round3(double v) {
  if (v == 0 || !std::isfinite(v)) return v;
  return std::stod(fmt::format("{:.2e}", v));
}

std::size_t display_width(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++n;  // count UTF-8 code points, not bytes ("±")
  return n;
}

}  // namespace

std::string sig3(double v) {
  if (!std::isfinite(v)) return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
  const double r = round3(v);
  const double a = std::fabs(r);
  if (a == 0) return "0";
  if (a >= 100) return fmt::format("{:.0f}", r);
  if (a >= 10) return fmt::format("{:.1f}", r);
  if (a >= 1) return fmt::format("{:.2f}", r);
  return fmt::format("{:.3g}", r);
}

std::string human_time_ns(double ns) {
  if (!std::isfinite(ns)) return "-";
  const double r = std::fabs(round3(ns));
  if (r < 1e3) return sig3(ns) + " ns";
  if (r < 1e6) return sig3(ns / 1e3) + " us";
  if (r < 1e9) return sig3(ns / 1e6) + " ms";
  return sig3(ns / 1e9) + " s";
}

std::string human_bytes(double b) {
  const double a = std::fabs(b);
  if (a < 1024) return fmt::format("{:.0f} B", b);
  if (a < 1024.0 * 1024) return sig3(b / 1024) + " KiB";
  if (a < 1024.0 * 1024 * 1024) return sig3(b / (1024.0 * 1024)) + " MiB";
  return sig3(b / (1024.0 * 1024 * 1024)) + " GiB";
}

// TFLOP/s is the unit of GPUs; GFLOP/s appears only for the cpu backend.
std::string human_rate(double v, const std::string& unit) {
  if (unit == "B/s") return v >= 1e12 ? sig3(v / 1e12) + " TB/s" : sig3(v / 1e9) + " GB/s";
  if (unit == "FLOP/s") return v >= 1e12 ? sig3(v / 1e12) + " TFLOP/s" : sig3(v / 1e9) + " GFLOP/s";
  return unit.empty() ? sig3(v) : sig3(v) + " " + unit;
}

std::string exact(double v) { return fmt::format("{}", v); }

std::string joined(const std::vector<std::string>& items, const char* separator) {
  std::string s;
  for (const auto& x : items) s += (s.empty() ? "" : separator) + x;
  return s;
}

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 16);
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string short_commit(const std::string& commit) {
  // The hash's first 12 characters; a build from a modified tree keeps its "-dirty" (build_info.cmake),
  // which the cut would otherwise drop from every report of its results.
  constexpr std::string_view dirty = "-dirty";
  const bool modified = commit.size() > dirty.size() && commit.ends_with(dirty);
  const std::string hash = modified ? commit.substr(0, commit.size() - dirty.size()) : commit;
  return (hash.size() > 12 ? hash.substr(0, 12) : hash) + (modified ? std::string(dirty) : "");
}

std::string string_at(const ojson& obj, std::initializer_list<const char*> keys) {
  if (!obj.is_object()) return "";
  for (const char* k : keys) {
    auto it = obj.find(k);
    if (it == obj.end() || it->is_null() || it->is_object() || it->is_array()) continue;
    std::string s = it->is_string() ? it->get<std::string>()
                                    : it->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (!s.empty()) return s;
  }
  return "";
}

std::string variant_name(const ojson& device) {
  if (!device.is_object()) return "";
  auto it = device.find("variant");
  if (it == device.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  return string_at(*it, {"name", "id"});
}

std::string cpu_name(const ojson& host) { return string_at(host, {"cpu_model", "cpu", "model_name", "model"}); }

std::string md_cell(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (c == '|') r += "\\|";
    else if (c == '\n' || c == '\r') r += ' ';
    else r += c;
  }
  return r;
}

void md_table::column(std::string name, bool numeric) {
  header.push_back(std::move(name));
  right.push_back(numeric);
}

void md_table::write(std::ostream& out) const {
  std::vector<std::size_t> w(header.size(), 3);
  for (std::size_t i = 0; i < header.size(); ++i) w[i] = std::max(w[i], display_width(md_cell(header[i])));
  for (const auto& row : rows)
    for (std::size_t i = 0; i < row.size() && i < w.size(); ++i) w[i] = std::max(w[i], display_width(md_cell(row[i])));
  auto line = [&](const std::vector<std::string>& cells) {
    out << '|';
    for (std::size_t i = 0; i < header.size(); ++i) {
      const std::string c = i < cells.size() ? md_cell(cells[i]) : std::string();
      const std::string pad(w[i] - display_width(c), ' ');
      out << ' ' << (right[i] ? pad + c : c + pad) << " |";
    }
    out << '\n';
  };
  line(header);
  out << '|';
  for (std::size_t i = 0; i < header.size(); ++i)
    out << ' ' << (right[i] ? std::string(w[i] - 1, '-') + ":" : std::string(w[i], '-')) << " |";
  out << '\n';
  for (const auto& row : rows) line(row);
}

void write_list(std::ostream& out, const std::string& title, const std::vector<std::string>& items) {
  if (items.empty()) return;
  out << title << "\n\n";
  for (const auto& s : items) out << "- " << md_cell(s) << '\n';
  out << '\n';
}

void write_document(std::ostream& out, std::string text) {
  while (!text.empty() && text.back() == '\n') text.pop_back();
  out << text << '\n';
}

const std::vector<table_column>& precision_columns() {
  static const std::vector<table_column> columns = {
      {"precision", false},       {"decode tokens/s", true}, {"TPOT", true}, {"speed-up", true},
      {"logits rel. error", true}, {"top-1 agreement", true}, {"quality against", false}};
  return columns;
}

std::vector<std::string> precision_cells(const precision_row& r) {
  const auto opt = [](const std::optional<double>& v) { return v ? sig3(*v) : std::string("-"); };
  return {r.precision + (r.reference ? " (reference)" : ""),
          sig3(r.rate),
          r.tpot_s ? human_time_ns(*r.tpot_s * 1e9) : "-",
          fmt::format("{:.3f}x", r.speedup),
          opt(r.logits_rel_error),
          opt(r.top1_agreement),
          r.quality_against.empty() ? "-" : r.quality_against};
}

}  // namespace itera::report
