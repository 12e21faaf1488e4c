// Starting, waiting for and describing other programs (include/itera/watch/process.hpp).
#include "itera/watch/process.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

extern char** environ;

namespace itera::proc {

std::string signal_name(int signal) {
  if (const char* abbrev = sigabbrev_np(signal); abbrev != nullptr) return std::string("SIG") + abbrev;
  return fmt::format("signal {}", signal);
}

std::string exit_info::describe() const {
  switch (how) {
    case kind::exited: return fmt::format("exited with code {}", code);
    case kind::signalled:
      return fmt::format("killed by {} (signal {}{}; exit code {})", signal_name(signal), signal,
                         core_dumped ? ", core dumped" : "", code);
    case kind::not_started: return error;
  }
  return error;
}

exit_info exit_info_from_wait_status(int status) {
  exit_info e;
  if (WIFEXITED(status)) {
    e.how = exit_info::kind::exited;
    e.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    e.how = exit_info::kind::signalled;
    e.signal = WTERMSIG(status);
    e.code = 128 + e.signal;
    e.core_dumped = WCOREDUMP(status);
  } else {
    throw std::logic_error(fmt::format("waitpid status {:#x} is neither an exit nor a signal", status));
  }
  return e;
}

exit_info not_started(const std::string& program, int error_number) {
  exit_info e;
  e.how = exit_info::kind::not_started;
  const bool searched = program.find('/') == std::string::npos;
  if (error_number == ENOENT) {
    e.code = 127;
    e.error = searched ? fmt::format("cannot run '{}': command not found (no such program on PATH; give its path, or "
                                     "check the spelling)",
                                     program)
                       : fmt::format("cannot run '{}': no such file", program);
  } else if (error_number == EACCES || error_number == ENOEXEC || error_number == EISDIR) {
    e.code = 126;
    e.error = fmt::format("cannot run '{}': {} (is it an executable file? chmod +x, or run it through its "
                          "interpreter)",
                          program, std::strerror(error_number));
  } else {
    e.code = 126;
    e.error = fmt::format("cannot run '{}': {}", program, std::strerror(error_number));
  }
  return e;
}

namespace {

std::vector<char*> c_argv(const std::vector<std::string>& argv) {
  std::vector<char*> v;
  v.reserve(argv.size() + 1);
  for (const auto& a : argv) v.push_back(const_cast<char*>(a.c_str()));
  v.push_back(nullptr);
  return v;
}

}  // namespace

spawned spawn(const std::vector<std::string>& argv) {
  if (argv.empty() || argv[0].empty()) throw std::invalid_argument("spawn: empty command");
  auto args = c_argv(argv);
  spawned s;
  // glibc's posix_spawnp reports a failed exec (not found, not executable) as its return value.
  const int rc = posix_spawnp(&s.pid, argv[0].c_str(), nullptr, nullptr, args.data(), environ);
  if (rc != 0) {
    s.pid = -1;
    s.failure = not_started(argv[0], rc);
  }
  return s;
}

exit_info wait_for(pid_t pid) {
  int status = 0;
  for (;;) {
    if (waitpid(pid, &status, 0) == pid) return exit_info_from_wait_status(status);
    if (errno != EINTR) throw std::runtime_error(fmt::format("waitpid({}) failed: {}", pid, std::strerror(errno)));
  }
}

namespace {

std::atomic<pid_t> g_forward_to{-1};
volatile sig_atomic_t g_last_signal = 0;
constexpr int forwarded_signals[] = {SIGTERM, SIGHUP};
constexpr int absorbed_signals[] = {SIGINT, SIGQUIT};
static_assert(std::atomic<pid_t>::is_always_lock_free, "the signal handler reads the child's pid");

extern "C" void on_signal(int sig) {
  const int saved = errno;
  g_last_signal = sig;
  for (int f : forwarded_signals) {
    if (f == sig) {
      if (const pid_t child = g_forward_to.load(); child > 0) kill(child, sig);
    }
  }
  errno = saved;
}

struct saved_actions {
  struct sigaction term, hup, intr, quit;
};
saved_actions g_saved;

}  // namespace

forward_signals::forward_signals(pid_t child) {
  g_forward_to = child;
  g_last_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, &g_saved.term);
  sigaction(SIGHUP, &sa, &g_saved.hup);
  sigaction(SIGINT, &sa, &g_saved.intr);
  sigaction(SIGQUIT, &sa, &g_saved.quit);
}

forward_signals::~forward_signals() {
  sigaction(SIGTERM, &g_saved.term, nullptr);
  sigaction(SIGHUP, &g_saved.hup, nullptr);
  sigaction(SIGINT, &g_saved.intr, nullptr);
  sigaction(SIGQUIT, &g_saved.quit, nullptr);
  g_forward_to = -1;
}

void forward_signals::set_child(pid_t child) {
  g_forward_to = child;
  if (const int pending = g_last_signal; child > 0 && (pending == SIGTERM || pending == SIGHUP)) kill(child, pending);
}

int forward_signals::last_signal() { return g_last_signal; }

namespace {

class fd_pair {
 public:
  fd_pair() {
    if (pipe2(m_fd, O_CLOEXEC) != 0) throw std::runtime_error(fmt::format("pipe2 failed: {}", std::strerror(errno)));
  }
  ~fd_pair() {
    close_read();
    close_write();
  }
  int read_end() const { return m_fd[0]; }
  int write_end() const { return m_fd[1]; }
  void close_read() {
    if (m_fd[0] >= 0) close(m_fd[0]);
    m_fd[0] = -1;
  }
  void close_write() {
    if (m_fd[1] >= 0) close(m_fd[1]);
    m_fd[1] = -1;
  }

