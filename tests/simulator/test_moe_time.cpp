// A MoE layer's time on the busiest expert-parallel rank (issue 30, simulator/lowering/units_moe.cpp): under
// --moe-imbalance F the busiest rank's experts receive ceil(F x T x top_k) rows, and the experts' grouped
// GEMMs and their elementwise work (the activation; the all-to-all dispatcher's _permute and _unpermute) run
// on them (torchtitan 0.3.0 models/common/moe.py GroupedExperts.forward, models/common/token_dispatcher.py
// AllToAllTokenDispatcher); the router, the local reorder and the combine stay on the rank's own T x top_k
// rows.
#include <catch2/catch.hpp>

#include "sim_helpers.hpp"
#include "simulator/lowering/units_stages.hpp"
#include "simulator/memory/layer_memory.hpp"

using namespace shardplan;
using fixture::Setup;
using test::deepseek_small;
using test::tiny_moe;
using test::units_of;

namespace {

Plan tiny_plan(const Setup& s, int ep, double f, bool compile) {
  Plan p;
  p.seq = 64;
  p.ep = ep;
  p.moe_imbalance = f;
  p.compile = compile;
  return s.resolve(p);
}

}  // namespace

TEST_CASE("MoE time: the expert side's elementwise bytes on the busiest EP rank, closed form",
          "[simulator][moe][ep][time]") {
  // T = 64 tokens, h 32, f 48, top_k 2, bf16. Per routed row: w1's and w3's outputs, SiLU and the product 2f
  // = 96 B each, the routed input and the experts' output 2h = 64 B, _permute's int64 index 8 B.
  //   eager SiLU: read w1's output, write SiLU: 192; the product: read SiLU and w3's output, write: 288;
  //   fused (compile): one pass reading w1's and w3's outputs and writing the product: 288;
  //   _permute: read the received rows (as large as the routed input) and the index, write the routed input:
  //   64 + 8 + 64 = 136; _unpermute: read the experts' output and the index, write as much: 136.
  // Mean rows T·K = 128 (2 per token); the busiest rank's ceil(128 F): F 1 -> 128, F 1.5 -> 192 (3 per
  // token). Per token, the layer's elementwise_bytes_per_token holds the activation at the mean rows (eager
  // 480 x 2 = 960 = 10 k f, fused 288 x 2 = 576 = 6 k f: mlp_builders.cpp), so what the busiest rank adds is
  //   eager F 1: (480 + 272) x 2 - 960 = 544;  F 1.5: (480 + 272) x 3 - 960 = 1,296;
  //   fused F 1: (288 + 272) x 2 - 576 = 544;  F 1.5: (288 + 272) x 3 - 576 = 1,104.
  Setup s(ModelGraph::from_spec(tiny_moe()), load_cluster_spec("dgx-h100"), 2);
  const Layer* moe = nullptr;
  for (const Layer* l : s.model.order())
    if (l->kind == LayerKind::kMoe) moe = l;
  REQUIRE(moe);
  const double T = 64;
  struct Row {
    bool compile;
    double f, busiest, in_layer;
  };
  for (const Row& r : {Row{false, 1.0, 1504, 960}, Row{false, 1.5, 2256, 960}, Row{true, 1.0, 1120, 576},
                       Row{true, 1.5, 1680, 576}}) {
    INFO("compile " << r.compile << " F " << r.f);
    const Plan p = tiny_plan(s, 2, r.f, r.compile);
    const detail::MoeExpertSideBytes b = detail::moe_expert_side_bytes(*moe, p, T, r.compile);
    CHECK(b.busiest == r.busiest);
    CHECK(b.in_layer == r.in_layer);
  }
  // What the layer's scalar holds for the routed experts: 10 k f eager, 6 k f fused.
  CHECK(detail::moe_expert_side_bytes(*moe, tiny_plan(s, 2, 1.0, false), T, false).in_layer == 10 * 2 * 48);
  CHECK(detail::moe_expert_side_bytes(*moe, tiny_plan(s, 2, 1.0, true), T, true).in_layer == 6 * 2 * 48);
  // Without EP there is no permutation and no busiest rank: nothing beyond the layer's scalar.
  for (double f : {1.0, 1.5}) {
    const detail::MoeExpertSideBytes b =
        detail::moe_expert_side_bytes(*moe, tiny_plan(s, 1, f, false), T, false);
    CHECK(b.busiest == 960);
    CHECK(b.in_layer == 960);
  }

  // The MoE unit's forward: F 1.5 against F 1 adds the grouped GEMMs over 64 more rows (groups of 192 / 4 =
  // 48 rows per local expert instead of 32: gate and up of h -> f, down of f -> h) and 64 x (1,296 - 544) B
  // of elementwise traffic; backward twice both (the cost model's 2x for GEMMs and elementwise work).
  const Plan f1 = tiny_plan(s, 2, 1.0, false), f15 = tiny_plan(s, 2, 1.5, false);
  const SimUnit u1 = test::unit_with_moe(units_of(s, f1)), u15 = test::unit_with_moe(units_of(s, f15));
  const CostModel& c = *s.costs;
  const double gemm1 = 4 * (2 * c.gemm_s(32, 48, 32) + c.gemm_s(32, 32, 48));
  const double gemm15 = 4 * (2 * c.gemm_s(48, 48, 32) + c.gemm_s(48, 32, 48));
  const double elem = c.memory_s(64 * (1296.0 - 544.0));
  CHECK(u15.fwd_s - u1.fwd_s == Approx(gemm15 - gemm1 + elem).epsilon(1e-9));
  CHECK(u15.bwd_s - u1.bwd_s == Approx(2 * (gemm15 - gemm1) + 2 * elem).epsilon(1e-9));
  // EP 2 at F 1 against EP 1: the same 128 rows over half the experts (groups of 32 rows instead of 16: 4
  // local experts instead of 8) and the two permutations, 64 x 544 B.
  const SimUnit e1 = test::unit_with_moe(units_of(s, tiny_plan(s, 1, 1.0, false)));
  const double gemm_e1 = 8 * (2 * c.gemm_s(16, 48, 32) + c.gemm_s(16, 32, 48));
  CHECK(u1.fwd_s - e1.fwd_s == Approx(gemm1 - gemm_e1 + c.memory_s(64 * 544.0)).epsilon(1e-9));
}

