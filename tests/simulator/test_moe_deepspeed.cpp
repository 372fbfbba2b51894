// --moe-impl deepspeed (docs/model.md "MoE implementations", "Capacity factor"): DeepSpeed 0.19.8's
// DeepSpeed-MoE layer (deepspeed/moe/sharded_moe.py MOELayer, TopKGate) pads every expert to its capacity
// C = max(ceil(S / E x F x k), 4) (_capacity; F = --moe-capacity-factor, DeepSpeed's 1.0 when 0), so a rank's
// experts run E x C rows whatever the routing. Closed forms on tiny_moe (hidden 32, ffn 48, 8 experts, top 2,
// T = 64 tokens); tests/reference/test_deepspeed_moe_capacity.py checks the same list against the real layer.
#include <catch2/catch.hpp>

#include "sim_helpers.hpp"
#include "simulator/lowering/units_stages.hpp"
#include "simulator/memory/accounting.hpp"
#include "simulator/memory/layer_memory.hpp"
#include "simulator/parallel/parallel.hpp"
#include "simulator/plan/moe_rows.hpp"

using namespace shardplan;
using fixture::Setup;
using test::first_moe_layer;
using test::tiny_moe;
using test::unit_with_moe;
using test::units_of;

namespace {

Plan deepspeed(const Setup& s, int ep, double imbalance, double factor) {
  Plan p;
  p.runtime = Runtime::kDeepSpeed;
  p.zero = 1;
  p.ep_backend = EpBackend::kAllToAll;
  p.moe_impl = MoeImpl::kDeepSpeed;
  p.seq = 64;
  p.ep = ep;
  p.moe_imbalance = imbalance;
  p.moe_capacity_factor = factor;
  return s.resolve(p);
}

}  // namespace

TEST_CASE("DeepSpeed-MoE: capacity, min_capacity and rows, closed form", "[simulator][moe][deepspeed]") {
  // _capacity: ceil(64 / 8 x (F x 2)): F 1 -> 16, F 1.25 -> 20, F 0.25 -> 4, F 0.1 -> ceil(1.6) = 2 -> the
  // minimum 4 (Megatron-core's get_capacity, no minimum: ceil(128 / 8 x 0.1) = 2); F 0 -> DeepSpeed's 1.0.
  CHECK(deepspeed_expert_capacity(64, 8, 2, 1.0) == 16);
  CHECK(deepspeed_expert_capacity(64, 8, 2, 1.25) == 20);
  CHECK(deepspeed_expert_capacity(64, 8, 2, 0.25) == 4);
  CHECK(deepspeed_expert_capacity(64, 8, 2, 0.1) == 4);
  CHECK(moe_expert_capacity(128, 8, 0.1) == 2);
  CHECK(deepspeed_expert_capacity(64, 8, 2, 0) == 16);
  Setup s(ModelGraph::from_spec(tiny_moe()), load_cluster_spec("dgx-h100"), 2);
  // E x C rows at every imbalance, with or without EP (DeepSpeed's ep_size).
  for (int ep : {1, 2})
    for (double imb : {1.0, 1.5, 3.0}) {
      INFO("ep " << ep << " imbalance " << imb);
      CHECK(moe_busiest_rows(64, 2, 8, deepspeed(s, ep, imb, 1.25)) == 160);
      CHECK(moe_busiest_rows(64, 2, 8, deepspeed(s, ep, imb, 0.1)) == 32);
      CHECK(moe_rows_factor(64, 2, 8, deepspeed(s, ep, imb, 1.25)) == 160.0 / 128);
    }
}

TEST_CASE("DeepSpeed-MoE: the layer's saved bytes, closed form", "[simulator][moe][deepspeed]") {
  // Per token (h 32, E 8, k 2; moe_tensors_deepspeed.cpp): the input 64, the gate's fp32 input 128, its fp32
  // gates 32, top2gating's two fp32 masks 64 and four fp32 [S] 16, the slots 16, the combine's [k, S, M] rows
  // 128 and fp32 gates 8: 456 B. Per capacity row: the slot map 8, the dispatched
  // input 64, the experts' w1, SiLU, w3 and product outputs 4 x 48 x 2 = 384: 456 B.
  Setup s(ModelGraph::from_spec(tiny_moe()), load_cluster_spec("dgx-h100"), 2);
  const Layer& moe = first_moe_layer(s.model);
  const double T = 64, token = 456.0 * 64;
  for (double imb : {1.0, 1.5, 3.0}) {
    INFO("imbalance " << imb);
    CHECK(layer_saved_bytes(moe, deepspeed(s, 2, imb, 1.0), T, false) == token + 456.0 * 128);
    CHECK(layer_saved_bytes(moe, deepspeed(s, 2, imb, 0), T, false) == token + 456.0 * 128);
    CHECK(layer_saved_bytes(moe, deepspeed(s, 2, imb, 1.25), T, false) == token + 456.0 * 160);
    CHECK(layer_saved_bytes(moe, deepspeed(s, 1, imb, 0.1), T, false) == token + 456.0 * 32);
  }
  // The all-to-all moves the [E, C, M] buffer, the padded rows (moe_busiest_rows: E x C = 160 at F 1.25) x 32
  // x 2 B: 8,192 B at the mean (128 rows) times 160 / 128.
  const Plan f125 = deepspeed(s, 2, 1.0, 1.25);
  CHECK(moe_busiest_rows(64, 2, 8, f125) == 160);
  CHECK(moe_all_to_all_buffer_bytes(s.model.spec(), f125, 160.0) == 8192.0 * 160 / 128);
}

