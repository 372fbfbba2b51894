// Staged plan search: enumerate -> resolve (structural validity) -> memory lower bound (prune) -> full
// simulation on worker threads -> deterministic ranking.
#include "planner/search.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "planner/report/margin.hpp"
#include "simulator/plan/plan.hpp"
#include "topologies/cluster.hpp"

namespace shardplan {

namespace {
using Assign = std::function<void(SearchSpace&, const std::vector<Plan>&)>;

template <class T, class F>
std::vector<T> each(const std::vector<Plan>& v, F f) {
  std::vector<T> out;
  for (const Plan& p : v) out.push_back(f(p));
  return out;
}

// The searched knobs: run-record key -> how a --fix list of values (each parsed into a Plan by the knob
// table) replaces the search dimension.
const std::vector<std::pair<std::string, Assign>>& dimensions() {
  static const std::vector<std::pair<std::string, Assign>> d = {
      {"runtime",
       [](SearchSpace& s, const std::vector<Plan>& v) {
         s.runtimes = each<Runtime>(v, [](const Plan& p) { return p.runtime; });
       }},
      {"zero",
       [](SearchSpace& s, const std::vector<Plan>& v) {
         s.zero = each<int>(v, [](const Plan& p) { return p.zero; });
       }},
      {"shard_group",
       [](SearchSpace& s, const std::vector<Plan>& v) {
         s.shard_groups = each<int>(v, [](const Plan& p) { return p.shard_group; });
       }},
      {"tp", [](SearchSpace& s,
                const std::vector<Plan>& v) { s.tp = each<int>(v, [](const Plan& p) { return p.tp; }); }},
      {"mbs", [](SearchSpace& s,
                 const std::vector<Plan>& v) { s.mbs = each<int>(v, [](const Plan& p) { return p.mbs; }); }},
      {"ac", [](SearchSpace& s,
                const std::vector<Plan>& v) { s.ac = each<AcMode>(v, [](const Plan& p) { return p.ac; }); }},
      {"wrap",
       [](SearchSpace& s, const std::vector<Plan>& v) {
         s.wrap = each<int>(v, [](const Plan& p) { return p.wrap; });
       }},
      {"prefetch",
       [](SearchSpace& s, const std::vector<Plan>& v) {
         s.prefetch = each<int>(v, [](const Plan& p) { return p.prefetch; });
       }},
      {"reshard_after_forward",
       [](SearchSpace& s, const std::vector<Plan>& v) {
         s.reshard_after_forward = each<bool>(v, [](const Plan& p) { return p.reshard(); });
       }},
      {"reduce_dtype",
       [](SearchSpace& s, const std::vector<Plan>& v) {
         s.reduce = each<Dtype>(v, [](const Plan& p) { return p.reduce(); });
       }},
      {"offload",
       [](SearchSpace& s, const std::vector<Plan>& v) {
         s.offload = each<Offload>(v, [](const Plan& p) { return p.offload; });
       }},
      {"compile",
       [](SearchSpace& s, const std::vector<Plan>& v) {
         s.compile = each<bool>(v, [](const Plan& p) { return p.compile; });
       }},
      {"async_tp",
       [](SearchSpace& s, const std::vector<Plan>& v) {
         s.async_tp = each<bool>(v, [](const Plan& p) { return p.async_tp; });
       }},
      {"fp8", [](SearchSpace& s,
                 const std::vector<Plan>& v) { s.fp8 = each<Fp8>(v, [](const Plan& p) { return p.fp8; }); }},
      {"pp", [](SearchSpace& s,
                const std::vector<Plan>& v) { s.pp = each<int>(v, [](const Plan& p) { return p.pp; }); }},
      {"cp", [](SearchSpace& s,
                const std::vector<Plan>& v) { s.cp = each<int>(v, [](const Plan& p) { return p.cp; }); }},
      {"ep", [](SearchSpace& s,
                const std::vector<Plan>& v) { s.ep = each<int>(v, [](const Plan& p) { return p.ep; }); }},
  };
  return d;
}
}  // namespace

const std::vector<std::string>& SearchSpace::searched_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k;
    for (const auto& [name, assign] : dimensions()) k.push_back(name);
    return k;
  }();
  return keys;
}

