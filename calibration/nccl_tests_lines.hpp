// Internal to calibration/nccl_tests_*.cpp: reading one line of an nccl-tests log (tokens, numbers, the table
// header's columns, bounded regex search, cleaning), the NCCL_* variables a line sets, and a run's checks
// once its table is complete (nccl_tests_lines.cpp).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "calibration/nccl_tests_import.hpp"

namespace shardplan::calibration::nccl_tests_detail {

/// Largest time (us) or bandwidth (GB/s) a log may carry: 1e15 us = 1e9 s, the calibration profile's bound.
constexpr double kMaxColumnValue = 1e15;
// libstdc++'s std::regex matches recursively, one stack frame per character a repetition consumes, so a line
// of a few hundred kilobytes overflows the stack. nccl-tests header lines are under 300 characters: longer
// lines are never given to a regex (they can still be result rows, which are split on blanks).
constexpr std::size_t kMaxRegexLine = 4096;

/// Column positions of one results table, from its header line.
struct Columns {
  std::size_t count = 0;  ///< tokens a row must have
  std::size_t size = 0, type = 0;
  std::size_t oop_time = 0, oop_algbw = 0, oop_busbw = 0;
  std::optional<std::size_t> ip_time, ip_algbw, ip_busbw;
};

/// "line N", the where of an InputError.
std::string at_line(int line);
std::vector<std::string> split_ws(const std::string& s);
bool all_digits(const std::string& s);
std::optional<double> to_double(const std::string& s);
std::optional<std::int64_t> to_int(const std::string& s);
/// A header's integer in [0, hi], else an InputError naming `what`.
std::int64_t header_int(const std::string& digits, const std::string& file, int line, const char* what,
                        std::int64_t hi);
/// The columns of a "size count type ..." header's tokens, or nullopt.
std::optional<Columns> parse_header(const std::vector<std::string>& tok);
/// std::regex_search on lines of at most kMaxRegexLine holding `needle`.
bool search_line(const std::string& line, std::smatch& m, const std::regex& re, const char* needle);
std::string valid_utf8(std::string s);
std::string clean_line(std::string s);
/// The NCCL_* assignments of a line, into `env`.
void collect_env(const std::string& line, std::map<std::string, std::string>& env);
/// A run's ranks and nodes (from its header, its rank lines or the overrides) and its busbw check.
void finish_run(NcclTestsRun& run, const NcclTestsOverrides& ov, std::vector<std::string>& warnings,
                int rank_lines, int max_rank, int threads_x_gpus);

}  // namespace shardplan::calibration::nccl_tests_detail
