// The layer builders (layer_builders.hpp): parameter tensors, GEMMs and the list of activation tensors of
// each layer kind, each entry cited to the code it comes from (docs/model.md "Activations: one list of
// tensors per layer"; docs/mechanics.md §2.2).
#include "simulator/model/layer_builders.hpp"

#include <cstdint>

namespace shardplan::detail {

namespace {

ActTensor& act(Layer& l, std::string name, double per_token, ActSplit split,
               ActDtype dtype = ActDtype::kCompute) {
  return add_activation(l, std::move(name), per_token, split, dtype);
}
/// An fp32 statistic (rstd): held by nothing but autograd, so where a regime does not save it, freed as soon
/// as it is made (the lane's traces under selective and full AC).
void statistic(Layer& l, std::string name, double per_token, ActSplit split) {
  act(l, std::move(name), per_token, split, ActDtype::kFp32).life = ActLife::kAtOnce;
}
/// SDPA's saved output and log-sum-exp (the log-sum-exp, like a statistic, dies at once where not saved).
/// The output is saved twice: by the SDPA op (torch 2.15 derivatives.yaml _scaled_dot_product_flash_attention
/// and the cuDNN / efficient ops: `output`) and by the output projection's mm as its input (the [b, s, h, d]
/// output's transpose, contiguous() and view share its storage), so save_on_cpu packs it twice.
void sdpa_outputs(Layer& l, double out_per_token, double heads) {
  ActTensor& out = act(l, "sdpa.out", out_per_token, ActSplit::kTp);
  out.role = ActRole::kSdpaOut;
  out.sac = ActSac::kSave;
  out.packs = 2;
  ActTensor& lse = act(l, "sdpa.lse", heads, ActSplit::kTp, ActDtype::kFp32);
  lse.role = ActRole::kSdpaLse;
  lse.sac = ActSac::kSave;
  lse.life = ActLife::kAtOnce;
}
ActTensor* find_act(Layer& l, const std::string& name) {
  for (auto& a : l.activations)
    if (a.name == name) return &a;
  return nullptr;
}
/// The rotary table the complex rotary multiplies q and k by (torchtitan 0.3.0 models/common/rope.py
/// apply_rotary_emb: `xq_ * freqs_cis`, `xk_ * freqs_cis`; the DeepSeek-V3 model's q_pe and k_pe alike):
/// complex64 [seq, dim / 2], a slice of the model's freqs_cis buffer broadcast over the batch, i.e. `dim`
/// fp32 per sequence position. Each product saves it, the other operand requiring grad (torch 2.15
/// derivatives.yaml mul.Tensor: `self: mul_tensor_backward(grad, other, ...)`): save_on_cpu packs it twice
/// per attention layer; on the device it is the buffer, no activation.
void rotary_table(Layer& l, double dim) {
  ActTensor& f = unsaved(act(l, "freqs_cis", dim, ActSplit::kNone, ActDtype::kFp32), ActLife::kUntracked);
  f.pack_only = true;
  f.per_position = true;
  f.packs = 2;
}

}  // namespace

/// The layer's input, made by the previous layer (ActTensor::input).
ActTensor& input(Layer& l, double per_token, ActSplit split) {
  ActTensor& a = act(l, "input", per_token, split);
  a.input = true;
  return a;
}
/// A tensor no regime without AC saves (a GEMM output the next op consumes, a temporary).
ActTensor& unsaved(ActTensor& a, ActLife life) {
  a.eager = a.compiled = false;
  a.life = life;
  return a;
}
/// A GEMM's output: call `call` of l.gemms[gemm]; op-level SAC saves it by the block's mm parity
/// (selective_mm_parity), counted at half where the parity is not tracked.
ActTensor& gemm_out(ActTensor& a, std::size_t gemm, int call) {
  a.gemm = static_cast<std::int16_t>(gemm);
  a.call = static_cast<std::int16_t>(call);
  a.sac = ActSac::kHalf;
  return a;
}

ActTensor& add_activation(Layer& l, std::string name, double per_token, ActSplit split, ActDtype dtype) {
  l.activations.emplace_back();
  ActTensor& a = l.activations.back();
  a.name = std::move(name);
  a.per_token = per_token;
  a.split = split;
  a.dtype = dtype;
  return a;
}

// Reference lane, Llama 3 70B TP 8 (tools/reference/configs.txt): two 64 MiB all_gather_into_tensor outputs
// saved per block at 4,096 tokens (q/k/v's and w1/w3's inputs) and the head's 256 MiB gathered input at
// 16,384 tokens, each freed by its layer's backward (docs/model.md "Tensor parallelism").
void weight_grad_input(Layer& l, const std::string& name, std::initializer_list<const char*> weights) {
  ActTensor* a = find_act(l, name);
  if (!a) return;
  a->weight_grad_only = true;
  for (const char* w : weights)
    for (std::size_t i = 0; i < l.tensors.size() && i < 32; ++i)
      if (l.tensors[i].name == w) a->weight_grad_of |= std::uint32_t{1} << i;
}

void add_tp_gathered_input(Layer& l) {
  ActTensor* in = find_act(l, "input");
  if (!in || in->split != ActSplit::kSequence) return;
  bool column_reads_input = false;
  for (const Gemm& g : l.gemms)
    if (g.tp == TpSplit::kColumn && static_cast<double>(g.k) == in->per_token) column_reads_input = true;
  if (!column_reads_input) return;
  in->saved_gathered = true;
  const double width = in->per_token;
  // Saved by the same linears as the input (read before the append below moves the list).
  const bool weight_grad_only = in->weight_grad_only;
  const std::uint32_t weight_grad_of = in->weight_grad_of;
  const std::int8_t packs = in->packs;
  ActTensor& gathered = act(l, "all_gather.out", width, ActSplit::kNone);
  gathered.only = ActOnly::kTpGathered;
  gathered.sac = ActSac::kRecompute;  // not on torchtitan's save list: op-level SAC recomputes the gather
  gathered.weight_grad_only = weight_grad_only;
  gathered.weight_grad_of = weight_grad_of;
  gathered.packs = packs;
}

void dies_after(Layer& l, const std::string& name, const std::string& consumer) {
  std::int16_t at = -1;
  for (std::size_t i = 0; i < l.activations.size(); ++i)
    if (l.activations[i].name == consumer) at = static_cast<std::int16_t>(i);
  for (ActTensor& a : l.activations)
    if (a.name == name) {
      a.life = ActLife::kTransient;
      a.consumer = at;
    }
}

// torch/utils/checkpoint.py (torch 2.15): the non-reentrant checkpoint saves the block's inputs; under full
// AC that is all the block keeps, under op-level SAC it is kept beside the policy's saved outputs.
void mark_block_input(Layer& l) {
  ActTensor* in = find_act(l, "input");
  if (!in) return;
  in->sac = ActSac::kSave;
  in->role = ActRole::kBlockInput;
}

Layer make_norm(const ModelSpec& s, std::string name, int block, LayerKind kind) {
  Layer l;
  l.name = std::move(name);
  l.kind = kind;
  l.block = block;
  l.tensors.push_back({"weight", s.hidden, 1, TpSplit::kReplicated});
  if (s.norm_bias) l.tensors.push_back({"bias", s.hidden, 1, TpSplit::kReplicated});
  const double h = static_cast<double>(s.hidden);
  // torch 2.15 nn.RMSNorm -> F.rms_norm -> at::_fused_rms_norm on CUDA (weight dtype == input dtype), whose
  // FusedRmsNormBackward0 saves the input, the weight and the fp32 rstd per token (derivatives.yaml;
  // docs/model.md "Checked against the real code"): 2h + 4 bytes per token. Op-level SAC recomputes norms (no
  // norm op is in torchtitan's save list); a block's first norm's input is the checkpoint's
  // (mark_block_input). torchtitan's RMSNorm before 3b39d7ab0 (2025-03-19; torchtrain/models/llama/model.py
  // at 83c879f18), `self._norm(x.float()).type_as(x) * self.weight` with _norm = x * rsqrt(x.pow(2).mean(-1)
  // + eps): eager autograd saves the fp32 x (pow and mul), rsqrt's fp32 output and the bf16 normalised tensor
  // (the multiply by the weight) instead of the bf16 input: the sizes of "input", "input.float()" and "rstd",
  // 4h more (tools/reference/saved_per_block.py: 45.59 h vs 37.59 h per Llama block, two norms, h = 256 and
  // 384). Compiled, inductor saves the same tensors as for nn.RMSNorm.
  input(l, h, ActSplit::kSequence);
  if (s.norm == NormKind::kRmsNorm) {
    ActTensor& f = act(l, "input.float()", h, ActSplit::kSequence, ActDtype::kFp32);
    f.compiled = false;
    f.only = ActOnly::kFp32Norm;
  }
  statistic(l, "rstd", 1, ActSplit::kSequence);
  l.elementwise_bytes_per_token = 4 * h;  // fused: read and write bf16
  // Eager RMSNorm/LayerNorm in fp32: x.float() 6h, pow 8h, mean 4h, x * rsqrt 12h, type_as 6h, * weight 6h.
  l.eager_elementwise_bytes_per_token = 42 * h;
  return l;
}

// Multi-head latent attention (DeepSeek-V2/V3, HF DeepseekV3Attention). Per token: x (h) → q_a_proj (rank rq)
// → q_a_layernorm → q_b_proj (a·(dn + dr)); x → kv_a_proj_with_mqa (rkv + dr: the latent and one shared
// rotary key) → kv_a_layernorm on the latent → kv_b_proj (a·(dn + dv)); attention with QK dim dn + dr and V
// dim dv; o_proj (h × a·dv). The low-rank projections are replicated under TP (torchtitan's DeepSeek-V3 plan,
// torchtitan/models/deepseek_v3/infra/parallelize.py: wq_a, q_norm, wkv_a, kv_norm NoParallel); q_b_proj and
// kv_b_proj are column-parallel, o_proj row-parallel.
Layer make_mla(const ModelSpec& s, int block, Layer l) {
  const auto& m = s.mla;
  const std::int64_t h = s.hidden, a = s.heads, dqk = m.qk_nope_head_dim + m.qk_rope_head_dim,
                     dv = m.v_head_dim;
  const std::int64_t q = a * dqk, kv_a = m.kv_lora_rank + m.qk_rope_head_dim,
                     kv_b = a * (m.qk_nope_head_dim + dv);
  const std::int64_t o = a * dv, rq = m.q_lora_rank, rkv = m.kv_lora_rank;
  if (rq > 0) {
    l.tensors.push_back({"wq_a", rq, h, TpSplit::kReplicated});
    l.tensors.push_back({"q_norm", rq, 1, TpSplit::kReplicated});
    l.tensors.push_back({"wq_b", q, rq, TpSplit::kColumn});
    l.gemms.push_back({rq, h, 1, TpSplit::kReplicated});
    l.gemms.push_back({q, rq, 1, TpSplit::kColumn});
  } else {
    l.tensors.push_back({"wq", q, h, TpSplit::kColumn});
    l.gemms.push_back({q, h, 1, TpSplit::kColumn});
  }
  l.tensors.push_back({"wkv_a", kv_a, h, TpSplit::kReplicated});
  l.tensors.push_back({"kv_norm", rkv, 1, TpSplit::kReplicated});
  l.tensors.push_back({"wkv_b", kv_b, rkv, TpSplit::kColumn});
  l.tensors.push_back({"wo", h, o, TpSplit::kRow});
  if (s.attn_bias) l.tensors.push_back({"bo", h, 1, TpSplit::kReplicated});
  l.gemms.push_back({kv_a, h, 1, TpSplit::kReplicated});
  l.gemms.push_back({kv_b, rkv, 1, TpSplit::kColumn});
  l.gemms.push_back({h, o, 1, TpSplit::kRow});
  l.attn_heads = s.heads;
  l.attn_kv_heads = s.heads;
  l.attn_head_dim = dqk;
  l.attn_v_head_dim = dv;
  const double H = static_cast<double>(h), RQ = static_cast<double>(rq), RKV = static_cast<double>(rkv);
  // Saved, in forward order (HF DeepseekV3Attention.forward; GEMMs [wq_a, wq_b] or [wq], wkv_a, wkv_b, wo):
  // the input x; the low-rank side, replicated under TP (not divided by sequence parallelism either: counted
  // with the sequence-split tensors, a small error): the q latent (q_a_layernorm's input) with its fp32 rstd
  // and the normed latent (q_b_proj's input), kv_a's output (latent and shared rotary key: the latent norm's
  // and the rotary's input) with its rstd and the normed latent (kv_b_proj's input). Per head (TP-split):
  // SDPA's Q and K (a·dqk), kv_b's output (a·(dn + dv): V's storage) and O (a·dv), the fp32 log-sum-exp.
  // Op-level SAC keeps O and the log-sum-exp and every second matmul output (counted at half: the block's mm
  // parity is not tracked here).
  const double Q = static_cast<double>(q), O = static_cast<double>(o), A = static_cast<double>(a);
  std::size_t gi = 0;
  input(l, H, ActSplit::kSequence).packs = 2;  // saved by the mm of wq (or wq_a) and of wkv_a
  if (rq > 0) {
    gemm_out(act(l, "wq_a.out", RQ, ActSplit::kSequence), gi++);  // q_a_layernorm's input
    statistic(l, "q_norm.rstd", 1, ActSplit::kSequence);
    act(l, "q_norm.out", RQ, ActSplit::kSequence);  // q_b_proj's input
  }
  gemm_out(unsaved(act(l, rq > 0 ? "wq_b.out" : "wq.out", Q, ActSplit::kTp), ActLife::kUntracked), gi++);
  gemm_out(act(l, "wkv_a.out", static_cast<double>(kv_a), ActSplit::kSequence), gi++);  // latent + rotary key
  statistic(l, "kv_norm.rstd", 1, ActSplit::kSequence);
  act(l, "kv_norm.out", RKV, ActSplit::kSequence);  // kv_b_proj's input
  // kv_b_proj's output stays whole: SDPA's V is a split view of it (torchtitan 0.3.0
  // models/deepseek_v3/model.py Attention.forward `k_nope, v = torch.split(kv, [dn, dv], dim=-1)`, HF
  // DeepseekV3Attention alike; K is a cat of k_nope and the rotary key, a tensor of its own), so the saved V
  // keeps a·(dn + dv) per token alive, not a·dv (tools/reference/moe_model_ep.py: torchtitan's deepseek_v3 on
  // gloo saves the whole output). Eager only: the compiled and SAC regimes keep their V as before.
  ActTensor& kv_out = gemm_out(act(l, "wkv_b.out", static_cast<double>(kv_b), ActSplit::kTp), gi++);
  kv_out.compiled = false;
  // SDPA's inputs (nope and roped parts assembled) and its outputs.
  rotary_table(l, static_cast<double>(m.qk_rope_head_dim));
  act(l, "q", Q, ActSplit::kTp);
  act(l, "k", Q, ActSplit::kTp);
  ActTensor& v = act(l, "v", O, ActSplit::kTp);
  v.eager = false;  // a view of wkv_b.out: no storage of its own in eager autograd
  v.life = ActLife::kUntracked;
  sdpa_outputs(l, O, A);
  gemm_out(unsaved(act(l, "wo.out", H, ActSplit::kNone), ActLife::kUntracked), gi++);
  weight_grad_input(l, "input", {"wq", "wq_a", "wkv_a"});
  weight_grad_input(l, "q_norm.out", {"wq_b"});
  weight_grad_input(l, "kv_norm.out", {"wkv_b"});
  // Rotary on the rope part of q (a·dr) and on the shared key (dr); the two norms (fused: read + write bf16);
  // assembling K from the nope part and the broadcast rotary key (write 2·a·dqk); residual add 6h.
  const double rope = static_cast<double>(a * m.qk_rope_head_dim + m.qk_rope_head_dim);
  const double norms = (rq > 0 ? RQ : 0.0) + RKV;
  l.elementwise_bytes_per_token = 4.0 * rope + 4.0 * norms + 2.0 * static_cast<double>(q) + 6.0 * H;
  // Eager: rotary through fp32 complex views (24 bytes per element), norms in fp32 (42 bytes per element, as
  // make_norm), the same K assembly and residual add.
  l.eager_elementwise_bytes_per_token = 24.0 * rope + 42.0 * norms + 2.0 * static_cast<double>(q) + 6.0 * H;
  (void)block;
  return l;
}

// The attention layer's tensors in forward order: torchtitan 0.3.0 models/common/attention.py (wq, wk, wv,
// optional q/k norms, apply_rotary_emb, SDPA, wo) and models/common/rope.py apply_rotary_emb (complex form:
// `xq_ = view_as_complex(xq.float()...)`, `view_as_real(xq_ * freqs_cis)`, `.type_as(xq)`); what aten saves:
// mm saves its input (the layer's input, one tensor for wq, wk and wv), SDPA saves q, k, v, its output and
// log-sum-exp (torch 2.15 derivatives.yaml, _scaled_dot_product_{flash,cudnn,efficient}_attention), wo's mm
// saves the SDPA output (flash's output is laid out [b, s, h, d]: the transpose and contiguous() copy
// nothing). Per token of a Llama block that is 2h (input) + 2q (rotated q) + 2kv + 2kv (rotated k, v) + 2q
// (O) + 4·heads (log-sum-exp) bytes. The eager forward's transients (the reference lane's trace of a Llama 3
// 8B block): wq's and wk's bf16 outputs, xq.float() and xk.float(), the complex products xq_ * freqs_cis
// (fp32 pairs) are alive when type_as writes the rotated q and k and die when apply_rotary_emb returns: 10
// bytes per element of q and k (a fused qkv projection's output stays alive through the saved V view: 8);
// the output projection's output dies after the residual add.
void attention_activations(const ModelSpec& s, Layer& l) {
  const double h = static_cast<double>(s.hidden), q = static_cast<double>(s.heads * s.head_dim),
               kv = static_cast<double>(s.kv_heads * s.head_dim);
  const bool rotary = s.positions == PositionKind::kRotary, qk_norm = s.qk_norm != QkNormKind::kNone;
  // Saved by the mm of each projection reading it (wq, wk and wv; a fused wqkv): packed once by each.
  input(l, h, ActSplit::kSequence).packs = static_cast<std::int8_t>(s.fused_qkv ? 1 : 3);
  weight_grad_input(l, "input", {"wq", "wk", "wv", "wqkv"});
  if (s.fused_qkv) {
    // Phi-3 qkv_proj: one output whose V slice SDPA saves (counted as V alone: the q and k slices the saved
    // view keeps alive are not); the rotary's temporaries are its fp32 copies and products only.
    gemm_out(unsaved(act(l, "wqkv.out", q + 2 * kv, ActSplit::kTp), ActLife::kUntracked), 0);
  } else {
    // Without q/k norms and with rotary positions the projections' outputs are the rotary's inputs, which die
    // when apply_rotary_emb returns; a q/k norm saves them (and its output is the rotary's input); without
    // rotary SDPA saves them.
    const bool saved = qk_norm || !rotary;
    for (const char* n : {"wq.out", "wk.out"}) {
      ActTensor& a = gemm_out(act(l, n, n[1] == 'q' ? q : kv, ActSplit::kTp), n[1] == 'q' ? 0 : 1);
      if (!saved) unsaved(a, ActLife::kTransient);
    }
  }
  ActTensor& v = act(l, s.fused_qkv ? "wqkv.out[v]" : "wv.out", kv, ActSplit::kTp);  // SDPA's V
  if (!s.fused_qkv) gemm_out(v, 2);
  if (qk_norm) {
    // q_norm / k_norm (Qwen3, Gemma 3 per head; OLMo 2 over the projection): an fp32 rstd per head and token.
    statistic(l, "q_norm.rstd", s.heads, ActSplit::kTp);
    statistic(l, "k_norm.rstd", s.kv_heads, ActSplit::kTp);
    // --fp32-norm: a Python RMSNorm computing in fp32 (transformers 5.23 Qwen3RMSNorm, Qwen3MoeRMSNorm:
    // `hidden_states.to(torch.float32)`, pow, mean, `* torch.rsqrt(...)`, `weight * ....to(input_dtype)`)
    // saves the fp32 copy of its input for pow and the multiply, as the block norms do (make_norm); the bf16
    // normalised tensor the weight's multiply saves takes the place of the projection's output, the same
    // size (tools/reference/hf_moe_gloo.py, Qwen3-MoE: 4·q and 4·kv bytes per token beyond the list before).
    for (const char* n : {"q_norm.input.float()", "k_norm.input.float()"}) {
      ActTensor& f = act(l, n, n[0] == 'q' ? q : kv, ActSplit::kTp, ActDtype::kFp32);
      f.compiled = false;
      f.only = ActOnly::kFp32Norm;
    }
    // Their outputs are the rotary's inputs (temporaries), or without rotary SDPA's q and k.
    for (const char* n : {"q_norm.out", "k_norm.out"}) {
      ActTensor& a = act(l, n, n[0] == 'q' ? q : kv, ActSplit::kTp);
      if (rotary) unsaved(a, ActLife::kTransient);
    }
  }
  if (rotary) {
    for (const char* n : {"xq.float()", "xk.float()", "xq_ * freqs_cis", "xk_ * freqs_cis"}) {
      const bool is_q = n[1] == 'q';
      unsaved(act(l, n, is_q ? q : kv, ActSplit::kTp, ActDtype::kFp32), ActLife::kTransient);
    }
    rotary_table(l, static_cast<double>(s.head_dim));
    act(l, "rope.q", q, ActSplit::kTp);  // type_as: the rotated q and k that SDPA saves
    act(l, "rope.k", kv, ActSplit::kTp);
  }
  sdpa_outputs(l, static_cast<double>(s.heads) * static_cast<double>(l.v_head_dim()), s.heads);
  gemm_out(unsaved(act(l, "wo.out", h, ActSplit::kNone), ActLife::kOutput), l.gemms.size() - 1);
  // Where a regime drops them (the lane's traces of a Llama 3 8B block under selective and full AC): the
  // rotary's temporaries die when apply_rotary_emb returns (after the rotated k), a q/k norm's input once its
  // output exists, the statistics at once, the rest when the attention returns.
  if (rotary)
    for (const char* n : {"wq.out", "wk.out", "q_norm.out", "k_norm.out", "xq.float()", "xk.float()",
                          "xq_ * freqs_cis", "xk_ * freqs_cis"})
      dies_after(l, n, "rope.k");
  if (qk_norm) {
    dies_after(l, "wq.out", "q_norm.out");
    dies_after(l, "wk.out", "k_norm.out");
  }
}

Layer make_attention(const ModelSpec& s, int block) {
  Layer l;
  l.name = "blocks." + std::to_string(block) + ".attention";
  l.kind = LayerKind::kAttention;
  l.block = block;
  l.attn_window = s.block_window(block);
  l.attn_chunked = l.attn_window > 0 && s.local_attention == LocalAttention::kChunked;
  if (s.mla.enabled()) return make_mla(s, block, std::move(l));
  const std::int64_t h = s.hidden, d = s.head_dim, q = s.heads * d, kv = s.kv_heads * d;
  if (s.fused_qkv) {
    l.tensors.push_back({"wqkv", q + 2 * kv, h, TpSplit::kColumn});  // Phi-3 qkv_proj
  } else {
    l.tensors.push_back({"wq", q, h, TpSplit::kColumn});
    l.tensors.push_back({"wk", kv, h, TpSplit::kColumn});
    l.tensors.push_back({"wv", kv, h, TpSplit::kColumn});
  }
  l.tensors.push_back({"wo", h, q, TpSplit::kRow});
  if (s.attn_bias) {
    l.tensors.push_back({"bq", q, 1, TpSplit::kColumn});
    l.tensors.push_back({"bk", kv, 1, TpSplit::kColumn});
    l.tensors.push_back({"bv", kv, 1, TpSplit::kColumn});
    if (!s.qkv_bias_only) l.tensors.push_back({"bo", h, 1, TpSplit::kReplicated});
  }
  // gpt-oss attention sinks: one learned logit per head (GptOssAttention.sinks), split with the heads by TP.
  if (s.attn_sinks) l.tensors.push_back({"sinks", s.heads, 1, TpSplit::kColumn});
  // q/k norms: one head_dim weight each (Qwen3, Gemma 3), or over the whole projection (OLMo 2: TP would
  // split them with the projection; they are tiny and kept replicated).
  double qk_norm_elems = 0;  // elements of q and k that pass through a norm
  if (s.qk_norm == QkNormKind::kHead) {
    l.tensors.push_back({"q_norm", d, 1, TpSplit::kReplicated});
    l.tensors.push_back({"k_norm", d, 1, TpSplit::kReplicated});
    qk_norm_elems = static_cast<double>(q + kv);
  } else if (s.qk_norm == QkNormKind::kFull) {
    l.tensors.push_back({"q_norm", q, 1, TpSplit::kReplicated});
    l.tensors.push_back({"k_norm", kv, 1, TpSplit::kReplicated});
    qk_norm_elems = static_cast<double>(q + kv);
  }
  if (s.fused_qkv)
    l.gemms = {{q + 2 * kv, h, 1, TpSplit::kColumn}, {h, q, 1, TpSplit::kRow}};
  else
    l.gemms = {{q, h, 1, TpSplit::kColumn},
               {kv, h, 1, TpSplit::kColumn},
               {kv, h, 1, TpSplit::kColumn},
               {h, q, 1, TpSplit::kRow}};
  l.attn_heads = s.heads;
  l.attn_kv_heads = s.kv_heads;
  l.attn_head_dim = d;
  // Rotary on q and k (read + write), residual add (read 2 x 2h, write 2h); fused q/k norms read and write
  // them.
  l.elementwise_bytes_per_token = (s.positions == PositionKind::kRotary ? 4.0 * (q + kv) : 0.0) +
                                  6.0 * static_cast<double>(h) + 4.0 * qk_norm_elems;
  // Eager rotary on complex fp32 views: float() 6, complex multiply 12, back to bf16 6 bytes per element of
  // q, k; eager fp32 norms 42 bytes per element (make_norm).
  l.eager_elementwise_bytes_per_token = (s.positions == PositionKind::kRotary ? 24.0 * (q + kv) : 0.0) +
                                        6.0 * static_cast<double>(h) + 42.0 * qk_norm_elems;
  attention_activations(s, l);
  add_tp_gathered_input(l);
  return l;
}

}  // namespace shardplan::detail
