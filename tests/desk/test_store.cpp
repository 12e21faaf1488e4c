// The store on SQLite and on PostgreSQL: the same tests on both.
#include <gtest/gtest.h>

#include <latch>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <sodium.h>

#include "desk_test_support.hpp"

namespace {

using namespace itera::desk;

class desk_store : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    m_db = std::make_unique<desk_test::database_fixture>(GetParam());
    std::string why;
    auto db = m_db->open(why);
    if (!db) GTEST_SKIP() << why;
    m_config = desk_test::test_config(m_db->database_string(why));
    m_prices = load_prices(m_config.prices_file, itera::catalogue::builtin());
    m_service = std::make_unique<desk_service>(m_config, itera::catalogue::builtin(), m_prices, std::move(db), m_clock.fn());
  }
  void TearDown() override {
    m_service.reset();
    m_db.reset();
  }
  order_form form(const std::string& email = "a@example.com") const {
    return {"h100-pcie-80gb", "7", "2", "CUDA 12.4", email, "telegram:@a", "USDT-TRON"};
  }

  std::unique_ptr<desk_test::database_fixture> m_db;
  desk_config m_config;
  price_list m_prices;
  desk_test::test_clock m_clock;
  std::unique_ptr<desk_service> m_service;
};

TEST_P(desk_store, migrations_are_applied_once) {
  auto& store = m_service->store();
  EXPECT_EQ(store.schema_version(), static_cast<int>(desk_migrations().size()));
  EXPECT_EQ(store.migrate(), static_cast<int>(desk_migrations().size()));  // again: nothing to do
  EXPECT_EQ(store.secret("token_key"), store.secret("token_key"));
}

TEST_P(desk_store, create_find_and_retry) {
  const std::string key = random_token(16);
  const auto a = m_service->create_order(form(), key);
  ASSERT_EQ(a.status, 201);
  EXPECT_TRUE(valid_reference(a.order.reference));
  EXPECT_EQ(a.order.state, order_state::awaiting_payment);
  EXPECT_EQ(a.order.amount_units, 840'000'000);
  EXPECT_EQ(a.order.expires_at_ms - a.order.created_at_ms, m_config.payment_window_minutes * 60'000LL);
  const auto found = m_service->order_by_token(a.token);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->reference, a.order.reference);
  EXPECT_EQ(found->email, "a@example.com");
  // The same submission again: the same order and link, no second order.
  const auto b = m_service->create_order(form(), key);
  EXPECT_EQ(b.status, 200);
  EXPECT_EQ(b.order.reference, a.order.reference);
  EXPECT_EQ(b.token, a.token);
  // The same key for another order: refused.
  EXPECT_EQ(m_service->create_order(form("b@example.com"), key).status, 409);
  EXPECT_EQ(m_service->store().count(""), 1);
  const auto history = m_service->store().transitions(a.order.reference);
  ASSERT_EQ(history.size(), 2U);
  EXPECT_EQ(history[0].to_state, "created");
  EXPECT_EQ(history[1].to_state, "awaiting_payment");
  EXPECT_FALSE(m_service->order_by_token(random_token()));
}

TEST_P(desk_store, text_is_stored_verbatim_never_as_sql) {
  // Valid by the field rules and full of SQL: stored and read back unchanged.
  order_form f = form("o'reilly--x@example.com");
  f.environment = "bare, x=1 (or 1=1) # --";
  const auto a = m_service->create_order(f, "");
  ASSERT_EQ(a.status, 422);  // the apostrophe is not allowed in an email here
  f.email = "x--y@example.com";
  const auto b = m_service->create_order(f, "");
  ASSERT_EQ(b.status, 201);
  const auto o = m_service->order_by_token(b.token);
  ASSERT_TRUE(o);
  EXPECT_EQ(o->environment, "bare, x=1 (or 1=1) # --");
  const auto r = m_service->operator_move(b.order.reference, "paid'; DROP TABLE desk_orders; --", "");
  EXPECT_EQ(r.status, 422);
  const auto n = m_service->operator_move("IT-0000000000' OR '1'='1", "paid", "");
  EXPECT_EQ(n.status, 404);
  EXPECT_EQ(m_service->store().count(""), 1);
}

