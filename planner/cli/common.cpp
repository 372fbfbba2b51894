// Shared CLI option sets and input loading.
#include "planner/cli/common.hpp"

#include "calibration/profile.hpp"
#include "core/atomic_file.hpp"

namespace shardplan::cli {

void add_input_options(CLI::App* app, Inputs& in, bool with_calibration) {
  app->add_option("--model", in.model, "model preset name, model spec JSON, graph JSON or Hugging Face config.json")
      ->capture_default_str();
  app->add_option("--cluster", in.cluster, "cluster preset name or cluster JSON")->capture_default_str();
  app->add_option("--gpus", in.gpus, "total GPUs (default: one node)");
  if (with_calibration) app->add_option("--calibration", in.calibration, "calibration profile (shardplan.calibration/1)");
}

void add_plan_options(CLI::App* app, PlanFlags& f) {
  app->add_option("--runtime", f.runtime, "fsdp2 | fsdp1 | deepspeed")->capture_default_str();
  app->add_option("--zero", f.zero, "ZeRO stage 0..3 (0 = plain data parallel)")->capture_default_str();
  app->add_option("--shard-group", f.shard_group, "ranks that shard the state (default all data-parallel ranks; smaller = HSDP)");
  app->add_option("--tp", f.tp, "tensor-parallel degree, inside one node")->capture_default_str();
  app->add_option("--seq", f.seq, "sequence length (default: the model's)");
  app->add_option("--mbs", f.mbs, "micro-batch: sequences per GPU per micro-step")->capture_default_str();
  app->add_option("--grad-accum", f.grad_accum, "micro-batches per optimizer step (default 1)");
  app->add_option("--global-batch", f.global_batch, "sequences per optimizer step (sets --grad-accum)");
  app->add_option("--ac", f.ac, "activation checkpointing: none | selective | full")->capture_default_str();
  app->add_option("--wrap", f.wrap, "transformer blocks per FSDP unit")->capture_default_str();
  app->add_option("--prefetch", f.prefetch, "units all-gathered ahead")->capture_default_str();
  app->add_option("--reshard-after-forward", f.reshard_after_forward, "true | false (default true for ZeRO-3)");
  app->add_option("--precision", f.precision, "bf16-mixed | bf16 | bf16-true | fp32")->capture_default_str();
  app->add_option("--reduce-dtype", f.reduce_dtype, "fp32 | bf16 (default fp32 for bf16-mixed)");
  app->add_option("--offload", f.offload, "none | optimizer")->capture_default_str();
  app->add_flag("--async-tp", f.async_tp, "overlap TP collectives with GEMMs");
  app->add_flag("--foreach-optimizer", f.foreach_optimizer, "unfused (foreach) AdamW instead of fused");
  app->add_flag("--compile", f.compile, "torch.compile: elementwise ops fused");
  app->add_flag("--hold-logits", f.hold_logits,
                "the training loop keeps the fp32 logits alive through backward (no `del pred`, torchtitan < mid-2024)");
  app->add_option("--loss-dtype", f.loss_dtype,
                  "fp32 | bf16: dtype of the cross-entropy (bf16 = the 16-bit compute dtype, no upcast of the logits)")
      ->capture_default_str();
  app->add_option("--fp8", f.fp8,
                  "none | tensorwise | rowwise: float8 GEMMs in the blocks' linear layers (torchao recipes)")
      ->capture_default_str();
  app->add_flag("--fp8-all-gather", f.fp8_all_gather,
                "FSDP2 all-gathers the blocks' linear weights in float8 (needs --fp8 tensorwise)");
}

Plan plan_from_flags(const PlanFlags& f) {
  Plan p;
  p.runtime = parse_enum_or_throw<Runtime>(f.runtime, "--runtime");
  p.zero = f.zero;
  p.shard_group = f.shard_group;
  p.tp = f.tp;
  p.seq = f.seq;
  p.mbs = f.mbs;
  if (f.grad_accum < 0) throw InputError::flag("--grad-accum", "must be >= 1");
  p.grad_accum = f.grad_accum > 0 ? f.grad_accum : 1;
  if (f.global_batch > 0 && f.grad_accum > 0)
    throw InputError::flag("--global-batch", "give --global-batch or --grad-accum, not both");
  if (f.shard_group < 0) throw InputError::flag("--shard-group", "must be >= 1");
  if (f.seq < 0) throw InputError::flag("--seq", "must be >= 1");
  p.ac = parse_enum_or_throw<AcMode>(f.ac, "--ac");
  p.wrap = f.wrap;
  p.prefetch = f.prefetch;
  if (f.reshard_after_forward == "true") p.reshard_after_forward = true;
  else if (f.reshard_after_forward == "false") p.reshard_after_forward = false;
  else if (!f.reshard_after_forward.empty())
    throw InputError::flag("--reshard-after-forward", "expected true or false, got \"" + f.reshard_after_forward + "\"");
  p.precision = parse_enum_or_throw<Precision>(f.precision, "--precision");
  if (!f.reduce_dtype.empty()) p.reduce_dtype = parse_enum_or_throw<Dtype>(f.reduce_dtype, "--reduce-dtype");
  p.offload = parse_enum_or_throw<Offload>(f.offload, "--offload");
  p.async_tp = f.async_tp;
  p.fused_optimizer = !f.foreach_optimizer;
  p.compile = f.compile;
  p.hold_logits = f.hold_logits;
  p.loss_dtype = parse_enum_or_throw<Dtype>(f.loss_dtype, "--loss-dtype");
  p.fp8 = parse_enum_or_throw<Fp8>(f.fp8, "--fp8");
  p.fp8_all_gather = f.fp8_all_gather;
  return p;
}

CalibrationHooks load_calibration_hooks(const std::string& path) {
  auto prof = std::make_shared<CalibrationProfile>(CalibrationProfile::load(path));
  CalibrationHooks h;
  h.source = path;
  // The placement of the queried group (hosts and NVLink domains) picks the measured series; the analytic model
  // gives the shape used to scale it to other sizes and rank counts.
  h.collective_s = [prof](CollectiveKind k, double bytes, const GroupView& g) -> std::optional<CollectiveCost> {
    const CollectivePlacement where{g.ranks, g.hosts, g.nodes, g.ranks_per_node,
                                    std::max(1, g.domain_gpus / std::max(1, g.host_gpus))};
    auto shape = [k, g](int ranks, double b) { return collective_cost(k, b, with_ranks(g, ranks)).time_s; };
    auto e = prof->collective_time(k, static_cast<std::int64_t>(bytes), where, shape);
    if (!e) return std::nullopt;
    CollectiveCost c;
    c.time_s = e->time_s;
    c.algorithm = "calibrated";
    c.protocol = "measured";
    c.source = to_string(e->source);
    c.why = e->detail;
    return c;
  };
  h.gemm_efficiency = [prof](double m, double n, double k) -> std::optional<double> {
    return prof->gemm_efficiency(static_cast<std::int64_t>(m), static_cast<std::int64_t>(n), static_cast<std::int64_t>(k));
  };
  h.hbm_Bps = prof->hbm_Bps();
  h.optimizer_Bps = prof->adamw_Bps("bf16-mixed");
  return h;
}

Loaded load_inputs(const Inputs& in) {
  Loaded l;
  l.model = std::make_unique<ModelGraph>(load_model(in.model));
  ClusterSpec spec = load_cluster_spec(in.cluster);
  if (in.gpus && *in.gpus < 1) throw InputError::flag("--gpus", "must be >= 1, got " + std::to_string(*in.gpus));
  const int gpus = in.gpus.value_or(spec.node.gpus);
  l.cluster = std::make_unique<Cluster>(std::move(spec), gpus);
  CalibrationHooks hooks;
  if (!in.calibration.empty()) hooks = load_calibration_hooks(in.calibration);
  l.calibration = in.calibration;
  l.costs = std::make_unique<CostModel>(*l.cluster, std::nullopt, std::move(hooks));
  return l;
}

void write_output(const std::string& path, const std::string& text) {
  if (!path.empty()) write_file_atomic(path, text);
}

}  // namespace shardplan::cli
