// Block-scaled fp8/fp4 linears (--fp8 mxfp8 / nvfp4, docs/model.md "Block-scaled fp8/fp4"): GEMMs at the
// fp8 / fp4 peak, the bytes of the block-scaled copies and their casts, the Blackwell-only refusal and the
// runtimes that have the recipes.
#include <catch2/catch.hpp>

#include "sim_helpers.hpp"
#include "simulator/lowering/units_stages.hpp"
#include "simulator/plan/capabilities.hpp"

using namespace shardplan;
using shardplan::test::Setup;

namespace {
/// Elements of the blocks' linear weights (2-D tensors of the attention and MLP layers), whole (no sharding).
double block_linear_weight_elems(const ModelGraph& m) {
  double n = 0;
  for (const Layer* l : m.order())
    if (l->block >= 0 && (l->kind == LayerKind::kAttention || l->kind == LayerKind::kMlp))
      for (const auto& t : l->tensors)
        if (t.dim1 > 1) n += static_cast<double>(t.dim0) * static_cast<double>(t.dim1);
  return n;
}
}  // namespace

TEST_CASE("block-scaled GEMM time: MXFP8 at the fp8 peak, NVFP4 at the fp4 peak", "[simulator][blockfp]") {
  Setup b200("llama3-8b", "dgx-b200", 8);
  Setup gb300("llama3-8b", "gb300-nvl72", 8);
  const double m = 8192, n = 4096, k = 14336;
  const CostModel& c = *b200.costs;
  const double eff = c.gemm_efficiency(m, n, k);
  // Datasheet dense peaks (topologies/presets): B200 4.5 PFLOPS fp8, 9 PFLOPS fp4; GB300 15 PFLOPS fp4.
  REQUIRE(b200.cluster->spec().gpu.peak_fp8_flops == Approx(4.5e15));
  REQUIRE(b200.cluster->spec().gpu.peak_fp4_flops == Approx(9e15));
  REQUIRE(gb300.cluster->spec().gpu.peak_fp4_flops == Approx(15e15));
  const double r8 = c.constants().mxfp8_ratio, r4 = c.constants().nvfp4_ratio;
  CHECK(c.gemm_fp8_s(m, n, k, r8) == Approx(2 * m * n * k / (4.5e15 * eff * r8)).epsilon(1e-12));
  CHECK(c.gemm_fp4_s(m, n, k, r4) == Approx(2 * m * n * k / (9e15 * eff * r4)).epsilon(1e-12));
  // The shape curve is the GPU's: GB300's fp4 GEMM takes 9 / 15 of B200's if both curves agree.
  const double eff300 = gb300.costs->gemm_efficiency(m, n, k);
  CHECK(gb300.costs->gemm_fp4_s(m, n, k, r4) / c.gemm_fp4_s(m, n, k, r4) ==
        Approx(9.0 / 15.0 * eff / eff300).epsilon(1e-12));
}

TEST_CASE("block-scaled copies: e4m3 + e8m0 per 32 (MXFP8), e2m1 + e4m3 per 16 (NVFP4)",
          "[simulator][blockfp]") {
  using detail::fp8_copy_bytes_per_elem;
  CHECK(fp8_copy_bytes_per_elem(Fp8::kTensorwise) == 1.0);
  CHECK(fp8_copy_bytes_per_elem(Fp8::kMxfp8) == 33.0 / 32.0);
  CHECK(fp8_copy_bytes_per_elem(Fp8::kNvfp4) == 9.0 / 16.0);
  CHECK(detail::fp8_workspace_bytes_per_elem(Fp8::kNvfp4) == 9.0 / 8.0);  // row + column copies
  // Llama-3-8B's blocks: per block wq, wo 4096 x 4096, wk, wv 1024 x 4096, w1, w3 14336 x 4096, w2 4096 x
  // 14336 = 2 x 16,777,216 + 2 x 4,194,304 + 3 x 58,720,256 = 218,103,808 elements; x 32 blocks =
  // 6,979,321,856. Their MXFP8 scales: one byte per 32 = 218,103,808 bytes; NVFP4: one per 16 = 436,207,616.
  Setup s("llama3-8b", "dgx-b200", 8);
  const double w = block_linear_weight_elems(s.model);
  REQUIRE(w == 6979321856.0);
  CHECK(w * (fp8_copy_bytes_per_elem(Fp8::kMxfp8) - 1.0) == 218103808.0);
  CHECK(w * (fp8_copy_bytes_per_elem(Fp8::kNvfp4) - 0.5) == 436207616.0);
}

