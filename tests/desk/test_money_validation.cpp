// Integer money, field validation and the lifecycle: pure functions.
#include <gtest/gtest.h>

#include "itera/core/errors.hpp"
#include "itera/desk/config.hpp"
#include "itera/desk/lifecycle.hpp"
#include "itera/desk/money.hpp"
#include "itera/desk/validation.hpp"
#include "itera/env/catalogue.hpp"

#include "desk_test_support.hpp"

namespace {

using namespace itera::desk;

payment_network usdt() { return {"USDT-TRON", "USDT on TRON", "USDT", 6, "T...", true, 100, "2026-11-29"}; }
payment_network btc(std::int64_t cents_per_btc) { return {"BTC", "Bitcoin", "BTC", 8, "bc1...", true, cents_per_btc, "2026-11-29"}; }

TEST(desk_money, usdt_amount_is_exact_in_smallest_units) {
  const auto q = make_quote(6000, 7, 2, usdt());
  ASSERT_TRUE(q);
  EXPECT_EQ(q->usd_cents_total, 84000);
  EXPECT_EQ(q->amount_units, 840'000'000);  // 840 USDT x 10^6
  EXPECT_EQ(format_units(q->amount_units, 6), "840.000000");
}

TEST(desk_money, btc_amount_rounds_up_to_the_next_satoshi) {
  // 840 USD at 95,000 USD/BTC = 0.008842105263... BTC -> 884,211 satoshis (never less than the price).
  const auto q = make_quote(6000, 7, 2, btc(9'500'000));
  ASSERT_TRUE(q);
  EXPECT_EQ(q->amount_units, 884'211);
  EXPECT_EQ(format_units(q->amount_units, 8), "0.00884211");
  // An exact division stays exact.
  EXPECT_EQ(make_quote(10'000, 3, 1, btc(3'000'000))->amount_units, 1'000'000);
}

TEST(desk_money, overflow_is_refused_not_wrapped) {
  EXPECT_FALSE(make_quote(std::numeric_limits<std::int64_t>::max() / 2, 30, 8, usdt()));
  payment_network eighteen = usdt();
  eighteen.decimals = 18;
  EXPECT_FALSE(make_quote(100'000'000, 30, 64, eighteen));  // 2.4e9 USD x 10^18 units
  EXPECT_FALSE(make_quote(0, 3, 1, usdt()));
  EXPECT_FALSE(make_quote(100, 3, 0, usdt()));
}

TEST(desk_money, formatting) {
  EXPECT_EQ(format_units(0, 6), "0.000000");
  EXPECT_EQ(format_units(1, 8), "0.00000001");
  EXPECT_EQ(format_units(123, 0), "123");
  EXPECT_EQ(format_units(std::numeric_limits<std::int64_t>::min(), 0), "-9223372036854775808");
  EXPECT_EQ(format_usd_cents(123456789), "1,234,567.89");
  EXPECT_EQ(format_usd_cents(5), "0.05");
  EXPECT_EQ(format_usd_cents(100000), "1,000.00");
}

TEST(desk_money, price_file_is_checked_against_the_catalogue) {
  const auto& cards = itera::catalogue::builtin();
  const auto p = load_prices(desk_test::source_dir() / "data/desk/prices.example.json", cards);
  EXPECT_TRUE(p.example);
  EXPECT_EQ(p.dated, "2026-11-29");
  for (const auto& [id, cents] : p.usd_cents_per_day) {
    EXPECT_NE(cards.find(id), nullptr) << id;
    EXPECT_GT(cents, 0);
  }
  const auto dir = std::filesystem::temp_directory_path() / ("desk-prices-" + random_base32(8));
  std::filesystem::create_directories(dir);
  const auto write = [&](const std::string& text) {
    std::ofstream(dir / "p.json") << text;
    return dir / "p.json";
  };
  EXPECT_THROW(load_prices(write(R"({"schema":"itera.desk.prices/1","currency":"USD","dated":"x","usd_cents_per_day":{"no-such-card":1}})"), cards), itera::input_error);
  EXPECT_THROW(load_prices(write(R"({"schema":"itera.desk.prices/1","currency":"USD","dated":"x","usd_cents_per_day":{"l4-24gb":1.5}})"), cards), itera::input_error);
  EXPECT_THROW(load_prices(write(R"({"schema":"itera.desk.prices/1","currency":"EUR","dated":"x","usd_cents_per_day":{"l4-24gb":1}})"), cards), itera::input_error);
  EXPECT_THROW(load_prices(write("not json"), cards), itera::input_error);
  std::filesystem::remove_all(dir);
}

TEST(desk_config, file_and_environment) {
  const auto c = load_config(desk_test::source_dir() / "data/desk/desk.example.json",
                             {{"ITERA_DESK_PORT", "9999"}, {"ITERA_DESK_DATABASE", "host=/tmp dbname=x"}});
  EXPECT_EQ(c.host, "127.0.0.1");  // loopback by default
  EXPECT_EQ(c.port, 9999);
  EXPECT_EQ(c.database_kind(), "postgres");
  ASSERT_EQ(c.networks.size(), 3U);
  for (const auto& n : c.networks) EXPECT_TRUE(n.example_address) << n.id;
  EXPECT_THROW(load_config(desk_test::source_dir() / "data/desk/desk.example.json", {{"ITERA_DESK_PORT", "80x"}}), itera::input_error);
  EXPECT_THROW(load_config(desk_test::source_dir() / "data/desk/desk.example.json", {{"ITERA_DESK_OPERATOR_PASSWORD_HASH", "plain"}}),
               itera::input_error);
  EXPECT_EQ(load_config({}, {}).host, "127.0.0.1");
}

TEST(desk_validation, email) {
  for (const char* ok : {"a@example.com", "first.last+tag@sub.example.co", "x_y-z%1@a-b.vn"}) EXPECT_EQ(check_email(ok), "") << ok;
  for (const char* bad : {"", "plain", "a@b", "a@@b.com", "a@b@c.com", ".a@b.com", "a..b@c.com", "a@-b.com", "a@b.c0m", "a b@c.com",
                          "a@b.com\n", "'; DROP TABLE desk_orders; --@x.com", "<script>@x.com", "\xc3\xa9@x.com", "a@x.com\xff"}) {
    EXPECT_NE(check_email(bad), "") << bad;
  }
  EXPECT_NE(check_email(std::string(65, 'a') + "@example.com"), "");
  EXPECT_NE(check_email("a@" + std::string(250, 'b') + ".com"), "");
}

TEST(desk_validation, other_fields) {
  EXPECT_EQ(check_messenger(""), "");
  EXPECT_EQ(check_messenger("telegram:@name_1"), "");
  EXPECT_NE(check_messenger("@"), "");
  EXPECT_NE(check_messenger("a b"), "");
  EXPECT_NE(check_messenger(std::string(65, 'a')), "");
  EXPECT_EQ(check_environment("CUDA 12.4, PyTorch 2.5 (cu124)"), "");
  EXPECT_NE(check_environment(""), "");
  EXPECT_NE(check_environment(" bare"), "");
  EXPECT_NE(check_environment("bare\tx"), "");
  EXPECT_NE(check_environment("<script>alert(1)</script>"), "");
  EXPECT_NE(check_environment("x'; DROP TABLE desk_orders; --"), "");
  EXPECT_NE(check_environment(std::string(201, 'a')), "");
  EXPECT_EQ(check_tx_id("0xabc123"), "");
  EXPECT_NE(check_tx_id("abc def"), "");
  EXPECT_NE(check_tx_id(std::string(129, 'a')), "");
  EXPECT_EQ(check_note("paid in full, thank you"), "");
  EXPECT_NE(check_note("a\x01"), "");
  EXPECT_NE(check_note("x\xe2\x80\xae" "evil"), "");  // bidi override
  EXPECT_FALSE(valid_utf8("\xc0\xaf"));           // overlong '/'
  EXPECT_FALSE(valid_utf8("\xed\xa0\x80"));       // surrogate
  EXPECT_FALSE(valid_utf8("\xf4\x90\x80\x80"));   // past U+10FFFF
  EXPECT_FALSE(valid_utf8("\xe2\x82"));           // truncated
  EXPECT_TRUE(valid_utf8("Vi\xe1\xbb\x87t Nam"));
  EXPECT_EQ(parse_bounded_int("7", 1, 30), 7);
  for (const char* bad : {"", "07", "+7", "-7", "7.0", "1e1", " 7", "7 ", "0x7", "99999999999"}) EXPECT_FALSE(parse_bounded_int(bad, 1, 30)) << bad;
  EXPECT_TRUE(valid_reference("IT-0123456789"));
  EXPECT_FALSE(valid_reference("IT-012345678I"));
  EXPECT_FALSE(valid_token(std::string(42, 'a')));
  EXPECT_FALSE(valid_submission_key("short"));
  crypto_init();
  EXPECT_TRUE(valid_submission_key(random_token(16)));
  EXPECT_TRUE(valid_submission_key("123e4567-e89b-42d3-a456-426614174000"));  // a UUID
  for (const std::string& weak : {std::string(22, 'a'), std::string("abababababababababababab"), std::string("0123456780123456780123")}) {
    EXPECT_FALSE(valid_submission_key(weak)) << weak;
  }
}

TEST(desk_validation, order_form_names_every_bad_field) {
  const auto config = desk_test::test_config("sqlite:/nonexistent");
  const auto prices = load_prices(config.prices_file, itera::catalogue::builtin());
  field_errors errors;
  EXPECT_FALSE(validate_order({"nope", "5", "0", "", "x", "@", "DOGE"}, config, prices, errors));
  for (const char* f : {"gpu", "days", "quantity", "environment", "email", "messenger", "network"}) EXPECT_TRUE(errors.count(f)) << f;
  errors.clear();
  const auto o = validate_order({"l40s-48gb", "30", "8", "bare", "a@example.com", "", "BTC"}, config, prices, errors);
  ASSERT_TRUE(o) << errors.begin()->first;
  EXPECT_EQ(o->days, 30);
  EXPECT_EQ(o->quantity, 8);
  errors.clear();
  EXPECT_FALSE(validate_order({"l40s-48gb", "30", "9", "bare", "a@example.com", "", "BTC"}, config, prices, errors));
  EXPECT_TRUE(errors.count("quantity"));
}

TEST(desk_lifecycle, the_allowed_path) {
  const std::int64_t exp = 1000;
  EXPECT_TRUE(check_transition(order_state::awaiting_payment, order_state::payment_reported, actor_kind::customer, 10, exp).allowed);
  EXPECT_TRUE(check_transition(order_state::payment_reported, order_state::paid, actor_kind::operator_, 10, exp).allowed);
  EXPECT_TRUE(check_transition(order_state::payment_reported, order_state::rejected, actor_kind::operator_, 10, exp).allowed);
  EXPECT_TRUE(check_transition(order_state::paid, order_state::provisioning, actor_kind::operator_, 10, exp).allowed);
  EXPECT_TRUE(check_transition(order_state::provisioning, order_state::active, actor_kind::operator_, 10, exp).allowed);
  EXPECT_TRUE(check_transition(order_state::active, order_state::ended, actor_kind::operator_, 10, exp).allowed);
  EXPECT_TRUE(check_transition(order_state::awaiting_payment, order_state::expired, actor_kind::system, exp, exp).allowed);
}

TEST(desk_lifecycle, refusals_say_why) {
  const std::int64_t exp = 1000;
  auto r = check_transition(order_state::awaiting_payment, order_state::paid, actor_kind::operator_, 10, exp);
  EXPECT_FALSE(r.allowed);
  EXPECT_EQ(r.reason, "an order cannot go from awaiting_payment to paid");
  r = check_transition(order_state::payment_reported, order_state::paid, actor_kind::customer, 10, exp);
  EXPECT_FALSE(r.allowed);
  EXPECT_EQ(r.reason, "the customer cannot move an order from payment_reported to paid");
  r = check_transition(order_state::ended, order_state::active, actor_kind::operator_, 10, exp);
  EXPECT_EQ(r.reason, "the order is ended; no transition leaves that state");
  r = check_transition(order_state::awaiting_payment, order_state::payment_reported, actor_kind::customer, exp, exp);
  EXPECT_EQ(r.reason, "the payment window has closed; this order has expired");
  r = check_transition(order_state::awaiting_payment, order_state::expired, actor_kind::operator_, 10, exp);
  EXPECT_EQ(r.reason, "the payment window is still open");
  r = check_transition(order_state::rejected, order_state::payment_reported, actor_kind::customer, 10, exp);
  EXPECT_FALSE(r.allowed);
  // "I paid" again, or once the operator moved on: nothing changes, and it is not an error.
  for (auto s : {order_state::payment_reported, order_state::paid, order_state::provisioning, order_state::active}) {
    r = check_transition(s, order_state::payment_reported, actor_kind::customer, 10, exp);
    EXPECT_TRUE(r.allowed && r.no_change) << to_string(s);
  }
  EXPECT_EQ(next_states(order_state::payment_reported, actor_kind::operator_, 10, exp),
            (std::vector<order_state>{order_state::paid, order_state::rejected}));
  EXPECT_TRUE(next_states(order_state::awaiting_payment, actor_kind::operator_, 10, exp).empty());
  for (auto s : all_states()) EXPECT_EQ(parse_state(to_string(s)), s);
}

TEST(desk_crypto, tokens_and_passwords) {
  crypto_init();
  const auto a = random_token();
  EXPECT_EQ(a.size(), 43U);
  EXPECT_TRUE(valid_token(a));
  EXPECT_NE(a, random_token());
  const auto h = hash_password("correct horse battery");
  EXPECT_EQ(h.rfind("$argon2id$", 0), 0U);
  EXPECT_TRUE(verify_password(h, "correct horse battery"));
  EXPECT_FALSE(verify_password(h, "correct horse batterx"));
  EXPECT_FALSE(verify_password("", "x"));
  // Sealed boxes open with their key only, and not when altered.
  const auto key = hash_raw("k", "0123456789abcdef");
  ASSERT_EQ(key.size(), 32U);
  const auto box = seal(key, a);
  EXPECT_EQ(open_sealed(key, box), a);
  EXPECT_NE(seal(key, a), box);  // a fresh nonce each time
  EXPECT_FALSE(open_sealed(hash_raw("k", "0123456789abcdeg"), box));
  auto altered = box;
  altered[altered.size() / 2] = altered[altered.size() / 2] == 'A' ? 'B' : 'A';
  EXPECT_FALSE(open_sealed(key, altered));
  EXPECT_FALSE(open_sealed(key, ""));
  EXPECT_FALSE(open_sealed(key, "not base64 !"));
}

}  // namespace