TEST_CASE("DeepSpeed-MoE: the experts run the padded rows, independent of the imbalance",
          "[simulator][moe][deepspeed][time]") {
  // EP 2, 4 local experts: F 1 runs 128 rows (32 per local expert), F 1.25 160 (40): the GEMMs of w1 and w3
  // (h -> f) and w2 (f -> h) over 40 rows instead of 32, and 32 more rows of expert-side traffic, eager:
  // SiLU reads and writes 2 x 96, the product reads two and writes 3 x 96 (480 B per row), _sparse_encode's
  // gather reads and writes the row (2 x 64) and the slot (8), the experts' torch.cat and the decode's padded
  // copy read and write it (2 x 2 x 64): 872 B per row. Backward twice both.
  Setup s(ModelGraph::from_spec(tiny_moe()), load_cluster_spec("dgx-h100"), 2);
  const CostModel& c = *s.costs;
  const SimUnit base = unit_with_moe(units_of(s, deepspeed(s, 2, 1.0, 1.0)));
  const SimUnit wide = unit_with_moe(units_of(s, deepspeed(s, 2, 1.0, 1.25)));
  const double gemm_base = 4 * (2 * c.gemm_s(32, 48, 32) + c.gemm_s(32, 32, 48));
  const double gemm_wide = 4 * (2 * c.gemm_s(40, 48, 32) + c.gemm_s(40, 32, 48));
  const double elem = c.memory_s(32 * 872.0);
  CHECK(wide.fwd_s - base.fwd_s == Approx(gemm_wide - gemm_base + elem).epsilon(1e-9));
  CHECK(wide.bwd_s - base.bwd_s == Approx(2 * (gemm_wide - gemm_base) + 2 * elem).epsilon(1e-9));
  const Result r1 = s.run(deepspeed(s, 2, 1.0, 1.25));
  for (double imb : {1.5, 3.0}) {
    INFO("imbalance " << imb);
    const SimUnit u = unit_with_moe(units_of(s, deepspeed(s, 2, imb, 1.25)));
    CHECK(u.fwd_s == wide.fwd_s);
    CHECK(u.bwd_s == wide.bwd_s);
    const Result r = s.run(deepspeed(s, 2, imb, 1.25));
    CHECK(r.step_s == r1.step_s);
    CHECK(r.peak_bytes == r1.peak_bytes);
  }
}

TEST_CASE("property: DeepSpeed-MoE, a larger capacity factor never needs less memory or time",
          "[simulator][moe][deepspeed]") {
  Setup s(ModelGraph::from_spec(tiny_moe()), load_cluster_spec("dgx-h100"), 2);
  for (int ep : {1, 2}) {
    Bytes prev_peak = 0, prev_bound = 0;
    double prev_step = 0;
    for (double f : {0.1, 0.25, 0.5, 1.0, 1.25, 2.0, 4.0}) {
      INFO("ep " << ep << " F " << f);
      const Plan p = deepspeed(s, ep, 1.0, f);
      const Result r = s.run(p);
      const Bytes bound = memory_lower_bound(s.model, p);
      CHECK(r.peak_bytes >= prev_peak);
      CHECK(bound >= prev_bound);
      CHECK(r.step_s >= prev_step);
      prev_peak = r.peak_bytes;
      prev_bound = bound;
      prev_step = r.step_s;
    }
    // --moe-capacity-factor 0 is DeepSpeed's default 1.0.
    CHECK(s.run(deepspeed(s, ep, 1.0, 0)).peak_bytes == s.run(deepspeed(s, ep, 1.0, 1.0)).peak_bytes);
  }
}

TEST_CASE("DeepSpeed-MoE: only on the deepspeed runtime", "[simulator][moe][deepspeed][capabilities]") {
  Setup s(ModelGraph::from_spec(tiny_moe()), load_cluster_spec("dgx-h100"), 2);
  Plan p;
  p.seq = 64;
  p.moe_impl = MoeImpl::kDeepSpeed;
  CHECK_THROWS_WITH(s.resolve(p), Catch::Contains("--moe-impl") && Catch::Contains("--runtime deepspeed"));
  p.runtime = Runtime::kFsdp1;
  CHECK_THROWS_WITH(s.resolve(p), Catch::Contains("--moe-impl") && Catch::Contains("--runtime deepspeed"));
  p.runtime = Runtime::kMegatron;
  p.zero = 1;
  CHECK_THROWS_WITH(s.resolve(p), Catch::Contains("--moe-impl") && Catch::Contains("Megatron-core"));
  p.runtime = Runtime::kDeepSpeed;
  CHECK_NOTHROW(s.resolve(p));
  p.moe_capacity_factor = 1.25;
  CHECK_NOTHROW(s.resolve(p));
  // Another implementation's router under deepspeed is dropless: the capacity factor is refused there.
  p.moe_impl = MoeImpl::kGrouped;
  CHECK_THROWS_WITH(s.resolve(p),
                    Catch::Contains("--moe-capacity-factor") && Catch::Contains("--moe-impl deepspeed"));
}
