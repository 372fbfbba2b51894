// JSON, text and trace reports of a Result.
#include "planner/report/report.hpp"

#include <fmt/format.h>

#include "core/checked.hpp"
#include "planner/report/evidence.hpp"
#include "planner/report/margin.hpp"
#include "simulator/memory/memory.hpp"

namespace shardplan {

std::string format_bytes(double b) {
  const double a = std::abs(b);
  if (a >= static_cast<double>(kTiB)) return fmt::format("{:.2f} TiB", b / static_cast<double>(kTiB));
  if (a >= static_cast<double>(kGiB)) return fmt::format("{:.2f} GiB", b / static_cast<double>(kGiB));
  if (a >= static_cast<double>(kMiB)) return fmt::format("{:.1f} MiB", b / static_cast<double>(kMiB));
  return fmt::format("{:.0f} B", b);
}

namespace {

// ---- pipeline parallelism: `pipeline` and `memory.stages` (docs/json.md) ----
void add_pipeline_json(const PipelineSummary& ps, Json& out) {
  Json stages = Json::array();
  for (const PipelineStage& d : ps.stage_detail)
    stages.push_back({{"stage", d.stage},
                      {"rank", d.rank},
                      {"blocks", d.blocks},
                      {"embedding", d.embedding},
                      {"head", d.head},
                      {"peak_bytes", d.peak_bytes},
                      {"persistent_bytes", d.persistent_bytes},
                      {"activation_bytes", d.activation_bytes},
                      {"activations_in_flight", d.activations_in_flight},
                      {"fwd_s", d.fwd_s},
                      {"bwd_s", d.bwd_s}});
  out["memory"]["stages"] = std::move(stages);
  out["pipeline"] = {{"schedule", to_string(ps.schedule)},
                     {"pp", ps.pp},
                     {"stages", ps.stages},
                     {"virtual_stages", ps.virtual_stages},
                     {"micro_batches", ps.micro_batches},
                     {"bubble_fraction", ps.bubble_fraction},
                     {"p2p_bytes_per_step", static_cast<std::int64_t>(ps.p2p_bytes_per_step)},
                     {"p2p_s", ps.p2p_s},
                     {"busiest_rank", ps.busiest_rank}};
}

std::string pipeline_report_text(const PipelineSummary& ps) {
  std::string s = fmt::format(
      "\npipeline: {} x {} stages ({} per rank), {} micro-batches, bubble {:.1f} %, p2p {} sent "
      "per step on the busiest rank ({:.2e} s per send)\n",
      to_string(ps.schedule), ps.stages, ps.virtual_stages, ps.micro_batches, 100 * ps.bubble_fraction,
      format_bytes(ps.p2p_bytes_per_step), ps.p2p_s);
  for (const PipelineStage& d : ps.stage_detail)
    s += fmt::format(
        "  stage {:>3} rank {:>3} {:>4} blocks{}{}  peak {:>10}  {:>3} micro-batches in flight  fwd {:.4f} s "
        "bwd {:.4f} s\n",
        d.stage, d.rank, d.blocks, d.embedding ? " +embedding" : "", d.head ? " +head" : "",
        format_bytes(static_cast<double>(d.peak_bytes)), d.activations_in_flight, d.fwd_s, d.bwd_s);
  return s;
}

}  // namespace

// Context and expert parallelism of the plan: the mesh groups they imply and what they send per step (present
// only when cp > 1 or ep > 1; docs/model.md "Context parallelism", "Expert parallelism").
static Json parallelism_json(const Result& r, const ModelGraph& model) {
  const Plan& p = r.plan;
  const auto& cp = r.comm[static_cast<int>(CommKind::kCpRing)];
  const auto& a2a = r.comm[static_cast<int>(CommKind::kAllToAll)];
  Json out = {{"cp", p.cp},
              {"ep", p.ep},
              {"moe_imbalance", p.moe_imbalance},
              {"fsdp_ranks", p.fsdp_ranks()},
              {"efsdp_ranks", p.efsdp_ranks()},
              {"cp_bytes_per_step", static_cast<std::int64_t>(cp.bytes_per_rank)},
              {"cp_exposed_s", cp.exposed_s},
              {"a2a_bytes_per_step", static_cast<std::int64_t>(a2a.bytes_per_rank)},
              {"a2a_exposed_s", a2a.exposed_s}};
  if (p.ep > 1 && model.spec().moe.top_k > 0) {
    // One micro-batch's rows the busiest EP rank's experts receive per MoE layer, and its saved expert-side
    // activations (docs/model.md "Expert parallelism").
    const auto tokens = static_cast<std::int64_t>(p.mbs) * p.seq / p.cp;
    out["moe_busiest_rows"] = moe_busiest_rows(tokens, model.spec().moe.top_k, model.spec().moe.experts, p);
    out["moe_expert_side_bytes"] = expert_side_activation_bytes(model, p);
    if (p.moe_impl == MoeImpl::kDeepSpeed) {
      out["moe_capacity_factor"] =
          p.moe_capacity_factor > 0 ? p.moe_capacity_factor : kDeepSpeedCapacityFactor;
      out["moe_expert_capacity"] = deepspeed_expert_capacity(tokens, model.spec().moe.experts,
                                                             model.spec().moe.top_k, p.moe_capacity_factor);
    } else if (p.moe_capacity_factor > 0) {
      out["moe_capacity_factor"] = p.moe_capacity_factor;
      out["moe_expert_capacity"] =
          moe_expert_capacity(mul_checked(tokens, model.spec().moe.top_k, "routed rows"),
                              model.spec().moe.experts, p.moe_capacity_factor);
    }
  }
  return out;
}

Json report_json(const Result& r, const ReportInputs& in) {
  const auto& spec = in.model->spec();
  Json breakdown = Json::object();
  for (int c = 0; c < kMemCategories; ++c)
    breakdown[to_string(static_cast<MemCategory>(c))] = r.breakdown[static_cast<std::size_t>(c)];
  Json comm = Json::object();
  for (int k = 0; k < kCommKinds; ++k) {
    const auto& c = r.comm[static_cast<std::size_t>(k)];
    if (c.count == 0 && c.bytes_per_rank == 0) continue;
    comm[to_string(static_cast<CommKind>(k))] = {
        {"bytes_per_rank", static_cast<std::int64_t>(c.bytes_per_rank)},
        {"time_s", c.time_s},
        {"exposed_s", c.exposed_s},
        {"count", c.count}};
  }
  const auto& cl = in.cluster->spec();
  Json out = {{"schema", "shardplan.report/1"},
              {"inputs",
               {{"model",
                 {{"name", spec.name},
                  {"parameters", in.model->parameters()},
                  {"checkpoint_bytes", in.model->checkpoint_bytes()},
                  {"spec", model_spec_to_json(spec)}}},
                {"cluster",
                 {{"name", cl.name},
                  {"gpu", cl.gpu.model},
                  {"gpu_memory_bytes", cl.gpu.memory_bytes},
                  {"gpus_per_node", cl.node.gpus}}},
                {"gpus", in.cluster->gpus()},
                {"calibration", in.calibration.empty() ? Json(nullptr) : Json(in.calibration)}}},
              {"plan", plan_to_json(r.plan)},
              {"fits", r.fits},
              {"memory",
               {{"persistent_bytes", r.persistent_bytes},
                {"persistent",
                 {{"params", r.persistent_split[0]},
                  {"grads", r.persistent_split[1]},
                  {"optimizer", r.persistent_split[2]}}},
                {"peak_bytes", r.peak_bytes},
                {"peak_reserved_bytes", r.peak_reserved_bytes},
                {"first_step_peak_bytes", r.first_step_peak_bytes},
                {"runtime_overhead_bytes", r.overhead.total()},
                {"runtime_overhead",
                 {{"cuda_context", r.overhead.cuda_context_bytes},
                  {"nccl", r.overhead.nccl_bytes},
                  {"ep_dispatch_buffers", r.overhead.ep_dispatch_bytes}}},
                {"capacity_bytes", r.capacity_bytes},
                {"headroom_bytes", r.headroom_bytes()},
                {"host_bytes_per_node", r.host_bytes_per_node},
                {"host_capacity_bytes", r.host_capacity_bytes},
                {"activation_host_bytes", r.activation_host_bytes},
                {"peak_phase", r.peak_phase},
                {"margin", margin_json(r)},
                {"peak_time_s", r.peak_time_s},
                {"breakdown", breakdown},
                {"allocator",
                 {{"mode", to_string(r.allocator.mode)},
                  {"replayed", r.allocator.replayed},
                  {"peak_allocated_bytes", r.allocator.peak_allocated_bytes},
                  {"peak_reserved_bytes", r.allocator.peak_reserved_bytes},
                  {"fragmentation_bytes", r.allocator.fragmentation_bytes},
                  {"reserved_peak_phase", r.allocator.reserved_peak_phase},
                  {"segments", r.allocator.segments},
                  {"device_allocs", r.allocator.device_allocs},
                  {"alloc_retries", r.allocator.alloc_retries},
                  {"oom", r.allocator.oom}}}}},
              {"time",
               {{"step_s", r.step_s},
                {"compute_s", r.compute_s},
                {"exposed_comm_s", r.exposed_comm_s},
                {"optimizer_s", r.optimizer_s},
                {"tokens_per_s_per_gpu", r.tokens_per_s_per_gpu},
                {"mfu", r.mfu},
                {"model_flops_per_token", r.model_flops_per_token}}},
              {"comm", comm},
              {"warnings", evidence_warnings(r, spec, cl)}};
  if (r.pipeline) add_pipeline_json(*r.pipeline, out);
  if (r.plan.cp > 1 || r.plan.ep > 1) out["parallelism"] = parallelism_json(r, *in.model);
  return out;
}

std::string report_text(const Result& r, const ReportInputs& in, bool with_time) {
  const std::string pipeline_text = r.pipeline ? pipeline_report_text(*r.pipeline) : std::string();
  const auto& p = r.plan;
  std::string s;
  s += fmt::format("{} ({:L} parameters) on {} x {} ({})\n", in.model->spec().name, in.model->parameters(),
                   in.cluster->gpus(), in.cluster->spec().gpu.model, in.cluster->spec().name);
  s += fmt::format(
      "plan: runtime={} zero={} shard_group={} replicas={} tp={} seq={} mbs={} grad_accum={} ac={} wrap={} "
      "prefetch={} reshard_after_forward={} precision={} reduce_dtype={}\n",
      to_string(p.runtime), p.zero, p.shard_group, p.replicas, p.tp, p.seq, p.mbs, p.grad_accum,
      to_string(p.ac), p.wrap, p.prefetch, p.reshard() ? "true" : "false", to_string(p.precision),
      to_string(p.reduce()));
  if (p.lora_rank > 0)
    s += fmt::format("lora: rank {}, targets {}, base {} ({:L} trainable parameters)\n", p.lora_rank,
                     p.lora_targets.empty() ? "PEFT's default" : p.lora_targets, to_string(p.lora_base),
                     trainable_parameters(*in.model));
  s += "\nmemory at the peak (" + r.peak_phase + "):\n";
  for (int c = 0; c < kMemCategories; ++c)
    s += fmt::format("  {:<18} {:>12}\n", to_string(static_cast<MemCategory>(c)),
                     format_bytes(static_cast<double>(r.breakdown[static_cast<std::size_t>(c)])));
  s += fmt::format("  {:<18} {:>12}   (max_memory_allocated)\n", "peak allocated",
                   format_bytes(static_cast<double>(r.peak_bytes)));
  s += fmt::format("  {:<18} {:>12}   (max_memory_reserved)\n", "peak reserved",
                   format_bytes(static_cast<double>(r.peak_reserved_bytes)));
  if (r.allocator.replayed)
    s += fmt::format(
        "  caching allocator ({}): allocated {}, reserved {}, fragmentation {}; {} segments; reserved peak "
        "at {}{}\n",
        to_string(r.allocator.mode), format_bytes(static_cast<double>(r.allocator.peak_allocated_bytes)),
        format_bytes(static_cast<double>(r.allocator.peak_reserved_bytes)),
        format_bytes(static_cast<double>(r.allocator.fragmentation_bytes)), r.allocator.segments,
        r.allocator.reserved_peak_phase,
        r.allocator.oom ? " (out of memory at the capacity: the uncapped demand)"
        : r.allocator.alloc_retries
            ? fmt::format(" ({} retries after freeing the cache at the capacity)", r.allocator.alloc_retries)
            : std::string());
  s += fmt::format("  {:<18} {:>12}   (allocated in the first step: optimizer state created at its step)\n",
                   "first step", format_bytes(static_cast<double>(r.first_step_peak_bytes)));
  s += fmt::format("  {:<18} {:>12}   (CUDA context + NCCL{})\n", "runtime overhead",
                   format_bytes(static_cast<double>(r.overhead.total())),
                   r.overhead.ep_dispatch_bytes > 0
                       ? " + DeepEP buffer " + format_bytes(static_cast<double>(r.overhead.ep_dispatch_bytes))
                       : std::string());
  s += fmt::format("  {:<18} {:>12}   of {} -> {}\n", "total",
                   format_bytes(static_cast<double>(r.peak_reserved_bytes + r.overhead.total())),
                   format_bytes(static_cast<double>(r.capacity_bytes)), r.fits ? "fits" : "DOES NOT FIT");
  if (r.host_bytes_per_node > 0)
    s += fmt::format(
        "  {:<18} {:>12}   per node, of {} host memory -> {}\n", "offloaded (host)",
        format_bytes(static_cast<double>(r.host_bytes_per_node)),
        r.host_capacity_bytes > 0 ? format_bytes(static_cast<double>(r.host_capacity_bytes)) : "unknown",
        r.host_capacity_bytes == 0 || r.host_bytes_per_node <= r.host_capacity_bytes ? "fits"
                                                                                     : "DOES NOT FIT");
  if (r.activation_host_bytes > 0)
    s += fmt::format("  {:<18} {:>12}   per GPU, pinned (--activation-offload; in the line above)\n",
                     "activations (host)", format_bytes(static_cast<double>(r.activation_host_bytes)));
  s += "  " + margin_statement(r) + "\n";
  s += fmt::format("  persistent state   {:>12}   (params {} + grads {} + optimizer {})\n",
                   format_bytes(static_cast<double>(r.persistent_bytes)),
                   format_bytes(static_cast<double>(r.persistent_split[0])),
                   format_bytes(static_cast<double>(r.persistent_split[1])),
                   format_bytes(static_cast<double>(r.persistent_split[2])));
  if (with_time) {
    s +=
        fmt::format("\nstep {:.4f} s  compute {:.4f} s  exposed communication {:.4f} s  optimizer {:.4f} s\n",
                    r.step_s, r.compute_s, r.exposed_comm_s, r.optimizer_s);
    s += fmt::format("throughput {:.0f} tokens/s/GPU  MFU {:.1f} %\n", r.tokens_per_s_per_gpu, 100 * r.mfu);
    s += "communication:\n";
    for (int k = 0; k < kCommKinds; ++k) {
      const auto& c = r.comm[static_cast<std::size_t>(k)];
      if (c.time_s <= 0 && c.bytes_per_rank <= 0) continue;
      s += fmt::format("  {:<18} {:>12} sent/rank  {:>9.4f} s  exposed {:.4f} s\n",
                       to_string(static_cast<CommKind>(k)), format_bytes(c.bytes_per_rank), c.time_s,
                       c.exposed_s);
    }
  }
  s += pipeline_text;
  // Where the prediction leaves the measured evidence (`memory` prints no time, so none of its warnings).
  for (const auto& w : evidence_warnings(r, in.model->spec(), in.cluster->spec()))
    if (with_time || w.rfind("time:", 0) != 0) s += "warning: " + w + "\n";
  return s;
}

std::string trace_json(const Result& r) {
  const Program& prog = r.detail->program;
  const Timeline& tl = r.detail->timeline;
  Json events = Json::array();
  events.push_back(
      {{"name", "process_name"}, {"ph", "M"}, {"pid", 0}, {"args", {{"name", "shardplan step"}}}});
  for (int l = 0; l < static_cast<int>(prog.lane_names.size()); ++l)
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", l + 1},
                      {"args", {{"name", prog.lane_names[static_cast<std::size_t>(l)]}}}});
  events.push_back(
      {{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", 0}, {"args", {{"name", "cpu issue"}}}});
  for (std::size_t i = 0; i < prog.tasks.size(); ++i) {
    const Task& t = prog.tasks[i];
    const auto& tm = tl.timing[i];
    if (t.duration_s <= 0) continue;
    events.push_back(
        {{"name", prog.labels[t.label]},
         {"ph", "X"},
         {"pid", 0},
         {"tid", t.lane + 1},
         {"ts", tm.start_s * 1e6},
         {"dur", t.duration_s * 1e6},
         {"args", {{"unit", t.unit}, {"micro_batch", t.micro_batch}, {"issued_us", tm.issue_s * 1e6}}}});
  }
  for (const auto& m : tl.samples)
    events.push_back(
        {{"name", "allocated"},
         {"ph", "C"},
         {"pid", 0},
         {"ts", m.time_s * 1e6},
         {"args", {{"GiB", static_cast<double>(m.allocated_bytes) / static_cast<double>(kGiB)}}}});
  Json doc = {{"traceEvents", events},
              {"displayTimeUnit", "ms"},
              {"otherData", {{"step_s", r.step_s}, {"peak_bytes", r.peak_bytes}}}};
  return doc.dump();
}

}  // namespace shardplan
