#pragma once
// The order lifecycle, as a pure function: given an order's state, who asks, and the time, say
// whether a move is allowed and why not. Storage applies what this allows, nothing else.
//
//   created -> awaiting_payment -> payment_reported -> paid | rejected
//                               \-> expired (payment window over, nothing reported)
//   paid -> provisioning -> active -> ended
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace itera::desk {

enum class order_state { created, awaiting_payment, payment_reported, paid, rejected, expired, provisioning, active, ended };
enum class actor_kind { system, customer, operator_ };

std::string_view to_string(order_state s);
std::optional<order_state> parse_state(std::string_view s);
std::string_view to_string(actor_kind a);
const std::vector<order_state>& all_states();
bool is_closed(order_state s);   // rejected, expired, ended: no transition leaves them

struct transition_check {
  bool allowed = false;
  bool no_change = false;   // the order is already where the request would take it (idempotent)
  std::string reason;       // why not, when not allowed
};

// `expires_at_ms`: end of the payment window. `now_ms`: the time of the request.
transition_check check_transition(order_state from, order_state to, actor_kind actor,
                                  std::int64_t now_ms, std::int64_t expires_at_ms);
// The states an actor may move an order to from `from` (what the operator's buttons offer).
std::vector<order_state> next_states(order_state from, actor_kind actor, std::int64_t now_ms,
                                     std::int64_t expires_at_ms);

}  // namespace itera::desk
