// The plan search's stages as functions (planner/search*.cpp only): enumeration with its structural check
// (search_enumerate.cpp), ranking (search_rank.cpp), explanations and the no-plan advice
// (search_explain.cpp), the simulation stages (search.cpp).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "planner/search.hpp"

namespace shardplan::search_detail {

/// What the stages share: the inputs, the memory limit and the counts.
struct Context {
  const ModelGraph& model;
  const Cluster& cluster;
  const CostModel& costs;
  const SearchSpace& space;
  const SearchOptions& opts;
  Bytes limit = 0;  ///< capacity x (1 - headroom)
  SearchStats& stats;
};

/// Peak reserved memory plus the runtime overhead: what the limit is compared with.
inline Bytes used_bytes(const Result& r) {
  return r.peak_reserved_bytes + r.overhead.total();
}
inline bool under_limit(const Result& r, Bytes limit) {
  return used_bytes(r) <= limit;
}
double gib(double bytes);

// ---- enumeration and structural check (search_enumerate.cpp) ----

/// The space with its defaults filled in (--fix fp8_all_gather=true alone searches fp8 tensorwise).
SearchSpace normalized(const SearchSpace& space);
/// Whether the model has mixture-of-experts layers.
bool has_experts(const ModelGraph& model);
/// Expert-parallel degrees for a dp_shard x cp group of `fsdp_ranks`: SearchSpace::ep's rule (the listed
/// degrees, else 1 and the powers of two dividing the expert count and the group).
std::vector<int> ep_degrees(const ModelGraph& model, const SearchSpace& sp, int fsdp_ranks);
/// Context-parallel degrees at one (tp, pp): SearchSpace::cp's rule.
std::vector<int> cp_degrees(const ModelGraph& model, const Cluster& cluster, const SearchSpace& sp, int tp,
                            int pp);
/// Schedules x virtual stages searched for runtime `rt` at degree `pp` (SearchSpace::pp_schedules and
/// virtual_stages' rule, the capability table's schedules).
std::vector<std::pair<PpSchedule, int>> pipeline_schedules(const ModelGraph& model, const SearchSpace& sp,
                                                           Runtime rt, int pp);
/// enumerate_pipeline_candidates; `layout`: only 1F1B and interleaved 1F1B with two stages per rank (unless
/// schedules or virtual stages are pinned), the search's first pass over pipelined layouts.
std::vector<Plan> enumerate_pipeline(const ModelGraph& model, const Cluster& cluster,
                                     const SearchSpace& space, const std::vector<int>& pps,
                                     SearchStats& stats, bool layout);
/// Whether a pipeline knob is pinned (pp_schedule, virtual_stages, pp_layers): then PP plans are searched.
bool pipeline_pinned(const SearchSpace& sp);
/// The structural check of one candidate: capability table, precision, batch arithmetic, pinned
/// accumulation, then resolve_plan. Returns the resolved plan, or counts the rejection and returns nothing.
std::optional<Plan> structural_check(const ModelGraph& model, const Cluster& cluster, const SearchSpace& sp,
                                     const Plan& p, SearchStats& stats);
/// The compile / async TP / float8 variants of a plan the runtime has, other than the plan's own.
std::vector<Plan> variants(const Plan& p, const SearchSpace& sp);

// ---- ranking (search_rank.cpp) ----

/// The listed plans, the alternatives, the tie rule and the Pareto front of the fitting results.
void rank(const Context& c, const std::vector<Result>& results, SearchOutcome& out);

// ---- explanations (search_explain.cpp) ----

std::string explain(const SearchOutcome& out, const std::vector<Result>& results, Bytes limit);
/// What would help the closest plan fit: each setting it does not have yet, simulated on it, named only with
/// what it does (fits, or how far over the limit it still is).
std::string no_fit_advice(const ModelGraph& model, const Cluster& cluster, const CostModel& costs,
                          const Result& closest, Bytes limit, bool persistent_bound, double persistent_bytes,
                          double need_gpus);
/// Why no candidate passed the structural checks, and what would give one (fewer GPUs, PP x CP, another
/// batch); mentions --fix only when the space has pinned keys.
std::string no_candidate_advice(const ModelGraph& model, const Cluster& cluster, const SearchSpace& sp,
                                const SearchStats& stats);

// ---- the simulation stages (search.cpp, search_refine.cpp) ----

/// torch.compile, async TP and float8 scale a plan's time by a similar factor across the plans of one family
/// (they change elementwise traffic, TP overlap and GEMM rate, not the layout): the layout is searched with
/// their first listed value and the other values are tried on the kRefine fastest plans of every family,
/// on its tie-rule choices, and on the kRefine fastest plans over the limit that fit compiled. This keeps
/// the search near its eager cost (Llama-3-8B on 8 GPUs: 3.3x fewer simulations than the full product).
constexpr std::size_t kRefine = 3;
/// PP plans join the search by themselves on clusters of this many GPUs or more. The threshold bounds the
/// search's cost (every PP plan simulates each of its stages); it is not a cost-model constant.
constexpr int kPipelineSearchGpus = 512;
/// Pipelined families refined with compile / async TP / float8, and pipelined layouts tried with every
/// schedule: the fastest few. A bound on the search's cost (a pipelined plan simulates each of its stages);
/// not a cost-model constant.
constexpr std::size_t kPipelineExpand = 8;

/// Stage 2: the memory lower bound (memory_lower_bound: persistent state and one micro-batch's activations,
/// spread over the pipeline ranks; the property test "the bound never exceeds the simulated peak" covers
/// it). Keeps the plan of the lowest bound for the nothing-fits report.
struct Pruner {
  Context& c;
  std::optional<Plan> lowest;
  Bytes lowest_bound = 0;
  /// The plans whose bound is within the limit; the others are counted as rejected.
  std::vector<Plan> survivors(std::vector<Plan> plans);
};

/// Stage 3: full simulation (no allocator replay) on worker threads, results in the plans' order.
std::vector<Result> simulate_all(const Context& c, const std::vector<Plan>& plans, bool progress);
/// Appends `more` to `to`.
void append(std::vector<Result>& to, std::vector<Result> more);
/// Stage 5: the compile / async TP / float8 variants of every family's bases (search_refine.cpp).
void refine_stage(Context& c, Pruner& pr, std::vector<Result>& results);
/// Stage 7: the caching-allocator replay of the plans the output can name (search_refine.cpp).
void replay_stage(Context& c, std::vector<Result>& results);

}  // namespace shardplan::search_detail
