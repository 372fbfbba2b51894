// Helpers for the robustness tests: run the real `shardplan` binary (SHARDPLAN_BIN, set by CMake) in a
// scratch directory and capture its exit code, stdout and stderr; write input files; list what a run left
// behind.
#pragma once
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/common/fixture.hpp"

extern char** environ;

namespace shardplan::test {

namespace fs = std::filesystem;

using fixture::read_text;
using fixture::write_text;

/// A fresh, empty directory per call (under the system temp dir, named by pid and a counter).
inline fs::path scratch_dir() {
  static std::atomic<int> n{0};
  auto dir = fs::temp_directory_path() /
             ("shardplan-robustness-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

/// Names of the files in `dir` (not recursive), sorted.
inline std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

struct CliResult {
  int code = -1;  ///< exit status; 128 + signal when killed
  std::string out, err;
};

/// Runs `shardplan args...` with `dir` as working directory (posix_spawn; no shell, so no quoting).
inline CliResult run_cli(const std::vector<std::string>& args, const fs::path& dir) {
  const fs::path out_path = dir / ".stdout", err_path = dir / ".stderr";
  std::vector<std::string> argv_s = {SHARDPLAN_BIN};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addchdir_np(&fa, dir.c_str());
  pid_t pid = 0;
  CliResult r;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  REQUIRE(rc == 0);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_text(out_path);
  r.err = read_text(err_path);
  fs::remove(out_path);
  fs::remove(err_path);
  return r;
}

/// The bad-input contract (DESIGN.md): exit 2, exactly one line on stderr, naming what went wrong.
inline void expect_bad_input(const CliResult& r, const std::vector<std::string>& mentions) {
  INFO("stderr: " << r.err);
  CHECK(r.code == 2);
  CHECK(!r.err.empty());
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(r.err.back() == '\n');
  for (const auto& m : mentions) CHECK(r.err.find(m) != std::string::npos);
}

}  // namespace shardplan::test
