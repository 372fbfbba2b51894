// Properties that hold for every plan whatever the constants, checked on a deterministic sample of the plan
// space (models x runtimes x ZeRO stages x TP x AC x micro-batch x grad accumulation x HSDP x offload x
// compile/async TP) run through resolve_plan and the real Simulator: time and exposure add up, the planner's
// memory bound is a bound, MFU follows its definition, layer names change nothing, and more bandwidth or
// prefetch never hurts.
#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "sim_helpers.hpp"
#include "simulator/memory/accounting.hpp"

using namespace shardplan;
using shardplan::test::Setup;

namespace {

/// splitmix64 (Steele, Lea, Flood 2014): a fixed, library-independent sequence, so the sample is the same on
/// every standard library (std::uniform_int_distribution is not specified bit for bit).
struct SplitMix {
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  template <class T, std::size_t N>
  const T& pick(const std::array<T, N>& a) {
    return a[next() % N];
  }
};

std::string describe(const Plan& p) {
  std::string s = std::string(to_string(p.runtime)) + " zero " + std::to_string(p.zero) + " tp " +
                  std::to_string(p.tp) + " ac " + to_string(p.ac) + " mbs " + std::to_string(p.mbs) + " ga " +
                  std::to_string(p.grad_accum) + " shard_group " + std::to_string(p.shard_group) +
                  " offload " + to_string(p.offload) + " precision " + to_string(p.precision) + " seq " +
                  std::to_string(p.seq) + " optimizer " + to_string(p.optimizer);
  if (p.compile) s += " compile";
  if (p.async_tp) s += " async_tp";
  return s;
}

ClusterSpec scaled(ClusterSpec s, double k) {
  s.node.nvlink_Bps *= k;
  s.node.nic_Bps *= k;
  s.node.pcie_Bps *= k;  // the GPU-NIC hop and the offload copies are PCIe
  return s;
}

/// One model + GPU count of the sweep with its base cluster and the cluster with every link twice as fast.
struct Case {
  const char* model;
  int gpus;
};
// 16 GPUs = 2 DGX nodes (HSDP groups of 8 and cross-node rings), 64 = 8 nodes; Llama-3-70B and Mixtral only
// on 64 so their plans are not all refused or hopelessly over capacity.
constexpr std::array kCases{Case{"llama3-8b", 16}, Case{"llama3-70b", 64}, Case{"mixtral-8x7b", 64},
                            Case{"gpt2-xl", 16}, Case{"mpt-7b", 16}};
constexpr int kPlansPerCase = 80;

struct Sampled {
  std::vector<Plan> plans;  ///< resolved
  int refused = 0;
};

/// Draws kPlansPerCase plans resolve_plan accepts (and counts those it refuses) for one model and cluster.
Sampled sample_plans(const Setup& s, std::uint64_t seed) {
  constexpr std::array runtimes{Runtime::kFsdp2, Runtime::kFsdp1, Runtime::kDeepSpeed};
  constexpr std::array zeros{0, 1, 2, 3};
  constexpr std::array tps{1, 2, 8};
  constexpr std::array acs{AcMode::kNone, AcMode::kSelective, AcMode::kFull};
  constexpr std::array mbss{1, 2};
  constexpr std::array gas{1, 3};
  constexpr std::array hsdp{false, false, true};  // one plan in three asks for HSDP (shard_group < dp)
  constexpr std::array offloads{Offload::kNone, Offload::kNone, Offload::kOptimizer, Offload::kParams};
  constexpr std::array flags{0, 0, 0, 0, 1, 2, 3};  // compile / async TP on a few
  constexpr std::array precisions{Precision::kBf16Mixed, Precision::kBf16Mixed, Precision::kBf16Mixed,
                                  Precision::kBf16Mixed, Precision::kBf16Mixed, Precision::kFp32};
  constexpr std::array seqs{std::int64_t{1024}, std::int64_t{4096}};
  // AdamW (the default) on most plans; the other optimizers where the runtime runs them.
  constexpr std::array optimizers{Optimizer::kAdamW, Optimizer::kAdamW,     Optimizer::kAdamW,
                                  Optimizer::kAdamW, Optimizer::kAdam,      Optimizer::kSgd,
                                  Optimizer::kLion,  Optimizer::kAdamW8bit, Optimizer::kAdafactor,
                                  Optimizer::kMuon,  Optimizer::kMuon};
  SplitMix rng{seed};
  Sampled out;
  for (int tries = 0; static_cast<int>(out.plans.size()) < kPlansPerCase && tries < 5000; ++tries) {
    Plan p;
    p.runtime = rng.pick(runtimes);
    p.zero = rng.pick(zeros);
    p.tp = rng.pick(tps);
    p.ac = rng.pick(acs);
    p.mbs = rng.pick(mbss);
    p.grad_accum = rng.pick(gas);
    p.offload = rng.pick(offloads);
    p.precision = rng.pick(precisions);
    const int f = rng.pick(flags);
    p.compile = (f & 1) != 0;
    p.async_tp = (f & 2) != 0;
    // Short sequences keep the sweep fast; capped at the model's own (GPT-2's 1,024 learned positions).
    p.seq = std::min<std::int64_t>(rng.pick(seqs), s.model.spec().seq);
    p.optimizer = rng.pick(optimizers);
    const int dp = s.cluster->gpus() / p.tp;
    if (rng.pick(hsdp)) p.shard_group = std::min(8, dp / 2);
    try {
      out.plans.push_back(s.resolve(p));
    } catch (const InputError&) {
      ++out.refused;
    }
  }
  return out;
}

bool same_result(const Result& a, const Result& b) {
  bool same = a.peak_bytes == b.peak_bytes && a.peak_reserved_bytes == b.peak_reserved_bytes &&
              a.first_step_peak_bytes == b.first_step_peak_bytes && a.step_s == b.step_s &&
              a.compute_s == b.compute_s && a.exposed_comm_s == b.exposed_comm_s && a.mfu == b.mfu;
  for (int k = 0; k < kCommKinds; ++k) {
    const CommStats &x = a.comm[static_cast<std::size_t>(k)], &y = b.comm[static_cast<std::size_t>(k)];
    same = same && x.bytes_per_rank == y.bytes_per_rank && x.time_s == y.time_s &&
           x.exposed_s == y.exposed_s && x.count == y.count;
  }
  return same;
}

/// The model's graph JSON with every layer renamed by `name(index)`, read back.
template <class F>
ModelGraph renamed(const ModelGraph& m, F name) {
  Json j = m.to_graph_json();
  auto& layers = j["layers"];
  for (std::size_t i = 0; i < layers.size(); ++i) layers[i]["name"] = name(i);
  return ModelGraph::from_graph_json(j, "renamed.graph.json");
}

}  // namespace

