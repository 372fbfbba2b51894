// The plan search (timeloop-style ask/tell): a SearchSpace yields candidate Plans; each is checked for
// structural validity, then against a cheap memory lower bound, and only survivors are simulated fully.
// Every rejection is counted by reason with one example kept. Evaluation runs on several threads; the
// outcome does not depend on the thread count.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "simulator/simulate.hpp"

namespace shardplan {

/// Which knobs are searched, and which are pinned by --fix KEY=VALUE. The searched knobs have a list of values here;
/// every other knob of the knob table (simulator/knobs.hpp) is pinned to its value in `base`, applied to every
/// candidate.
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
  std::vector<int> shard_groups;          ///< empty: all node-aligned divisors of dp
  std::vector<bool> reshard_after_forward = {true, false};
  /// The non-searched knobs of every candidate (precision, seq, fp8, compile, async_tp, loss_dtype, ...).
  Plan base;
  /// Set by --fix grad_accum=N: candidates whose global batch needs another accumulation are rejected.
  std::optional<int> grad_accum;
  std::int64_t seq = 0;                    ///< 0: base.seq (itself 0 = the model's default)
  std::int64_t global_batch = 0;           ///< sequences per step; required
  /// Applies one --fix KEY=VALUE (KEY=V1,V2 for searched knobs); InputError for unknown keys or values.
  void fix(const std::string& key_value);
  /// The run-record keys of the searched knobs (the others take one value).
  static const std::vector<std::string>& searched_keys();
};

/// The outcome of evaluating one candidate (real simulator, or a fake one in tests).
struct Evaluation {
  bool fits = false;
  double tokens_per_s_per_gpu = 0;
  Bytes peak_reserved_bytes = 0;       ///< with the runtime overhead added
  Bytes capacity_bytes = 0;
};

struct Rejections {
  std::map<std::string, std::int64_t> count;  ///< reason -> how many
  std::map<std::string, std::string> example; ///< reason -> one example (plan flags and detail)
};

struct SearchStats {
  std::int64_t considered = 0;  ///< candidates generated
  std::int64_t evaluated = 0;   ///< fully simulated
  std::int64_t fitting = 0;     ///< simulated and under the memory limit
  double seconds = 0;
  Rejections rejections;
};

struct SearchOptions {
  int threads = 0;            ///< 0: hardware concurrency
  int top = 10;
  double headroom = 0.05;     ///< fraction of GPU memory kept free
  std::function<void(double fraction)> progress;  ///< called from one thread, may be empty
};

struct SearchOutcome {
  std::vector<Result> plans;  ///< best first, at most `top`; plans[0] is the recommendation
  SearchStats stats;
  std::string explanation;    ///< why plans[0] beats plans[1] (or why nothing fits)
  /// When nothing fits: the candidate closest to fitting and by how many bytes it is over.
  std::optional<Result> closest;
  Bytes closest_over_bytes = 0;
  std::string binding_hint;   ///< the knob that would help most when nothing fits
  double headroom = 0;
};

/// Which constraint binds a plan: "memory" (headroom < 10 %), "exposed comm", "compute" ...
std::string binding_constraint(const Result& r);

/// Runs the search with the real simulator.
SearchOutcome search_plans(const ModelGraph& model, const Cluster& cluster, const CostModel& costs,
                           const SearchSpace& space, const SearchOptions& opts);

/// Enumerates the structurally valid candidates of a space (resolved Plans); rejected ones are counted.
std::vector<Plan> enumerate_candidates(const ModelGraph& model, const Cluster& cluster, const SearchSpace& space,
                                       SearchStats& stats);

/// Ranking rule: higher tokens/s per GPU; ties (within 1e-9 relative) broken by lower peak memory, then by
/// enumeration order. Exposed for tests.
bool better(const Evaluation& a, const Evaluation& b);

}  // namespace shardplan
