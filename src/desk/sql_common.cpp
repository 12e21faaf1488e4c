// Row accessors shared by both databases.
#include <fmt/format.h>

#include "itera/desk/sql.hpp"

namespace itera::desk {

std::int64_t sql_row::integer(std::size_t i) const {
  const auto& v = values.at(i);
  if (const auto* n = std::get_if<std::int64_t>(&v)) return *n;
  if (const auto* s = std::get_if<std::string>(&v)) {
    try {
      std::size_t used = 0;
      const long long n = std::stoll(*s, &used);
      if (used == s->size()) return n;
    } catch (const std::exception&) {
    }
  }
  throw sql_error(fmt::format("sql: column {} is not an integer", i));
}

std::string sql_row::text(std::size_t i) const {
  const auto& v = values.at(i);
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  if (const auto* n = std::get_if<std::int64_t>(&v)) return std::to_string(*n);
  return {};
}

}  // namespace itera::desk
