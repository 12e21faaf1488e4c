// The HTTP service end to end, in process, on SQLite and on PostgreSQL: pages, API, bad input on
// every field and endpoint, CSRF, operator sign-in, rate limits, size limits, and what the log keeps.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <latch>
#include <mutex>
#include <regex>
#include <thread>

#include "itera/desk/log.hpp"
#include "desk_test_support.hpp"

namespace {

using namespace itera::desk;
using nlohmann::json;

// One request written byte for byte on its own connection (what httplib's client will not send: no
// Content-Length, chunked bodies); returns the status of the answer, 0 when none came.
int raw_status(int port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{3, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  std::string answer;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) {
    std::size_t sent = 0;
    while (sent < request.size()) {
      const auto n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<std::size_t>(n);
    }
    char buf[4096];
    while (answer.find("\r\n") == std::string::npos) {
      const auto n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      answer.append(buf, static_cast<std::size_t>(n));
    }
  }
  ::close(fd);
  if (answer.rfind("HTTP/1.1 ", 0) != 0 || answer.size() < 12) return 0;
  return std::stoi(answer.substr(9, 3));
}

std::string chunked(const std::string& body) {
  std::string out;
  for (std::size_t i = 0; i < body.size(); i += 4096) {
    const auto part = body.substr(i, 4096);
    out += fmt::format("{:x}\r\n{}\r\n", part.size(), part);
  }
  return out + "0\r\n\r\n";
}

constexpr const char* password = "operator password 1";

class desk_http : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    set_log_sink([this](const std::string& line) {
      std::lock_guard lock(m_log_mutex);
      m_log += line + "\n";
    });
    m_db = std::make_unique<desk_test::database_fixture>(GetParam());
    std::string why;
    auto db = m_db->open(why);
    if (!db) GTEST_SKIP() << why;
    m_config = desk_test::test_config(m_db->database_string(why));
    m_config.operator_password_hash = hash_password(password);
    m_api_token = random_token(32);
    m_config.operator_token_hash = hash_hex(m_api_token);
    configure(m_config);
    m_desk = std::make_unique<desk_test::running_desk>(m_config, std::move(db), m_clock);
    m_client = std::make_unique<httplib::Client>("127.0.0.1", m_desk->port());
  }
  void TearDown() override {
    m_client.reset();
    m_desk.reset();
    m_db.reset();
    set_log_sink({});
  }
  virtual void configure(desk_config&) {}

  httplib::Result post_json(const std::string& path, const std::string& body, httplib::Headers headers = {}) {
    return m_client->Post(path.c_str(), headers, body, "application/json");
  }
  json order_body() const {
    return {{"gpu", "l40s-48gb"}, {"days", 3}, {"quantity", 1}, {"environment", "bare"},
            {"email", "customer.x@example.com"}, {"messenger", "telegram:@secret_handle"}, {"network", "USDT-TRON"}};
  }
  std::int64_t orders() { return m_desk->service().store().count(""); }

  // A browser's visit: the CSRF cookie from a form page.
  std::string csrf_cookie(const std::string& page = "/order") {
    const auto r = m_client->Get(page.c_str());
    EXPECT_TRUE(r);
    const auto set = r->get_header_value("Set-Cookie");
    const auto start = set.find("desk_csrf=") + 10;
    return set.substr(start, set.find(';') - start);
  }
  httplib::Result post_form(const std::string& path, const httplib::Params& fields, const std::string& cookies,
                            httplib::Headers headers = {}) {
    if (!cookies.empty()) headers.emplace("Cookie", cookies);
    return m_client->Post(path.c_str(), headers, fields);
  }
  std::string log() {
    std::lock_guard lock(m_log_mutex);
    return m_log;
  }
  std::string sign_in() {
    const auto csrf = csrf_cookie("/operator/login");
    const auto r = post_form("/operator/login", {{"csrf", csrf}, {"password", password}}, "desk_csrf=" + csrf);
    EXPECT_EQ(r->status, 303);
    const auto set = r->get_header_value("Set-Cookie");
    const auto start = set.find("desk_op=") + 8;
    return set.substr(start, set.find(';') - start);
  }
  std::string operator_csrf(const std::string& session, const std::string& page) {
    const auto r = m_client->Get(page.c_str(), {{"Cookie", "desk_op=" + session}});
    std::smatch m;
    static const std::regex re("name=\"csrf\" value=\"([0-9a-f]{64})\"");
    EXPECT_TRUE(std::regex_search(r->body, m, re)) << page;
    return m[1];
  }

  std::unique_ptr<desk_test::database_fixture> m_db;
  desk_config m_config;
  desk_test::test_clock m_clock;
  std::unique_ptr<desk_test::running_desk> m_desk;
  std::unique_ptr<httplib::Client> m_client;
  std::string m_api_token;
  std::mutex m_log_mutex;
  std::string m_log;
};

