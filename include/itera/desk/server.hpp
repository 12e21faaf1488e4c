#pragma once
// The HTTP side: routes, pages, JSON API, operator sign-in, CSRF, rate limits, request size limits,
// access log. Runs on cpp-httplib.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "itera/desk/service.hpp"

namespace httplib { class Server; }

namespace itera::desk {

class desk_server {
 public:
  explicit desk_server(desk_service& service);
  ~desk_server();
  desk_server(const desk_server&) = delete;
  desk_server& operator=(const desk_server&) = delete;

  // Binds to config host:port (port 0: any free port). Returns the port, throws when it cannot bind.
  int bind();
  // Serves until stop(); runs the expiry/retention sweep on its own thread meanwhile.
  void serve();
  void stop();
  bool running() const;  // true once serve() accepts connections

 private:
  struct impl;
  std::unique_ptr<impl> m_impl;
};

}  // namespace itera::desk
