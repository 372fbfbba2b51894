// Builds ModelGraph from a transformer spec or from graph JSON. Activation accounting follows mechanics.md
// §2.2 (flash attention, no dropout): attention saves its input, Q, K, V, O and an fp32 log-sum-exp; SwiGLU
// saves its input, gate and up outputs, SiLU(gate) and the product; norms save their input.
#include "simulator/model/model_graph.hpp"

#include <algorithm>
#include <boost/graph/topological_sort.hpp>

#include "core/checked.hpp"

namespace shardplan {

const char* to_string(LayerKind k) {
  switch (k) {
    case LayerKind::kEmbedding:
      return "embedding";
    case LayerKind::kPositionEmbedding:
      return "position_embedding";
    case LayerKind::kNorm:
      return "norm";
    case LayerKind::kAttention:
      return "attention";
    case LayerKind::kMlp:
      return "mlp";
    case LayerKind::kMoe:
      return "moe";
    case LayerKind::kFinalNorm:
      return "final_norm";
    case LayerKind::kLmHead:
      return "lm_head";
    case LayerKind::kLoss:
      return "loss";
  }
  return "?";
}

double Layer::active_parameters() const {
  double dense = 0, routed = 0;
  for (const auto& t : tensors) (t.expert ? routed : dense) += static_cast<double>(t.numel());
  return moe_experts > 0 ? dense + routed * moe_top_k / moe_experts : dense + routed;
}

double Layer::attended_positions(std::int64_t seq) const {
  const double s = static_cast<double>(seq), w = static_cast<double>(attn_window);
  if (attn_window <= 0 || attn_window >= seq) return (s + 1) / 2;  // causal: position i sees i + 1 keys
  if (attn_chunked) {
    // Position i sees (i mod w) + 1 keys: full chunks of w and a remainder r.
    const double chunks = static_cast<double>(seq / attn_window), r = static_cast<double>(seq % attn_window);
    return (chunks * w * (w + 1) / 2 + r * (r + 1) / 2) / s;
  }
  // Sliding window: position i sees min(w, i + 1) keys, the window counting the query's own position.
  return (w * (w + 1) / 2 + (s - w) * w) / s;
}

std::int64_t Layer::parameters() const {
  std::int64_t n = 0;
  for (const auto& t : tensors)
    n = add_checked(n, mul_checked(t.stack, mul_checked(t.dim0, t.dim1, "tensor size"), "tensor size"),
                    "layer parameters");
  return n;
}

namespace {

Layer make_norm(const ModelSpec& s, std::string name, int block, LayerKind kind = LayerKind::kNorm) {
  Layer l;
  l.name = std::move(name);
  l.kind = kind;
  l.block = block;
  l.tensors.push_back({"weight", s.hidden, 1, TpSplit::kReplicated});
  if (s.norm_bias) l.tensors.push_back({"bias", s.hidden, 1, TpSplit::kReplicated});
  const double h = static_cast<double>(s.hidden);
  l.act_replicated_bytes_per_token = 2 * h + 4;  // bf16 input + fp32 rstd
  // Under op-level selective checkpointing norms are recomputed; the block's first norm holds the checkpoint
  // input (set by the builder).
  l.act_selective_replicated_bytes_per_token = 0;
  // torchtitan's RMSNorm before 3b39d7ab0 (2025-03-19; torchtrain/models/llama/model.py at 83c879f18):
  // `self._norm(x.float()).type_as(x) * self.weight`, _norm = x * rsqrt(x.pow(2).mean(-1) + eps). Eager
  // autograd saves the fp32 x (pow and mul), rsqrt's fp32 output, and the bf16 normalised tensor (the
  // multiply by the weight) instead of the fused kernel's bf16 input: 4h more (tools/reference/
  // saved_per_block.py: 45.59 h vs 37.59 h per Llama block, two norms, h = 256 and 384).
  if (s.norm == NormKind::kRmsNorm) l.act_fp32_norm_bytes_per_token = 4 * h;
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
  // Saved: the input x 2h; the low-rank side, replicated under TP (not divided by sequence parallelism
  // either: counted with the h-sized part, a small error): q latent 2rq + fp32 rstd 4 (norm input) and normed
  // 2rq (q_b input), kv_a output 2(rkv + dr) (latent norm and rotary inputs) + rstd 4 and normed latent 2rkv
  // (kv_b input). Per head (TP-split): Q 2·a·dqk, K 2·a·dqk, V 2·a·dv, O 2·a·dv (o_proj input), LSE 4a.
  const double low_rank = (rq > 0 ? 4.0 * RQ + 4.0 : 0.0) + 2.0 * static_cast<double>(kv_a) + 4.0 + 2.0 * RKV;
  l.act_replicated_bytes_per_token = 2.0 * H + low_rank;
  l.act_split_bytes_per_token = 4.0 * q + 4.0 * o + 4.0 * a;
  // Selective (torchtitan's op-level policy): O and LSE kept, every second matmul output.
  l.act_selective_replicated_bytes_per_token = 0.5 * (2.0 * H + 2.0 * RQ + 2.0 * static_cast<double>(kv_a));
  l.act_selective_split_bytes_per_token = 2.0 * o + 4.0 * a + 0.5 * (2.0 * q + 2.0 * kv_b);
  l.sdpa_out_bytes_per_token = 2.0 * o;
  l.sdpa_lse_bytes_per_token = 4.0 * a;
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
  // Saved: input of the QKV projections (2h, replicated under TP), Q 2q, K and V 2kv each, O 2q (o-proj
  // input), log-sum-exp fp32 per head (4a).
  l.act_replicated_bytes_per_token = 2.0 * h;
  l.act_split_bytes_per_token = 2.0 * q + 4.0 * kv + 2.0 * q + 4.0 * s.heads;
  // q/k norms save their input (the projection outputs, 2 bytes each) and an fp32 rstd per head (q and k).
  if (qk_norm_elems > 0) l.act_split_bytes_per_token += 2.0 * qk_norm_elems + 4.0 * (s.heads + s.kv_heads);
  // Op-level selective checkpointing (torchtitan's policy): attention outputs (O, LSE) are saved, and every
  // second matmul output: half of q, k, v and of the output projection's 2h.
  l.act_selective_replicated_bytes_per_token = 0.5 * 2.0 * h;
  l.act_selective_split_bytes_per_token = 2.0 * q + 4.0 * s.heads + 0.5 * (2.0 * q + 4.0 * kv);
  l.sdpa_out_bytes_per_token = 2.0 * q;
  l.sdpa_lse_bytes_per_token = 4.0 * s.heads;
  // Rotary on q and k (read + write), residual add (read 2 x 2h, write 2h); fused q/k norms read and write
  // them.
  l.elementwise_bytes_per_token = (s.positions == PositionKind::kRotary ? 4.0 * (q + kv) : 0.0) +
                                  6.0 * static_cast<double>(h) + 4.0 * qk_norm_elems;
  // Eager rotary on complex fp32 views: float() 6, complex multiply 12, back to bf16 6 bytes per element of
  // q, k; eager fp32 norms 42 bytes per element (make_norm).
  l.eager_elementwise_bytes_per_token = (s.positions == PositionKind::kRotary ? 24.0 * (q + kv) : 0.0) +
                                        6.0 * static_cast<double>(h) + 42.0 * qk_norm_elems;
  // Eager forward transients (reference-lane trace of a Llama 3 8B block, torchtitan 0.3.0 models/common/
  // rope.py apply_rotary_emb): wq's and wk's bf16 outputs (2 bytes per element of q and k), xq.float() and
  // xk.float() (4), the complex products xq_ * freqs_cis (4) are alive when type_as writes the rotated bf16 q
  // and k (saved) and die when the function returns: 10 bytes per element of q and k. A fused qkv
  // projection's output stays alive through the saved V view: only the fp32 copies and the products (8). The
  // output projection's output (2h) dies after the residual add.
  if (s.positions == PositionKind::kRotary)
    l.act_eager_transient_split_bytes_per_token = (s.fused_qkv ? 8.0 : 10.0) * static_cast<double>(q + kv);
  l.act_eager_output_bytes_per_token = 2.0 * static_cast<double>(h);
  return l;
}

void add_mlp_tensors(const ModelSpec& s, Layer& l, const std::string& prefix, std::int64_t f) {
  const std::int64_t h = s.hidden;
  if (s.mlp != MlpKind::kGelu) {
    if (s.fused_gate_up) {
      l.tensors.push_back({prefix + "w_gate_up", 2 * f, h, TpSplit::kColumn});  // Phi-3 gate_up_proj
    } else {
      l.tensors.push_back({prefix + "w_gate", f, h, TpSplit::kColumn});
      l.tensors.push_back({prefix + "w_up", f, h, TpSplit::kColumn});
    }
    l.tensors.push_back({prefix + "w_down", h, f, TpSplit::kRow});
    if (s.mlp_bias) {
      if (s.fused_gate_up) {
        l.tensors.push_back({prefix + "b_gate_up", 2 * f, 1, TpSplit::kColumn});  // gpt-oss gate_up_proj_bias
      } else {
        l.tensors.push_back({prefix + "b_gate", f, 1, TpSplit::kColumn});
        l.tensors.push_back({prefix + "b_up", f, 1, TpSplit::kColumn});
      }
      l.tensors.push_back({prefix + "b_down", h, 1, TpSplit::kReplicated});
    }
  } else {
    l.tensors.push_back({prefix + "w_fc1", f, h, TpSplit::kColumn});
    l.tensors.push_back({prefix + "w_fc2", h, f, TpSplit::kRow});
    if (s.mlp_bias) {
      l.tensors.push_back({prefix + "b_fc1", f, 1, TpSplit::kColumn});
      l.tensors.push_back({prefix + "b_fc2", h, 1, TpSplit::kReplicated});
    }
  }
}

// A dense MLP, or a mixture of experts: router (+ routing bias), `experts` routed MLPs of which each token
// uses top_k, and the shared experts (one fused MLP of shared_experts·width, as HF DeepseekV3MoE and
// Llama4TextMoe hold them) that every token uses.
Layer make_mlp(const ModelSpec& s, int block) {
  Layer l;
  l.block = block;
  const std::int64_t h = s.hidden;
  const bool moe = s.moe.is_moe_block(block);
  const std::int64_t f = moe ? s.moe.expert_ffn(s.ffn_hidden) : s.ffn_hidden;
  const std::int64_t fs =
      moe ? s.moe.shared_experts * (s.moe.shared_ffn_hidden > 0 ? s.moe.shared_ffn_hidden : f) : 0;
  l.name = "blocks." + std::to_string(block) + (moe ? ".moe" : ".mlp");
  l.kind = moe ? LayerKind::kMoe : LayerKind::kMlp;
  const int experts = moe ? s.moe.experts : 1;
  const double active = moe ? s.moe.top_k : 1;
  std::size_t first_expert = 0;
  if (moe) {
    l.tensors.push_back({"router", s.moe.experts, h, TpSplit::kReplicated});
    if (s.moe.router_bias) l.tensors.push_back({"router_bias", s.moe.experts, 1, TpSplit::kReplicated});
    if (fs > 0) add_mlp_tensors(s, l, "shared.", fs);
    l.gemms.push_back({s.moe.experts, h, 1, TpSplit::kReplicated});
    first_expert = l.tensors.size();
  }
  // The routed experts as grouped tensors, one per weight with the experts stacked on dim 0 (torchtitan 0.3.0
  // models/common/moe.py GroupedExperts: w1_EFD, w2_EDF, w3_EFD of [num_experts, ...]), not one per expert.
  add_mlp_tensors(s, l, moe ? "experts." : "", f);
  if (moe) {
    for (std::size_t i = first_expert; i < l.tensors.size(); ++i) {
      l.tensors[i].expert = true;
      l.tensors[i].stack = experts;
    }
    l.moe_experts = s.moe.experts;
    l.moe_top_k = s.moe.top_k;
  }
  // Per token the routed experts' work counts top_k times, the shared experts' once; written as one width
  // fa = top_k·f + fs for the activations and elementwise traffic.
  const double fa = active * static_cast<double>(f) + static_cast<double>(fs);
  if (s.mlp != MlpKind::kGelu) {
    if (fs > 0) {
      l.gemms.push_back({fs, h, 2, TpSplit::kColumn});  // shared gate and up
      l.gemms.push_back({h, fs, 1, TpSplit::kRow});
    }
    l.gemms.push_back({f, h, 2 * active, TpSplit::kColumn, moe});  // gate and up
    l.gemms.push_back({h, f, active, TpSplit::kRow, moe});
    // Saved: input 2h; gate and up outputs 4f; SiLU(gate) 2f; product 2f (down-proj input).
    l.act_replicated_bytes_per_token = 2.0 * h;
    l.act_split_bytes_per_token = 8.0 * fa;
    // Selective: half of the matmul outputs (gate, up: 4f; down: 2h) saved, the rest recomputed.
    l.act_selective_replicated_bytes_per_token = 0.5 * 2.0 * h;
    l.act_selective_split_bytes_per_token = 0.5 * 4.0 * fa;
    // Compiled: inductor's partitioner saves gate, up and the product and recomputes SiLU(gate) in backward
    // (tools/reference/saved_per_block.py, torch 2.15 inductor: 32.22 h vs eager 37.59 h per Llama block at
    // f = 2.6875 h, i.e. 2f fewer; 11296 vs 13344 B/token at h = 384, f = 1024).
    if (!moe) l.act_compiled_fewer_split_bytes_per_token = 2.0 * fa;  // measured on dense blocks only
    l.elementwise_bytes_per_token = 6.0 * fa + 6.0 * h;               // fused silu(gate) * up
    l.eager_elementwise_bytes_per_token = 10.0 * fa + 6.0 * h;        // silu 4f, multiply 6f
  } else {
    if (fs > 0) {
      l.gemms.push_back({fs, h, 1, TpSplit::kColumn});
      l.gemms.push_back({h, fs, 1, TpSplit::kRow});
    }
    l.gemms.push_back({f, h, active, TpSplit::kColumn, moe});
    l.gemms.push_back({h, f, active, TpSplit::kRow, moe});
    // Saved: input 2h; GELU input 2f; GELU output 2f (fc2 input).
    l.act_replicated_bytes_per_token = 2.0 * h;
    l.act_split_bytes_per_token = 4.0 * fa;
    l.act_selective_replicated_bytes_per_token = 0.5 * 2.0 * h;
    l.act_selective_split_bytes_per_token = 0.5 * 2.0 * fa;
    l.elementwise_bytes_per_token = 4.0 * fa + 6.0 * h;
    l.eager_elementwise_bytes_per_token = 4.0 * fa + 6.0 * h;
  }
  if (moe) l.act_replicated_bytes_per_token += 4.0 * s.moe.experts;  // router logits, fp32
  // The down projection's output (2h) dies after the residual add (eager forward transients, as the
  // attention's output projection). A routed MoE writes its experts' outputs into a zeroed buffer instead
  // (index_add_): not modelled.
  if (!moe) l.act_eager_output_bytes_per_token = 2.0 * static_cast<double>(h);
  return l;
}

/// torchtitan's op-level selective checkpointing (torchtitan 0.3.0 distributed/activation_checkpoint.py
/// SelectiveAC: `meta[key] % 2 == 0` -> PREFER_RECOMPUTE) counts the matmuls of one checkpointed block in
/// execution order from 1 and saves the odd ones: for a Llama block wq, wv, w1 (gate) and w2 (down) are
/// saved, wk, wo and w3 (up) recomputed. Sets the matmul outputs of a dense attention + MLP pair exactly (2
/// bytes per output element; column-parallel outputs split by TP, row-parallel ones replicated), keeping the
/// attention's saved output and log-sum-exp.
void selective_mm_parity(const ModelSpec& s, Layer& attn, Layer& mlp) {
  double split = 0, rep = 0, unread = 0, scatter = 0;
  long long calls = 0;
  auto walk = [&](const Layer& l) {
    split = rep = unread = scatter = 0;
    for (std::size_t i = 0; i < l.gemms.size(); ++i) {
      const Gemm& g = l.gemms[i];
      for (int c = 0; c < static_cast<int>(g.count); ++c) {
        // Under TP every row-parallel GEMM's output is reduce-scattered (sequence parallel) and the policy
        // saves the collective's output whatever the GEMM's parity (reduce_scatter_tensor is in _save_list).
        if (g.tp == TpSplit::kRow) scatter += 2.0 * static_cast<double>(g.n);
        if (++calls % 2 == 0) continue;  // recomputed
        (g.tp == TpSplit::kRow ? rep : split) += 2.0 * static_cast<double>(g.n);
        // The layer's last, row-parallel GEMM is its output projection (layer_backward_excess_bytes).
        if (i + 1 == l.gemms.size() && g.tp == TpSplit::kRow) unread += 2.0 * static_cast<double>(g.n);
      }
    }
  };
  const double q = static_cast<double>(s.heads * s.head_dim);
  walk(attn);
  attn.act_selective_split_bytes_per_token = 2.0 * q + 4.0 * static_cast<double>(s.heads) + split;
  attn.act_selective_replicated_bytes_per_token = rep;
  attn.act_selective_unread_replicated_bytes_per_token = unread;
  attn.act_selective_row_output_bytes_per_token = rep;
  attn.act_selective_tp_scatter_bytes_per_token = scatter;
  walk(mlp);
  mlp.act_selective_split_bytes_per_token = split;
  mlp.act_selective_replicated_bytes_per_token = rep;
  mlp.act_selective_row_output_bytes_per_token = rep;
  mlp.act_selective_tp_scatter_bytes_per_token = scatter;
  // Compiled SAC saves only what backward reads: the output projection's output feeds the residual add alone
  // (its backward needs the projection's input), so a saved w2 / wo output is dropped (tools/reference/
  // saved_per_block.py: 13.44 h compiled vs 15.44 h eager per block, the 2h of w2's output).
  mlp.act_selective_unread_replicated_bytes_per_token = unread;
}

}  // namespace

ModelGraph ModelGraph::from_spec(const ModelSpec& s) {
  validate_model_spec(s, s.name);
  ModelGraph m;
  m.spec_ = s;
  auto& g = m.graph_;
  auto add = [&](Layer l) { return boost::add_vertex(std::move(l), g); };

  Layer emb;
  emb.name = "tok_embeddings";
  emb.kind = LayerKind::kEmbedding;
  emb.tensors.push_back({"weight", s.vocab, s.hidden, TpSplit::kColumn});
  emb.elementwise_bytes_per_token = emb.eager_elementwise_bytes_per_token = 2.0 * s.hidden;
  auto prev = add(emb);
  if (s.positions == PositionKind::kLearned) {
    Layer pos;
    pos.name = "pos_embeddings";
    pos.kind = LayerKind::kPositionEmbedding;
    pos.tensors.push_back({"weight", s.max_positions, s.hidden, TpSplit::kReplicated});
    pos.elementwise_bytes_per_token = pos.eager_elementwise_bytes_per_token = 6.0 * s.hidden;
    auto v = add(pos);
    boost::add_edge(prev, v, g);
    prev = v;
  }
  if (s.embedding_norm) {
    auto v = add(make_norm(s, "embedding_norm", -1));
    boost::add_edge(prev, v, g);
    prev = v;
  }
  // One transformer block: norms where the family puts them (pre: Llama; post: OLMo 2; sandwich: Gemma 2/3),
  // after `prologue` layers (the MTP module's input norms and projection). Under selective checkpointing the
  // block's first layer holds the checkpoint input (2h).
  const double ckpt_in = 2.0 * static_cast<double>(s.hidden);
  auto add_block = [&](int b, LayerGraph::vertex_descriptor block_in, std::vector<Layer> prologue) {
    const std::string p = "blocks." + std::to_string(b) + ".";
    for (auto& l : prologue) {
      auto v = add(std::move(l));
      boost::add_edge(block_in, v, g);
      block_in = v;
    }
    const bool first_is_ckpt = prologue.empty();
    if (s.norm_placement == NormPlacement::kPre) {
      Layer first_norm = make_norm(s, p + "attention_norm", b);
      if (first_is_ckpt) first_norm.act_selective_replicated_bytes_per_token = ckpt_in;
      Layer attn = make_attention(s, b), mlp = make_mlp(s, b);
      // Dense Llama-style blocks (separate or fused q/k/v, no latent attention, no experts): the exact
      // matmul parity of the selective policy.
      if (!s.mla.enabled() && mlp.kind == LayerKind::kMlp && first_is_ckpt) selective_mm_parity(s, attn, mlp);
      auto n1 = add(std::move(first_norm));
      auto at = add(std::move(attn));
      auto n2 = add(make_norm(s, p + "ffn_norm", b));
      auto ml = add(std::move(mlp));
      boost::add_edge(block_in, n1, g);
      boost::add_edge(n1, at, g);
      boost::add_edge(block_in, n2, g);  // residual
      boost::add_edge(at, n2, g);
      boost::add_edge(n2, ml, g);
      boost::add_edge(at, ml, g);  // residual
      return ml;
    }
    const bool sandwich = s.norm_placement == NormPlacement::kSandwich;
    std::vector<Layer> ls;
    if (sandwich) ls.push_back(make_norm(s, p + "attention_norm", b));
    ls.push_back(make_attention(s, b));
    ls.push_back(make_norm(s, p + "post_attention_norm", b));
    if (sandwich) ls.push_back(make_norm(s, p + "ffn_norm", b));
    ls.push_back(make_mlp(s, b));
    ls.push_back(make_norm(s, p + "post_ffn_norm", b));
    if (first_is_ckpt) {
      // A leading norm is recomputed (its saved input is the checkpoint); a leading attention keeps its own.
      Layer& f = ls.front();
      f.act_selective_replicated_bytes_per_token =
          f.kind == LayerKind::kNorm ? ckpt_in : f.act_selective_replicated_bytes_per_token + ckpt_in;
    }
    auto v = block_in;
    for (auto& l : ls) {
      auto w = add(std::move(l));
      boost::add_edge(v, w, g);
      v = w;
    }
    return v;
  };
  for (int b = 0; b < s.layers; ++b) prev = add_block(b, prev, {});
  std::vector<LayerGraph::vertex_descriptor> mtp_tails;
  // DeepSeek-V3 multi-token prediction (paper §2.2; HF checkpoint layers 61+): per module, RMSNorm of the
  // main model's hidden state (hnorm) and of the next token's embedding (enorm), eh_proj [h, 2h] on their
  // concatenation, one transformer block, a final norm, and the output head shared with the main model (its
  // logits and loss: the head GEMM and the cross-entropy traffic are counted in the module's projection
  // layer).
  for (int k = 0; k < s.mtp_layers; ++k) {
    const int b = s.layers + k;
    const std::string p = "mtp." + std::to_string(k) + ".";
    std::vector<Layer> prologue;
    prologue.push_back(make_norm(s, p + "enorm", b));
    prologue.push_back(make_norm(s, p + "hnorm", b));
    prologue.front().act_selective_replicated_bytes_per_token = 2.0 * static_cast<double>(s.hidden);
    Layer eh;
    eh.name = p + "eh_proj";
    eh.kind = LayerKind::kMlp;
    eh.block = b;
    eh.tensors.push_back({"weight", s.hidden, 2 * s.hidden, TpSplit::kColumn});
    eh.gemms.push_back({s.hidden, 2 * s.hidden, 1, TpSplit::kColumn});
    eh.act_split_bytes_per_token = 4.0 * static_cast<double>(s.hidden);  // the concatenated input
    eh.act_selective_split_bytes_per_token = eh.act_split_bytes_per_token;
    eh.elementwise_bytes_per_token = eh.eager_elementwise_bytes_per_token =
        8.0 * static_cast<double>(s.hidden);
    prologue.push_back(std::move(eh));
    auto out = add_block(b, prev, std::move(prologue));
    Layer head = make_norm(s, p + "norm", b);
    auto nv = add(std::move(head));
    boost::add_edge(out, nv, g);
    Layer mh;
    mh.name = p + "head";
    mh.kind = LayerKind::kMlp;
    mh.block = b;
    mh.gemms.push_back({s.vocab, s.hidden, 1, TpSplit::kColumn});  // the shared head's weight, no new tensor
    mh.act_replicated_bytes_per_token = mh.act_selective_replicated_bytes_per_token = 2.0 * s.hidden;
    mh.elementwise_bytes_per_token = mh.eager_elementwise_bytes_per_token =
        14.0 * static_cast<double>(s.vocab);
    auto hv = add(std::move(mh));
    boost::add_edge(nv, hv, g);
    mtp_tails.push_back(hv);
    // The next module and the main model's final norm read the main blocks' output: `prev` stays.
  }
  auto fn = add(make_norm(s, "norm", -1, LayerKind::kFinalNorm));
  boost::add_edge(prev, fn, g);
  for (auto t : mtp_tails) boost::add_edge(t, fn, g);  // order: MTP modules run before the main head
  Layer head;
  head.name = "output";
  head.kind = LayerKind::kLmHead;
  if (!s.tied_embeddings) head.tensors.push_back({"weight", s.vocab, s.hidden, TpSplit::kColumn});
  head.gemms.push_back({s.vocab, s.hidden, 1, TpSplit::kColumn});
  head.act_replicated_bytes_per_token = 2.0 * s.hidden;  // head input
  head.act_selective_replicated_bytes_per_token = 2.0 * s.hidden;
  auto hv = add(head);
  boost::add_edge(fn, hv, g);
  Layer loss;
  loss.name = "loss";
  loss.kind = LayerKind::kLoss;
  // fp32 cross-entropy: cast, log-softmax, gather; backward writes an fp32 gradient and casts it (mechanics
  // §2.3).
  loss.elementwise_bytes_per_token = loss.eager_elementwise_bytes_per_token =
      14.0 * static_cast<double>(s.vocab);
  if (s.final_softcap > 0) {
    // Gemma 2 final_logit_softcapping: logits / cap, tanh, * cap on the bf16 logits. Fused: one read and
    // write (4 bytes per logit); eager: three ops, each a read and a write (12).
    loss.elementwise_bytes_per_token += 4.0 * static_cast<double>(s.vocab);
    loss.eager_elementwise_bytes_per_token += 12.0 * static_cast<double>(s.vocab);
  }
  auto lv = add(loss);
  boost::add_edge(hv, lv, g);
  m.finalize();
  return m;
}

void Layer::group_tensors() {
  tensor_groups.clear();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    auto same = [&](const TensorGroup& g) {
      const Tensor& r = tensors[g.index];
      return r.stack == t.stack && r.dim0 == t.dim0 && r.dim1 == t.dim1 && r.tp == t.tp &&
             r.expert == t.expert;
    };
    auto it = std::find_if(tensor_groups.begin(), tensor_groups.end(), same);
    if (it != tensor_groups.end())
      ++it->count;
    else
      tensor_groups.push_back({static_cast<std::uint32_t>(i), 1});
  }
}

