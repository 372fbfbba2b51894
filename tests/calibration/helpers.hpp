// Shared helpers for the calibration tests: data paths and temporary files.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace shardplan::test {

inline std::string nccl_log(const std::string& name) {
  return std::string(SHARDPLAN_TEST_DATA) + "/nccl-tests/" + name;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// A path in a per-process temporary directory, removed by the OS eventually; unique per name.
inline std::string temp_path(const std::string& name) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("shardplan-calib-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

}  // namespace shardplan::test