TEST_P(desk_http, catalogue_pages_and_api) {
  auto r = m_client->Get("/");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("NVIDIA H100 PCIe 80GB"), std::string::npos);
  EXPECT_NE(r->body.find("Example prices"), std::string::npos);
  r = m_client->Get("/gpu/l40s-48gb");
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("864 GB/s"), std::string::npos);
  EXPECT_NE(r->body.find("36.00 USD per GPU-day"), std::string::npos);
  EXPECT_NE(r->body.find("Measuring your workload"), std::string::npos);
  EXPECT_EQ(r->get_header_value("X-Frame-Options"), "DENY");
  EXPECT_EQ(m_client->Get("/gpu/nope")->status, 404);
  EXPECT_EQ(m_client->Get("/gpu/..%2F..%2Fetc%2Fpasswd")->status, 404);
  EXPECT_EQ(m_client->Get("/gpu/%3Cscript%3E")->status, 404);
  r = m_client->Get("/api/v1/catalogue");
  const auto j = json::parse(r->body);
  EXPECT_EQ(j["cards"].size(), 13U);
  EXPECT_EQ(j["networks"].size(), 3U);
  EXPECT_EQ(m_client->Get("/nowhere")->status, 404);
  EXPECT_EQ(m_client->Put("/api/v1/orders", "{}", "application/json")->status, 405);
  EXPECT_EQ(m_client->Delete("/o/x")->status, 405);
  EXPECT_EQ(json::parse(m_client->Get("/healthz")->body)["database"], GetParam());
}

TEST_P(desk_http, api_order_and_i_paid) {
  const std::string key = random_token(20);
  auto r = post_json("/api/v1/orders", order_body().dump(), {{"Idempotency-Key", key}});
  ASSERT_EQ(r->status, 201) << r->body;
  const auto j = json::parse(r->body);
  EXPECT_EQ(j["state"], "awaiting_payment");
  EXPECT_EQ(j["payment"]["amount_units"], 108'000'000);  // 36 USD x 3 days = 108 USDT
  EXPECT_EQ(j["payment"]["amount"], "108.000000");
  EXPECT_EQ(j["payment"]["address"], m_config.networks[0].address);
  EXPECT_EQ(j["payment"]["example_address"], true);
  EXPECT_EQ(j["contact"], "c***@example.com");
  EXPECT_FALSE(j.contains("email"));
  const std::string token = j["token"];
  // A retry with the same key gives the same order.
  r = post_json("/api/v1/orders", order_body().dump(), {{"Idempotency-Key", key}});
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(json::parse(r->body)["reference"], j["reference"]);
  EXPECT_EQ(orders(), 1);
  // The order page: payment instructions and the "I paid" button.
  r = m_client->Get(("/o/" + token).c_str());
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("108.000000 USDT"), std::string::npos);
  EXPECT_NE(r->body.find("EXAMPLE receiving address"), std::string::npos);
  EXPECT_NE(r->body.find("id=\"i-paid\""), std::string::npos);
  EXPECT_EQ(r->get_header_value("Referrer-Policy"), "same-origin");
  EXPECT_EQ(r->body.find("customer.x@example.com"), std::string::npos);
  // I paid, twice.
  r = post_json("/api/v1/orders/" + token + "/paid", R"({"tx_id":"0xabc"})");
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(json::parse(r->body)["changed"], true);
  r = post_json("/api/v1/orders/" + token + "/paid", "{}");
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(json::parse(r->body)["changed"], false);
  EXPECT_EQ(json::parse(r->body)["transitions"].size(), 3U);
  // Someone else's link, or a guessed one: nothing.
  EXPECT_EQ(m_client->Get(("/o/" + random_token()).c_str())->status, 404);
  EXPECT_EQ(m_client->Get("/o/short")->status, 404);
  EXPECT_EQ(m_client->Get(("/api/v1/orders/" + random_token()).c_str())->status, 404);
  EXPECT_EQ(post_json("/api/v1/orders/" + random_token() + "/paid", "{}")->status, 404);
}

