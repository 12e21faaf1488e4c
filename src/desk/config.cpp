// The desk's configuration file and its ITERA_DESK_* environment variables.
#include "itera/desk/config.hpp"

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "itera/core/errors.hpp"

extern char** environ;

namespace itera::desk {

namespace {

constexpr const char* schema = "itera.desk.config/1";

[[noreturn]] void fail(const std::string& where, const std::string& problem) {
  throw input_error(fmt::format("desk config: {}: {}", where, problem));
}

std::string text(const nlohmann::json& j, const char* key, const std::string& where, bool required = false) {
  const auto it = j.find(key);
  if (it == j.end()) {
    if (required) fail(fmt::format("{}{}", where, key), "is missing");
    return {};
  }
  if (!it->is_string()) fail(fmt::format("{}{}", where, key), "must be a string");
  return it->get<std::string>();
}

long long integer(const nlohmann::json& j, const char* key, const std::string& where, long long lo, long long hi,
                  long long fallback, bool required = false) {
  const auto it = j.find(key);
  if (it == j.end()) {
    if (required) fail(fmt::format("{}{}", where, key), "is missing");
    return fallback;
  }
  if (!it->is_number_integer()) fail(fmt::format("{}{}", where, key), "must be an integer");
  const long long v = it->get<long long>();
  if (v < lo || v > hi) fail(fmt::format("{}{}", where, key), fmt::format("must be in [{}, {}]", lo, hi));
  return v;
}

long long env_integer(const std::string& name, const std::string& value, long long lo, long long hi) {
  std::size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(value, &used);
  } catch (const std::exception&) {
    fail(name, "must be an integer");
  }
  if (used != value.size() || v < lo || v > hi) fail(name, fmt::format("must be an integer in [{}, {}]", lo, hi));
  return v;
}

payment_network read_network(const nlohmann::json& j, std::size_t index) {
  const std::string where = fmt::format("networks[{}].", index);
  if (!j.is_object()) fail(where, "must be an object");
  payment_network n;
  n.id = text(j, "id", where, true);
  n.label = text(j, "label", where, true);
  n.asset = text(j, "asset", where, true);
  n.decimals = static_cast<int>(integer(j, "decimals", where, 0, 18, 0, true));
  n.address = text(j, "address", where, true);
  if (n.id.empty() || n.id.size() > 32) fail(where + "id", "must be 1-32 characters");
  for (char c : n.id) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) fail(where + "id", "letters, digits, - and _ only");
  }
  if (n.address.empty() || n.address.size() > 128) fail(where + "address", "must be 1-128 characters");
  if (const auto it = j.find("example_address"); it != j.end()) {
    if (!it->is_boolean()) fail(where + "example_address", "must be true or false");
    n.example_address = it->get<bool>();
  }
  n.usd_cents_per_unit = integer(j, "usd_cents_per_unit", where, 1, 1'000'000'000'000LL, 0, true);
  n.rate_date = text(j, "rate_date", where, true);
  return n;
}

}  // namespace

const payment_network* desk_config::find_network(const std::string& id) const {
  for (const auto& n : networks) {
    if (n.id == id) return &n;
  }
  return nullptr;
}

std::string desk_config::database_kind() const { return database.rfind("sqlite:", 0) == 0 ? "sqlite" : "postgres"; }

std::filesystem::path desk_config::sqlite_path() const {
  std::filesystem::path p = database.substr(7);
  if (p.is_relative() && !source.empty()) p = source.parent_path() / p;
  return p;
}

std::map<std::string, std::string> desk_environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    if (kv.rfind("ITERA_DESK_", 0) != 0) continue;
    const auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

