// itera-desk: the rental desk service (docs/desk.md).
//   itera-desk serve --config desk.json [--port-file FILE]
//   itera-desk migrate --config desk.json
//   itera-desk hash-password   (password on stdin -> argon2id string for operator_password_hash)
//   itera-desk hash-token      (token on stdin -> hex for operator_token_hash)
#include <csignal>
#include <fstream>
#include <iostream>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "itera/core/errors.hpp"
#include "itera/desk/crypto.hpp"
#include "itera/desk/log.hpp"
#include "itera/desk/server.hpp"
#include "itera/desk/service.hpp"
#include "itera/env/catalogue.hpp"

namespace {

std::string read_secret_line() {
  std::string line;
  std::getline(std::cin, line);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

itera::desk::desk_config config_from(const std::string& path) {
  std::string file = path;
  const auto env = itera::desk::desk_environment();
  if (file.empty()) {
    if (const auto it = env.find("ITERA_DESK_CONFIG"); it != env.end()) file = it->second;
  }
  return itera::desk::load_config(file, env);
}

int serve(const std::string& config_path, const std::string& port_file) {
  using namespace itera::desk;
  // Signals are taken by one thread (sigwait), so that stopping is an ordinary call, not a handler.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  const auto config = config_from(config_path);
  if (config.prices_file.empty()) throw itera::input_error("desk config: prices_file is not set (data/desk/prices.example.json)");
  if (config.networks.empty()) throw itera::input_error("desk config: no payment networks configured");
  const auto& cards = itera::catalogue::builtin();
  auto prices = load_prices(config.prices_file, cards);
  for (const auto& n : config.networks) {
    if (n.example_address) log_line(fmt::format("desk: WARNING: network {} uses an example address; pages say so", n.id));
  }
  if (prices.example) log_line("desk: WARNING: the price file holds example prices; pages say so");
  if (config.operator_password_hash.empty()) log_line("desk: operator sign-in is off (no operator_password_hash)");
  desk_service desk(config, cards, std::move(prices), open_database(config));
  desk_server server(desk);
  const int port = server.bind();
  log_line(fmt::format("desk: listening on http://{}:{} ({} database, schema {})", config.host, port, desk.store().dialect(),
                       desk.store().schema_version()));
  if (!port_file.empty()) {
    const std::string tmp = port_file + ".tmp";
    std::ofstream(tmp) << port << "\n";
    std::rename(tmp.c_str(), port_file.c_str());  // readers never see a half-written file
  }
  std::thread waiter([&server, signals] {
    int sig = 0;
    sigwait(&signals, &sig);
    log_line(fmt::format("desk: signal {}, stopping", sig));
    server.stop();
  });
  waiter.detach();
  server.serve();
  log_line("desk: stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"itera-desk: the GPU rental desk (catalogue, orders, crypto payment instructions, operator)"};
  app.require_subcommand(1);
  std::string config_path;
  std::string port_file;
  auto* serve_cmd = app.add_subcommand("serve", "run the HTTP service");
  serve_cmd->add_option("--config", config_path, "configuration file (default: $ITERA_DESK_CONFIG)");
  serve_cmd->add_option("--port-file", port_file, "write the port listened on to this file (useful with port 0)");
  auto* migrate_cmd = app.add_subcommand("migrate", "apply database migrations and exit");
  migrate_cmd->add_option("--config", config_path, "configuration file (default: $ITERA_DESK_CONFIG)");
  auto* password_cmd = app.add_subcommand("hash-password", "read a password on stdin, print its argon2id hash");
  auto* token_cmd = app.add_subcommand("hash-token", "read an API token on stdin, print its hash");
  auto* new_token_cmd = app.add_subcommand("new-token", "print a fresh random operator API token");
  CLI11_PARSE(app, argc, argv);
  try {
    itera::desk::crypto_init();
    if (*serve_cmd) return serve(config_path, port_file);
    if (*migrate_cmd) {
      const auto config = config_from(config_path);
      itera::desk::order_store store(itera::desk::open_database(config));
      fmt::print("schema version {}\n", store.migrate());
      return 0;
    }
    if (*password_cmd) {
      const auto password = read_secret_line();
      if (password.size() < 12) {
        fmt::print(stderr, "itera-desk: use a password of at least 12 characters\n");
        return static_cast<int>(itera::exit_code::usage);
      }
      fmt::print("{}\n", itera::desk::hash_password(password));
      return 0;
    }
    if (*token_cmd) {
      const auto token = read_secret_line();
      if (token.size() < 32) {
        fmt::print(stderr, "itera-desk: an API token has at least 32 characters (itera-desk new-token makes one)\n");
        return static_cast<int>(itera::exit_code::usage);
      }
      fmt::print("{}\n", itera::desk::hash_hex(token));
      return 0;
    }
    if (*new_token_cmd) {
      fmt::print("{}\n", itera::desk::random_token(32));
      return 0;
    }
  } catch (const itera::input_error& e) {
    fmt::print(stderr, "itera-desk: {}\n", e.what());
    return static_cast<int>(itera::exit_code::bad_input);
  } catch (const std::exception& e) {
    fmt::print(stderr, "itera-desk: {}\n", e.what());
    return static_cast<int>(itera::exit_code::internal_error);
  }
  return 0;
}
