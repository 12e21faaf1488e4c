// Which moves the order lifecycle allows, to whom, and why not.
#include "itera/desk/lifecycle.hpp"

#include <array>

#include <fmt/format.h>

namespace itera::desk {

namespace {

struct edge {
  order_state from;
  order_state to;
  actor_kind who;   // the one actor allowed (expiry: system or operator, listed twice)
};

constexpr std::array<edge, 9> edges = {{
    {order_state::created, order_state::awaiting_payment, actor_kind::system},
    {order_state::awaiting_payment, order_state::payment_reported, actor_kind::customer},
    {order_state::awaiting_payment, order_state::expired, actor_kind::system},
    {order_state::awaiting_payment, order_state::expired, actor_kind::operator_},
    {order_state::payment_reported, order_state::paid, actor_kind::operator_},
    {order_state::payment_reported, order_state::rejected, actor_kind::operator_},
    {order_state::paid, order_state::provisioning, actor_kind::operator_},
    {order_state::provisioning, order_state::active, actor_kind::operator_},
    {order_state::active, order_state::ended, actor_kind::operator_},
}};

constexpr std::array<std::string_view, 9> state_names = {
    "created", "awaiting_payment", "payment_reported", "paid", "rejected", "expired", "provisioning", "active", "ended"};

// Order of the states along the main path, to tell "already past this" from "not there yet".
int rank(order_state s) {
  switch (s) {
    case order_state::created: return 0;
    case order_state::awaiting_payment: return 1;
    case order_state::payment_reported: return 2;
    case order_state::paid: return 3;
    case order_state::provisioning: return 4;
    case order_state::active: return 5;
    case order_state::ended: return 6;
    case order_state::rejected:
    case order_state::expired: return 7;
  }
  return 0;
}

}  // namespace

std::string_view to_string(order_state s) { return state_names[static_cast<std::size_t>(s)]; }

std::optional<order_state> parse_state(std::string_view s) {
  for (std::size_t i = 0; i < state_names.size(); ++i) {
    if (state_names[i] == s) return static_cast<order_state>(i);
  }
  return std::nullopt;
}

std::string_view to_string(actor_kind a) {
  switch (a) {
    case actor_kind::system: return "system";
    case actor_kind::customer: return "customer";
    case actor_kind::operator_: return "operator";
  }
  return "?";
}

const std::vector<order_state>& all_states() {
  static const std::vector<order_state> states = {
      order_state::created, order_state::awaiting_payment, order_state::payment_reported, order_state::paid,
      order_state::rejected, order_state::expired, order_state::provisioning, order_state::active, order_state::ended};
  return states;
}

bool is_closed(order_state s) { return s == order_state::rejected || s == order_state::expired || s == order_state::ended; }

transition_check check_transition(order_state from, order_state to, actor_kind actor, std::int64_t now_ms,
                                  std::int64_t expires_at_ms) {
  transition_check r;
  // "I paid" again, or later in the order's life: nothing to do, and not an error.
  if (actor == actor_kind::customer && to == order_state::payment_reported && !is_closed(from) &&
      rank(from) >= rank(order_state::payment_reported)) {
    r.allowed = true;
    r.no_change = true;
    return r;
  }
  if (from == to) {
    r.reason = fmt::format("the order is already {}", to_string(to));
    return r;
  }
  if (is_closed(from)) {
    r.reason = fmt::format("the order is {}; no transition leaves that state", to_string(from));
    return r;
  }
  bool edge_exists = false;
  bool actor_ok = false;
  for (const auto& e : edges) {
    if (e.from == from && e.to == to) {
      edge_exists = true;
      actor_ok = actor_ok || e.who == actor;
    }
  }
  if (!edge_exists) {
    r.reason = fmt::format("an order cannot go from {} to {}", to_string(from), to_string(to));
    return r;
  }
  if (!actor_ok) {
    r.reason = fmt::format("the {} cannot move an order from {} to {}", to_string(actor), to_string(from), to_string(to));
    return r;
  }
  if (to == order_state::payment_reported && now_ms >= expires_at_ms) {
    r.reason = "the payment window has closed; this order has expired";
    return r;
  }
  if (to == order_state::expired && now_ms < expires_at_ms) {
    r.reason = "the payment window is still open";
    return r;
  }
  r.allowed = true;
  return r;
}

std::vector<order_state> next_states(order_state from, actor_kind actor, std::int64_t now_ms, std::int64_t expires_at_ms) {
  std::vector<order_state> out;
  for (const auto& e : edges) {
    if (e.from == from && e.who == actor && check_transition(from, e.to, actor, now_ms, expires_at_ms).allowed) {
      out.push_back(e.to);
    }
  }
  return out;
}

}  // namespace itera::desk