void SearchSpace::fix(const std::string& kv) {
  auto eq = kv.find('=');
  if (eq == std::string::npos) throw InputError::flag("--fix", "expected KEY=VALUE, got \"" + kv + "\"");
  std::string key = kv.substr(0, eq), v = kv.substr(eq + 1);
  std::replace(key.begin(), key.end(), '-', '_');
  const Knob* k = find_knob(key);
  if (!k) {
    const std::vector<std::string> keys = knob_keys();
    std::string sug = did_you_mean_list(key, keys);
    throw InputError::flag("--fix", "unknown knob \"" + key + "\"" +
                                        (sug.empty() ? "" : " (did you mean \"" + sug + "\"?)") +
                                        "; knobs: " + join_names(keys));
  }
  const std::string where = "--fix " + key;
  // A switch named by its flag (foreach_optimizer) means what the flag sets: foreach_optimizer=true is
  // fused_optimizer=false.
  auto value = [&](const std::string& item) {
    if (k->kind != KnobKind::kSwitch || key == k->key || std::string(k->switch_sets) == "true") return item;
    return item == "true" ? std::string("false") : item == "false" ? std::string("true") : item;
  };
  for (const auto& [name, assign] : dimensions()) {
    if (name != k->key) continue;
    std::vector<Plan> values;
    std::size_t pos = 0;
    while (true) {
      const std::size_t c = v.find(',', pos);
      Plan one;
      set_knob(*k, one, value(v.substr(pos, c == std::string::npos ? std::string::npos : c - pos)), where);
      values.push_back(one);
      if (c == std::string::npos) break;
      pos = c + 1;
    }
    assign(*this, values);
    return;
  }
  if (v.find(',') != std::string::npos && k->kind != KnobKind::kText)  // --fix pp_layers=3,4,4,3 is one value
    throw InputError::flag(where, "is not searched: give one value, got \"" + v + "\"");
  set_knob(*k, base, value(v), where);
  if (std::string(k->key) == "grad_accum") grad_accum = base.grad_accum;
  if (std::string(k->key) == "seq") seq = base.seq;
}

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
  // itself, not counted): ZeRO stage other than 3, wrap > 1 block, prefetch > 1, reduction not in fp32,
  // offload, torch.compile, async TP, float8.
  k.non_default_knobs = (p.zero != 3) + (p.wrap != 1) + (p.prefetch != 1) + (p.reduce() != Dtype::kFp32) +
                        (p.offload != Offload::kNone) + p.compile + p.async_tp + (p.fp8 != Fp8::kNone);
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
  return fmt::format("{} tp{}{}{} ac={} {}", to_string(p.runtime), p.tp, pipe, cp_ep, to_string(p.ac),
                     hsdp          ? "hsdp"
                     : p.zero == 0 ? "ddp"
                                   : "fsdp");
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

// Context-parallel degrees searched at one TP degree (SearchSpace::cp): 1, and 2..16 when the sequence is
// long (16k+) or one sequence's activations do not fit one GPU even under full AC.
static std::vector<int> cp_degrees(const ModelGraph& model, const Cluster& cluster, const SearchSpace& sp,
                                   int tp) {
  if (!sp.cp.empty()) return sp.cp;
  std::vector<int> out = {1};
  const std::int64_t seq = sp.seq > 0 ? sp.seq : sp.base.seq > 0 ? sp.base.seq : model.spec().seq;
  bool long_context = seq >= 16384;
  if (!long_context) {
    Plan probe = sp.base;
    probe.tp = tp;
    probe.mbs = 1;
    probe.ac = AcMode::kFull;
    probe.seq = seq;
    probe.cp = probe.ep = 1;
    try {
      const Plan r = resolve_plan(probe, model, cluster);
      long_context = Simulator::activation_bytes(model, r) > cluster.spec().gpu.memory_bytes;
    } catch (const InputError&) {  // this TP degree is rejected with its reason by the enumeration
    }
  }
  if (long_context)
    for (int cp = 2; cp <= 16 && cp * tp <= cluster.gpus(); cp *= 2) out.push_back(cp);
  return out;
}

// Expert-parallel degrees searched for a dp_shard x cp group (SearchSpace::ep): 1 for dense models; for MoE
// models the powers of two dividing the expert count and dp_shard x cp (torchtitan carves EP out of them).
static std::vector<int> ep_degrees(const ModelGraph& model, const SearchSpace& sp, int fsdp_ranks) {
  if (!sp.ep.empty()) return sp.ep;
  int experts = 0;
  for (const Layer* l : model.order())
    if (l->moe_experts > 0) experts = experts == 0 ? l->moe_experts : std::min(experts, l->moe_experts);
  std::vector<int> out = {1};
  for (int ep = 2; experts > 0 && ep <= experts && fsdp_ranks > 0 && ep <= fsdp_ranks; ep *= 2)
    if (experts % ep == 0 && fsdp_ranks % ep == 0) out.push_back(ep);
  return out;
}

static void reject(Rejections& r, const std::string& reason, const std::string& example) {
  if (r.count[reason]++ == 0) r.example[reason] = example;
}

