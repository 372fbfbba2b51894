// The search's explanations: why the recommendation wins and what each knob moves, what would help when
// nothing fits, and, when no candidate passes the structural checks, what would give one.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "planner/search_internal.hpp"
#include "simulator/plan/plan.hpp"
#include "topologies/cluster.hpp"

namespace shardplan::search_detail {

namespace {
// "+1.2 GiB peak, -35 ms compute, +0.00 GB network/GPU, +4 ms exposed comm, -3.1 % tokens/s"
std::string deltas(const Result& from, const Result& to, Bytes limit) {
  const double mem = static_cast<double>(to.peak_reserved_bytes + to.overhead.total()) -
                     static_cast<double>(from.peak_reserved_bytes + from.overhead.total());
  std::string s = fmt::format(
      "{:+.1f} GiB memory, {:+.0f} ms compute, {:+.0f} ms exposed communication, {:+.2f} GB network "
      "per GPU, {:+.0f} ms step, {:+.1f} % tokens/s",
      gib(mem), 1e3 * (to.compute_s - from.compute_s), 1e3 * (to.exposed_comm_s - from.exposed_comm_s),
      1e-9 * (network_bytes_per_gpu(to) - network_bytes_per_gpu(from)), 1e3 * (to.step_s - from.step_s),
      100 * (to.tokens_per_s_per_gpu / from.tokens_per_s_per_gpu - 1));
  if (!to.fits || to.peak_reserved_bytes + to.overhead.total() > limit) s += ", over the memory limit";
  return s;
}

// The simulated plan that differs from `rec` only in the fields `same` copies over, the fastest such.
template <class F>
const Result* neighbour(const Result& rec, const std::vector<Result>& results, F same) {
  const Result* best = nullptr;
  for (const Result& r : results) {
    Plan q = r.plan;
    same(q, rec.plan);
    if (!(q == rec.plan) || r.plan == rec.plan) continue;
    if (!best || r.tokens_per_s_per_gpu > best->tokens_per_s_per_gpu) best = &r;
  }
  return best;
}

}  // namespace

std::string explain(const SearchOutcome& out, const std::vector<Result>& results, Bytes limit) {
  const Result& rec = out.plans[0];
  const double step = rec.step_s > 0 ? rec.step_s : 1;
  std::string e = fmt::format(
      "recommended: {} ({:.0f} tokens/s/GPU); binds: {} (compute {:.0f} % of the step, exposed communication "
      "{:.0f} %, "
      "memory headroom {:.1f} %)",
      plan_family(rec.plan), rec.tokens_per_s_per_gpu, binding_constraint(rec), 100 * rec.compute_s / step,
      100 * rec.exposed_comm_s / step,
      rec.capacity_bytes > 0
          ? 100 * static_cast<double>(rec.headroom_bytes()) / static_cast<double>(rec.capacity_bytes)
          : 0.0);
  if (rec.plan.reduce() != Dtype::kFp32)
    e += fmt::format("; gradients are reduced in {} (the framework default is fp32)",
                     to_string(rec.plan.reduce()));
  if (!out.tie_rule.empty() && out.fastest)
    e += fmt::format(
        "\ntie-break: {} plans are within the model's {:.1f} % throughput error of the fastest ({}{}, "
        "{:.0f} tokens/s/GPU; the recommendation is {:.1f} % slower); chosen by the rule \"{}\"",
        out.tied, 100 * out.tie_tolerance,
        out.plans.size() > 1 && out.plans[1].plan == out.fastest->plan ? "row 2: " : "not listed, --top 1: ",
        plan_family(out.fastest->plan), out.fastest->tokens_per_s_per_gpu,
        100 * (1 - rec.tokens_per_s_per_gpu / out.fastest->tokens_per_s_per_gpu), out.tie_rule);
  else if (out.tied > 1)
    e += fmt::format(
        "\nthe fastest plan; {} plans are within the model's {:.1f} % throughput error of it and all rank "
        "below it by the tie rules",
        out.tied, 100 * out.tie_tolerance);
  else
    e += fmt::format("\nthe fastest plan by more than the model's {:.1f} % throughput error",
                     100 * out.tie_tolerance);
  // What each knob moves, from the simulated plans that differ from the recommendation in that knob only.
  std::vector<std::string> moves;
  if (const Result* n = neighbour(rec, results, [](Plan& q, const Plan& r) { q.ac = r.ac; }))
    moves.push_back(fmt::format("AC {} instead of {} (memory for compute): {}", to_string(n->plan.ac),
                                to_string(rec.plan.ac), deltas(rec, *n, limit)));
  if (const Result* n = neighbour(rec, results, [](Plan& q, const Plan& r) {
        q.zero = r.zero, q.shard_group = r.shard_group, q.replicas = r.replicas,
        q.reshard_after_forward = r.reshard_after_forward;
      }))
    moves.push_back(fmt::format(
        "ZeRO {} shard group {} instead of ZeRO {} shard group {} (memory for network): {}", n->plan.zero,
        n->plan.shard_group, rec.plan.zero, rec.plan.shard_group, deltas(rec, *n, limit)));
  if (const Result* n =
          neighbour(rec, results, [](Plan& q, const Plan& r) { q.mbs = r.mbs, q.grad_accum = r.grad_accum; }))
    moves.push_back(fmt::format("micro-batch {} x {} instead of {} x {} (memory for serial time): {}",
                                n->plan.mbs, n->plan.grad_accum, rec.plan.mbs, rec.plan.grad_accum,
                                deltas(rec, *n, limit)));
  for (const auto& m : moves) e += "\n  " + m;
  for (std::size_t i = 1; i < out.plans.size() && i < 4; ++i)
    e += fmt::format("\n  vs row {}, {}{} ({} of the fastest): {}", i + 1,
                     out.alternatives[i].role == "fastest" ? "the fastest, " : "", out.alternatives[i].family,
                     out.alternatives[i].within_error ? "within error" : "beyond error",
                     deltas(rec, out.plans[i], limit));
  return e;
}

// What would help a plan that does not fit: each setting the closest plan does not have yet, simulated on it
// (the closest plan with that one change, resolved and replayed), and named as advice only with what it does:
// fits, or how far over the limit it still is. A change the runtime cannot make, or one that saves nothing
// (ZeRO-3 where the state is already sharded as far as it goes), is left out.
std::string no_fit_advice(const ModelGraph& model, const Cluster& cluster, const CostModel& costs,
                          const Result& closest, Bytes limit, bool persistent_bound, double persistent_bytes,
                          double need_gpus) {
  const Plan& c = closest.plan;
  const int domain = cluster.spec().node.nvlink_domain_gpus;
  std::vector<std::pair<std::string, Plan>> tries;
  auto add = [&](const std::string& what, const std::function<void(Plan&)>& change) {
    Plan q = c;
    change(q);
    if (!(q == c)) tries.push_back({what, q});
  };
  if (c.zero < 3) add("--zero 3", [](Plan& q) { q.zero = 3, q.reshard_after_forward.reset(); });
  if (c.ac != AcMode::kFull) add("--ac full", [](Plan& q) { q.ac = AcMode::kFull; });
  if (c.mbs > 1)
    add(fmt::format("--mbs {} (x2 accumulation)", c.mbs / 2),
        [](Plan& q) { q.grad_accum *= q.mbs / (q.mbs / 2), q.mbs /= 2; });
  if (c.tp * 2 <= domain && cluster.gpus() % (c.tp * 2) == 0)
    add(fmt::format("--tp {}", c.tp * 2), [](Plan& q) { q.tp *= 2, q.shard_group = 0; });
  if (c.offload == Offload::kNone) {
    if (c.runtime == Runtime::kDeepSpeed)
      add("--offload optimizer", [](Plan& q) { q.offload = Offload::kOptimizer; });
    add("--zero 3 --offload params", [](Plan& q) { q.zero = 3, q.offload = Offload::kParams; });
  }
  Simulator sim(model, cluster, costs);
  const double g = static_cast<double>(kGiB);
  const double closest_used = static_cast<double>(closest.peak_reserved_bytes + closest.overhead.total());
  std::vector<std::string> fits, short_of;
  for (auto& [what, q] : tries) {
    Plan r;
    try {
      r = resolve_plan(q, model, cluster);
    } catch (const InputError&) {
      continue;  // the runtime or the model cannot take this change
    }
    const Result& res = sim.run(r);
    const double used = static_cast<double>(res.peak_reserved_bytes + res.overhead.total());
    if (used >= closest_used - 0.01 * g) continue;  // saves nothing: not advice
    if (used <= static_cast<double>(limit))
      fits.push_back(fmt::format("{} ({:.1f} GiB)", what, used / g));
    else
      short_of.push_back(fmt::format("{} ({:.1f} GiB over)", what, (used - static_cast<double>(limit)) / g));
  }
  auto join = [](const std::vector<std::string>& v) {
    std::string j;
    for (std::size_t i = 0; i < v.size(); ++i) j += (i == 0 ? "" : i + 1 == v.size() ? " or " : ", ") + v[i];
    return j;
  };
  std::string s = persistent_bound
                      ? fmt::format("persistent state alone ({:.1f} GiB per GPU) leaves little room",
                                    persistent_bytes / g)
                      : std::string("activations and transients dominate");
  if (!fits.empty()) s += "; the closest plan fits with " + join(fits);
  if (!short_of.empty()) s += std::string(fits.empty() ? "; " : "; not enough alone: ") + join(short_of);
  if (fits.empty()) {
    if (short_of.empty()) s += "; no single change to the closest plan saves memory";
    s += persistent_bound ? fmt::format("; shard over more GPUs (about {:.0f}+ for ZeRO-3)", need_gpus)
                          : fmt::format("; more GPUs or a shorter --seq (the closest uses {})", c.seq);
  }
  return s;
}

namespace {

/// Some micro-batch of the space and a layout (tp, pp, cp) whose dp x mbs divides `batch` with at least pp
/// micro-batches; 0 when none.
int micro_batches(std::int64_t gpus, std::int64_t batch, const std::vector<int>& mbss, int tp, int pp,
                  int cp) {
  const std::int64_t ranks = static_cast<std::int64_t>(tp) * pp * cp;
  if (ranks > gpus || gpus % ranks != 0) return 0;
  const std::int64_t dp = gpus / ranks;
  for (int mbs : mbss)
    if (batch % (dp * mbs) == 0 && batch / (dp * mbs) >= pp) return static_cast<int>(batch / (dp * mbs));
  return 0;
}

// What would give the batch arithmetic a plan: another batch on these GPUs, fewer GPUs, or PP x CP.
std::string batch_advice(const ModelGraph& model, const Cluster& cluster, const SearchSpace& sp) {
  const std::int64_t gpus = cluster.gpus(), B = sp.global_batch;
  const int tp = *std::max_element(sp.tp.begin(), sp.tp.end());
  std::vector<std::string> tips;
  // PP x CP on these GPUs: the fewest extra ranks first (runtimes with both: the capability table).
  const int most_pp = std::min(32, (model.blocks() + 2) / 2);
  std::string pp_cp;
  for (int extra = 2; extra <= 512 && pp_cp.empty(); extra *= 2)
    for (int pp = 1; pp <= std::min(extra, most_pp) && pp_cp.empty(); pp *= 2) {
      const int cp = extra / pp;
      if (cp > 16) continue;
      if (const int m = micro_batches(gpus, B, sp.mbs, tp, pp, cp))
        pp_cp = fmt::format(
            "--pp {} --cp {} with --tp {} (dp {}, {} micro-batches; fsdp2 and megatron have both)", pp, cp,
            tp, gpus / (static_cast<std::int64_t>(tp) * pp * cp), m);
    }
  if (!pp_cp.empty()) tips.push_back(pp_cp);
  // Fewer GPUs: the largest tp x d <= gpus with d dividing the batch (whole nodes or one node).
  const int node = cluster.spec().node.nvlink_domain_gpus;
  for (std::int64_t d = std::min<std::int64_t>(B, gpus / tp); d >= 1; --d)
    if (B % d == 0 && ((tp * d) % node == 0 || node % (tp * d) == 0)) {
      if (tp * d < gpus) tips.push_back(fmt::format("{} GPUs (--tp {}, dp {})", tp * d, tp, d));
      break;
    }
  // Another batch on these GPUs: the nearest multiples of dp = gpus / tp.
  const std::int64_t dp = gpus / tp;
  const std::int64_t up = (B + dp - 1) / dp * dp, down = B / dp * dp;
  std::string batches = fmt::format("--global-batch {}", up);
  if (down > 0 && down != up) batches = fmt::format("--global-batch {} or {}", down, up);
  tips.push_back(batches + fmt::format(" (a multiple of dp = {} / tp {})", gpus, tp));
  std::string joined;
  for (std::size_t i = 0; i < tips.size(); ++i)
    joined += (i == 0 ? "" : i + 1 == tips.size() ? ", or " : ", ") + tips[i];
  return joined;
}

}  // namespace

std::string no_candidate_advice(const ModelGraph& model, const Cluster& cluster, const SearchSpace& sp,
                                const SearchStats& stats) {
  // The dominant reason among those that reject real plans (a capability or precision refusal is a
  // combination no runtime runs; it dominates only when nothing else is left).
  Rejection top = Rejection::kInvalidPlan;
  std::int64_t most = 0, batch = 0;
  for (const bool structural : {true, false}) {
    for (const auto& [r, n] : stats.rejections.count) {
      const bool not_a_plan = r == Rejection::kCapability || r == Rejection::kFp32Reduce;
      if (structural == not_a_plan) continue;
      if (n > most) top = r, most = n;
      if (r == Rejection::kBatchArithmetic || r == Rejection::kPipelineMicroBatches) batch += n;
    }
    if (most > 0) break;
  }
  std::string example;
  if (const auto it = stats.rejections.example.find(top); it != stats.rejections.example.end()) {
    const auto cut = it->second.find("  (");
    example = cut == std::string::npos ? it->second : it->second.substr(cut + 3, it->second.size() - cut - 4);
  }
  std::string pinned;
  for (const auto& k : sp.fixed_keys) pinned += (pinned.empty() ? "" : ", ") + k;
  const bool batch_bound =
      most > 0 && (top == Rejection::kBatchArithmetic || top == Rejection::kPipelineMicroBatches);
  if (!pinned.empty() && !batch_bound)
    return fmt::format("no plan satisfies the pinned knobs ({}): {} of {} candidates: {}", pinned, most,
                       stats.considered, example.empty() ? to_string(top) : example);
  if (batch_bound)
    return fmt::format(
        "global batch {} leaves no plan on {} GPUs{}: dp x mbs must divide it (dp = GPUs / (tp x cp x pp)) "
        "with "
        "at least pp micro-batches under PP ({} of {} candidates: {}); what would work: {}",
        sp.global_batch, cluster.gpus(), pinned.empty() ? "" : " with the pinned --fix " + pinned, batch,
        stats.considered, example, batch_advice(model, cluster, sp));
  return fmt::format("no structurally valid plan: {} of {} candidates rejected: {}", most, stats.considered,
                     example.empty() ? to_string(top) : example);
}

}  // namespace shardplan::search_detail
