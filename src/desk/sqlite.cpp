// SQLite in WAL mode: one writer connection (writes are serialised by SQLite anyway) and a pool of
// readers that never wait for the writer. Prepared statements are cached per connection.
#include <condition_variable>
#include <mutex>
#include <unordered_map>

#include <fmt/format.h>
#include <sqlite3.h>

#include "itera/desk/sql.hpp"

namespace itera::desk {

namespace {

class sqlite_connection final : public sql_connection {
 public:
  sqlite_connection(const std::string& path, bool writer) {
    const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | (writer ? SQLITE_OPEN_CREATE : 0);
    if (sqlite3_open_v2(path.c_str(), &m_db, flags, nullptr) != SQLITE_OK) {
      const std::string why = m_db ? sqlite3_errmsg(m_db) : "out of memory";
      sqlite3_close(m_db);
      throw sql_error(fmt::format("sqlite: cannot open {}: {}", path, why));
    }
    sqlite3_busy_timeout(m_db, 5000);
    if (writer) {
      // WAL: readers do not block the writer. synchronous=NORMAL: a commit is in the WAL file (in
      // the OS) when it returns, so it survives the process being killed; docs/desk.md says what
      // FULL would add (surviving power loss) and what it costs.
      const auto rows = query("PRAGMA journal_mode=WAL", {});
      if (rows.empty() || rows[0].text(0) != "wal") throw sql_error(fmt::format("sqlite: {} cannot use WAL", path));
      exec("PRAGMA synchronous=NORMAL", {});
      exec("PRAGMA foreign_keys=ON", {});
    } else {
      exec("PRAGMA query_only=ON", {});
    }
  }
  ~sqlite_connection() override {
    for (auto& [sql, stmt] : m_cache) sqlite3_finalize(stmt);
    sqlite3_close(m_db);
  }
  sqlite_connection(const sqlite_connection&) = delete;
  sqlite_connection& operator=(const sqlite_connection&) = delete;

  std::int64_t exec(std::string_view sql, const std::vector<sql_value>& params) override {
    run(sql, params, nullptr);
    return sqlite3_changes(m_db);
  }

  std::vector<sql_row> query(std::string_view sql, const std::vector<sql_value>& params) override {
    std::vector<sql_row> rows;
    run(sql, params, &rows);
    return rows;
  }

 private:
  sqlite3_stmt* prepare(std::string_view sql) {
    std::string key(sql);
    if (const auto it = m_cache.find(key); it != m_cache.end()) return it->second;
    // $1 -> ?1: SQLite's numbered parameters.
    std::string text = key;
    for (std::size_t i = 0; i + 1 < text.size(); ++i) {
      if (text[i] == '$' && text[i + 1] >= '0' && text[i + 1] <= '9') text[i] = '?';
    }
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(m_db, text.c_str(), static_cast<int>(text.size()), &stmt, nullptr) != SQLITE_OK) {
      throw sql_error(fmt::format("sqlite: {} in: {}", sqlite3_errmsg(m_db), key));
    }
    m_cache.emplace(std::move(key), stmt);
    return stmt;
  }

  void run(std::string_view sql, const std::vector<sql_value>& params, std::vector<sql_row>* rows) {
    sqlite3_stmt* stmt = prepare(sql);
    struct reset_on_exit {
      sqlite3_stmt* s;
      ~reset_on_exit() {
        sqlite3_reset(s);
        sqlite3_clear_bindings(s);
      }
    } guard{stmt};
    if (static_cast<int>(params.size()) != sqlite3_bind_parameter_count(stmt)) {
      throw sql_error(fmt::format("sqlite: {} parameters given, {} expected in: {}", params.size(),
                                  sqlite3_bind_parameter_count(stmt), sql));
    }
    for (std::size_t i = 0; i < params.size(); ++i) {
      const int index = static_cast<int>(i) + 1;
      int rc = SQLITE_OK;
      if (const auto* n = std::get_if<std::int64_t>(&params[i])) rc = sqlite3_bind_int64(stmt, index, *n);
      else if (const auto* s = std::get_if<std::string>(&params[i])) rc = sqlite3_bind_text(stmt, index, s->data(), static_cast<int>(s->size()), SQLITE_TRANSIENT);
      else rc = sqlite3_bind_null(stmt, index);
      if (rc != SQLITE_OK) throw sql_error(fmt::format("sqlite: bind {}: {}", index, sqlite3_errmsg(m_db)));
    }
    for (;;) {
      const int rc = sqlite3_step(stmt);
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) throw sql_error(fmt::format("sqlite: {} in: {}", sqlite3_errmsg(m_db), sql));
      if (!rows) continue;
      sql_row row;
      const int n = sqlite3_column_count(stmt);
      row.values.reserve(static_cast<std::size_t>(n));
      for (int c = 0; c < n; ++c) {
        switch (sqlite3_column_type(stmt, c)) {
          case SQLITE_NULL: row.values.emplace_back(nullptr); break;
          case SQLITE_INTEGER: row.values.emplace_back(static_cast<std::int64_t>(sqlite3_column_int64(stmt, c))); break;
          default: {
            const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt, c));
            row.values.emplace_back(std::string(p ? p : "", static_cast<std::size_t>(sqlite3_column_bytes(stmt, c))));
          }
        }
      }
      rows->push_back(std::move(row));
    }
  }

  sqlite3* m_db = nullptr;
  std::unordered_map<std::string, sqlite3_stmt*> m_cache;
};

class sqlite_database final : public sql_database {
 public:
  sqlite_database(const std::string& path, int readers) : m_writer(std::make_unique<sqlite_connection>(path, true)) {
    for (int i = 0; i < readers; ++i) m_free.push_back(std::make_unique<sqlite_connection>(path, false));
  }

  std::string dialect() const override { return "sqlite"; }
  std::string_view lock_rows() const override { return ""; }

  void write(const std::function<void(sql_connection&)>& work) override {
    std::lock_guard lock(m_write_mutex);
    m_writer->exec("BEGIN IMMEDIATE", {});
    try {
      work(*m_writer);
      m_writer->exec("COMMIT", {});
    } catch (...) {
      try {
        m_writer->exec("ROLLBACK", {});
      } catch (const sql_error&) {
        // SQLite may already have rolled back (an I/O error); the original error says why.
      }
      throw;
    }
  }

  void read(const std::function<void(sql_connection&)>& work) override {
    std::unique_ptr<sqlite_connection> c;
    {
      std::unique_lock lock(m_pool_mutex);
      m_pool_cv.wait(lock, [&] { return !m_free.empty(); });
      c = std::move(m_free.back());
      m_free.pop_back();
    }
    struct give_back {
      sqlite_database* db;
      std::unique_ptr<sqlite_connection>& c;
      ~give_back() {
        {
          std::lock_guard lock(db->m_pool_mutex);
          db->m_free.push_back(std::move(c));
        }
        db->m_pool_cv.notify_one();
      }
    } guard{this, c};
    work(*c);
  }

 private:
  std::mutex m_write_mutex;
  std::unique_ptr<sqlite_connection> m_writer;
  std::mutex m_pool_mutex;
  std::condition_variable m_pool_cv;
  std::vector<std::unique_ptr<sqlite_connection>> m_free;
};

}  // namespace

std::unique_ptr<sql_database> open_sqlite(const std::string& path, int readers) {
  return std::make_unique<sqlite_database>(path, readers < 1 ? 1 : readers);
}

}  // namespace itera::desk