std::vector<Plan> enumerate_candidates(const ModelGraph& model, const Cluster& cluster, const SearchSpace& sp,
                                       SearchStats& stats) {
  std::vector<Plan> out;
  const int node = cluster.spec().node.nvlink_domain_gpus;
  // --fix pp without 1: every candidate is pipelined (enumerate_pipeline_candidates).
  if (!sp.pp.empty() && std::find(sp.pp.begin(), sp.pp.end(), 1) == sp.pp.end()) return out;
  for (Runtime rt : sp.runtimes)
    for (int tp : sp.tp)
      for (int cp : cp_degrees(model, cluster, sp, tp))
        for (int zero : sp.zero) {
          // Shard groups: divisors of dp that respect node boundaries (within a node: powers of two dividing
          // the node's data-parallel ranks; across: whole nodes).
          // pp joins this product (mesh order: pp, dp_replicate, dp_shard, cp, tp; tp innermost)
          const int dp = cluster.gpus() / std::max(1, tp * cp);
          std::vector<int> groups = sp.shard_groups;
          if (groups.empty()) {
            if (zero == 0)
              groups = {0};
            else
              for (int g = 1; g <= dp; ++g)
                if (dp % g == 0 && ((g * tp * cp) % node == 0 || node % (g * tp * cp) == 0) &&
                    (g == dp || (g & (g - 1)) == 0 || g * tp * cp >= node))
                  groups.push_back(g);
          }
          // reshard_after_forward is ZeRO-3's defining knob (false = SHARD_GRAD_OP, searched as zero 2).
          const bool raf = zero == 3;
          if (std::find(sp.reshard_after_forward.begin(), sp.reshard_after_forward.end(), raf) ==
              sp.reshard_after_forward.end())
            continue;
          for (int g : groups)
            for (int ep : ep_degrees(model, sp, (g == 0 ? dp : g) * cp))
              for (int mbs : sp.mbs)
                for (AcMode ac : sp.ac)
                  for (int wrap : sp.wrap)
                    for (int pf : sp.prefetch)
                      for (Dtype rd : sp.reduce)
                        for (Offload off : sp.offload)
                          for (bool compile : sp.compile)
                            for (bool async_tp : sp.async_tp)
                              for (Fp8 fp8 : sp.fp8) {
                                if (async_tp && tp == 1)
                                  continue;  // async TP overlaps TP collectives: none without TP
                                ++stats.considered;
                                Plan p = sp.base;
                                p.runtime = rt;
                                p.zero = zero;
                                p.tp = tp;
                                p.shard_group = g;
                                p.mbs = mbs;
                                p.ac = ac;
                                p.wrap = wrap;
                                p.prefetch = pf;
                                p.reduce_dtype = rd;
                                p.offload = off;
                                p.compile = compile;
                                p.async_tp = async_tp;
                                p.fp8 = fp8;
                                p.cp = cp;
                                p.ep = ep;
                                if (sp.seq > 0) p.seq = sp.seq;
                                if (zero == 3) p.reshard_after_forward = true;
                                if (rt != Runtime::kFsdp2 &&
                                    pf > 1) {  // explicit prefetch depth is an FSDP2 knob: not a candidate
                                  --stats.considered;
                                  continue;
                                }
                                if (p.precision == Precision::kFp32 && rd == Dtype::kBf16) {
                                  reject(stats.rejections, "fp32 precision reduces in fp32",
                                         plan_to_flags(p));
                                  continue;
                                }
                                try {
                                  Plan r = resolve_plan(p, model, cluster, sp.global_batch);
                                  if (sp.grad_accum && r.grad_accum != *sp.grad_accum) {
                                    reject(stats.rejections, "--grad-accum differs from --fix grad_accum",
                                           plan_to_flags(r) +
                                               fmt::format("  (global batch {} needs {} micro-batches)",
                                                           sp.global_batch, r.grad_accum));
                                    continue;
                                  }
                                  out.push_back(r);
                                } catch (const InputError& e) {
                                  // Group reasons by flag and the start of the message (numbers stripped).
                                  std::string key = e.where();
                                  std::string msg = std::string(e.what());
                                  if (msg.find("global batch") != std::string::npos)
                                    key += " not a multiple of dp x mbs";
                                  else if (msg.find("does not divide") != std::string::npos)
                                    key += " does not divide";
                                  else if (msg.find("no ZeRO-1") != std::string::npos)
                                    key += " has no ZeRO-1 mode";
                                  else if (msg.find("exceeds") != std::string::npos)
                                    key += " exceeds the limit";
                                  else if (msg.find("hybrid") != std::string::npos)
                                    key += " HSDP not modelled for deepspeed";
                                  else if (e.where() == "--offload")
                                    key += " not available for this runtime and stage";
                                  reject(stats.rejections, key, plan_to_flags(p) + "  (" + msg + ")");
                                }
                              }
        }
  return out;
}

// ---- pipeline parallelism ----
// PP candidates: FSDP2 stages (torchtitan's layout: TP innermost, FSDP over the data-parallel ranks of a
// stage, reshard_after_forward=False under PP), 1F1B and interleaved 1F1B with two stages per rank (the
// schedules torchtitan's Llama 3.1 405B configs use), pp dividing gpus / tp, at most 32 ranks, at least two
// blocks per stage, and at least pp micro-batches per step.
std::vector<Plan> enumerate_pipeline_candidates(const ModelGraph& model, const Cluster& cluster,
                                                const SearchSpace& sp, const std::vector<int>& pps,
                                                SearchStats& stats) {
  std::vector<Plan> out;
  if (std::find(sp.runtimes.begin(), sp.runtimes.end(), Runtime::kFsdp2) == sp.runtimes.end()) return out;
  // FSDP stages under PP are SHARD_GRAD_OP (zero 2): only when the search allows a sharded stage.
  if (std::none_of(sp.zero.begin(), sp.zero.end(), [](int z) { return z >= 2; })) return out;
  std::vector<std::pair<PpSchedule, int>> schedules = {{PpSchedule::k1F1B, 1},
                                                       {PpSchedule::kInterleaved1F1B, 2}};
  if (sp.base.pp_schedule != PpSchedule::k1F1B)  // --fix pp_schedule=S
    schedules = {{sp.base.pp_schedule, sp.base.virtual_stages}};
  for (int tp : sp.tp)
    for (int pp : pps) {
      if (pp <= 1 || pp > 32) continue;
      if (cluster.gpus() % (tp * pp) != 0) continue;
      for (const auto& [sched, V] : schedules) {
        if (2 * pp * std::max(V, 1) > model.blocks() + 2) continue;  // stages of fewer than two blocks
        for (int mbs : sp.mbs)
          for (AcMode ac : sp.ac)
            for (Offload off : sp.offload) {
              ++stats.considered;
              Plan p = sp.base;
              p.runtime = Runtime::kFsdp2;
              p.zero = 3;
              p.tp = tp;
              p.pp = pp;
              p.pp_schedule = sched;
              p.virtual_stages = V;
              p.shard_group = 0;
              p.mbs = mbs;
              p.ac = ac;
              p.wrap = 1;
              p.prefetch = 1;
              p.reduce_dtype = sp.reduce.front();
              p.offload = off;
              p.compile = sp.compile.front();
              p.async_tp = tp > 1 && sp.async_tp.front();
              p.fp8 = sp.fp8.front();
              if (sp.seq > 0) p.seq = sp.seq;
              try {
                Plan r = resolve_plan(p, model, cluster, sp.global_batch);
                if (r.grad_accum < pp) {
                  reject(stats.rejections, "--pp fewer micro-batches than pipeline ranks", plan_to_flags(r));
                  continue;
                }
                if (sp.grad_accum && r.grad_accum != *sp.grad_accum) {
                  reject(stats.rejections, "--grad-accum differs from --fix grad_accum", plan_to_flags(r));
                  continue;
                }
                out.push_back(r);
              } catch (const InputError& e) {
                reject(stats.rejections, e.where() + " invalid pipeline plan",
                       plan_to_flags(p) + "  (" + e.what() + ")");
              }
            }
      }
    }
  return out;
}

