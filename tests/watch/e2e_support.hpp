#pragma once
// Running the itera binary from the e2e tests of watch and doctor, in a scratch folder.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "itera/watch/process.hpp"

namespace itera::test {

using env_list = std::vector<std::pair<std::string, std::string>>;

struct itera_run {
  int code = -1;
  std::string out, err;
};

inline itera_run run_itera(const std::vector<std::string>& args, const env_list& env = {}, double timeout_s = 240) {
  std::vector<std::string> argv = {ITERA_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  const proc::captured c = proc::run_captured(argv, timeout_s, env);
  EXPECT_FALSE(c.timed_out) << "itera timed out: " << c.err;
  return {c.exit.code, c.out, c.err};
}

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// A fresh folder under the temporary directory, removed afterwards.
class scratch {
 public:
  scratch() {
    std::string pattern = (std::filesystem::temp_directory_path() / "itera-watch-e2e-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    m_dir = pattern;
  }
  ~scratch() {
    std::error_code ec;
    std::filesystem::remove_all(m_dir, ec);
  }
  std::string operator/(const std::string& name) const { return (m_dir / name).string(); }
  const std::filesystem::path& dir() const { return m_dir; }

 private:
  std::filesystem::path m_dir;
};

}  // namespace itera::test