TEST_P(desk_store, full_lifecycle_with_actors_and_times) {
  const auto a = m_service->create_order(form(), "");
  ASSERT_EQ(a.status, 201);
  m_clock.advance_ms(1000);
  auto r = m_service->report_paid(a.token, "0xfeed");
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(r.changed);
  r = m_service->report_paid(a.token, "0xother");  // twice: nothing changes
  EXPECT_EQ(r.status, 200);
  EXPECT_FALSE(r.changed);
  EXPECT_EQ(m_service->order_by_token(a.token)->tx_id, "0xfeed");
  EXPECT_EQ(m_service->operator_move(a.order.reference, "active", "").status, 409);
  for (const char* s : {"paid", "provisioning", "active", "ended"}) {
    m_clock.advance_ms(1000);
    const auto m = m_service->operator_move(a.order.reference, s, std::string("step ") + s);
    EXPECT_EQ(m.status, 200) << s << ": " << m.reason;
  }
  const auto refused = m_service->operator_move(a.order.reference, "active", "");
  EXPECT_EQ(refused.status, 409);
  EXPECT_EQ(refused.reason, "the order is ended; no transition leaves that state");
  EXPECT_EQ(m_service->report_paid(a.token, "").status, 409);
  const auto history = m_service->store().transitions(a.order.reference);
  ASSERT_EQ(history.size(), 7U);
  const std::vector<std::string> to = {"created", "awaiting_payment", "payment_reported", "paid", "provisioning", "active", "ended"};
  const std::vector<std::string> actor = {"customer", "system", "customer", "operator", "operator", "operator", "operator"};
  for (std::size_t i = 0; i < history.size(); ++i) {
    EXPECT_EQ(history[i].seq, static_cast<int>(i) + 1);
    EXPECT_EQ(history[i].to_state, to[i]);
    EXPECT_EQ(history[i].actor, actor[i]);
    if (i > 0) {
      EXPECT_EQ(history[i].from_state, to[i - 1]);
      EXPECT_GE(history[i].at_ms, history[i - 1].at_ms);
    }
  }
  EXPECT_EQ(history[3].note, "step paid");
}

TEST_P(desk_store, expiry_and_retention) {
  const auto a = m_service->create_order(form("keep@example.com"), "");
  const auto b = m_service->create_order(form("gone@example.com"), "");
  ASSERT_EQ(m_service->report_paid(a.token, "").status, 200);
  m_clock.advance_ms(m_config.payment_window_minutes * 60'000LL);
  EXPECT_EQ(m_service->report_paid(b.token, "").status, 409);  // window closed
  EXPECT_EQ(m_service->sweep().first, 1);
  EXPECT_EQ(m_service->order_by_token(b.token)->state, order_state::expired);
  EXPECT_EQ(m_service->order_by_token(a.token)->state, order_state::payment_reported);
  EXPECT_EQ(m_service->store().transitions(b.order.reference).back().actor, "system");
  // Retention: the expired order's contact details go after contact_retention_days; the open one's stay.
  m_clock.advance_ms(m_config.contact_retention_days * 86'400'000LL + 1);
  EXPECT_EQ(m_service->sweep().second, 1);
  const auto erased = m_service->order_by_token(b.token);
  EXPECT_EQ(erased->email, "");
  EXPECT_EQ(erased->messenger, "");
  EXPECT_TRUE(erased->contact_erased_at_ms.has_value());
  EXPECT_EQ(erased->amount_units, b.order.amount_units);  // the accounting stays
  EXPECT_EQ(m_service->order_by_token(a.token)->email, "keep@example.com");
}

TEST_P(desk_store, concurrent_creations_and_i_paid_presses) {
  constexpr int threads = 8, per_thread = 25;
  std::vector<std::string> tokens(threads * per_thread);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        const auto key = random_token(16);
        auto r = m_service->create_order(form(), key);
        auto again = m_service->create_order(form(), key);  // a retry of the same submission
        ASSERT_EQ(r.status, 201);
        ASSERT_EQ(again.status, 200);
        ASSERT_EQ(again.order.reference, r.order.reference);
        tokens[static_cast<std::size_t>(t * per_thread + i)] = r.token;
      }
    });
  }
  for (auto& th : pool) th.join();
  EXPECT_EQ(m_service->store().count(""), threads * per_thread);
  // Everyone presses "I paid" on the same orders at once: one transition each.
  pool.clear();
  std::atomic<int> changed{0};
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (const auto& token : tokens) {
        const auto r = m_service->report_paid(token, "");
        ASSERT_EQ(r.status, 200);
        if (r.changed) ++changed;
      }
    });
  }
  for (auto& th : pool) th.join();
  EXPECT_EQ(changed.load(), threads * per_thread);
  EXPECT_EQ(m_service->store().count("payment_reported"), threads * per_thread);
  for (std::size_t i = 0; i < tokens.size(); i += 37) {
    const auto o = m_service->order_by_token(tokens[i]);
    EXPECT_EQ(m_service->store().transitions(o->reference).size(), 3U);
  }
  std::set<std::string> refs;
  for (const auto& o : m_service->store().list("", 1000, 0)) refs.insert(o.reference);
  EXPECT_EQ(refs.size(), static_cast<std::size_t>(threads * per_thread));
}

TEST_P(desk_store, operator_note_full_of_sql_is_stored_as_text) {
  const auto a = m_service->create_order(form(), "");
  ASSERT_EQ(a.status, 201);
  ASSERT_EQ(m_service->report_paid(a.token, "").status, 200);
  const std::string note = "x'); DROP TABLE desk_orders;-- \"; DELETE FROM desk_transitions; $1 ?1 \\";
  const auto m = m_service->operator_move(a.order.reference, "paid", note);
  ASSERT_EQ(m.status, 200) << m.reason;
  const auto history = m_service->store().transitions(a.order.reference);
  ASSERT_EQ(history.size(), 4U);
  EXPECT_EQ(history.back().note, note);
  EXPECT_EQ(m_service->store().count(""), 1);
  EXPECT_EQ(m_service->order_by_token(a.token)->state, order_state::paid);
  // A second order still goes in: the tables are all there.
  EXPECT_EQ(m_service->create_order(form(), "").status, 201);
}

