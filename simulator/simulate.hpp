// simulate(model, cluster, plan, costs) -> Result: lowers the plan into a Program of tasks (per runtime), runs
// the event engine, and summarises memory, time and communication. `memory` and `simulate` use the same run,
// so their peaks agree by construction. A Simulator keeps its buffers between runs: the planner reuses one per
// thread and allocates nothing per plan once warm.
#pragma once
#include <array>
#include <string>
#include <vector>

#include "simulator/cost_model.hpp"
#include "simulator/engine.hpp"
#include "simulator/model_graph.hpp"
#include "simulator/plan.hpp"

namespace shardplan {

/// Communication kinds reported separately (FSDP, HSDP/DDP, tensor parallel).
enum class CommKind : std::uint8_t { kAllGather, kReduceScatter, kAllReduce, kTpAllGather, kTpReduceScatter };
inline constexpr int kCommKinds = 5;
const char* to_string(CommKind k);

struct CommStats {
  double bytes_per_rank = 0;  ///< bytes each rank sends over the step (ring)
  double time_s = 0;          ///< total time of these collectives
  double exposed_s = 0;       ///< time when the compute stream idles waiting
  int count = 0;
};

/// Memory held outside PyTorch's allocator (CUDA context, NCCL communicators).
struct RuntimeOverhead {
  Bytes cuda_context_bytes = 0;
  Bytes nccl_bytes = 0;
  Bytes total() const { return cuda_context_bytes + nccl_bytes; }
};

struct Result {
  Plan plan;
  // Memory (bytes, busiest rank).
  Bytes persistent_bytes = 0;
  std::array<Bytes, 3> persistent_split{};  ///< params, grads, optimizer
  Bytes peak_bytes = 0;                     ///< predicted max_memory_allocated
  Bytes peak_reserved_bytes = 0;            ///< predicted max_memory_reserved
  /// Peak allocated in the run's first step, where the optimizer state is created by the first optimizer step:
  /// before it the state does not exist, from it on it does. Never above `peak_bytes` (the steady state).
  Bytes first_step_peak_bytes = 0;
  RuntimeOverhead overhead;
  Bytes capacity_bytes = 0;
  bool fits = false;
  std::array<Bytes, kMemCategories> breakdown{};
  std::string peak_phase;  ///< e.g. "backward unit 3, micro-batch 0"
  double peak_time_s = 0;
  // Time.
  double step_s = 0, compute_s = 0, exposed_comm_s = 0, optimizer_s = 0;
  double tokens_per_s_per_gpu = 0, mfu = 0, model_flops_per_token = 0;
  std::array<CommStats, kCommKinds> comm{};
  Bytes headroom_bytes() const { return capacity_bytes - peak_reserved_bytes - overhead.total(); }
};

/// One FSDP unit (or DeepSpeed module group) of a lowered plan: its layers, sizes and per-pass costs.
struct SimUnit {
  std::vector<const Layer*> layers;
  std::string name;
  bool has_loss = false;
  int blocks = 0;
  std::int64_t elems = 0;           // TP-local parameter elements, unpadded
  std::int64_t shard_elems = 0;     // local shard, padded as the runtime pads
  std::int64_t gathered_elems = 0;  // the all-gather output (shard x group), 0 if this unit gathers nothing
  std::int64_t fp8_gathered_elems = 0;  // of which gathered in float8 (1 byte each: --fp8-all-gather)
  bool reshard = true;              // free unsharded parameters after forward
  int gather_owner = -1;            // FSDP1 root split in two: the head part uses the embedding part's gather
  double fwd_s = 0, bwd_s = 0, recompute_s = 0, tp_fwd_s = 0, tp_bwd_s = 0;
  double tp_ag_bytes = 0, tp_rs_bytes = 0;  // per forward pass
  double tp_ag_mirror_bytes = 0;  // backward reduce-scatters mirroring the forward all-gathers (16-bit)
  Bytes act_bytes = 0, recompute_bytes = 0, workspace_bytes = 0;
  double flops_fwd = 0;
};

class Simulator {
 public:
  Simulator(const ModelGraph& model, const Cluster& cluster, const CostModel& costs);
  /// Runs one plan (already resolved with resolve_plan). `detail` keeps the memory samples for traces/plots.
  const Result& run(const Plan& plan, bool detail = false);
  const Program& program() const { return prog_; }
  const Timeline& timeline() const { return tl_; }
  int lanes() const { return n_lanes_; }
  const ModelGraph& model() const { return *model_; }
  const Cluster& cluster() const { return *cluster_; }

  /// Persistent state alone (params + grads + optimizer on one rank): the planner's cheap lower bound.
  static std::array<Bytes, 3> persistent_state(const ModelGraph& model, const Plan& plan);
  /// Activations saved by one micro-batch's forward on one rank (a lower bound of the peak's activations).
  static Bytes activation_bytes(const ModelGraph& model, const Plan& plan);

 private:
  using Unit = SimUnit;
  void build_units(const Plan& p);
  void lower(const Plan& p);
  void summarise(const Plan& p);
  const ModelGraph* model_;
  const Cluster* cluster_;
  const CostModel* costs_;
  Program prog_;
  Timeline tl_;
  Result res_;
  Bytes persistent_optimizer_bytes_ = 0;  ///< optimizer state present before the step (steady state)
  std::vector<Unit> units_;
  int n_lanes_ = 0;
  bool detail_ = false;  ///< build task labels (traces, reports); skipped in the planner's hot loop
};

/// Convenience: resolve nothing, run once, return a copy.
Result simulate(const ModelGraph& model, const Cluster& cluster, const CostModel& costs, const Plan& plan);

}  // namespace shardplan
