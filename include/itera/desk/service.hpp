#pragma once
// What the desk does, without HTTP: take an order, price it, give payment instructions, record "I
// paid", let the operator move it on. The HTTP layer (server.hpp) and the tests call this.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "itera/desk/config.hpp"
#include "itera/desk/money.hpp"
#include "itera/desk/store.hpp"
#include "itera/desk/validation.hpp"

namespace itera { class catalogue; }

namespace itera::desk {

using clock_ms = std::function<std::int64_t()>;
std::int64_t system_now_ms();
std::string format_time_utc(std::int64_t ms);  // "2026-11-29 14:03 UTC"
std::string format_time_iso(std::int64_t ms);  // "2026-11-29T14:03:05.123Z"

struct create_outcome {
  int status = 0;              // 201 created, 200 same submission again, 422 invalid, 409 key reused
  field_errors errors;
  std::string message;
  order_record order;
  std::string token;           // the customer's link token (stored only hashed, and sealed for retries)
};

struct change_outcome {
  int status = 0;              // 200 done or unchanged, 404 unknown, 409 refused (reason), 422 invalid
  bool changed = false;
  std::string reason;
  order_record order;
};

class desk_service {
 public:
  desk_service(desk_config config, const catalogue& cards, price_list prices,
               std::unique_ptr<sql_database> db, clock_ms clock = system_now_ms);

  const desk_config& config() const { return m_config; }
  const catalogue& cards() const { return m_cards; }
  const price_list& prices() const { return m_prices; }
  order_store& store() { return *m_store; }
  std::int64_t now_ms() const { return m_clock(); }

  // `submission_key`: idempotency key (form hidden field, Idempotency-Key header); empty: a fresh
  // one. The same key with the same order gives back the same order and link; the same key with
  // another order gets 409 and no link.
  create_outcome create_order(const order_form& form, const std::string& submission_key);
  // The field rules alone (no pricing, no storage): the HTTP layer checks before it spends a rate
  // limit token.
  field_errors check_order(const order_form& form) const;
  std::optional<order_record> order_by_token(const std::string& token);
  // "I paid": awaiting_payment -> payment_reported; pressing again changes nothing.
  change_outcome report_paid(const std::string& token, const std::string& tx_id);
  change_outcome operator_move(const std::string& reference, const std::string& to, const std::string& note);

  // The sweep: expiry and retention (R18). Returns (expired, erased).
  std::pair<int, int> sweep();

  std::string token_hash(const std::string& token) const;

 private:
  std::string request_digest(const order_input& input) const;
  std::string box_key(const std::string& submission_key, const std::string& digest) const;

  desk_config m_config;
  const catalogue& m_cards;
  price_list m_prices;
  std::unique_ptr<order_store> m_store;
  clock_ms m_clock;
  std::string m_token_key;
};

// Opens the database named by the config (SQLite or PostgreSQL).
std::unique_ptr<sql_database> open_database(const desk_config& config);

}  // namespace itera::desk
