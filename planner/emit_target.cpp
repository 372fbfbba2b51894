// What each emit target expresses: the search constraint and the plan as the emitted output runs it. Each
// rule cites the writer's note in planner/emit_notes.cpp that states the limitation.
#include "planner/emit_target.hpp"

#include <algorithm>

namespace shardplan {

const char* to_string(EmitTarget t) {
  switch (t) {
    case EmitTarget::kFsdp2:
      return "fsdp2";
    case EmitTarget::kDeepSpeed:
      return "deepspeed";
    case EmitTarget::kTorchtitan:
      return "torchtitan";
    case EmitTarget::kTorchtitanToml:
      return "torchtitan-toml";
  }
  return "?";
}

std::optional<EmitTarget> parse_emit_target(std::string_view kind) {
  for (EmitTarget t : kEmitTargets)
    if (kind == to_string(t)) return t;
  return std::nullopt;
}

std::string emit_target_names() {
  std::string s;
  for (EmitTarget t : kEmitTargets) s += (s.empty() ? "" : ", ") + std::string(to_string(t));
  return s;
}

Runtime target_runtime(EmitTarget t) {
  return t == EmitTarget::kDeepSpeed ? Runtime::kDeepSpeed : Runtime::kFsdp2;
}

namespace {
/// Keeps the values `ok` accepts, unless that leaves none (a pinned value the target cannot express).
template <class T, class F>
void restrict(std::vector<T>& values, F ok) {
  std::vector<T> kept;
  for (const T& v : values)
    if (ok(v)) kept.push_back(v);
  if (!kept.empty()) values = kept;
}
bool titan(EmitTarget t) {
  return t == EmitTarget::kTorchtitan || t == EmitTarget::kTorchtitanToml;
}
}  // namespace

namespace {
void constrain(EmitTarget t, SearchSpace& sp, bool runtime) {
  const Runtime rt = target_runtime(t);
  if (runtime) restrict(sp.runtimes, [&](Runtime r) { return r == rt; });
  // The FSDP2 script and the ds_config have no context or expert parallelism, the script no pipeline either
  // (emit(): "cannot express"); an empty list means "the search decides": pinned to 1 here.
  if (!titan(t)) {
    for (auto* dim : {&sp.cp, &sp.ep}) {
      if (dim->empty()) *dim = {1};
      restrict(*dim, [](int v) { return v == 1; });
    }
  }
  if (t == EmitTarget::kFsdp2) {
    if (sp.pp.empty()) sp.pp = {1};
    restrict(sp.pp, [](int v) { return v == 1; });
  }
  // torchtitan wraps every block as its own unit, prefetches one, and reduces in fp32 (emit_notes: "--wrap",
  // "--prefetch", "mixed_precision_reduce"); DeepSpeed fetches by module, not by units of blocks.
  if (titan(t) || t == EmitTarget::kDeepSpeed) restrict(sp.wrap, [](int v) { return v == 1; });
  // torchtitan has no all-gather token dispatcher (emit.cpp check_expressible: "--ep-backend allgather").
  if (titan(t)) restrict(sp.ep_backends, [](EpBackend b) { return b != EpBackend::kAllGather; });
  if (titan(t)) {
    restrict(sp.prefetch, [](int v) { return v == 1; });
    restrict(sp.reduce, [](Dtype d) { return d == Dtype::kFp32; });
  }
}
}  // namespace

void constrain_to_target(EmitTarget t, SearchSpace& sp) {
  constrain(t, sp, true);
}

bool same_runtime(const std::vector<EmitTarget>& targets) {
  for (EmitTarget t : targets)
    if (target_runtime(t) != target_runtime(targets.front())) return false;
  return true;
}

void constrain_to_targets(const std::vector<EmitTarget>& targets, SearchSpace& sp) {
  const bool runtime = same_runtime(targets);
  for (EmitTarget t : targets) constrain(t, sp, runtime);
}

Plan as_emitted(EmitTarget t, const Plan& p) {
  Plan q = p;
  q.runtime = target_runtime(t);
  if (titan(t) || t == EmitTarget::kDeepSpeed) q.wrap = 1;
  if (titan(t)) {
    q.prefetch = 1;
    q.reduce_dtype = Dtype::kFp32;
  }
  // torchtitan 0.3.0: --precision bf16 is written as bf16-mixed (TrainingConfig has dtype and
  // mixed_precision_param only); the TOML keeps fp32 parameters for bf16 and bf16-true alike.
  if (t == EmitTarget::kTorchtitan && q.precision == Precision::kBf16) q.precision = Precision::kBf16Mixed;
  if (t == EmitTarget::kTorchtitanToml &&
      (q.precision == Precision::kBf16 || q.precision == Precision::kBf16True))
    q.precision = Precision::kBf16Mixed;
  // A re-targeted plan's dispatch: torchtitan runs its own default (all-to-all) where the plan's backend was
  // Megatron's all-gather dispatcher, which it does not have.
  if (titan(t) && q.ep_backend == EpBackend::kAllGather) q.ep_backend.reset();
  // torchtitan 0.3.0 has no float8 all-gather field: its FSDP all-gathers bf16.
  if (t == EmitTarget::kTorchtitan) q.fp8_all_gather = false;
  // The script's torch.optim.AdamW keeps its moments in the parameter dtype: bf16 runs as bf16-true.
  if (t == EmitTarget::kFsdp2 && q.precision == Precision::kBf16) q.precision = Precision::kBf16True;
  // DeepSpeed picks its own fused Adam.
  if (t == EmitTarget::kDeepSpeed) q.fused_optimizer = true;
  return q;
}

}  // namespace shardplan

namespace shardplan {

EmittedRun emitted_run(EmitTarget t, const Result& rec, const ModelGraph& model, const Cluster& cluster,
                       const CostModel& costs) {
  EmittedRun out;
  out.written = out.plan = rec.plan;
  const Plan runs = as_emitted(t, rec.plan);
  if (runs == rec.plan) return out;
  out.plan = runs;
  for (const Knob& k : plan_knobs()) {
    const std::string a = k.get(rec.plan), b = k.get(out.plan);
    if (a != b)
      out.changes += (out.changes.empty() ? "" : ", ") + std::string(k.flag) + " " + (a.empty() ? "-" : a) +
                     " -> " + (b.empty() ? "-" : b);
  }
  try {
    out.plan = resolve_plan(out.plan, model, cluster);
    out.written.runtime = out.plan.runtime;
    out.written = resolve_plan(out.written, model, cluster);
  } catch (const InputError& e) {
    throw InputError::flag("--emit", std::string("cannot emit the recommended ") +
                                         to_string(rec.plan.runtime) + " plan as " + to_string(t) + " (" +
                                         out.changes + "): " + e.what() + " (pin --fix runtime=" +
                                         to_string(target_runtime(t)) + " to search the plans it runs)");
  }
  Simulator sim(model, cluster, costs);
  out.result = sim.run(out.plan, true);
  return out;
}

}  // namespace shardplan
