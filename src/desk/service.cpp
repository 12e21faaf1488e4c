// The desk's operations, independent of HTTP.
#include "itera/desk/service.hpp"

#include <chrono>
#include <ctime>

#include <fmt/format.h>

#include "itera/desk/crypto.hpp"
#include "itera/desk/log.hpp"
#include "itera/env/catalogue.hpp"

namespace itera::desk {

std::int64_t system_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

namespace {
std::tm utc(std::int64_t ms) {
  const std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  return tm;
}
// A stored transition as the service answers it: 404 when the order is unknown, 409 with the
// reason when the move is refused, 200 otherwise (changed unless it was a repeat).
change_outcome outcome_of(const transition_result& r) {
  change_outcome out;
  out.order = r.order;
  if (!r.found) {
    out.status = 404;
    out.reason = "no such order";
  } else if (!r.check.allowed) {
    out.status = 409;
    out.reason = r.check.reason;
  } else {
    out.status = 200;
    out.changed = !r.check.no_change;
  }
  return out;
}

}  // namespace

std::string format_time_utc(std::int64_t ms) {
  const auto tm = utc(ms);
  return fmt::format("{:04}-{:02}-{:02} {:02}:{:02} UTC", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min);
}

std::string format_time_iso(std::int64_t ms) {
  const auto tm = utc(ms);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                     tm.tm_min, tm.tm_sec, ms % 1000);
}

std::unique_ptr<sql_database> open_database(const desk_config& config) {
  if (config.database_kind() == "sqlite") return open_sqlite(config.sqlite_path().string(), config.db_connections);
  return open_postgres(config.database, config.db_connections);
}

desk_service::desk_service(desk_config config, const catalogue& cards, price_list prices, std::unique_ptr<sql_database> db,
                           clock_ms clock)
    : m_config(std::move(config)),
      m_cards(cards),
      m_prices(std::move(prices)),
      m_store(std::make_unique<order_store>(std::move(db))),
      m_clock(std::move(clock)) {
  crypto_init();
  m_store->migrate();
  m_token_key = m_store->secret("token_key");
}

std::string desk_service::token_hash(const std::string& token) const { return hash_hex(token); }

field_errors desk_service::check_order(const order_form& form) const {
  field_errors errors;
  validate_order(form, m_config, m_prices, errors);
  return errors;
}

std::string desk_service::request_digest(const order_input& in) const {
  // Keyed: without the server key a copy of the database cannot confirm a guessed email.
  return hash_hex(fmt::format("{}\x1f{}\x1f{}\x1f{}\x1f{}\x1f{}\x1f{}", in.gpu, in.days, in.quantity, in.environment,
                              in.email, in.messenger, in.network),
                  m_token_key);
}

std::string desk_service::box_key(const std::string& submission_key, const std::string& digest) const {
  // Opening the sealed link needs the idempotency key (never stored) and the same order: the key
  // alone, or a copy of the database alone, does not give the link.
  return hash_raw("order-link-box\x1f" + submission_key + "\x1f" + digest, m_token_key);
}

