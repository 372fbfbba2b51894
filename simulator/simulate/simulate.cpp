// One simulated step: units -> lowering -> engine -> memory and time summary.
#include "simulator/simulate/simulate.hpp"

#include <algorithm>
#include <optional>

#include "core/checked.hpp"
#include "simulator/lowering/lowering.hpp"
#include "simulator/simulate/pipeline_step.hpp"
#include "simulator/simulate/steady_state.hpp"
#include "simulator/simulate/summary.hpp"

namespace shardplan {

Simulator::Simulator(const ModelGraph& model, const Cluster& cluster, const CostModel& costs,
                     SimulatorOptions options)
    : model_(&model), cluster_(&cluster), costs_(&costs), options_(options) {
  prog_.lane_names = {"compute", "nccl:shard", "nccl:replicate", "nccl:tp", "pcie", "host cpu"};
}

const Result& Simulator::run(const Plan& p, bool detail) {
  res_ = Result{};
  res_.plan = p;
  if (p.pp > 1) {  // pipeline parallelism: per-stage simulations composed by the schedule (pipeline.hpp)
    simulate_pipeline_step(*model_, *cluster_, *costs_, p, res_, detail, replay_on_);
    return res_;
  }
  if (detail) res_.exposed_intervals = std::make_shared<std::vector<std::pair<double, double>>>();
  const RuntimeTraits rt = runtime_traits(p);
  // The CP and EP lanes appear in traces only when the plan uses them.
  prog_.lane_names.resize(p.cp > 1 || p.ep > 1 ? kLanes : kLanesWithoutCpEp);
  if (p.cp > 1 || p.ep > 1) prog_.lane_names[kLaneCp] = "nccl:cp", prog_.lane_names[kLaneEp] = "nccl:ep";
  build_units(*model_, *cluster_, *costs_, p, rt, units_);
  const auto ps = persistent_state(*model_, p);
  const auto initial = initial_allocation(*model_, p, rt, ps);
  ++stats_.runs;

  // Lower and run the step: first (steady-state extension) its first micro-batches and its last; if their
  // steady part does not repeat exactly, every micro-batch.
  std::optional<SteadyExtension> ext;
  auto lower_and_run = [&](int steady_prefix) {
    res_.comm = {};
    LoweringOutput lo{prog_, res_.comm};
    lo.blocks = &blocks_;
    LoweringInputs li{*model_, *cluster_, *costs_, p, rt, units_, detail};
    li.steady_prefix = steady_prefix;
    li.initial = &initial;
    li.tensors = replay_on_;
    lower(li, lo);
    res_.optimizer_s = lo.optimizer_s;
    res_.activation_host_bytes = lo.activation_host_bytes;
    tl_.clear();
    tl_.record_samples = detail;
    run_engine(prog_, lanes(), kPools, initial, tl_);
    verify_timeline(prog_, tl_, initial, {});
  };
  // The allocator replay runs the truncated program's steady micro-batch once per skipped micro-batch, its
  // tensors renamed per copy (AllocatorReplay, ReplayRepeat): the whole step's allocation sequence.
  auto repeat_of = [](const SteadyExtension& x) {
    return ReplayRepeat{x.block_prev, x.block_lo, x.block_hi, x.copies};
  };
  if (options_.steady_state && !detail && p.grad_accum > kSteadyPrefix + 1) {
    lower_and_run(kSteadyPrefix);
    ext = find_steady_state(prog_, tl_, blocks_, p.grad_accum, &stats_.last_fallback);
    if (ext && replay_on_ && !replay_.can_repeat(prog_, repeat_of(*ext))) {
      ext.reset();
      stats_.last_fallback = "the steady micro-batch's tensors do not pass on as a copy's would";
    }
    if (ext) {
      ++stats_.extended;
    } else {
      ++stats_.fallbacks;
      lower_and_run(0);
    }
  } else {
    lower_and_run(0);
  }

  res_.persistent_split = ps;
  res_.persistent_bytes = ps[0] + ps[1] + ps[2];

  // Memory.
  Result& r = res_;
  r.peak_bytes = tl_.peak_bytes;
  // First step: the optimizer state does not exist before the first optimizer step creates it.
  r.first_step_peak_bytes = std::max(tl_.peak_before_optimizer_bytes - ps[2], tl_.peak_from_optimizer_bytes);
  r.breakdown = tl_.at_peak;
  r.peak_time_s = tl_.peak_time_s;
  r.peak_phase = peak_phase(prog_, tl_, units_);
  r.overhead = runtime_overhead(p, *model_, *cluster_);
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
    cfg.garbage_collection_threshold = p.allocator_gc_threshold;  // needs capacity_bytes > 0 (below)
    cfg.capacity_bytes = std::max<Bytes>(0, r.capacity_bytes - r.overhead.total());
    if (cfg.capacity_bytes == 0) cfg.capacity_bytes = 1;  // nothing left: every allocation fails
    const ReplayRepeat rr = ext ? repeat_of(*ext) : ReplayRepeat{};
    const ReplayRepeat* rep = ext ? &rr : nullptr;
    const ReplayOutcome* o = &replay_.run(prog_, cfg, 2, rep);
    r.allocator.oom = o->stats.oom();
    r.allocator.alloc_retries = o->stats.num_alloc_retries;
    if (r.allocator.oom) {
      cfg.capacity_bytes = 0;  // unlimited
      o = &replay_.run(prog_, cfg, 2, rep);
    }
    r.allocator.replayed = true;
    r.allocator.peak_allocated_bytes = o->stats.allocated_peak_bytes;
    r.allocator.peak_reserved_bytes = o->stats.reserved_peak_bytes;
    r.allocator.fragmentation_bytes = o->stats.reserved_peak_bytes - o->stats.allocated_peak_bytes;
    r.allocator.segments = o->stats.segments_peak;
    r.allocator.device_allocs = o->stats.num_device_alloc;
    r.allocator.reserved_peak_phase =
        (o->reserved_peak_step > 0 ? "step " + std::to_string(o->reserved_peak_step) + ", " : std::string()) +
        task_phase(prog_, o->reserved_peak_task, units_, o->reserved_peak_copy);
    r.peak_reserved_bytes = std::max(o->stats.reserved_peak_bytes, tl_.peak_bytes);
  } else {
    r.peak_reserved_bytes = reserved_lower_bound(tl_);
  }
  // CPU offload: the node's host memory holds the offloaded state of each of its GPUs.
  const auto& node = cluster_->spec().node;
  // --activation-offload: the pinned host copies of one micro-batch's offloaded activations, per GPU.
  r.host_bytes_per_node =
      mul_checked(add_checked(host_state_bytes_per_rank(*model_, p), r.activation_host_bytes, "host bytes"),
                  std::min(node.host_gpus, cluster_->gpus()), "host bytes per node");
  r.host_capacity_bytes = node.host_memory_bytes;
  r.fits = r.peak_reserved_bytes + r.overhead.total() <= r.capacity_bytes &&
           (r.host_capacity_bytes == 0 || r.host_bytes_per_node <= r.host_capacity_bytes);
  const SummaryInputs si{*model_, *cluster_, *costs_, p, units_, prog_, tl_};
  summarise_time(si, r);
  if (ext) extend_result(si, blocks_, *ext, r);
  if (detail) r.detail = std::make_shared<const StepDetail>(StepDetail{prog_, tl_});
  return res_;
}

Result simulate(const ModelGraph& model, const Cluster& cluster, const CostModel& costs, const Plan& plan) {
  Simulator sim(model, cluster, costs);
  return sim.run(plan);
}

}  // namespace shardplan
