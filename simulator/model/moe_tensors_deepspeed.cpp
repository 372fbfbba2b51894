// The routing tensors of DeepSpeed 0.19.8's DeepSpeed-MoE layer (--moe-impl deepspeed; deepspeed/moe/layer.py
// MoE -> deepspeed/moe/sharded_moe.py TopKGate, MOELayer; deepspeed/moe/experts.py Experts): the gate's fp32
// tensors on the rank's tokens, the fixed-size [E, C, M] dispatch buffer on E x C capacity rows (every expert
// padded to its capacity C, moe_busiest_rows), the combine's [k, S, M] rows. Line numbers are
// sharded_moe.py's unless named. The experts' own SwiGLU / GELU tensors are the layer's routed-expert entries
// (mlp_builders.cpp), on the same E x C rows. Checked against the real layer's saved tensors on CPU
// (tools/reference/deepspeed_moe_capacity.py --saved; docs/model.md "MoE implementations").
#include "simulator/model/layer_builders.hpp"

namespace shardplan::detail {

namespace {

ActTensor& ds(Layer& l, const char* name, double per_token, ActDtype dtype, bool routed) {
  // On this rank's tokens (as the router's scores: ActSplit::kSequence); `routed`: a MoE routing tensor.
  ActTensor& a = add_activation(l, name, per_token, ActSplit::kSequence, dtype);
  a.expert = routed;
  a.only = ActOnly::kMoeDeepSpeed;
  return a;
}

/// A tensor of E x C capacity rows: listed at top_k rows per token on the expert side, which
/// moe_busiest_rows scales to E x C (deepspeed_expert_capacity) under this implementation.
ActTensor& capacity_rows(const ModelSpec& s, ActTensor& a) {
  a.expert = true;
  a.expert_rows = s.moe.top_k;
  a.expert_count = s.moe.experts;
  return a;
}

ActTensor& not_saved(ActTensor& a) {
  a.eager = a.compiled = false;
  return a;
}

/// The gate's masks and normalisation, which differ with k (TopKGate.forward lines 574-590 picks
/// top1gating, top2gating or topkgating); measured on the real gate (the reference tool's --saved).
void gate_masks(const ModelSpec& s, Layer& l) {
  const double e = s.moe.experts, k = s.moe.top_k;
  if (k == 1) {
    // top1gating: mask1 = F.one_hot(indices1_s) (line 238, int64 [S, E]), saved by the multiplies of the
    // capacity and gate normalisation that read it.
    ds(l, "ds.top1_mask", e, ActDtype::kInt64, false);
    return;
  }
  if (k == 2) {
    // top2gating: the einsums "se,se->s" save mask1.float() and mask2.float() (lines 384-387, fp32 [S, E]
    // each); gates1_s, gates2_s, the clamped denominator and its sum (lines 386-392: four fp32 [S]) are saved
    // by the in-place divisions and the stack. logits.masked_fill(mask1.bool(), -inf) (line 344) saves its
    // bool mask, but its output feeds only argmax: the node, and the mask, die at once (not listed).
    ds(l, "ds.top2_mask_float", 2 * e, ActDtype::kFp32, false);
    ds(l, "ds.top2_gates_s", 4, ActDtype::kFp32, false);
    return;
  }
  // topkgating: torch.topk's indices (line 433, int64 [S, k]: topk and the gathers of lines 492-495 save
  // them); the kept mask (line 456, bool [S, E]); gates * mask and its normalisation (lines 479-482: two
  // fp32 [S, E], two fp32 [S, 1]). The topk over the capacity dimension (line 454) saves its int64 [C, E]
  // indices, but only the mask reads its result: its node dies at once (not listed).
  ds(l, "ds.topk_idx", k, ActDtype::kInt64, false);
  ds(l, "ds.topk_mask", e, ActDtype::kBool, false);
  ds(l, "ds.topk_gates_masked", 2 * e, ActDtype::kFp32, false);
  ds(l, "ds.topk_gates_s", 2, ActDtype::kFp32, false);
}

}  // namespace

void deepspeed_dispatch_activations(const ModelSpec& s, Layer& l) {
  const double k = s.moe.top_k, h = static_cast<double>(s.hidden);
  // TopKGate.forward (lines 568-572): input.float() (fp32 [S, M]), saved by F.linear for wg's gradient; wg's
  // own fp32 copy (`self.wg.weight.float()`, [E, M]: no per-token size, E x M x 4 bytes per layer) is left
  // out. The softmax's fp32 gates [S, E] (line 331 / 429), saved by the softmax and the gate's multiplies.
  ds(l, "ds.gate_input_fp32", h, ActDtype::kFp32, false);
  ds(l, "ds.gates", s.moe.experts, ActDtype::kFp32, false);
  gate_masks(s, l);
  // _sparse_encode (lines 188-201): `source` (int64, E x C + 1 slots: the pad slot left out) of which
  // index_select saves the view source[:-1]; the [E, C, M] buffer it gathers (compute dtype), which the
  // experts' first linears save (Experts.forward chunks it per expert, experts.py line 29). Under ep_size > 1
  // _AllToAll.apply (line 701) replaces it by the received buffer of the same E x C rows, which the experts
  // save instead.
  capacity_rows(s, ds(l, "ds.slot_source", k, ActDtype::kInt64, false));
  const auto column_linears = static_cast<std::int8_t>(s.mlp != MlpKind::kGelu && !s.fused_gate_up ? 2 : 1);
  capacity_rows(s, ds(l, "ds.dispatched_input", k * h, ActDtype::kCompute, false)).packs = column_linears;
}

void deepspeed_combine_activations(const ModelSpec& s, Layer& l) {
  const double k = s.moe.top_k, h = static_cast<double>(s.hidden);
  // Experts.forward's torch.cat of the experts' outputs (experts.py line 38: [ep, E / ep, C, M]) and
  // _sparse_decode's padded copy (line 207, torch.cat with a zero row): neither saved (cat's backward keeps
  // only sizes).
  not_saved(capacity_rows(s, ds(l, "ds.expert_output", k * h, ActDtype::kCompute, false)));
  not_saved(capacity_rows(s, ds(l, "ds.padded_output", k * h, ActDtype::kCompute, false)));
  // _sparse_decode (lines 204-213): index_select(0, slots) saves the slots (int64, k x S: _route_slots line
  // 185's torch.where) and writes the [k, S, M] rows; `routed * gates.unsqueeze(-1)` saves both (the rows,
  // and the gates stacked to fp32 [k, S] by _stack_routes / torch.stack); the product is fp32 (bf16 x
  // fp32), as is its sum over the k routes: neither saved; `.to(expert_output.dtype)` is the layer's output.
  ds(l, "ds.slots", k, ActDtype::kInt64, true);
  ds(l, "ds.routed", k * h, ActDtype::kCompute, true);
  ds(l, "ds.route_gates", k, ActDtype::kFp32, true);
  not_saved(ds(l, "ds.weighted", k * h, ActDtype::kFp32, true));
  not_saved(ds(l, "ds.sum", h, ActDtype::kFp32, false));
}

void deepspeed_combine_lifetimes(Layer& l, const std::string& output) {
  // Where nothing saves them: the experts' concatenated output once its padded copy exists, that once the
  // routed rows are gathered, the fp32 product once its sum exists, the sum once the output exists.
  dies_after(l, "ds.expert_output", "ds.padded_output");
  dies_after(l, "ds.padded_output", "ds.routed");
  dies_after(l, "ds.weighted", "ds.sum");
  dies_after(l, "ds.sum", output);
}

}  // namespace shardplan::detail
