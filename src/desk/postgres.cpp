// PostgreSQL through libpq: a pool of connections, parameters always sent apart from the statement
// (PQexecParams), integers read back as integers.
#include <condition_variable>
#include <mutex>

#include <fmt/format.h>
#include <libpq-fe.h>

#include "itera/desk/sql.hpp"

namespace itera::desk {

namespace {

// Type oids of the integer columns (pg_type.h): int8, int2, int4.
constexpr Oid int8_oid = 20, int2_oid = 21, int4_oid = 23;

void ignore_notice(void*, const char*) {}

class pg_connection final : public sql_connection {
 public:
  explicit pg_connection(const std::string& conninfo) : m_conn(PQconnectdb(conninfo.c_str())) {
    if (!m_conn || PQstatus(m_conn) != CONNECTION_OK) {
      // libpq's message names host and reason; it does not contain the password.
      const std::string why = m_conn ? PQerrorMessage(m_conn) : "out of memory";
      PQfinish(m_conn);
      throw sql_error(fmt::format("postgres: cannot connect: {}", why));
    }
    PQsetNoticeProcessor(m_conn, ignore_notice, nullptr);
  }
  ~pg_connection() override { PQfinish(m_conn); }
  pg_connection(const pg_connection&) = delete;
  pg_connection& operator=(const pg_connection&) = delete;

  bool healthy() const { return PQstatus(m_conn) == CONNECTION_OK; }
  void reset() { PQreset(m_conn); }

  std::int64_t exec(std::string_view sql, const std::vector<sql_value>& params) override {
    PGresult* r = run(sql, params);
    const char* n = PQcmdTuples(r);
    const std::int64_t changed = (n && *n) ? std::stoll(n) : 0;
    PQclear(r);
    return changed;
  }

  std::vector<sql_row> query(std::string_view sql, const std::vector<sql_value>& params) override {
    PGresult* r = run(sql, params);
    std::vector<sql_row> rows;
    const int nrows = PQntuples(r);
    const int ncols = PQnfields(r);
    rows.reserve(static_cast<std::size_t>(nrows));
    for (int i = 0; i < nrows; ++i) {
      sql_row row;
      row.values.reserve(static_cast<std::size_t>(ncols));
      for (int c = 0; c < ncols; ++c) {
        if (PQgetisnull(r, i, c)) {
          row.values.emplace_back(nullptr);
          continue;
        }
        const Oid type = PQftype(r, c);
        const char* v = PQgetvalue(r, i, c);
        if (type == int8_oid || type == int4_oid || type == int2_oid) row.values.emplace_back(static_cast<std::int64_t>(std::stoll(v)));
        else row.values.emplace_back(std::string(v, static_cast<std::size_t>(PQgetlength(r, i, c))));
      }
      rows.push_back(std::move(row));
    }
    PQclear(r);
    return rows;
  }

 private:
  PGresult* run(std::string_view sql, const std::vector<sql_value>& params) {
    std::vector<std::string> text(params.size());
    std::vector<const char*> values(params.size(), nullptr);
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (const auto* n = std::get_if<std::int64_t>(&params[i])) text[i] = std::to_string(*n);
      else if (const auto* s = std::get_if<std::string>(&params[i])) text[i] = *s;
      else continue;
      values[i] = text[i].c_str();
    }
    const std::string statement(sql);
    PGresult* r = PQexecParams(m_conn, statement.c_str(), static_cast<int>(params.size()), nullptr,
                               values.data(), nullptr, nullptr, 0);
    const auto status = PQresultStatus(r);
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
      const std::string why = r ? PQresultErrorMessage(r) : PQerrorMessage(m_conn);
      PQclear(r);
      throw sql_error(fmt::format("postgres: {} in: {}", why, sql));
    }
    return r;
  }

  PGconn* m_conn;
};

class pg_database final : public sql_database {
 public:
  pg_database(const std::string& conninfo, int connections) {
    for (int i = 0; i < connections; ++i) m_free.push_back(std::make_unique<pg_connection>(conninfo));
  }

  std::string dialect() const override { return "postgres"; }
  std::string_view lock_rows() const override { return " FOR UPDATE"; }

  void write(const std::function<void(sql_connection&)>& work) override {
    with_connection([&](pg_connection& c) {
      c.exec("BEGIN", {});
      try {
        work(c);
        c.exec("COMMIT", {});
      } catch (...) {
        try {
          c.exec("ROLLBACK", {});
        } catch (const sql_error&) {
          // The connection is gone; the pool resets it on the next use.
        }
        throw;
      }
    });
  }

  void read(const std::function<void(sql_connection&)>& work) override {
    with_connection([&](pg_connection& c) { work(c); });
  }

 private:
  void with_connection(const std::function<void(pg_connection&)>& work) {
    std::unique_ptr<pg_connection> c;
    {
      std::unique_lock lock(m_mutex);
      m_cv.wait(lock, [&] { return !m_free.empty(); });
      c = std::move(m_free.back());
      m_free.pop_back();
    }
    struct give_back {
      pg_database* db;
      std::unique_ptr<pg_connection>& c;
      ~give_back() {
        {
          std::lock_guard lock(db->m_mutex);
          db->m_free.push_back(std::move(c));
        }
        db->m_cv.notify_one();
      }
    } guard{this, c};
    if (!c->healthy()) c->reset();  // the server restarted: reconnect before use
    work(*c);
  }

  std::mutex m_mutex;
  std::condition_variable m_cv;
  std::vector<std::unique_ptr<pg_connection>> m_free;
};

}  // namespace

std::unique_ptr<sql_database> open_postgres(const std::string& conninfo, int connections) {
  return std::make_unique<pg_database>(conninfo, connections < 1 ? 1 : connections);
}

}  // namespace itera::desk