void ModelGraph::finalize() {
  for (auto [v, end] = boost::vertices(graph_); v != end; ++v) graph_[*v].group_tensors();
  std::vector<LayerGraph::vertex_descriptor> topo;
  boost::topological_sort(graph_, std::back_inserter(topo));
  order_.clear();
  for (auto it = topo.rbegin(); it != topo.rend(); ++it) order_.push_back(&graph_[*it]);
  parameters_ = embedding_parameters_ = largest_tensor_ = checkpoint_bytes_ = 0;
  active_parameters_ = 0;
  int last_block = -1;
  blocks_ = 0;
  for (const Layer* l : order_) {
    std::int64_t p = l->parameters();
    parameters_ = add_checked(parameters_, p, "model parameters");
    active_parameters_ += l->active_parameters();
    if (l->kind == LayerKind::kEmbedding || l->kind == LayerKind::kPositionEmbedding)
      embedding_parameters_ += p;
    for (const auto& t : l->tensors) {
      largest_tensor_ = std::max(largest_tensor_, t.numel());
      // MXFP4 (transformers integrations/mxfp4.py, the checkpoint's *_blocks and *_scales): each row's input
      // dimension in blocks of 32 values, 16 bytes of 4-bit values and one 8-bit scale per block.
      const bool mxfp4 = spec_.moe.mxfp4_experts && t.expert && t.dim1 > 1;
      const std::int64_t b =
          mxfp4 ? mul_checked(t.stack * t.dim0, ceil_div(t.dim1, 32) * 17, "checkpoint bytes")
                : mul_checked(t.numel(), 2, "checkpoint bytes");
      checkpoint_bytes_ = add_checked(checkpoint_bytes_, b, "checkpoint bytes");
    }
    if (l->block >= 0 && l->block != last_block) ++blocks_, last_block = l->block;
  }
}