namespace {
/// The invariants of one simulated plan: compute + exposed <= step and the exposed time by kind partitioning
/// it; the memory bound below the peak, persistent state within it; MFU from the model FLOPs per token.
void check_step_invariants(const Setup& s, const Plan& p, const Result& r) {
  const auto& spec = s.model.spec();
  // Time. The compute stream is either computing (compute_s, its busy time), idle waiting on a transfer
  // (exposed_comm_s, charged to gaps only) or idle for another reason (CPU launch latency, the optimizer
  // on the CPU): the three are disjoint stretches of [0, step_s], so compute + exposed <= step.
  CHECK(r.exposed_comm_s >= 0);
  CHECK(r.compute_s + r.exposed_comm_s <= r.step_s * (1 + 1e-9));
  // Each exposed stretch is charged to exactly one communication kind, so the per-kind times partition
  // the total.
  double by_kind = 0;
  for (const CommStats& k : r.comm) {
    CHECK(k.exposed_s >= 0);
    by_kind += k.exposed_s;
  }
  CHECK(by_kind == Approx(r.exposed_comm_s).epsilon(1e-9).margin(1e-15));

  // Memory. The planner's bound is persistent params + optimizer state + one micro-batch of saved
  // activations
  // + the runtime overhead: all of it is allocated at once (at the end of the first micro-batch's forward
  // the persistent state and that micro-batch's saved activations are live), and reserved >= allocated,
  // so the bound never exceeds peak reserved + overhead (it would prune plans that fit otherwise).
  CHECK(memory_lower_bound(s.model, p) <= r.peak_reserved_bytes + r.overhead.total());
  // The persistent state on the GPU is allocated for the whole step, so the peak is at least that; the
  // first step has no optimizer state before its optimizer step, so its peak is at most the steady
  // state's.
  CHECK(r.peak_bytes >= r.persistent_bytes);
  CHECK(r.persistent_bytes == r.persistent_split[0] + r.persistent_split[1] + r.persistent_split[2]);
  CHECK(r.first_step_peak_bytes <= r.peak_bytes);
  CHECK(r.peak_reserved_bytes >= r.peak_bytes);

  // MFU. Model FLOPs per token (PaLM appendix B, as torchtitan counts it): 6 x the non-embedding
  // parameters a token passes through (forward 2N + backward 4N) + 12 x layers x heads x head_dim x seq
  // (attention scores and values, forward and backward, causal mask not discounted).
  const double flops_per_token =
      6.0 * (s.model.active_parameters() - static_cast<double>(s.model.embedding_parameters())) +
      12.0 * spec.layers * static_cast<double>(spec.heads * spec.head_dim) * static_cast<double>(p.seq);
  CHECK(r.model_flops_per_token == Approx(flops_per_token).epsilon(1e-12));
  // MFU = achieved model FLOP/s per GPU / the GPU's dense peak in the compute dtype (bf16; TF32 tensor
  // cores for fp32 training).
  const auto& gpu = s.cluster->spec().gpu;
  const double peak = p.precision == Precision::kFp32 ? gpu.peak_tf32_flops : gpu.peak_bf16_flops;
  CHECK(r.mfu == Approx(r.tokens_per_s_per_gpu * flops_per_token / peak).epsilon(1e-12));
  // Tokens per GPU per step: dp ranks share mbs x seq x grad_accum tokens each, a TP group shares its
  // rank's.
  CHECK(r.tokens_per_s_per_gpu ==
        Approx(static_cast<double>(p.mbs) * static_cast<double>(p.seq) * p.grad_accum / p.tp / r.step_s)
            .epsilon(1e-12));
  // The model FLOPs are a subset of the FLOPs executed, each at most at the dense peak.
  CHECK(r.mfu > 0);
  CHECK(r.mfu <= 1.0);
}

}  // namespace

