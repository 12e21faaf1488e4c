#include "itera/core/workload.hpp"

#include <algorithm>
#include <charconv>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "itera/core/errors.hpp"

namespace itera {

void workload_registry::add(workload_decl decl) {
  if (find(decl.name)) throw std::logic_error("workload registered twice: " + decl.name);
  m_workloads.push_back(std::move(decl));
}

const workload_decl* workload_registry::find(std::string_view name) const {
  for (const auto& w : m_workloads)
    if (w.name == name) return &w;
  return nullptr;
}

const workload_decl& workload_registry::get(std::string_view name) const {
  if (const auto* w = find(name)) return *w;
  std::vector<std::string> names;
  for (const auto& w : m_workloads) names.push_back(w.name);
  throw usage_error(fmt::format("unknown workload '{}': choose one of {} (`itera list` shows their axes)", name,
                                fmt::join(names, ", ")));
}

namespace {

constexpr const char* integer_syntax =
    "a list like 1024,2048, a range FIRST-LAST (step 1), FIRST-LAST+STEP or FIRST-LAST*FACTOR, "
    "with optional suffix k/M/G (x1000) or Ki/Mi/Gi (x1024)";

std::int64_t parse_integer(const axis_decl& axis, std::string_view text) {
  std::int64_t value = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr == begin)
    throw usage_error(fmt::format("axis {}: '{}' is not a whole number; write {}", axis.name, text, integer_syntax));
  const std::string_view suffix(ptr, static_cast<std::size_t>(end - ptr));
  std::int64_t scale = 1;
  if (suffix.empty()) scale = 1;
  else if (suffix == "k" || suffix == "K") scale = 1000;
  else if (suffix == "M") scale = 1000 * 1000;
  else if (suffix == "G") scale = 1000 * 1000 * 1000;
  else if (suffix == "Ki") scale = 1024;
  else if (suffix == "Mi") scale = 1024 * 1024;
  else if (suffix == "Gi") scale = 1024 * 1024 * 1024;
  else
    throw usage_error(fmt::format("axis {}: unknown suffix '{}' in '{}'; use k, M, G (x1000) or Ki, Mi, Gi (x1024)",
                                  axis.name, suffix, text));
  if (value > std::numeric_limits<std::int64_t>::max() / scale || value < std::numeric_limits<std::int64_t>::min() / scale)
    throw usage_error(fmt::format("axis {}: '{}' is out of range", axis.name, text));
  value *= scale;
  if (value < axis.min_value || value > axis.max_value)
    throw usage_error(fmt::format("axis {}: {} is out of range; accepted {} to {}", axis.name, value, axis.min_value,
                                  axis.max_value));
  return value;
}

void append_range(const axis_decl& axis, std::string_view item, std::vector<std::string>& out) {
  // FIRST-LAST[+STEP|*FACTOR]; the '-' separating the bounds is the first one after a digit.
  const auto dash = item.find('-', 1);
  if (dash == std::string_view::npos) {
    out.push_back(std::to_string(parse_integer(axis, item)));
    return;
  }
  const std::string_view first_text = item.substr(0, dash);
  std::string_view rest = item.substr(dash + 1);
  char op = '+';
  std::string_view step_text = "1";
  if (const auto at = rest.find_first_of("+*"); at != std::string_view::npos) {
    op = rest[at];
    step_text = rest.substr(at + 1);
    rest = rest.substr(0, at);
  }
  const std::int64_t first = parse_integer(axis, first_text);
  const std::int64_t last = parse_integer(axis, rest);
  std::int64_t step = 0;
  {
    auto [ptr, ec] = std::from_chars(step_text.data(), step_text.data() + step_text.size(), step);
    if (ec != std::errc() || ptr != step_text.data() + step_text.size() || step < (op == '*' ? 2 : 1))
      throw usage_error(fmt::format("axis {}: bad step '{}' in '{}'; write {}", axis.name, step_text, item,
                                    integer_syntax));
  }
  if (last < first)
    throw usage_error(fmt::format("axis {}: range '{}' runs backwards ({} > {})", axis.name, item, first, last));
  constexpr std::size_t max_values = 4096;
  for (std::int64_t v = first; v <= last;) {
    out.push_back(std::to_string(v));
    if (out.size() > max_values)
      throw usage_error(fmt::format("axis {}: '{}' expands to more than {} values", axis.name, item, max_values));
    if (op == '+') {
      if (v > last - step) break;
      v += step;
    } else {
      if (v > last / step) break;
      v *= step;
    }
  }
}

}  // namespace

std::vector<std::string> parse_axis_values(const axis_decl& axis, const std::string& spec) {
  if (spec.empty()) throw usage_error(fmt::format("axis {}: no values given; write {}=V1,V2,...", axis.name, axis.name));
  std::vector<std::string> out;
  std::string_view rest(spec);
  while (true) {
    const auto comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    if (item.empty())
      throw usage_error(fmt::format("axis {}: empty value in '{}'", axis.name, spec));
    if (axis.kind == axis_kind::integer) {
      append_range(axis, item, out);
    } else {
      const std::string value(item);
      if (!axis.choices.empty() && std::find(axis.choices.begin(), axis.choices.end(), value) == axis.choices.end())
        throw usage_error(fmt::format("axis {}: unknown value '{}'; choose from {}", axis.name, value,
                                      fmt::join(axis.choices, ", ")));
      out.push_back(value);
    }
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return out;
}

std::vector<axis_values> expand_cases(const workload_decl& w, const axis_overrides& overrides) {
  std::vector<std::vector<std::string>> values;
  for (const auto& axis : w.axes) values.push_back(parse_axis_values(axis, axis.defaults));
  for (const auto& [name, spec] : overrides) {
    const auto it = std::find_if(w.axes.begin(), w.axes.end(), [&](const axis_decl& a) { return a.name == name; });
    if (it == w.axes.end()) {
      std::vector<std::string> names;
      for (const auto& a : w.axes) names.push_back(a.name);
      throw usage_error(fmt::format("workload {} has no axis '{}'; its axes are {}", w.name, name, fmt::join(names, ", ")));
    }
    values[static_cast<std::size_t>(it - w.axes.begin())] = parse_axis_values(*it, spec);
  }
  // Cartesian product, first axis outermost (llama-bench order). Counted before it is built, so a
  // typo like M=1-4096 N=1-4096 is a usage error, not an exhausted memory.
  constexpr std::size_t max_cases = 100000;
  std::size_t product = 1;
  for (const auto& v : values) {
    product *= v.size();
    if (product > max_cases)
      throw usage_error(fmt::format("workload {}: the axes give more than {} cases; narrow a list or a range", w.name,
                                    max_cases));
  }
  std::vector<axis_values> cases{axis_values{}};
  for (std::size_t a = 0; a < w.axes.size(); ++a) {
    std::vector<axis_values> next;
    next.reserve(cases.size() * values[a].size());
    for (const auto& partial : cases)
      for (const auto& v : values[a]) {
        auto c = partial;
        c.emplace_back(w.axes[a].name, v);
        next.push_back(std::move(c));
      }
    cases = std::move(next);
  }
  if (w.reject) {
    std::string first_reason;
    std::erase_if(cases, [&](const axis_values& c) {
      auto why = w.reject(c);
      if (why.empty()) return false;
      if (first_reason.empty()) first_reason = std::move(why);
      return true;
    });
    if (cases.empty()) throw usage_error(fmt::format("workload {}: no valid case to run: {}", w.name, first_reason));
  }
  return cases;
}

}  // namespace itera
