// Validation: predicted vs measured for real runs ("shardplan.run/1" records, or torchtitan logs).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "simulator/simulate/simulate.hpp"

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

/// One simulated record: the group its plan is compared within (source, model, cluster, GPU count) and its
/// resolved plan's knobs (value text in plan_knobs() order).
struct ValidationRecord {
  std::string id, group;
  std::vector<std::string> knobs;
  /// What the evidence of a prediction needs (planner/report/evidence.hpp): the resolved plan, the GPU, the
  /// model's structural features, the predicted memory against the device, the predicted MFU and tokens/s,
  /// and the record's scope notes.
  Plan plan;
  std::string gpu, arch;               ///< "H100 80GB HBM3", to_string(GpuArch)
  std::vector<std::string> features;   ///< model_features() of the record's model
  Bytes predicted_reserved_bytes = 0;  ///< uncapped (the demand), without the runtime overhead
  Bytes overhead_bytes = 0, capacity_bytes = 0;
  double predicted_mfu = 0, predicted_tokens_per_s = 0;
  std::string scope_time, scope_memory;  ///< out_of_scope.throughput / .memory ("" in scope)
  std::string file;                      ///< the records file it came from
};

/// Two records of one group whose resolved plans differ in exactly one knob, compared on one term both
/// measured (in scope in both): did the model predict the direction and size of the measured change?
struct KnobPair {
  std::string knob, from, to;  ///< the knob and its value in record a, in record b
  std::string id_a, id_b, term;
  double predicted_change = 0, measured_change = 0;  ///< b / a - 1
  /// The signs agree, or both changes are under kFlatChange (flat within the records' rounding).
  bool direction_right() const;
  static constexpr double kFlatChange = 0.01;
};

struct ValidationReport {
  std::vector<ValidationRow> rows;
  std::vector<ValidationSkip> skipped;
  std::vector<ValidationRecord> records;
  /// Every pair of records of one group (in file order) that differ in exactly one knob, for throughput
  /// (tokens/s per GPU, or step time where a record has no tokens/s) and each memory term both measured.
  std::vector<KnobPair> knob_pairs() const;
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

/// The prediction compared with a measured term (peak_allocated_bytes, peak_active_bytes,
/// peak_reserved_bytes, peak_device_bytes, step_s, tokens_per_s_per_gpu, mfu): reserved capped at what the
/// device has (the caching allocator frees its cache and retries before it runs out), 0 for an unknown term.
double predicted_term(const std::string& term, const Result& r);

/// Validates every record in the files (a record, a list, or {"records": [...]}); `hooks` (a calibration
/// profile's) may be null. Records the tool cannot express are listed in `skipped` with the reason.
ValidationReport validate_files(const std::vector<std::string>& files,
                                const CalibrationHooks* hooks = nullptr,
                                const std::function<ComputeConstants(GpuArch)>* constants = nullptr);

}  // namespace shardplan