TEST_CASE("properties of every sampled plan", "[simulator][properties]") {
  int total = 0, refused = 0, prefetch_checked = 0, renamed_checked = 0;
  // How often the sample hits each knob value: runtimes, ZeRO 0-3, TP 1/2/8, AC none/selective/full, HSDP,
  // offload optimizer/params, compile, async TP, fp32, mbs 2, grad_accum 3.
  std::array<int, 3> by_runtime{}, by_ac{};
  std::array<int, 4> by_zero{};
  std::array<int, EnumValues<Optimizer>::v.size()> by_optimizer{};
  int tp2 = 0, tp8 = 0, hsdp = 0, off_opt = 0, off_params = 0, compiled = 0, async = 0, fp32 = 0, mbs2 = 0,
      ga3 = 0;
  for (std::size_t ci = 0; ci < kCases.size(); ++ci) {
    const Case& c = kCases[ci];
    const ClusterSpec base = load_cluster_spec("dgx-h100");
    Setup s(load_model(c.model), base, c.gpus);
    Setup fast(s.model, scaled(base, 2.0), c.gpus);
    // Layer names: plain indices and Hugging Face-style module paths.
    Setup plain(renamed(s.model, [](std::size_t i) { return "L" + std::to_string(i); }), base, c.gpus);
    Setup hf(renamed(s.model,
                     [](std::size_t i) { return "model.layers." + std::to_string(i) + ".input_layernorm"; }),
             base, c.gpus);
    // The renamed graphs do carry the new names (else the comparison below would compare a model with
    // itself).
    for (const Layer* l : plain.model.order()) CHECK(l->name.rfind("L", 0) == 0);
    for (const Layer* l : hf.model.order()) CHECK(l->name.rfind("model.layers.", 0) == 0);
    Simulator sim(s.model, *s.cluster, *s.costs), sim_fast(fast.model, *fast.cluster, *fast.costs);
    Simulator sim_plain(plain.model, *plain.cluster, *plain.costs), sim_hf(hf.model, *hf.cluster, *hf.costs);

    const Sampled sampled = sample_plans(s, 0x5eed0000 + ci);
    total += static_cast<int>(sampled.plans.size());
    refused += sampled.refused;
    for (std::size_t pi = 0; pi < sampled.plans.size(); ++pi) {
      const Plan& p = sampled.plans[pi];
      INFO(c.model << " on " << c.gpus << " GPUs: " << describe(p));
      const Result r = sim.run(p);
      ++by_runtime[static_cast<std::size_t>(p.runtime)], ++by_ac[static_cast<std::size_t>(p.ac)];
      ++by_zero[static_cast<std::size_t>(p.zero)];
      ++by_optimizer[static_cast<std::size_t>(p.optimizer)];
      tp2 += p.tp == 2, tp8 += p.tp == 8, hsdp += p.replicas > 1, compiled += p.compile, async += p.async_tp;
      off_opt += p.offload == Offload::kOptimizer, off_params += p.offload == Offload::kParams;
      fp32 += p.precision == Precision::kFp32, mbs2 += p.mbs == 2, ga3 += p.grad_accum == 3;

      check_step_invariants(s, p, r);

      // More bandwidth never slows a step: every transfer gets no longer, and the step's critical path is
      // monotone in task durations.
      const Result rf = sim_fast.run(p);
      CHECK(rf.step_s <= r.step_s * (1 + 1e-12));
      // Bandwidth moves time, not memory: the allocation order in the issue-ordered walk is the same.
      CHECK(rf.peak_bytes == r.peak_bytes);

      // Prefetch 1 issues unit j's all-gather one unit earlier than prefetch 0, so the same collectives
      // overlap more compute: never more exposed communication, never a longer step (every runtime, as
      // test_simulate's zoo asserts on a small model; here on the sweep).
      if (p.prefetch == 1) {
        Plan p0 = p;
        p0.prefetch = 0;
        const Result r0 = sim.run(s.resolve(p0));
        CHECK(r.exposed_comm_s <= r0.exposed_comm_s + 1e-12);
        CHECK(r.step_s <= r0.step_s + 1e-12);
        ++prefetch_checked;
      }

      // Layer names change nothing (the cost model reads kinds, shapes and blocks, never names): every third
      // plan and every full-AC plan.
      if (pi % 3 == 0 || p.ac == AcMode::kFull) {
        CHECK(same_result(sim_plain.run(p), r));
        CHECK(same_result(sim_hf.run(p), r));
        ++renamed_checked;
      }
    }
  }
  // The sample: 5 model/cluster cases x 80 plans resolve_plan accepted, and every knob value of the sweep
  // among them (a sample that silently lost a dimension would test less than it claims).
  CHECK(total == static_cast<int>(kCases.size()) * kPlansPerCase);
  CHECK(refused > 0);  // the product includes impossible combinations (ZeRO-1 on FSDP, DeepSpeed HSDP, ...)
  for (int n : by_runtime) CHECK(n > 0);
  for (int n : by_ac) CHECK(n > 0);
  for (int n : by_zero) CHECK(n > 0);
  for (int n : by_optimizer) CHECK(n > 0);
  for (int n : {tp2, tp8, hsdp, off_opt, off_params, compiled, async, fp32, mbs2, ga3}) CHECK(n > 0);
  CHECK(prefetch_checked == total);
  CHECK(renamed_checked >= total / 3);
}