ModelGraph ModelGraph::slice(std::size_t first, std::size_t last) const {
  ModelGraph m;
  m.spec_ = spec_;
  LayerGraph::vertex_descriptor prev = 0;
  for (std::size_t i = first; i < last && i < order_.size(); ++i) {
    const auto v = boost::add_vertex(*order_[i], m.graph_);
    if (i > first) boost::add_edge(prev, v, m.graph_);
    prev = v;
  }
  m.finalize();
  return m;
}

double ModelGraph::attention_model_flops_per_token(std::int64_t seq) const {
  double f = 0;
  for (const Layer* l : order_) {
    if (l->attn_heads <= 0) continue;
    const double positions = static_cast<double>(l->attn_window > 0 ? std::min(l->attn_window, seq) : seq);
    f += 6.0 * l->attn_heads * static_cast<double>(l->attn_head_dim + l->v_head_dim()) * positions;
  }
  return f;
}

// --- graph JSON
// ----------------------------------------------------------------------------------------------

static const char* tp_name(TpSplit t) {
  return t == TpSplit::kColumn ? "column" : t == TpSplit::kRow ? "row" : "replicated";
}
static TpSplit parse_tp(const std::string& s, const std::string& file, const std::string& where) {
  if (s == "column") return TpSplit::kColumn;
  if (s == "row") return TpSplit::kRow;
  if (s == "replicated") return TpSplit::kReplicated;
  throw InputError(file, where, "unknown tp split \"" + s + "\"; expected one of: column, row, replicated");
}
static LayerKind parse_kind(const std::string& s, const std::string& file, const std::string& where) {
  for (LayerKind k :
       {LayerKind::kEmbedding, LayerKind::kPositionEmbedding, LayerKind::kNorm, LayerKind::kAttention,
        LayerKind::kMlp, LayerKind::kMoe, LayerKind::kFinalNorm, LayerKind::kLmHead, LayerKind::kLoss})
    if (s == to_string(k)) return k;
  throw InputError(
      file, where,
      "unknown layer kind \"" + s +
          "\"; expected one of: embedding, position_embedding, norm, attention, mlp, moe, final_norm, "
          "lm_head, loss");
}

