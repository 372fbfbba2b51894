// Per-layer memory for a plan: a tensor's TP-local shape and shard as each runtime pads it, the activations a
// layer saves for backward (no AC, selective, full), and its backward's transient excess (docs/mechanics.md
// §2.2, docs/model.md "Backward inside a block").
#include "simulator/memory/layer_memory.hpp"

#include <algorithm>
#include <cmath>

#include "core/checked.hpp"
#include "simulator/cost/cost.hpp"

namespace shardplan {

std::int64_t tp_local_rows(const Tensor& t, int tp) {
  return t.tp == TpSplit::kColumn ? t.dim0 / tp : t.dim0;
}
std::int64_t tp_local_cols(const Tensor& t, int tp) {
  return t.tp == TpSplit::kRow ? t.dim1 / tp : t.dim1;
}

std::int64_t tp_local_elems(const Tensor& t, int tp) {
  return mul_checked(t.stack, mul_checked(tp_local_rows(t, tp), tp_local_cols(t, tp), "tensor elements"),
                     "tensor elements");
}

std::int64_t tensor_shard_elems(const Tensor& t, int tp, int shard_group, Padding padding,
                                std::int64_t stack) {
  const std::int64_t rows = tp_local_rows(t, tp), cols = tp_local_cols(t, tp);
  const std::int64_t e = stack > 0 ? stack : t.stack;
  if (padding == Padding::kPerTensorDim0) {
    if (e == 1) return mul_checked(ceil_div(rows, shard_group), cols, "shard elements");
    // A grouped expert weight [e, rows, cols]: torchtitan 0.3.0 (distributed/fsdp.py, the MoE blocks'
    // fully_shard) shards the experts (Shard(0), padded to a multiple of the ranks) unless the ranks times
    // the EP degree exceed the experts (efsdp x ep > num_experts, i.e. ranks > e, the rank's experts), then
    // each expert's dim 0 (Shard(1) of the 3-D weight) "to avoid padding".
    if (shard_group > e)
      return mul_checked(e, mul_checked(ceil_div(rows, shard_group), cols, "shard"), "shard");
    return mul_checked(ceil_div(e, shard_group), mul_checked(rows, cols, "shard elements"), "shard elements");
  }
  return ceil_div(mul_checked(e, mul_checked(rows, cols, "tensor elements"), "tensor elements"), shard_group);
}

std::int64_t rank_local_elems(const Tensor& t, std::int64_t count, int tp, int ep) {
  const std::int64_t n = mul_checked(tp_local_elems(t, tp), count, "tensor elements");
  return t.expert && ep > 1 ? n / ep : n;
}

std::int64_t rank_shard_elems(const Tensor& t, std::int64_t count, int tp, int shard_group, Padding padding,
                              int ep) {
  if (!t.expert || ep <= 1)
    return mul_checked(tensor_shard_elems(t, tp, shard_group, padding), count, "shard elements");
  if (t.stack > 1)  // ep divides the experts (resolve_plan)
    return mul_checked(tensor_shard_elems(t, tp, shard_group, padding, t.stack / ep), count,
                       "shard elements");
  return mul_checked(tensor_shard_elems(t, tp, shard_group, padding), count, "shard elements") / ep;
}

double sequence_parallel_divisor(const Plan& p) {
  // Without sequence parallelism (DeepSpeed AutoTP: capabilities.hpp) the activations between the TP regions
  // are the full sequence on every TP rank.
  return p.tp > 1 && tp_sequence_parallel(p.runtime) ? p.tp : 1;
}

double moe_token_divisor(const Plan& p) {
  if (p.tp <= 1) return 1;
  // torchtitan 0.3.0 (the fsdp2 runtime's MoE, --moe-impl grouped; models/common/moe_sharding.py): with EP
  // the MoE boundary redistributes its input to Shard(1) over the TP axis ("MoE reuses the mesh axis named
  // TP for sequence-token sharding, so each rank sees different tokens"): router, dispatch and combine on
  // T / tp tokens, SP or not. Without EP the router's and the routed experts' input is Replicate(): every
  // TP rank routes and combines all T tokens (the experts TP-sharded, their output Partial, reduce-scattered
  // to the sequence-parallel layout after the combine).
  if (model_code(p) == ModelCode::kTorchtitan) return p.ep > 1 ? p.tp : 1;
  // Megatron-core (MoE with TP requires sequence parallelism: megatron/training/arguments.py; the router and
  // the token permutation of moe/token_dispatcher.py run on the rank's S / tp tokens), Hugging Face's loop
  // and DeepSpeed (no sequence parallelism): as the residual stream.
  return sequence_parallel_divisor(p);
}

double layer_backward_excess_bytes(const Layer& l, const Plan& p, double tokens, bool accumulated) {
  const double bc = p.compute_bytes();
  const int t = p.tp;
  auto n_local = [&](const Gemm& g) {
    return g.tp == TpSplit::kColumn ? static_cast<double>(g.n) / t : static_cast<double>(g.n);
  };
  auto k_local = [&](const Gemm& g) {
    return g.tp == TpSplit::kRow ? static_cast<double>(g.k) / t : static_cast<double>(g.k);
  };
  const bool dense = (l.kind == LayerKind::kAttention || l.kind == LayerKind::kMlp) && l.gemms.size() >= 2 &&
                     l.gemms.back().tp == TpSplit::kRow;
  if (!dense) return 0;
  // Autograd's order (torch 2.15 eager; the reference lane's trace of a Llama block): the output projection
  // (the layer's last, row-parallel GEMM) runs first: mm for its weight gradient and mm for its input
  // gradient. Then the op between it and the column-parallel projections: SwiGLU's mul and silu backward
  // write the gradients of the gate and up outputs, flash attention's backward writes dq, dk, dv — together
  // the column projections' output gradients, allocated while the input gradient above is alive. The output
  // projection's input is saved for it alone in an MLP (the SwiGLU product / GELU output) and its last use
  // frees it before those gradients exist; in attention the same tensor is flash attention's output O, which
  // its backward still reads.
  const Gemm& out = l.gemms.back();
  const double out_weight_grad = n_local(out) * k_local(out) * bc * out.count;
  const double out_input_grad = tokens * k_local(out) * bc * out.count;
  double column_output_grads = 0;
  for (std::size_t i = 0; i + 1 < l.gemms.size(); ++i)
    if (l.gemms[i].tp == TpSplit::kColumn)
      column_output_grads += tokens * n_local(l.gemms[i]) * bc * l.gemms[i].count;
  const double freed = l.attn_heads > 0 ? 0.0 : out_input_grad;
  // With an accumulated gradient AccumulateGrad adds the output projection's weight gradient into it and
  // frees it right after its mm, before the ops below (reference lane, ref-llama2-7b-...-gpipe-...-pp-rank-0,
  // micro-batch 1: w2's 86 MiB dW is freed two events after it is written, before SwiGLU's backward
  // allocates): it is live only next to the input gradient.
  const double held_weight_grad = accumulated ? 0.0 : out_weight_grad;
  const double at_output_grads = out_weight_grad + out_input_grad;
  const double at_activation =
      std::max(at_output_grads, held_weight_grad + out_input_grad + column_output_grads - freed);
  const double scores = score_elems(l, p, tokens);
  if (scores > 0) {
    // A materialised core (attention_core.cpp): its worst op comes before Q's and K's gradients exist — the
    // output projection's gradients, the PV matmul's gradient of V, and the score gradients beyond the saved
    // score tensors (those are in the saved set already).
    const ScorePasses sp = score_passes(p, false);
    const double v_grad =
        tokens * static_cast<double>(l.attn_kv_heads) * static_cast<double>(l.v_head_dim()) / t * bc;
    return std::max(at_activation, held_weight_grad + out_input_grad + v_grad +
                                       scores * (sp.bwd_peak_bytes - sp.saved_bytes()));
  }
  // An MLP with a single column projection (up, GELU, down; the reference lane's trace of MPT 7B): the
  // activation's backward has consumed the saved up output and activation (the layer's split tensors), then
  // up's backward writes its weight gradient and its input gradient while its output gradient is still
  // alive. Later than the op above and worse when the weights outweigh the tokens' FFN tensors (with f = 4h,
  // fewer than 4h/7 tokens: MPT 7B at 2,048 tokens, +16 MiB).
  const Gemm* column = nullptr;
  int columns = 0;
  for (std::size_t i = 0; i + 1 < l.gemms.size(); ++i)
    if (l.gemms[i].tp == TpSplit::kColumn) {
      columns += l.gemms[i].count;
      column = &l.gemms[i];
    }
  if (l.attn_heads > 0 || columns != 1) return at_activation;
  double split_saved = 0;  // the layer's TP-split tensors saved without AC (up's output, the activation)
  for (const ActTensor& a : l.activations)
    if (a.eager && a.split == ActSplit::kTp && a.only == ActOnly::kAlways)
      split_saved += a.per_token * act_dtype_bytes(a.dtype, bc);
  split_saved = tokens * split_saved / t;
  const double at_column_input_grad = held_weight_grad + n_local(*column) * k_local(*column) * bc +
                                      tokens * n_local(*column) * bc + tokens * k_local(*column) * bc -
                                      split_saved;
  return std::max(at_activation, at_column_input_grad);
}

bool act_exists(const ActTensor& a, const Plan& p) {
  // A pack-only tensor has no device storage of its own: save_on_cpu's copies only (layer_repacked_bytes).
  return !a.pack_only && act_condition(a, p);
}

bool act_condition(const ActTensor& a, const Plan& p) {
  switch (a.only) {
    case ActOnly::kAlways:
      return true;
    case ActOnly::kFp32Norm:
      return p.fp32_norm;
    case ActOnly::kTp:
      return p.tp > 1;
    case ActOnly::kTpGathered:
      return p.tp > 1 && tp_saves_gathered_input(p.runtime);
    case ActOnly::kMoeGrouped:
      return p.moe_impl == MoeImpl::kGrouped;
    case ActOnly::kMoeLoop:
      return p.moe_impl == MoeImpl::kLoop;
    case ActOnly::kMoeEp:
      return p.moe_impl == MoeImpl::kGrouped && p.ep > 1;
    case ActOnly::kMoeHfRouter:
      return p.moe_impl != MoeImpl::kGrouped && p.moe_impl != MoeImpl::kDeepSpeed;
    case ActOnly::kMoeSorted:
      return p.moe_impl == MoeImpl::kGrouped || p.moe_impl == MoeImpl::kHfGroupedMm;
    case ActOnly::kMoeExpertLoop:
      return p.moe_impl == MoeImpl::kLoop || p.moe_impl == MoeImpl::kHfEager;
    case ActOnly::kMoeHfGroupedMm:
      return p.moe_impl == MoeImpl::kHfGroupedMm;
    case ActOnly::kMoeHfEager:
      return p.moe_impl == MoeImpl::kHfEager;
    case ActOnly::kMoeDeepSpeed:
      return p.moe_impl == MoeImpl::kDeepSpeed;
  }
  return true;
}

double act_saved_share(const ActTensor& a, const Plan& p, bool selective) {
  if (!act_exists(a, p)) return 0;
  // The linears save the all-gathered copy instead of this shard (add_tp_gathered_input); the checkpoint
  // still keeps a block input.
  if (a.saved_gathered && a.role != ActRole::kBlockInput && p.tp > 1 && tp_saves_gathered_input(p.runtime) &&
      !selective)
    return 0;
  if (!selective) return (p.compile ? a.compiled : a.eager) ? 1 : 0;
  // Op-level SAC (torchtitan 0.3.0 SelectiveAC): the SDPA op's outputs only when its save list has the plan's
  // SDPA op (Plan::sac_saves_sdpa); compiled, only what backward reads (docs/model.md "Compiled saved
  // tensors"; not measured with TP for the reduce-scatter outputs).
  if ((a.role == ActRole::kSdpaOut || a.role == ActRole::kSdpaLse) && !p.sac_saves_sdpa()) return 0;
  if (p.compile && a.sac_compiled_unread) return 0;
  return a.sac == ActSac::kSave ? 1.0 : a.sac == ActSac::kHalf ? 0.5 : 0.0;
}

double act_rows_scale(const ActTensor& a, const Plan& p, double tokens) {
  // The rank's tokens are whole (mbs x seq / cp, cp dividing seq: resolve_plan); rows per token: top_k.
  return a.expert_rows <= 0 ? 1.0 : moe_rows_factor(tokens, a.expert_rows, a.expert_count, p);
}

namespace {
/// act_bytes_per_token before TP's division: the one place an activation tensor becomes bytes.
double act_bytes_undivided(const ActTensor& a, const Plan& p, double tokens) {
  double b = a.per_token * act_dtype_bytes(a.dtype, p.compute_bytes()) * act_rows_scale(a, p, tokens);
  if (a.role == ActRole::kSdpaLse && p.sdpa() == SdpaBackend::kEfficient) {
    // Memory-efficient attention (CUDA) allocates its log-sum-exp over the queries rounded up to 32
    // (torch/_meta_registrations.py meta__scaled_dot_product_efficient_attention, torch 2.15: ceil(M / 32) *
    // 32; mem_eff_attention kAlignLSE); flash (CUDA and AOTriton) and cuDNN take exactly the queries ([b, h,
    // s] and [b, h, s, 1] fp32). The kernel sees each rank's seq / cp queries.
    const std::int64_t q_len = std::max<std::int64_t>(1, p.seq / p.cp);
    b *= static_cast<double>((q_len + 31) / 32 * 32) / static_cast<double>(q_len);
  }
  return b;
}
}  // namespace

double act_bytes_per_token(const ActTensor& a, const Plan& p, double tokens) {
  return act_bytes_undivided(a, p, tokens) / act_split_divisor(a.split, p);
}

double act_split_divisor(ActSplit split, const Plan& p) {
  switch (split) {
    case ActSplit::kTp:
      return p.tp;
    case ActSplit::kSequence:
      return sequence_parallel_divisor(p);
    case ActSplit::kMoeTokens:
      return moe_token_divisor(p);
    case ActSplit::kNone:
      break;
  }
  return 1.0;
}

double layer_saved_bytes(const Layer& l, const Plan& p, double tokens, bool selective) {
  // Per token, by how TP divides them (each sum divided once: the order of the old per-token figures).
  double split = 0, seq = 0, none = 0, moe = 0;
  for (const ActTensor& a : l.activations) {
    const double share = act_saved_share(a, p, selective);
    if (share <= 0) continue;
    const double b = share * act_bytes_undivided(a, p, tokens);
    (a.split == ActSplit::kTp          ? split
     : a.split == ActSplit::kSequence  ? seq
     : a.split == ActSplit::kMoeTokens ? moe
                                       : none) += b;
  }
  // A materialised attention core adds its score tensors, which selective recomputation recomputes
  // (Korthikanti et al. 2022 §5: the core attention is what selective recompute drops).
  return tokens * (split / p.tp + seq / sequence_parallel_divisor(p) + moe / moe_token_divisor(p) + none) +
         (selective ? 0.0 : score_saved_bytes(l, p, tokens));
}

double layer_repacked_bytes(const Layer& l, const Plan& p, double tokens) {
  // This rank's sequence positions: context parallelism gives each rank seq / cp of them (resolve_plan: cp
  // divides seq), and the rotary table's slice has as many rows.
  const double positions = static_cast<double>(std::max<std::int64_t>(1, p.seq / p.cp));
  double b = 0;
  for (const ActTensor& a : l.activations) {
    if (a.pack_only) {
      if (act_condition(a, p))
        b += a.packs * (a.per_position ? positions : tokens) * act_bytes_per_token(a, p, tokens);
      continue;
    }
    // A materialised core's output: its last bmm saves its inputs, not its output, so the output projection
    // alone saves it (the SDPA ops save theirs too: ActTensor::packs).
    const int packs = a.role == ActRole::kSdpaOut && p.attention != AttentionCore::kFlash ? 1 : a.packs;
    if (packs <= 1) continue;
    b += (packs - 1) * act_saved_share(a, p, false) * tokens * act_bytes_per_token(a, p, tokens);
  }
  return b;
}

double layer_expert_side_saved_bytes(const Layer& l, const Plan& p, double tokens, bool selective) {
  double b = 0;
  for (const ActTensor& a : l.activations)
    if (a.expert_rows > 0) b += act_saved_share(a, p, selective) * act_bytes_per_token(a, p, tokens);
  return tokens * b;
}

double block_input_bytes(const Layer& l, const Plan& p, double tokens) {
  double b = 0;
  for (const ActTensor& a : l.activations)
    if (a.role == ActRole::kBlockInput) b += act_bytes_per_token(a, p, tokens);
  return tokens * b;
}

}  // namespace shardplan
