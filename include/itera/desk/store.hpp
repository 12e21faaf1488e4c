#pragma once
// Orders and their transitions, on either database, with one schema and its migrations.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "itera/desk/lifecycle.hpp"
#include "itera/desk/sql.hpp"

namespace itera::desk {

struct order_record {
  std::string reference;           // "IT-7K3M9Q2P4X"
  std::string gpu_id;
  int days = 0;
  int quantity = 0;
  std::string environment;
  std::string email;               // erased (empty) after the retention period
  std::string messenger;
  std::string network;
  std::string asset;
  int decimals = 0;
  std::string address;
  std::int64_t usd_cents_per_day = 0;
  std::int64_t usd_cents_total = 0;
  std::int64_t usd_cents_per_unit = 0;
  std::string rate_date;
  std::int64_t amount_units = 0;
  order_state state = order_state::created;
  std::string tx_id;
  std::int64_t created_at_ms = 0;
  std::int64_t expires_at_ms = 0;
  std::int64_t updated_at_ms = 0;
  std::optional<std::int64_t> contact_erased_at_ms;
};

struct transition_record {
  int seq = 0;
  std::string from_state;          // "" for the first one (the order's creation)
  std::string to_state;
  std::string actor;
  std::int64_t at_ms = 0;
  std::string note;
};

// One migration: a version and the statements that take the schema there.
struct migration {
  int version;
  const char* description;
  std::vector<std::string> statements;
};
const std::vector<migration>& desk_migrations();

// What is kept about an order's link and submission, none of it the link or the key in clear.
struct order_secrets {
  std::string token_hash;          // BLAKE2b of the link token: finds the order from its link
  std::string submission_hash;     // keyed BLAKE2b of the idempotency key (unique)
  std::string request_digest;      // keyed BLAKE2b of the order's fields: a retry, or the key reused?
  std::string token_box;           // the link token sealed under a key that needs the idempotency key
};

struct insert_result {
  bool inserted = false;           // false: the submission hash was already there
  order_record order;              // the stored order (the existing one when not inserted)
  std::string request_digest;      // of the existing one, to tell a retry from a reused key
  std::string token_box;           // of the existing one, to give a retry its link back
};

struct transition_result {
  bool found = false;
  transition_check check;          // allowed / no_change / reason
  order_record order;              // after the transition (or as it was)
};

class order_store {
 public:
  explicit order_store(std::unique_ptr<sql_database> db);
  const std::string& dialect() const { return m_dialect; }

  // Applies missing migrations; returns the schema version now in force.
  int migrate();
  int schema_version();
  // A random key kept in the database, made on first use: keys the hashes of tokens at rest.
  std::string secret(const std::string& name);

  // Inserts the order with its first transitions (created, awaiting_payment), in one transaction.
  // A reference collision is retried with a new reference by the caller (returns nullopt).
  std::optional<insert_result> insert(const order_record& order, const order_secrets& secrets);
  std::optional<order_record> by_token_hash(const std::string& token_hash);
  std::optional<order_record> by_reference(const std::string& reference);
  std::vector<transition_record> transitions(const std::string& reference);
  // Newest first. `state` empty: all.
  std::vector<order_record> list(const std::string& state, int limit, int offset);
  std::int64_t count(const std::string& state);

  // Locks the order, checks the move with the lifecycle, stores it with time and actor.
  // `tx_id` is kept when moving to payment_reported.
  transition_result transition(const std::string& reference, order_state to, actor_kind actor,
                               const std::string& actor_name, std::int64_t now_ms,
                               const std::string& note, const std::string& tx_id = {});
  // awaiting_payment orders past their window -> expired (actor system). Returns how many.
  int expire_due(std::int64_t now_ms);
  // Closed orders (rejected, expired, ended) last changed before `cutoff_ms`: contact details, free
  // text, the request digest and the sealed link erased. Returns how many.
  int erase_contacts(std::int64_t cutoff_ms, std::int64_t now_ms);

 private:
  std::unique_ptr<sql_database> m_db;
  std::string m_dialect;
};

}  // namespace itera::desk
