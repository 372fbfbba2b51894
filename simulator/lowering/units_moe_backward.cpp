// A MoE layer's backward (docs/model.md "MoE layers' backward"), op by op, for unit_workspace
// (units_workspace.cpp): the worst op's transients beyond the unit's saved tensors and the gradient flowing
// in, for the ways of running the routed experts (Plan::moe_impl): torchtitan's grouped GEMMs and combine
// (`grouped`), transformers 5.23's grouped_mm_experts_forward (`hf-grouped-mm`), transformers 4's loop over
// per-expert Linear layers (`loop`) and transformers 5.23's loop over the 3-D weights (`hf-eager`).
#include <algorithm>

#include "simulator/lowering/units_stages.hpp"

namespace shardplan::detail {

namespace {

/// The routed experts' and shared experts' widths on this rank (column GEMMs' outputs over TP).
struct MoeWidths {
  double f_expert = 0, f_shared = 0;
};

MoeWidths moe_widths(const Layer& l, int t) {
  MoeWidths w;
  for (std::size_t i = 1; i < l.gemms.size(); ++i) {  // gemms[0]: the router
    const Gemm& gm = l.gemms[i];
    if (gm.tp != TpSplit::kColumn) continue;
    (gm.expert ? w.f_expert : w.f_shared) = static_cast<double>(gm.n) / t;
  }
  return w;
}

/// The down projection's share of a routed expert's weights: the row GEMM's (1/3 for SwiGLU, 1/2 for GELU).
double expert_down_share(const Layer& l) {
  double w_all = 0, w_down = 0;
  for (const Gemm& gm : l.gemms) {
    if (!gm.expert) continue;
    const double w = gm.count * static_cast<double>(gm.n) * static_cast<double>(gm.k);
    w_all += w;
    if (gm.tp == TpSplit::kRow) w_down += w;
  }
  return w_all > 0 ? w_down / w_all : 1.0;
}

/// Routed experts one after the other (Hugging Face's MixtralSparseMoeBlock loop over experts, the lane's
/// SparseMoe).
double loop_backward_excess(const UnitContext& c, const Layer& l, const MoeGrads& g, double flowing) {
  const Plan& p = c.p;
  const double T = c.T, bc = c.bc;
  // Autograd walks the experts in reverse, and expert k's backward consumes its saved tensors (C tokens:
  // input, gate and up outputs, SiLU(gate), product, 8f bytes per token at 16 bits) and writes its weight
  // gradients before the next starts. At expert k's SwiGLU backward live are the k - 1 earlier experts'
  // gradients without their saved tensors, its own gradient and its gate/up output gradients (2 C f); linear
  // in k, so the worst is the first or the last expert. Balanced router: C = T top_k / local experts (under
  // EP the rank's experts receive every EP rank's tokens).
  const double local_experts = static_cast<double>(l.moe_experts) / (c.ep ? p.ep : 1);
  const double f_expert = moe_widths(l, c.t).f_expert;
  // At the expert's SwiGLU backward only its down projection's weight gradient exists: autograd runs the
  // down projection's backward (dW_down, dX) before the product's, and the gate's and up's weight gradients
  // come after (the lane's trace of Mixtral 8x7B, full AC, mbs 2 x 8,192: one 112 MiB dW beside the
  // product's two 112 MiB input gradients at the peak).
  const double down_share = expert_down_share(l);
  const double C = moe_expert_rows(c, l) / local_experts;
  // With --moe-impl loop each expert's backward also consumes its routing tensors in the layer's list (its
  // token indices, gathered input, down output, gathered weights and their product: moe_tensors.cpp).
  double loop_routed = 0;  // bytes per token over all experts
  for (const ActTensor& a : l.activations)
    if ((a.only == ActOnly::kMoeLoop || a.only == ActOnly::kMoeExpertLoop) && a.expert && a.eager)
      loop_routed += a.per_token * act_dtype_bytes(a.dtype, bc);
  const double saved_e = C * 8.0 * f_expert * bc / 2.0 + T * loop_routed / local_experts,
               g_e = g.experts / local_experts;
  return (g.all - g.experts) + 2.0 * flowing +
         std::max(down_share * g_e + 2.0 * C * f_expert * bc,
                  (local_experts - 1) * (g_e - saved_e) + down_share * g_e + 2.0 * C * f_expert * bc);
}

/// transformers 5.23's loop over the experts' 3-D parameters (experts_implementation="eager";
/// modeling_mixtral.py MixtralExperts.forward). Each expert's F.linear reads `self.gate_up_proj[e]`, a select
/// of the 3-D parameter, whose backward (torch 2.15 derivatives.yaml select: select_backward) is a
/// zero-filled tensor of the whole parameter's size with expert e's slice written; autograd's input buffer
/// adds each into the running sum out of place (torch/csrc/autograd/input_buffer.cpp accumulate). At expert
/// e's gate_up backward live are the down projection's summed gradient, the gate_up's running sum, its new
/// select_backward and their sum: the layer's routed-expert gradients and two more of gate_up's
/// (tools/reference/ hf_moe_gloo.py --experts-impl eager: two [E, 2F, h] select_backward outputs and an add
/// at the peak), beside the expert's own gate and up output gradients (2 C f). The second expert in backward
/// order is the worst (the most saved tensors still unconsumed, the sums already full-size).
double hf_eager_backward_excess(const UnitContext& c, const Layer& l, const MoeGrads& g, double flowing) {
  const Plan& p = c.p;
  const double local_experts = static_cast<double>(l.moe_experts) / (c.ep ? p.ep : 1);
  const double gate_up = g.experts * (1.0 - expert_down_share(l));
  const double C = moe_expert_rows(c, l) / local_experts;
  return (g.all - g.experts) + 2.0 * flowing + g.experts + 2.0 * gate_up +
         2.0 * C * moe_widths(l, c.t).f_expert * c.bc;
}

/// torchtitan 0.3.0's MoE (models/common/moe.py MoE.forward, RoutedExperts, GroupedExperts;
/// models/common/token_dispatcher.py LocalTokenDispatcher / AllToAllTokenDispatcher; ops/scatter_add.py), and
/// transformers 5.23's grouped_mm_experts_forward (integrations/moe.py; `hf`), whose backward runs the same
/// ops but for its combine and its packed gate_up_proj.
double grouped_backward_excess(const UnitContext& c, const Layer& l, const MoeGrads& g) {
  const double T = c.T, bc = c.bc, h = static_cast<double>(c.s.hidden);
  // The combine's rows: this rank's (token, choice) pairs, on the tokens the MoE code gives the TP rank
  // (moe_token_divisor: all T without EP, T / tp with it).
  const double T_moe = T / moe_token_divisor(c.p), N = T_moe * l.moe_top_k;
  const double R = moe_expert_rows(c, l);
  const MoeWidths w = moe_widths(l, c.t);
  // MoE.forward adds the shared experts' output after the routed experts' (`out + shared_experts(x)`), so
  // autograd runs the shared experts' backward first (higher sequence number): their weight gradients and
  // their input gradient (T x h, waiting in the layer input's buffer for the routed path's) are live through
  // everything below (the lane's trace of deepseek_v3: the shared MLP's three dW and its summed dX before the
  // combine's gather). Its own worst op, an MLP's (dW_down, the product's gradient, then the gate's and up's
  // output gradients: 3 T f_s), is bounded by the weight gradients of the whole shared MLP here.
  const bool shared = g.shared > 0;
  const double shared_held = shared ? g.shared + T * h * bc : 0.0;
  const double shared_op = shared ? g.shared + 3.0 * T * w.f_shared * bc : 0.0;
  // The combine, `(routed_output.to(float32) * scores).to(bf16)` then deterministic_scatter_add: the
  // scatter's backward gathers the output gradient to the N rows (N x h, compute dtype), `.to(bf16)`'s
  // backward casts it to fp32 (N x h x 4) and frees the gather, then the multiply's backward writes the fp32
  // gradient of the fp32 copy (grad x scores) and the product grad x copy, which `sum` reduces to the scores'
  // gradient (N x 1, fp32): three N x h fp32 tensors at once (the lane's trace, torchtitan 0.3.0 on gloo:
  // _to_copy, mul, mul, sum of 32768, 32768, 32768, 512 B at T = 64, top-2, h = 64).
  // transformers' combine, `weighted_out[inv_perm]` of `proj_out * sample_weights_g` then the sum over the
  // top-k: the sum's backward expands the gradient (a view), the index's writes it into zeros (fp32 N x h
  // with Mixtral's fp32 router weights), then the multiply's backward the same two fp32 products and the sum.
  const double combine = shared_held + 3.0 * combine_fp32_bytes(c.p, c.s, l, T) + N * 4.0;
  // Then, after the combine all-to-all's backward and _unpermute's (index), the grouped GEMMs' backward on
  // the R received rows, down, SwiGLU, up, gate, each writing one weight gradient for all local experts at
  // once: at the gate's GEMM backward live are all three dW (the layer's routed-expert gradients), the up
  // GEMM's input gradient, the gate's (R x h each) and SiLU's input gradient (R x f); then the two input
  // gradients' sum and _permute's index backward (new_zeros, index_put: R x h each) beside it (3 R x h);
  // last the dispatch's gather backward: the all-to-all's output (N x h), then new_zeros and index_put
  // (T x h each). By the gate's backward the combine's fp32 copy and sorted scores and the experts' SwiGLU
  // tensors (gate, SiLU, up, product) are consumed and freed, by the sum also the routed input (the lane's
  // trace: freed at _to_copy, mul, mul, sum and between the grouped GEMMs; those the regime saved, in the
  // unit's live set).
  // transformers' packed gate_up_proj is one grouped GEMM: at its backward live are the gate_up output's
  // gradient (R x 2f, the chunk's backward) and its one input gradient (R x h); then the gather's backward
  // (`hidden_states[perm // top_k]`: new_zeros and index_put, T x h each) beside that input gradient.
  const auto [consumed, routed_input] = c.moe_consumed(l);
  const double ops =
      c.p.moe_impl == MoeImpl::kHfGroupedMm
          ? std::max((R * h + 2.0 * R * w.f_expert) * bc, (R * h + 2.0 * T_moe * h) * bc - routed_input)
          : std::max({(2.0 * R * h + R * w.f_expert) * bc, 3.0 * R * h * bc - routed_input,
                      (N * h + 2.0 * T_moe * h) * bc - routed_input});
  const double experts = shared_held + g.experts - consumed + ops;
  // The router's backward comes last (its dW, E x h, and T x h input gradients: below the ops above); its
  // gradient is among the unit's written gradients from the next layer's ops on (unit_workspace).
  return std::max({shared_op, combine, experts});
}

}  // namespace

UnitContext::MoeConsumed UnitContext::moe_consumed(const Layer& l) const {
  // Once per distinct layer content for this plan (LayerMemo): every identical MoE block of every unit
  // walks the same list (the name comparisons were 2 % of a Qwen3-235B-A22B search).
  MoeConsumed& m = memo(l).moe_consumed;
  if (m.consumed >= 0) return m;
  m = MoeConsumed{};
  for (const ActTensor& a : l.activations) {
    const bool swiglu = a.expert && a.split == ActSplit::kTp;
    const bool combine_saved = a.name == "combine.float" || a.name == "dispatch.scores_sorted" ||
                               a.name == "hf.inv_perm" ||
                               (a.name == "experts.w_down.out" && a.only == ActOnly::kMoeHfGroupedMm);
    const bool input = a.name == "dispatch.routed_input";
    if (!swiglu && !combine_saved && !input) continue;
    const double b = act_saved_share(a, p, false) * act_bytes_per_token(a, p, T) * T;
    (input ? m.routed_input : m.consumed) += b;
  }
  return m;
}

double combine_fp32_bytes(const Plan& p, const ModelSpec& s, const Layer& l, double T) {
  // One fp32 N x h tensor of the combine's backward, N = T·top_k rows (the token side: after the combine
  // all-to-all, every row this rank's tokens chose), T the rank's tokens of the MoE (moe_token_divisor);
  // transformers' grouped_mm combine likewise (fp32 with Mixtral's and DeepSeek-V3's fp32 router weights;
  // Qwen3-MoE's bf16 weights halve it, not modelled).
  if ((p.moe_impl != MoeImpl::kGrouped && p.moe_impl != MoeImpl::kHfGroupedMm) || l.kind != LayerKind::kMoe ||
      l.moe_experts <= 0 || l.moe_top_k <= 0)
    return 0;
  return T / moe_token_divisor(p) * l.moe_top_k * static_cast<double>(s.hidden) * 4.0;
}

double moe_backward_excess(const UnitContext& c, const Layer& l, const MoeGrads& g, double flowing) {
  switch (c.p.moe_impl) {
    case MoeImpl::kLoop:
      return loop_backward_excess(c, l, g, flowing);
    case MoeImpl::kHfEager:
      return hf_eager_backward_excess(c, l, g, flowing);
    case MoeImpl::kGrouped:
    case MoeImpl::kHfGroupedMm:
    case MoeImpl::kDeepSpeed:  // its experts' own backward; the combine's index_select backward is a scatter
      break;
  }
  return grouped_backward_excess(c, l, g);
}

}  // namespace shardplan::detail