TEST_P(desk_http, api_bad_input_on_every_field) {
  const auto expect_field = [&](const json& body, const std::string& field, int status = 422) {
    const auto r = post_json("/api/v1/orders", body.dump());
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, status) << field << ": " << body.dump() << " -> " << r->body;
    if (status == 422) {
      const auto j = json::parse(r->body);
      EXPECT_TRUE(j["errors"].contains(field)) << field << ": " << r->body;
    }
  };
  const std::vector<std::string> injections = {
      "'; DROP TABLE desk_orders; --", "\" OR \"1\"=\"1", "<script>alert(1)</script>",
      "${jndi:ldap://x}", "%00", std::string("a\0b", 3), "\xe2\x80\xae" "gnp.exe", std::string(300, 'x')};
  for (const char* f : {"gpu", "environment", "email", "network"}) {
    auto b = order_body();
    b.erase(f);
    expect_field(b, f);  // missing
    b[f] = 42;
    expect_field(b, f);  // wrong type
    b[f] = nullptr;
    expect_field(b, f);
    b[f] = json::array({"x"});
    expect_field(b, f);
    b[f] = "";
    expect_field(b, f);
    for (const auto& s : injections) {
      b[f] = s;
      expect_field(b, f);
    }
  }
  auto b = order_body();
  for (const auto& s : injections) {
    if (s.size() < 2) continue;
    b["messenger"] = s;
    expect_field(b, "messenger");
  }
  for (const char* f : {"days", "quantity"}) {
    for (const json& v : {json("3"), json(3.0), json(-3), json(0), json(9), json(1e30), json(std::numeric_limits<std::uint64_t>::max()),
                          json(nullptr), json(true), json::object()}) {
      b = order_body();
      b[f] = v;
      expect_field(b, f);
    }
    b = order_body();
    b.erase(f);
    expect_field(b, f);
  }
  b = order_body();
  b["quantity"] = m_config.limits.max_quantity + 1;
  expect_field(b, "quantity");
  b = order_body();
  b["days"] = 4;
  expect_field(b, "days");
  // Text that only looks dangerous is stored as text and shown escaped.
  b = order_body();
  b["environment"] = "../../etc/passwd";
  ASSERT_EQ(post_json("/api/v1/orders", b.dump())->status, 201);
  b = order_body();
  b["admin"] = true;
  expect_field(b, "admin");
  // Bodies that are not an order at all.
  EXPECT_EQ(post_json("/api/v1/orders", "not json")->status, 400);
  EXPECT_EQ(post_json("/api/v1/orders", "[1,2]")->status, 400);
  EXPECT_EQ(post_json("/api/v1/orders", "{\"gpu\":\"\xff\xfe\"}")->status, 400);  // not UTF-8
  EXPECT_EQ(post_json("/api/v1/orders", "")->status, 400);
  EXPECT_EQ(m_client->Post("/api/v1/orders", order_body().dump(), "text/plain")->status, 415);
  EXPECT_EQ(m_client->Post("/api/v1/orders", order_body().dump(), "application/x-www-form-urlencoded")->status, 415);
  EXPECT_EQ(post_json("/api/v1/orders", std::string(m_config.limits.max_body_bytes + 1, ' '))->status, 413);
  EXPECT_EQ(post_json("/api/v1/orders", order_body().dump(), {{"Idempotency-Key", "short"}})->status, 422);
  EXPECT_EQ(post_json("/api/v1/orders", order_body().dump(), {{"Idempotency-Key", std::string(30, '!')}})->status, 422);
  // "I paid" with bad bodies and ids.
  const auto created = json::parse(post_json("/api/v1/orders", order_body().dump())->body);
  const std::string token = created["token"];
  for (const std::string& body : {std::string(R"({"tx_id":5})"), std::string(R"({"tx_id":"a b"})"),
                                  R"({"tx_id":")" + std::string(129, 'a') + "\"}", std::string(R"({"other":"x"})"),
                                  std::string(R"({"tx_id":"'; DROP TABLE desk_orders; --"})")}) {
    EXPECT_EQ(post_json("/api/v1/orders/" + token + "/paid", body)->status, 422) << body;
  }
  EXPECT_EQ(post_json("/api/v1/orders/" + token + "/paid", "[]")->status, 400);
  EXPECT_EQ(m_client->Post(("/api/v1/orders/" + token + "/paid").c_str(), "x", "text/plain")->status, 415);
  EXPECT_EQ(json::parse(m_client->Get(("/api/v1/orders/" + token).c_str())->body)["state"], "awaiting_payment");
  EXPECT_EQ(orders(), 2);  // nothing bad got in
}

