#pragma once
// Rental plan (DESIGN.md R15, R16; docs/analysis.md "Cost and plan"): the cheapest card per million
// output tokens (thousand images, training step: rates.hpp) whose memory holds the workload, the quantity that reaches a target throughput, the
// cost of renting it for 3, 7 and 30 days with the campaign each duration allows, and an order for
// the rental desk (POST /api/v1/orders, docs/desk.md).
#include <array>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "itera/analysis/cost.hpp"

namespace itera {

inline constexpr std::array<int, 3> rental_days = {3, 7, 30};  // the desk's durations

struct plan_options {
  std::optional<int> days;                  // 3, 7 or 30; default: chosen by the rule in docs/analysis.md
  int max_gpus = 8;                         // the desk's default limit per order
  std::optional<double> target_rate;        // the group's throughput over all GPUs (tokens/s, images/s, steps/s); default: quantity 1
  std::vector<std::string> group;           // "k=v" the plan's workload group must contain
  std::string network = "USDT-TRON";        // payment network id of the desk (its example config's first)
};

struct plan_candidate {
  cost_row row;
  bool eligible = false;
  std::string why_not;  // no price, no throughput, does not fit, needs more GPUs than allowed
  int quantity = 0;
  std::array<double, 3> rental_cost{};  // quantity x price x 24 x days, per rental_days
};

struct campaign {
  int days = 0;
  double rental_cost = 0;
  std::string plan;  // what those days are for (R15)
};

struct plan_report {
  cost_report cost;               // the cost analysis it rests on
  std::string group;              // the workload group planned for
  std::string scenario;
  std::vector<std::string> other_groups;  // groups not planned for (choose with --group)
  std::vector<plan_candidate> candidates;  // eligible first, cheapest first
  int chosen = -1, runner_up = -1;  // indices into candidates
  int days = 0;
  std::string days_reason;
  std::vector<campaign> campaigns;  // one per rental_days
  std::vector<std::string> reasons;
  std::optional<double> target_rate;
  rate_basis basis;               // the group's throughput and what its cost is per
  std::string workload;
  ojson order;                    // body of POST /api/v1/orders
  std::string email_placeholder;  // the order's email value, to be replaced
};

// Throws usage_error for bad options (days not 3/7/30, max_gpus < 1, target <= 0, a --group that
// matches nothing) and input_error when no card can be recommended (saying why for each).
plan_report make_plan(const std::vector<result_set>& sets, const catalogue& cat, const price_table& prices,
                      const plan_options& o);

void write_plan_markdown(std::ostream& out, const plan_report& p);
void write_plan_json(std::ostream& out, const plan_report& p);

}  // namespace itera
