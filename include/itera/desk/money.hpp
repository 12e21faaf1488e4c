#pragma once
// Integer money. Prices are US cents per GPU-day (desk price file); a payment is a whole number of
// the asset's smallest unit (USDT: 10^-6, BTC: 1 satoshi = 10^-8), rounded up so the operator never
// receives less than the price. No floating point anywhere on this path.
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "itera/desk/config.hpp"

namespace itera { class catalogue; }

namespace itera::desk {

struct price_list {
  std::string currency = "USD";
  std::string dated;                 // the day the prices were set
  bool example = false;              // example prices: pages say so
  std::string note;
  std::map<std::string, std::int64_t> usd_cents_per_day;  // card id -> price

  std::optional<std::int64_t> price(const std::string& card_id) const;
};

// Reads a desk price file; every card id must be in the catalogue. Throws itera::input_error.
price_list load_prices(const std::filesystem::path& file, const catalogue& cards);

struct quote {
  std::int64_t usd_cents_per_day = 0;
  std::int64_t usd_cents_total = 0;   // per day x days x quantity
  std::int64_t amount_units = 0;      // in the asset's smallest unit, rounded up
};

// std::nullopt when a product overflows 63 bits (never for sane inputs; refused rather than wrapped).
std::optional<quote> make_quote(std::int64_t usd_cents_per_day, int days, int quantity,
                                const payment_network& network);

// 1234560000 units with 6 decimals -> "1234.560000". Exact, from the integer.
std::string format_units(std::int64_t units, int decimals);
// 123456 cents -> "1,234.56".
std::string format_usd_cents(std::int64_t cents);

}  // namespace itera::desk