TEST_P(desk_http, order_form_with_messages_beside_fields_and_csrf) {
  const auto csrf = csrf_cookie();
  ASSERT_EQ(csrf.size(), 43U);
  const std::string cookies = "desk_csrf=" + csrf;
  httplib::Params good = {{"csrf", csrf}, {"submission", random_token(16)}, {"gpu", "h200-sxm-141gb"}, {"days", "30"},
                          {"quantity", "1"}, {"environment", "CUDA 12.8, PyTorch 2.7"}, {"email", "f@example.com"},
                          {"messenger", ""}, {"network", "BTC"}};
  // Bad values: 422, each message beside its field, the values escaped when shown again.
  httplib::Params bad = {{"csrf", csrf}, {"gpu", "<b>x</b>"}, {"days", "5"}, {"quantity", "-1"},
                         {"environment", "<script>alert(1)</script>"}, {"email", "\"><img src=x onerror=alert(1)>"},
                         {"messenger", "a b"}, {"network", "DOGE"}};
  auto r = post_form("/order", bad, cookies);
  ASSERT_EQ(r->status, 422);
  for (const char* f : {"gpu", "days", "quantity", "environment", "email", "messenger", "network"}) {
    EXPECT_NE(r->body.find(std::string("id=\"error-") + f + "\""), std::string::npos) << f;
  }
  EXPECT_EQ(r->body.find("<script>alert(1)</script>"), std::string::npos);
  EXPECT_EQ(r->body.find("<img src=x"), std::string::npos);
  EXPECT_NE(r->body.find("&lt;script&gt;"), std::string::npos);
  // CSRF: no token, wrong token, no cookie, another site's Origin.
  auto no_csrf = good;
  no_csrf.erase("csrf");
  EXPECT_EQ(post_form("/order", no_csrf, cookies)->status, 403);
  auto wrong = good;
  wrong.find("csrf")->second = random_token();
  EXPECT_EQ(post_form("/order", wrong, cookies)->status, 403);
  EXPECT_EQ(post_form("/order", good, "")->status, 403);
  EXPECT_EQ(post_form("/order", good, cookies, {{"Origin", "https://evil.example"}})->status, 403);
  EXPECT_EQ(orders(), 0);
  // Malformed form bodies.
  EXPECT_EQ(m_client->Post("/order", {{"Cookie", cookies}}, "gpu=%zz", "application/x-www-form-urlencoded")->status, 400);
  EXPECT_EQ(m_client->Post("/order", {{"Cookie", cookies}}, "gpu=a&gpu=b", "application/x-www-form-urlencoded")->status, 400);
  EXPECT_EQ(m_client->Post("/order", {{"Cookie", cookies}}, "{}", "application/json")->status, 415);
  // Good: a redirect to the order's own page; pressing the button twice makes one order.
  r = post_form("/order", good, cookies);
  ASSERT_EQ(r->status, 303) << r->body;
  const auto location = r->get_header_value("Location");
  EXPECT_EQ(location.rfind("/o/", 0), 0U);
  EXPECT_EQ(post_form("/order", good, cookies)->get_header_value("Location"), location);
  EXPECT_EQ(orders(), 1);
  // I paid through the form, with CSRF.
  const std::string token = location.substr(3);
  EXPECT_EQ(post_form(location + "/paid", {{"tx_id", "abc"}}, cookies)->status, 403);
  r = post_form(location + "/paid", {{"csrf", csrf}, {"tx_id", "bad tx id"}}, cookies);
  EXPECT_EQ(r->status, 422);
  r = post_form(location + "/paid", {{"csrf", csrf}, {"tx_id", "abc"}}, cookies);
  EXPECT_EQ(r->status, 303);
  r = m_client->Get((location + "?paid=1").c_str());
  EXPECT_NE(r->body.find("payment_reported"), std::string::npos);
  EXPECT_NE(r->body.find("You told us you paid"), std::string::npos);
}

