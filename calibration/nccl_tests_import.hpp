// Importer for NVIDIA nccl-tests results as users have them: the text table (stdout of all_gather_perf & co.,
// possibly wrapped in shell prompts, mpirun tags or Markdown) and the JSON file written with `-J`/output_file
// (JSON_FILE_VERSION 2, src/util.cu). Each table becomes one run; runs become collective series in a profile.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "calibration/profile.hpp"
#include "core/collectives.hpp"

namespace shardplan::calibration {

/// Command-line overrides for what a log cannot say (or says wrongly): rank count and node placement.
struct NcclTestsOverrides {
  std::optional<int> ranks;
  std::optional<int> nodes;
  std::optional<int> gpus_per_node;  ///< nodes = ranks / gpus_per_node (must divide)
};

/// One result row: S is the size column (whole buffer), times in microseconds as printed, bandwidths in GB/s.
struct NcclTestsRow {
  int line = 0;
  std::int64_t bytes = 0;
  std::string dtype;
  double oop_time_us = 0, oop_algbw_GBps = 0, oop_busbw_GBps = 0;
  std::optional<double> ip_time_us, ip_algbw_GBps,
      ip_busbw_GBps;  ///< absent when the log has no in-place result
};

/// One results table with the header information that applies to it.
struct NcclTestsRun {
  std::string file;
  int line = 0;  ///< line of the table header
  CollectiveKind kind = CollectiveKind::kAllReduce;
  int ranks = 0;
  int nodes = 0;
  std::int64_t iterations = 0;             ///< timed iterations per size (header "iters:"), 0 = unknown
  int gpus_per_thread = 1;                 ///< header "nGpus" (-g): GPUs one launching thread drives
  std::vector<std::string> gpu_names;      ///< one per rank line seen
  std::vector<std::string> hostnames;      ///< distinct, in order of appearance
  std::string nccl_version;                ///< "2.28.9" when the log says
  std::map<std::string, std::string> env;  ///< NCCL_* assignments seen in command lines / exports
  std::vector<NcclTestsRow> rows;
};

struct NcclTestsImport {
  std::vector<NcclTestsRun> runs;
  std::vector<std::string> warnings;  ///< skipped tables and assumptions, "file: line N: ..."
};

/// Parses one file (text or JSON, detected from the content). InputError names the file and line (or JSON
/// pointer) for truncated or corrupt logs, unknown collectives, and rank/node information that contradicts
/// the busbw column.
NcclTestsImport parse_nccl_tests_file(const std::string& path, const NcclTestsOverrides& overrides = {});
NcclTestsImport parse_nccl_tests_text(const std::string& text, const std::string& name,
                                      const NcclTestsOverrides& overrides = {});
NcclTestsImport parse_nccl_tests_json(const std::string& text, const std::string& name,
                                      const NcclTestsOverrides& overrides = {});

/// Adds every run (out-of-place and in-place columns as separate series, zero-byte rows skipped) to `profile`
/// and fills its hardware identity from the largest run.
void add_nccl_tests_runs(CalibrationProfile& profile, const std::vector<NcclTestsRun>& runs);

/// Whole import: parse every file, build a profile (tool = "shardplan calibrate import-nccl-tests").
CalibrationProfile import_nccl_tests(const std::vector<std::string>& paths,
                                     const NcclTestsOverrides& overrides,
                                     std::vector<std::string>* warnings = nullptr);

/// Collective from an nccl-tests program name ("all_gather_perf", "./build/alltoall_perf_mpi",
/// "reduce_scatter").
std::optional<CollectiveKind> collective_from_program(const std::string& program);
/// NCCL_VERSION_CODE to "major.minor.patch" (22809 -> "2.28.9", 2708 -> "2.7.8").
std::string nccl_version_string(long code);

}  // namespace shardplan::calibration