TEST_CASE("property: the busiest EP rank's step time never falls as --moe-imbalance grows",
          "[simulator][moe][ep][time][properties]") {
  // Everything F touches grows with it (the expert side's GEMMs, elementwise work and activations, the
  // all-to-all bytes): over F 1, 1.25, 1.5, 2 the step and its compute are non-decreasing, compute + exposed
  // communication stays within the step, and with EP 1 F changes nothing (every rank runs its own tokens).
  struct M {
    const char* what;
    ModelGraph model;
    int gpus;
  };
  std::vector<M> models;
  models.push_back({"qwen3-30b-a3b", load_model("qwen3-30b-a3b"), 8});
  models.push_back({"deepseek-small", deepseek_small(), 16});
  int checked = 0;
  for (const M& mod : models) {
    Setup s(mod.model, load_cluster_spec("dgx-h100"), mod.gpus);
    Simulator sim(s.model, *s.cluster, *s.costs);
    struct Shape {
      int ep, pp, tp;
      AcMode ac;
      bool compile;
      EpBackend backend = EpBackend::kAllToAll;  // DeepEP under torchtitan, the all-gather under Megatron
    };
    for (const Shape& sh :
         {Shape{1, 1, 1, AcMode::kNone, false}, Shape{2, 1, 1, AcMode::kFull, false},
          Shape{8, 1, 1, AcMode::kSelective, true}, Shape{4, 2, 1, AcMode::kFull, false},
          Shape{4, 1, 2, AcMode::kNone, true}, Shape{8, 1, 1, AcMode::kFull, false, EpBackend::kDeepEp},
          Shape{4, 1, 1, AcMode::kSelective, false, EpBackend::kAllGather}}) {
      Result prev;
      bool first = true;
      for (double f : {1.0, 1.25, 1.5, 2.0}) {
        INFO(mod.what << " ep " << sh.ep << " pp " << sh.pp << " tp " << sh.tp << " " << to_string(sh.backend)
                      << " F " << f);
        Plan p;
        p.seq = 2048;
        p.ep = sh.ep;
        p.pp = sh.pp;
        p.tp = sh.tp;
        p.ac = sh.ac;
        p.compile = sh.compile;
        p.moe_imbalance = f;
        if (sh.backend != EpBackend::kAllToAll) p.ep_backend = sh.backend;
        if (sh.backend == EpBackend::kAllGather) {
          p.runtime = Runtime::kMegatron;
          p.zero = 1;
        }
        const Result r = sim.run(s.resolve(p, sh.pp > 1 ? 4 * mod.gpus / sh.pp / sh.tp : 0));
        CHECK(r.compute_s + r.exposed_comm_s <= r.step_s * (1 + 1e-9));
        if (!first) {
          if (sh.ep == 1) {
            CHECK(r.step_s == prev.step_s);
            CHECK(r.peak_bytes == prev.peak_bytes);
          } else {
            CHECK(r.step_s >= prev.step_s * (1 - 1e-12));
            CHECK(r.compute_s >= prev.compute_s * (1 - 1e-12));
            // (the all-gather dispatcher moves every token whatever the router chose: equal bytes)
            CHECK(r.comm[static_cast<int>(CommKind::kAllToAll)].bytes_per_rank >=
                  prev.comm[static_cast<int>(CommKind::kAllToAll)].bytes_per_rank);
          }
        }
        if (sh.ep > 1 && f == 2.0) CHECK(r.step_s > prev.step_s);
        prev = r;
        first = false;
        ++checked;
      }
    }
  }
  CHECK(checked == 56);
}
