// search_plans: the stages in order, each one function. Enumerate and check (search_enumerate.cpp) ->
// memory lower bound (prune) -> simulate on worker threads -> (MoE models) the other expert-parallel degrees
// on each EP-1 family's bases -> pipelined layouts (the same three stages) ->
// compile / async TP / float8 variants of the plans that decide each family -> every schedule x virtual
// stages on the fastest pipelined layouts -> caching-allocator replay of the plans the output can name ->
// rank (search_rank.cpp) -> explain (search_explain.cpp).
#include "planner/search.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "planner/report/margin.hpp"
#include "planner/search_internal.hpp"
#include "simulator/memory/memory.hpp"
#include "simulator/plan/plan.hpp"
#include "topologies/cluster.hpp"

namespace shardplan {

namespace search_detail {
namespace {}  // namespace

std::vector<Plan> Pruner::survivors(std::vector<Plan> plans) {
  std::vector<Plan> out;
  for (Plan& p : plans) {
    const Bytes b = memory_lower_bound(c.model, p);
    if (!lowest || b < lowest_bound) lowest = p, lowest_bound = b;
    if (b <= c.limit) {
      out.push_back(std::move(p));
      continue;
    }
    c.stats.rejections.add_lazy(Rejection::kMemoryBound, [&] {
      return plan_to_flags(p) + fmt::format("  (lower bound {:.2f} GiB > limit {:.2f} GiB)",
                                            gib(static_cast<double>(b)), gib(static_cast<double>(c.limit)));
    });
  }
  return out;
}

/// Stage 3: full simulation (no allocator replay) on worker threads; results stored by index, so the outcome
/// does not depend on the thread count. An exception on a worker is rethrown on the calling thread.
std::vector<Result> simulate_all(const Context& c, const std::vector<Plan>& plans, bool progress) {
  std::vector<Result> res(plans.size());
  const int threads = c.opts.threads > 0
                          ? c.opts.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::atomic<std::size_t> next{0}, done{0};
  const int n = std::max(1, std::min<int>(threads, static_cast<int>(std::max<std::size_t>(1, plans.size()))));
  std::exception_ptr failure;
  std::mutex failure_mu;
  auto work = [&](bool report) {
    try {
      Simulator sim(c.model, c.cluster, c.costs, c.opts.simulator);
      sim.set_allocator_replay(false);
      for (std::size_t k; (k = next.fetch_add(1)) < plans.size();) {
        res[k] = sim.run(plans[k]);
        done.fetch_add(1);
        if (report) c.opts.progress(static_cast<double>(done.load()) / static_cast<double>(plans.size()));
      }
    } catch (...) {
      next.store(plans.size());
      const std::lock_guard<std::mutex> lock(failure_mu);
      if (!failure) failure = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  for (int i = 1; i < n; ++i) pool.emplace_back(work, false);
  // The calling thread works too; with a progress callback it reports between its plans.
  work(progress && static_cast<bool>(c.opts.progress));
  for (auto& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
  return res;
}

void append(std::vector<Result>& to, std::vector<Result> more) {
  to.insert(to.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
}

namespace {

/// The space of the layout pass: compile, async TP and float8 at their first value.
SearchSpace layout_space(const SearchSpace& sp) {
  SearchSpace l = sp;
  l.compile = {sp.compile.front()};
  l.async_tp = {sp.async_tp.front()};
  l.fp8 = {sp.fp8.front()};
  return l;
}

/// Expert parallelism (issue 30): the EP degree changes a MoE plan's all-to-alls, its experts' FSDP traffic
/// and their unsharded size, not the rest of its layout, so the layout is searched at EP 1 and the other
/// degrees are tried on each family's bases (stage 3a), as compile and async TP are. The whole product cost
/// up to nine times the simulations (Qwen3-235B-A22B on 2,048 H100: 36,763). A listed --fix ep is searched
/// on every layout.
bool refine_ep(const Context& c) {
  return c.space.ep.empty() && has_experts(c.model);
}

/// The EP-1 plans of one family whose other EP degrees are simulated: its kRefine fastest that fit, its
/// kRefine fastest over all (EP shrinks the unsharded experts: a faster plan that does not fit at EP 1 may
/// fit with EP), its kRefine fastest that keep the median reserved-memory error as headroom, its tie-rule
/// choice, and the fastest (fitting, and over all) of each gradient-reduction dtype x ZeRO stage (they set
/// the data-parallel traffic that EP shrinks for the experts); a family none of whose plans fit, its kRefine
/// smallest.
std::vector<const Result*> ep_bases(const Context& c, std::vector<const Result*> members) {
  std::stable_sort(members.begin(), members.end(), [](const Result* a, const Result* b) {
    return a->tokens_per_s_per_gpu > b->tokens_per_s_per_gpu;
  });
  std::vector<const Result*> fit, safe, picks;
  const double safe_limit = static_cast<double>(c.limit) * (1.0 - kReservedMemoryError.median_abs);
  for (const Result* m : members) {
    if (under_limit(*m, c.limit)) fit.push_back(m);
    if (static_cast<double>(used_bytes(*m)) <= safe_limit) safe.push_back(m);
  }
  auto add = [&](const Result* m) {
    if (std::find(picks.begin(), picks.end(), m) == picks.end()) picks.push_back(m);
  };
  for (const auto* list : {&fit, &members, &safe})
    for (std::size_t i = 0; i < std::min(kRefine, list->size()); ++i) add((*list)[i]);
  if (!fit.empty()) add(fit[choose_plan(fit, c.opts.tie_tolerance).first]);
  std::map<std::pair<int, int>, const Result*> fit_per_reduction, per_reduction;
  for (const Result* m : fit)
    fit_per_reduction.emplace(std::pair{static_cast<int>(m->plan.reduce()), m->plan.zero}, m);
  for (const Result* m : members)
    per_reduction.emplace(std::pair{static_cast<int>(m->plan.reduce()), m->plan.zero}, m);
  for (const auto* per : {&fit_per_reduction, &per_reduction})
    for (const auto& [key, m] : *per) add(m);
  if (fit.empty()) {
    std::stable_sort(members.begin(), members.end(),
                     [](const Result* a, const Result* b) { return used_bytes(*a) < used_bytes(*b); });
    for (std::size_t i = 0; i < std::min(kRefine, members.size()); ++i) add(members[i]);
  }
  return picks;
}

/// Stage 3a: the other EP degrees (SearchSpace::ep's rule for the plan's dp_shard x cp) on each EP-1
/// family's bases (ep_bases). Every EP degree makes families of its own (plan_family), so each reported EP
/// family is the best of these.
void ep_stage(Context& c, Pruner& pr, std::vector<Result>& results) {
  if (!refine_ep(c)) return;
  std::map<std::string, std::vector<const Result*>> families;
  for (const Result& r : results) families[plan_family(r.plan)].push_back(&r);
  std::vector<Plan> todo;
  for (const auto& [name, members] : families)
    for (const Result* base : ep_bases(c, members))
      for (int ep : ep_degrees(c.model, c.space, base->plan.fsdp_ranks())) {
        if (ep == 1) continue;
        Plan q = base->plan;
        q.ep = ep;
        q.ep_backend.reset();  // the runtime's default, or each listed backend
        const std::vector<std::optional<EpBackend>> backends =
            c.space.ep_backends.empty() ? std::vector<std::optional<EpBackend>>{std::nullopt}
                                        : std::vector<std::optional<EpBackend>>(c.space.ep_backends.begin(),
                                                                                c.space.ep_backends.end());
        for (const std::optional<EpBackend>& b : backends) {
          q.ep_backend = b;
          ++c.stats.considered;
          if (auto r = structural_check(c.model, c.cluster, c.space, q, c.stats))
            todo.push_back(std::move(*r));
        }
      }
  append(results, simulate_all(c, pr.survivors(std::move(todo)), false));
}

/// Stage 4: pipeline parallelism, when --fix pp lists degrees > 1 or a pipeline knob is pinned, on clusters
/// of kPipelineSearchGpus or more, or when no plan without PP fits.
void pipeline_stage(Context& c, Pruner& pr, std::vector<Result>& results) {
  bool any_fit = false;
  for (const Result& r : results) any_fit = any_fit || under_limit(r, c.limit);
  std::vector<int> pps;
  for (int pp : c.space.pp)
    if (pp > 1) pps.push_back(pp);
  if (c.space.pp.empty() && (c.cluster.gpus() >= kPipelineSearchGpus || !any_fit || pipeline_pinned(c.space)))
    pps = {2, 4, 8, 16, 32};
  if (pps.empty()) return;
  const SearchSpace sp = layout_space(c.space);
  std::vector<Plan> pipe = pr.survivors(enumerate_pipeline(c.model, c.cluster, sp, pps, c.stats, true));
  append(results, simulate_all(c, pipe, false));
}

/// A pipelined plan's family without its schedule: runtime x TP x PP x CP x EP x AC x HSDP.
std::string layout_family(const Plan& p) {
  Plan q = p;
  q.pp_schedule = PpSchedule::k1F1B;
  return plan_family(q);
}

/// Stage 6: every schedule x virtual stages the runtime has (SearchSpace::virtual_stages' rule: interleaved
/// up to one block per stage) on the fastest fitting plan of each of the kPipelineExpand fastest pipelined
/// layouts, with the compile / async TP / float8 values stage 5 chose. The schedule changes the bubble and
/// the micro-batches in flight, not the layout's ranking: the layout pass ran 1F1B and interleaved V 2.
void schedule_stage(Context& c, Pruner& pr, std::vector<Result>& results) {
  std::map<std::string, const Result*> best;
  for (const Result& r : results) {
    if (r.plan.pp <= 1 || !under_limit(r, c.limit)) continue;
    const Result*& b = best[layout_family(r.plan)];
    if (!b || r.tokens_per_s_per_gpu > b->tokens_per_s_per_gpu) b = &r;
  }
  std::vector<const Result*> bases;
  for (const auto& [name, r] : best) bases.push_back(r);
  std::stable_sort(bases.begin(), bases.end(), [](const Result* a, const Result* b) {
    return a->tokens_per_s_per_gpu > b->tokens_per_s_per_gpu;
  });
  if (bases.size() > kPipelineExpand) bases.resize(kPipelineExpand);
  std::set<std::string> seen;
  for (const Result& r : results)
    if (r.plan.pp > 1) seen.insert(plan_to_flags(r.plan));
  std::vector<Plan> todo;
  for (const Result* base : bases)
    for (const auto& [sched, V] : pipeline_schedules(c.model, c.space, base->plan.runtime, base->plan.pp)) {
      Plan q = base->plan;
      q.pp_schedule = sched, q.virtual_stages = V;
      ++c.stats.considered;
      auto r = structural_check(c.model, c.cluster, c.space, q, c.stats);
      if (r && seen.insert(plan_to_flags(*r)).second) todo.push_back(std::move(*r));
    }
  append(results, simulate_all(c, pr.survivors(std::move(todo)), false));
}

/// Stage 9 when nothing fits: the closest plan (replayed), how far over it is and what would help; when no
/// candidate passed the structural checks, what would give one.
void explain_nothing_fits(Context& c, const Pruner& pr, std::vector<Result>& results, SearchOutcome& out) {
  std::optional<std::size_t> closest;
  for (std::size_t k = 0; k < results.size(); ++k)
    if (!closest || used_bytes(results[k]) < used_bytes(results[*closest])) closest = k;
  if (closest) {
    if (!results[*closest].allocator.replayed)
      results[*closest] = Simulator(c.model, c.cluster, c.costs).run(results[*closest].plan);
    out.closest = results[*closest];
  } else if (pr.lowest) {
    out.closest = Simulator(c.model, c.cluster, c.costs, c.opts.simulator).run(*pr.lowest);
  }
  if (!out.closest) {
    out.no_candidate = no_candidate_advice(c.model, c.cluster, c.space, c.stats);
    out.explanation = out.no_candidate;
    return;
  }
  const Result& r = *out.closest;
  out.closest_over_bytes = used_bytes(r) - c.limit;
  out.binding_hint = fit_advice(c.model, c.cluster, c.costs, r, c.limit);
  out.explanation =
      fmt::format("no plan fits: the closest ({}) needs {:.2f} GiB more than the {:.2f} GiB limit; {}",
                  plan_to_flags(r.plan), gib(static_cast<double>(out.closest_over_bytes)),
                  gib(static_cast<double>(c.limit)), out.binding_hint);
}

void count_over_limit(Context& c, const std::vector<Result>& results) {
  for (const Result& r : results)
    if (!under_limit(r, c.limit))
      c.stats.rejections.add_lazy(Rejection::kSimulatedPeak, [&] {
        return plan_to_flags(r.plan) + fmt::format("  (peak {:.2f} GiB > limit {:.2f} GiB)",
                                                   gib(static_cast<double>(used_bytes(r))),
                                                   gib(static_cast<double>(c.limit)));
      });
}

}  // namespace
}  // namespace search_detail

using namespace search_detail;

std::string fit_advice(const ModelGraph& model, const Cluster& cluster, const CostModel& costs,
                       const Result& r, Bytes limit) {
  const double persistent = static_cast<double>(r.persistent_bytes);
  const double need_gpus =
      std::ceil(static_cast<double>(cluster.gpus()) * persistent / (0.6 * static_cast<double>(limit)));
  return search_detail::no_fit_advice(model, cluster, costs, r, limit,
                                      persistent > 0.6 * static_cast<double>(limit), persistent, need_gpus);
}

SearchOutcome search_plans(const ModelGraph& model, const Cluster& cluster, const CostModel& costs,
                           const SearchSpace& space_in, const SearchOptions& opts) {
  const auto t0 = std::chrono::steady_clock::now();
  SearchOutcome out;
  out.headroom = opts.headroom;
  const SearchSpace space = normalized(space_in);
  // A pinned token dispatch backend needs routed experts to dispatch: refused in one sentence, not dropped.
  const bool moe = std::any_of(model.order().begin(), model.order().end(),
                               [](const Layer* l) { return l->moe_experts > 0; });
  if (!space.ep_backends.empty() && !moe) {
    out.explanation = "--fix ep_backend: " + model.spec().name +
                      " has no routed experts, so there is no token dispatch to choose; drop the pin";
    return out;
  }
  const Bytes capacity = cluster.spec().gpu.memory_bytes;
  Context c{model,    cluster, costs,
            space,    opts,    static_cast<Bytes>(static_cast<double>(capacity) * (1.0 - opts.headroom)),
            out.stats};
  Pruner pr{c, std::nullopt, 0};
  // Stages 1-3: the layouts without PP, checked, bounded and simulated (MoE models at EP 1 unless --fix ep).
  SearchSpace layouts = layout_space(space);
  if (refine_ep(c)) layouts.ep = {1};
  std::vector<Result> results =
      simulate_all(c, pr.survivors(enumerate_candidates(model, cluster, layouts, out.stats)), true);
  ep_stage(c, pr, results);        // stage 3a
  pipeline_stage(c, pr, results);  // stage 4
  refine_stage(c, pr, results);    // stage 5
  schedule_stage(c, pr, results);  // stage 6
  out.stats.evaluated = static_cast<std::int64_t>(results.size());
  replay_stage(c, results);  // stage 7
  count_over_limit(c, results);
  rank(c, results, out);  // stage 8
  if (out.plans.empty())  // stage 9
    explain_nothing_fits(c, pr, results, out);
  else
    out.explanation = explain(out, results, c.limit);
  if (out.stats.fitting > static_cast<std::int64_t>(out.plans.size()))
    out.explanation +=
        out.plans.size() == 1
            ? fmt::format("\n{} plans fit; only the recommendation is listed (--top 1)", out.stats.fitting)
            : [&] {
                const std::size_t families =
                    out.plans.size() - 1 -
                    (out.plans.size() > 1 && out.fastest && out.plans[1].plan == out.fastest->plan);
                return fmt::format(
                    "\n{} plans fit; listed: the recommendation{}{} the fastest plan of {} other famil{} "
                    "(runtime x TP x PP x CP x EP x AC x HSDP; --top)",
                    out.stats.fitting, out.plans.size() - 1 > families ? ", the fastest plan" : "",
                    families ? " and" : ",", families, families == 1 ? "y" : "ies");
              }();
  out.stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace shardplan
