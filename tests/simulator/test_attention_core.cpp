// Materialised attention cores (simulator/cost/attention_core.cpp, docs/model.md "Materialised attention"):
// the pass counts read from Megatron-DeepSpeed's fused softmax and Hugging Face GPT-2's eager attention, the
// score tensors saved per layer, TP's split of the heads, recomputation, time, and the plan checks.
#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "sim_helpers.hpp"
#include "simulator/cost/attention_core.hpp"
#include "simulator/lowering/units.hpp"
#include "simulator/plan/knobs.hpp"

using namespace shardplan;
using shardplan::test::Setup;
using shardplan::test::units_of;

namespace {
const Layer& first_attention(const ModelGraph& m) {
  for (const Layer* l : m.order())
    if (l->block == 0 && l->kind == LayerKind::kAttention) return *l;
  FAIL("no attention layer in block 0");
  return *m.order().front();
}
Plan with_core(Plan p, AttentionCore core, bool dropout) {
  p.attention = core;
  p.attention_dropout = dropout;
  return p;
}
}  // namespace

TEST_CASE("pass counts of Megatron's fused softmax per score element", "[simulator][attention]") {
  Plan p;
  p.precision = Precision::kBf16;
  p.seq = 2048;
  p = with_core(p, AttentionCore::kFusedSoftmax, true);
  const ScorePasses r = score_passes(p, false);
  // Causal kernel: reads (s + 1) / 2s of the row (2049 / 4096), writes the row: 2·2049/4096 + 2; dropout
  // reads 2, writes 2 + a 1-byte mask.
  CHECK(r.fwd_bytes == Approx(2.0 * 2049 / 4096 + 2 + 5));
  // Backward: dropout (read 2 + 1, write 2), softmax in place (reads gradient and output over the triangle,
  // writes the row).
  CHECK(r.bwd_bytes == Approx(5 + 2 * 2.0 * 2049 / 4096 + 2));
  // Saved: softmax output 2, mask 1, dropped probabilities 2 (Korthikanti et al.'s 5as²b); the bmm's
  // backward writes a 2-byte gradient beside them.
  CHECK(r.saved_bytes() == 5.0);
  CHECK(r.bwd_peak_bytes == 7.0);
  // ALiBi through baddbmm's input: the bias copied into the result (write 2) and read back as C (read 2).
  CHECK(score_passes(p, true).fwd_bytes == Approx(r.fwd_bytes + 4));
  // Without dropout only the softmax output is saved.
  const ScorePasses nd = score_passes(with_core(p, AttentionCore::kFusedSoftmax, false), false);
  CHECK(nd.saved_bytes() == 2.0);
  CHECK(nd.fwd_bytes == Approx(2.0 * 2049 / 4096 + 2));
  // Flash attention has no score tensor.
  const ScorePasses f = score_passes(with_core(p, AttentionCore::kFlash, true), true);
  CHECK(f.fwd_bytes == 0.0);
  CHECK(f.bwd_bytes == 0.0);
  CHECK(f.saved_bytes() == 0.0);
}

TEST_CASE("pass counts of Hugging Face GPT-2 eager attention per score element", "[simulator][attention]") {
  Plan p;
  p.seq = 1024;
  // Autocast (bf16-mixed): div 4, where 4, fp32 mask add 2 + 4, softmax fp32 8, cast back 4 + 2, dropout 5.
  const ScorePasses a = score_passes(with_core(p, AttentionCore::kEager, true), false);
  CHECK(a.fwd_bytes == 33.0);
  // dropout 5, cast's backward 2 + 4, softmax backward 12, the add's gradient cast back 4 + 2, where 4,
  // div 4.
  CHECK(a.bwd_bytes == 37.0);
  // Saved: fp32 softmax output 4, mask 1, dropped fp16 probabilities 2; worst op: softmax's backward
  // (output, gradient and input gradient, fp32 each).
  CHECK(a.saved_bytes() == 7.0);
  CHECK(a.bwd_peak_bytes == 12.0);
  // Without dropout matmul saves the cast copy (2) beside the fp32 output (4).
  const ScorePasses nd = score_passes(with_core(p, AttentionCore::kEager, false), false);
  CHECK(nd.fwd_bytes == 28.0);
  CHECK(nd.bwd_bytes == 32.0);
  CHECK(nd.saved_bytes() == 6.0);
  // The model in 16 bits (DeepSpeed fp16): no cast, softmax in 16 bits: 4 + 4 + 4 + 4 + 5 forward, 5 + 6 + 4
  // + 4 backward; saved 2 + 1 + 2, worst op matmul's backward (5 + 2).
  p.precision = Precision::kBf16;
  const ScorePasses h = score_passes(with_core(p, AttentionCore::kEager, true), false);
  CHECK(h.fwd_bytes == 21.0);
  CHECK(h.bwd_bytes == 19.0);
  CHECK(h.saved_bytes() == 5.0);
  CHECK(h.bwd_peak_bytes == 7.0);
}

