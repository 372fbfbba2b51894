// The search's refinement and replay stages (search_internal.hpp): the compile / async TP / float8 variants
// of the plans that decide each family (stage 5), and the caching-allocator replay of the plans the output
// can name (stage 7).
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>

#include "planner/report/margin.hpp"
#include "planner/search_internal.hpp"
#include "simulator/memory/memory.hpp"
#include "simulator/plan/plan.hpp"

namespace shardplan::search_detail {

namespace {

/// The compiled variant's peak estimated from the eager one: less the activations compile does not save.
bool fits_compiled(const Context& c, const Result& r) {
  if (r.plan.compile) return false;
  Plan q = r.plan;
  q.compile = true;
  const double saved = static_cast<double>(Simulator::activation_bytes(c.model, r.plan)) -
                       static_cast<double>(Simulator::activation_bytes(c.model, q));
  return static_cast<double>(used_bytes(r)) - saved <= static_cast<double>(c.limit);
}

/// The plans of one family whose variants are simulated: the kRefine fastest that fit, the kRefine fastest
/// that keep the median reserved-memory error as headroom, the tie-rule choices among both, and the kRefine
/// fastest over the limit that fit compiled (or, when none of the family fits, its kRefine smallest).
std::vector<const Result*> refine_bases(const Context& c, std::vector<const Result*> members) {
  std::stable_sort(members.begin(), members.end(), [](const Result* a, const Result* b) {
    return a->tokens_per_s_per_gpu > b->tokens_per_s_per_gpu;
  });
  std::vector<const Result*> fit, safe, over, picks;
  const double safe_limit = static_cast<double>(c.limit) * (1.0 - kReservedMemoryError.median_abs);
  for (const Result* m : members) {
    (under_limit(*m, c.limit) ? fit : over).push_back(m);
    if (static_cast<double>(used_bytes(*m)) <= safe_limit) safe.push_back(m);
  }
  auto add = [&](const Result* m) {
    if (std::find(picks.begin(), picks.end(), m) == picks.end()) picks.push_back(m);
  };
  for (std::size_t i = 0; i < std::min(kRefine, fit.size()); ++i) add(fit[i]);
  for (std::size_t i = 0; i < std::min(kRefine, safe.size()); ++i) add(safe[i]);
  if (!safe.empty()) add(safe[choose_plan(safe, c.opts.tie_tolerance).first]);
  if (!fit.empty()) add(fit[choose_plan(fit, c.opts.tie_tolerance).first]);
  // Over the limit, only plans faster than the family's fastest fitting one can win once compiled (compile
  // speeds a family's plans up by a similar factor).
  std::size_t compiled = 0;
  for (const Result* m : over)
    if (compiled < kRefine && (fit.empty() || m->tokens_per_s_per_gpu > fit.front()->tokens_per_s_per_gpu) &&
        fits_compiled(c, *m))
      add(m), ++compiled;
  if (fit.empty()) {
    std::stable_sort(over.begin(), over.end(),
                     [](const Result* a, const Result* b) { return used_bytes(*a) < used_bytes(*b); });
    for (std::size_t i = 0; i < std::min(kRefine, over.size()); ++i) add(over[i]);
  }
  return picks;
}

/// The pipelined families worth refining: the kPipelineExpand fastest by their fastest plan that fits (or,
/// in a family none of whose plans fits, that fits compiled). A pipelined plan simulates every stage; the
/// other families' variants cannot win once the fastest pipelined ones are known.
std::set<std::string> pipeline_families(const Context& c,
                                        const std::map<std::string, std::vector<const Result*>>& families) {
  std::vector<std::pair<double, std::string>> ranked;
  for (const auto& [name, members] : families) {
    if (members.front()->plan.pp <= 1) continue;
    double best = -1, compiled = -1;
    for (const Result* m : members) {
      if (under_limit(*m, c.limit))
        best = std::max(best, m->tokens_per_s_per_gpu);
      else if (m->tokens_per_s_per_gpu > compiled && fits_compiled(c, *m))
        compiled = m->tokens_per_s_per_gpu;
    }
    if (best > 0 || compiled > 0) ranked.push_back({best > 0 ? best : compiled, name});
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::set<std::string> out;
  for (std::size_t i = 0; i < std::min(kPipelineExpand, ranked.size()); ++i) out.insert(ranked[i].second);
  return out;
}

/// Stage 7: the caching-allocator replay (docs/model.md "Reserved memory"). Stages 3-5 ran without it:
/// each plan's reserved memory is the per-stream lower bound, so a plan over the limit there is over it after
/// the replay too. Replayed are the plans the output can name: over all plans and within each family, the
/// fastest plan that still fits after its replay, and the plan the tie rule chooses. A replayed plan that no
/// longer fits drops out and the choice is made again, until a pass replays nothing.
class Replays {
 public:
  Replays(Context& c, std::vector<Result>& results)
      : c_(c), results_(results), sim_(c.model, c.cluster, c.costs) {}

  void run() {
    std::vector<std::size_t> every(results_.size());
    std::map<std::string, std::vector<std::size_t>> by_family;
    for (std::size_t k = 0; k < results_.size(); ++k) {
      every[k] = k;
      by_family[plan_family(results_[k].plan)].push_back(k);
    }
    // Families are settled best first (by their fastest plan under the limit) until `top` settled families
    // are faster than any unsettled one: those are the listed ones (replays only lower a family).
    const std::size_t top = static_cast<std::size_t>(std::max(1, c_.opts.top));
    do {
      changed_ = false;
      settle(every);
      std::vector<std::pair<double, const std::vector<std::size_t>*>> fams;
      for (auto& [name, idx] : by_family) fams.push_back({best_tps(idx), &idx});
      std::stable_sort(fams.begin(), fams.end(),
                       [](const auto& a, const auto& b) { return a.first > b.first; });
      std::vector<double> settled;
      for (const auto& [tps, idx] : fams) {
        if (tps < 0) break;
        if (settled.size() >= top) {
          std::vector<double> best = settled;
          std::sort(best.begin(), best.end(), std::greater<>());
          if (tps < best[top - 1]) break;
        }
        settle(*idx);
        settled.push_back(chosen_tps(*idx));
      }
    } while (changed_);
  }

 private:
  bool under(std::size_t k) const { return under_limit(results_[k], c_.limit); }

  void replay(std::size_t k) {
    if (results_[k].allocator.replayed) return;
    results_[k] = sim_.run(results_[k].plan);
    // Every path of Simulator::run must report its replay (the loops end only on replayed plans).
    if (!results_[k].allocator.replayed)
      throw std::logic_error("search: a replayed run did not report its allocator replay");
    ++c_.stats.replayed;
    changed_ = true;
  }

  void settle(const std::vector<std::size_t>& idx) {
    std::vector<std::size_t> order = idx;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return results_[a].tokens_per_s_per_gpu > results_[b].tokens_per_s_per_gpu;
    });
    for (std::size_t k : order) {  // the fastest that fits after its replay
      if (!under(k)) continue;
      replay(k);
      if (under(k)) break;
    }
    for (;;) {  // the tie rule's choice, replayed
      std::vector<const Result*> fit;
      std::vector<std::size_t> at;
      for (std::size_t k : order)
        if (under(k)) fit.push_back(&results_[k]), at.push_back(k);
      if (fit.empty()) return;
      const std::size_t k = at[choose_plan(fit, c_.opts.tie_tolerance).first];
      if (results_[k].allocator.replayed) return;
      replay(k);
    }
  }