TEST_P(desk_http, operator_side_needs_sign_in) {
  const auto created = json::parse(post_json("/api/v1/orders", order_body().dump())->body);
  const std::string ref = created["reference"];
  const std::string token = created["token"];
  // Nothing of the operator's without credentials.
  EXPECT_EQ(m_client->Get("/operator")->status, 303);
  EXPECT_EQ(m_client->Get(("/operator/orders/" + ref).c_str())->status, 303);
  EXPECT_EQ(m_client->Post(("/operator/orders/" + ref + "/move").c_str(), "to=paid", "application/x-www-form-urlencoded")->status, 401);
  EXPECT_EQ(m_client->Get("/api/v1/operator/orders")->status, 401);
  EXPECT_EQ(m_client->Get("/api/v1/operator/orders", {{"Authorization", "Bearer " + random_token()}})->status, 401);
  EXPECT_EQ(m_client->Get("/api/v1/operator/orders", {{"Authorization", "Basic abc"}})->status, 401);
  EXPECT_EQ(m_client->Get("/operator", {{"Cookie", "desk_op=" + random_token()}})->status, 303);
  const auto csrf = csrf_cookie("/operator/login");
  auto r = post_form("/operator/login", {{"csrf", csrf}, {"password", "wrong"}}, "desk_csrf=" + csrf);
  EXPECT_EQ(r->status, 401);
  EXPECT_TRUE(r->get_header_value("Set-Cookie").empty());
  // Signed in: the list, the order with its contact details, the moves.
  const auto session = sign_in();
  ASSERT_EQ(session.size(), 43U);
  const std::string cookie = "desk_op=" + session;
  r = m_client->Get("/operator", {{"Cookie", cookie}});
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find(ref), std::string::npos);
  const auto page = "/operator/orders/" + ref;
  const auto op_csrf = operator_csrf(session, "/operator");  // one per session
  r = m_client->Get(page.c_str(), {{"Cookie", cookie}});
  EXPECT_NE(r->body.find("customer.x@example.com"), std::string::npos);
  // Illegal: confirm before "I paid". Refused, with the reason.
  r = post_form(page + "/move", {{"csrf", op_csrf}, {"to", "paid"}}, cookie);
  EXPECT_EQ(r->status, 409);
  EXPECT_NE(r->body.find("an order cannot go from awaiting_payment to paid"), std::string::npos);
  EXPECT_EQ(post_form(page + "/move", {{"csrf", random_token()}, {"to", "paid"}}, cookie)->status, 403);
  ASSERT_EQ(post_json("/api/v1/orders/" + token + "/paid", "{}")->status, 200);
  r = post_form(page + "/move", {{"csrf", op_csrf}, {"to", "paid"}, {"note", "seen on chain"}}, cookie);
  EXPECT_EQ(r->status, 303);
  EXPECT_EQ(json::parse(m_client->Get(("/api/v1/orders/" + token).c_str())->body)["state"], "paid");
  EXPECT_EQ(post_form(page + "/move", {{"csrf", op_csrf}, {"to", "bogus"}}, cookie)->status, 422);
  EXPECT_EQ(post_form(page + "/move", {{"csrf", op_csrf}, {"to", "provisioning"}, {"note", "x\x01"}}, cookie)->status, 422);
  // The API with the token.
  const httplib::Headers bearer = {{"Authorization", "Bearer " + m_api_token}};
  r = m_client->Get("/api/v1/operator/orders?state=paid", bearer);
  EXPECT_EQ(json::parse(r->body)["total"], 1);
  EXPECT_EQ(m_client->Get("/api/v1/operator/orders?state=nope", bearer)->status, 422);
  EXPECT_EQ(m_client->Get("/api/v1/operator/orders?limit=0", bearer)->status, 422);
  EXPECT_EQ(m_client->Get("/api/v1/operator/orders?limit=x", bearer)->status, 422);
  r = m_client->Post(("/api/v1/operator/orders/" + ref + "/transition").c_str(), bearer, R"({"to":"active"})", "application/json");
  EXPECT_EQ(r->status, 409);
  EXPECT_EQ(json::parse(r->body)["error"], "an order cannot go from paid to active");
  for (const char* body : {R"({"to":5})", R"({"to":"provisioning","note":5})", R"({"to":"provisioning","x":1})", R"({})"}) {
    EXPECT_EQ(m_client->Post(("/api/v1/operator/orders/" + ref + "/transition").c_str(), bearer, body, "application/json")->status, 422) << body;
  }
  for (const char* to : {"provisioning", "active", "ended"}) {
    r = m_client->Post(("/api/v1/operator/orders/" + ref + "/transition").c_str(), bearer, json{{"to", to}}.dump(), "application/json");
    EXPECT_EQ(r->status, 200) << to;
  }
  const auto final_state = json::parse(m_client->Get(("/api/v1/operator/orders/" + ref).c_str(), bearer)->body);
  EXPECT_EQ(final_state["state"], "ended");
  EXPECT_EQ(final_state["transitions"].size(), 7U);
  EXPECT_EQ(final_state["transitions"][3]["note"], "seen on chain");
  EXPECT_EQ(m_client->Get("/api/v1/operator/orders/IT-0000000000", bearer)->status, 404);
  // Sign out ends the session.
  r = post_form("/operator/logout", {{"csrf", operator_csrf(session, "/operator")}}, cookie);
  EXPECT_EQ(r->status, 303);
  EXPECT_EQ(m_client->Get("/operator", {{"Cookie", cookie}})->status, 303);
}

TEST_P(desk_http, logs_keep_no_contact_details_or_secrets) {
  const auto created = json::parse(post_json("/api/v1/orders", order_body().dump())->body);
  const std::string token = created["token"];
  post_json("/api/v1/orders/" + token + "/paid", R"({"tx_id":"0xdeadbeefcafe"})");
  m_client->Get(("/o/" + token).c_str());
  sign_in();
  const auto csrf = csrf_cookie("/operator/login");
  post_form("/operator/login", {{"csrf", csrf}, {"password", "guess-of-an-attacker"}}, "desk_csrf=" + csrf);
  const auto text = log();
  EXPECT_NE(text.find(std::string(created["reference"])), std::string::npos);  // the log is not empty
  EXPECT_NE(text.find("/o/:token"), std::string::npos);
  for (const std::string& secret : {std::string("customer.x@example.com"), std::string("secret_handle"), token,
                                    std::string("0xdeadbeefcafe"), std::string(password), std::string("guess-of-an-attacker"),
                                    m_api_token}) {
    EXPECT_EQ(text.find(secret), std::string::npos) << "the log holds " << secret;
  }
}

