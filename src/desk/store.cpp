// Orders and transitions over sql_database: one schema, numbered migrations, the same statements on
// SQLite and PostgreSQL. Times are integer milliseconds since the epoch (UTC) on both.
#include "itera/desk/store.hpp"

#include <chrono>

#include <fmt/format.h>

#include "itera/desk/crypto.hpp"

namespace itera::desk {

namespace {

constexpr const char* order_columns =
    "reference, gpu_id, days, quantity, environment, email, messenger, network, asset, decimals, address, "
    "usd_cents_per_day, usd_cents_total, usd_cents_per_unit, rate_date, amount_units, state, tx_id, "
    "created_at_ms, expires_at_ms, updated_at_ms, contact_erased_at_ms";

order_record read_order(const sql_row& r) {
  order_record o;
  o.reference = r.text(0);
  o.gpu_id = r.text(1);
  o.days = static_cast<int>(r.integer(2));
  o.quantity = static_cast<int>(r.integer(3));
  o.environment = r.text(4);
  o.email = r.text(5);
  o.messenger = r.text(6);
  o.network = r.text(7);
  o.asset = r.text(8);
  o.decimals = static_cast<int>(r.integer(9));
  o.address = r.text(10);
  o.usd_cents_per_day = r.integer(11);
  o.usd_cents_total = r.integer(12);
  o.usd_cents_per_unit = r.integer(13);
  o.rate_date = r.text(14);
  o.amount_units = r.integer(15);
  const auto state = parse_state(r.text(16));
  if (!state) throw sql_error(fmt::format("desk: order {} has an unknown state \"{}\"", o.reference, r.text(16)));
  o.state = *state;
  o.tx_id = r.text(17);
  o.created_at_ms = r.integer(18);
  o.expires_at_ms = r.integer(19);
  o.updated_at_ms = r.integer(20);
  if (!r.is_null(21)) o.contact_erased_at_ms = r.integer(21);
  return o;
}

std::optional<order_record> one_order(sql_connection& c, const std::string& sql, const std::vector<sql_value>& params) {
  const auto rows = c.query(sql, params);
  if (rows.empty()) return std::nullopt;
  return read_order(rows.front());
}

void add_transition(sql_connection& c, const std::string& reference, const std::string& from, const std::string& to,
                    const std::string& actor, std::int64_t at_ms, const std::string& note) {
  const auto rows = c.query("SELECT COALESCE(MAX(seq), 0) FROM desk_transitions WHERE reference = $1", {reference});
  const std::int64_t seq = rows.front().integer(0) + 1;
  c.exec("INSERT INTO desk_transitions (reference, seq, from_state, to_state, actor, at_ms, note) "
         "VALUES ($1, $2, $3, $4, $5, $6, $7)",
         {reference, seq, from, to, actor, at_ms, note});
}

}  // namespace

const std::vector<migration>& desk_migrations() {
  static const std::vector<migration> all = {
      {1, "orders, transitions, settings",
       {"CREATE TABLE desk_settings (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE desk_orders ("
        " reference TEXT PRIMARY KEY,"
        " token_hash TEXT NOT NULL UNIQUE,"
        " submission_hash TEXT NOT NULL UNIQUE,"
        " request_digest TEXT NOT NULL,"
        " gpu_id TEXT NOT NULL,"
        " days INTEGER NOT NULL CHECK (days IN (3, 7, 30)),"
        " quantity INTEGER NOT NULL CHECK (quantity > 0),"
        " environment TEXT NOT NULL,"
        " email TEXT NOT NULL,"
        " messenger TEXT NOT NULL,"
        " network TEXT NOT NULL,"
        " asset TEXT NOT NULL,"
        " decimals INTEGER NOT NULL,"
        " address TEXT NOT NULL,"
        " usd_cents_per_day BIGINT NOT NULL,"
        " usd_cents_total BIGINT NOT NULL,"
        " usd_cents_per_unit BIGINT NOT NULL,"
        " rate_date TEXT NOT NULL,"
        " amount_units BIGINT NOT NULL CHECK (amount_units > 0),"
        " state TEXT NOT NULL,"
        " tx_id TEXT NOT NULL,"
        " created_at_ms BIGINT NOT NULL,"
        " expires_at_ms BIGINT NOT NULL,"
        " updated_at_ms BIGINT NOT NULL,"
        " contact_erased_at_ms BIGINT)",
        "CREATE INDEX desk_orders_by_state ON desk_orders (state, updated_at_ms)",
        "CREATE INDEX desk_orders_by_created ON desk_orders (created_at_ms)",
        "CREATE TABLE desk_transitions ("
        " reference TEXT NOT NULL REFERENCES desk_orders (reference),"
        " seq INTEGER NOT NULL,"
        " from_state TEXT NOT NULL,"
        " to_state TEXT NOT NULL,"
        " actor TEXT NOT NULL,"
        " at_ms BIGINT NOT NULL,"
        " note TEXT NOT NULL,"
        " PRIMARY KEY (reference, seq))"}},
      // Order links became random (before: derived from the idempotency key); a retry gets its link
      // back from token_box. Digests of erased orders go with their contact details.
      {2, "sealed order link for retries; erased orders keep no request digest",
       {"ALTER TABLE desk_orders ADD COLUMN token_box TEXT NOT NULL DEFAULT ''",
        "UPDATE desk_orders SET request_digest = '' WHERE contact_erased_at_ms IS NOT NULL"}},
  };
  return all;
}

order_store::order_store(std::unique_ptr<sql_database> db) : m_db(std::move(db)), m_dialect(m_db->dialect()) {}

int order_store::schema_version() {
  int version = 0;
  m_db->read([&](sql_connection& c) {
    const auto rows = c.query("SELECT COALESCE(MAX(version), 0) FROM desk_schema_migrations");
    version = static_cast<int>(rows.front().integer(0));
  });
  return version;
}

int order_store::migrate() {
  int version = 0;
  m_db->write([&](sql_connection& c) {
    c.exec("CREATE TABLE IF NOT EXISTS desk_schema_migrations (version INTEGER PRIMARY KEY, description TEXT NOT NULL, "
           "applied_at_ms BIGINT NOT NULL)");
    // Two services starting at once on one PostgreSQL database: the second waits here for the first.
    if (m_dialect == "postgres") c.exec("LOCK TABLE desk_schema_migrations IN EXCLUSIVE MODE");
    version = static_cast<int>(c.query("SELECT COALESCE(MAX(version), 0) FROM desk_schema_migrations").front().integer(0));
    for (const auto& m : desk_migrations()) {
      if (m.version <= version) continue;
      for (const auto& statement : m.statements) c.exec(statement);
      const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
      c.exec("INSERT INTO desk_schema_migrations (version, description, applied_at_ms) VALUES ($1, $2, $3)",
             {static_cast<std::int64_t>(m.version), std::string(m.description), static_cast<std::int64_t>(now)});
      version = m.version;
    }
  });
  return version;
}

std::string order_store::secret(const std::string& name) {
  std::string value;
  m_db->write([&](sql_connection& c) {
    c.exec("INSERT INTO desk_settings (name, value) VALUES ($1, $2) ON CONFLICT DO NOTHING", {name, random_token(32)});
    value = c.query("SELECT value FROM desk_settings WHERE name = $1", {name}).front().text(0);
  });
  return value;
}

std::optional<insert_result> order_store::insert(const order_record& o, const order_secrets& secrets) {
  std::optional<insert_result> result;
  m_db->write([&](sql_connection& c) {
    const auto inserted = c.exec(
        "INSERT INTO desk_orders (reference, token_hash, submission_hash, request_digest, token_box, gpu_id, days, "
        "quantity, environment, email, messenger, network, asset, decimals, address, usd_cents_per_day, "
        "usd_cents_total, usd_cents_per_unit, rate_date, amount_units, state, tx_id, created_at_ms, expires_at_ms, "
        "updated_at_ms) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, "
        "$23, $24, $25) ON CONFLICT DO NOTHING",
        {o.reference, secrets.token_hash, secrets.submission_hash, secrets.request_digest, secrets.token_box, o.gpu_id,
         static_cast<std::int64_t>(o.days), static_cast<std::int64_t>(o.quantity), o.environment, o.email, o.messenger,
         o.network, o.asset, static_cast<std::int64_t>(o.decimals), o.address, o.usd_cents_per_day, o.usd_cents_total,
         o.usd_cents_per_unit, o.rate_date, o.amount_units, std::string(to_string(order_state::awaiting_payment)),
         std::string(), o.created_at_ms, o.expires_at_ms, o.created_at_ms});
    if (inserted == 1) {
      add_transition(c, o.reference, "", std::string(to_string(order_state::created)), "customer", o.created_at_ms, "");
      add_transition(c, o.reference, std::string(to_string(order_state::created)),
                     std::string(to_string(order_state::awaiting_payment)), "system", o.created_at_ms,
                     "payment instructions issued");
      insert_result r;
      r.inserted = true;
      r.order = o;
      r.order.state = order_state::awaiting_payment;
      r.order.updated_at_ms = o.created_at_ms;
      r.request_digest = secrets.request_digest;
      r.token_box = secrets.token_box;
      result = r;
      return;
    }
    // Not inserted: the same submission came before (a retry), or the reference collided.
    const auto rows = c.query(
        fmt::format("SELECT {}, request_digest, token_box FROM desk_orders WHERE submission_hash = $1", order_columns),
        {secrets.submission_hash});
    if (rows.empty()) return;  // reference collision: the caller draws another
    insert_result r;
    r.inserted = false;
    r.order = read_order(rows.front());
    r.request_digest = rows.front().text(22);
    r.token_box = rows.front().text(23);
    result = r;
  });
  return result;
}

std::optional<order_record> order_store::by_token_hash(const std::string& token_hash) {
  std::optional<order_record> o;
  m_db->read([&](sql_connection& c) {
    o = one_order(c, fmt::format("SELECT {} FROM desk_orders WHERE token_hash = $1", order_columns), {token_hash});
  });
  return o;
}

std::optional<order_record> order_store::by_reference(const std::string& reference) {
  std::optional<order_record> o;
  m_db->read([&](sql_connection& c) {
    o = one_order(c, fmt::format("SELECT {} FROM desk_orders WHERE reference = $1", order_columns), {reference});
  });
  return o;
}

std::vector<transition_record> order_store::transitions(const std::string& reference) {
  std::vector<transition_record> out;
  m_db->read([&](sql_connection& c) {
    for (const auto& r : c.query("SELECT seq, from_state, to_state, actor, at_ms, note FROM desk_transitions "
                                 "WHERE reference = $1 ORDER BY seq",
                                 {reference})) {
      out.push_back({static_cast<int>(r.integer(0)), r.text(1), r.text(2), r.text(3), r.integer(4), r.text(5)});
    }
  });
  return out;
}

std::vector<order_record> order_store::list(const std::string& state, int limit, int offset) {
  std::vector<order_record> out;
  m_db->read([&](sql_connection& c) {
    const auto rows = state.empty()
        ? c.query(fmt::format("SELECT {} FROM desk_orders ORDER BY created_at_ms DESC, reference LIMIT $1 OFFSET $2", order_columns),
                  {static_cast<std::int64_t>(limit), static_cast<std::int64_t>(offset)})
        : c.query(fmt::format("SELECT {} FROM desk_orders WHERE state = $1 ORDER BY created_at_ms DESC, reference LIMIT $2 OFFSET $3",
                              order_columns),
                  {state, static_cast<std::int64_t>(limit), static_cast<std::int64_t>(offset)});
    for (const auto& r : rows) out.push_back(read_order(r));
  });
  return out;
}

std::int64_t order_store::count(const std::string& state) {
  std::int64_t n = 0;
  m_db->read([&](sql_connection& c) {
    n = state.empty() ? c.query("SELECT COUNT(*) FROM desk_orders").front().integer(0)
                      : c.query("SELECT COUNT(*) FROM desk_orders WHERE state = $1", {state}).front().integer(0);
  });
  return n;
}

transition_result order_store::transition(const std::string& reference, order_state to, actor_kind actor,
                                          const std::string& actor_name, std::int64_t now_ms, const std::string& note,
                                          const std::string& tx_id) {
  transition_result result;
  m_db->write([&](sql_connection& c) {
    auto o = one_order(c, fmt::format("SELECT {} FROM desk_orders WHERE reference = $1{}", order_columns, m_db->lock_rows()),
                       {reference});
    if (!o) return;
    result.found = true;
    result.check = check_transition(o->state, to, actor, now_ms, o->expires_at_ms);
    result.order = *o;
    if (!result.check.allowed || result.check.no_change) return;
    const std::string from(to_string(o->state));
    const std::string next(to_string(to));
    if (to == order_state::payment_reported) {
      c.exec("UPDATE desk_orders SET state = $1, tx_id = $2, updated_at_ms = $3 WHERE reference = $4",
             {next, tx_id, now_ms, reference});
      result.order.tx_id = tx_id;
    } else {
      c.exec("UPDATE desk_orders SET state = $1, updated_at_ms = $2 WHERE reference = $3", {next, now_ms, reference});
    }
    add_transition(c, reference, from, next, actor_name, now_ms, note);
    result.order.state = to;
    result.order.updated_at_ms = now_ms;
  });
  return result;
}

int order_store::expire_due(std::int64_t now_ms) {
  std::vector<std::string> due;
  m_db->read([&](sql_connection& c) {
    for (const auto& r : c.query("SELECT reference FROM desk_orders WHERE state = $1 AND expires_at_ms <= $2 LIMIT 1000",
                                 {std::string(to_string(order_state::awaiting_payment)), now_ms})) {
      due.push_back(r.text(0));
    }
  });
  int expired = 0;
  for (const auto& ref : due) {
    // Each one checked again under its lock: "I paid" may have come in between.
    const auto r = transition(ref, order_state::expired, actor_kind::system, "system", now_ms, "payment window closed");
    if (r.found && r.check.allowed && !r.check.no_change) ++expired;
  }
  return expired;
}

int order_store::erase_contacts(std::int64_t cutoff_ms, std::int64_t now_ms) {
  std::int64_t erased = 0;
  m_db->write([&](sql_connection& c) {
    erased = c.exec(
        "UPDATE desk_orders SET email = '', messenger = '', environment = '', tx_id = '', request_digest = '', "
        "token_box = '', contact_erased_at_ms = $1 "
        "WHERE contact_erased_at_ms IS NULL AND state IN ('rejected', 'expired', 'ended') AND updated_at_ms < $2",
        {now_ms, cutoff_ms});
    c.exec("UPDATE desk_transitions SET note = '' WHERE note <> '' AND reference IN "
           "(SELECT reference FROM desk_orders WHERE contact_erased_at_ms = $1)",
           {now_ms});
  });
  return static_cast<int>(erased);
}

}  // namespace itera::desk
