// Prices per GPU-day and the exact amount to pay, in integers.
#include "itera/desk/money.hpp"

#include <fstream>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "itera/core/errors.hpp"
#include "itera/env/catalogue.hpp"

namespace itera::desk {

namespace {
constexpr const char* schema = "itera.desk.prices/1";
__extension__ typedef unsigned __int128 u128;  // GCC and Clang: exact 128-bit intermediates
constexpr std::int64_t max_i64 = std::numeric_limits<std::int64_t>::max();
}  // namespace

std::optional<std::int64_t> price_list::price(const std::string& card_id) const {
  const auto it = usd_cents_per_day.find(card_id);
  if (it == usd_cents_per_day.end()) return std::nullopt;
  return it->second;
}

price_list load_prices(const std::filesystem::path& file, const catalogue& cards) {
  std::ifstream in(file);
  if (!in) throw input_error(fmt::format("desk prices: cannot read {}", file.string()));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw input_error(fmt::format("desk prices: {} is not JSON: {}", file.string(), e.what()));
  }
  const auto fail = [&](const std::string& what) {
    throw input_error(fmt::format("desk prices: {}: {}", file.string(), what));
  };
  if (!j.is_object() || j.value("schema", "") != schema) fail(fmt::format("schema must be \"{}\"", schema));
  price_list p;
  if (!j.contains("currency") || j["currency"] != "USD") fail("currency must be \"USD\"");
  if (!j.contains("dated") || !j["dated"].is_string()) fail("\"dated\" (the day the prices were set) is missing");
  p.dated = j["dated"].get<std::string>();
  if (j.contains("example")) {
    if (!j["example"].is_boolean()) fail("\"example\" must be true or false");
    p.example = j["example"].get<bool>();
  }
  if (j.contains("note") && j["note"].is_string()) p.note = j["note"].get<std::string>();
  const auto it = j.find("usd_cents_per_day");
  if (it == j.end() || !it->is_object() || it->empty()) fail("\"usd_cents_per_day\" must be an object of card id -> cents");
  for (const auto& [id, v] : it->items()) {
    if (!cards.find(id)) fail(fmt::format("card \"{}\" is not in the catalogue", id));
    if (!v.is_number_integer() || v.get<long long>() <= 0 || v.get<long long>() > 100'000'000) {
      fail(fmt::format("price of \"{}\" must be an integer number of cents in [1, 100000000]", id));
    }
    p.usd_cents_per_day[id] = v.get<std::int64_t>();
  }
  return p;
}

std::optional<quote> make_quote(std::int64_t usd_cents_per_day, int days, int quantity, const payment_network& network) {
  if (usd_cents_per_day <= 0 || days <= 0 || quantity <= 0 || network.usd_cents_per_unit <= 0) return std::nullopt;
  if (network.decimals < 0 || network.decimals > 18) return std::nullopt;
  const u128 total = static_cast<u128>(usd_cents_per_day) * static_cast<u128>(days) * static_cast<u128>(quantity);
  if (total > static_cast<u128>(max_i64)) return std::nullopt;
  u128 scale = 1;
  for (int i = 0; i < network.decimals; ++i) scale *= 10;
  // units = ceil(total cents x 10^decimals / cents per whole unit). total < 2^63 and scale <= 10^18
  // < 2^60, so the product fits in 123 bits.
  const u128 numerator = total * scale;
  const u128 rate = static_cast<u128>(network.usd_cents_per_unit);
  const u128 units = (numerator + rate - 1) / rate;
  if (units > static_cast<u128>(max_i64)) return std::nullopt;
  quote q;
  q.usd_cents_per_day = usd_cents_per_day;
  q.usd_cents_total = static_cast<std::int64_t>(total);
  q.amount_units = static_cast<std::int64_t>(units);
  return q;
}

std::string format_units(std::int64_t units, int decimals) {
  const bool negative = units < 0;
  // The magnitude as unsigned, so that INT64_MIN is exact too.
  const auto magnitude = negative ? static_cast<std::uint64_t>(-(units + 1)) + 1 : static_cast<std::uint64_t>(units);
  const std::string digits = std::to_string(magnitude);
  const auto d = static_cast<std::size_t>(decimals < 0 ? 0 : decimals);
  const std::string padded = digits.size() <= d ? std::string(d + 1 - digits.size(), '0').append(digits) : digits;
  std::string out = negative ? "-" : "";
  out.append(padded, 0, padded.size() - d);
  if (d > 0) out.append(".").append(padded, padded.size() - d, d);
  return out;
}

std::string format_usd_cents(std::int64_t cents) {
  const bool negative = cents < 0;
  const std::uint64_t a = negative ? static_cast<std::uint64_t>(-(cents + 1)) + 1 : static_cast<std::uint64_t>(cents);
  const std::string whole = std::to_string(a / 100);
  std::string out = negative ? "-" : "";
  for (std::size_t i = 0; i < whole.size(); ++i) {
    if (i > 0 && (whole.size() - i) % 3 == 0) out += ',';
    out += whole[i];
  }
  return fmt::format("{}.{:02}", out, a % 100);
}

}  // namespace itera::desk