TEST_P(desk_http, body_limit_holds_for_chunked_and_compressed_bodies) {
  // A valid order padded with spaces far beyond max_body_bytes: each way of sneaking it past the
  // Content-Length check is refused before the body is read or inflated, and nothing is stored.
  auto padded = order_body().dump();
  padded.insert(padded.size() - 1, std::string(4 * m_config.limits.max_body_bytes, ' '));
  const std::string head = "POST /api/v1/orders HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n";
  EXPECT_EQ(raw_status(m_desk->port(), head + "Transfer-Encoding: chunked\r\n\r\n" + chunked(padded)), 411);
  EXPECT_EQ(raw_status(m_desk->port(), head + "Transfer-Encoding: gzip, chunked\r\n\r\n" + chunked(padded)), 411);
  // No Content-Length at all: httplib would read until the client closes.
  EXPECT_EQ(raw_status(m_desk->port(), head + "\r\n" + padded), 411);
  EXPECT_EQ(raw_status(m_desk->port(), head + "Content-Length: 12x\r\n\r\n{}"), 400);
  EXPECT_EQ(raw_status(m_desk->port(), head + "Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}"), 400);
  EXPECT_EQ(raw_status(m_desk->port(), head + "Content-Length: 99999999999\r\n\r\n{}"), 413);
  // A gzip body: 16 KiB of JSON squeezed into a few hundred bytes.
  httplib::Client gz("127.0.0.1", m_desk->port());
  gz.set_compress(true);
  auto r = gz.Post("/api/v1/orders", padded, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 415) << r->body;
  EXPECT_EQ(raw_status(m_desk->port(), head + "Content-Encoding: identity\r\nContent-Length: 2\r\n\r\n{}"), 415);
  EXPECT_EQ(orders(), 0);
  // The same order with an honest Content-Length is taken; a body-less POST with Content-Length: 0 too.
  r = post_json("/api/v1/orders", order_body().dump());
  EXPECT_EQ(r->status, 201);
  EXPECT_EQ(raw_status(m_desk->port(), head + "Content-Length: 0\r\n\r\n"), 400);
  EXPECT_EQ(orders(), 1);
}

TEST_P(desk_http, head_is_get_without_body_and_cache_control_is_one_value) {
  auto r = m_client->Head("/");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_TRUE(r->body.empty());
  EXPECT_EQ(m_client->Head("/gpu/l40s-48gb")->status, 200);
  EXPECT_EQ(m_client->Head("/gpu/nope")->status, 404);
  r = m_client->Get("/static/desk.css");
  EXPECT_EQ(r->status, 200);
  ASSERT_EQ(r->get_header_value_count("Cache-Control"), 1U);
  EXPECT_EQ(r->get_header_value("Cache-Control"), "public, max-age=3600");
  for (const char* path : {"/", "/order", "/nowhere", "/api/v1/catalogue"}) {
    r = m_client->Get(path);
    ASSERT_EQ(r->get_header_value_count("Cache-Control"), 1U) << path;
    EXPECT_EQ(r->get_header_value("Cache-Control"), "no-store") << path;
  }
  // Plain http: cookies without Secure (a browser would drop them).
  EXPECT_EQ(m_client->Get("/order")->get_header_value("Set-Cookie").find("Secure"), std::string::npos);
}

TEST_P(desk_http, operator_api_refuses_requests_without_credentials) {
  const auto created = json::parse(post_json("/api/v1/orders", order_body().dump())->body);
  const std::string ref = created["reference"];
  const std::string token = created["token"];
  ASSERT_EQ(post_json("/api/v1/orders/" + token + "/paid", "{}")->status, 200);
  const std::string order_path = "/api/v1/operator/orders/" + ref;
  const std::string move_path = order_path + "/transition";
  for (const httplib::Headers& h : {httplib::Headers{}, httplib::Headers{{"Authorization", "Bearer " + random_token()}},
                                    httplib::Headers{{"Authorization", "Bearer"}}, httplib::Headers{{"Authorization", "bearer " + m_api_token}},
                                    httplib::Headers{{"Authorization", "Basic " + m_api_token}},
                                    httplib::Headers{{"Authorization", "Bearer " + m_api_token + "x"}},
                                    httplib::Headers{{"Cookie", "desk_op=" + random_token()}}}) {
    auto r = m_client->Get(order_path.c_str(), h);
    EXPECT_EQ(r->status, 401);
    EXPECT_EQ(r->body.find("customer.x@example.com"), std::string::npos);
    r = m_client->Post(move_path.c_str(), h, R"({"to":"paid"})", "application/json");
    EXPECT_EQ(r->status, 401);
    EXPECT_EQ(m_client->Post(move_path.c_str(), h, "to=paid", "application/x-www-form-urlencoded")->status, 401);
  }
  EXPECT_EQ(json::parse(m_client->Get(("/api/v1/orders/" + token).c_str())->body)["state"], "payment_reported");
  // With the token it works, so the refusals above were about the credentials.
  const auto r = m_client->Post(move_path.c_str(), {{"Authorization", "Bearer " + m_api_token}}, R"({"to":"paid"})", "application/json");
  EXPECT_EQ(r->status, 200);
}

