// The search's ranking: the order of evaluations, the tie rule within the model's throughput error (docs/
// model.md "Ranking within the model's error"), plan families, the listed plans and the Pareto front.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "planner/search_internal.hpp"
#include "simulator/plan/plan.hpp"

namespace shardplan {

bool better(const Evaluation& a, const Evaluation& b) {
  const double scale = std::max(std::abs(a.tokens_per_s_per_gpu), std::abs(b.tokens_per_s_per_gpu));
  if (std::abs(a.tokens_per_s_per_gpu - b.tokens_per_s_per_gpu) > 1e-9 * scale)
    return a.tokens_per_s_per_gpu > b.tokens_per_s_per_gpu;
  return a.peak_reserved_bytes < b.peak_reserved_bytes;
}

TieKeys tie_keys(const Result& r) {
  const Plan& p = r.plan;
  TieKeys k;
  // Memory: does the headroom survive the median reserved-memory error of the committed runs? (The worst
  // error, 39 %, is one outlier; ranking by it would prefer any plan with 40 % of memory free over every
  // simpler plan.)
  k.memory_risk = memory_risk_level(r) == 2 ? 1 : 0;
  const bool hsdp = p.zero > 0 && p.shard_group > 0 && p.shard_group < p.dp;
  k.parallel_dims =
      (p.tp > 1 ? 1 : 0) + (hsdp ? 1 : 0) + (p.pp > 1 ? 1 : 0) + (p.cp > 1 ? 1 : 0) + (p.ep > 1 ? 1 : 0);
  // The runtime its maintainers recommend to PyTorch users: FSDP2 (torch.distributed.fsdp.fully_shard; the
  // FSDP1 docs point new code to it, torchtitan uses only it), then FSDP1, then DeepSpeed.
  k.runtime_rank = p.runtime == Runtime::kFsdp2 ? 0 : p.runtime == Runtime::kFsdp1 ? 1 : 2;
  // Knobs set away from the framework's default (the parallel layout, AC mode and micro-batch are the plan
  // itself, not counted): ZeRO stage other than the default (3; under PP 2, torchtitan 0.3.0's
  // reshard_after_forward = not pp_enabled, distributed/fsdp.py), wrap > 1 block, prefetch > 1, reduction
  // not in fp32, offload, torch.compile, async TP, float8, an optimizer other than AdamW.
  const int default_zero = p.pp > 1 && p.runtime == Runtime::kFsdp2 ? 2 : 3;
  k.non_default_knobs = (p.zero != default_zero) + (p.optimizer != Optimizer::kAdamW) + (p.wrap != 1) +
                        (p.prefetch != 1) + (p.reduce() != Dtype::kFp32) + (p.offload != Offload::kNone) +
                        p.compile + p.async_tp + (p.fp8 != Fp8::kNone);
  return k;
}

const std::array<const char*, 4>& tie_rule_names() {
  static const std::array<const char*, 4> names = {
      "more memory headroom against the measured memory error", "fewer parallel dimensions (no TP, no HSDP)",
      "the recommended runtime (FSDP2 > FSDP1 > DeepSpeed)", "fewer non-default knobs"};
  return names;
}

std::string plan_family(const Plan& p) {
  const bool hsdp = p.zero > 0 && p.shard_group > 0 && p.shard_group < p.dp;
  const std::string pipe = p.pp > 1 ? fmt::format(" pp{} {}", p.pp, to_string(p.pp_schedule)) : std::string();
  // Context and expert parallelism name their own families (absent at degree 1: the names stay as before).
  const std::string cp_ep =
      (p.cp > 1 ? fmt::format(" cp{}", p.cp) : std::string()) + (p.ep > 1 ? fmt::format(" ep{}", p.ep) : "");
  // An optimizer other than AdamW (searched with --fix optimizer=V1,V2) names its family too.
  const std::string opt =
      p.optimizer == Optimizer::kAdamW ? std::string() : std::string(" ") + to_string(p.optimizer);
  return fmt::format("{} tp{}{}{} ac={} {}{}", to_string(p.runtime), p.tp, pipe, cp_ep, to_string(p.ac),
                     hsdp          ? "hsdp"
                     : p.zero == 0 ? "ddp"
                                   : "fsdp",
                     opt);
}

double network_bytes_per_gpu(const Result& r) {
  double b = 0;
  for (int k = 0; k < kCommKinds; ++k)
    if (static_cast<CommKind>(k) != CommKind::kOffloadCopy)
      b += r.comm[static_cast<std::size_t>(k)].bytes_per_rank;
  return b;
}

std::pair<std::size_t, std::string> choose_plan(const std::vector<const Result*>& rs, double tolerance) {
  if (rs.empty()) return {0, ""};
  std::size_t fastest = 0;
  for (std::size_t i = 1; i < rs.size(); ++i)
    if (rs[i]->tokens_per_s_per_gpu > rs[fastest]->tokens_per_s_per_gpu) fastest = i;
  const double top = rs[fastest]->tokens_per_s_per_gpu;
  auto key = [](const Result& r) {
    const TieKeys k = tie_keys(r);
    return std::array<int, 4>{k.memory_risk, k.parallel_dims, k.runtime_rank, k.non_default_knobs};
  };
  std::size_t best = fastest;
  for (std::size_t i = 0; i < rs.size(); ++i) {
    if (top - rs[i]->tokens_per_s_per_gpu >= tolerance * top) continue;  // beyond the error: slower for sure
    const auto ki = key(*rs[i]), kb = key(*rs[best]);
    if (ki < kb || (ki == kb && rs[i]->tokens_per_s_per_gpu > rs[best]->tokens_per_s_per_gpu)) best = i;
  }
  if (best == fastest) return {best, ""};
  const auto kb = key(*rs[best]), kf = key(*rs[fastest]);
  for (std::size_t r = 0; r < kb.size(); ++r)
    if (kb[r] != kf[r]) return {best, tie_rule_names()[r]};
  return {best, ""};  // unreachable: equal keys keep the faster plan
}

std::string binding_constraint(const Result& r) {
  const double used = static_cast<double>(r.peak_reserved_bytes + r.overhead.total());
  if (!r.fits || used > 0.9 * static_cast<double>(r.capacity_bytes)) return "memory";
  if (r.exposed_comm_s > 0.15 * r.step_s) return "exposed communication";
  if (r.pipeline && r.pipeline->bubble_fraction > 0.15) return "pipeline bubble";
  if (r.step_s > 0 && r.compute_s < 0.75 * r.step_s) return "CPU / launch overhead";
  return "compute";
}

namespace search_detail {

namespace {

// The table (SearchOutcome::plans): the recommendation, then the fastest plan when it is another plan (the
// one a tie-break line names), then the fastest plan of every other family, faster first, up to `top`. Each
// row's difference is taken to the fastest plan, and `within_error` is exactly |that difference| < the
// tolerance: the rows marked a tie are the plans choose_plan could have recommended.
void list_rows(const Context& c, const std::vector<const Result*>& all, const Result& rec,
               bool rec_is_fastest, SearchOutcome& out) {
  const double top_tps = all[0]->tokens_per_s_per_gpu;
  auto row = [&](const Result& r, const char* role) {
    out.alternatives.push_back({plan_family(r.plan), r.tokens_per_s_per_gpu / rec.tokens_per_s_per_gpu - 1,
                                top_tps - r.tokens_per_s_per_gpu < c.opts.tie_tolerance * top_tps,
                                r.tokens_per_s_per_gpu / top_tps - 1, role});
  };
  row(rec, rec_is_fastest ? "recommended, fastest" : "recommended");
  const bool fastest_row = !rec_is_fastest && c.opts.top >= 2;
  if (fastest_row) {
    out.plans.push_back(*all[0]);
    row(*all[0], "fastest");
  }
  // The other families, each by its fastest plan whose reserved memory was replayed (the fitting plans of a
  // listed family's first replays are: the replay stage replays down from its fastest until one fits).
  std::map<std::string, const Result*> best;
  for (const Result* r : all) {
    const Result*& b = best[plan_family(r->plan)];
    const bool better_pick =
        !b || (r->allocator.replayed && !b->allocator.replayed) ||
        (r->allocator.replayed == b->allocator.replayed && r->tokens_per_s_per_gpu > b->tokens_per_s_per_gpu);
    if (better_pick) b = r;
  }
  std::vector<const Result*> reps;
  for (const auto& [name, r] : best)
    if (name != plan_family(rec.plan) && !(fastest_row && name == plan_family(all[0]->plan)))
      reps.push_back(r);
  std::stable_sort(reps.begin(), reps.end(), [](const Result* a, const Result* b) {
    return a->tokens_per_s_per_gpu > b->tokens_per_s_per_gpu;
  });
  for (const Result* r : reps) {
    if (static_cast<int>(out.plans.size()) >= std::max(1, c.opts.top)) break;
    out.plans.push_back(*r);
    row(*r, "best of its family");
  }
}

// Pareto front over (tokens/s up, headroom up, network bytes down): in (tokens/s desc, headroom desc,
// network asc) order a plan is dominated iff a plan already on the front dominates it.
void pareto_front(const std::vector<const Result*>& all, SearchOutcome& out) {
  std::vector<const Result*> order = all;
  std::stable_sort(order.begin(), order.end(), [](const Result* a, const Result* b) {
    if (a->tokens_per_s_per_gpu != b->tokens_per_s_per_gpu)
      return a->tokens_per_s_per_gpu > b->tokens_per_s_per_gpu;
    if (a->headroom_bytes() != b->headroom_bytes()) return a->headroom_bytes() > b->headroom_bytes();
    return network_bytes_per_gpu(*a) < network_bytes_per_gpu(*b);
  });
  for (const Result* r : order) {
    if (!r->allocator.replayed) continue;  // reserved memory only bounded: not a point of the front
    bool dominated = false;
    for (const Result& f : out.pareto)
      if (f.tokens_per_s_per_gpu >= r->tokens_per_s_per_gpu && f.headroom_bytes() >= r->headroom_bytes() &&
          network_bytes_per_gpu(f) <= network_bytes_per_gpu(*r)) {
        dominated = true;  // equal points count as dominated: one of each is kept
        break;
      }
    if (!dominated) out.pareto.push_back(*r);
  }
}

}  // namespace

void rank(const Context& c, const std::vector<Result>& results, SearchOutcome& out) {
  std::vector<std::size_t> fitting;
  for (std::size_t k = 0; k < results.size(); ++k)
    if (under_limit(results[k], c.limit)) fitting.push_back(k);
  out.stats.fitting = static_cast<std::int64_t>(fitting.size());
  auto eval = [&](std::size_t k) {
    const Result& r = results[k];
    return Evaluation{true, r.tokens_per_s_per_gpu, used_bytes(r), r.capacity_bytes};
  };
  std::stable_sort(fitting.begin(), fitting.end(),
                   [&](std::size_t a, std::size_t b) { return better(eval(a), eval(b)); });
  out.tie_tolerance = c.opts.tie_tolerance;
  if (fitting.empty()) return;
  // The recommendation: the tie rule over every fitting plan (fitting[0] is the fastest).
  std::vector<const Result*> all;
  for (std::size_t k : fitting) all.push_back(&results[k]);
  const auto [wi, rule] = choose_plan(all, c.opts.tie_tolerance);
  const Result& rec = *all[wi];
  out.tie_rule = rule;
  if (wi != 0) out.fastest = *all[0];
  const double top_tps = all[0]->tokens_per_s_per_gpu;
  for (const Result* r : all) out.tied += top_tps - r->tokens_per_s_per_gpu < c.opts.tie_tolerance * top_tps;
  // The recommendation is run once more with detail: reports draw its program and timeline, and re-run
  // nothing (same plan, same numbers).
  Simulator sim(c.model, c.cluster, c.costs, c.opts.simulator);
  out.plans.push_back(sim.run(rec.plan, true));
  // list_rows appends to out.plans: it gets its own copy of the recommendation, not a reference into it.
  const Result recommended = out.plans.back();
  list_rows(c, all, recommended, wi == 0, out);
  pareto_front(all, out);
}

}  // namespace search_detail
}  // namespace shardplan
