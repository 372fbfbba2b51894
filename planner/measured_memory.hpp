// A measured memory state (a PyTorch OOM message or memory snapshot) against the prediction for the plan the
// run used: the measured figures in shardplan's categories, the error per term, and, when the run ran out of
// memory or the prediction does not fit, the plan changes that would fit.
#pragma once
#include <string>
#include <vector>

#include "core/json_reader.hpp"
#include "planner/memory_snapshot.hpp"
#include "planner/oom_message.hpp"
#include "simulator/simulate/simulate.hpp"

namespace shardplan {

struct MemoryTerm {
  std::string term;         ///< reserved_bytes, allocated_bytes, runtime_overhead_bytes, device_bytes, peak_*
  std::string measured_as;  ///< what the measured figure is
  double predicted = 0, measured = 0;
  double rel_error() const { return measured != 0 ? (predicted - measured) / measured : 0; }
};

struct MemoryComparison {
  std::string source;  ///< "oom-message" or "memory-snapshot"
  Json measured;       ///< the measured figures (bytes), by shardplan category
  std::vector<MemoryTerm> terms;
  bool measured_oom = false;   ///< the run ran out of memory (an OOM message; an oom entry in a trace)
  bool predicted_fits = true;  ///< the prediction's reserved + runtime overhead within the GPU
  Bytes capacity_bytes =
      0;                  ///< the GPU's memory: the message's total capacity (or allowed), else the cluster's
  Bytes limit_bytes = 0;  ///< capacity x (1 - headroom), what the advice's plans must stay under
  /// Measured demand / predicted demand when the model predicted less than the run needed (>= 1): the advice
  /// judges each change's predicted memory scaled by it.
  double correction = 1;
  Bytes measured_demand = 0, predicted_demand = 0;  ///< reserved + runtime overhead (+ the failed request)
  std::string advice;                               ///< empty when the run fit and the prediction fits
};

/// The OOM message against `r` (the stated plan simulated); `headroom` as `plan`'s.
MemoryComparison compare_oom_message(const OomMessage& m, const Result& r, double headroom);
/// The snapshot's device `d` against `r`.
MemoryComparison compare_snapshot(const SnapshotDevice& d, const Result& r, double headroom);
/// Fills `c.advice` (planner/search.hpp fit_advice on `r`, the limit divided by the correction) when the run
/// ran out of memory or the prediction does not fit.
void add_fit_advice(MemoryComparison& c, const ModelGraph& model, const Cluster& cluster,
                    const CostModel& costs, const Result& r);
Json memory_comparison_json(const MemoryComparison& c);
std::string memory_comparison_text(const MemoryComparison& c);

}  // namespace shardplan
