// One simulated step: units -> lowering -> engine -> memory and time summary.
#include "simulator/simulate.hpp"

#include <algorithm>

#include "simulator/lowering.hpp"
#include "simulator/summary.hpp"

namespace shardplan {

Simulator::Simulator(const ModelGraph& model, const Cluster& cluster, const CostModel& costs)
    : model_(&model), cluster_(&cluster), costs_(&costs) {
  prog_.lane_names = {"compute", "nccl:shard", "nccl:replicate", "nccl:tp", "pcie", "host cpu"};
}

const Result& Simulator::run(const Plan& p, bool detail) {
  res_ = Result{};
  res_.plan = p;
  if (detail) res_.exposed_intervals = std::make_shared<std::vector<std::pair<double, double>>>();
  const RuntimeTraits rt = runtime_traits(p);
  build_units(*model_, *cluster_, *costs_, p, rt, units_);
  const auto ps = persistent_state(*model_, p);
  res_.persistent_split = ps;
  res_.persistent_bytes = ps[0] + ps[1] + ps[2];
  const auto initial = initial_allocation(*model_, p, rt, ps);
  LoweringOutput lo{prog_, res_.comm};
  lower({*model_, *cluster_, *costs_, p, rt, units_, detail, &initial, replay_on_}, lo);
  res_.optimizer_s = lo.optimizer_s;
  tl_.clear();
  tl_.record_samples = detail;
  run_engine(prog_, kLanes, kPools, initial, tl_);
  verify_timeline(prog_, tl_, initial, {});

  // Memory.
  Result& r = res_;
  r.peak_bytes = tl_.peak_bytes;
  // First step: the optimizer state does not exist before the first optimizer step creates it.
  r.first_step_peak_bytes = std::max(tl_.peak_before_optimizer_bytes - ps[2], tl_.peak_from_optimizer_bytes);
  r.breakdown = tl_.at_peak;
  r.peak_time_s = tl_.peak_time_s;
  r.peak_phase = peak_phase(prog_, tl_, units_);
  r.overhead = runtime_overhead(p);
  r.capacity_bytes = cluster_->spec().gpu.memory_bytes;
  r.allocator.mode = p.allocator;
  if (replay_on_) {
    // Reserved memory: the step's allocations replayed through the caching allocator over the run's first
    // two steps (the first creates the optimizer state; the second starts from the first's cached segments).
    // The allocator may take what the device has left after the CUDA context and NCCL; at that limit it
    // frees its cache and retries, as PyTorch does. If an allocation still fails, the plan does not fit and
    // the replay is repeated without a limit to report the demand.
    AllocatorConfig cfg;
    cfg.expandable_segments = p.allocator == AllocatorMode::kExpandable;
    cfg.capacity_bytes = std::max<Bytes>(0, r.capacity_bytes - r.overhead.total());
    if (cfg.capacity_bytes == 0) cfg.capacity_bytes = 1;  // nothing left: every allocation fails
    const ReplayOutcome* o = &replay_.run(prog_, cfg);
    r.allocator.oom = o->stats.oom();
    r.allocator.alloc_retries = o->stats.num_alloc_retries;
    if (r.allocator.oom) {
      cfg.capacity_bytes = 0;  // unlimited
      o = &replay_.run(prog_, cfg);
    }
    r.allocator.replayed = true;
    r.allocator.peak_allocated_bytes = o->stats.allocated_peak_bytes;
    r.allocator.peak_reserved_bytes = o->stats.reserved_peak_bytes;
    r.allocator.fragmentation_bytes = o->stats.reserved_peak_bytes - o->stats.allocated_peak_bytes;
    r.allocator.segments = o->stats.segments_peak;
    r.allocator.device_allocs = o->stats.num_device_alloc;
    r.allocator.reserved_peak_phase =
        (o->reserved_peak_step > 0 ? "step " + std::to_string(o->reserved_peak_step) + ", " : std::string()) +
        task_phase(prog_, o->reserved_peak_task, units_);
    r.peak_reserved_bytes = std::max(o->stats.reserved_peak_bytes, tl_.peak_bytes);
  } else {
    r.peak_reserved_bytes = reserved_lower_bound(tl_);
  }
  // CPU offload: the node's host memory holds the offloaded state of each of its GPUs.
  const auto& node = cluster_->spec().node;
  r.host_bytes_per_node = host_state_bytes_per_rank(*model_, p) * std::min(node.host_gpus, cluster_->gpus());
  r.host_capacity_bytes = node.host_memory_bytes;
  r.fits = r.peak_reserved_bytes + r.overhead.total() <= r.capacity_bytes &&
           (r.host_capacity_bytes == 0 || r.host_bytes_per_node <= r.host_capacity_bytes);
  summarise_time({*model_, *cluster_, *costs_, p, units_, prog_, tl_}, r);
  if (detail) r.detail = std::make_shared<const StepDetail>(StepDetail{prog_, tl_});
  return res_;
}

Result simulate(const ModelGraph& model, const Cluster& cluster, const CostModel& costs, const Plan& plan) {
  Simulator sim(model, cluster, costs);
  return sim.run(plan);
}

}  // namespace shardplan
