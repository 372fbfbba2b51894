// Float8 linear layers (torchao recipes): what changes with --fp8 and --fp8-all-gather, checked against
// quantities derived from the model's tensors and the cost model, and the plans resolve_plan refuses.
#include <catch2/catch.hpp>

#include "sim_helpers.hpp"

using namespace shardplan;
using shardplan::test::Setup;

namespace {
/// Elements of the blocks' linear weights (2-D tensors of attention and MLP layers) that FSDP2 all-gathers
/// over F ranks: ceil(rows / F) x cols per rank, times F.
double gathered_linear_weight_elems(const ModelGraph& m, int F) {
  double n = 0;
  for (const Layer* l : m.order())
    if (l->block >= 0 && (l->kind == LayerKind::kAttention || l->kind == LayerKind::kMlp))
      for (const auto& t : l->tensors)
        if (t.dim1 > 1) n += static_cast<double>((t.dim0 + F - 1) / F) * static_cast<double>(t.dim1) * F;
  return n;
}
const CommStats& comm(const Result& r, CommKind k) {
  return r.comm[static_cast<int>(k)];
}
/// One plan run in 16 bits and with each float8 recipe.
struct Recipes {
  Result bf16, tw, rw;
};
Recipes run_recipes(const Setup& s, Plan plan) {
  Recipes r;
  r.bf16 = s.run(plan);
  plan.fp8 = Fp8::kTensorwise;
  r.tw = s.run(plan);
  plan.fp8 = Fp8::kRowwise;
  r.rw = s.run(plan);
  return r;
}
}  // namespace

TEST_CASE("fp8 GEMM time: FLOPs / (fp8 peak x bf16 shape efficiency x recipe ratio)", "[simulator][fp8]") {
  Setup s("llama3-8b", "dgx-h100", 8);
  const CostModel& c = *s.costs;
  const double m = 8192, n = 4096, k = 14336;
  const double eff = c.gemm_efficiency(m, n, k);
  const double fp8_peak = s.cluster->spec().gpu.peak_fp8_flops;
  REQUIRE(fp8_peak == Approx(1978.9e12));
  const double ratio = c.constants().fp8_tensorwise_ratio;
  CHECK(c.gemm_fp8_s(m, n, k, ratio) == Approx(2 * m * n * k / (fp8_peak * eff * ratio)).epsilon(1e-12));
  // Same shape in bf16 takes (fp8 peak / bf16 peak) / ratio = 2 / ratio times as long.
  CHECK(c.gemm_s(m, n, k) / c.gemm_fp8_s(m, n, k, ratio) ==
        Approx(fp8_peak / s.cluster->spec().gpu.peak_bf16_flops * ratio).epsilon(1e-12));
}

TEST_CASE("fp8 all-gather: the blocks' linear weights travel as 1 byte instead of 2, nothing else changes",
          "[simulator][fp8]") {
  Setup s("llama3-8b", "dgx-h100", 8);
  Plan plan;
  plan.seq = 4096;
  plan.ac = AcMode::kFull;
  plan.fp8 = Fp8::kTensorwise;
  const Result bf16_ag = s.run(plan);
  plan.fp8_all_gather = true;
  const Result fp8_ag = s.run(plan);
  const double w = gathered_linear_weight_elems(s.model, 8);
  // Sent bytes per rank = (F-1)/F x buffer per gather; the blocks are gathered twice per step (forward, and
  // again in backward after resharding); only the last unit (norm + head, no float8) stays gathered in
  // between.
  const double saved =
      comm(bf16_ag, CommKind::kAllGather).bytes_per_rank - comm(fp8_ag, CommKind::kAllGather).bytes_per_rank;
  CHECK(saved == Approx(2.0 * w * (8 - 1) / 8).epsilon(1e-9));
  CHECK(comm(fp8_ag, CommKind::kAllGather).count == comm(bf16_ag, CommKind::kAllGather).count);
  // Smaller gathered buffers: the peak can only go down, by at most two blocks' worth of bf16 -> fp8 savings.
  CHECK(fp8_ag.peak_bytes <= bf16_ag.peak_bytes);
  // No float8 weight cast in the compute stream (done on the shard before the gather): never slower.
  CHECK(fp8_ag.step_s <= bf16_ag.step_s);
}

