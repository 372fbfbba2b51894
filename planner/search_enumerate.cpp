// Stage 1 of the search: enumerate the candidates of a space and check each structurally (the runtime's
// capability table, the batch arithmetic, a pinned accumulation, then resolve_plan), counting every rejection
// by its typed reason.
#include <fmt/format.h>

#include <algorithm>

#include "planner/search_internal.hpp"
#include "simulator/plan/plan.hpp"
#include "topologies/cluster.hpp"

namespace shardplan {

const char* to_string(Rejection r) {
  switch (r) {
    case Rejection::kCapability:
      return "not in the runtime (capability table)";
    case Rejection::kFp32Reduce:
      return "fp32 precision reduces in fp32";
    case Rejection::kBatchArithmetic:
      return "global batch not a multiple of dp x mbs";
    case Rejection::kGradAccumPinned:
      return "accumulation differs from --fix grad_accum";
    case Rejection::kPipelineMicroBatches:
      return "fewer micro-batches than pipeline ranks";
    case Rejection::kPipelineStages:
      return "pp x virtual stages exceed the blocks + 2";
    case Rejection::kInvalidPlan:
      return "refused by resolve_plan";
    case Rejection::kMemoryBound:
      return "memory lower bound exceeds capacity x (1 - headroom)";
    case Rejection::kSimulatedPeak:
      return "simulated peak exceeds capacity x (1 - headroom)";
  }
  return "?";
}

void Rejections::add(Rejection r, const std::string& ex) {
  if (count[r]++ == 0) example[r] = ex;
}

namespace search_detail {

namespace {

/// One parallel layout: the knobs the enumeration loops over outside the per-plan knobs.
struct Layout {
  Runtime runtime = Runtime::kFsdp2;
  int tp = 1, cp = 1, pp = 1, zero = 3, group = 0, ep = 1;
  PpSchedule schedule = PpSchedule::k1F1B;
  int virtual_stages = 1;
};

std::int64_t seq_of(const ModelGraph& model, const SearchSpace& sp) {
  return sp.seq > 0 ? sp.seq : sp.base.seq > 0 ? sp.base.seq : model.spec().seq;
}

/// Some micro-batch size of the space gives dp x mbs dividing the batch, with at least pp micro-batches.
bool batch_works(const Cluster& cluster, const SearchSpace& sp, int tp, int pp, int cp) {
  const std::int64_t ranks = static_cast<std::int64_t>(tp) * pp * cp;
  if (ranks > cluster.gpus() || cluster.gpus() % ranks != 0) return false;
  const std::int64_t dp = cluster.gpus() / ranks;
  for (int mbs : sp.mbs)
    if (sp.global_batch % (dp * mbs) == 0 && sp.global_batch / (dp * mbs) >= pp) return true;
  return false;
}

/// One sequence's activations under full AC do not fit one GPU at this TP degree.
bool activations_overflow(const ModelGraph& model, const Cluster& cluster, const SearchSpace& sp, int tp) {
  Plan probe = sp.base;
  probe.tp = tp;
  probe.mbs = 1;
  probe.ac = AcMode::kFull;
  probe.seq = seq_of(model, sp);
  probe.cp = probe.ep = probe.pp = 1;
  probe.offload = Offload::kNone;
  try {
    const Plan r = resolve_plan(probe, model, cluster);
    return Simulator::activation_bytes(model, r) > cluster.spec().gpu.memory_bytes;
  } catch (const InputError&) {  // this TP degree is rejected with its reason by the enumeration
    return false;
  }
}

}  // namespace

bool has_experts(const ModelGraph& model) {
  for (const Layer* l : model.order())
    if (l->moe_experts > 0) return true;
  return false;
}

std::vector<int> ep_degrees(const ModelGraph& model, const SearchSpace& sp, int fsdp_ranks) {
  if (!sp.ep.empty()) return sp.ep;
  int experts = 0;
  for (const Layer* l : model.order())
    if (l->moe_experts > 0) experts = experts == 0 ? l->moe_experts : std::min(experts, l->moe_experts);
  std::vector<int> out = {1};
  for (int ep = 2; experts > 0 && ep <= experts && fsdp_ranks > 0 && ep <= fsdp_ranks; ep *= 2)
    if (experts % ep == 0 && fsdp_ranks % ep == 0) out.push_back(ep);
  return out;
}

namespace {

/// Shard groups of a layout: divisors of dp that respect node boundaries (within a node: powers of two
/// dividing the node's data-parallel ranks; across: whole nodes).
std::vector<int> shard_groups(const SearchSpace& sp, int zero, int dp, int tp_cp, int node) {
  if (!sp.shard_groups.empty()) return sp.shard_groups;
  if (zero == 0) return {0};
  std::vector<int> groups;
  for (int g = 1; g <= dp; ++g)
    if (dp % g == 0 && ((g * tp_cp) % node == 0 || node % (g * tp_cp) == 0) &&
        (g == dp || (g & (g - 1)) == 0 || g * tp_cp >= node))
      groups.push_back(g);
  return groups;
}

bool contains(const std::vector<int>& v, int x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

/// `p` with each token dispatch backend the space lists (--fix ep_backend=V1,V2) when it has EP, else `p`.
template <class F>
void for_each_ep_backend(const SearchSpace& sp, Plan p, F visit) {
  if (p.ep == 1 || sp.ep_backends.empty()) return visit(p);
  for (EpBackend b : sp.ep_backends) {
    p.ep_backend = b;
    visit(p);
  }
}

/// Every per-plan knob combination of a layout: mbs x ac x wrap x prefetch x reduce x offload x compile x
/// async TP x float8 (async TP only with TP: without it the knob does nothing).
template <class F>
void for_each_knobs(const SearchSpace& sp, const Layout& l, F visit) {
  // --fix optimizer=V1,V2: every layout with each listed optimizer (a runtime that lacks one refuses it).
  const std::vector<Optimizer> optimizers =
      sp.optimizers.empty() ? std::vector<Optimizer>{sp.base.optimizer} : sp.optimizers;
  for (Optimizer opt : optimizers)
    for (int mbs : sp.mbs)
      for (AcMode ac : sp.ac)
        for (int wrap : sp.wrap)
          for (int pf : sp.prefetch)
            for (Dtype rd : sp.reduce)
              for (Offload off : sp.offload)
                for (bool compile : sp.compile)
                  for (bool async_tp : sp.async_tp)
                    for (Fp8 fp8 : sp.fp8) {
                      if (async_tp && l.tp == 1) continue;
                      Plan p = sp.base;
                      p.optimizer = opt;
                      p.runtime = l.runtime;
                      p.zero = l.zero;
                      p.tp = l.tp;
                      p.cp = l.cp;
                      p.ep = l.ep;
                      p.pp = l.pp;
                      p.pp_schedule = l.schedule;
                      p.virtual_stages = l.pp > 1 ? l.virtual_stages : sp.base.virtual_stages;
                      p.shard_group = l.group;
                      p.mbs = mbs;
                      p.ac = ac;
                      p.wrap = wrap;
                      p.prefetch = pf;
                      p.reduce_dtype = rd;
                      p.offload = off;
                      p.compile = compile;
                      p.async_tp = async_tp;
                      p.fp8 = fp8;
                      if (sp.seq > 0) p.seq = sp.seq;
                      if (l.zero == 3 && l.pp == 1) p.reshard_after_forward = true;
                      for_each_ep_backend(sp, p, visit);
                    }
}

/// The ZeRO stage a runtime's stages run under PP: the highest of the space's stages the table allows there
/// (FSDP2: 2 or 3 both run as SHARD_GRAD_OP, torchtitan's default; DeepSpeed's PipelineEngine: 0 or 1).
std::optional<int> pipeline_zero(const SearchSpace& sp, Runtime rt) {
  std::optional<int> best;
  for (int z : sp.zero) {
    if (z >= 2 && !has(rt, Feature::kPipelineSharded)) continue;
    if (z == 1 && !has(rt, Feature::kZero1)) continue;
    if (z >= 2 && !has(rt, z == 2 ? Feature::kZero2 : Feature::kZero3)) continue;
    if (!best || z > *best) best = z;
  }
  if (best && *best >= 2) best = 3;  // resolved to 2 under PP (reshard_after_forward=False)
  return best;
}

}  // namespace

double gib(double bytes) {
  return bytes / static_cast<double>(kGiB);
}

SearchSpace normalized(const SearchSpace& space) {
  SearchSpace sp = space;
  if (sp.base.fp8_all_gather && sp.fp8 == std::vector<Fp8>{Fp8::kNone}) sp.fp8 = {Fp8::kTensorwise};
  // --fix async_tp=true with compile searched: async TP is an inductor pass in torch and torchtitan
  // (capabilities.hpp), so its plans are the compiled ones.
  if (sp.async_tp == std::vector<bool>{true} &&
      std::find(sp.compile.begin(), sp.compile.end(), true) != sp.compile.end())
    sp.compile = {true};
  return sp;
}

bool pipeline_pinned(const SearchSpace& sp) {
  return !sp.pp_schedules.empty() || !sp.virtual_stages.empty() || !sp.base.pp_layers.empty();
}

std::vector<int> cp_degrees(const ModelGraph& model, const Cluster& cluster, const SearchSpace& sp, int tp,
                            int pp) {
  if (!sp.cp.empty()) return sp.cp;
  std::vector<int> out = {1};
  const bool long_context = seq_of(model, sp) >= 16384 || activations_overflow(model, cluster, sp, tp);
  // CP for the batch arithmetic: only where no TP degree of the space gives dp x mbs dividing the batch at
  // this pipeline degree without it (CP trades data-parallel ranks for sequence shards as TP does).
  const bool for_batch = sp.global_batch > 0 && std::none_of(sp.tp.begin(), sp.tp.end(), [&](int t) {
                           return batch_works(cluster, sp, t, pp, 1);
                         });
  if (!long_context && !for_batch) return out;
  for (int cp = 2; cp <= 16 && static_cast<std::int64_t>(cp) * tp * pp <= cluster.gpus(); cp *= 2) {
    if (long_context) {
      out.push_back(cp);
    } else if (batch_works(cluster, sp, tp, pp, cp)) {
      out.push_back(cp);  // for the batch only the smallest degree that works: it keeps dp the largest
      break;
    }
  }
  return out;
}

std::vector<std::pair<PpSchedule, int>> pipeline_schedules(const ModelGraph& model, const SearchSpace& sp,
                                                           Runtime rt, int pp) {
  const int most = (model.blocks() + 2) / pp;  // one block per stage (torchtitan's split)
  const bool pinned_schedules = !sp.pp_schedules.empty();
  std::vector<PpSchedule> scheds(EnumValues<PpSchedule>::v.begin(), EnumValues<PpSchedule>::v.end());
  if (pinned_schedules) scheds = sp.pp_schedules;
  std::vector<std::pair<PpSchedule, int>> out;
  for (PpSchedule s : scheds) {
    if (!pinned_schedules && !has(rt, schedule_feature(s))) continue;
    const bool single = s == PpSchedule::kGpipe || s == PpSchedule::k1F1B;
    const bool v_style = s == PpSchedule::kZbv || s == PpSchedule::kDualPipeV;
    std::vector<int> vs;
    if (!sp.virtual_stages.empty()) {
      for (int v : sp.virtual_stages)  // pinned: the values the schedule takes (others go to other schedules)
        if (pinned_schedules || (single ? v == 1 : v_style ? v == 2 : v >= 2)) vs.push_back(v);
    } else if (single) {
      vs = {1};
    } else if (v_style) {
      vs = {2};
    } else {
      for (int v = 2; v <= most; v *= 2) vs.push_back(v);
      if (most > 2 && !contains(vs, most)) vs.push_back(most);
    }
    for (int v : vs) out.push_back({s, v});
  }
  return out;
}

std::optional<Plan> structural_check(const ModelGraph& model, const Cluster& cluster, const SearchSpace& sp,
                                     const Plan& p, SearchStats& stats) {
  Rejections& rj = stats.rejections;
  const int gpus = cluster.gpus();
  const std::int64_t ranks = static_cast<std::int64_t>(p.tp) * p.cp * p.pp;
  const int dp = ranks > 0 && gpus % ranks == 0 ? static_cast<int>(gpus / ranks) : 0;
  if (const auto f = capability_refusal(p, dp > 0 ? dp : 1)) {
    ++rj.capability[*f];
    rj.add_lazy(Rejection::kCapability,
                [&] { return plan_to_flags(p) + "  (" + refusal_sentence(p.runtime, *f) + ")"; });
    return std::nullopt;
  }
  if (p.precision == Precision::kFp32 && p.reduce_dtype == Dtype::kBf16) {
    rj.add_lazy(Rejection::kFp32Reduce, [&] { return plan_to_flags(p); });
    return std::nullopt;
  }
  if (dp > 0 && sp.global_batch > 0) {
    const std::int64_t per_step = static_cast<std::int64_t>(dp) * p.mbs;
    if (sp.global_batch % per_step != 0) {
      rj.add_lazy(Rejection::kBatchArithmetic, [&] {
        return plan_to_flags(p) + fmt::format("  (global batch {} is not a multiple of dp x mbs = {} x {})",
                                              sp.global_batch, dp, p.mbs);
      });
      return std::nullopt;
    }
    const std::int64_t m = sp.global_batch / per_step;
    if (sp.grad_accum && m != *sp.grad_accum) {
      rj.add_lazy(Rejection::kGradAccumPinned, [&] {
        return plan_to_flags(p) +
               fmt::format("  (global batch {} needs {} micro-batches)", sp.global_batch, m);
      });
      return std::nullopt;
    }
    if (p.pp > 1 && m < p.pp) {
      rj.add_lazy(Rejection::kPipelineMicroBatches, [&] {
        return plan_to_flags(p) + fmt::format("  ({} micro-batches for {} pipeline ranks)", m, p.pp);
      });
      return std::nullopt;
    }
  }
  if (p.pp > 1 && p.pp * std::max(p.virtual_stages, 1) > model.blocks() + 2) {
    rj.add_lazy(Rejection::kPipelineStages, [&] {
      return plan_to_flags(p) + fmt::format("  ({} stages for {} blocks)", p.stages(), model.blocks());
    });
    return std::nullopt;
  }
  try {
    return resolve_plan(p, model, cluster, sp.global_batch);
  } catch (const InputError& e) {
    rj.add_lazy(Rejection::kInvalidPlan, [&] { return plan_to_flags(p) + "  (" + e.what() + ")"; });
    return std::nullopt;
  }
}

std::vector<Plan> variants(const Plan& p, const SearchSpace& sp) {
  std::vector<Plan> out;
  for (bool compile : sp.compile)
    for (bool async_tp : sp.async_tp)
      for (Fp8 fp8 : sp.fp8) {
        if (compile == p.compile && async_tp == p.async_tp && fp8 == p.fp8) continue;
        if (async_tp && p.tp == 1) continue;
        Plan q = p;
        q.compile = compile, q.async_tp = async_tp, q.fp8 = fp8;
        if (capability_refusal(q, q.dp)) continue;  // e.g. async TP without compile: no such plan
        out.push_back(q);
      }
  return out;
}

}  // namespace search_detail

using namespace search_detail;

std::vector<Plan> enumerate_candidates(const ModelGraph& model, const Cluster& cluster,
                                       const SearchSpace& space, SearchStats& stats) {
  std::vector<Plan> out;
  const SearchSpace sp = normalized(space);
  const int node = cluster.spec().node.nvlink_domain_gpus;
  // --fix pp without 1: every candidate is pipelined (enumerate_pipeline_candidates).
  if (!sp.pp.empty() && !contains(sp.pp, 1)) return out;
  // A pinned schedule, virtual stages or stage split names pipelined plans only.
  if (sp.pp.empty() && pipeline_pinned(sp)) return out;
  for (Runtime rt : sp.runtimes)
    for (int tp : sp.tp)
      for (int cp : cp_degrees(model, cluster, sp, tp, 1))
        for (int zero : sp.zero) {
          // reshard_after_forward is ZeRO-3's defining knob (false = SHARD_GRAD_OP, searched as zero 2).
          const bool raf = zero == 3;
          if (std::find(sp.reshard_after_forward.begin(), sp.reshard_after_forward.end(), raf) ==
              sp.reshard_after_forward.end())
            continue;
          const int dp = cluster.gpus() / std::max(1, tp * cp);
          for (int g : shard_groups(sp, zero, dp, tp * cp, node))
            for (int ep : ep_degrees(model, sp, (g == 0 ? dp : g) * cp)) {
              Layout l;
              l.runtime = rt, l.tp = tp, l.cp = cp, l.zero = zero, l.group = g, l.ep = ep;
              for_each_knobs(sp, l, [&](const Plan& p) {
                ++stats.considered;
                if (auto r = structural_check(model, cluster, sp, p, stats)) out.push_back(std::move(*r));
              });
            }
        }
  return out;
}

namespace search_detail {

namespace {
// The layout pass's schedules: 1F1B and interleaved 1F1B with two stages per rank (the others, and more
// virtual stages, are tried on the fastest pipelined plans: search.cpp's schedule stage), or the pinned ones.
std::vector<std::pair<PpSchedule, int>> layout_schedules(const ModelGraph& model, const SearchSpace& sp,
                                                         Runtime rt, int pp) {
  std::vector<std::pair<PpSchedule, int>> all = pipeline_schedules(model, sp, rt, pp), out;
  if (!sp.pp_schedules.empty() || !sp.virtual_stages.empty()) return all;  // pinned: all of them
  for (const auto& sv : all)
    if (sv == std::pair{PpSchedule::k1F1B, 1} || sv == std::pair{PpSchedule::kInterleaved1F1B, 2})
      out.push_back(sv);
  return out.empty() ? all : out;
}
}  // namespace

std::vector<Plan> enumerate_pipeline(const ModelGraph& model, const Cluster& cluster,
                                     const SearchSpace& space, const std::vector<int>& pps,
                                     SearchStats& stats, bool layout) {
  std::vector<Plan> out;
  SearchSpace sp = normalized(space);
  // Pipeline stages are FSDP units of their own (torchtitan): one block per unit, one unit ahead; the
  // compile / async TP / float8 values beyond the first are refined on the fastest plans (search.cpp).
  sp.wrap = {1};
  sp.prefetch = {1};
  sp.reduce = {sp.reduce.front()};
  sp.compile = {sp.compile.front()};
  sp.async_tp = {sp.async_tp.front()};
  sp.fp8 = {sp.fp8.front()};
  for (Runtime rt : sp.runtimes) {
    // Runtimes without pipelines are left out unless the degrees are pinned (then their refusal is counted).
    if (!has(rt, Feature::kPipeline) && space.pp.empty()) continue;
    const auto zero = pipeline_zero(sp, rt);
    if (!zero) continue;
    for (int tp : sp.tp)
      for (int pp : pps) {
        if (pp <= 1 || cluster.gpus() % (tp * pp) != 0) continue;
        for (int cp : cp_degrees(model, cluster, sp, tp, pp))
          for (const auto& [sched, V] :
               layout ? layout_schedules(model, sp, rt, pp) : pipeline_schedules(model, sp, rt, pp)) {
            for (int g : sp.shard_groups.empty() ? std::vector<int>{0} : sp.shard_groups)
              for (int ep : sp.ep.empty() ? std::vector<int>{1} : sp.ep) {
                Layout l;
                l.runtime = rt, l.tp = tp, l.cp = cp, l.pp = pp, l.zero = *zero, l.group = g, l.ep = ep;
                l.schedule = sched, l.virtual_stages = V;
                for_each_knobs(sp, l, [&](const Plan& p) {
                  ++stats.considered;
                  if (auto r = structural_check(model, cluster, sp, p, stats)) out.push_back(std::move(*r));
                });
              }
          }
      }
  }
  return out;
}

}  // namespace search_detail

std::vector<Plan> enumerate_pipeline_candidates(const ModelGraph& model, const Cluster& cluster,
                                                const SearchSpace& space, const std::vector<int>& pps,
                                                SearchStats& stats) {
  return enumerate_pipeline(model, cluster, space, pps, stats, false);
}

}  // namespace shardplan
