#pragma once
// The desk's configuration: a JSON file (data/desk/desk.example.json shows every key) with
// environment variables over it (docs/desk.md lists them). Secrets (the operator's password hash and
// API token hash) are best given through the environment.
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace itera::desk {

// One way to pay: a network, its asset, and the operator's receiving address and rate.
struct payment_network {
  std::string id;                    // "USDT-TRON"
  std::string label;                 // "USDT on TRON (TRC-20)"
  std::string asset;                 // "USDT"
  int decimals = 0;                  // smallest units per whole asset = 10^decimals (USDT 6, BTC 8)
  std::string address;               // receiving address
  bool example_address = false;      // an address from the example config: pages say so loudly
  std::int64_t usd_cents_per_unit = 0;  // operator's rate: US cents for one whole unit (USDT: 100)
  std::string rate_date;             // "2026-11-29": the day the operator set that rate
};

struct desk_limits {
  int orders_per_minute = 10;        // per client address, token bucket refill
  int order_burst = 5;               // per client address, bucket size
  int logins_per_minute = 5;         // operator sign-in attempts per client address
  std::size_t max_body_bytes = 16 * 1024;
  int max_quantity = 8;
};

struct desk_config {
  std::filesystem::path source;      // the file it came from (empty: defaults and environment only)
  std::string host = "127.0.0.1";    // loopback unless asked otherwise
  int port = 8087;                   // 0: any free port (the service writes the port it got)
  std::string database = "sqlite:desk.db";  // "sqlite:PATH" or a PostgreSQL connection string
  int db_connections = 4;            // connection pool size (readers for SQLite; all for PostgreSQL)
  std::string prices_file;           // desk price file (data/desk/prices.example.json)
  int threads = 16;                  // HTTP worker threads
  int payment_window_minutes = 120;  // awaiting_payment -> expired after this
  int sweep_seconds = 15;            // how often expiry and retention run
  int contact_retention_days = 90;   // contact details erased this long after an order closes
  std::string client_address_header; // e.g. "X-Forwarded-For" behind a trusted reverse proxy
  bool log_requests = true;
  std::string operator_password_hash;  // crypto_pwhash_str (argon2id) string
  std::string operator_token_hash;     // hex BLAKE2b-256 of the operator API token
  std::string public_url;              // optional, for absolute links in API answers
  desk_limits limits;
  std::vector<payment_network> networks;

  const payment_network* find_network(const std::string& id) const;
  // "sqlite" or "postgres", from the database string.
  std::string database_kind() const;
  // The SQLite file, for "sqlite:PATH" (relative paths are taken from the config file's folder).
  std::filesystem::path sqlite_path() const;
};

// Reads the file (when not empty), then applies ITERA_DESK_* variables from `env`. Throws
// itera::input_error naming the key when anything is malformed.
desk_config load_config(const std::filesystem::path& file, const std::map<std::string, std::string>& env);
// The process environment's ITERA_DESK_* variables.
std::map<std::string, std::string> desk_environment();

}  // namespace itera::desk
