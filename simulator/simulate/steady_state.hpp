// Steady-state extension of gradient accumulation: a step of m micro-batches is simulated as its first few
// micro-batches and its last, and the skipped middle ones are added as exact copies of the last simulated
// steady micro-batch, so that a simulation costs the same at any accumulation (docs/model.md "Steady state").
#pragma once
#include <array>
#include <cstdint>
#include <optional>

#include "simulator/engine/engine.hpp"
#include "simulator/lowering/lowering.hpp"
#include "simulator/result/result.hpp"
#include "simulator/simulate/summary.hpp"

namespace shardplan {

/// Micro-batches simulated before the last one when the step is extended: 0 (the first, which gathers
/// without a previous backward to overlap and creates the sharded gradients) and two steady ones (1 and 2)
/// whose comparison shows the period.
inline constexpr int kSteadyPrefix = 3;

/// How the simulated (truncated) run extends to the whole step: micro-batches kSteadyPrefix .. m-2 are
/// `copies` copies of the steady micro-batch [block_lo, block_hi), each running `period_s` later (and issued
/// `cpu_period_s` later) than the one before; the last micro-batch and the optimizer ([tail, end)) run
/// copies x period_s later (and are issued copies x cpu_period_s later) than simulated.
struct SteadyExtension {
  int copies = 0;
  std::int32_t block_prev = 0;  ///< first task of the steady micro-batch before the copied one
  std::int32_t block_lo = 0, block_hi = 0, tail = 0;
  double period_s = 0;      ///< of the GPU lanes' start and end times
  double cpu_period_s = 0;  ///< of the CPU's issue times (< period_s when the CPU runs ahead of the GPU)
};

/// Checks on the truncated run (lowered with LoweringInputs::steady_prefix = kSteadyPrefix) that the last two
/// simulated steady micro-batches are one the copy of the other, `period_s` later — same tasks, durations,
/// dependencies (reaching back at most one micro-batch), memory effects with no net change, the same timings
/// shifted by the period and the same chain of what-waited-on-what — and that the last micro-batch depends on
/// nothing older than them. The event engine is a max-plus system (every start is the maximum of an issue
/// time, the lane's previous end and dependency ends), so a micro-batch that repeats its predecessor shifted
/// by P makes every later identical micro-batch repeat it shifted by P: the extension is exact. Returns
/// nullopt when any check fails (the caller simulates every micro-batch), with the failed check in `why`.
std::optional<SteadyExtension> find_steady_state(const Program& prog, const Timeline& tl,
                                                 const MicroBatchBlocks& blocks, int micro_batches,
                                                 const char** why = nullptr);

/// Adds the skipped micro-batches to a Result summarised from the truncated run: step time (the shifted
/// tail), compute, per-kind transfer time, count, bytes and exposed time, throughput, and the peak's time
/// when the peak is in the shifted tail. Memory peaks are unchanged: each copy starts from the same
/// allocated bytes (no net change per micro-batch) and repeats the copied micro-batch's effects.
void extend_result(const SummaryInputs& in, const MicroBatchBlocks& blocks, const SteadyExtension& ext,
                   Result& r);

}  // namespace shardplan
