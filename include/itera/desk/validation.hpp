#pragma once
// Validation of everything a customer or operator types. Each check returns an empty string when the
// value is acceptable, else the message shown beside the field.
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace itera::desk {

struct desk_config;
struct price_list;

// field name -> message, in form order.
using field_errors = std::map<std::string, std::string>;

// What the order form and POST /api/v1/orders carry. Numbers arrive as text from the form and are
// checked here too, so both front doors share one set of rules.
struct order_form {
  std::string gpu;
  std::string days;
  std::string quantity;
  std::string environment;
  std::string email;
  std::string messenger;   // optional
  std::string network;
};

// The validated order, ready to price.
struct order_input {
  std::string gpu;
  int days = 0;
  int quantity = 0;
  std::string environment;
  std::string email;
  std::string messenger;
  std::string network;
};

bool valid_utf8(std::string_view s);
// Plain text: valid UTF-8, no control characters (tab and newline refused too), no leading/trailing
// space. Used for free text fields.
bool plain_text(std::string_view s);

std::string check_email(std::string_view s);
std::string check_messenger(std::string_view s);
std::string check_environment(std::string_view s);
std::string check_tx_id(std::string_view s);
std::string check_note(std::string_view s);
// Integer in [lo, hi] written in plain decimal digits (no sign, spaces, leading zeros or exponent).
std::optional<int> parse_bounded_int(std::string_view s, int lo, int hi);

// Validates every field; `errors` gets one message per bad field. Returns the order when all pass.
std::optional<order_input> validate_order(const order_form& form, const desk_config& config,
                                          const price_list& prices, field_errors& errors);

// Idempotency keys (API header, hidden form field): 22-128 characters of [A-Za-z0-9_-], so that a
// key carries at least 128 bits when random, with at least 10 different characters (refuses plain
// repetition such as "aaaa..."; the desk cannot tell a random key from a guessable one beyond that).
bool valid_submission_key(std::string_view s);
// Order links: the 43-character base64url token the desk hands out.
bool valid_token(std::string_view s);
// Order references: "IT-" and 10 characters of Crockford base32.
bool valid_reference(std::string_view s);

}  // namespace itera::desk