TEST_P(desk_store, one_idempotency_key_from_many_threads_makes_one_order) {
  constexpr int threads = 8;
  const std::string key = random_token(16);
  std::vector<create_outcome> out(threads);
  std::latch start(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      start.arrive_and_wait();
      out[static_cast<std::size_t>(t)] = m_service->create_order(form(), key);
    });
  }
  for (auto& th : pool) th.join();
  int created = 0;
  for (const auto& o : out) {
    if (o.status == 201) ++created;
    else EXPECT_EQ(o.status, 200) << o.message;
    EXPECT_EQ(o.order.reference, out[0].order.reference);
    EXPECT_EQ(o.token, out[0].token);
  }
  EXPECT_EQ(created, 1);
  EXPECT_EQ(m_service->store().count(""), 1);
  EXPECT_EQ(m_service->store().transitions(out[0].order.reference).size(), 2U);
  ASSERT_TRUE(m_service->order_by_token(out[0].token));
}

TEST_P(desk_store, link_is_random_not_derived_from_the_idempotency_key) {
  const std::string key = random_token(16);
  const auto a = m_service->create_order(form(), key);
  ASSERT_EQ(a.status, 201);
  ASSERT_TRUE(valid_token(a.token));
  // What a link derived from the key would be (keyed BLAKE2b of the key under the stored server key):
  // anyone who learnt the key and the database's key could compute it. The link must not be that.
  const auto server_key = m_service->store().secret("token_key");
  unsigned char raw[32];
  const std::string message = "order-link:" + key;
  crypto_generichash(raw, sizeof raw, reinterpret_cast<const unsigned char*>(message.data()), message.size(),
                     reinterpret_cast<const unsigned char*>(server_key.data()), server_key.size());
  char b64[sodium_base64_ENCODED_LEN(32, sodium_base64_VARIANT_URLSAFE_NO_PADDING)];
  sodium_bin2base64(b64, sizeof b64, raw, sizeof raw, sodium_base64_VARIANT_URLSAFE_NO_PADDING);
  EXPECT_NE(a.token, std::string(b64));
  // Keys that are long enough but plainly not random are refused.
  for (const std::string& weak : {std::string(22, 'a'), std::string("abcabcabcabcabcabcabcabc"), std::string(40, '-')}) {
    const auto r = m_service->create_order(form(), weak);
    EXPECT_EQ(r.status, 422) << weak;
    EXPECT_TRUE(r.errors.count("submission")) << weak;
  }
  EXPECT_EQ(m_service->store().count(""), 1);
}

TEST_P(desk_store, request_digest_is_keyed_and_erased_with_the_contact_details) {
  const std::string key = random_token(16);
  const auto a = m_service->create_order(form("erase.me@example.com"), key);
  ASSERT_EQ(a.status, 201);
  std::string why;
  auto raw = m_db->open(why);
  ASSERT_TRUE(raw) << why;
  const auto stored = [&] {
    std::vector<std::string> v;
    raw->read([&](sql_connection& c) {
      const auto rows = c.query("SELECT request_digest, token_box, email FROM desk_orders WHERE reference = $1", {a.order.reference});
      v = {rows.at(0).text(0), rows.at(0).text(1), rows.at(0).text(2)};
    });
    return v;
  };
  const auto before = stored();
  ASSERT_FALSE(before[0].empty());
  ASSERT_FALSE(before[1].empty());
  // Unkeyed, the digest would confirm a guessed email against a copy of the database.
  const auto f = form("erase.me@example.com");
  const auto unkeyed = hash_hex(fmt::format("{}\x1f{}\x1f{}\x1f{}\x1f{}\x1f{}\x1f{}", f.gpu, f.days, f.quantity, f.environment,
                                            f.email, f.messenger, f.network));
  EXPECT_NE(before[0], unkeyed);
  EXPECT_EQ(before[1].find(a.token), std::string::npos);
  // Expired, then erased after the retention period: no digest, no sealed link, no email.
  m_clock.advance_ms(m_config.payment_window_minutes * 60'000LL);
  ASSERT_EQ(m_service->sweep().first, 1);
  m_clock.advance_ms(m_config.contact_retention_days * 86'400'000LL + 1);
  ASSERT_EQ(m_service->sweep().second, 1);
  const auto after = stored();
  EXPECT_EQ(after[0], "");
  EXPECT_EQ(after[1], "");
  EXPECT_EQ(after[2], "");
  // The key can no longer bring the link back.
  const auto again = m_service->create_order(f, key);
  EXPECT_EQ(again.status, 409);
  EXPECT_TRUE(again.token.empty());
  EXPECT_EQ(m_service->store().count(""), 1);
}

INSTANTIATE_TEST_SUITE_P(backend, desk_store, testing::Values("sqlite", "postgres"), desk_test::backend_name);

}  // namespace