std::string binding_constraint(const Result& r) {
  const double used = static_cast<double>(r.peak_reserved_bytes + r.overhead.total());
  if (!r.fits || used > 0.9 * static_cast<double>(r.capacity_bytes)) return "memory";
  if (r.exposed_comm_s > 0.15 * r.step_s) return "exposed communication";
  if (r.pipeline && r.pipeline->bubble_fraction > 0.15) return "pipeline bubble";
  if (r.step_s > 0 && r.compute_s < 0.75 * r.step_s) return "CPU / launch overhead";
  return "compute";
}

// What would help a plan that does not fit, naming only settings the closest plan does not have yet.
static std::string no_fit_advice(const Plan& c, bool persistent_bound, double persistent_bytes,
                                 double need_gpus, int nvlink_domain_gpus) {
  std::vector<std::string> tips;
  if (persistent_bound) {
    tips.push_back(fmt::format("shard over more GPUs (about {:.0f}+ GPUs for ZeRO-3)", need_gpus));
    if (c.zero < 3) tips.push_back(fmt::format("--zero 3 (the closest uses --zero {})", c.zero));
    if (c.offload == Offload::kNone)
      tips.push_back("offload to the host (--offload params, or --offload optimizer with deepspeed)");
    else if (c.offload == Offload::kOptimizer)
      tips.push_back("offload the parameters too (--offload params with --zero 3)");
    if (c.tp < nvlink_domain_gpus)
      tips.push_back(fmt::format("more tensor parallelism (the closest uses --tp {})", c.tp));
  } else {
    if (c.ac != AcMode::kFull)
      tips.push_back(fmt::format("--ac full (the closest uses --ac {})", to_string(c.ac)));
    if (c.mbs > 1) tips.push_back(fmt::format("a smaller --mbs (the closest uses {})", c.mbs));
    if (c.tp < nvlink_domain_gpus)
      tips.push_back(fmt::format("more tensor parallelism (the closest uses --tp {})", c.tp));
    if (tips.empty())
      tips.push_back(fmt::format("more GPUs or a shorter --seq (the closest uses {})", c.seq));
  }
  std::string joined;
  for (std::size_t i = 0; i < tips.size(); ++i)
    joined += (i == 0 ? "" : i + 1 == tips.size() ? " or " : ", ") + tips[i];
  return persistent_bound ? fmt::format("persistent state alone ({:.1f} GiB per GPU) leaves no room: {}",
                                        persistent_bytes / static_cast<double>(kGiB), joined)
                          : "activations and transients dominate: " + joined;
}

namespace {
double gib(double bytes) {
  return bytes / static_cast<double>(kGiB);
}

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
        "\ntie-break: {} plans are within the model's {:.1f} % throughput error of the fastest ({}, {:.0f} "
        "tokens/s/GPU, {:+.1f} %); chosen by the rule \"{}\"",
        out.tied, 100 * out.tie_tolerance, plan_family(out.fastest->plan), out.fastest->tokens_per_s_per_gpu,
        100 * (out.fastest->tokens_per_s_per_gpu / rec.tokens_per_s_per_gpu - 1), out.tie_rule);
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
    e += fmt::format("\n  vs {} ({}): {}", out.alternatives[i].family,
                     out.alternatives[i].within_error ? "within error" : "beyond error",
                     deltas(rec, out.plans[i], limit));
  return e;
}
}  // namespace