TEST_P(desk_http, operator_sign_in_is_rate_limited) {
  const auto csrf = csrf_cookie("/operator/login");
  for (int i = 0; i < m_config.limits.logins_per_minute; ++i) {
    EXPECT_EQ(post_form("/operator/login", {{"csrf", csrf}, {"password", "guess " + std::to_string(i)}}, "desk_csrf=" + csrf)->status, 401);
  }
  // Over the limit: refused without checking, even with the right password.
  auto r = post_form("/operator/login", {{"csrf", csrf}, {"password", password}}, "desk_csrf=" + csrf);
  EXPECT_EQ(r->status, 429);
  EXPECT_EQ(r->get_header_value("Retry-After"), "60");
  EXPECT_EQ(r->get_header_value("Set-Cookie").find("desk_op="), std::string::npos);
  m_clock.advance_ms(60'000);
  r = post_form("/operator/login", {{"csrf", csrf}, {"password", password}}, "desk_csrf=" + csrf);
  EXPECT_EQ(r->status, 303);
}

TEST_P(desk_http, password_checks_beyond_the_slots_are_told_to_come_back) {
  // argon2id takes 64 MiB and tens of ms: sign-ins at once beyond the slots get 503, not a queue.
  const auto csrf = csrf_cookie("/operator/login");
  constexpr int n = 5;  // within the sign-in rate limit
  std::vector<int> status(n, 0);
  std::vector<std::string> retry_after(n);
  std::latch start(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      httplib::Client c("127.0.0.1", m_desk->port());
      start.arrive_and_wait();
      const auto r = c.Post("/operator/login", {{"Cookie", "desk_csrf=" + csrf}}, httplib::Params{{"csrf", csrf}, {"password", "wrong"}});
      if (r) {
        status[static_cast<std::size_t>(i)] = r->status;
        retry_after[static_cast<std::size_t>(i)] = r->get_header_value("Retry-After");
      }
    });
  }
  for (auto& t : threads) t.join();
  int busy = 0, refused = 0;
  for (int i = 0; i < n; ++i) {
    if (status[static_cast<std::size_t>(i)] == 503) {
      ++busy;
      EXPECT_EQ(retry_after[static_cast<std::size_t>(i)], "1");
    } else {
      EXPECT_EQ(status[static_cast<std::size_t>(i)], 401);
      ++refused;
    }
  }
  EXPECT_GE(busy, 1);
  EXPECT_GE(refused, 1);
}

TEST_P(desk_http, weak_or_reused_idempotency_keys) {
  for (const std::string& weak : {std::string(22, 'a'), std::string("abababababababababababab"), std::string("0000000000-0000000000-00")}) {
    const auto r = post_json("/api/v1/orders", order_body().dump(), {{"Idempotency-Key", weak}});
    EXPECT_EQ(r->status, 422) << weak;
    EXPECT_TRUE(json::parse(r->body)["errors"].contains("Idempotency-Key")) << r->body;
  }
  EXPECT_EQ(orders(), 0);
  // A retry gives the link back; the key with another body (someone who knows only the key) gets 409 and no link.
  const std::string key = random_token(16);
  const auto first = post_json("/api/v1/orders", order_body().dump(), {{"Idempotency-Key", key}});
  ASSERT_EQ(first->status, 201);
  const std::string token = json::parse(first->body)["token"];
  auto again = post_json("/api/v1/orders", order_body().dump(), {{"Idempotency-Key", key}});
  EXPECT_EQ(again->status, 200);
  EXPECT_EQ(json::parse(again->body)["token"], token);
  auto other = order_body();
  other["email"] = "attacker@example.com";
  const auto stolen = post_json("/api/v1/orders", other.dump(), {{"Idempotency-Key", key}});
  EXPECT_EQ(stolen->status, 409);
  EXPECT_EQ(stolen->body.find(token), std::string::npos);
  EXPECT_EQ(orders(), 1);
}

INSTANTIATE_TEST_SUITE_P(backend, desk_http, testing::Values("sqlite", "postgres"), desk_test::backend_name);

