// One pass over a unit's layers (build_units' stage, units_stages.hpp unit_layers): parameter and shard
// elements, GEMM / attention / elementwise time, float8 casts (torchao, Transformer Engine), and the
// activations saved per AC mode (docs/model.md "Units", "Float8").
#include "core/checked.hpp"
#include "simulator/cost/cost.hpp"
#include "simulator/lowering/units_stages.hpp"
#include "simulator/parallel/parallel.hpp"

namespace shardplan::detail {

namespace {

/// Transformer Engine (v1.8,
/// transformer_engine/pytorch/module/{linear,layernorm_linear,layernorm_mlp,base}.py) under delayed scaling,
/// the float8 cast bytes of one GEMM (X input, Y output-gradient, W weight elements): the amax is an output
/// of the cast kernel (no amax pass) and operands are cast with their transposes in one kernel
/// (fp8_cast_transpose_fused: read 2, write 2). Inputs: the column-parallel ones come in fp8 out of TE's
/// fused LayerNorm (LayerNormLinear / LayerNormMLP), the MLP's second out of its fused activation, and
/// backward transposes each for wgrad (tex.fp8_transpose: read 1, write 1); the attention output projection's
/// input is cast with its transpose (4 bytes; with sequence parallelism cast alone, 3, and transposed in
/// backward, 2). Output gradients: cast with the transpose (grad_output_preprocess, 4 bytes), except the
/// MLP's first GEMM's under GELU, fused into the activation's backward
/// (fp8_cast_transpose_bgrad_dgelu_fused). Weights: cast with their transposes once per step: Megatron-core
/// (core_r0.8.0 transformer/custom_layers/transformer_engine.py) passes is_first_microbatch and TE's
/// get_fp8_workspace updates its cached fp8 weight only then.
void te_fp8_cast_bytes(UnitSums& m, const Layer& l, const ModelSpec& s, bool shared, int t, double X,
                       double Y, double W) {
  const bool proj_input = !shared && l.kind == LayerKind::kAttention;
  const bool gelu_fused = shared && l.kind == LayerKind::kMlp && s.mlp == MlpKind::kGelu;
  m.cast_fwd_bytes += proj_input ? (t > 1 ? 3 : 4) * X : 0.0;
  m.cast_bwd_bytes += (gelu_fused ? 0.0 : 4 * Y) + (proj_input && t == 1 ? 0.0 : 2 * X);
  m.cast_first_mb_bytes += 4 * W;
}

/// A layer's parameter tensors into the unit: TP-local and shard elements (this EP rank's experts apart),
/// autocast's weight copies, LoRA's frozen elements, a quantised base's dequantisation traffic, float8
/// all-gather shards.
void layer_tensors(const UnitContext& c, SimUnit& u, UnitSums& m, const Layer& l, bool fp8_layer) {
  const Plan& p = c.p;
  const RuntimeTraits& rt = c.rt;
  const int t = c.t, F = c.F, Fe = c.Fe;
  const bool ep = c.ep;
  const bool cast_by_autocast = l.kind != LayerKind::kEmbedding && l.kind != LayerKind::kPositionEmbedding &&
                                l.kind != LayerKind::kNorm && l.kind != LayerKind::kFinalNorm;
  const bool embedding = l.kind == LayerKind::kEmbedding || l.kind == LayerKind::kPositionEmbedding;
  const bool norm = l.kind == LayerKind::kNorm || l.kind == LayerKind::kFinalNorm;
  const auto bc = static_cast<Bytes>(p.compute_bytes());
  if (l.kind == LayerKind::kLmHead && c.s.tied_embeddings) {
    const std::int64_t tied =
        (static_cast<std::int64_t>(c.s.vocab) + t - 1) / t *
        static_cast<std::int64_t>(c.s.hidden);  // the tied weight, vocab-parallel under TP
    u.autocast_copy_elems += tied;
    u.saved_weight_bytes = add_checked(u.saved_weight_bytes, mul_checked(tied, bc, "saved weight"), "saved");
    u.saved_weight_max_bytes = std::max(u.saved_weight_max_bytes, mul_checked(tied, bc, "saved weight"));
  }
  // save_on_cpu packs a tensor once per op that saves it, and the pack-only tensors (the layer's activation
  // list, layer_repacked_bytes): the host's copies beyond the saved storages. The loss runs outside its
  // context.
  if (p.activation_offload != 0 && rt.act_offload == ActOffloadStyle::kSaveOnCpu &&
      l.kind != LayerKind::kLoss)
    u.repacked_act_bytes = add_checked(u.repacked_act_bytes, std::llround(layer_repacked_bytes(l, p, c.T)),
                                       "save_on_cpu packed bytes");
  // Identical tensors (a MoE layer's experts) as one group times its count: the same sums.
  l.for_each_tensor_group([&](const Tensor& ten, std::int64_t count) {
    const std::int64_t one = tp_local_elems(ten, t), n = one * count;
    const std::int64_t rank_n = ep && ten.expert ? n / p.ep : n;  // this EP rank's experts
    if (!embedding && (norm || ten.dim1 > 1) && ten.store == WeightStore::kParam) {
      u.saved_weight_bytes =
          add_checked(u.saved_weight_bytes, mul_checked(rank_n, bc, "saved weight"), "saved");
      // One tensor: a grouped expert weight holds this rank's stack / ep experts; a per-expert one is whole.
      const std::int64_t largest = ep && ten.expert && ten.stack > 1 ? one / p.ep : one;
      u.saved_weight_max_bytes = std::max(u.saved_weight_max_bytes, mul_checked(largest, bc, "saved weight"));
    }
    // (a weight stored in bf16 or quantised, LoRA's base, is not cast: autocast's copy is of fp32 weights)
    if (cast_by_autocast && ten.store == WeightStore::kParam) u.autocast_copy_elems += rank_n;
    // LoRA's frozen base (not under FSDP1: its FlatParameter's gradient covers it).
    const bool frozen = ten.frozen && rt.padding != Padding::kFlatUnit;
    if (frozen) u.frozen_elems += rank_n;
    if (ten.store == WeightStore::kNf4 || ten.store == WeightStore::kInt8)
      m.dequant_bytes +=
          static_cast<double>(ten.parameters() * count) *
          (ten.store == WeightStore::kNf4 ? fw::kNf4DequantBytesPerValue : fw::kInt8DequantBytesPerValue);
    if (ep && ten.expert) {  // summed over all experts here, this rank's experts / ep after the loop
      u.expert_elems += n;
      if (rt.padding == Padding::kFlatUnit) {
        m.expert_flat += n;
      } else {  // this rank's shard already (its experts only)
        const std::int64_t sh = rank_shard_elems(ten, count, t, Fe, rt.padding, p.ep);
        u.expert_shard_elems += sh;
        if (frozen) u.frozen_expert_shard_elems += sh;
      }
      return;
    }
    u.elems += n;
    if (rt.padding == Padding::kFlatUnit) {
      m.flat += n;
    } else {
      u.shard_elems += tensor_shard_elems(ten, t, F, rt.padding) * count;
      if (frozen) u.frozen_shard_elems += tensor_shard_elems(ten, t, F, rt.padding) * count;
    }
    if (fp8_layer && p.fp8_all_gather && ten.dim1 > 1)  // weights, not biases
      m.fp8_shard += tensor_shard_elems(ten, t, F, Padding::kPerTensorDim0) * count;
  });
}

/// Bytes per element moved by torchao's float8 casts of one GEMM (docs/model.md "Float8"): tensorwise = amax
/// pass (read 2) + cast (read 2, write 1) per operand, transposes of fp8 copies (read 1, write 1) where
/// backward needs the other layout; rowwise = row scales fused into the cast (3), column scales need their
/// own pass (5). An input shared by several projections is cast once (`column_input_cast`); with TP,
/// tensorwise casts the sequence shard before the all-gather.
void fp8_cast_bytes(const UnitContext& c, UnitSums& m, const Layer& l, const Gemm& g, double n, double k,
                    bool& column_input_cast) {
  const Plan& p = c.p;
  const int t = c.t;
  const double T = c.T;
  const bool shared = g.tp == TpSplit::kColumn;
  const double X = shared ? (column_input_cast ? 0.0 : T * k) : T * k * g.count;
  if (shared) column_input_cast = true;
  const double Y = T * n * g.count, W = n * k * g.count;
  if (block_scaled(p.fp8)) {
    blockfp_cast_bytes(m, p.fp8, X, Y, W);
  } else if (c.rt.te_fp8) {
    te_fp8_cast_bytes(m, l, c.s, shared, t, X, Y, W);
  } else if (p.fp8 == Fp8::kTensorwise) {
    const double x_fwd = shared && t > 1 ? X / t : X;
    m.cast_fwd_bytes += 5 * x_fwd + (p.fp8_all_gather ? 0 : 5 * W);
    m.cast_bwd_bytes += 5 * X + (p.fp8_all_gather ? 2 * W : 5 * W) + 7 * Y;
  } else {
    m.cast_fwd_bytes += 3 * X + 3 * W;
    m.cast_bwd_bytes += 5 * X + 5 * W + 8 * Y;
  }
}

/// A layer's GEMMs: their time (float8, routed experts grouped, the busiest EP rank's imbalance), the
/// column-parallel and frozen shares, and their forward FLOPs.
void layer_gemms(const UnitContext& c, SimUnit& u, UnitSums& m, const Layer& l, bool fp8_layer) {
  const Plan& p = c.p;
  const CostModel& costs = c.costs;
  const int t = c.t;
  const double T = c.T;
  // The column-parallel projections of a layer share one input (q/k/v, gate/up).
  bool column_input_cast = false;
  for (const auto& g : l.gemms) {
    const double n = g.tp == TpSplit::kColumn ? static_cast<double>(g.n) / t : static_cast<double>(g.n);
    const double k = g.tp == TpSplit::kRow ? static_cast<double>(g.k) / t : static_cast<double>(g.k);
    // The busiest EP rank's routed experts see `moe_imbalance` times the mean rows (moe_expert_rows).
    const double imbalance = c.ep && g.expert ? p.moe_imbalance : 1.0;
    const double gemm_before = m.gemm;
    if (fp8_layer) {
      m.gemm += g.count * (p.fp8 == Fp8::kNvfp4 ? costs.gemm_fp4_s(T, n, k, c.fp8_ratio)
                                                : costs.gemm_fp8_s(T, n, k, c.fp8_ratio));
      fp8_cast_bytes(c, m, l, g, n, k, column_input_cast);
    } else if (g.expert && l.moe_experts > 0) {
      m.gemm += routed_experts_gemm_s(costs, l, g, p, moe_expert_rows(c, l), n, k, c.fp32);
    } else if (imbalance != 1.0) {
      m.gemm += g.count * costs.gemm_s(T * imbalance, n, k, c.fp32);
    } else {
      m.gemm += g.count * costs.gemm_s(T, n, k, c.fp32);
    }
    if (g.tp == TpSplit::kColumn && !g.expert) m.column_gemm += m.gemm - gemm_before;
    if (g.frozen) m.frozen_gemm += m.gemm - gemm_before;
    u.flops_fwd += 2.0 * T * n * k * g.count;
  }
  m.moe_select_bwd += hf_eager_select_bwd_s(c, l);
}

/// A layer's attention core (flash, or a materialised s x s core), elementwise traffic and saved activations
/// per AC mode.
void layer_core_and_activations(const UnitContext& c, SimUnit& u, UnitSums& m, const Layer& l) {
  const Plan& p = c.p;
  const CostModel& costs = c.costs;
  const double T = c.T;
  if (l.attn_heads > 0) {
    const double heads = static_cast<double>(l.attn_heads) / c.t;
    // Flash attention: QK^T (head_dim) and AV (v_head_dim) over the positions each query attends (causal:
    // (s + 1) / 2 on average; sliding or chunked windows fewer), 2 FLOPs per MAC.
    const double flops =
        2.0 * T * heads * static_cast<double>(l.attn_head_dim + l.v_head_dim()) * l.attended_positions(p.seq);
    // A materialised core runs batched GEMMs over whole s x s rows and memory-bound passes over them
    // instead; the useful FLOPs counted are the same.
    if (p.attention == AttentionCore::kFlash) {
      m.attn += costs.attention_fwd_s(flops, c.fp32);
    } else {
      const bool alibi = c.s.positions == PositionKind::kAlibi && p.attention == AttentionCore::kFusedSoftmax;
      m.score_fwd += score_core_fwd_s(l, p, alibi, costs, T);
      m.score_bwd += score_core_bwd_s(l, p, alibi, costs, T);
    }
    u.flops_fwd += flops;
  }
  // Megatron-core with Transformer Engine runs the elementwise work fused, as compiled code does: the
  // norm inside TE's LayerNormLinear / LayerNormMLP, rotary embedding (apply_rope_fusion), the MLP
  // activation (megatron/core/fusions/fused_bias_swiglu.py, fused_bias_gelu.py) and bias-dropout-add
  // (fused_bias_dropout.py) as single kernels (core_r0.8.0).
  const bool fused = p.compile || c.rt.fused_kernels;
  double el = fused ? l.elementwise_bytes_per_token : l.eager_elementwise_bytes_per_token;
  if (l.kind == LayerKind::kLoss)
    el = el / c.t;  // vocab-parallel loss
  else if (l.block >= 0)
    el = el / c.rep_div + c.moe_token_side_extra_bytes(l, fused);
  m.elem += costs.memory_s(T * el * c.bc / 2);
  // A MoE layer under EP: the expert side on the busiest rank's rows, and the permutations (units_moe.cpp).
  m.elem += costs.memory_s(T * c.moe_expert_extra_bytes(l));
  const double saved = c.saved(l, false);
  m.act_none += saved;
  m.act_sel += c.saved(l, l.block >= 0);
  if (l.block < 0) m.act_full += saved;
  m.block_inputs += c.block_input(l);
}

}  // namespace

/// One pass over the unit's layers: parameter and shard elements, GEMM / attention / elementwise time, float8
/// casts, and the activations saved per AC mode.
UnitSums unit_layers(const UnitContext& c, SimUnit& u) {
  UnitSums m;
  for (const Layer* l : u.layers) {
    // torchao converts the blocks' dense linear layers; embedding, LM head, attention core and MoE experts
    // stay.
    const bool fp8_layer = c.p.fp8 != Fp8::kNone && l->block >= 0 &&
                           (l->kind == LayerKind::kAttention || l->kind == LayerKind::kMlp);
    layer_tensors(c, u, m, *l, fp8_layer);
    layer_gemms(c, u, m, *l, fp8_layer);
    layer_core_and_activations(c, u, m, *l);
  }
  return m;
}

}  // namespace shardplan::detail
