// Bounded load on a running desk: many concurrent order creations and "I paid" presses, with
// retries through a restart of the service (the kill -9 test). Then checks that every order the
// desk acknowledged is there, once, with one payment_reported transition, and reports latencies.
//   desk_load_client --port-file F --orders N --threads T --operator-token TOKEN
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "itera/desk/crypto.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

struct options {
  std::string port_file;
  int orders = 1000;
  int threads = 8;
  std::string operator_token;
  double give_up_s = 60;
  std::string progress_file;  // the number of acknowledged orders, rewritten every few milliseconds
};

int read_port(const std::string& file) {
  std::ifstream in(file);
  int port = 0;
  in >> port;
  return port;
}

class connection {
 public:
  explicit connection(const options& o) : m_o(o) {}
  // Sends until a response with a status under 500 arrives (or the deadline passes).
  httplib::Result send(const std::function<httplib::Result(httplib::Client&)>& request, std::vector<double>& latencies_ms,
                       int& retries) {
    const auto deadline = clock_type::now() + std::chrono::duration<double>(m_o.give_up_s);
    for (;;) {
      if (!m_client || m_port != read_port(m_o.port_file)) reconnect();
      if (m_client) {
        const auto t0 = clock_type::now();
        auto r = request(*m_client);
        const auto t1 = clock_type::now();
        if (r && r->status < 500) {
          latencies_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
          return r;
        }
        m_client.reset();
      }
      if (clock_type::now() > deadline) return httplib::Result(nullptr, httplib::Error::Connection);
      ++retries;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

 private:
  void reconnect() {
    m_port = read_port(m_o.port_file);
    m_client.reset();
    if (m_port <= 0) return;
    m_client = std::make_unique<httplib::Client>("127.0.0.1", m_port);
    m_client->set_keep_alive(true);
    m_client->set_tcp_nodelay(true);
    m_client->set_connection_timeout(2, 0);
    m_client->set_read_timeout(10, 0);
  }
  const options& m_o;
  int m_port = 0;
  std::unique_ptr<httplib::Client> m_client;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  // Nearest rank.
  const auto rank = static_cast<std::size_t>(std::max(1.0, std::ceil(p / 100.0 * static_cast<double>(v.size()))));
  return v[rank - 1];
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--port-file") o.port_file = v;
    else if (k == "--orders") o.orders = std::stoi(v);
    else if (k == "--threads") o.threads = std::stoi(v);
    else if (k == "--operator-token") o.operator_token = v;
    else if (k == "--give-up-s") o.give_up_s = std::stod(v);
    else if (k == "--progress-file") o.progress_file = v;
    else {
      std::fprintf(stderr, "desk_load_client: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  itera::desk::crypto_init();
  const nlohmann::json body = {{"gpu", "h100-pcie-80gb"}, {"days", 7}, {"quantity", 1}, {"environment", "bare"},
                               {"email", "load@example.com"}, {"network", "USDT-TRON"}};
  const std::string body_text = body.dump();
  struct acked {
    std::string key, reference, token;
    bool first_paid_changed = false, second_paid_changed = true;
  };
  std::vector<acked> done(static_cast<std::size_t>(o.orders));
  std::vector<std::vector<double>> create_ms(static_cast<std::size_t>(o.threads)), paid_ms(static_cast<std::size_t>(o.threads));
  std::atomic<int> next{0}, failures{0}, total_retries{0}, acknowledged{0};
  std::atomic<bool> loading{true};
  std::thread progress([&] {
    while (loading && !o.progress_file.empty()) {
      {
        std::ofstream(o.progress_file + ".tmp") << acknowledged.load() << "\n";
      }
      std::rename((o.progress_file + ".tmp").c_str(), o.progress_file.c_str());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  std::mutex err_mutex;
  std::string first_error;
  const auto fail = [&](const std::string& what) {
    ++failures;
    std::lock_guard lock(err_mutex);
    if (first_error.empty()) first_error = what;
  };
  const auto t0 = clock_type::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < o.threads; ++t) {
    pool.emplace_back([&, t] {
      connection c(o);
      int retries = 0;
      auto& cms = create_ms[static_cast<std::size_t>(t)];
      auto& pms = paid_ms[static_cast<std::size_t>(t)];
      for (int i = next++; i < o.orders; i = next++) {
        auto& a = done[static_cast<std::size_t>(i)];
        a.key = itera::desk::random_token(24);
        const httplib::Headers h = {{"Idempotency-Key", a.key}};
        auto r = c.send([&](httplib::Client& cl) { return cl.Post("/api/v1/orders", h, body_text, "application/json"); }, cms, retries);
        if (!r || (r->status != 201 && r->status != 200)) {
          fail("create: " + (r ? std::to_string(r->status) + " " + r->body : std::string("no answer")));
          continue;
        }
        const auto j = nlohmann::json::parse(r->body);
        a.reference = j["reference"];
        a.token = j["token"];
        ++acknowledged;
        const std::string path = "/api/v1/orders/" + a.token + "/paid";
        for (int press = 0; press < 2; ++press) {
          auto p = c.send([&](httplib::Client& cl) { return cl.Post(path.c_str(), "{}", "application/json"); }, pms, retries);
          if (!p || p->status != 200) {
            fail("paid: " + (p ? std::to_string(p->status) + " " + p->body : std::string("no answer")));
            break;
          }
          const bool changed = nlohmann::json::parse(p->body)["changed"];
          if (press == 0) a.first_paid_changed = changed;
          else a.second_paid_changed = changed;
        }
      }
      total_retries += retries;
    });
  }
  for (auto& th : pool) th.join();
  loading = false;
  progress.join();
  const double load_s = std::chrono::duration<double>(clock_type::now() - t0).count();

  // Verification: every acknowledged order is there, exactly once, with its history.
  connection c(o);
  std::vector<double> ignore;
  int retries = 0;
  int missing = 0, wrong_history = 0, second_press_changed = 0;
  for (const auto& a : done) {
    if (a.token.empty()) continue;
    if (a.second_paid_changed) ++second_press_changed;
    auto r = c.send([&](httplib::Client& cl) { return cl.Get(("/api/v1/orders/" + a.token).c_str()); }, ignore, retries);
    if (!r || r->status != 200) {
      ++missing;
      continue;
    }
    const auto j = nlohmann::json::parse(r->body);
    if (j["reference"] != a.reference || j["state"] != "payment_reported" || j["transitions"].size() != 3) ++wrong_history;
  }
  const httplib::Headers bearer = {{"Authorization", "Bearer " + o.operator_token}};
  auto total = c.send([&](httplib::Client& cl) { return cl.Get("/api/v1/operator/orders", bearer); }, ignore, retries);
  const long long stored = total && total->status == 200 ? nlohmann::json::parse(total->body)["total"].get<long long>() : -1;
  auto reported = c.send([&](httplib::Client& cl) { return cl.Get("/api/v1/operator/orders?state=payment_reported", bearer); }, ignore, retries);
  const long long stored_reported = reported && reported->status == 200 ? nlohmann::json::parse(reported->body)["total"].get<long long>() : -1;

  std::vector<double> all_create, all_paid;
  for (const auto& v : create_ms) all_create.insert(all_create.end(), v.begin(), v.end());
  for (const auto& v : paid_ms) all_paid.insert(all_paid.end(), v.begin(), v.end());
  const nlohmann::json summary = {
      {"orders", o.orders}, {"threads", o.threads}, {"seconds", load_s},
      {"requests", all_create.size() + all_paid.size()}, {"retries", total_retries.load()},
      {"failures", failures.load()}, {"missing", missing}, {"wrong_history", wrong_history},
      {"second_press_changed", second_press_changed}, {"stored", stored}, {"stored_payment_reported", stored_reported},
      {"create_ms", {{"p50", percentile(all_create, 50)}, {"p99", percentile(all_create, 99)}, {"max", percentile(all_create, 100)}}},
      {"paid_ms", {{"p50", percentile(all_paid, 50)}, {"p99", percentile(all_paid, 99)}, {"max", percentile(all_paid, 100)}}},
      {"percentile_method", "nearest rank over every successful request"}};
  std::printf("%s\n", summary.dump().c_str());
  bool ok = true;
  const auto check = [&](bool cond, const std::string& what) {
    if (!cond) {
      std::fprintf(stderr, "desk_load_client: FAIL: %s\n", what.c_str());
      ok = false;
    }
  };
  check(failures == 0, "requests failed: " + first_error);
  check(missing == 0, std::to_string(missing) + " acknowledged orders are missing");
  check(wrong_history == 0, std::to_string(wrong_history) + " orders have a wrong state or history");
  check(second_press_changed == 0, std::to_string(second_press_changed) + " second \"I paid\" presses changed something");
  check(stored == o.orders, "the desk holds " + std::to_string(stored) + " orders, expected " + std::to_string(o.orders) + " (lost or duplicated)");
  check(stored_reported == o.orders, "payment_reported orders: " + std::to_string(stored_reported));
  return ok ? 0 : 1;
}