  double best_tps(const std::vector<std::size_t>& idx) const {
    double best = -1;
    for (std::size_t k : idx)
      if (under(k)) best = std::max(best, results_[k].tokens_per_s_per_gpu);
    return best;
  }

  double chosen_tps(const std::vector<std::size_t>& idx) const {
    std::vector<const Result*> fit;
    for (std::size_t k : idx)
      if (under(k)) fit.push_back(&results_[k]);
    return fit.empty() ? -1.0 : fit[choose_plan(fit, c_.opts.tie_tolerance).first]->tokens_per_s_per_gpu;
  }

  Context& c_;
  std::vector<Result>& results_;
  Simulator sim_;
  bool changed_ = false;
};

}  // namespace

/// Stage 5: the compile / async TP / float8 variants (those the runtime has) of every family's bases (of the
/// pipelined families, the fastest few).
void refine_stage(Context& c, Pruner& pr, std::vector<Result>& results) {
  if (c.space.compile.size() < 2 && c.space.async_tp.size() < 2 && c.space.fp8.size() < 2) return;
  std::map<std::string, std::vector<const Result*>> families;
  for (const Result& r : results) families[plan_family(r.plan)].push_back(&r);
  const std::set<std::string> pipelined = pipeline_families(c, families);
  std::vector<Plan> todo;
  for (const auto& [name, members] : families)
    if (members.front()->plan.pp <= 1 || pipelined.count(name))
      for (const Result* base : refine_bases(c, members))
        for (const Plan& v : variants(base->plan, c.space)) {
          ++c.stats.considered;
          if (auto r = structural_check(c.model, c.cluster, c.space, v, c.stats))
            todo.push_back(std::move(*r));
        }
  append(results, simulate_all(c, pr.survivors(std::move(todo)), false));
}

void replay_stage(Context& c, std::vector<Result>& results) {
  Replays(c, results).run();
}

}  // namespace shardplan::search_detail
