// The measured evidence behind a prediction, and where a prediction leaves it. The evidence is what
// `shardplan validate` found on the committed records (tests/data/runs/published_dev.json and the reference
// lane, tools/reference/data/records.json), written by tools/accuracy.sh to planner/evidence.json and
// embedded in the binary: the reserved-memory error of every in-scope run (the OOM probability's
// distribution), which GPU architecture x plan feature has measured rows (coverage), the best measured MFU
// per architecture, and the model features the reference lane has checked. docs/model.md "Out-of-memory
// probability" and "Warnings".
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/json_reader.hpp"
#include "simulator/simulate/simulate.hpp"

namespace shardplan {

struct ValidationReport;

/// Structural features of a model that select paths of the memory and time model (what the reference lane
/// must have run to check them): mlp, norm and position kinds, "gqa", "moe", "mla", "qk-norm",
/// "local-attention", "softcap", "qkv-bias", "attn-bias", "mlp-bias", "tied-embeddings", "embedding-norm",
/// "norm-<placement>" (other than pre).
std::vector<std::string> model_features(const ModelSpec& s);
/// Plan features the coverage table counts: "runtime=R", "precision=P", "ac=A", "zero=Z", "compile",
/// "fp8=F", "fp8-all-gather", "tp", "pp", "cp", "ep", "hsdp", "offload=O", "async-tp".
std::vector<std::string> plan_features(const Plan& p);

/// One in-scope measured peak reserved memory: the prediction's relative error, (predicted - measured) /
/// measured, and the regime it was measured in.
struct ReservedErrorRow {
  std::string id;
  double error = 0;
  std::string runtime;          ///< fsdp2, fsdp1, deepspeed, megatron
  bool model_parallel = false;  ///< tp > 1 or pp > 1
  bool compile = false;
  std::string allocator;  ///< default, expandable
};

struct Evidence {
  std::vector<ReservedErrorRow> reserved;
  /// Measured rows per (GPU architecture, plan feature): `time` counts in-scope tokens/s or step-time records
  /// of that architecture, `memory` in-scope memory records of any architecture (arch "any": allocations do
  /// not depend on the GPU) plus the reference lane's.
  struct Cell {
    std::string arch, feature;
    int time = 0, memory = 0;
  };
  std::vector<Cell> coverage;
  /// Per architecture: in-scope throughput records, the best measured MFU among them (in the simulator's
  /// FLOP count: predicted MFU x measured / predicted tokens/s), and, when there is no in-scope record, why
  /// the architecture's records are out of scope.
  struct Arch {
    std::string arch;
    int time_records = 0, out_of_scope_records = 0;
    double best_mfu = 0;
    std::string best_mfu_id, gpu;
    std::string out_of_scope_reason;
  };
  std::vector<Arch> archs;
  /// Reference-lane records per model feature.
  std::map<std::string, int> reference_features;
  int reference_records = 0;

  const Cell* cell(const std::string& arch, const std::string& feature) const;
  const Arch* arch(const std::string& name) const;
};

/// The evidence of a validation of the development records and, optionally, of the reference lane.
Evidence evidence_from(const ValidationReport& dev, const ValidationReport* lane);
Json evidence_to_json(const Evidence& e);
/// Reads a "shardplan.evidence/1" document; InputError naming the file and field.
Evidence evidence_from_json(const Json& j, const std::string& file);
/// planner/evidence.json as embedded at build time.
const Evidence& builtin_evidence();

/// The distribution of the reserved-memory error a plan's OOM probability uses: a Gaussian kernel over the
/// measured errors, each weighted by partial pooling: the runs of the plan's regime (same runtime, model
/// parallelism, compile and allocator mode) count as their own distribution with weight k / (k + m), the
/// pooled runs with m / (k + m), m = kRegimePoolingRuns.
struct OomModel {
  std::vector<double> errors, weights;
  double bandwidth = 0;
  int runs = 0;         ///< runs in the pooled distribution
  int regime_runs = 0;  ///< of them, in the plan's regime
  std::string regime;   ///< "fsdp2, no TP/PP, compile, expandable segments"
};
/// The pooled runs' weight against the regime's own: a regime of m runs counts as much as all others.
inline constexpr double kRegimePoolingRuns = 5;
/// The model for a plan's regime; `exclude_id` leaves one run out (the calibration's leave-one-out).
OomModel oom_model(const Evidence& e, const Plan& p, const std::string& exclude_id = "");
/// P(measured reserved > room) for a plan predicted at `predicted_reserved` bytes with `room` = capacity -
/// runtime overhead: the error's CDF at predicted / room - 1 (an error below that means the run needed more
/// than the room).
double oom_probability(const OomModel& m, double predicted_reserved, double room);
/// The error e with CDF(e) = p.
double oom_error_quantile(const OomModel& m, double p);
/// A result's OOM probability under the built-in evidence.
double oom_probability(const Result& r, const Evidence& e = builtin_evidence());
/// The headroom (fraction of GPU memory) at which every plan the planner accepts has an OOM probability of at
/// most `p`, over every regime: max over regimes of -quantile(p), at least 0 (docs/model.md).
double risk_headroom(double p, const Evidence& e = builtin_evidence());

/// How well the OOM probability is calibrated on the development records (docs/accuracy.md).
struct OomCalibration {
  struct Bin {
    double lo = 0, hi = 0;  ///< predicted probability in [lo, hi)
    int cases = 0, oom = 0;
    double mean_p = 0;
  };
  /// Leave-one-out, per measured reserved-memory run and probability level p (0.025, 0.075, ..., 0.975): the
  /// device memory at which the distribution without the run gives it probability p, and whether its measured
  /// reserved memory exceeded that memory (it would have run out).
  std::vector<Bin> levels;
  /// Every simulated development record on its own GPU: its probability (leave-one-out for the measured
  /// reserved-memory runs) and its outcome (every development run ran; none reports running out of memory).
  struct Run {
    std::string id;
    double p = 0, used_fraction = 0;  ///< predicted (reserved + overhead) / capacity
    bool measured_reserved = false, memory_in_scope = true, oom = false;
  };
  std::vector<Run> runs;
  std::vector<Bin> actual;
};
OomCalibration oom_calibration(const ValidationReport& dev, const Evidence& e);

/// Sentences saying where a prediction leaves the measured evidence (empty where the evidence is there): an
/// architecture without in-scope throughput records, a plan feature without measured rows on the
/// architecture (time) or anywhere (memory), an MFU above the best measured on the architecture, a model
/// feature the reference lane never ran, a regime without measured reserved memory.
std::vector<std::string> evidence_warnings(const Result& r, const ModelSpec& model,
                                           const ClusterSpec& cluster,
                                           const Evidence& e = builtin_evidence());

}  // namespace shardplan
