#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "itera/core/backend.hpp"
#include "itera/core/result.hpp"

namespace itera {

class case_state;

enum class axis_kind { integer, string };

// One axis of a workload. `defaults` uses the same list/range syntax as --axis (docs/cli.md).
struct axis_decl {
  std::string name;
  axis_kind kind = axis_kind::integer;
  std::string defaults;
  std::string help;
  std::vector<std::string> choices;  // string axes: the accepted values
  std::int64_t min_value = 1;        // integer axes: accepted range
  std::int64_t max_value = std::int64_t{1} << 50;
};

using axis_values = std::vector<std::pair<std::string, std::string>>;  // one case, declaration order
using axis_overrides = std::vector<std::pair<std::string, std::string>>;  // "NAME" -> spec
using case_fn = std::function<void(case_state&)>;

// A workload declares its axes and, per backend, a function that runs one case through case_state:
// it declares FLOPs and bytes, verifies against the reference, and hands its launch to exec().
// Nothing in a workload formats text.
struct workload_decl {
  std::string name;
  int version = 1;
  std::string summary;
  std::vector<axis_decl> axes;
  std::map<std::string, case_fn> backends;
  // What `itera run` measures, chosen from the device found: groups of axis overrides, each group
  // expanded as a product and the groups concatenated (so M=N=K can be tied). Unset: the defaults.
  std::function<std::vector<axis_overrides>(const backend&)> suite;
  // Combinations of axis values that mean nothing (a device-to-device copy from pageable memory):
  // returns why, and expand_cases leaves them out. Unset: every combination is valid.
  std::function<std::string(const axis_values&)> reject;
};

class workload_registry {
 public:
  void add(workload_decl decl);
  const workload_decl* find(std::string_view name) const;
  const workload_decl& get(std::string_view name) const;  // usage_error listing the known names
  const std::vector<workload_decl>& all() const { return m_workloads; }

 private:
  std::vector<workload_decl> m_workloads;
};

// Every built-in workload, with the backends compiled into this binary (workloads/registry.cpp).
const workload_registry& builtin_workloads();

// Parses one axis spec ("1024,2048", "256-4096*2", "1-9+4", "bf16,fp8_e4m3") against its declaration.
// Throws usage_error naming the axis, the bad value and the accepted syntax or choices.
std::vector<std::string> parse_axis_values(const axis_decl& axis, const std::string& spec);

// The product of the workload's axes: defaults, replaced by each "NAME=spec" override, less the
// combinations the workload rejects. Throws usage_error for an unknown axis (naming the workload's
// axes) and when every combination asked for is rejected (with the reason).
std::vector<axis_values> expand_cases(const workload_decl& w, const axis_overrides& overrides);

}  // namespace itera