TEST_CASE(
    "fp8 tensorwise with TP: the sequence-parallel all-gathers of the block inputs carry 1-byte elements",
    "[simulator][fp8]") {
  Setup s("llama3-8b", "dgx-h100", 16);
  Plan plan;
  plan.tp = 8;
  plan.seq = 8192;
  plan.ac = AcMode::kFull;
  const auto [bf16, tw, rw] = run_recipes(s, plan);
  // Per block: 2 all-gathers of T x h in forward go from 2 bytes to 1 per element, and full AC runs them a
  // second time when it recomputes the block in backward; their backward mirrors (reduce-scatters of the
  // input gradients) and the backward all-gathers of output gradients stay 16-bit, as does the head's
  // all-gather.
  const double T = 8192, h = 4096, blocks = 32;
  const double block_ag = 2 * blocks * T * h;  // elements per forward
  const double passes = 2;                     // forward + full-AC recomputation
  CHECK(comm(bf16, CommKind::kTpAllGather).bytes_per_rank - comm(tw, CommKind::kTpAllGather).bytes_per_rank ==
        Approx(passes * block_ag * (8 - 1) / 8.0 * (2 - 1)).epsilon(1e-9));
  CHECK(comm(rw, CommKind::kTpAllGather).bytes_per_rank ==
        Approx(comm(bf16, CommKind::kTpAllGather).bytes_per_rank));
  CHECK(comm(tw, CommKind::kTpReduceScatter).bytes_per_rank ==
        Approx(comm(bf16, CommKind::kTpReduceScatter).bytes_per_rank));
}

TEST_CASE("fp8 speeds up GEMM-bound steps and leaves FLOPs, memory state and the embedding/head alone",
          "[simulator][fp8]") {
  // Llama-3-70B on 64 H100, 2 x 8192 tokens: the blocks' GEMMs dominate, so float8 must be faster; the model
  // FLOPs (hence MFU's numerator) and the persistent state do not depend on the GEMM dtype.
  Setup s("llama3-70b", "dgx-h100", 64);
  Plan plan;
  plan.seq = 8192;
  plan.mbs = 2;
  plan.ac = AcMode::kFull;
  const auto [bf16, tw, rw] = run_recipes(s, plan);
  CHECK(tw.step_s < bf16.step_s);
  CHECK(rw.step_s < bf16.step_s);
  CHECK(tw.step_s < rw.step_s);  // rowwise: smaller kernel ratio and more casts
  CHECK(tw.model_flops_per_token == bf16.model_flops_per_token);
  CHECK(tw.mfu > bf16.mfu);  // MFU stays against the bf16 peak: float8 shows as a higher MFU
  CHECK(tw.persistent_split == bf16.persistent_split);
}

TEST_CASE("resolve_plan refuses impossible float8 plans", "[simulator][fp8][plans]") {
  Setup s("llama3-8b", "dgx-h100", 8);
  Plan p;
  p.fp8 = Fp8::kTensorwise;
  p.precision = Precision::kFp32;
  CHECK_THROWS_WITH(s.resolve(p), Catch::Contains("--fp8") && Catch::Contains("16-bit compute dtype"));
  p = Plan{};
  p.fp8 = Fp8::kRowwise;
  p.fp8_all_gather = true;
  CHECK_THROWS_WITH(s.resolve(p), Catch::Contains("--fp8-all-gather") && Catch::Contains("tensorwise"));
  p = Plan{};
  p.fp8 = Fp8::kTensorwise;
  p.fp8_all_gather = true;
  p.runtime = Runtime::kFsdp1;
  CHECK_THROWS_WITH(s.resolve(p), Catch::Contains("FSDP2"));
  p.runtime = Runtime::kFsdp2;
  p.zero = 0;
  CHECK_THROWS_WITH(s.resolve(p), Catch::Contains("FSDP2"));
  p.zero = 3;
  CHECK_NOTHROW(s.resolve(p));
  // torch._scaled_mm needs sm89 or newer: no float8 GEMM on an A100 (or a V100, check_volta); an L40S (Ada,
  // sm89) has them.
  for (const char* cluster : {"dgx-a100-80g", "dgx-v100-32g"}) {
    Setup old(std::string("llama3-8b"), cluster, 8);
    Plan q;
    q.fp8 = Fp8::kRowwise;
    if (std::string(cluster) == "dgx-v100-32g") q.precision = Precision::kFp16Mixed;
    CHECK_THROWS_WITH(old.resolve(q), Catch::Contains("--fp8") && Catch::Contains("float8 tensor cores"));
  }
  Setup ada("llama3-8b", "l40s-pcie", 8);
  Plan q;
  q.fp8 = Fp8::kTensorwise;
  CHECK_NOTHROW(ada.resolve(q));
}

TEST_CASE("fp8 plan keys round-trip through the run-record JSON", "[simulator][fp8][plans]") {
  Plan p;
  p.fp8 = Fp8::kTensorwise;
  p.fp8_all_gather = true;
  const Json j = plan_to_json(p);
  CHECK(j.at("fp8") == "tensorwise");
  CHECK(j.at("fp8_all_gather") == true);
  const Plan q = plan_from_json(JsonObj(j, "plan.json", ""));
  CHECK(q.fp8 == Fp8::kTensorwise);
  CHECK(q.fp8_all_gather);
  Json bad = j;
  bad["fp8"] = "e5m2";
  CHECK_THROWS_WITH(plan_from_json(JsonObj(bad, "plan.json", "")),
                    Catch::Contains("fp8") && Catch::Contains("none, tensorwise, rowwise"));
}
