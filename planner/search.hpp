// The plan search (timeloop-style, staged by cost): enumerate the candidates a SearchSpace allows (only the
// knobs and combinations each runtime's capability table has), check each structurally (capability table,
// batch arithmetic, resolve_plan), prune by the memory lower bound (memory_lower_bound), simulate the
// survivors on several threads, refine the fastest plans of each family with compile / async TP / float8, try
// every pipeline schedule x virtual stages on the fastest pipelined layouts, replay the plans the output can
// name through the caching allocator, rank (the tie rule) and explain. Every
// rejection is counted by a typed reason with one example kept. The outcome does not depend on the thread
// count.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "planner/report/margin.hpp"
#include "simulator/simulate/simulate.hpp"

namespace shardplan {

/// Which knobs are searched, and which are pinned by --fix KEY=VALUE. The searched knobs have a list of
/// values here; every other knob of the knob table (simulator/plan/knobs.hpp) is pinned to its value in
/// `base`, applied to every candidate. Values a runtime does not have (simulator/plan/capabilities.hpp) are
/// not enumerated for it.
struct SearchSpace {
  std::vector<Runtime> runtimes = {Runtime::kFsdp2};
  std::vector<int> zero = {0, 1, 2, 3};
  std::vector<int> tp = {1, 2, 4, 8};
  std::vector<int> mbs = {1, 2, 4, 8};
  std::vector<AcMode> ac = {AcMode::kNone, AcMode::kSelective, AcMode::kFull};
  std::vector<int> wrap = {1, 2};
  std::vector<int> prefetch = {1, 2};
  std::vector<Dtype> reduce = {Dtype::kFp32, Dtype::kBf16};
  std::vector<Offload> offload = {Offload::kNone};
  std::vector<int> shard_groups;  ///< empty: all node-aligned divisors of dp
  std::vector<bool> reshard_after_forward = {true, false};
  /// torch.compile and async TP (the latter only for tp > 1 and, where the runtime's async TP is an inductor
  /// pass, only compiled); `plan` searches both, a bare SearchSpace neither.
  std::vector<bool> compile = {false};
  std::vector<bool> async_tp = {false};
  /// Float8 linears: searched only when --fix fp8=V1,V2 lists values (--fix fp8_all_gather=true alone means
  /// tensorwise).
  std::vector<Fp8> fp8 = {Fp8::kNone};
  /// Pipeline-parallel degrees (--fix pp=1,4,16). Empty: PP plans are searched on large clusters, when no
  /// plan fits without PP, or when a pipeline knob is pinned (pp_schedule, virtual_stages, pp_layers).
  std::vector<int> pp;
  /// Pipeline schedules (--fix pp_schedule=S1,S2); empty: every schedule the runtime has.
  std::vector<PpSchedule> pp_schedules;
  /// Stages per pipeline rank (--fix virtual_stages=V1,V2); empty: 1 for gpipe and 1f1b, 2 for zbv and
  /// dualpipev, and for interleaved-1f1b 2, 4, 8, ... up to (blocks + 2) / pp (one block per stage).
  std::vector<int> virtual_stages;
  /// Context parallelism; empty: {1}, plus 2, 4, 8, 16 (while tp x cp fits the GPUs) when the sequence is
  /// 16k tokens or longer or one sequence's activations (full AC) do not fit one GPU; and, when no TP degree
  /// gives a data-parallel degree dividing the global batch (with at least pp micro-batches under PP), the
  /// smallest CP degree that does.
  std::vector<int> cp;
  /// Expert parallelism; empty: {1} for dense models; for MoE models the powers of two dividing the expert
  /// count and dp_shard x cp, searched on the fastest plans of each EP-1 family (search.cpp stage 3a); a list
  /// (--fix ep=...) is searched on every layout.
  std::vector<int> ep;
  /// Token dispatch backends of the EP > 1 candidates (--fix ep_backend=alltoall,deepep; docs/model.md
  /// "Token dispatch backends"); empty: each runtime's default only (not searched unless asked: DeepEP is a
  /// separate GPU-only install and its bandwidth share is not checked against a run here).
  std::vector<EpBackend> ep_backends;
  /// Optimizers: searched only when --fix optimizer=V1,V2 lists values (every layout is then tried with each;
  /// empty: base.optimizer only).
  std::vector<Optimizer> optimizers;
  /// The non-searched knobs of every candidate (precision, seq, loss_dtype, ...).
  Plan base;
  /// Set by --fix grad_accum=N: candidates whose global batch needs another accumulation are rejected.
  std::optional<int> grad_accum;
  std::int64_t seq = 0;           ///< 0: base.seq (itself 0 = the model's default)
  std::int64_t global_batch = 0;  ///< sequences per step; required
  /// The run-record keys given to fix(), in order (the no-plan message mentions --fix only when one was).
  std::vector<std::string> fixed_keys;
  /// Applies one --fix KEY=VALUE (KEY=V1,V2 for searched knobs); InputError for unknown keys or values.
  void fix(const std::string& key_value);
  /// The run-record keys of the searched knobs (the others take one value).
  static const std::vector<std::string>& searched_keys();
};

/// The outcome of evaluating one candidate (real simulator, or a fake one in tests).
struct Evaluation {
  bool fits = false;
  double tokens_per_s_per_gpu = 0;
  Bytes peak_reserved_bytes = 0;  ///< with the runtime overhead added
  Bytes capacity_bytes = 0;
};

/// Why a candidate was not recommended, in the order of the search's stages.
enum class Rejection : std::uint8_t {
  kCapability,            ///< the runtime lacks a knob or combination (simulator/plan/capabilities.hpp)
  kFp32Reduce,            ///< fp32 precision with a bf16 gradient reduction
  kBatchArithmetic,       ///< the global batch is not a multiple of dp x mbs
  kGradAccumPinned,       ///< --fix grad_accum differs from what the global batch needs
  kPipelineMicroBatches,  ///< fewer micro-batches than pipeline ranks
  kPipelineStages,        ///< pp x virtual stages exceed the model's blocks + 2
  kInvalidPlan,           ///< any other refusal of resolve_plan (its flag and sentence in the example)
  kMemoryBound,           ///< memory_lower_bound over the limit
  kSimulatedPeak,         ///< simulated peak reserved + overhead over the limit
};
inline constexpr int kRejections = static_cast<int>(Rejection::kSimulatedPeak) + 1;
/// "global batch not a multiple of dp x mbs", ... (the text reports and JSON key the counts by).
const char* to_string(Rejection r);

struct Rejections {
  std::map<Rejection, std::int64_t> count;   ///< reason -> how many
  std::map<Rejection, std::string> example;  ///< reason -> one example (plan flags and detail)
  /// kCapability by the feature the runtime lacks.
  std::map<Feature, std::int64_t> capability;
  void add(Rejection r, const std::string& example);
  /// add() with the example built only for the first of its reason.
  template <class F>
  void add_lazy(Rejection r, F example) {
    if (count[r]++ == 0) this->example[r] = example();
  }
};

struct SearchStats {
  std::int64_t considered = 0;  ///< candidates generated
  std::int64_t evaluated = 0;   ///< fully simulated
  std::int64_t fitting = 0;     ///< simulated and under the memory limit
  /// Plans replayed through the caching allocator (the ones the recommendation and the listed plans can come
  /// from; the rest keep the per-stream lower bound of reserved memory).
  std::int64_t replayed = 0;
  double seconds = 0;
  Rejections rejections;
};

struct SearchOptions {
  int threads = 0;  ///< 0: hardware concurrency
  int top = 10;
  /// Fraction of GPU memory kept free: docs/model.md "Default planner headroom" (planner/report/margin.hpp).
  double headroom = kDefaultHeadroom;
  double tie_tolerance = kThroughputTieTolerance;  ///< relative tokens/s difference below which plans tie
  std::function<void(double fraction)> progress;   ///< called from one thread, may be empty
  SimulatorOptions simulator;  ///< how each plan is simulated (steady-state extension on by default)
};

/// One listed plan: the recommendation, the fastest plan (when it is not the recommendation), or the fastest
/// plan of another family (runtime x TP x PP x CP x EP x AC x HSDP or not).
struct Alternative {
  std::string family;    ///< "fsdp1 tp1 ac=selective fsdp"
  double delta_rel = 0;  ///< tokens/s relative to the recommendation (-0.03 = 3 % slower)
  /// Within the throughput tie tolerance of the fastest plan, exactly as choose_plan counts a tie:
  /// (fastest - this) < tolerance x fastest, i.e. |delta_fastest| < tolerance.
  bool within_error = false;
  double delta_fastest = 0;  ///< tokens/s relative to the fastest fitting plan (<= 0)
  std::string role;          ///< "recommended", "recommended, fastest", "fastest", "best of its family"
};

struct SearchOutcome {
  /// plans[0] is the recommendation (the tie rule below); then the fastest plan when it is another one; then
  /// the fastest plan of every other family, faster first; at most `top`.
  std::vector<Result> plans;
  std::vector<Alternative> alternatives;  ///< parallel to plans (plans[0]: its own family, delta 0)
  /// The rule that chose the recommendation over the fastest plan ("" when the fastest is recommended).
  std::string tie_rule;
  std::optional<Result> fastest;  ///< the fastest fitting plan when it is not the recommendation
  int tied = 0;                   ///< fitting plans within the tie tolerance of the fastest
  double tie_tolerance = 0;
  /// Fitting plans no other fitting plan beats on all of tokens/s, memory headroom and network bytes per GPU.
  std::vector<Result> pareto;
  SearchStats stats;
  std::string explanation;  ///< why plans[0] beats plans[1] (or why nothing fits)
  /// When nothing fits: the candidate closest to fitting and by how many bytes it is over.
  std::optional<Result> closest;
  Bytes closest_over_bytes = 0;
  std::string binding_hint;  ///< the knob that would help most when nothing fits
  /// When no candidate passed the structural checks: what would give one (other GPU counts, PP x CP, another
  /// batch), or the pinned knobs' refusal; "" otherwise.
  std::string no_candidate;
  double headroom = 0;
};

/// What would make a plan that does not fit under `limit` (peak reserved + runtime overhead) fit: the advice
/// `plan` gives for the closest plan when nothing fits (each single change simulated on `r`, named with what
/// it does). `validate --oom-message / --memory-snapshot` gives it for the stated plan of a run that ran out.
std::string fit_advice(const ModelGraph& model, const Cluster& cluster, const CostModel& costs,
                       const Result& r, Bytes limit);
/// Which constraint binds a plan: "memory" (headroom < 10 %), "exposed comm", "compute" ...
std::string binding_constraint(const Result& r);

/// Runs the search with the real simulator.
SearchOutcome search_plans(const ModelGraph& model, const Cluster& cluster, const CostModel& costs,
                           const SearchSpace& space, const SearchOptions& opts);

/// Enumerates the structurally valid candidates without pipeline parallelism (resolved Plans); rejected ones
/// are counted. Empty when --fix pp lists no 1.
std::vector<Plan> enumerate_candidates(const ModelGraph& model, const Cluster& cluster,
                                       const SearchSpace& space, SearchStats& stats);
/// The same for pipelined plans of degrees `pps` (each > 1): the runtimes that pipeline, their ZeRO stages
/// under PP, schedules x virtual stages (capability table), at least pp micro-batches per step.
std::vector<Plan> enumerate_pipeline_candidates(const ModelGraph& model, const Cluster& cluster,
                                                const SearchSpace& space, const std::vector<int>& pps,
                                                SearchStats& stats);

/// The tie-break keys of a plan, compared in this order (lower is better): memory risk (headroom against the
/// measured memory error), parallel dimensions used (TP, HSDP), runtime preference (FSDP2, FSDP1, DeepSpeed),
/// non-default knobs. Exposed for tests.
struct TieKeys {
  int memory_risk = 0, parallel_dims = 0, runtime_rank = 0, non_default_knobs = 0;
};
TieKeys tie_keys(const Result& r);
/// The names of the tie-break rules, in order.
const std::array<const char*, 4>& tie_rule_names();
/// The family of a plan: runtime x TP x AC mode x HSDP or not.
std::string plan_family(const Plan& p);
/// Network bytes one GPU sends per step (all collectives; host copies excluded).
double network_bytes_per_gpu(const Result& r);
/// Picks among `results` (all fitting): the fastest, and every plan within `tolerance` of it is a tie; ties
/// are decided by tie_keys() in order, then by tokens/s, then by position. Returns the index and the rule
/// that decided against the fastest plan ("" when the fastest wins).
std::pair<std::size_t, std::string> choose_plan(const std::vector<const Result*>& results, double tolerance);

/// Ranking rule: higher tokens/s per GPU; ties (within 1e-9 relative) broken by lower peak memory, then by
/// enumeration order. Exposed for tests.
bool better(const Evaluation& a, const Evaluation& b);

}  // namespace shardplan