TEST_CASE("properties of sampled expert-parallel plans with a load imbalance",
          "[simulator][properties][ep]") {
  // --moe-imbalance F > 1 grows the busiest EP rank's expert-side activations (ActTensor::expert_rows): the
  // planner's bound (memory_lower_bound, over the same lists) must stay below the simulated peak, and the
  // step's invariants hold, for MoE models under EP with AC, compile, TP, micro-batches and imbalances drawn.
  constexpr std::array cases{Case{"qwen3-30b-a3b", 8}, Case{"mixtral-8x7b", 16}};
  constexpr std::array eps{2, 4, 8};
  constexpr std::array imbalances{1.0, 1.3, 2.0, 3.7};
  constexpr std::array acs{AcMode::kNone, AcMode::kSelective, AcMode::kFull};
  constexpr std::array tps{1, 1, 2};
  constexpr std::array mbss{1, 2};
  constexpr std::array flags{0, 0, 1};  // compile on one in three
  int checked = 0, imbalanced = 0;
  for (std::size_t ci = 0; ci < cases.size(); ++ci) {
    Setup s(cases[ci].model, "dgx-h100", cases[ci].gpus);
    Simulator sim(s.model, *s.cluster, *s.costs);
    SplitMix rng{0xe9000000 + ci};
    int drawn = 0;
    for (int tries = 0; drawn < 12 && tries < 200; ++tries) {
      Plan p;
      p.ep = rng.pick(eps);
      p.moe_imbalance = rng.pick(imbalances);
      p.ac = rng.pick(acs);
      p.tp = rng.pick(tps);
      p.mbs = rng.pick(mbss);
      p.compile = rng.pick(flags) != 0;
      p.seq = 2048;
      try {
        p = s.resolve(p);
      } catch (const InputError&) {
        continue;
      }
      ++drawn;
      INFO(cases[ci].model << " ep " << p.ep << " F " << p.moe_imbalance << ": " << describe(p));
      const Result r = sim.run(p);
      check_step_invariants(s, p, r);
      ++checked;
      imbalanced += p.moe_imbalance > 1.0;
    }
  }
  CHECK(checked == 24);
  CHECK(imbalanced > 0);
}
