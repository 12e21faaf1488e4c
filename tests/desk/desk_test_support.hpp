#pragma once
// Shared by the desk's tests: a database of either kind, fresh for each test, and a running desk.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "itera/desk/crypto.hpp"
#include "itera/desk/server.hpp"
#include "itera/desk/service.hpp"
#include "itera/env/catalogue.hpp"

namespace desk_test {

namespace desk = itera::desk;

// The PostgreSQL server that tests/desk/pg_server.sh started (its connection string in a file).
inline std::string postgres_admin_conninfo() {
  const char* file = std::getenv("ITERA_DESK_PG_CONNINFO_FILE");
  if (!file) return {};
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  return line;
}

class database_fixture {
 public:
  explicit database_fixture(std::string kind) : m_kind(std::move(kind)) {
    desk::crypto_init();
    m_dir = std::filesystem::temp_directory_path() / ("itera-desk-test-" + desk::random_base32(12));
    std::filesystem::create_directories(m_dir);
  }
  ~database_fixture() {
    if (!m_pg_name.empty()) {
      try {
        desk::open_postgres(m_admin, 1)->read([&](desk::sql_connection& c) {
          c.exec("DROP DATABASE IF EXISTS " + m_pg_name + " WITH (FORCE)");
        });
      } catch (const std::exception&) {
      }
    }
    std::error_code ec;
    std::filesystem::remove_all(m_dir, ec);
  }
  const std::string& kind() const { return m_kind; }
  const std::filesystem::path& dir() const { return m_dir; }

  // Empty when this kind cannot run here (the reason is in `why`).
  std::string database_string(std::string& why) {
    if (m_kind == "sqlite") return "sqlite:" + (m_dir / "desk.db").string();
    if (m_database.empty()) {
      m_admin = postgres_admin_conninfo();
      if (m_admin.empty()) {
        why = std::getenv("ITERA_DESK_PG_CONNINFO_FILE") ? "" : "PostgreSQL: no server (ctest starts one: ctest -L desk)";
        if (why.empty()) ADD_FAILURE() << "ITERA_DESK_PG_CONNINFO_FILE is set but the file is empty or missing";
        return {};
      }
      // A database of its own per test, so that tests run side by side. The name is ours, [a-z0-9].
      std::string suffix = desk::random_base32(12);
      for (auto& ch : suffix) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      m_pg_name = "desk_t_" + suffix;
      desk::open_postgres(m_admin, 1)->read([&](desk::sql_connection& c) { c.exec("CREATE DATABASE " + m_pg_name); });
      m_database = m_admin + " dbname=" + m_pg_name;
    }
    return m_database;
  }

  std::unique_ptr<desk::sql_database> open(std::string& why) {
    const auto db = database_string(why);
    if (db.empty()) return nullptr;
    if (m_kind == "sqlite") return desk::open_sqlite(db.substr(7), 4);
    return desk::open_postgres(db, 4);
  }

 private:
  std::string m_kind;
  std::filesystem::path m_dir;
  std::string m_admin;
  std::string m_pg_name;
  std::string m_database;
};

inline std::filesystem::path source_dir() { return ITERA_SOURCE_DIR; }

inline desk::desk_config test_config(const std::string& database) {
  auto c = desk::load_config(source_dir() / "data/desk/desk.example.json", {});
  c.database = database;
  c.port = 0;
  c.threads = 8;
  c.log_requests = true;
  c.limits.orders_per_minute = 100000;
  c.limits.order_burst = 100000;
  c.prices_file = (source_dir() / "data/desk/prices.example.json").string();
  return c;
}

// A clock the test moves by hand.
struct test_clock {
  std::shared_ptr<std::atomic<std::int64_t>> now = std::make_shared<std::atomic<std::int64_t>>(1'796'000'000'000);
  desk::clock_ms fn() const {
    auto n = now;
    return [n] { return n->load(); };
  }
  void advance_ms(std::int64_t ms) { *now += ms; }
};

// A desk service and server on a free loopback port, served on its own thread.
class running_desk {
 public:
  running_desk(desk::desk_config config, std::unique_ptr<desk::sql_database> db, const test_clock& clock)
      : m_prices(desk::load_prices(config.prices_file, itera::catalogue::builtin())),
        m_service(config, itera::catalogue::builtin(), m_prices, std::move(db), clock.fn()),
        m_server(m_service) {
    m_port = m_server.bind();
    m_thread = std::thread([this] { m_server.serve(); });
    for (int i = 0; i < 500 && !m_server.running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ~running_desk() {
    m_server.stop();
    m_thread.join();
  }
  int port() const { return m_port; }
  desk::desk_service& service() { return m_service; }

 private:
  desk::price_list m_prices;
  desk::desk_service m_service;
  desk::desk_server m_server;
  int m_port = 0;
  std::thread m_thread;
};

inline std::string backend_name(const testing::TestParamInfo<std::string>& info) { return info.param; }

}  // namespace desk_test
