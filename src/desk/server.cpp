// HTTP: routing, the JSON API, pages, operator sessions, CSRF, rate limits, size limits, access log.
#include "itera/desk/server.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <semaphore>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "itera/desk/crypto.hpp"
#include "itera/desk/log.hpp"
#include "itera/env/catalogue.hpp"
#include "pages.hpp"

namespace itera::desk {

namespace {

using params = std::vector<std::string>;
using handler = std::function<void(const httplib::Request&, httplib::Response&, const params&)>;

constexpr const char* csrf_cookie = "desk_csrf";
constexpr const char* session_cookie = "desk_op";
constexpr std::int64_t session_ms = 8LL * 3600 * 1000;
constexpr std::ptrdiff_t password_slots = 2;  // argon2id checks at once (64 MiB each); more: 503

// Token bucket per client address.
class rate_limiter {
 public:
  rate_limiter(int per_minute, int burst) : m_per_ms(per_minute / 60'000.0), m_burst(burst) {}
  bool allow(const std::string& client, std::int64_t now_ms) {
    std::lock_guard lock(m_mutex);
    if (m_buckets.size() > 100'000) prune(now_ms);
    auto [it, fresh] = m_buckets.try_emplace(client, bucket{static_cast<double>(m_burst), now_ms});
    auto& b = it->second;
    if (!fresh) {
      b.tokens = std::min(static_cast<double>(m_burst), b.tokens + static_cast<double>(now_ms - b.last_ms) * m_per_ms);
      b.last_ms = now_ms;
    }
    if (b.tokens < 1.0) return false;
    b.tokens -= 1.0;
    return true;
  }

 private:
  struct bucket {
    double tokens;
    std::int64_t last_ms;
  };
  void prune(std::int64_t now_ms) {
    for (auto it = m_buckets.begin(); it != m_buckets.end();) {
      const double refilled = it->second.tokens + static_cast<double>(now_ms - it->second.last_ms) * m_per_ms;
      it = refilled >= m_burst ? m_buckets.erase(it) : std::next(it);
    }
  }
  double m_per_ms;
  int m_burst;
  std::mutex m_mutex;
  std::unordered_map<std::string, bucket> m_buckets;
};

std::vector<std::string_view> split_path(std::string_view path) {
  std::vector<std::string_view> parts;
  std::size_t start = 1;
  while (start <= path.size()) {
    const auto slash = path.find('/', start);
    parts.push_back(path.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start));
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return parts;
}

struct route {
  std::string method;
  std::vector<std::string> parts;  // "{}" matches one segment
  handler run;
};

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::optional<std::string> url_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%') {
      if (i + 2 >= s.size()) return std::nullopt;
      const int hi = hex_value(s[i + 1]);
      const int lo = hex_value(s[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// application/x-www-form-urlencoded. nullopt when malformed or a field is given twice.
std::optional<std::map<std::string, std::string>> parse_form(std::string_view body) {
  std::map<std::string, std::string> fields;
  std::size_t start = 0;
  while (start < body.size()) {
    auto amp = body.find('&', start);
    if (amp == std::string_view::npos) amp = body.size();
    const auto pair = body.substr(start, amp - start);
    start = amp + 1;
    if (pair.empty()) continue;
    const auto eq = pair.find('=');
    auto key = url_decode(pair.substr(0, eq));
    auto value = url_decode(eq == std::string_view::npos ? std::string_view{} : pair.substr(eq + 1));
    if (!key || !value || key->empty()) return std::nullopt;
    if (!fields.emplace(std::move(*key), std::move(*value)).second) return std::nullopt;
  }
  return fields;
}

std::string cookie(const httplib::Request& req, std::string_view name) {
  const auto header = req.get_header_value("Cookie");
  std::string_view h = header;
  std::size_t start = 0;
  while (start < h.size()) {
    auto semi = h.find(';', start);
    if (semi == std::string_view::npos) semi = h.size();
    auto item = h.substr(start, semi - start);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    if (item.size() > name.size() && item.substr(0, name.size()) == name && item[name.size()] == '=') {
      return std::string(item.substr(name.size() + 1));
    }
    start = semi + 1;
  }
  return {};
}

// Every key of a JSON object that is not in `known` gets "unknown field" in `errors`.
void refuse_unknown_fields(const nlohmann::json& j, std::initializer_list<std::string_view> known, nlohmann::json& errors) {
  for (const auto& [k, v] : j.items()) {
    if (std::find(known.begin(), known.end(), k) == known.end()) {
      errors[valid_utf8(k) && k.size() <= 64 ? k : std::string("(field)")] = "unknown field";
    }
  }
}

std::string field(const std::map<std::string, std::string>& f, const char* name) {
  const auto it = f.find(name);
  return it == f.end() ? std::string() : it->second;
}

// The access log hides the capability in order links.
std::string loggable_path(const std::string& path) {
  if (path.rfind("/o/", 0) == 0) return "/o/:token" + (path.size() > 46 ? path.substr(46) : std::string());
  if (path.rfind("/api/v1/orders/", 0) == 0) return "/api/v1/orders/:token" + (path.size() > 58 ? path.substr(58) : std::string());
  if (path.size() > 200) return path.substr(0, 200) + "...";
  return path;
}

}  // namespace

struct desk_server::impl {
  desk_service& desk;
  httplib::Server http;
  std::vector<route> routes;
  rate_limiter order_limit;
  rate_limiter login_limit;
  std::string process_key = random_token(32);  // keys operator CSRF tokens; sessions end with the process
  std::mutex session_mutex;
  std::unordered_map<std::string, std::int64_t> sessions;  // hash of session token -> expiry
  std::mutex sweep_mutex;
  std::condition_variable sweep_cv;
  bool stopping = false;
  std::counting_semaphore<password_slots> password_checks{password_slots};  // argon2id takes 64 MiB each

  explicit impl(desk_service& d)
      : desk(d),
        order_limit(d.config().limits.orders_per_minute, d.config().limits.order_burst),
        login_limit(d.config().limits.logins_per_minute, d.config().limits.logins_per_minute) {}

  // --- plumbing -----------------------------------------------------------------------------------

  void add(const char* method, std::string_view pattern, handler h) {
    route r{method, {}, std::move(h)};
    for (auto part : split_path(pattern)) r.parts.emplace_back(part);
    routes.push_back(std::move(r));
  }

  static void security_headers(httplib::Response& res) {
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("X-Frame-Options", "DENY");
    res.set_header("Referrer-Policy", "same-origin");  // order links never leave in a Referer; Origin stays on own forms
    res.set_header("Content-Security-Policy", "default-src 'self'; style-src 'self'; form-action 'self'; frame-ancestors 'none'");
  }

  // set_header adds a header: the default goes on only where the route did not choose one.
  static void default_cache_control(httplib::Response& res) {
    if (!res.has_header("Cache-Control")) res.set_header("Cache-Control", "no-store");
  }

  void dispatch(const httplib::Request& req, httplib::Response& res) {
    security_headers(res);
    route_request(req, res);
    default_cache_control(res);
  }

  void route_request(const httplib::Request& req, httplib::Response& res) {
    // HEAD is GET without the body (httplib sends HEAD here and leaves the body out).
    const std::string_view method = req.method == "HEAD" ? std::string_view("GET") : std::string_view(req.method);
    const auto parts = split_path(req.path);
    bool path_known = false;
    for (const auto& r : routes) {
      if (r.parts.size() != parts.size()) continue;
      params p;
      bool match = true;
      for (std::size_t i = 0; i < parts.size() && match; ++i) {
        if (r.parts[i] == "{}") {
          if (parts[i].empty()) match = false;
          else p.emplace_back(parts[i]);
        } else {
          match = r.parts[i] == parts[i];
        }
      }
      if (!match) continue;
      path_known = true;
      if (r.method != method) continue;
      try {
        r.run(req, res, p);
      } catch (const sql_error& e) {
        log_line(fmt::format("desk: storage error: {}", e.what()));
        fail(req, res, 503, "the order database is not available; try again shortly");
      }
      return;
    }
    if (path_known) fail(req, res, 405, "method not allowed");
    else fail(req, res, 404, "not found");
  }

  static bool is_api(const httplib::Request& req) { return req.path.rfind("/api/", 0) == 0; }

  // Before httplib reads the body. httplib 0.11 holds the body limit only against Content-Length:
  // it reads chunked bodies and bodies without a length to the end, and inflates gzip/deflate/br
  // after the check. So a request body comes with one plain Content-Length within the limit, or not
  // at all. A refusal closes the connection: the unread body must not be taken for the next request.
  httplib::Server::HandlerResponse screen(const httplib::Request& req, httplib::Response& res) {
    const auto refuse = [&](int status, const std::string& message) {
      security_headers(res);
      fail(req, res, status, message);
      default_cache_control(res);
      res.set_header("Connection", "close");
      return httplib::Server::HandlerResponse::Handled;
    };
    if (req.has_header("Transfer-Encoding")) {
      return refuse(411, "send the body with a Content-Length; chunked request bodies are not taken");
    }
    if (req.has_header("Content-Encoding")) return refuse(415, "compressed request bodies are not taken");
    const auto lengths = req.get_header_value_count("Content-Length");
    if (lengths == 0) {
      const bool has_body = req.method == "POST" || req.method == "PUT" || req.method == "PATCH";
      return has_body ? refuse(411, "send a Content-Length with the body") : httplib::Server::HandlerResponse::Unhandled;
    }
    const auto length = req.get_header_value("Content-Length");
    if (lengths > 1 || length.empty() || length.size() > 18 ||
        !std::all_of(length.begin(), length.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return refuse(400, "the Content-Length is malformed");
    }
    if (std::stoull(length) > desk.config().limits.max_body_bytes) return refuse(413, "the request is too large");
    return httplib::Server::HandlerResponse::Unhandled;
  }

  void fail(const httplib::Request& req, httplib::Response& res, int status, const std::string& message) {
    res.status = status;
    if (is_api(req)) {
      res.set_content(nlohmann::json{{"error", message}}.dump(), "application/json");
    } else {
      res.set_content(pages::error(status, message), "text/html; charset=utf-8");
    }
  }

  // The client's address for rate limits. Behind a trusted proxy: the last entry of the last
  // header, the one the proxy appended; entries before it are whatever the client sent.
  std::string client(const httplib::Request& req) const {
    const auto& header = desk.config().client_address_header;
    const auto count = header.empty() ? 0 : req.get_header_value_count(header);
    if (count == 0) return req.remote_addr;
    const auto v = req.get_header_value(header, count - 1);
    std::string_view last = v;
    if (const auto comma = last.rfind(','); comma != std::string_view::npos) last.remove_prefix(comma + 1);
    while (!last.empty() && (last.front() == ' ' || last.front() == '\t')) last.remove_prefix(1);
    while (!last.empty() && (last.back() == ' ' || last.back() == '\t')) last.remove_suffix(1);
    return last.empty() ? req.remote_addr : std::string(last);
  }

  // Cookie attributes; Secure when the public address is https (the browser then sends them over TLS only).
  std::string cookie_attributes(const char* same_site) const {
    const bool https = desk.config().public_url.rfind("https://", 0) == 0;
    return fmt::format("Path=/; HttpOnly; SameSite={}{}", same_site, https ? "; Secure" : "");
  }

  // A browser sends Origin on POST; when it names another site the form did not come from here.
  bool same_origin(const httplib::Request& req) const {
    if (!req.has_header("Origin")) return true;
    const auto origin = req.get_header_value("Origin");
    const auto host = req.get_header_value("Host");
    return origin == "http://" + host || origin == "https://" + host;
  }

  // Customer CSRF: double-submit of a random cookie. Returns the cookie value, setting a new one when
  // the browser has none.
  std::string csrf_for(const httplib::Request& req, httplib::Response& res) {
    auto value = cookie(req, csrf_cookie);
    if (!valid_token(value)) {
      value = random_token(32);
      res.set_header("Set-Cookie", fmt::format("{}={}; {}", csrf_cookie, value, cookie_attributes("Lax")));
    }
    return value;
  }

  bool csrf_ok(const httplib::Request& req, const std::map<std::string, std::string>& form) const {
    const auto c = cookie(req, csrf_cookie);
    return same_origin(req) && valid_token(c) && equal_constant_time(c, field(form, "csrf"));
  }

  std::optional<std::map<std::string, std::string>> read_form(const httplib::Request& req, httplib::Response& res) {
    if (req.get_header_value("Content-Type").rfind("application/x-www-form-urlencoded", 0) != 0) {
      fail(req, res, 415, "forms are sent as application/x-www-form-urlencoded");
      return std::nullopt;
    }
    auto form = parse_form(req.body);
    if (!form) fail(req, res, 400, "the form data is malformed");
    return form;
  }

  std::optional<nlohmann::json> read_json(const httplib::Request& req, httplib::Response& res) {
    if (req.get_header_value("Content-Type").rfind("application/json", 0) != 0) {
      fail(req, res, 415, "send Content-Type: application/json");
      return std::nullopt;
    }
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(req.body);
    } catch (const nlohmann::json::exception&) {
      fail(req, res, 400, "the body is not valid JSON (UTF-8)");
      return std::nullopt;
    }
    if (!j.is_object()) {
      fail(req, res, 400, "the body must be a JSON object");
      return std::nullopt;
    }
    return j;
  }

  void json(httplib::Response& res, int status, const nlohmann::json& j) {
    res.status = status;
    res.set_content(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
  }

  void page(httplib::Response& res, int status, const std::string& body) {
    res.status = status;
    res.set_content(body, "text/html; charset=utf-8");
  }

  void redirect(httplib::Response& res, const std::string& to) {
    res.status = 303;
    res.set_header("Location", to);
  }

  // --- operator authentication ---------------------------------------------------------------------

  std::string session_of(const httplib::Request& req) {
    const auto token = cookie(req, session_cookie);
    if (!valid_token(token)) return {};
    const auto key = hash_hex(token);
    std::lock_guard lock(session_mutex);
    const auto it = sessions.find(key);
    if (it == sessions.end()) return {};
    if (it->second < desk.now_ms()) {
      sessions.erase(it);
      return {};
    }
    return token;
  }

  std::string operator_csrf(const std::string& session) const { return hash_hex("csrf:" + session, process_key); }

  bool operator_form_ok(const httplib::Request& req, const std::string& session, const std::map<std::string, std::string>& form) const {
    return same_origin(req) && equal_constant_time(operator_csrf(session), field(form, "csrf"));
  }

  bool bearer_ok(const httplib::Request& req) const {
    const auto& want = desk.config().operator_token_hash;
    const auto header = req.get_header_value("Authorization");
    if (want.empty() || header.rfind("Bearer ", 0) != 0) return false;
    const auto token = header.substr(7);
    if (token.size() < 32 || token.size() > 256) return false;
    return equal_constant_time(hash_hex(token), want);
  }

  // --- JSON views ------------------------------------------------------------------------------------

  nlohmann::json order_json(const order_record& o, bool for_operator) {
    const auto* network = desk.config().find_network(o.network);
    const auto* card = desk.cards().find(o.gpu_id);
    nlohmann::json transitions = nlohmann::json::array();
    for (const auto& t : desk.store().transitions(o.reference)) {
      nlohmann::json row = {{"seq", t.seq}, {"from", t.from_state.empty() ? nlohmann::json() : nlohmann::json(t.from_state)},
                            {"to", t.to_state}, {"actor", t.actor}, {"at", format_time_iso(t.at_ms)}};
      if (for_operator) row["note"] = t.note;
      transitions.push_back(std::move(row));
    }
    nlohmann::json j = {
        {"reference", o.reference},
        {"state", std::string(to_string(o.state))},
        {"gpu", {{"id", o.gpu_id}, {"name", card ? card->name : o.gpu_id}}},
        {"days", o.days},
        {"quantity", o.quantity},
        {"environment", o.environment},
        {"payment",
         {{"network", o.network},
          {"label", network ? network->label : o.network},
          {"asset", o.asset},
          {"decimals", o.decimals},
          {"amount_units", o.amount_units},
          {"amount", format_units(o.amount_units, o.decimals)},
          {"address", o.address},
          {"example_address", network && network->example_address && network->address == o.address},
          {"reference", o.reference},
          {"expires_at", format_time_iso(o.expires_at_ms)},
          {"usd_cents_per_day", o.usd_cents_per_day},
          {"usd_cents_total", o.usd_cents_total},
          {"usd_cents_per_unit", o.usd_cents_per_unit},
          {"rate_date", o.rate_date}}},
        {"tx_id", o.tx_id},
        {"created_at", format_time_iso(o.created_at_ms)},
        {"updated_at", format_time_iso(o.updated_at_ms)},
        {"transitions", std::move(transitions)},
    };
    if (for_operator) {
      j["email"] = o.email;
      j["messenger"] = o.messenger;
      j["contact_erased"] = o.contact_erased_at_ms.has_value();
    } else {
      j["contact"] = pages::mask_email(o.email);
    }
    return j;
  }

  nlohmann::json card_json(const catalogue_card& c) {
    nlohmann::json formats = nlohmann::json::object();
    for (const auto& [k, v] : c.dense_tflops) formats[k] = v;
    nlohmann::json j = {{"id", c.id}, {"name", c.name}, {"architecture", c.architecture},
                        {"memory_gb", c.memory_gb}, {"memory_type", c.memory_type}, {"bandwidth_gbs", c.bandwidth_gbs},
                        {"tdp_w", c.tdp_w}, {"form_factor", c.form_factor}, {"interconnect", c.interconnect},
                        {"dense_tflops", formats}, {"source", c.source}};
    const auto p = desk.prices().price(c.id);
    j["usd_cents_per_day"] = p ? nlohmann::json(*p) : nlohmann::json();
    j["prices_dated"] = desk.prices().dated;
    j["example_prices"] = desk.prices().example;
    return j;
  }

  // --- routes -------------------------------------------------------------------------------------

  void install_routes() {
    // The hot paths first: the order page and order creation.
    add("GET", "/o/{}", [this](const httplib::Request& req, httplib::Response& res, const params& p) { get_order_page(req, res, p[0], ""); });
    add("POST", "/api/v1/orders", [this](const httplib::Request& req, httplib::Response& res, const params&) { api_create(req, res); });
    add("GET", "/api/v1/orders/{}", [this](const httplib::Request& req, httplib::Response& res, const params& p) {
      const auto o = desk.order_by_token(p[0]);
      if (!o) return fail(req, res, 404, "no such order");
      json(res, 200, order_json(*o, false));
    });
    add("POST", "/api/v1/orders/{}/paid", [this](const httplib::Request& req, httplib::Response& res, const params& p) { api_paid(req, res, p[0]); });
    add("POST", "/o/{}/paid", [this](const httplib::Request& req, httplib::Response& res, const params& p) { form_paid(req, res, p[0]); });
    add("GET", "/", [this](const httplib::Request&, httplib::Response& res, const params&) { page(res, 200, pages::catalogue(desk)); });
    add("GET", "/gpu/{}", [this](const httplib::Request& req, httplib::Response& res, const params& p) {
      const auto* c = desk.cards().find(p[0]);
      if (!c) return fail(req, res, 404, "no such GPU in the catalogue");
      page(res, 200, pages::card(desk, *c));
    });
    add("GET", "/order", [this](const httplib::Request& req, httplib::Response& res, const params&) {
      order_form f;
      f.gpu = req.get_param_value("gpu");
      if (!desk.prices().price(f.gpu)) f.gpu.clear();
      f.days.assign(1, '7');  // (not = "7": GCC 12 warns falsely, -Wrestrict PR105651)
      if (!desk.config().networks.empty()) f.network = desk.config().networks.front().id;
      page(res, 200, pages::order_form(desk, f, {}, csrf_for(req, res), random_token(16), ""));
    });
    add("POST", "/order", [this](const httplib::Request& req, httplib::Response& res, const params&) { form_create(req, res); });
    add("GET", "/static/desk.css", [](const httplib::Request&, httplib::Response& res, const params&) {
      res.set_header("Cache-Control", "public, max-age=3600");
      res.set_content(pages::stylesheet, "text/css; charset=utf-8");
    });
    add("GET", "/healthz", [this](const httplib::Request&, httplib::Response& res, const params&) {
      json(res, 200, {{"status", "ok"}, {"schema_version", desk.store().schema_version()}, {"database", desk.store().dialect()}});
    });
    add("GET", "/api/v1/catalogue", [this](const httplib::Request&, httplib::Response& res, const params&) {
      nlohmann::json cards = nlohmann::json::array();
      for (const auto& c : desk.cards().cards()) {
        if (desk.prices().price(c.id)) cards.push_back(card_json(c));
      }
      nlohmann::json networks = nlohmann::json::array();
      for (const auto& n : desk.config().networks) {
        networks.push_back({{"id", n.id}, {"label", n.label}, {"asset", n.asset}, {"decimals", n.decimals}});
      }
      json(res, 200, {{"cards", cards}, {"networks", networks}, {"durations_days", {3, 7, 30}},
                      {"max_quantity", desk.config().limits.max_quantity}});
    });
    add("GET", "/api/v1/catalogue/{}", [this](const httplib::Request& req, httplib::Response& res, const params& p) {
      const auto* c = desk.cards().find(p[0]);
      if (!c) return fail(req, res, 404, "no such GPU in the catalogue");
      json(res, 200, card_json(*c));
    });

    // Operator: pages behind the session cookie, API behind the bearer token.
    add("GET", "/operator/login", [this](const httplib::Request& req, httplib::Response& res, const params&) {
      page(res, 200, pages::login(csrf_for(req, res), "", !desk.config().operator_password_hash.empty()));
    });
    add("POST", "/operator/login", [this](const httplib::Request& req, httplib::Response& res, const params&) { login(req, res); });
    add("POST", "/operator/logout", [this](const httplib::Request& req, httplib::Response& res, const params&) {
      const auto session = session_of(req);
      if (session.empty()) return redirect(res, "/operator/login");
      const auto form = read_form(req, res);
      if (!form) return;
      if (!operator_form_ok(req, session, *form)) return fail(req, res, 403, "the form expired; reload the page");
      {
        std::lock_guard lock(session_mutex);
        sessions.erase(hash_hex(session));
      }
      res.set_header("Set-Cookie", fmt::format("{}=; {}; Max-Age=0", session_cookie, cookie_attributes("Strict")));
      redirect(res, "/operator/login");
    });
    add("GET", "/operator", [this](const httplib::Request& req, httplib::Response& res, const params&) { operator_list(req, res); });
    add("GET", "/operator/orders/{}", [this](const httplib::Request& req, httplib::Response& res, const params& p) {
      const auto session = session_of(req);
      if (session.empty()) return redirect(res, "/operator/login");
      operator_order(req, res, session, p[0], "", "", 200);
    });
    add("POST", "/operator/orders/{}/move", [this](const httplib::Request& req, httplib::Response& res, const params& p) {
      const auto session = session_of(req);
      if (session.empty()) return fail(req, res, 401, "sign in first");
      const auto form = read_form(req, res);
      if (!form) return;
      if (!operator_form_ok(req, session, *form)) return fail(req, res, 403, "the form expired; reload the page");
      const auto r = desk.operator_move(p[0], field(*form, "to"), field(*form, "note"));
      if (r.status == 404) return fail(req, res, 404, "no such order");
      if (r.status != 200) return operator_order(req, res, session, p[0], "", r.reason, r.status);
      redirect(res, fmt::format("/operator/orders/{}?moved={}", p[0], to_string(r.order.state)));
    });
    add("GET", "/api/v1/operator/orders", [this](const httplib::Request& req, httplib::Response& res, const params&) {
      if (!bearer_ok(req)) return fail(req, res, 401, "operator token required");
      const auto state = req.get_param_value("state");
      if (!state.empty() && !parse_state(state)) return fail(req, res, 422, "unknown state");
      const auto limit = req.has_param("limit") ? parse_bounded_int(req.get_param_value("limit"), 1, 1000) : std::optional<int>(100);
      const auto offset = req.has_param("offset") ? parse_bounded_int(req.get_param_value("offset"), 0, 100'000'000) : std::optional<int>(0);
      if (!limit || !offset) return fail(req, res, 422, "limit is 1-1000 and offset 0 or more");
      nlohmann::json orders = nlohmann::json::array();
      for (const auto& o : desk.store().list(state, *limit, *offset)) {
        orders.push_back({{"reference", o.reference}, {"state", std::string(to_string(o.state))}, {"gpu", o.gpu_id},
                          {"days", o.days}, {"quantity", o.quantity}, {"amount_units", o.amount_units}, {"asset", o.asset},
                          {"created_at", format_time_iso(o.created_at_ms)}});
      }
      json(res, 200, {{"orders", orders}, {"total", desk.store().count(state)}});
    });
    add("GET", "/api/v1/operator/orders/{}", [this](const httplib::Request& req, httplib::Response& res, const params& p) {
      if (!bearer_ok(req)) return fail(req, res, 401, "operator token required");
      const auto o = valid_reference(p[0]) ? desk.store().by_reference(p[0]) : std::nullopt;
      if (!o) return fail(req, res, 404, "no such order");
      json(res, 200, order_json(*o, true));
    });
    add("POST", "/api/v1/operator/orders/{}/transition", [this](const httplib::Request& req, httplib::Response& res, const params& p) {
      if (!bearer_ok(req)) return fail(req, res, 401, "operator token required");
      const auto j = read_json(req, res);
      if (!j) return;
      nlohmann::json errors = nlohmann::json::object();
      refuse_unknown_fields(*j, {"to", "note"}, errors);
      if (!j->contains("to") || !(*j)["to"].is_string()) errors["to"] = "must be a state name (string)";
      if (j->contains("note") && !(*j)["note"].is_string()) errors["note"] = "must be a string";
      if (!errors.empty()) return json(res, 422, {{"errors", errors}});
      const auto r = desk.operator_move(p[0], (*j)["to"].get<std::string>(), j->value("note", ""));
      if (r.status != 200) return json(res, r.status, {{"error", r.reason}});
      json(res, 200, order_json(r.order, true));
    });
  }

  // --- handlers -----------------------------------------------------------------------------------

  void get_order_page(const httplib::Request& req, httplib::Response& res, const std::string& token, const std::string& notice) {
    const auto o = desk.order_by_token(token);
    if (!o) return fail(req, res, 404, "no such order");
    std::string n = notice;
    if (n.empty() && req.has_param("paid")) n = "Thank you: the operator has been told that you paid.";
    page(res, 200, pages::order(desk, *o, desk.store().transitions(o->reference), token, csrf_for(req, res), desk.now_ms(), n));
  }

  void form_create(const httplib::Request& req, httplib::Response& res) {
    const auto form = read_form(req, res);
    if (!form) return;
    if (!csrf_ok(req, *form)) return fail(req, res, 403, "the form expired or came from another site; reload the order page");
    order_form f{field(*form, "gpu"), field(*form, "days"), field(*form, "quantity"), field(*form, "environment"),
                 field(*form, "email"), field(*form, "messenger"), field(*form, "network")};
    auto key = field(*form, "submission");
    if (!valid_submission_key(key)) key.clear();
    // A form with mistakes is answered without spending the client's rate limit.
    if (auto errors = desk.check_order(f); !errors.empty()) {
      return page(res, 422, pages::order_form(desk, f, errors, csrf_for(req, res), key.empty() ? random_token(16) : key, ""));
    }
    if (!order_limit.allow(client(req), desk.now_ms())) {
      res.set_header("Retry-After", "60");
      return page(res, 429, pages::order_form(desk, f, {}, csrf_for(req, res), key.empty() ? random_token(16) : key,
                                              "Too many orders from your address; wait a minute and send the form again."));
    }
    const auto r = desk.create_order(f, key);
    if (r.status == 201 || r.status == 200) return redirect(res, "/o/" + r.token);
    if (r.status == 409) {
      return page(res, 409, pages::order_form(desk, f, {}, csrf_for(req, res), random_token(16), r.message));
    }
    page(res, 422, pages::order_form(desk, f, r.errors, csrf_for(req, res), key.empty() ? random_token(16) : key, ""));
  }

  void api_create(const httplib::Request& req, httplib::Response& res) {
    const auto key = req.get_header_value("Idempotency-Key");
    if (!key.empty() && !valid_submission_key(key)) {
      return json(res, 422, {{"errors", {{"Idempotency-Key", "22 to 128 characters of A-Z a-z 0-9 _ -, random (at least 10 different characters)"}}}});
    }
    const auto j = read_json(req, res);
    if (!j) return;
    nlohmann::json errors = nlohmann::json::object();
    order_form f;
    const auto text = [&](const char* name, std::string& out, bool required) {
      const auto it = j->find(name);
      if (it == j->end()) {
        if (required) errors[name] = "is required";
      } else if (!it->is_string()) {
        errors[name] = "must be a string";
      } else {
        out = it->get<std::string>();
      }
    };
    const auto number = [&](const char* name, std::string& out) {
      const auto it = j->find(name);
      if (it == j->end()) errors[name] = "is required";
      else if (!it->is_number_integer()) errors[name] = "must be an integer";
      else out = it->is_number_unsigned() ? std::to_string(it->get<std::uint64_t>()) : std::to_string(it->get<std::int64_t>());
    };
    text("gpu", f.gpu, true);
    number("days", f.days);
    number("quantity", f.quantity);
    text("environment", f.environment, true);
    text("email", f.email, true);
    text("messenger", f.messenger, false);
    text("network", f.network, true);
    refuse_unknown_fields(*j, {"gpu", "days", "quantity", "environment", "email", "messenger", "network"}, errors);
    if (errors.empty()) {
      for (const auto& [k, v] : desk.check_order(f)) errors[k] = v;  // before the rate limit: mistakes cost nothing
    }
    if (!errors.empty()) return json(res, 422, {{"errors", errors}});
    if (!order_limit.allow(client(req), desk.now_ms())) {
      res.set_header("Retry-After", "60");
      return fail(req, res, 429, "too many orders from this address; wait a minute");
    }
    const auto r = desk.create_order(f, key);
    if (r.status == 422) {
      nlohmann::json e = nlohmann::json::object();
      for (const auto& [k, v] : r.errors) e[k] = v;
      return json(res, 422, {{"errors", e}});
    }
    if (r.status == 409) return fail(req, res, 409, r.message);
    auto out = order_json(r.order, false);
    out["token"] = r.token;
    out["url"] = desk.config().public_url + "/o/" + r.token;
    res.set_header("Location", "/api/v1/orders/" + r.token);
    json(res, r.status, out);
  }

  void api_paid(const httplib::Request& req, httplib::Response& res, const std::string& token) {
    std::string tx_id;
    if (!req.body.empty() || req.has_header("Content-Type")) {
      const auto j = read_json(req, res);
      if (!j) return;
      nlohmann::json errors = nlohmann::json::object();
      refuse_unknown_fields(*j, {"tx_id"}, errors);
      if (j->contains("tx_id")) {
        if (!(*j)["tx_id"].is_string()) errors["tx_id"] = "must be a string";
        else tx_id = (*j)["tx_id"].get<std::string>();
      }
      if (!errors.empty()) return json(res, 422, {{"errors", errors}});
    }
    const auto r = desk.report_paid(token, tx_id);
    if (r.status == 422) return json(res, 422, {{"errors", {{"tx_id", r.reason}}}});
    if (r.status != 200) return fail(req, res, r.status, r.reason);
    auto out = order_json(r.order, false);
    out["changed"] = r.changed;
    json(res, 200, out);
  }

  void form_paid(const httplib::Request& req, httplib::Response& res, const std::string& token) {
    const auto form = read_form(req, res);
    if (!form) return;
    if (!csrf_ok(req, *form)) return fail(req, res, 403, "the form expired or came from another site; reload the order page");
    const auto r = desk.report_paid(token, field(*form, "tx_id"));
    if (r.status == 200) return redirect(res, "/o/" + token + "?paid=1");
    if (r.status == 404) return fail(req, res, 404, "no such order");
    const auto o = desk.order_by_token(token);
    if (!o) return fail(req, res, 404, "no such order");
    page(res, r.status, pages::order(desk, *o, desk.store().transitions(o->reference), token, csrf_for(req, res), desk.now_ms(),
                                     "Not recorded: " + r.reason));
  }

  void login(const httplib::Request& req, httplib::Response& res) {
    const auto form = read_form(req, res);
    if (!form) return;
    if (!csrf_ok(req, *form)) return fail(req, res, 403, "the form expired; reload the sign-in page");
    const bool configured = !desk.config().operator_password_hash.empty();
    // A few argon2id checks at a time; the others are told to come back rather than queue up and
    // hold every worker thread.
    if (!password_checks.try_acquire()) {
      res.set_header("Retry-After", "1");
      return page(res, 503, pages::login(csrf_for(req, res), "Busy checking other sign-ins; try again in a moment.", configured));
    }
    struct release {
      std::counting_semaphore<password_slots>& slots;
      ~release() { slots.release(); }
    } slot{password_checks};
    if (!login_limit.allow(client(req), desk.now_ms())) {
      res.set_header("Retry-After", "60");
      return page(res, 429, pages::login(csrf_for(req, res), "Too many attempts; wait a minute.", configured));
    }
    const auto password = field(*form, "password");
    const bool ok = configured && !password.empty() && password.size() <= 1024 &&
                    verify_password(desk.config().operator_password_hash, password);
    if (!ok) {
      log_line("desk: operator sign-in refused");
      return page(res, 401, pages::login(csrf_for(req, res), "Wrong password.", configured));
    }
    const auto token = random_token(32);
    {
      std::lock_guard lock(session_mutex);
      const auto now = desk.now_ms();
      for (auto it = sessions.begin(); it != sessions.end();) it = it->second < now ? sessions.erase(it) : std::next(it);
      sessions[hash_hex(token)] = now + session_ms;
    }
    log_line("desk: operator signed in");
    res.set_header("Set-Cookie", fmt::format("{}={}; {}; Max-Age={}", session_cookie, token, cookie_attributes("Strict"), session_ms / 1000));
    redirect(res, "/operator");
  }

  void operator_list(const httplib::Request& req, httplib::Response& res) {
    const auto session = session_of(req);
    if (session.empty()) return redirect(res, "/operator/login");
    const auto state = req.get_param_value("state");
    if (!state.empty() && !parse_state(state)) return fail(req, res, 422, "unknown state");
    const auto page_no = req.has_param("page") ? parse_bounded_int(req.get_param_value("page"), 0, 1'000'000) : std::optional<int>(0);
    if (!page_no) return fail(req, res, 422, "page must be a number");
    constexpr int per_page = 50;
    auto orders = desk.store().list(state, per_page + 1, *page_no * per_page);
    const bool more = orders.size() > per_page;
    if (more) orders.pop_back();
    std::vector<std::pair<std::string, std::int64_t>> counts;
    for (const auto s : all_states()) {
      if (s == order_state::created) continue;  // never at rest there: awaiting_payment is written with it
      counts.emplace_back(std::string(to_string(s)), desk.store().count(std::string(to_string(s))));
    }
    page(res, 200, pages::operator_list(orders, state, counts, *page_no, more, operator_csrf(session)));
  }

  void operator_order(const httplib::Request& req, httplib::Response& res, const std::string& session,
                      const std::string& reference, const std::string& notice, const std::string& error, int status) {
    const auto o = valid_reference(reference) ? desk.store().by_reference(reference) : std::nullopt;
    if (!o) return fail(req, res, 404, "no such order");
    std::string n = notice;
    if (n.empty() && req.has_param("moved")) n = "Order moved to " + std::string(to_string(o->state)) + ".";
    page(res, status, pages::operator_order(desk, *o, desk.store().transitions(o->reference),
                                            next_states(o->state, actor_kind::operator_, desk.now_ms(), o->expires_at_ms),
                                            operator_csrf(session), n, error));
  }
};

desk_server::desk_server(desk_service& service) : m_impl(std::make_unique<impl>(service)) {
  auto& s = *m_impl;
  const auto& config = service.config();
  const int threads = config.threads;
  s.http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<std::size_t>(threads)); };
  s.http.set_payload_max_length(config.limits.max_body_bytes);  // screen() refuses larger ones before reading
  s.http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) { return m_impl->screen(req, res); });
  s.http.set_tcp_nodelay(true);  // a response in one go, not held back by Nagle against delayed ACKs
  s.http.set_keep_alive_max_count(100'000);
  s.http.set_keep_alive_timeout(5);
  s.http.set_read_timeout(10, 0);
  s.http.set_write_timeout(10, 0);
  s.install_routes();
  const auto dispatch = [this](const httplib::Request& req, httplib::Response& res) { m_impl->dispatch(req, res); };
  s.http.Get(".*", dispatch);
  s.http.Post(".*", dispatch);
  s.http.Put(".*", dispatch);
  s.http.Delete(".*", dispatch);
  s.http.Patch(".*", dispatch);
  s.http.Options(".*", dispatch);
  s.http.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;  // a message is already there
    const char* why = res.status == 413 ? "the request is too large" : res.status == 400 ? "bad request" : "the request was refused";
    impl::security_headers(res);
    m_impl->fail(req, res, res.status, why);
    impl::default_cache_control(res);
    return httplib::Server::HandlerResponse::Handled;
  }));
  s.http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      log_line(fmt::format("desk: internal error: {}", e.what()));
    } catch (...) {
      log_line("desk: internal error");
    }
    res.status = 500;
    res.set_content("internal error", "text/plain");
  });
  if (config.log_requests) {
    s.http.set_logger([](const httplib::Request& req, const httplib::Response& res) {
      log_line(fmt::format("desk: {} {} {}", req.method, loggable_path(req.path), res.status));
    });
  }
}