TEST_CASE("block-scaled cast traffic of one GEMM", "[simulator][blockfp]") {
  // X input, Y output, W weight elements. MXFP8 (mx_mm): each cast reads bf16 (2) and writes 1 + 1/32:
  // forward X and W dim0, backward X dim1, W dim1, Y dim0 and dim1 -> fwd 3.03125 (X + W), bwd 3.03125
  // (X + W + 2Y). NVFP4 (nvfp4_mm_triton): per operand amax read (2) + quantize read (2) + row and column
  // copies (2 x 9/16) = 5.125; forward X and W, backward Y only.
  const double X = 1000, Y = 3000, W = 7000;
  detail::UnitSums mx, nv;
  detail::blockfp_cast_bytes(mx, Fp8::kMxfp8, X, Y, W);
  detail::blockfp_cast_bytes(nv, Fp8::kNvfp4, X, Y, W);
  CHECK(mx.cast_fwd_bytes == Approx(3.03125 * (X + W)));
  CHECK(mx.cast_bwd_bytes == Approx(3.03125 * (X + W + 2 * Y)));
  CHECK(nv.cast_fwd_bytes == Approx(5.125 * (X + W)));
  CHECK(nv.cast_bwd_bytes == Approx(5.125 * Y));
}

TEST_CASE("block-scaled recipes need Blackwell and torchtitan's converters", "[simulator][blockfp][plans]") {
  Setup h100("llama3-8b", "dgx-h100", 8);
  for (Fp8 f : {Fp8::kMxfp8, Fp8::kNvfp4}) {
    Plan p;
    p.fp8 = f;
    CHECK_THROWS_WITH(h100.resolve(p),
                      Catch::Contains("--fp8") && Catch::Contains("Blackwell") && Catch::Contains("hopper"));
    // The table's answer for the recipe's own feature, whatever else a runtime refuses first.
    const Feature feature = f == Fp8::kMxfp8 ? Feature::kMxfp8 : Feature::kNvfp4;
    CHECK(plan_features(p, 8)[static_cast<std::size_t>(feature)]);
    CHECK(capability(Runtime::kFsdp2, feature).support == Support::kYes);
    for (Runtime r : {Runtime::kFsdp1, Runtime::kDeepSpeed, Runtime::kMegatron})
      CHECK(capability(r, feature).support == Support::kNo);
    CHECK_FALSE(capability_refusal(p, 8).has_value());  // fsdp2
  }
  Setup b200("llama3-8b", "dgx-b200", 8);
  Plan p;
  p.fp8 = Fp8::kNvfp4;
  CHECK_NOTHROW(b200.resolve(p));
}

TEST_CASE("block-scaled steps: faster GEMMs, same FLOPs and state, MFU against the bf16 peak",
          "[simulator][blockfp]") {
  for (const char* cluster : {"dgx-b200", "gb300-nvl72"}) {
    Setup s("llama3-70b", cluster, 64);
    Plan plan;
    plan.seq = 8192;
    plan.mbs = 2;
    plan.ac = AcMode::kFull;
    const Result bf16 = s.run(plan);
    plan.fp8 = Fp8::kMxfp8;
    const Result mx = s.run(plan);
    plan.fp8 = Fp8::kNvfp4;
    const Result nv = s.run(plan);
    for (const Result* r : {&mx, &nv}) {
      CHECK(r->compute_s + r->exposed_comm_s <= r->step_s * (1 + 1e-12));
      CHECK(r->mfu > 0);
      CHECK(r->mfu <= 1.0);
      CHECK(r->model_flops_per_token == bf16.model_flops_per_token);
      CHECK(r->persistent_split == bf16.persistent_split);
    }
    CHECK(mx.step_s < bf16.step_s);
    CHECK(nv.step_s < mx.step_s);  // twice the peak, fewer backward casts
    CHECK(nv.mfu > mx.mfu);        // one numerator and one (bf16) denominator: MFU follows the step time
    CHECK(nv.mfu / mx.mfu == Approx(mx.step_s / nv.step_s).epsilon(1e-9));
  }
}

TEST_CASE("block-scaled plan keys round-trip through the run-record JSON", "[simulator][blockfp][plans]") {
  for (Fp8 f : {Fp8::kMxfp8, Fp8::kNvfp4}) {
    Plan p;
    p.fp8 = f;
    const Json j = plan_to_json(p);
    CHECK(j.at("fp8") == to_string(f));
    CHECK(plan_from_json(JsonObj(j, "plan.json", "")).fp8 == f);
  }
}
