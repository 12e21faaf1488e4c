#pragma once
// A small SQL layer over SQLite and PostgreSQL (libpq). Statements are written once with $1, $2 ...
// placeholders and values are always bound, never spliced into the text. SQLite runs in WAL mode with
// one writer connection and a pool of readers; PostgreSQL with a pool of connections.
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace itera::desk {

using sql_value = std::variant<std::nullptr_t, std::int64_t, std::string>;

struct sql_row {
  std::vector<sql_value> values;
  bool is_null(std::size_t i) const { return std::holds_alternative<std::nullptr_t>(values.at(i)); }
  std::int64_t integer(std::size_t i) const;
  std::string text(std::size_t i) const;
};

struct sql_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class sql_connection {
 public:
  virtual ~sql_connection() = default;
  // Rows changed.
  virtual std::int64_t exec(std::string_view sql, const std::vector<sql_value>& params = {}) = 0;
  virtual std::vector<sql_row> query(std::string_view sql, const std::vector<sql_value>& params = {}) = 0;
};

class sql_database {
 public:
  virtual ~sql_database() = default;
  virtual std::string dialect() const = 0;  // "sqlite" or "postgres"
  // Runs `work` inside one transaction that may write (committed when it returns, rolled back when it
  // throws). SQLite: BEGIN IMMEDIATE on the writer connection; PostgreSQL: BEGIN on a pooled one.
  virtual void write(const std::function<void(sql_connection&)>& work) = 0;
  // Runs `work` on a reader (no explicit transaction: each statement sees committed data).
  virtual void read(const std::function<void(sql_connection&)>& work) = 0;
  // " FOR UPDATE" on PostgreSQL, "" on SQLite (whose single writer already serialises writes).
  virtual std::string_view lock_rows() const = 0;
};

// "sqlite:PATH" or a PostgreSQL connection string (URI or key=value). Throws sql_error.
std::unique_ptr<sql_database> open_sqlite(const std::string& path, int readers);
std::unique_ptr<sql_database> open_postgres(const std::string& conninfo, int connections);

}  // namespace itera::desk
