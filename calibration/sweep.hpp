// The benchmark runner behind shardplan-calibrate, CPU code: a table of benchmark entries run in order, the
// profile saved (atomically, by the caller's hook) after each one, failures recorded without losing finished
// results, finished entries skipped on --resume. The NCCL sweep builds its entries over a CollectiveComm.
#pragma once
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "calibration/comm.hpp"
#include "calibration/measure.hpp"
#include "calibration/profile.hpp"

namespace shardplan::calibration {

/// A benchmark failed; `bytes` is the size being measured when it did.
struct BenchmarkFailure : std::runtime_error {
  BenchmarkFailure(const std::string& what, std::optional<std::int64_t> at_bytes)
      : std::runtime_error(what), bytes(at_bytes) {}
  std::optional<std::int64_t> bytes;
};

/// One table entry: a stable id ("nccl/all_gather/n8/bfloat16", "gemm/grid", "hbm/d2d", "adamw/bf16-mixed")
/// and the function that measures it and stores its results in the profile.
struct BenchmarkEntry {
  std::string id;
  std::function<void(CalibrationProfile&)> run;
};

struct RunnerHooks {
  std::function<void(const CalibrationProfile&)> save;  ///< called after every entry, finished or failed
  std::function<void(const std::string&)> progress;     ///< one line per event; may be empty
};

/// Runs every entry not already completed (when resume), marks it completed on success, records a failure
/// (and keeps going) when it throws. Returns the number of entries that failed.
int run_benchmarks(CalibrationProfile& profile, const std::vector<BenchmarkEntry>& entries, bool resume,
                   const RunnerHooks& hooks);

struct NcclSweepOptions {
  std::vector<CollectiveKind> kinds = {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter,
                                       CollectiveKind::kAllReduce};
  std::vector<int> group_sizes = {2, 4, 8};  ///< filtered to the GPUs available; {1} on a one-GPU machine
  std::vector<CommDType> dtypes = {CommDType::kBf16, CommDType::kFp32};
  std::int64_t min_bytes = 1024;  ///< first whole-buffer size; doubled up to max
  std::int64_t max_bytes = 0;     ///< 0: the largest that fits (CollectiveComm::max_buffer_bytes)
  MeasureOptions measure;
  double deadline_s = 120;  ///< per started op; then abort
  double poll_interval_s = 1e-3;
};

/// Group sizes to sweep on a machine with `gpus` local GPUs.
std::vector<int> nccl_group_sizes(const NcclSweepOptions& o, int gpus);

/// Entries for every (group size, kind, dtype). Communicators are created lazily per group with `factory`,
/// shared by that group's entries, and recreated after an abort. `clock` must outlive the entries.
std::vector<BenchmarkEntry> nccl_sweep_entries(const CommFactory& factory, int gpus,
                                               const NcclSweepOptions& options, SweepClock& clock);

std::string nccl_benchmark_id(CollectiveKind kind, int ranks, CommDType dtype);

}  // namespace shardplan::calibration
