// --moe-capacity-factor F and --moe-pad-to-capacity (docs/model.md "Capacity factor"): Megatron-core
// 0.8.0's expert capacity (megatron/core/transformer/moe/moe_utils.py get_capacity,
// topk_softmax_with_capacity) bounds the rows the busiest expert-parallel rank's experts receive by experts x
// capacity, capacity = ceil(T x top_k / experts x F); padded, every expert gets exactly its capacity. The
// dropped rows skip the experts: every expert-side tensor (ActTensor::expert_rows), the grouped GEMMs and the
// all-to-all shrink.
#include <catch2/catch.hpp>

#include "sim_helpers.hpp"
#include "simulator/lowering/units_stages.hpp"
#include "simulator/memory/accounting.hpp"
#include "simulator/memory/layer_memory.hpp"
#include "simulator/parallel/parallel.hpp"

using namespace shardplan;
using fixture::Setup;
using test::tiny_moe;
using test::units_of;

namespace {

/// Megatron-core with its all-to-all dispatcher (the only one with a capacity, transformer_config.py).
Plan megatron(const Setup& s, int ep, double imbalance, double factor, bool pad) {
  Plan p;
  p.runtime = Runtime::kMegatron;
  p.zero = 1;  // the distributed optimizer (megatron shards the optimizer state only)
  p.ep_backend = EpBackend::kAllToAll;
  p.seq = 64;
  p.ep = ep;
  p.moe_imbalance = imbalance;
  p.moe_capacity_factor = factor;
  p.moe_pad_to_capacity = pad;
  return s.resolve(p);
}

}  // namespace

TEST_CASE("MoE capacity: capacity and the busiest rank's rows, closed form", "[simulator][moe][capacity]") {
  // tiny_moe: T = 64 tokens (seq 64, mbs 1), top_k 2, 8 experts: T x top_k = 128 routed rows, 16 per expert.
  // get_capacity: ceil(128 / 8 x F): F 1.25 -> 20, F 1.1 -> ceil(17.6) = 18, F 0.5 -> 8, F 2 -> 32.
  CHECK(moe_expert_capacity(128, 8, 1.25) == 20);
  CHECK(moe_expert_capacity(128, 8, 1.1) == 18);
  CHECK(moe_expert_capacity(128, 8, 0.5) == 8);
  CHECK(moe_expert_capacity(128, 8, 2.0) == 32);
  Setup s(ModelGraph::from_spec(tiny_moe()), load_cluster_spec("dgx-h100"), 2);
  // EP 2: the busiest rank's dropless rows are ceil(128 x imbalance); the capacity caps them at 8 x C.
  //   F 1.25 (8 x 20 = 160): imbalance 1 -> 128 (nothing dropped), 1.5 -> min(192, 160) = 160, 3 -> 160.
  //   F 1.1 (8 x 18 = 144): imbalance 1.5 -> 144.  F 0.5 (8 x 8 = 64): imbalance 1 -> 64.
  CHECK(ep_busiest_rows(128, 8, megatron(s, 2, 1.0, 1.25, false)) == 128);
  CHECK(ep_busiest_rows(128, 8, megatron(s, 2, 1.5, 1.25, false)) == 160);
  CHECK(ep_busiest_rows(128, 8, megatron(s, 2, 3.0, 1.25, false)) == 160);
  CHECK(ep_busiest_rows(128, 8, megatron(s, 2, 1.5, 1.1, false)) == 144);
  CHECK(ep_busiest_rows(128, 8, megatron(s, 2, 1.0, 0.5, false)) == 64);
  // Imbalance above F never raises the rows: min(imbalance, F) x the mean, rounded per expert.
  for (double f : {0.5, 1.0, 1.1, 1.25, 2.0})
    for (double imb : {1.0, 1.5, 2.0, 4.0}) {
      INFO("F " << f << " imbalance " << imb);
      const std::int64_t rows = ep_busiest_rows(128, 8, megatron(s, 2, imb, f, false));
      CHECK(rows <= 8 * moe_expert_capacity(128, 8, f));
      CHECK(rows <= ep_busiest_rows(128, 8, megatron(s, 2, imb, 0, false)));
      // Padded: exactly 8 x capacity, whatever the imbalance.
      CHECK(ep_busiest_rows(128, 8, megatron(s, 2, imb, f, true)) == 8 * moe_expert_capacity(128, 8, f));
    }
  // Without EP a capacity below 1 still drops (F 0.5: 64 rows), a padded one pads (F 1.25: 160).
  CHECK(ep_busiest_rows(128, 8, megatron(s, 1, 1.0, 0.5, false)) == 64);
  CHECK(ep_busiest_rows(128, 8, megatron(s, 1, 1.0, 1.25, false)) == 128);
  CHECK(ep_busiest_rows(128, 8, megatron(s, 1, 1.0, 1.25, true)) == 160);
}