Json ModelGraph::to_graph_json() const {
  Json layers = Json::array(), edges = Json::array();
  for (auto v : boost::make_iterator_range(boost::vertices(graph_))) {
    const Layer& l = graph_[v];
    Json tensors = Json::array(), gemms = Json::array();
    for (const auto& t : l.tensors) {
      Json jt = {{"name", t.name},
                 {"shape", t.stack > 1 ? Json{t.stack, t.dim0, t.dim1} : Json{t.dim0, t.dim1}},
                 {"tp", tp_name(t.tp)}};
      if (t.expert) jt["expert"] = true;
      tensors.push_back(jt);
    }
    for (const auto& g : l.gemms) {
      Json jg = {{"n", g.n}, {"k", g.k}, {"count", g.count}, {"tp", tp_name(g.tp)}};
      if (g.expert) jg["expert"] = true;
      gemms.push_back(jg);
    }
    Json jl = {{"name", l.name},
               {"kind", to_string(l.kind)},
               {"block", l.block},
               {"tensors", tensors},
               {"gemms", gemms},
               {"act_split_bytes_per_token", l.act_split_bytes_per_token},
               {"act_replicated_bytes_per_token", l.act_replicated_bytes_per_token},
               {"act_selective_split_bytes_per_token", l.act_selective_split_bytes_per_token},
               {"act_selective_replicated_bytes_per_token", l.act_selective_replicated_bytes_per_token},
               {"elementwise_bytes_per_token", l.elementwise_bytes_per_token},
               {"eager_elementwise_bytes_per_token", l.eager_elementwise_bytes_per_token}};
    // The compile / fp32-norm differences only where a layer has them (docs/model.md "Compiled saved
    // tensors").
    if (l.act_compiled_fewer_split_bytes_per_token > 0)
      jl["act_compiled_fewer_split_bytes_per_token"] = l.act_compiled_fewer_split_bytes_per_token;
    if (l.act_selective_unread_replicated_bytes_per_token > 0)
      jl["act_selective_unread_replicated_bytes_per_token"] =
          l.act_selective_unread_replicated_bytes_per_token;
    if (l.act_fp32_norm_bytes_per_token > 0)
      jl["act_fp32_norm_bytes_per_token"] = l.act_fp32_norm_bytes_per_token;
    if (l.act_selective_row_output_bytes_per_token > 0)
      jl["act_selective_row_output_bytes_per_token"] = l.act_selective_row_output_bytes_per_token;
    if (l.act_selective_tp_scatter_bytes_per_token > 0)
      jl["act_selective_tp_scatter_bytes_per_token"] = l.act_selective_tp_scatter_bytes_per_token;
    if (l.act_eager_transient_split_bytes_per_token > 0)
      jl["act_eager_transient_split_bytes_per_token"] = l.act_eager_transient_split_bytes_per_token;
    if (l.act_eager_output_bytes_per_token > 0)
      jl["act_eager_output_bytes_per_token"] = l.act_eager_output_bytes_per_token;
    if (l.moe_experts > 0) jl["moe"] = {{"experts", l.moe_experts}, {"top_k", l.moe_top_k}};
    if (l.attn_heads > 0) {
      jl["attention"] = {
          {"heads", l.attn_heads}, {"kv_heads", l.attn_kv_heads}, {"head_dim", l.attn_head_dim}};
      if (l.attn_v_head_dim > 0) jl["attention"]["v_head_dim"] = l.attn_v_head_dim;
      if (l.attn_window > 0) jl["attention"]["window"] = l.attn_window;
      if (l.attn_chunked) jl["attention"]["chunked"] = true;
      if (l.sdpa_out_bytes_per_token > 0)
        jl["attention"]["sdpa_out_bytes_per_token"] = l.sdpa_out_bytes_per_token;
      if (l.sdpa_lse_bytes_per_token > 0)
        jl["attention"]["sdpa_lse_bytes_per_token"] = l.sdpa_lse_bytes_per_token;
    }
    layers.push_back(jl);
  }
  for (auto e : boost::make_iterator_range(boost::edges(graph_)))
    edges.push_back({boost::source(e, graph_), boost::target(e, graph_)});
  return {{"schema", "shardplan.graph/1"},
          {"spec", model_spec_to_json(spec_)},
          {"layers", layers},
          {"edges", edges}};
}