SearchOutcome search_plans(const ModelGraph& model, const Cluster& cluster, const CostModel& costs,
                           const SearchSpace& space, const SearchOptions& opts) {
  auto t0 = std::chrono::steady_clock::now();
  SearchOutcome out;
  out.headroom = opts.headroom;
  // torch.compile, async TP and float8 scale a plan's time by a similar factor across the plans of one family
  // (they change elementwise traffic, TP overlap and GEMM rate, not the layout): the layout is searched with
  // their first listed value, and the other values are tried on the kRefine fastest fitting plans of every
  // family and on the family's tie-rule choice (stage 3b). This keeps the search near its eager cost
  // (Llama-3-8B on 8 GPUs: 3.3x fewer simulations than the full product).
  constexpr std::size_t kRefine = 3;
  SearchSpace eager = space;
  eager.compile = {space.compile.front()};
  eager.async_tp = {space.async_tp.front()};
  eager.fp8 = {space.fp8.front()};
  const bool refine = space.compile.size() > 1 || space.async_tp.size() > 1 || space.fp8.size() > 1;
  // Expert parallelism (issue 30): the EP degree changes a MoE plan's all-to-alls, its experts' FSDP traffic
  // and their unsharded size, not the rest of its layout, so the layout is searched at EP 1 and the other
  // degrees are tried on each family's candidate bases (stage 3a), as compile and async TP are. The whole
  // product cost up to nine times the simulations (Qwen3-235B-A22B on 2,048 H100: 36,763). A listed --fix ep
  // is searched on every layout.
  bool moe = false;
  for (const Layer* l : model.order()) moe = moe || l->moe_experts > 0;
  const bool refine_ep = moe && space.ep.empty();
  if (refine_ep) eager.ep = {1};
  std::vector<Plan> cands =
      enumerate_candidates(model, cluster, refine || refine_ep ? eager : space, out.stats);
  const Bytes capacity = cluster.spec().gpu.memory_bytes;
  const Bytes limit = static_cast<Bytes>(static_cast<double>(capacity) * (1.0 - opts.headroom));

  // Stage 2: cheap lower bound = persistent params + optimizer + one micro-batch of saved activations.
  auto lower_bound = [&](const Plan& p) {
    auto ps = Simulator::persistent_state(model, p);
    // Under PP the whole model's state and one micro-batch's activations are spread over pp ranks: the
    // busiest rank holds at least the average (memory.cpp memory_lower_bound).
    return (ps[0] + ps[2] + Simulator::activation_bytes(model, p)) / p.pp + 512 * kMiB;
  };
  auto prune = [&](const Plan& p, Bytes b) {
    if (b <= limit) return false;
    reject(out.stats.rejections, "memory lower bound exceeds capacity",
           plan_to_flags(p) + fmt::format("  (lower bound {:.2f} GiB > limit {:.2f} GiB)",
                                          static_cast<double>(b) / static_cast<double>(kGiB),
                                          static_cast<double>(limit) / static_cast<double>(kGiB)));
    return true;
  };
  std::vector<Plan> todo;
  std::vector<Bytes> bound(cands.size());
  for (std::size_t i = 0; i < cands.size(); ++i) {
    bound[i] = lower_bound(cands[i]);
    if (!prune(cands[i], bound[i])) todo.push_back(cands[i]);
  }

  // Stage 3: full simulation on worker threads; results stored by index (thread-count independent).
  int threads =
      opts.threads > 0 ? opts.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  auto simulate_all = [&](const std::vector<Plan>& plans, bool progress) {
    std::vector<Result> res(plans.size());
    std::atomic<std::size_t> next{0}, done{0};
    const int n =
        std::max(1, std::min<int>(threads, static_cast<int>(std::max<std::size_t>(1, plans.size()))));
    // An exception on a worker thread would end the process (std::terminate): the first one is kept, the
    // other workers stop taking plans, and it is rethrown on the calling thread after the join.
    std::exception_ptr failure;
    std::mutex failure_mu;
    auto work = [&](bool report) {
      try {
        Simulator sim(model, cluster, costs, opts.simulator);
        sim.set_allocator_replay(false);
        for (std::size_t k; (k = next.fetch_add(1)) < plans.size();) {
          res[k] = sim.run(plans[k]);
          done.fetch_add(1);
          if (report) opts.progress(static_cast<double>(done.load()) / static_cast<double>(plans.size()));
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
    work(progress && static_cast<bool>(opts.progress));
    for (auto& t : pool) t.join();
    if (failure) std::rethrow_exception(failure);
    return res;
  };
  std::vector<Result> results = simulate_all(todo, true);

  // Stage 3a: the other EP degrees on each EP-1 family's bases: its kRefine fastest plans that fit, its
  // kRefine fastest over all (EP shrinks the unsharded experts: a faster plan that does not fit at EP 1 may
  // fit with EP), its kRefine fastest that keep the median reserved-memory error as headroom and its tie-rule
  // choice; a family none of whose plans fit, its kRefine smallest. Every EP degree makes families of its own
  // (plan_family), so each reported EP family is the best of these.
  if (refine_ep) {
    std::map<std::string, std::vector<const Result*>> fam;
    for (const Result& r : results) fam[plan_family(r.plan)].push_back(&r);
    std::vector<Plan> variants;
    for (auto& [name, members] : fam) {
      auto used = [](const Result* r) { return r->peak_reserved_bytes + r->overhead.total(); };
      std::vector<const Result*> by_speed = members, fitting, safe, picks;
      std::stable_sort(by_speed.begin(), by_speed.end(), [](const Result* a, const Result* b) {
        return a->tokens_per_s_per_gpu > b->tokens_per_s_per_gpu;
      });
      const double safe_limit = static_cast<double>(limit) * (1.0 - kReservedMemoryError.median_abs);
      for (const Result* m : by_speed) {
        if (used(m) <= limit) fitting.push_back(m);
        if (static_cast<double>(used(m)) <= safe_limit) safe.push_back(m);
      }
      auto add = [&](const Result* m) {
        if (std::find(picks.begin(), picks.end(), m) == picks.end()) picks.push_back(m);
      };
      for (const auto* list : {&fitting, &by_speed, &safe})
        for (std::size_t i = 0; i < std::min(kRefine, list->size()); ++i) add((*list)[i]);
      if (!fitting.empty()) add(fitting[choose_plan(fitting, opts.tie_tolerance).first]);
      // The gradient reduction's dtype and the ZeRO stage set the data-parallel traffic that EP shrinks for
      // the experts: the fastest plan of each of their combinations, fitting and over all, is a base too.
      std::map<std::pair<int, int>, const Result*> fit_per_reduction, per_reduction;
      for (const Result* m : fitting)
        fit_per_reduction.emplace(std::pair{static_cast<int>(m->plan.reduce()), m->plan.zero}, m);
      for (const Result* m : by_speed)
        per_reduction.emplace(std::pair{static_cast<int>(m->plan.reduce()), m->plan.zero}, m);
      for (const auto* per : {&fit_per_reduction, &per_reduction})
        for (const auto& [key, m] : *per) add(m);
      if (fitting.empty()) {
        std::vector<const Result*> small = members;
        std::stable_sort(small.begin(), small.end(),
                         [&](const Result* a, const Result* b) { return used(a) < used(b); });
        for (std::size_t i = 0; i < std::min(kRefine, small.size()); ++i) add(small[i]);
      }
      for (const Result* pick : picks)
        for (int ep : ep_degrees(model, space, pick->plan.fsdp_ranks())) {
          if (ep == 1) continue;
          Plan p = pick->plan;
          p.ep = ep;
          ++out.stats.considered;
          try {
            p = resolve_plan(p, model, cluster, space.global_batch);
          } catch (const InputError& e) {
            reject(out.stats.rejections, e.where() + " invalid with expert parallelism",
                   plan_to_flags(p) + "  (" + e.what() + ")");
            continue;
          }
          if (!prune(p, lower_bound(p))) variants.push_back(p);
        }
    }
    std::vector<Result> more = simulate_all(variants, false);
    results.insert(results.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  }

  // Stage 3b: the other compile / async TP / float8 values on the fastest fitting plans of every family.
  if (refine) {
    std::map<std::string, std::vector<const Result*>> fam;
    for (const Result& r : results)
      if (r.peak_reserved_bytes + r.overhead.total() <= limit) fam[plan_family(r.plan)].push_back(&r);
    std::vector<Plan> variants;
    auto refine_picks = [&](const std::vector<const Result*>& picks) {
      for (const Result* pick : picks)
        for (bool compile : space.compile)
          for (bool async_tp : space.async_tp)
            for (Fp8 fp8 : space.fp8) {
              Plan p = pick->plan;
              if (compile == p.compile && async_tp == p.async_tp && fp8 == p.fp8) continue;
              if (async_tp && p.tp == 1) continue;
              p.compile = compile, p.async_tp = async_tp, p.fp8 = fp8;
              ++out.stats.considered;
              try {
                p = resolve_plan(p, model, cluster, space.global_batch);
              } catch (const InputError& e) {
                reject(out.stats.rejections, e.where() + " invalid with compile / async TP / float8",
                       plan_to_flags(p) + "  (" + e.what() + ")");
                continue;
              }
              if (!prune(p, lower_bound(p))) variants.push_back(p);
            }
    };
    for (auto& [name, members] : fam) {
      std::stable_sort(members.begin(), members.end(), [](const Result* a, const Result* b) {
        return a->tokens_per_s_per_gpu > b->tokens_per_s_per_gpu;
      });
      // The fastest few, the fastest few that keep the median reserved-memory error as headroom under their
      // lower bound, and the family's own tie-rule choice (often one with fewer non-default knobs). Stage 3d
      // replays plans through the caching allocator and drops those over the limit; a base that fit only
      // under the cheap pass's lower bound would take its compile / async TP variants with it, leaving the
      // family without the variant of a plan that does fit (8B on 8 H100 fell from FSDP2 to FSDP1 that way).
      std::vector<const Result*> picks(
          members.begin(), members.begin() + static_cast<std::ptrdiff_t>(std::min(kRefine, members.size())));
      const double safe_limit = static_cast<double>(limit) * (1.0 - kReservedMemoryError.median_abs);
      std::vector<const Result*> safe;
      for (const Result* m : members)
        if (static_cast<double>(m->peak_reserved_bytes + m->overhead.total()) <= safe_limit)
          safe.push_back(m);
      auto add = [&](const Result* m) {
        if (std::find(picks.begin(), picks.end(), m) == picks.end()) picks.push_back(m);
      };
      for (std::size_t i = 0; i < std::min(kRefine, safe.size()); ++i) add(safe[i]);
      if (!safe.empty()) add(safe[choose_plan(safe, opts.tie_tolerance).first]);
      const Result* own = members[choose_plan(members, opts.tie_tolerance).first];
      if (std::find(picks.begin(), picks.end(), own) == picks.end()) picks.push_back(own);
      refine_picks(picks);
    }
    // Families none of whose members fit with the first compile / float8 value: compile (the compiled loss
    // and SwiGLU saved set) and float8 lower the peak, so their kRefine smallest members are refined too, or
    // the family's fitting variant is never simulated (Llama-3-8B on 8 H100 at 11 % headroom: FSDP2 TP 1
    // without AC needs 75.5 GiB eager, 62.9 GiB compiled, against a 70.4 GiB limit).
    std::map<std::string, std::vector<const Result*>> over;
    for (const Result& r : results)
      if (r.peak_reserved_bytes + r.overhead.total() > limit && fam.count(plan_family(r.plan)) == 0)
        over[plan_family(r.plan)].push_back(&r);
    for (auto& [name, members] : over) {
      std::stable_sort(members.begin(), members.end(), [](const Result* a, const Result* b) {
        return a->peak_reserved_bytes + a->overhead.total() < b->peak_reserved_bytes + b->overhead.total();
      });
      refine_picks(std::vector<const Result*>(
          members.begin(), members.begin() + static_cast<std::ptrdiff_t>(std::min(kRefine, members.size()))));
    }
    std::vector<Result> more = simulate_all(variants, false);
    results.insert(results.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  }
  // Stage 3c: pipeline parallelism, when --fix pp lists degrees, or by itself on clusters of
  // kPipelineSearchGpus or more, or when no plan without PP fits. The threshold bounds the search's cost
  // (every PP plan simulates each of its stages); it is not a cost-model constant.
  {
    constexpr int kPipelineSearchGpus = 512;
    bool any_fit = false;
    for (const Result& r : results) any_fit = any_fit || r.peak_reserved_bytes + r.overhead.total() <= limit;
    std::vector<int> pps = space.pp;
    if (pps.empty() && (cluster.gpus() >= kPipelineSearchGpus || !any_fit)) pps = {2, 4, 8, 16, 32};
    std::vector<Plan> pipe;
    for (const Plan& p : enumerate_pipeline_candidates(model, cluster, space, pps, out.stats))
      if (!prune(p, lower_bound(p))) pipe.push_back(p);
    std::vector<Result> more = simulate_all(pipe, false);
    cands.insert(cands.end(), pipe.begin(), pipe.end());
    bound.resize(cands.size());
    for (std::size_t i = bound.size() - pipe.size(); i < cands.size(); ++i) bound[i] = lower_bound(cands[i]);
    results.insert(results.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  }
  out.stats.evaluated = static_cast<std::int64_t>(results.size());

  // Stage 3c: the caching-allocator replay (docs/model.md "Reserved memory"). Stage 3 ran without it: each
  // plan's reserved memory is the per-stream lower bound, so a plan over the limit there is over it after the
  // replay too. Replayed are the plans the output can name: over all plans and within each family, the
  // fastest plan that still fits after its replay, and the plan the tie rule chooses (choose_plan; its rule 1
  // compares the other plans' headroom from their lower bound). A replayed plan that no longer fits drops
  // out and the choice is made again, until a pass replays nothing.
  {
    Simulator sim(model, cluster, costs);
    auto under = [&](const Result& r) { return r.peak_reserved_bytes + r.overhead.total() <= limit; };
    bool changed = false;
    auto replay = [&](std::size_t k) {
      if (results[k].allocator.replayed) return;
      results[k] = sim.run(results[k].plan);
      // Every path of Simulator::run must report its replay (the loops below end only on replayed plans).
      if (!results[k].allocator.replayed)
        throw std::logic_error("search: a replayed run did not report its allocator replay");
      ++out.stats.replayed;
      changed = true;
    };
    auto settle = [&](const std::vector<std::size_t>& idx) {
      // The fastest that fits after its replay.
      std::vector<std::size_t> order = idx;
      std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        return results[a].tokens_per_s_per_gpu > results[b].tokens_per_s_per_gpu;
      });
      for (std::size_t k : order) {
        if (!under(results[k])) continue;
        replay(k);
        if (under(results[k])) break;
      }
      // The tie rule's choice, replayed.
      for (;;) {
        std::vector<const Result*> fit;
        std::vector<std::size_t> at;
        for (std::size_t k : order)
          if (under(results[k])) fit.push_back(&results[k]), at.push_back(k);
        if (fit.empty()) return;
        const std::size_t k = at[choose_plan(fit, opts.tie_tolerance).first];
        if (results[k].allocator.replayed) return;
        replay(k);
      }
    };
    std::vector<std::size_t> every(results.size());
    std::map<std::string, std::vector<std::size_t>> by_family;
    for (std::size_t k = 0; k < results.size(); ++k) {
      every[k] = k;
      by_family[plan_family(results[k].plan)].push_back(k);
    }
    // Families are settled best first (by their fastest plan under the limit) until `top` - 1 settled
    // families are faster than any unsettled one: those are the listed ones (replays only lower a family).
    auto best_tps = [&](const std::vector<std::size_t>& idx) {
      double best = -1;
      for (std::size_t k : idx)
        if (under(results[k])) best = std::max(best, results[k].tokens_per_s_per_gpu);
      return best;
    };
    auto chosen_tps = [&](const std::vector<std::size_t>& idx) {
      std::vector<const Result*> fit;
      for (std::size_t k : idx)
        if (under(results[k])) fit.push_back(&results[k]);
      return fit.empty() ? -1.0 : fit[choose_plan(fit, opts.tie_tolerance).first]->tokens_per_s_per_gpu;
    };
    do {
      changed = false;
      settle(every);
      std::vector<std::pair<double, const std::vector<std::size_t>*>> fams;
      for (auto& [name, idx] : by_family) fams.push_back({best_tps(idx), &idx});
      std::stable_sort(fams.begin(), fams.end(),
                       [](const auto& a, const auto& b) { return a.first > b.first; });
      std::vector<double> settled;
      for (const auto& [tps, idx] : fams) {
        if (tps < 0) break;
        if (static_cast<int>(settled.size()) >= std::max(1, opts.top)) {
          std::vector<double> top = settled;
          std::sort(top.begin(), top.end(), std::greater<>());
          if (tps < top[static_cast<std::size_t>(std::max(1, opts.top)) - 1]) break;
        }
        settle(*idx);
        settled.push_back(chosen_tps(*idx));
      }
    } while (changed);
  }

  // Stage 4: rank those under the limit.
  std::vector<std::size_t> fitting;
  std::optional<std::size_t> closest;
  Bytes closest_over = 0;
  for (std::size_t k = 0; k < results.size(); ++k) {
    const Result& r = results[k];
    const Bytes used = r.peak_reserved_bytes + r.overhead.total();
    if (used <= limit) {
      fitting.push_back(k);
    } else {
      reject(out.stats.rejections, "simulated peak exceeds capacity x (1 - headroom)",
             plan_to_flags(r.plan) + fmt::format("  (peak {:.2f} GiB > limit {:.2f} GiB)",
                                                 static_cast<double>(used) / static_cast<double>(kGiB),
                                                 static_cast<double>(limit) / static_cast<double>(kGiB)));
      if (!closest || used - limit < closest_over) closest = k, closest_over = used - limit;
    }
  }
  out.stats.fitting = static_cast<std::int64_t>(fitting.size());
  auto eval = [&](std::size_t k) {
    const Result& r = results[k];
    return Evaluation{true, r.tokens_per_s_per_gpu, r.peak_reserved_bytes + r.overhead.total(),
                      r.capacity_bytes};
  };
  std::stable_sort(fitting.begin(), fitting.end(),
                   [&](std::size_t a, std::size_t b) { return better(eval(a), eval(b)); });
  out.tie_tolerance = opts.tie_tolerance;
  if (!fitting.empty()) {
    // The recommendation: the tie rule over every fitting plan (fitting[0] is the fastest).
    std::vector<const Result*> all;
    for (std::size_t k : fitting) all.push_back(&results[k]);
    const auto [wi, rule] = choose_plan(all, opts.tie_tolerance);
    const Result& rec = *all[wi];
    out.tie_rule = rule;
    if (wi != 0) out.fastest = *all[0];
    const double top_tps = all[0]->tokens_per_s_per_gpu;
    for (const Result* r : all) out.tied += top_tps - r->tokens_per_s_per_gpu < opts.tie_tolerance * top_tps;
    {
      // The recommendation is run once more with detail: reports draw its program and timeline, and re-run
      // nothing (same plan, same numbers).
      Simulator sim(model, cluster, costs, opts.simulator);
      out.plans.push_back(sim.run(rec.plan, true));
    }
    out.alternatives.push_back({plan_family(rec.plan), 0, true});
    // The other families: each represented by its own tie-rule choice, faster first.
    std::map<std::string, std::vector<const Result*>> families;
    for (const Result* r : all) families[plan_family(r->plan)].push_back(r);
    std::vector<const Result*> reps;
    for (const auto& [name, members] : families)
      if (name != out.alternatives[0].family)
        reps.push_back(members[choose_plan(members, opts.tie_tolerance).first]);
    std::stable_sort(reps.begin(), reps.end(), [](const Result* a, const Result* b) {
      return a->tokens_per_s_per_gpu > b->tokens_per_s_per_gpu;
    });
    for (const Result* r : reps) {
      if (static_cast<int>(out.plans.size()) >= std::max(1, opts.top)) break;
      const double d = r->tokens_per_s_per_gpu / rec.tokens_per_s_per_gpu - 1;
      const double scale = std::max(r->tokens_per_s_per_gpu, rec.tokens_per_s_per_gpu);
      out.plans.push_back(*r);
      out.alternatives.push_back(
          {plan_family(r->plan), d,
           std::abs(r->tokens_per_s_per_gpu - rec.tokens_per_s_per_gpu) < opts.tie_tolerance * scale});
    }
    // Pareto front over (tokens/s up, headroom up, network bytes down): in (tokens/s desc, headroom desc,
    // network asc) order a plan is dominated iff a plan already on the front dominates it.
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

  if (out.plans.empty()) {
    // Nothing fits: which constraint binds, and how far the closest plan is.
    std::size_t best_bound = 0;
    for (std::size_t i = 1; i < cands.size(); ++i)
      if (bound[i] < bound[best_bound]) best_bound = i;
    if (closest) {
      if (!results[*closest].allocator.replayed) {
        Simulator sim(model, cluster, costs);
        results[*closest] = sim.run(results[*closest].plan);
      }
      out.closest = results[*closest];
      out.closest_over_bytes = out.closest->peak_reserved_bytes + out.closest->overhead.total() - limit;
    } else if (!cands.empty()) {
      Simulator sim(model, cluster, costs, opts.simulator);
      out.closest = sim.run(cands[best_bound]);
      out.closest_over_bytes = out.closest->peak_reserved_bytes + out.closest->overhead.total() - limit;
    }
    if (out.closest) {
      const Result& c = *out.closest;
      const double persistent = static_cast<double>(c.persistent_bytes);
      const double need_gpus =
          std::ceil(static_cast<double>(cluster.gpus()) * persistent / (0.6 * static_cast<double>(limit)));
      out.binding_hint = no_fit_advice(c.plan, persistent > 0.6 * static_cast<double>(limit), persistent,
                                       need_gpus, cluster.spec().node.nvlink_domain_gpus);
      out.explanation = fmt::format(
          "no plan fits: the closest ({}) needs {} more than the {:.2f} GiB limit; {}", plan_to_flags(c.plan),
          fmt::format("{:.2f} GiB", static_cast<double>(out.closest_over_bytes) / static_cast<double>(kGiB)),
          static_cast<double>(limit) / static_cast<double>(kGiB), out.binding_hint);
    } else {
      out.explanation = "no structurally valid plan: every candidate was rejected (see rejections)";
    }
  } else {
    out.explanation = explain(out, results, limit);
  }
  if (out.stats.fitting > static_cast<std::int64_t>(out.plans.size()))
    out.explanation +=
        out.plans.size() == 1
            ? fmt::format("\n{} plans fit; only the recommendation is listed (--top 1)", out.stats.fitting)
            : fmt::format(
                  "\n{} plans fit; listed: the recommendation and the best plan of {} other famil{} "
                  "(runtime x TP x AC x HSDP; --top)",
                  out.stats.fitting, out.plans.size() - 1, out.plans.size() == 2 ? "y" : "ies");
  out.stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace shardplan
