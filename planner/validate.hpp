// Validation: predicted vs measured for real runs ("shardplan.run/1" records, or torchtitan logs).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "simulator/simulate.hpp"

namespace shardplan {

/// One compared term of one record.
struct ValidationRow {
  std::string id, source, term;  ///< term: peak_allocated_bytes, peak_reserved_bytes, peak_active_bytes,
                                 ///< peak_device_bytes, step_s, tokens_per_s_per_gpu, mfu
  double predicted = 0, measured = 0;
  /// Empty when the record is inside what the tool models for this term; otherwise why it is not (the
  /// record's `out_of_scope.throughput` / `out_of_scope.memory`). Out-of-scope rows are predicted and listed,
  /// and counted only in the all-records summary.
  std::string out_of_scope;
  double rel_error() const { return measured != 0 ? (predicted - measured) / measured : 0; }
};

struct ValidationSkip {
  std::string id, reason;
};

struct ValidationReport {
  std::vector<ValidationRow> rows;
  std::vector<ValidationSkip> skipped;
  /// Per term: median |error|, mean |error| (MAPE), worst |error| and count.
  struct Summary {
    std::string term;
    double median_abs = 0, mape = 0, worst_abs = 0;
    int n = 0;
  };
  /// Over the rows in scope (the headline numbers).
  std::vector<Summary> summary() const;
  /// Over every row, in scope or not.
  std::vector<Summary> summary_all() const;
  /// In-scope rows of one term, per source.
  std::vector<Summary> summary_by_source(const std::string& term) const;
};

/// Validates every record in the files (a record, a list, or {"records": [...]}); `hooks` (a calibration
/// profile's) may be null. Records the tool cannot express are listed in `skipped` with the reason.
ValidationReport validate_files(const std::vector<std::string>& files,
                                const CalibrationHooks* hooks = nullptr,
                                const std::function<ComputeConstants(GpuArch)>* constants = nullptr);

}  // namespace shardplan