ModelGraph ModelGraph::from_graph_json(const Json& j, const std::string& file) {
  JsonObj o(j, file);
  std::string schema = o.str("schema");
  if (schema != "shardplan.graph/1") o.fail("schema", "expected \"shardplan.graph/1\"");
  ModelGraph m;
  m.spec_ = parse_model_spec(o.object("spec"));
  const Json& layers = o.raw("layers");
  if (!layers.is_array() || layers.empty()) o.fail("layers", "expected a non-empty array of layers");
  constexpr std::int64_t kMaxDim = std::int64_t{1} << 24;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    JsonObj lo(layers[i], file, "/layers/" + std::to_string(i));
    Layer l;
    l.name = lo.str("name");
    l.kind = parse_kind(lo.str("kind"), file, lo.pointer("kind"));
    l.block = static_cast<int>(lo.integer("block", -1, -1, 1000000));
    if (auto* ts = lo.raw_optional("tensors")) {
      if (!ts->is_array()) lo.fail("tensors", "expected an array");
      for (std::size_t t = 0; t < ts->size(); ++t) {
        JsonObj to((*ts)[t], file, lo.pointer("tensors") + "/" + std::to_string(t));
        Tensor tensor;
        tensor.name = to.str("name");
        const Json& shape = to.raw("shape");
        if (!shape.is_array() || shape.empty() || shape.size() > 3)
          to.fail("shape", "expected [rows], [rows, cols] or, for grouped experts, [experts, rows, cols]");
        // A 3-D shape is a grouped expert weight: its leading dimension stacks the experts.
        const std::size_t d0 = shape.size() == 3 ? 1 : 0;
        if (shape.size() == 3)
          tensor.stack = json_integer(shape[0], file, to.pointer("shape") + "/0", 1, kMaxDim);
        tensor.dim0 =
            json_integer(shape[d0], file, to.pointer("shape") + "/" + std::to_string(d0), 1, kMaxDim * 64);
        tensor.dim1 = shape.size() > d0 + 1
                          ? json_integer(shape[d0 + 1], file,
                                         to.pointer("shape") + "/" + std::to_string(d0 + 1), 1, kMaxDim * 64)
                          : 1;
        tensor.tp = parse_tp(to.str("tp", "replicated"), file, to.pointer("tp"));
        tensor.expert = to.boolean("expert", false);
        if (tensor.stack > 1 && !tensor.expert)
          to.fail("shape", "a 3-D shape stacks experts: it needs \"expert\": true");
        to.finish();
        l.tensors.push_back(tensor);
      }
    }
    if (auto* gs = lo.raw_optional("gemms")) {
      if (!gs->is_array()) lo.fail("gemms", "expected an array");
      for (std::size_t t = 0; t < gs->size(); ++t) {
        JsonObj go((*gs)[t], file, lo.pointer("gemms") + "/" + std::to_string(t));
        Gemm gm;
        gm.n = go.integer("n", 1, kMaxDim * 64);
        gm.k = go.integer("k", 1, kMaxDim * 64);
        gm.count = go.number("count", 1.0, 0.0, 1e6);
        gm.tp = parse_tp(go.str("tp", "replicated"), file, go.pointer("tp"));
        gm.expert = go.boolean("expert", false);
        go.finish();
        l.gemms.push_back(gm);
      }
    }
    if (auto mo = lo.optional_object("moe")) {
      l.moe_experts = static_cast<int>(mo->integer("experts", 1, 1 << 20));
      l.moe_top_k = static_cast<int>(mo->integer("top_k", 1, l.moe_experts));
      mo->finish();
    }
    if (auto ao = lo.optional_object("attention")) {
      l.attn_heads = static_cast<int>(ao->integer("heads", 1, 100000));
      l.attn_kv_heads = static_cast<int>(ao->integer("kv_heads", l.attn_heads, 1, 100000));
      l.attn_head_dim = ao->integer("head_dim", 1, kMaxDim);
      l.attn_v_head_dim = ao->integer("v_head_dim", 0, 0, kMaxDim);
      l.attn_window = ao->integer("window", 0, 0, kMaxDim);
      l.attn_chunked = ao->boolean("chunked", false);
      // The SDPA kernel's saved O and log-sum-exp within the split saved bytes (absent: 0, nothing that
      // the plan's SDPA backend or SAC save list changes).
      l.sdpa_out_bytes_per_token = ao->number("sdpa_out_bytes_per_token", 0.0, 0.0, 1e12);
      l.sdpa_lse_bytes_per_token = ao->number("sdpa_lse_bytes_per_token", 0.0, 0.0, 1e12);
      if (l.attn_chunked && l.attn_window == 0)
        ao->fail("chunked", "chunked attention needs a window (chunk size)");
      ao->finish();
    }
    l.act_split_bytes_per_token = lo.number("act_split_bytes_per_token", 0.0, 0.0, 1e12);
    l.act_replicated_bytes_per_token = lo.number("act_replicated_bytes_per_token", 0.0, 0.0, 1e12);
    l.act_selective_split_bytes_per_token =
        lo.number("act_selective_split_bytes_per_token", l.act_split_bytes_per_token, 0.0, 1e12);
    l.act_selective_replicated_bytes_per_token =
        lo.number("act_selective_replicated_bytes_per_token", l.act_replicated_bytes_per_token, 0.0, 1e12);
    // What compile saves fewer cannot exceed what the layer saves (units.cpp subtracts it).
    l.act_compiled_fewer_split_bytes_per_token =
        lo.number("act_compiled_fewer_split_bytes_per_token", 0.0, 0.0, l.act_split_bytes_per_token);
    l.act_selective_unread_replicated_bytes_per_token =
        lo.number("act_selective_unread_replicated_bytes_per_token", 0.0, 0.0,
                  l.act_selective_replicated_bytes_per_token);
    l.act_fp32_norm_bytes_per_token = lo.number("act_fp32_norm_bytes_per_token", 0.0, 0.0, 1e12);
    // Saved row-parallel outputs are part of the selective replicated figure (units.cpp takes them out of
    // it).
    l.act_selective_row_output_bytes_per_token = lo.number("act_selective_row_output_bytes_per_token", 0.0,
                                                           0.0, l.act_selective_replicated_bytes_per_token);
    l.act_selective_tp_scatter_bytes_per_token =
        lo.number("act_selective_tp_scatter_bytes_per_token", 0.0, 0.0, 1e12);
    l.act_eager_transient_split_bytes_per_token =
        lo.number("act_eager_transient_split_bytes_per_token", 0.0, 0.0, 1e12);
    l.act_eager_output_bytes_per_token = lo.number("act_eager_output_bytes_per_token", 0.0, 0.0, 1e12);
    l.elementwise_bytes_per_token = lo.number("elementwise_bytes_per_token", 0.0, 0.0, 1e12);
    l.eager_elementwise_bytes_per_token =
        lo.number("eager_elementwise_bytes_per_token", l.elementwise_bytes_per_token, 0.0, 1e12);
    lo.finish();
    for (std::size_t t = 0; t < l.tensors.size(); ++t) {
      if (l.moe_experts == 0 && l.tensors[t].expert)
        throw InputError(file, lo.pointer("tensors") + "/" + std::to_string(t) + "/expert",
                         "an expert tensor needs the layer's \"moe\": {\"experts\", \"top_k\"}");
      if (l.tensors[t].stack > 1 && l.tensors[t].stack != l.moe_experts)
        throw InputError(file, lo.pointer("tensors") + "/" + std::to_string(t) + "/shape/0",
                         "a grouped expert weight stacks the layer's " + std::to_string(l.moe_experts) +
                             " experts, not " + std::to_string(l.tensors[t].stack));
    }
    boost::add_vertex(std::move(l), m.graph_);
  }
  const auto n = static_cast<std::int64_t>(layers.size());
  if (auto* es = o.raw_optional("edges")) {
    if (!es->is_array()) o.fail("edges", "expected an array of [from, to] pairs");
    for (std::size_t i = 0; i < es->size(); ++i) {
      const Json& e = (*es)[i];
      std::string where = "/edges/" + std::to_string(i);
      if (!e.is_array() || e.size() != 2) throw InputError(file, where, "expected [from, to]");
      auto a = json_integer(e[0], file, where + "/0", 0, n - 1),
           b = json_integer(e[1], file, where + "/1", 0, n - 1);
      boost::add_edge(static_cast<std::size_t>(a), static_cast<std::size_t>(b), m.graph_);
    }
  }
  o.finish();
  try {
    m.finalize();
  } catch (const boost::not_a_dag&) {
    throw InputError(file, "/edges", "the layer graph has a cycle");
  }
  return m;
}

}  // namespace shardplan