TEST_CASE("materialised scores saved per layer: b x heads x s^2 x bytes, heads split by TP",
          "[simulator][attention][memory]") {
  // GPT-2 XL (25 heads of 64), mbs 6, seq 1024, eager bf16-mixed with dropout: 6 x 25 x 1024^2 x 7 B =
  // 1,101,004,800 B on top of what the layer saves with flash attention.
  Setup s("gpt2-xl", "dgx-a100-40g", 4);
  Plan p;
  p.mbs = 6;
  p.zero = 0;
  const Plan flash = s.resolve(p);
  const Plan eager = s.resolve(with_core(p, AttentionCore::kEager, true));
  const Layer& attn = first_attention(s.model);
  const double T = 6.0 * 1024;
  CHECK(layer_saved_bytes(attn, eager, T, false) - layer_saved_bytes(attn, flash, T, false) ==
        Approx(1'101'004'800.0));
  CHECK(score_elems(attn, eager, T) == 6.0 * 25 * 1024 * 1024);
  // Selective recomputation recomputes the core: nothing of it saved.
  CHECK(layer_saved_bytes(attn, eager, T, true) == layer_saved_bytes(attn, flash, T, true));
  // Layers without an attention core have no scores.
  for (const Layer* l : s.model.order())
    if (l->attn_heads == 0) CHECK(score_elems(*l, eager, T) == 0.0);

  // Llama-3-8B's 32 heads at TP 8: 4 per rank, 1/8 of the TP-1 scores (Megatron splits the heads).
  Setup b("llama3-8b", "dgx-a100-80g", 8);
  Plan q;
  q.seq = 2048;
  q.precision = Precision::kBf16;
  q = with_core(q, AttentionCore::kFusedSoftmax, true);
  const Layer& battn = first_attention(b.model);
  q.tp = 1;
  const double tp1 = score_saved_bytes(battn, q, 2048.0);
  q.tp = 8;
  const double tp8 = score_saved_bytes(battn, q, 2048.0);
  // 32 heads x 2048^2 x 5 B = 671,088,640 B at TP 1.
  CHECK(tp1 == 671'088'640.0);
  CHECK(tp8 == tp1 / 8);
}

TEST_CASE("a materialised core counts the same useful FLOPs and more time, time grows with s",
          "[simulator][attention][time]") {
  Setup s("llama3-8b", "dgx-a100-80g", 8);
  Plan p;
  p.seq = 2048;
  p.precision = Precision::kBf16;
  const Plan flash = s.resolve(p);
  const Plan fused = s.resolve(with_core(p, AttentionCore::kFusedSoftmax, true));
  const auto uf = units_of(s, flash), um = units_of(s, fused);
  REQUIRE(uf.size() == um.size());
  const SimUnit& bf = uf[1];
  const SimUnit& bm = um[1];
  REQUIRE(bf.blocks == 1);
  // The useful FLOPs (causal QK^T and PV) are the same: the masked half is wasted work, not model FLOPs.
  CHECK(bm.flops_fwd == bf.flops_fwd);
  // The block's forward: the flash core replaced by two batched GEMMs over whole rows (32 heads of [2048 x
  // 128] @ [128 x 2048] and [2048 x 2048] @ [2048 x 128]) and the memory-bound passes over 32 x 2048^2
  // scores.
  const Layer& attn = first_attention(s.model);
  const double flops = 2.0 * 2048 * 32 * 256 * (2048 + 1) / 2.0;
  const double gemm = 32 * (s.costs->gemm_s(2048, 2048, 128) + s.costs->gemm_s(2048, 128, 2048));
  const double e = 32.0 * 2048 * 2048;
  const ScorePasses sp = score_passes(fused, false);
  CHECK(bm.fwd_s - bf.fwd_s ==
        Approx(gemm + s.costs->memory_s(e * sp.fwd_bytes) - s.costs->attention_fwd_s(flops)).epsilon(1e-9));
  CHECK(bm.bwd_s - bf.bwd_s ==
        Approx(2 * gemm + s.costs->memory_s(e * sp.bwd_bytes) -
               s.costs->constants().attention_bwd_ratio * s.costs->attention_fwd_s(flops))
            .epsilon(1e-9));
  CHECK(score_core_fwd_s(attn, fused, false, *s.costs, 2048.0) ==
        Approx(gemm + s.costs->memory_s(e * sp.fwd_bytes)));
  // Monotone in s at a fixed token count (mbs x seq = 2048 x 2 = 4096 x 1): longer rows, more work per token.
  double prev_f = 0, prev_b = 0;
  for (std::int64_t seq : {256, 512, 1024, 2048}) {
    Plan q = fused;
    q.seq = seq;
    q.mbs = static_cast<int>(4096 / seq);
    const double f = score_core_fwd_s(attn, q, false, *s.costs, 4096.0);
    const double b = score_core_bwd_s(attn, q, false, *s.costs, 4096.0);
    CHECK(f > prev_f);
    CHECK(b > prev_b);
    prev_f = f;
    prev_b = b;
  }
}

TEST_CASE("AC with a materialised core: full recomputes the scores, selective recomputes the core",
          "[simulator][attention][memory]") {
  Setup s("gpt2-xl", "dgx-a100-40g", 4);
  Plan p;
  p.mbs = 2;
  p.zero = 0;
  const double T = 2.0 * 1024;
  const Layer& attn = first_attention(s.model);
  const Plan eager = with_core(p, AttentionCore::kEager, true);
  for (AcMode ac : {AcMode::kFull, AcMode::kSelective}) {
    Plan f = p, m = eager;
    f.ac = m.ac = ac;
    const auto uf = units_of(s, s.resolve(f)), um = units_of(s, s.resolve(m));
    const SimUnit& bf = uf[1];
    const SimUnit& bm = um[1];
    if (ac == AcMode::kFull) {
      // Only the block input is kept; the recomputed block saves its scores again (7 B per element).
      CHECK(bm.act_bytes == bf.act_bytes);
      CHECK(static_cast<double>(bm.recompute_bytes - bf.recompute_bytes) ==
            Approx(score_elems(attn, s.resolve(m), T) * 7).epsilon(1e-9));
      CHECK(bm.recompute_s == Approx(bm.fwd_s));
    } else {
      // Selective: the scores are not kept; the recomputation runs the core's forward again.
      CHECK(bm.act_bytes == bf.act_bytes);
      CHECK(bm.recompute_s - bf.recompute_s ==
            Approx(score_core_fwd_s(attn, s.resolve(m), false, *s.costs, T)).epsilon(1e-9));
    }
    // The backward's worst op holds the score gradients beyond the saved scores: (12 - 7) B per element more
    // workspace at least than the flash block (whose transients are hidden-sized).
    CHECK(static_cast<double>(bm.workspace_bytes) > static_cast<double>(bf.workspace_bytes));
  }
}

TEST_CASE("the attention knobs: flags, records and the plan checks", "[simulator][attention][plan]") {
  Plan p;
  CHECK(plan_to_flags(p).find("--attention") == std::string::npos);  // flash prints nothing
  p = with_core(p, AttentionCore::kFusedSoftmax, true);
  const std::string flags = plan_to_flags(p);
  CHECK(flags.find("--attention fused-softmax") != std::string::npos);
  CHECK(flags.find("--attention-dropout") != std::string::npos);
  const Plan back = plan_from_json(JsonObj(plan_to_json(p), "plan"));
  CHECK(back.attention == AttentionCore::kFusedSoftmax);
  CHECK(back.attention_dropout);

  Setup s("llama3-8b", "dgx-a100-80g", 8);
  Plan q;
  q.precision = Precision::kBf16;
  q.seq = 2048;
  q.attention = AttentionCore::kFusedSoftmax;
  CHECK_NOTHROW(s.resolve(q));
  Plan long_seq = q;
  long_seq.seq = 4096;  // the causal kernel asserts seq_len <= 2048
  CHECK_THROWS_AS(s.resolve(long_seq), InputError);
  Plan fp32 = q;
  fp32.precision = Precision::kFp32;
  CHECK_THROWS_AS(s.resolve(fp32), InputError);
  Plan rows = q;
  rows.tp = 8;  // 32 / 8 = 4 heads x mbs 1: divisible by 4 and by the 4 rows per block at seq 2048
  CHECK_NOTHROW(s.resolve(rows));
  rows.seq = 64;  // 64 keys: 2 rows per warp of 32 lanes, 4 warps: 8 rows per block; 4 % 8 != 0
  CHECK_THROWS_AS(s.resolve(rows), InputError);
  Plan cp = q;
  cp.attention = AttentionCore::kEager;
  cp.cp = 2;
  CHECK_THROWS_AS(s.resolve(cp), InputError);
}