desk_server::~desk_server() { stop(); }

int desk_server::bind() {
  const auto& config = m_impl->desk.config();
  int port = config.port;
  if (port == 0) {
    port = m_impl->http.bind_to_any_port(config.host);
  } else if (!m_impl->http.bind_to_port(config.host, port)) {
    port = -1;
  }
  if (port <= 0) throw std::runtime_error(fmt::format("desk: cannot listen on {}:{}", config.host, config.port));
  return port;
}

void desk_server::serve() {
  auto& s = *m_impl;
  std::thread sweeper([&s] {
    std::unique_lock lock(s.sweep_mutex);
    while (!s.stopping) {
      lock.unlock();
      try {
        s.desk.sweep();
      } catch (const std::exception& e) {
        log_line(fmt::format("desk: sweep failed: {}", e.what()));
      }
      lock.lock();
      s.sweep_cv.wait_for(lock, std::chrono::seconds(s.desk.config().sweep_seconds), [&s] { return s.stopping; });
    }
  });
  s.http.listen_after_bind();
  {
    std::lock_guard lock(s.sweep_mutex);
    s.stopping = true;
  }
  s.sweep_cv.notify_all();
  sweeper.join();
}

void desk_server::stop() {
  {
    std::lock_guard lock(m_impl->sweep_mutex);
    m_impl->stopping = true;
  }
  m_impl->sweep_cv.notify_all();
  if (m_impl->http.is_running()) m_impl->http.stop();
}

bool desk_server::running() const { return m_impl->http.is_running(); }

}  // namespace itera::desk
