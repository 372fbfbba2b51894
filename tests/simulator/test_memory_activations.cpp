// Activation memory (mechanics.md §2) measured as the highest value the activations category reaches in the
// lowered program: checkpointing, sequence parallelism, the logits and the loss, a block's saved bytes per
// token. Split from test_memory.cpp (persistent state).
#include <catch2/catch.hpp>

#include "sim_helpers.hpp"

using namespace shardplan;
using shardplan::test::Setup;

namespace {
Bytes max_activations(const Setup& s, Plan p) {
  Simulator sim(s.model, *s.cluster, *s.costs);
  sim.run(s.resolve(p));
  return shardplan::test::max_category_bytes(sim.program(), MemCategory::kActivations);
}
}  // namespace

TEST_CASE("activation checkpointing: full << selective <= none, with derived sizes",
          "[simulator][memory][activations]") {
  // Llama-2-7B (h = q = kv = 4096, a = 32, f = 11008, V = 32000), seq 4096, mbs 1 ⇒ T = 4096 tokens, bf16
  // (model_graph.cpp, mechanics §2.2). Saved bytes per token per block:
  //   none:  norms 2·(2h + 4) + attention input 2h + MLP input 2h  = 8h + 8           = 32,776
  //          attention Q 2q + K,V 4kv + O 2q + LSE 4a = 8192 + 16384 + 8192 + 128        = 32,896
  //          SwiGLU 8f                                                                  = 88,064
  //          ⇒ 153,736 per block
  //   selective (torchtitan 0.3.0 op-level SAC, simulator/model/model_graph.cpp selective_mm_parity: the
  //   block's matmuls counted in execution order from 1 and the odd ones saved -- wq, wv, w1 (gate), w2
  //   (down) -- while wk, wo, w3 (up) are recomputed; attention's output O and LSE saved; norms recomputed):
  //          block input (the checkpoint, held by the first norm) 2h                      =  8,192
  //          attention: wq output 2q 8,192 + wv output 2kv 8,192 + O 2q 8,192 + LSE 4a 128 = 24,704
  //          MLP: gate output 2f 22,016 + down output 2h 8,192                            = 30,208
  //          ⇒ 63,104 per block
  //   (59,008 is what the generic rule "half of every matmul output" of make_attention / make_mlp would give:
  //   8,192 + (4,096 + 20,608) + (4,096 + 22,016); the exact parity replaces it for dense Llama blocks, and
  //   the per-layer values are checked below.)
  //   full:  block input 2h                                                            =   8,192
  // Head unit (final norm 2h + 4, head input 2h) = 16,388. The activation peak is in the loss backward, where
  // the saved fp32 log-softmax (4V), the nll gradient (4V) and the fp32 logits gradient (4V) are alive: 12V =
  // 384,000 per token (§2.3; the forward's 10V is lower). Peak per token:
  //   none      32·153,736 + 16,388 + 384,000 = 5,319,940
  //   selective 32· 63,104 + 16,388 + 384,000 = 2,419,716
  //   full      32·  8,192 + 16,388 + 384,000 =   662,532
  Setup s("llama2-7b", "dgx-h100", 8);
  // The selective bytes per token of block 0, as its layers' tensor lists give them (TP 1).
  Plan p1;
  p1.seq = 4096;
  double block0_selective = 0;
  for (const Layer* l : s.model.order())
    if (l->block == 0) block0_selective += layer_saved_bytes(*l, p1, 1.0, true);
  CHECK(block0_selective == 63'104);
  const double T = 4096;
  Plan p;
  p.seq = 4096;
  p.ac = AcMode::kNone;
  const Bytes none = max_activations(s, p);
  p.ac = AcMode::kSelective;
  const Bytes sel = max_activations(s, p);
  p.ac = AcMode::kFull;
  const Bytes full = max_activations(s, p);
  CHECK(full < sel);
  CHECK(sel <= none);
  CHECK(full * 4 < none);  // "<<": derived ratio 0.125
  CHECK(static_cast<double>(none) == Approx(5'319'940 * T).epsilon(0.01));
  CHECK(static_cast<double>(sel) == Approx(2'419'716 * T).epsilon(0.01));
  CHECK(static_cast<double>(full) == Approx(662'532 * T).epsilon(0.01));
}

TEST_CASE("TP 8 with sequence parallelism holds 1/8 of the TP 1 activations but the gathered inputs",
          "[simulator][memory][activations]") {
  // With sequence parallelism the saved tensors are split 8 ways: TP-split tensors (Q, K, V, O, MLP) by heads
  // / columns, the norms' inputs and the block inputs by sequence; the vocab-parallel loss holds T·V/8
  // logits. The embedding saves nothing. Three stay whole: torchtitan's plan all-gathers the inputs of the
  // column-parallel projections (q/k/v and gate/up: 2h each per block) and of the head over the sequence, and
  // the linears save the gathered tensor (reference lane, Llama 3 70B TP 8): (2 x 32 + 1) x T x 2h x (1 -
  // 1/8) = 65 x 4096 x 8192 x 7/8 = 1,908,408,320 bytes more. Up to per-unit integer rounding (≤ 1 byte per
  // unit and per logits effect) the rest is 1/8, except at the peak (the loss backward): loss parallel holds
  // four fp32 T x V/8 buffers where the eager loss holds three (torch/distributed/tensor/parallel/loss.py),
  // one more 4·T·V/8 = 4 · 4096 · 4000 = 65,536,000 bytes.
  Setup s("llama2-7b", "dgx-h100", 8);
  Plan p;
  p.seq = 4096;
  const Bytes tp1 = max_activations(s, p);
  p.tp = 8;
  const Bytes tp8 = max_activations(s, p);
  const double fourth = 4.0 * 4096 * 32000 / 8;
  const double gathered = 65.0 * 4096 * 8192 * 7 / 8;
  CHECK(static_cast<double>(tp8) == Approx(static_cast<double>(tp1) / 8 + fourth + gathered).epsilon(1e-6));
  CHECK(static_cast<double>(tp8) >= static_cast<double>(tp1) / 8 + fourth + gathered - 64);
}

TEST_CASE("the logits term grows linearly with the vocabulary", "[simulator][memory][activations]") {
  // Same 4-block Llama-2-7B-shaped model with V = 32000, 64000, 96000. The activation peak is in the loss
  // backward: blocks + head + 12·T·V (saved fp32 log-softmax 4, nll gradient 4, fp32 logits gradient 4 bytes
  // per token and vocab entry), so equal vocabulary steps give equal activation steps of 12·T·32000 = 12 ·
  // 4096 · 32000 = 1,572,864,000 bytes.
  ClusterSpec spec = load_cluster_spec("dgx-h100");
  Plan p;
  p.seq = 4096;
  Bytes a[3];
  for (int i = 0; i < 3; ++i) {
    Setup s(ModelGraph::from_spec(shardplan::test::small_llama(4, 32000 * (i + 1))), spec, 8);
    a[i] = max_activations(s, p);
  }
  const double step = 12.0 * 4096 * 32000;
  CHECK(static_cast<double>(a[1] - a[0]) == Approx(step).margin(8));
  CHECK(static_cast<double>(a[2] - a[1]) == Approx(step).margin(8));
}

TEST_CASE(
    "compiled loss under TP: the activation peak grows by 10 T V/tp (forward: logits and two fp32 buffers)",
    "[simulator][memory][logits][tp]") {
  // 4-block Llama-2-7B-shaped models with V = 32000, 64000, 96000, TP 2, --compile (the compiled loss), no
  // AC, seq 4096 (T = 4096). torch 2.15 inductor on loss_parallel()'s local ops (CPU, fake process group):
  // the forward writes two fp32 T x V/tp buffers (one saved) while the bf16 logits are alive, 10 bytes per
  // token and local vocab entry; the backward holds the saved one and a bf16 gradient, 6. The activation peak
  // is the loss forward, so equal vocabulary steps give equal steps of 10 · 4096 · 32000 / 2 = 655,360,000
  // bytes (the eager loss-parallel backward would give 16 · T · 32000 / 2).
  ClusterSpec spec = load_cluster_spec("dgx-h100");
  Plan p;
  p.seq = 4096;
  p.tp = 2;
  p.compile = true;
  Bytes a[3];
  for (int i = 0; i < 3; ++i) {
    Setup s(ModelGraph::from_spec(shardplan::test::small_llama(4, 32000 * (i + 1))), spec, 8);
    a[i] = max_activations(s, p);
  }
  const double step = 10.0 * 4096 * 32000 / 2;
  CHECK(static_cast<double>(a[1] - a[0]) == Approx(step).margin(8));
  CHECK(static_cast<double>(a[2] - a[1]) == Approx(step).margin(8));
}

TEST_CASE("hold_logits keeps the fp32 logits through backward: the backward-head peak grows by exactly 4 T V",
          "[simulator][memory][logits]") {
  // Llama-2-7B, FSDP2 ZeRO-3 on 8 GPUs, full AC, 8 x 2048 tokens: the peak is at the head of backward (the
  // cross-entropy backward), where a held fp32 copy of the logits adds 4 bytes x tokens x vocab and nothing
  // else.
  Setup s("llama2-7b", "dgx-h100", 8);
  Plan plan;
  plan.ac = AcMode::kFull;
  plan.mbs = 8;
  plan.seq = 2048;
  const Result a = s.run(plan);
  plan.hold_logits = true;
  const Result b = s.run(plan);
  const Bytes tv4 = 4LL * 8 * 2048 * 32000;
  CHECK(a.peak_phase.rfind("backward", 0) == 0);
  CHECK(b.peak_phase == a.peak_phase);
  CHECK(b.peak_bytes - a.peak_bytes == tv4);
  CHECK(b.step_s == a.step_s);  // memory only
}

TEST_CASE(
    "loss_dtype bf16: a 16-bit cross-entropy halves the loss tensors (backward head: 6 T V instead of 12 T "
    "V)",
    "[simulator][memory][logits]") {
  // GPT-2 XL, DeepSpeed ZeRO-3 on 4 GPUs, 40 x 1024 tokens, vocab 50,257: the peak is the cross-entropy
  // backward. fp32 loss: saved log-softmax, its gradient and the logits' gradient, 4 bytes each (12 T V); a
  // 16-bit loss: 2 bytes each (6 T V). Everything else at that moment is the same.
  Setup s("gpt2-xl", "dgx-a100-40g", 4);
  Plan plan;
  plan.runtime = Runtime::kDeepSpeed;
  plan.precision = Precision::kBf16;
  plan.ac = AcMode::kFull;
  plan.mbs = 40;
  plan.seq = 1024;
  const Result f32 = s.run(plan);
  plan.loss_dtype = Dtype::kBf16;
  const Result b16 = s.run(plan);
  const Bytes tv = 40LL * 1024 * 50257;
  REQUIRE(f32.peak_phase == b16.peak_phase);
  CHECK(f32.peak_phase.rfind("backward", 0) == 0);
  CHECK(f32.peak_bytes - b16.peak_bytes == 6 * tv);
}

TEST_CASE("loss_impl compiled: inductor's cross-entropy saves the bf16 logits and writes one bf16 gradient",
          "[simulator][memory][logits]") {
  // A 2-block Llama-2-7B-shaped model with V = 128,000 (the loss dominates), FSDP2 ZeRO-3 on 8 GPUs, full
  // AC, 8 x 2048 tokens (T = 16,384): the peak is the cross-entropy backward either way. Eager fp32 loss:
  // saved log-softmax, its gradient and the logits' gradient, 4 bytes each (12 T V). Compiled (torch 2.15
  // inductor, checked on the CPU with saved_tensors_hooks and the output code, docs/model.md): the saved bf16
  // logits, two fp32 per-token statistics (row max, log-sum-exp: 2 x 4 T) and one bf16 gradient: 4 T V + 8 T.
  // Everything else alive then is the same, so the peak drops by 8 T V - 8 T = 16,777,084,928 bytes.
  ClusterSpec spec = load_cluster_spec("dgx-h100");
  Setup s(ModelGraph::from_spec(shardplan::test::small_llama(2, 128000)), spec, 8);
  Plan plan;
  plan.ac = AcMode::kFull;
  plan.mbs = 8;
  plan.seq = 2048;
  plan.compile = true;
  plan.loss_impl = LossImpl::kEager;
  const Result eager = s.run(plan);
  plan.loss_impl.reset();  // the default with --compile: compiled
  const Result compiled = s.run(plan);
  const Bytes T = 8LL * 2048, tv = T * 128000;
  REQUIRE(eager.peak_phase == compiled.peak_phase);
  CHECK(eager.peak_phase.rfind("backward head", 0) == 0);
  CHECK(eager.peak_bytes - compiled.peak_bytes == 8 * tv - 8 * T);
  plan.compile = false;  // without --compile the default is eager
  CHECK(s.run(plan).peak_bytes == eager.peak_bytes);
}

TEST_CASE("TP loss parallel: the backward holds four vocab-sharded buffers of the loss dtype",
          "[simulator][memory][logits][tp]") {
  // Llama-2-7B, FSDP2 on 8 GPUs with TP 2, full AC, 16 x 2048 tokens (T = 32,768), V/tp = 16,000. torch
  // 2.15 _nll_loss_and_log_softmax_backward (torch/distributed/tensor/parallel/loss.py) keeps the saved
  // log-softmax, zeros_like(x), exp(x) and their sum (then the product) live together: four T x V/tp
  // buffers, 16 bytes per element with an fp32 loss, 8 with a 16-bit one. The eager loss's three
  // buffers would give 12 vs 6. With the peak at that moment in both, the difference is 8 T V/tp.
  Setup s("llama2-7b", "dgx-h100", 8);
  Plan plan;
  plan.ac = AcMode::kFull;
  plan.tp = 2;
  plan.mbs = 16;
  plan.seq = 2048;
  const Result f32 = s.run(plan);
  plan.loss_dtype = Dtype::kBf16;
  const Result b16 = s.run(plan);
  const Bytes tv_local = 16LL * 2048 * 16000;
  REQUIRE(f32.peak_phase == b16.peak_phase);
  CHECK(f32.peak_phase.rfind("backward", 0) == 0);
  CHECK(f32.peak_bytes - b16.peak_bytes == 8 * tv_local);
}

TEST_CASE(
    "plain data parallel on the fsdp2 runtime (DDP / replicate) keeps the Reducer's buckets: a second copy "
    "of "
    "the gradients",
    "[simulator][memory][ddp]") {
  Setup s("llama3-8b", "dgx-h100", 8);
  Plan plan;
  plan.zero = 0;
  plan.seq = 2048;
  plan.ac = AcMode::kFull;
  const Result ddp = s.run(plan);
  plan.runtime = Runtime::kFsdp1;  // FSDP1 NO_SHARD: flat-parameter gradients, no DDP buckets
  const Result noshard = s.run(plan);
  // bf16-mixed: fp32 gradients, 4 bytes per parameter, unsharded under ZeRO-0.
  CHECK(ddp.persistent_split[1] == 4 * s.model.parameters());
  CHECK(ddp.breakdown[static_cast<int>(MemCategory::kCommBuffers)] >= ddp.persistent_split[1]);
  CHECK(noshard.breakdown[static_cast<int>(MemCategory::kCommBuffers)] < ddp.persistent_split[1]);
}

TEST_CASE(
    "first step: the optimizer state is created by the first optimizer step, so an activation-bound peak is "
    "lower by exactly the state",
    "[simulator][memory][first-step]") {
  Setup s("llama3-8b", "dgx-h100", 8);
  Plan plan;
  plan.seq = 8192;
  plan.mbs = 1;
  plan.ac = AcMode::kSelective;
  const Result r = s.run(plan);
  const Bytes opt = r.persistent_split[2];
  REQUIRE(opt > 0);
  // Steady-state peak in forward/backward, far above what is live at the optimizer step (params + grads +
  // state).
  REQUIRE(r.peak_phase.find("optimizer") == std::string::npos);
  REQUIRE(r.peak_bytes - opt > r.persistent_bytes + 2 * kGiB);
  CHECK(r.first_step_peak_bytes == r.peak_bytes - opt);
  // With the optimizer state offloaded there is nothing to create on the GPU: the first step equals the
  // steady one. (Optimizer-only offload is DeepSpeed ZeRO-Offload; FSDP has none.)
  plan.runtime = Runtime::kDeepSpeed;
  plan.offload = Offload::kOptimizer;
  const Result off = s.run(plan);
  CHECK(off.persistent_split[2] == 0);
  CHECK(off.first_step_peak_bytes == off.peak_bytes);
}

TEST_CASE("a Llama block's saved bytes per token: fused RMSNorm, and the selective policy's matmul parity",
          "[simulator][memory][activations]") {
  // Llama-3-8B: h = 4096, q = 32·128 = 4096, kv = 8·128 = 1024, f = 14336, 32 heads (torch 2.15 on CUDA,
  // reference lane traces, docs/model.md "Checked against the real code").
  Setup s("llama3-8b", "dgx-h100", 8);
  double none = 0, sel = 0;
  Plan p = s.resolve(Plan{});
  for (const Layer* l : s.model.order()) {
    if (l->block != 0) continue;
    none += layer_saved_bytes(*l, p, 1.0, false);
    sel += layer_saved_bytes(*l, p, 1.0, true);
  }
  // No AC: 2 norms · (bf16 input 2h + fp32 rstd 4: _fused_rms_norm saves input and rstd) + attention
  // (norm output 2h, q 2q, k and v 2·2kv, SDPA output 2q, fp32 log-sum-exp 4·32) + SwiGLU (norm output 2h,
  // w1 and w3 outputs 4f, SiLU and product 4f) = 2·8196 + (8192 + 8192 + 4096 + 8192 + 128) + (8192 + 114688)
  // = 16392 + 28800 + 122880 = 168,072 bytes per token (41h + 136).
  CHECK(none == 168'072.0);
  // Selective (torchtitan SelectiveAC, matmuls counted 1..7 per block: wq, wk, wv, wo, w1, w3, w2, odd ones
  // saved): the checkpointed block input 2h, wq's output 2q, wv's output 2kv, the SDPA output 2q and
  // log-sum-exp 4·32, w1's output 2f and w2's output 2h = 8192 + 8192 + 2048 + 8192 + 128 + 28672 + 8192 =
  // 63,616 (15.5h
  // + 128); the lane measures the same per block.
  CHECK(sel == 63'616.0);

  // TP 2 with sequence parallelism (torchtitan's Llama plan): the TP-split outputs halve (wq 4096, wv 1024,
  // SDPA output 4096 and log-sum-exp 64, w1 14,336) and so does the sequence-sharded block input (4096), but
  // w2's saved output is the partial sum over the whole sequence before its reduce-scatter (2h = 8192, not
  // halved), and the policy saves both reduce-scatter outputs (after wo and w2: 2·2h/2 = 8192). 44,096 bytes
  // per token: the reference lane's Llama 3 8B TP 2 trace at 8192 tokens saves 361,235,456 B per block =
  // 8192·44,096 + the SDPA op's two 512 B RNG-state tensors (before this: 248.5 MiB per block, -10 % peak).
  Plan tp2 = p;
  tp2.tp = 2;
  tp2.ac = AcMode::kSelective;
  double sel_tp2 = 0, sel_tp2_compiled = 0;
  Plan tp2c = tp2;
  tp2c.compile = true;
  for (const Layer* l : s.model.order()) {
    if (l->block != 0) continue;
    sel_tp2 += layer_saved_bytes(*l, tp2, 1.0, true);
    sel_tp2_compiled += layer_saved_bytes(*l, tp2c, 1.0, true);
  }
  CHECK(sel_tp2 == 44'096.0);
  // Compiled, the rule measured at TP 1 (backward never reads the output projection's output, 2h) applied to
  // the reduce-scatter outputs too, which also only feed residual adds: 44,096 - 8192 - 8192 = 27,712.
  CHECK(sel_tp2_compiled == 27'712.0);
}

TEST_CASE("a Llama block's saved bytes per token: torch.compile's saved set and the Python fp32 RMSNorm",
          "[simulator][memory][activations][compile]") {
  // Llama 2 7B (torchtitan PR 165): h = q = kv = 4096 (MHA), f = 11008, 32 heads. Measured per block with
  // tools/reference/saved_per_block.py (torch 2.15, inductor on the CPU; h = 256 with f = 2.6875 h, and h =
  // 384, kv = 128, f = 1024): eager 0.3.0 block 16h + 8f (+ fp32 statistics), eager 2024 block 8h more,
  // compiled 16h + 6f either way; SAC eager 15.44 h, compiled 2h less.
  Setup s("llama2-7b", "dgx-h100", 8);
  auto block = [&](const Plan& p, bool sel) {
    double b = 0;
    for (const Layer* l : s.model.order())
      if (l->block == 0) b += layer_saved_bytes(*l, p, 1.0, sel);
    return b;
  };
  Plan eager = s.resolve(Plan{});
  // Eager, fused norms: 2 norms (2h + 4) + attention (2h + 2q + 2·2kv + 2q + 4·32) + SwiGLU (2h + 8f)
  // = 16h + 8f + 136 = 65536 + 88064 + 136 = 153,736.
  CHECK(block(eager, false) == 153'736.0);
  // Compiled: inductor recomputes SiLU(gate) from the saved gate: 2f = 22,016 fewer -> 131,720.
  Plan compiled = eager;
  compiled.compile = true;
  CHECK(block(compiled, false) == 131'720.0);
  // --fp32-norm (torchtitan's Python RMSNorm, before 2025-03-19): each norm also saves its input as fp32, 4h
  // = 16,384 per norm -> 153,736 + 32,768 = 186,504 eager; nothing compiled (the partitioner saves the bf16
  // input and the rstd whatever the module's arithmetic) and nothing under SAC (the norms are recomputed).
  Plan old = eager;
  old.fp32_norm = true;
  CHECK(block(old, false) == 186'504.0);
  old.compile = true;
  CHECK(block(old, false) == 131'720.0);
  // SAC (wq, wv, w1, w2 saved): block input 2h + wq 2q + wv 2kv + SDPA output 2q + 4·32 + w1 2f + w2 2h =
  // 5·8192 + 128 + 22016 = 63,104 eager; compiled drops w2's output (only the residual add reads it): 54,912.
  CHECK(block(eager, true) == 63'104.0);
  CHECK(block(old, true) == 54'912.0);
  old.compile = false;
  CHECK(block(old, true) == 63'104.0);
}

TEST_CASE("FSDP2: the grouped [norm, output] head is all-gathered a second time in backward",
          "[simulator][memory]") {
  // torchtitan's fully_shard([norm, output]) runs its post-backward after the output projection's backward
  // and its pre-backward again on the norm's output gradient (reference lane trace, torch 2.15): two backward
  // all-gathers of the head (the first is skipped: the head is not resharded after forward).
  Setup s("llama3-8b", "dgx-h100", 8);
  auto head_bwd_gathers = [&](Runtime rt) {
    Plan p;
    p.runtime = rt;
    Simulator sim(s.model, *s.cluster, *s.costs);
    sim.run(s.resolve(p));
    int last_unit = 0, n = 0;
    for (const Task& t : sim.program().tasks) last_unit = std::max<int>(last_unit, t.unit);
    for (const Task& t : sim.program().tasks)
      if (t.type == TaskType::kCollective && t.backward && t.unit == last_unit &&
          t.comm_kind == static_cast<std::uint8_t>(CommKind::kAllGather))
        ++n;
    return n;
  };
  CHECK(head_bwd_gathers(Runtime::kFsdp2) == 1);  // the head is kept from forward: only the re-gather
}

TEST_CASE(
    "FSDP2 tied embeddings: [tok_embeddings, norm, output] is one group, kept from the embedding's "
    "forward to the head's backward",
    "[simulator][memory]") {
  // torchtitan 0.3.0 distributed/fsdp.py: with enable_weight_tying, fully_shard([tok_embeddings, norm,
  // lm_head], reshard_after_forward=False). Reference-lane trace (Llama 3.2 3B, 2,048 ranks, torch 2.15): the
  // group is gathered once in forward (at the embedding), kept through the head's backward, gathered again
  // for the norm's backward and for the embedding's backward: 3 all-gathers of the whole group per step.
  ModelSpec tied = shardplan::test::small_llama(4, 128256);
  tied.tied_embeddings = true;
  Setup s(ModelGraph::from_spec(tied), load_cluster_spec("dgx-h100"), 8);
  const auto& sp = s.model.spec();
  Plan p;
  p.runtime = Runtime::kFsdp2;
  p.seq = 2048;
  Simulator sim(s.model, *s.cluster, *s.costs);
  const Result& r = sim.run(s.resolve(p));
  const Program& prog = sim.program();
  int head = 0;
  for (const Task& t : prog.tasks) head = std::max<int>(head, t.unit);
  int fwd_emb = 0, fwd_head = 0, bwd_emb = 0, bwd_head = 0;
  for (const Task& t : prog.tasks)
    if (t.type == TaskType::kCollective && t.comm_kind == static_cast<std::uint8_t>(CommKind::kAllGather)) {
      if (t.unit == 0) ++(t.backward ? bwd_emb : fwd_emb);
      if (t.unit == head) ++(t.backward ? bwd_head : fwd_head);
    }
  CHECK(fwd_emb == 1);
  CHECK(fwd_head == 0);  // the embedding's gather serves the head
  CHECK(bwd_head == 1);  // the norm's re-gather (the head's first backward uses the forward's gather)
  CHECK(bwd_emb == 1);
  // At the head's backward compute the tied weight is gathered: V x h elements in bf16 (plus the norm).
  const Bytes tied_bf16 = sp.vocab * sp.hidden * 2;
  Bytes gathered = 0, at_head_bwd = -1;
  for (const Task& t : prog.tasks) {
    if (t.type == TaskType::kCompute && t.backward && t.unit == head && at_head_bwd < 0)
      at_head_bwd = gathered;
    for (std::uint32_t e = t.first_effect; e < t.first_effect + t.n_effects; ++e)
      if (prog.effects[e].category == MemCategory::kGathered) gathered += prog.effects[e].delta_bytes;
  }
  CHECK(at_head_bwd >= tied_bf16);
  CHECK(at_head_bwd < tied_bf16 + 64 * 1024 * 1024);  // + the norm (h x 2 B) and the last block's AG output
  // The tied weight is one parameter: the params at the peak are the persistent shard, counted once.
  CHECK(r.breakdown[static_cast<std::size_t>(MemCategory::kParams)] ==
        persistent_state(s.model, s.resolve(p))[0]);
}