TEST_CASE("MoE capacity: the saved expert side and the all-to-all, closed form",
          "[simulator][moe][capacity]") {
  // As test_moe_imbalance.cpp: per layer the token side saves 408 B per token (x 64 = 26,112 B), the
  // expert side 456 B per received row under EP (448 B without: no _permute index).
  Setup s(ModelGraph::from_spec(tiny_moe()), load_cluster_spec("dgx-h100"), 2);
  const Layer& moe = test::first_moe_layer(s.model);
  const double T = 64;
  CHECK(layer_saved_bytes(moe, megatron(s, 2, 1.5, 0, false), T, false) == 26112.0 + 456.0 * 192);
  CHECK(layer_saved_bytes(moe, megatron(s, 2, 1.5, 1.25, false), T, false) == 26112.0 + 456.0 * 160);
  CHECK(layer_saved_bytes(moe, megatron(s, 2, 1.0, 1.25, false), T, false) == 26112.0 + 456.0 * 128);
  CHECK(layer_saved_bytes(moe, megatron(s, 2, 1.0, 1.25, true), T, false) == 26112.0 + 456.0 * 160);
  CHECK(layer_saved_bytes(moe, megatron(s, 1, 1.0, 0.5, false), T, false) == 26112.0 + 448.0 * 64);
  // The all-to-all buffer: T x top_k x h x 2 B at the mean (64 x 2 x 32 x 2 = 8,192 B) times rows / mean:
  // F 1.25 with imbalance 1.5: 160 / 128.
  // The buffer takes the busiest rank's rows (ep_busiest_rows, as the experts' side): 160, 192 and 160.
  const ModelSpec& sp = s.model.spec();
  const auto buffer = [&](const Plan& p) {
    return moe_all_to_all_buffer_bytes(sp, p, static_cast<double>(ep_busiest_rows(128, 8, p)));
  };
  CHECK(buffer(megatron(s, 2, 1.5, 1.25, false)) == 8192.0 * 160 / 128);
  CHECK(buffer(megatron(s, 2, 1.5, 0, false)) == 8192.0 * 1.5);
  CHECK(buffer(megatron(s, 2, 1.0, 1.25, true)) == 8192.0 * 160 / 128);
}

TEST_CASE(
    "MoE capacity: padded, the step does not depend on the imbalance, and dropped rows skip the experts",
    "[simulator][moe][capacity][time]") {
  // EP 2, 4 local experts, Megatron-core's fused kernels (RuntimeTraits::fused_kernels: SiLU and the product
  // one pass). Dropless at imbalance 1 the experts run 128 rows (32 per local expert); F 1.25 at
  // imbalance 1.5 runs 160 (40 per expert): the grouped GEMMs of gate and up (h -> f) and down (f -> h) over
  // 40 rows instead of 32, and the expert side's elementwise traffic over 32 more rows: the fused activation
  // reads w1's and w3's outputs and writes the product, 3 x 2f = 288 B per row, _permute and _unpermute 136 B
  // each (test_moe_time.cpp): 560 B per row. Backward twice both.
  Setup s(ModelGraph::from_spec(tiny_moe()), load_cluster_spec("dgx-h100"), 2);
  const CostModel& c = *s.costs;
  const SimUnit base = test::unit_with_moe(units_of(s, megatron(s, 2, 1.0, 0, false)));
  const SimUnit capped = test::unit_with_moe(units_of(s, megatron(s, 2, 1.5, 1.25, false)));
  const double gemm_base = 4 * (2 * c.gemm_s(32, 48, 32) + c.gemm_s(32, 32, 48));
  const double gemm_capped = 4 * (2 * c.gemm_s(40, 48, 32) + c.gemm_s(40, 32, 48));
  const double elem = c.memory_s(32 * 560.0);
  CHECK(capped.fwd_s - base.fwd_s == Approx(gemm_capped - gemm_base + elem).epsilon(1e-9));
  CHECK(capped.bwd_s - base.bwd_s == Approx(2 * (gemm_capped - gemm_base) + 2 * elem).epsilon(1e-9));
  // Padded, the unit and the whole step are the same at every imbalance (and equal the capped unit at 1.5,
  // whose rows are the capacity too).
  const Result pad1 = s.run(megatron(s, 2, 1.0, 1.25, true));
  for (double imb : {1.5, 3.0}) {
    INFO("imbalance " << imb);
    const SimUnit u = test::unit_with_moe(units_of(s, megatron(s, 2, imb, 1.25, true)));
    CHECK(u.fwd_s == capped.fwd_s);
    CHECK(u.bwd_s == capped.bwd_s);
    const Result r = s.run(megatron(s, 2, imb, 1.25, true));
    CHECK(r.step_s == pad1.step_s);
    CHECK(r.peak_bytes == pad1.peak_bytes);
  }
}

