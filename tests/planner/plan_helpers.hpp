// Shared fixtures for the planner tests: a model + cluster + cost model bundle, temporary directories,
// running the CLI, and small file helpers.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "simulator/cost/cost_model.hpp"
#include "simulator/model/model_graph.hpp"
#include "simulator/model/presets.hpp"
#include "simulator/plan/plan_types.hpp"
#include "simulator/simulate/simulate.hpp"
#include "tests/common/fixture.hpp"
#include "topologies/cluster.hpp"

namespace shardplan::ptest {

using fixture::read_text;
using fixture::Setup;
using fixture::write_text;

/// A fresh per-process, per-call temporary directory.
inline std::filesystem::path temp_dir(const std::string& name) {
  static std::atomic<int> counter{0};
  auto dir =
      std::filesystem::temp_directory_path() /
      ("shardplan-planner-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

/// Runs a shell command; returns its exit status (or -1 when it did not exit normally).
inline int run_shell(const std::string& cmd) {
  int st = std::system(cmd.c_str());
  if (st == -1 || !WIFEXITED(st)) return -1;
  return WEXITSTATUS(st);
}

/// Runs the shardplan CLI with `args` (already quoted where needed); stdout to `out`, stderr to `err` if
/// given.
inline int run_cli(const std::string& args, const std::filesystem::path& out = "/dev/null",
                   const std::filesystem::path& err = "/dev/null") {
  return run_shell(quote(SHARDPLAN_BIN) + " " + args + " >" + quote(out.string()) + " 2>" +
                   quote(err.string()));
}

inline bool have_python3() {
  return run_shell("python3 -c 'pass' >/dev/null 2>&1") == 0;
}
inline bool have_tomllib() {
  return run_shell("python3 -c 'import tomllib' >/dev/null 2>&1") == 0;
}

}  // namespace shardplan::ptest
