// Summary of one engine run into a Result: peaks and the phase that set them, step time, compute, exposed
// communication per kind, tokens/s and MFU.
#pragma once
#include <vector>

#include "simulator/cost_model.hpp"
#include "simulator/result.hpp"
#include "simulator/units.hpp"

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

/// "forward blocks.3, micro-batch 0 (compute)" for the task that set the peak.
std::string peak_phase(const Program& prog, const Timeline& tl, const std::vector<SimUnit>& units);
/// The phase of task `task` ("backward blocks.3, micro-batch 0 (compute)"); `task` < 0: "before the step".
std::string task_phase(const Program& prog, std::int32_t task, const std::vector<SimUnit>& units);

/// Model FLOPs per token as torchtitan counts them: 6 x (parameters a token passes through, embeddings
/// excluded) + 12 x layers x attention width x sequence (attention scores and values, forward and backward).
double model_flops_per_token(const ModelGraph& model, std::int64_t seq);

}  // namespace shardplan