create_outcome desk_service::create_order(const order_form& form, const std::string& submission_key) {
  create_outcome out;
  if (!submission_key.empty() && !valid_submission_key(submission_key)) {
    out.status = 422;
    out.errors["submission"] = "The idempotency key must be 22 to 128 characters of A-Z a-z 0-9 _ -, random (at least 10 different characters).";
    return out;
  }
  const auto input = validate_order(form, m_config, m_prices, out.errors);
  if (!input) {
    out.status = 422;
    return out;
  }
  const auto& network = *m_config.find_network(input->network);
  const auto q = make_quote(*m_prices.price(input->gpu), input->days, input->quantity, network);
  if (!q) {
    out.status = 422;
    out.errors["quantity"] = "This order is too large to price; order fewer GPUs.";
    return out;
  }
  const std::string key = submission_key.empty() ? random_token(16) : submission_key;
  const std::string token = random_token(32);  // 256 bits from the CSPRNG: the customer's link
  order_secrets secrets;
  secrets.token_hash = token_hash(token);
  secrets.submission_hash = hash_hex("submission:" + key, m_token_key);
  secrets.request_digest = request_digest(*input);
  secrets.token_box = seal(box_key(key, secrets.request_digest), token);
  order_record o;
  o.gpu_id = input->gpu;
  o.days = input->days;
  o.quantity = input->quantity;
  o.environment = input->environment;
  o.email = input->email;
  o.messenger = input->messenger;
  o.network = network.id;
  o.asset = network.asset;
  o.decimals = network.decimals;
  o.address = network.address;
  o.usd_cents_per_day = q->usd_cents_per_day;
  o.usd_cents_total = q->usd_cents_total;
  o.usd_cents_per_unit = network.usd_cents_per_unit;
  o.rate_date = network.rate_date;
  o.amount_units = q->amount_units;
  o.created_at_ms = m_clock();
  o.expires_at_ms = o.created_at_ms + static_cast<std::int64_t>(m_config.payment_window_minutes) * 60'000;
  // 10 base32 characters: 50 bits, so collisions are rare; one is retried with a new reference.
  for (int attempt = 0; attempt < 8; ++attempt) {
    o.reference = "IT-" + random_base32(10);
    const auto r = m_store->insert(o, secrets);
    if (!r) continue;
    if (r->inserted) {
      out.status = 201;
      out.order = r->order;
      out.token = token;
      log_line(fmt::format("desk: order {} created ({} x{} for {} days)", o.reference, o.gpu_id, o.quantity, o.days));
      return out;
    }
    // A retry: the same key and the same order. Its link comes out of the box sealed the first time.
    const auto earlier = equal_constant_time(r->request_digest, secrets.request_digest)
                             ? open_sealed(box_key(key, secrets.request_digest), r->token_box)
                             : std::nullopt;
    if (!earlier) {
      out.status = 409;
      out.message = "This idempotency key was already used for a different order.";
      return out;
    }
    out.status = 200;
    out.order = r->order;
    out.token = *earlier;
    return out;
  }
  throw sql_error("desk: could not draw an unused order reference");
}

std::optional<order_record> desk_service::order_by_token(const std::string& token) {
  if (!valid_token(token)) return std::nullopt;
  return m_store->by_token_hash(token_hash(token));
}

change_outcome desk_service::report_paid(const std::string& token, const std::string& tx_id) {
  change_outcome out;
  if (auto m = check_tx_id(tx_id); !m.empty()) {
    out.status = 422;
    out.reason = m;
    return out;
  }
  const auto o = order_by_token(token);
  if (!o) {
    out.status = 404;
    out.reason = "no such order";
    return out;
  }
  out = outcome_of(m_store->transition(o->reference, order_state::payment_reported, actor_kind::customer, "customer",
                                       m_clock(), "", tx_id));
  if (out.changed) log_line(fmt::format("desk: order {} payment reported", o->reference));
  return out;
}

change_outcome desk_service::operator_move(const std::string& reference, const std::string& to, const std::string& note) {
  change_outcome out;
  const auto state = parse_state(to);
  if (!state) {
    out.status = 422;
    out.reason = "unknown state";
    return out;
  }
  if (auto m = check_note(note); !m.empty()) {
    out.status = 422;
    out.reason = m;
    return out;
  }
  if (!valid_reference(reference)) {
    out.status = 404;
    out.reason = "no such order";
    return out;
  }
  out = outcome_of(m_store->transition(reference, *state, actor_kind::operator_, "operator", m_clock(), note));
  out.changed = out.status == 200;  // an operator's allowed move always moves
  if (out.changed) log_line(fmt::format("desk: order {} moved to {} by operator", reference, to));
  return out;
}

std::pair<int, int> desk_service::sweep() {
  const auto now = m_clock();
  const int expired = m_store->expire_due(now);
  const int erased = m_store->erase_contacts(now - static_cast<std::int64_t>(m_config.contact_retention_days) * 86'400'000, now);
  if (expired || erased) log_line(fmt::format("desk: sweep: {} expired, {} contact records erased", expired, erased));
  return {expired, erased};
}

}  // namespace itera::desk