TEST_CASE("property: a larger capacity factor never needs less memory or time",
          "[simulator][moe][capacity]") {
  Setup s(ModelGraph::from_spec(tiny_moe()), load_cluster_spec("dgx-h100"), 2);
  for (bool pad : {false, true})
    for (double imb : {1.0, 2.0}) {
      Bytes prev_peak = 0, prev_bound = 0;
      double prev_step = 0;
      for (double f : {0.25, 0.5, 1.0, 1.25, 2.0, 4.0}) {
        INFO("pad " << pad << " imbalance " << imb << " F " << f);
        const Plan p = megatron(s, 2, imb, f, pad);
        const Result r = s.run(p);
        const Bytes bound = memory_lower_bound(s.model, p);
        CHECK(r.peak_bytes >= prev_peak);
        CHECK(bound >= prev_bound);
        CHECK(r.step_s >= prev_step);
        prev_peak = r.peak_bytes;
        prev_bound = bound;
        prev_step = r.step_s;
      }
      // Unpadded, a capacity above the imbalance drops nothing: F 4 (8 x 64 = 512 rows) is dropless.
      if (!pad) {
        const Plan dropless = megatron(s, 2, imb, 0, false);
        CHECK(s.run(megatron(s, 2, imb, 4.0, false)).peak_bytes == s.run(dropless).peak_bytes);
      }
    }
}

TEST_CASE("MoE capacity: refused where the runtime has none", "[simulator][moe][capacity][capabilities]") {
  Setup s(ModelGraph::from_spec(tiny_moe()), load_cluster_spec("dgx-h100"), 2);
  Plan p;
  p.seq = 64;
  p.moe_capacity_factor = 1.25;
  // torchtitan 0.3.0 routes dropless.
  CHECK_THROWS_WITH(s.resolve(p), Catch::Contains("--moe-capacity-factor") && Catch::Contains("torchtitan"));
  p.runtime = Runtime::kFsdp1;
  CHECK_THROWS_WITH(s.resolve(p), Catch::Contains("--moe-capacity-factor") && Catch::Contains("dropless"));
  p.runtime = Runtime::kDeepSpeed;
  // deepspeed: only DeepSpeed-MoE's layer has a capacity (test_moe_deepspeed.cpp).
  CHECK_THROWS_WITH(s.resolve(p),
                    Catch::Contains("--moe-capacity-factor") && Catch::Contains("--moe-impl deepspeed"));
  // Megatron-core: only with the all-to-all dispatcher (its default is the all-gather one).
  p.runtime = Runtime::kMegatron;
  p.zero = 1;
  CHECK_THROWS_WITH(s.resolve(p), Catch::Contains("--moe-capacity-factor") && Catch::Contains("alltoall"));
  p.ep_backend = EpBackend::kAllToAll;
  CHECK_NOTHROW(s.resolve(p));
  // Padding needs a capacity; a dense model has none.
  p.moe_capacity_factor = 0;
  p.moe_pad_to_capacity = true;
  CHECK_THROWS_WITH(s.resolve(p), Catch::Contains("--moe-pad-to-capacity"));
  Setup dense(ModelGraph::from_spec(test::small_llama(1, 256)), load_cluster_spec("dgx-h100"), 2);
  Plan d;
  d.runtime = Runtime::kMegatron;
  d.zero = 1;
  d.ep_backend = EpBackend::kAllToAll;
  d.seq = 64;
  d.moe_capacity_factor = 1.0;
  CHECK_THROWS_WITH(dense.resolve(d), Catch::Contains("no mixture-of-experts layers"));
}
