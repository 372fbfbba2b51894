// The OOM-risk margin of a plan: its memory headroom set against how wrong the memory prediction has been on
// measured runs. The statistics are those of docs/accuracy.md (`shardplan validate` on the committed
// records); a test recomputes them so they cannot drift from the data.
#pragma once
#include <string>

#include "core/json_reader.hpp"
#include "simulator/simulate/simulate.hpp"

namespace shardplan {

struct ValidationReport;

struct MemoryErrorStats {
  const char* term;
  int runs;
  double median_abs;  ///< median |relative error|
  double worst_abs;   ///< largest |relative error|
};

/// Reserved-memory prediction error on the development set (tests/data/runs/published_dev.json).
/// Recomputed by "the OOM-risk margin's error statistics match validate on the committed records" after the
/// caching-allocator replay replaced the fitted fragmentation factor, with the reference lane's memory fixes
/// (FSDP2 per-tensor shards, AdamW step tensors, the re-gathered head group), and the pytorch/ao e2e rows on
/// CUDA run with expandable segments as torchtitan's run_train.sh sets them, and torchtitan's compiled loss
/// (loss_impl; the MI300X and B200 rows of torchtitan 2c8b594 / 6fc499f), the B200 rows' cuDNN attention
/// recomputed by the SAC save list of torchtitan 6fc499f (sdpa_backend cudnn, sac_sdpa_ops flash-efficient),
/// and torch.compile's saved set with torchtitan's Python fp32 RMSNorm (fp32_norm; docs/model.md "Compiled
/// saved tensors"): median 1.20 %, worst 8.38 % (19 runs). With the 13 in-scope reserved rows of
/// published_runs_dev2.json (torchtitan PRs 355-1881, knobs from each PR's commit and date, tools/
/// convert_published.py; recomputed by that test): median 4.05 %, worst 13.72 % (32 runs; the worst is PR
/// 382's bs 2 SAC baseline of 2024-07, over-predicted). With FSDP2's root unit of torchtitan before
/// 2025-07-28 (root_params embedding-head, keep_last_block; docs/model.md "FSDP2's root unit"), FSDP2's
/// reduce-scatter input on the reduce-scatter stream before pytorch PR 129721 (rs_input_rs_stream: PR 165, PR
/// 355) and selective AC under TP (PR 1881's FSDP 4 x TP 2 row), and PR 382's embedding-wrap variant in scope
/// (torchtitan 0.3.0's wrapping): median 1.20 %, worst 15.67 % (33 runs; the worst are PR 382's two bs 2 SAC
/// rows of 2024-07, over-predicted: their allocated peak alone is at the measured reserved memory). With
/// those two rows run as PR 382's final description states them (torch.compile per block, fused AdamW,
/// compiled RMSNorm; the converter had taken the setup from an earlier revision that did not name it):
/// median 1.20 %, worst 9.51 % (33 runs; the worst is still PR 382's bs 2 SAC pair, over-predicted). With
/// the eager forward's transients lowered as tensors (docs/model.md "Eager forward transients": the complex
/// rotary's fp32 copies and products, the output projections' outputs before the residual add, and under
/// selective AC what the policy drops of the no-AC saved set, under full AC every layer's no-AC set while it
/// runs): median 1.20 %, worst 9.51 % (33 runs; the worst is still PR 382's bs 2 SAC pair, over-predicted).
/// With the activations replayed as the layers' tensor lists give them (real sizes in forward order, each
/// dropped tensor freed when Python drops it; docs/model.md "Activations: one list of tensors per layer"):
/// median 0.73 %, worst 9.50 % (33 runs).
inline constexpr MemoryErrorStats kReservedMemoryError{"peak_reserved_bytes", 33, 0.0091, 0.0950};

/// Default planner headroom (fraction of GPU memory `plan` keeps free). Rule: the largest under-prediction of
/// peak reserved memory over the in-scope records of tests/data/runs/published_dev.json, (measured -
/// predicted) / measured, rounded up to the next whole percent; a plan the planner accepts then stays under
/// the device's memory for every measured run the prediction has missed. default_headroom() computes the
/// rule; a test recomputes it with the real simulator and fails when this constant is stale.
/// Today: largest under-prediction 4.57 % (PR 1881's FSDP 8 eager row) -> 5 %. 6 % (5.60 %, the PR 165 FSDP1
/// SAC eager row) before the activations were replayed tensor by tensor from the layers' lists; 9 % (8.38 %,
/// the same row) before the eager forward transients (docs/model.md "Eager forward transients"); 11 % (10.94
/// %, PR 355's A100 rows) before FSDP2's root unit of torchtitan before 2025-07-28 (root_params,
/// keep_last_block) and FSDP2's reduce-scatter input on its stream before pytorch PR 129721
/// (rs_input_rs_stream) moved those rows to -2.4 %.
inline constexpr double kDefaultHeadroom = 0.05;
inline constexpr const char* kDefaultHeadroomRule =
    "the largest under-prediction of reserved memory on the committed runs, rounded up to a whole percent";
/// The rule above applied to a validation report's peak_reserved_bytes rows (in scope only).
double default_headroom(const ValidationReport& v);

/// Throughput prediction error on the development set: median and mean |relative error| of tokens/s per GPU
/// over the in-scope records of tests/data/runs/published_dev.json (docs/accuracy.md, `bash
/// tools/accuracy.sh`).
struct ThroughputErrorStats {
  const char* term;
  int runs;
  double median_abs;  ///< median |relative error|
  double mape;        ///< mean |relative error|
};
/// Recomputed by "the throughput tie tolerance is the median tokens/s error on the committed records" with
/// the 15 in-scope tokens/s rows of published_runs_dev2.json and the PR 165 rows' foreach AdamW
/// (fused_optimizer false, torchtitan before 6e4988550): 147 runs, median 7.11 %, MAPE 7.85 % (132 runs, 6.0
/// %, 7.3 % before). With PR 382's two rows compiled with fused AdamW as its final description states (-17.4
/// / -17.5 % -> +0.2 / 0.0 %): median 6.81 %, MAPE 7.61 %.
inline constexpr ThroughputErrorStats kThroughputError{"tokens_per_s_per_gpu", 147, 0.068, 0.0761};
/// The planner's tie tolerance. Rule: two plans whose predicted tokens/s per GPU differ by less than the
/// median |error| of the tokens/s prediction over the in-scope validation records, |a - b| / max(a, b) <
/// this, are a tie (the model cannot tell them apart). A test recomputes it with the real simulator and fails
/// when stale.
inline constexpr double kThroughputTieTolerance = kThroughputError.median_abs;
inline constexpr const char* kThroughputTieRule =
    "predicted tokens/s within the median |error| of the tokens/s prediction on the committed runs";

/// How the plan's headroom compares with the measured reserved-memory error: 0 low (survives the worst
/// error), 1 moderate (survives the median error), 2 high.
int memory_risk_level(const Result& r);

/// "fits with 12.4 % headroom (9.80 GiB); reserved-memory error has been <= 31.5 % (median 16.4 %) in 12
/// runs: low risk"
std::string margin_statement(const Result& r);
/// {headroom_fraction, headroom_bytes, error: {term, runs, median_abs, worst_abs}, risk: low|moderate|high,
/// oom_probability, oom_model: {runs, regime, regime_runs, regime_weight, bandwidth, method}, statement}
Json margin_json(const Result& r);
/// The regime and distribution behind a result's OOM probability (planner/report/evidence.hpp).
Json oom_model_json(const Result& r);
/// "0.35 %", "< 0.01 %", "12.0 %"
std::string format_probability(double p);

}  // namespace shardplan