 private:
  int m_fd[2] = {-1, -1};
};

// Keeps the last `limit` bytes: the verdict needs the end of a traceback, not megabytes of warnings.
void append_tail(std::string& s, const char* data, std::size_t n, std::size_t limit = 1 << 20) {
  s.append(data, n);
  if (s.size() > limit) s.erase(0, s.size() - limit);
}

}  // namespace

captured run_captured(const std::vector<std::string>& argv, double timeout_s,
                      const std::vector<std::pair<std::string, std::string>>& extra_env, int first_signal) {
  using clock = std::chrono::steady_clock;
  if (argv.empty() || argv[0].empty()) throw std::invalid_argument("run_captured: empty command");
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string key = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& [k, v] : extra_env) replaced = replaced || k == key;
    if (!replaced) env_strings.push_back(entry);
  }
  for (const auto& [k, v] : extra_env) env_strings.push_back(k + "=" + v);
  auto envp = c_argv(env_strings);
  auto args = c_argv(argv);

  fd_pair out, err;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out.write_end(), 1);
  posix_spawn_file_actions_adddup2(&actions, err.write_end(), 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setpgroup(&attr, 0);  // its own group: a timeout kills what it started too
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK);

  captured c;
  const auto start = clock::now();
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, argv[0].c_str(), &actions, &attr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    c.exit = not_started(argv[0], rc);
    return c;
  }
  out.close_write();
  err.close_write();

  const auto deadline = start + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(timeout_s));
  bool reaped = false;
  clock::time_point reaped_at{};
  bool signalled_first = false;  // first_signal sent at signalled_at; SIGKILL follows
  clock::time_point signalled_at{};
  bool out_open = true, err_open = true;
  char buf[65536];
  const auto reap = [&](bool block) {
    int status = 0;
    for (;;) {
      const pid_t r = waitpid(pid, &status, block ? 0 : WNOHANG);
      if (r == pid) {
        c.exit = exit_info_from_wait_status(status);
        reaped = true;
        reaped_at = clock::now();
        return;
      }
      if (r == 0) return;
      if (errno != EINTR) throw std::runtime_error(fmt::format("waitpid({}) failed: {}", pid, std::strerror(errno)));
    }
  };
  while (out_open || err_open || !reaped) {
    const auto now = clock::now();
    if (!c.timed_out && now >= deadline) {
      c.timed_out = true;
      if (first_signal != SIGKILL && !reaped) {
        kill(pid, first_signal);
        signalled_first = true;
        signalled_at = now;
      } else {
        kill(-pid, SIGKILL);
        if (!reaped) reap(true);
      }
    }
    if (signalled_first && now - signalled_at > std::chrono::seconds(2)) {
      signalled_first = false;
      kill(-pid, SIGKILL);
      if (!reaped) reap(true);
    }
    if (!reaped) reap(false);
    // The program ended but a process it left behind keeps the pipes open: stop waiting for it.
    if (reaped && (out_open || err_open) && clock::now() - reaped_at > std::chrono::seconds(2)) {
      kill(-pid, SIGKILL);
      break;
    }
    if (!out_open && !err_open) {
      if (!reaped) reap(c.timed_out);
      if (!reaped) {
        pollfd none_fd{};
        poll(&none_fd, 0, 20);
      }
      continue;
    }
    pollfd fds[2];
    nfds_t n = 0;
    if (out_open) fds[n++] = {out.read_end(), POLLIN, 0};
    if (err_open) fds[n++] = {err.read_end(), POLLIN, 0};
    const int ready = poll(fds, n, 50);
    if (ready < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(fmt::format("poll failed: {}", std::strerror(errno)));
    }
    for (nfds_t i = 0; i < n; ++i) {
      if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const bool is_out = fds[i].fd == out.read_end();
      const ssize_t got = read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        append_tail(is_out ? c.out : c.err, buf, static_cast<std::size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        (is_out ? out_open : err_open) = false;
        if (is_out) out.close_read();
        else err.close_read();
      }
    }
  }
  if (!reaped) reap(true);
  c.seconds = std::chrono::duration<double>(clock::now() - start).count();
  return c;
}

std::vector<pid_t> process_tree(pid_t root) {
  std::multimap<pid_t, pid_t> children;
  bool root_alive = false;
  if (DIR* d = opendir("/proc"); d != nullptr) {
    while (const dirent* e = readdir(d)) {
      char* end = nullptr;
      const long pid = std::strtol(e->d_name, &end, 10);
      if (end == e->d_name || *end != '\0' || pid <= 0) continue;
      std::ifstream stat(fmt::format("/proc/{}/stat", pid));
      std::string line;
      if (!std::getline(stat, line)) continue;  // gone meanwhile
      // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so read after the last ')'.
      const auto close = line.rfind(')');
      if (close == std::string::npos) continue;
      std::istringstream rest(line.substr(close + 1));
      std::string state;
      long ppid = 0;
      if (!(rest >> state >> ppid)) continue;
      if (pid == root) root_alive = true;
      children.emplace(static_cast<pid_t>(ppid), static_cast<pid_t>(pid));
    }
    closedir(d);
  }
  std::vector<pid_t> tree;
  if (!root_alive) return tree;
  tree.push_back(root);
  for (std::size_t i = 0; i < tree.size(); ++i) {
    auto [first, last] = children.equal_range(tree[i]);
    for (auto it = first; it != last; ++it) tree.push_back(it->second);
  }
  return tree;
}

}  // namespace itera::proc