desk_config load_config(const std::filesystem::path& file, const std::map<std::string, std::string>& env) {
  desk_config c;
  if (!file.empty()) {
    std::ifstream in(file);
    if (!in) throw input_error(fmt::format("desk config: cannot read {}", file.string()));
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw input_error(fmt::format("desk config: {} is not JSON: {}", file.string(), e.what()));
    }
    if (!j.is_object()) fail(file.string(), "must be a JSON object");
    if (text(j, "schema", "") != schema) fail("schema", fmt::format("must be \"{}\"", schema));
    static const std::set<std::string> known = {
        "schema", "comment", "host", "port", "database", "db_connections", "prices_file", "threads",
        "payment_window_minutes", "sweep_seconds", "contact_retention_days", "client_address_header",
        "log_requests", "operator_password_hash", "operator_token_hash", "public_url", "limits", "networks"};
    for (const auto& [key, value] : j.items()) {
      if (!known.count(key)) fail(key, "is not a known key (a typo?)");
    }
    c.source = file;
    if (j.contains("host")) c.host = text(j, "host", "");
    c.port = static_cast<int>(integer(j, "port", "", 0, 65535, c.port));
    if (j.contains("database")) c.database = text(j, "database", "");
    c.db_connections = static_cast<int>(integer(j, "db_connections", "", 1, 64, c.db_connections));
    c.prices_file = text(j, "prices_file", "");
    // Relative to the config file's folder (ITERA_DESK_PRICES_FILE, below, is relative to the working folder).
    if (!c.prices_file.empty() && std::filesystem::path(c.prices_file).is_relative()) {
      c.prices_file = (file.parent_path() / c.prices_file).string();
    }
    c.threads = static_cast<int>(integer(j, "threads", "", 1, 256, c.threads));
    c.payment_window_minutes = static_cast<int>(integer(j, "payment_window_minutes", "", 1, 7 * 24 * 60, c.payment_window_minutes));
    c.sweep_seconds = static_cast<int>(integer(j, "sweep_seconds", "", 1, 3600, c.sweep_seconds));
    c.contact_retention_days = static_cast<int>(integer(j, "contact_retention_days", "", 0, 3650, c.contact_retention_days));
    c.client_address_header = text(j, "client_address_header", "");
    if (const auto it = j.find("log_requests"); it != j.end()) {
      if (!it->is_boolean()) fail("log_requests", "must be true or false");
      c.log_requests = it->get<bool>();
    }
    c.operator_password_hash = text(j, "operator_password_hash", "");
    c.operator_token_hash = text(j, "operator_token_hash", "");
    c.public_url = text(j, "public_url", "");
    if (const auto it = j.find("limits"); it != j.end()) {
      if (!it->is_object()) fail("limits", "must be an object");
      const auto& l = *it;
      c.limits.orders_per_minute = static_cast<int>(integer(l, "orders_per_minute", "limits.", 1, 10'000'000, c.limits.orders_per_minute));
      c.limits.order_burst = static_cast<int>(integer(l, "order_burst", "limits.", 1, 10'000'000, c.limits.order_burst));
      c.limits.logins_per_minute = static_cast<int>(integer(l, "logins_per_minute", "limits.", 1, 10'000, c.limits.logins_per_minute));
      c.limits.max_body_bytes = static_cast<std::size_t>(integer(l, "max_body_bytes", "limits.", 1024, 1 << 20, static_cast<long long>(c.limits.max_body_bytes)));
      c.limits.max_quantity = static_cast<int>(integer(l, "max_quantity", "limits.", 1, 64, c.limits.max_quantity));
    }
    if (const auto it = j.find("networks"); it != j.end()) {
      if (!it->is_array()) fail("networks", "must be an array");
      for (std::size_t i = 0; i < it->size(); ++i) c.networks.push_back(read_network((*it)[i], i));
    }
  }
  const auto get = [&](const char* name) -> const std::string* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : &it->second;
  };
  if (auto v = get("ITERA_DESK_HOST")) c.host = *v;
  if (auto v = get("ITERA_DESK_PORT")) c.port = static_cast<int>(env_integer("ITERA_DESK_PORT", *v, 0, 65535));
  if (auto v = get("ITERA_DESK_DATABASE")) c.database = *v;
  if (auto v = get("ITERA_DESK_PRICES_FILE")) c.prices_file = *v;
  if (auto v = get("ITERA_DESK_THREADS")) c.threads = static_cast<int>(env_integer("ITERA_DESK_THREADS", *v, 1, 256));
  if (auto v = get("ITERA_DESK_OPERATOR_PASSWORD_HASH")) c.operator_password_hash = *v;
  if (auto v = get("ITERA_DESK_OPERATOR_TOKEN_HASH")) c.operator_token_hash = *v;
  if (auto v = get("ITERA_DESK_ORDERS_PER_MINUTE")) c.limits.orders_per_minute = static_cast<int>(env_integer("ITERA_DESK_ORDERS_PER_MINUTE", *v, 1, 10'000'000));
  if (auto v = get("ITERA_DESK_ORDER_BURST")) c.limits.order_burst = static_cast<int>(env_integer("ITERA_DESK_ORDER_BURST", *v, 1, 10'000'000));
  if (auto v = get("ITERA_DESK_LOG_REQUESTS")) c.log_requests = env_integer("ITERA_DESK_LOG_REQUESTS", *v, 0, 1) == 1;

  if (c.host.empty()) fail("host", "must not be empty");
  if (c.database.empty()) fail("database", "must not be empty");
  if (c.database_kind() == "sqlite" && c.database.size() <= 7) fail("database", "sqlite: needs a file path (sqlite:desk.db)");
  if (!c.operator_password_hash.empty() && c.operator_password_hash.rfind("$argon2id$", 0) != 0) {
    fail("operator_password_hash", "must be an argon2id string from `itera-desk hash-password`");
  }
  if (!c.operator_token_hash.empty()) {
    bool hex = c.operator_token_hash.size() == 64;
    for (char ch : c.operator_token_hash) hex = hex && std::isxdigit(static_cast<unsigned char>(ch));
    if (!hex) fail("operator_token_hash", "must be 64 hex digits from `itera-desk hash-token`");
  }
  std::set<std::string> ids;
  for (const auto& n : c.networks) {
    if (!ids.insert(n.id).second) fail("networks", fmt::format("\"{}\" is listed twice", n.id));
  }
  return c;
}

}  // namespace itera::desk