// Limits that need their own configuration.
class desk_http_limits : public desk_http {
  void configure(desk_config& c) override {
    c.limits.orders_per_minute = 60;
    c.limits.order_burst = 3;
    c.client_address_header = "X-Forwarded-For";
  }
};

TEST_P(desk_http_limits, order_creation_is_rate_limited_per_client) {
  for (int i = 0; i < 3; ++i) EXPECT_EQ(post_json("/api/v1/orders", order_body().dump())->status, 201);
  const auto r = post_json("/api/v1/orders", order_body().dump());
  EXPECT_EQ(r->status, 429);
  EXPECT_EQ(r->get_header_value("Retry-After"), "60");
  EXPECT_EQ(orders(), 3);
  // The form is limited by the same bucket.
  const auto csrf = csrf_cookie();
  const auto f = post_form("/order", {{"csrf", csrf}, {"gpu", "l4-24gb"}, {"days", "3"}, {"quantity", "1"}, {"environment", "bare"},
                                      {"email", "a@example.com"}, {"network", "BTC"}},
                           "desk_csrf=" + csrf);
  EXPECT_EQ(f->status, 429);
  EXPECT_NE(f->body.find("Too many orders"), std::string::npos);
  // Reading is not limited.
  for (int i = 0; i < 20; ++i) ASSERT_EQ(m_client->Get("/")->status, 200);
}

TEST_P(desk_http_limits, limits_key_on_the_address_the_trusted_proxy_appended) {
  // The proxy appends the address it saw; what the client wrote before it is the client's to forge.
  for (int i = 0; i < 3; ++i) {
    const auto r = post_json("/api/v1/orders", order_body().dump(), {{"X-Forwarded-For", fmt::format("10.9.9.{}, 203.0.113.7", i)}});
    EXPECT_EQ(r->status, 201);
  }
  auto r = post_json("/api/v1/orders", order_body().dump(), {{"X-Forwarded-For", "198.51.100.1,203.0.113.7"}});
  EXPECT_EQ(r->status, 429);
  r = post_json("/api/v1/orders", order_body().dump(), {{"X-Forwarded-For", "203.0.113.7"}});
  EXPECT_EQ(r->status, 429);
  // Another address behind the proxy has its own bucket.
  r = post_json("/api/v1/orders", order_body().dump(), {{"X-Forwarded-For", "203.0.113.7, 203.0.113.8"}});
  EXPECT_EQ(r->status, 201);
  EXPECT_EQ(orders(), 4);
}

TEST_P(desk_http_limits, invalid_orders_do_not_use_up_the_limit) {
  auto bad = order_body();
  bad["days"] = 4;
  for (int i = 0; i < 6; ++i) EXPECT_EQ(post_json("/api/v1/orders", bad.dump())->status, 422);
  const auto csrf = csrf_cookie();
  const httplib::Params bad_form = {{"csrf", csrf}, {"gpu", "l4-24gb"}, {"days", "5"}, {"quantity", "1"}, {"environment", "bare"},
                                    {"email", "a@example.com"}, {"network", "BTC"}};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(post_form("/order", bad_form, "desk_csrf=" + csrf)->status, 422);
  EXPECT_EQ(post_json("/api/v1/orders", order_body().dump())->status, 201);
  auto good_form = bad_form;
  good_form.find("days")->second = "3";
  EXPECT_EQ(post_form("/order", good_form, "desk_csrf=" + csrf)->status, 303);
  EXPECT_EQ(orders(), 2);
}

INSTANTIATE_TEST_SUITE_P(backend, desk_http_limits, testing::Values("sqlite", "postgres"), desk_test::backend_name);

// Behind TLS (public_url https): cookies carry Secure.
class desk_http_https : public desk_http {
  void configure(desk_config& c) override { c.public_url = "https://desk.example"; }
};

TEST_P(desk_http_https, cookies_are_secure) {
  auto r = m_client->Get("/order");
  EXPECT_NE(r->get_header_value("Set-Cookie").find("; Secure"), std::string::npos) << r->get_header_value("Set-Cookie");
  const auto csrf = csrf_cookie("/operator/login");
  r = post_form("/operator/login", {{"csrf", csrf}, {"password", password}}, "desk_csrf=" + csrf);
  ASSERT_EQ(r->status, 303);
  EXPECT_NE(r->get_header_value("Set-Cookie").find("desk_op="), std::string::npos);
  EXPECT_NE(r->get_header_value("Set-Cookie").find("; Secure"), std::string::npos) << r->get_header_value("Set-Cookie");
}

INSTANTIATE_TEST_SUITE_P(backend, desk_http_https, testing::Values("sqlite"), desk_test::backend_name);

}  // namespace
