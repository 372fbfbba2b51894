// Summary of one engine run into a Result: peaks and the phase that set them, step time, compute, exposed
// communication per kind, tokens/s and MFU.
#pragma once
#include <limits>
#include <utility>
#include <vector>

#include "simulator/cost/cost.hpp"
#include "simulator/lowering/lowering.hpp"
#include "simulator/result/result.hpp"

namespace shardplan {

struct SummaryInputs {
  const ModelGraph& model;
  const Cluster& cluster;
  const CostModel& costs;
  const Plan& plan;
  const std::vector<SimUnit>& units;
  const Program& program;
  const Timeline& timeline;
};

/// Fills the time, communication and peak-phase fields of `r` (memory totals are set by the caller).
void summarise_time(const SummaryInputs& in, Result& r);

/// Recomputes tokens/s per GPU and MFU from `r.step_s`.
void set_throughput(const SummaryInputs& in, Result& r);

/// Exposed communication charged to the idle gaps before the compute-stream tasks with index in [lo, hi) (and
/// to the step's tail after the last compute task when `hi` is the program's end), per kind; `earliest_task`
/// is the lowest task index the walks visited (steady_state.hpp checks they stay within one micro-batch).
struct ExposedComm {
  std::array<double, kCommKinds> by_kind{};
  double total_s = 0;
  std::int32_t earliest_task = std::numeric_limits<std::int32_t>::max();
};
ExposedComm exposed_comm(const Program& prog, const Timeline& tl, std::int32_t lo, std::int32_t hi,
                         std::vector<std::pair<double, double>>* intervals = nullptr);

/// "forward blocks.3, micro-batch 0 (compute)" for the task that set the peak.
std::string peak_phase(const Program& prog, const Timeline& tl, const std::vector<SimUnit>& units);
/// The phase of task `task` ("backward blocks.3, micro-batch 0 (compute)"); `task` < 0: "before the step".
std::string task_phase(const Program& prog, std::int32_t task, const std::vector<SimUnit>& units,
                       int micro_batch_shift = 0);

/// Model FLOPs per token as torchtitan counts them: 6 x (parameters a token passes through, embeddings
/// excluded) + 12 x layers x attention width x sequence (attention scores and values, forward and backward).
double model_flops_per_token(const ModelGraph& model, std::int64_t seq);

}  // namespace shardplan
