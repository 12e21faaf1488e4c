#pragma once
// Running another program and saying how it ended: `itera watch` runs the user's command with the
// terminal as it is; `itera doctor` runs each probe captured, with a timeout. POSIX only.
#include <signal.h>
#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

namespace itera::proc {

// "SIGSEGV" for 11; "signal 42" for a number without a name.
std::string signal_name(int signal);

// How a program ended, with the exit code a shell would give for it.
struct exit_info {
  enum class kind { exited, signalled, not_started };
  kind how = kind::exited;
  int code = 0;    // its exit code; 128 + signal when killed; 127 (not found) or 126 (not executable) when not started
  int signal = 0;  // kind::signalled
  bool core_dumped = false;
  std::string error;  // kind::not_started: why, naming the program

  // "exited with code 3", "killed by SIGSEGV (signal 11, core dumped; exit code 139)",
  // or the start error.
  std::string describe() const;
};

// From waitpid()'s status.
exit_info exit_info_from_wait_status(int status);

// The error of a program that could not be started (posix_spawn's errno): 127 when it does not
// exist or is not on PATH, 126 when it exists but cannot be executed, as a shell says.
exit_info not_started(const std::string& program, int error_number);

struct spawned {
  pid_t pid = -1;     // -1 when it did not start
  exit_info failure;  // why, when pid is -1
};

// Starts argv (argv[0] searched on PATH when it has no '/') with this process's standard streams,
// environment and process group, so the terminal's Ctrl-C reaches it as usual.
spawned spawn(const std::vector<std::string>& argv);

// Waits for a child started by spawn(), retrying on EINTR.
exit_info wait_for(pid_t pid);

// While alive, SIGTERM and SIGHUP sent to this process are passed on to `child`, and SIGINT and
// SIGQUIT (which the terminal sends to the child too) no longer end this process, so it outlives
// the child and records how it ended. The previous handlers come back on destruction.
// Constructed before the child starts (child -1), so no signal slips in between; set_child() then
// names it and passes on a SIGTERM or SIGHUP that came before.
class forward_signals {
 public:
  explicit forward_signals(pid_t child = -1);
  ~forward_signals();
  void set_child(pid_t child);
  forward_signals(const forward_signals&) = delete;
  forward_signals& operator=(const forward_signals&) = delete;
  // The last signal forwarded or absorbed, 0 when none.
  static int last_signal();
};

// A run whose standard output and error are captured (stdin is /dev/null). It runs in its own
// process group, which is killed when `timeout_s` passes, or when the program has ended and
// something it left behind still holds the pipes. On a timeout `first_signal` goes to the program
// first (SIGABRT lets Python's faulthandler print where it hung), then SIGKILL to its group after
// two seconds.
struct captured {
  exit_info exit;
  bool timed_out = false;
  double seconds = 0;
  std::string out, err;
};
captured run_captured(const std::vector<std::string>& argv, double timeout_s,
                      const std::vector<std::pair<std::string, std::string>>& extra_env = {},
                      int first_signal = SIGKILL);

// PIDs of `root` and of all its descendants alive now, read from /proc/<pid>/stat (the parent pid
// only; nothing else of any process is read). Empty when root is gone.
std::vector<pid_t> process_tree(pid_t root);

}  // namespace itera::proc
