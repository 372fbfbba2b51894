// The routing tensors of a mixture-of-experts layer (layer_builders.hpp): what torchtitan 0.3.0's MoE
// (models/common/moe.py MoE.forward, TokenChoiceTopKRouter; models/common/token_dispatcher.py
// LocalTokenDispatcher) allocates between the router and the combined output, with what autograd and
// inductor save, and the routing's memory-bound traffic summed over the same tensors. Checked on the real
// module with CPU tensors (tools/reference/moe_tensors.py: every saved tensor by saved_tensors_hooks, every
// allocation by a dispatch mode; docs/model.md "Routing tensors").
#include <string>

#include "simulator/model/layer_builders.hpp"

namespace shardplan::detail {

namespace {

ActTensor& routing(Layer& l, const char* name, double per_token, ActDtype dtype, bool routed) {
  // Per-token tensors of the router and dispatcher: on this rank's tokens, as the router's scores
  // (ActSplit::kMoeTokens); `routed`: one row per (token, chosen expert), T x top_k rows.
  ActTensor& a = add_activation(l, name, per_token, ActSplit::kMoeTokens, dtype);
  a.expert = routed;
  return a;
}

/// An expert-side tensor (ActTensor::expert_rows): under EP one row per row this rank's experts receive.
ActTensor& received(const ModelSpec& s, ActTensor& a) {
  a.expert_rows = s.moe.top_k;
  a.expert_count = s.moe.experts;
  return a;
}

ActTensor& grouped(ActTensor& a) {
  a.only = ActOnly::kMoeGrouped;
  return a;
}
ActTensor& loop(ActTensor& a) {
  a.only = ActOnly::kMoeLoop;
  return a;
}
ActTensor& only(ActTensor& a, ActOnly o) {
  a.only = o;
  return a;
}

double bytes_of(const Layer& l, const char* name) {
  for (const ActTensor& a : l.activations)
    if (a.name == name) return a.per_token * act_dtype_bytes(a.dtype, 2.0);
  return 0;
}

}  // namespace

void moe_dispatch_activations(const ModelSpec& s, Layer& l) {
  const double k = s.moe.top_k, h = static_cast<double>(s.hidden);
  // TokenChoiceTopKRouter.forward: torch.topk's expert ids (int64), which scores.gather(index=...) saves;
  // topk is on torchtitan's op-level SAC save list (distributed/activation_checkpoint.py
  // _get_default_save_ops), so SAC keeps it. Hugging Face's router: topk's backward saves them as well.
  // Under save_on_cpu torchtitan's ids are packed twice (topk's backward saves its indices, derivatives.yaml
  // topk; the gather saves them as its index), Hugging Face's once (topk's); one entry per router.
  for (const ActOnly impl : {ActOnly::kMoeGrouped, ActOnly::kMoeHfRouter}) {
    ActTensor& ids = routing(l, "router.topk_ids", k, ActDtype::kInt64, false);
    ids.sac = ActSac::kSave;
    ids.only = impl;
    ids.packs = static_cast<std::int8_t>(impl == ActOnly::kMoeGrouped ? 2 : 1);
  }
  // --moe-impl grouped. MoE.forward: routing_map = zeros_like(scores, dtype=bool).scatter_(...), summed per
  // expert; a local of the forward, saved by nothing.
  ActTensor& map = grouped(routing(l, "routing_map", s.moe.experts, ActDtype::kBool, false));
  map.eager = map.compiled = false;
  // LocalTokenDispatcher._local_reorder: argsort of the flattened ids (int64, T·top_k; the scores' index
  // saves it), the scores in that order (fp32: the router's autocast-to-fp32 gate, softmax or sigmoid; the
  // combine's multiply saves them), the token of each row (`// top_k`, int64; the gather of the input and
  // the combine's scatter_add save it), and the routed input x[token] (T·top_k rows of h, compute dtype; the
  // grouped GEMMs save it). The argsort result dies once the token indices replace it.
  // transformers 5.23 grouped_mm_experts_forward (integrations/moe.py) reorders the same way, saving the same
  // tensors: `expert_ids_g, perm = torch.sort(expert_ids)` (perm: sample_weights[perm] saves it),
  // `sample_weights_g = sample_weights[perm]` (the router's top-k weights in that order: the multiply by the
  // experts' output saves them; fp32 from Mixtral's and DeepSeek-V3's routers, Qwen3-MoE's router casts them
  // to the logits' dtype, 2 B per routed row less), `hidden_states[perm // num_top_k]` (the token of each
  // row, saved by the gather, and the gathered rows, saved by the one grouped GEMM of the packed
  // gate_up_proj).
  only(routing(l, "dispatch.sort_idx", k, ActDtype::kInt64, true), ActOnly::kMoeSorted);
  only(routing(l, "dispatch.scores_sorted", k, ActDtype::kFp32, true), ActOnly::kMoeSorted);
  only(routing(l, "dispatch.token_idx", k, ActDtype::kInt64, true), ActOnly::kMoeSorted);
  // Under EP the grouped GEMMs save the received rows after _permute (routed_input_RD[permuted_indices],
  // R rows: the expert side), not the T·top_k rows gathered here, which the dispatch all-to-all consumes.
  // The grouped GEMMs reading the routed input save it each (torch 2.15 derivatives.yaml _grouped_mm: mat2's
  // gradient reads self): w1 and w3 of a SwiGLU expert, a fused gate_up or a GELU expert's fc1 once;
  // save_on_cpu packs it that often.
  const auto column_linears = static_cast<std::int8_t>(s.mlp != MlpKind::kGelu && !s.fused_gate_up ? 2 : 1);
  received(s, only(routing(l, "dispatch.routed_input", k * h, ActDtype::kCompute, true), ActOnly::kMoeSorted))
      .packs = column_linears;
  // Under expert parallelism (AllToAllTokenDispatcher, token_dispatcher.py): _permute reorders the received
  // rows from rank-major to expert-major with routed_input_RD[permuted_indices, :], whose index (int64, one
  // per received row) autograd saves, as _unpermute's index_put does (tools/reference/moe_ep.py over gloo:
  // 8 B per received row, the only tensor beyond the list at world 2 and 4).
  ActTensor& permuted = received(s, routing(l, "dispatch.ep_permuted_indices", k, ActDtype::kInt64, true));
  permuted.only = ActOnly::kMoeEp;
  permuted.packs = 2;  // the _permute gather's index and _unpermute's index_put's
  // --moe-impl loop (transformers MixtralSparseMoeBlock: the reference lane's SparseMoe, tools/reference/
  // run.py): the top-k weights renormalised (`/ sum`, fp32; the division saves both), the (token, slot)
  // pairs in expert order (int64), then per expert its token indices (int64; the gather and index_add_
  // save them) and its gathered input (the expert's linears save it). One expert's tensors at a time: where
  // a regime does not save them they are gone before the next expert's (ActLife::kAtOnce).
  // The renormalisation is transformers' TopKRouter's (MixtralTopKRouter.forward: `router_top_value /=
  // router_top_value.sum(...)`, the in-place division's clone and the sum saved), the same in
  // transformers 5.23 whatever its experts implementation (tools/reference/hf_moe_gloo.py: [T, 2] and [T, 1]
  // fp32 per layer).
  only(routing(l, "loop.topk_weights", k, ActDtype::kFp32, false), ActOnly::kMoeHfRouter);
  only(routing(l, "loop.weight_sum", 1, ActDtype::kFp32, false), ActOnly::kMoeHfRouter);
  loop(routing(l, "loop.order", k, ActDtype::kInt64, true));
  // Under save_on_cpu the token indices are packed by the gather and by index_add_, the gathered input by
  // the expert's column linears (the reference lane's SparseMoe under saved_tensors_hooks: 2 and 2).
  ActTensor& loop_idx = loop(routing(l, "loop.token_idx", k, ActDtype::kInt64, true));
  loop_idx.life = ActLife::kAtOnce;
  loop_idx.packs = 2;
  // transformers 5.23's eager loop (modeling_mixtral.py MixtralExperts.forward) gathers the same rows per
  // expert (`hidden_states[token_idx]`, saved by its F.linear over the packed gate_up_proj[e]); its
  // `top_k_pos, token_idx = torch.where(expert_mask[e])` are two views of one nonzero() result, [C, 2] int64,
  // which the gathers save (16 B per routed row).
  ActTensor& loop_in =
      only(routing(l, "loop.routed_input", k * h, ActDtype::kCompute, true), ActOnly::kMoeExpertLoop);
  loop_in.life = ActLife::kAtOnce;
  loop_in.packs = column_linears;
  ActTensor& where = only(routing(l, "hf_eager.where", 2 * k, ActDtype::kInt64, true), ActOnly::kMoeHfEager);
  where.life = ActLife::kAtOnce;
  where.packs = 2;
}

namespace {

/// transformers 5.23 grouped_mm_experts_forward's combine (integrations/moe.py): `proj_out *
/// sample_weights_g.unsqueeze(-1)` saves the down projection's grouped GEMM output (R rows of h, compute
/// dtype: where torchtitan's combine saves an fp32 copy) and the sorted weights (dispatch.scores_sorted);
/// `weighted_out[inv_perm]` saves inv_perm (int64, one per row: `torch.empty_like(perm)`). The product is
/// fp32 with Mixtral's fp32 router weights (bf16 x fp32 promotes), as is its un-permuted copy, then
/// `.view(T, top_k, h).sum(dim=1)` (fp32, T x h) and `.to(hidden_states.dtype)` (the layer's output): none
/// saved, each freed once the next exists. grouped_mm's offsets (int32 [E], saved) have no per-token size:
/// E·4 bytes per layer, left out.
void hf_grouped_mm_combine(const ModelSpec& s, Layer& l) {
  const double k = s.moe.top_k, h = static_cast<double>(s.hidden);
  received(s,
           only(routing(l, "experts.w_down.out", k * h, ActDtype::kCompute, true), ActOnly::kMoeHfGroupedMm));
  only(routing(l, "hf.inv_perm", k, ActDtype::kInt64, true), ActOnly::kMoeHfGroupedMm);
  for (const char* name : {"hf.weighted", "hf.unpermuted"}) {
    ActTensor& a = only(routing(l, name, k * h, ActDtype::kFp32, true), ActOnly::kMoeHfGroupedMm);
    a.eager = a.compiled = false;
  }
  ActTensor& sum = only(routing(l, "hf.sum", h, ActDtype::kFp32, false), ActOnly::kMoeHfGroupedMm);
  sum.eager = sum.compiled = false;
}

}  // namespace

void moe_combine_activations(const ModelSpec& s, Layer& l) {
  const double k = s.moe.top_k, h = static_cast<double>(s.hidden);
  // --moe-impl grouped. GroupedExperts.forward's last grouped GEMM: T·top_k rows of h (`.type_as(x)`, no
  // copy), held by RoutedExperts.forward until it returns. Eager autograd does not save it; inductor saves
  // it (and recomputes the fp32 copy below from it).
  // Under EP it is routed_output_RD, the received rows (the expert side), until _unpermute's index_put and
  // the return all-to-all bring the rows back to the token side (token_dispatcher.py
  // AllToAllTokenDispatcher.combine): the combine's tensors below are on this rank's T·top_k rows.
  received(s, grouped(routing(l, "experts.w_down.out", k * h, ActDtype::kCompute, true))).eager = false;
  // LocalTokenDispatcher.combine: out_TD = zeros_like(x) (h per token), then
  // (routed_output.to(float32) * scores).to(bf16): the fp32 copy (saved by the multiply, eager), the fp32
  // product and its cast; deterministic_scatter_add (torchtitan ops/scatter_add.py) writes the combined
  // output, the layer's "w_down.out", and saves only the token indices.
  ActTensor& zeros = grouped(routing(l, "combine.zeros", h, ActDtype::kCompute, false));
  zeros.eager = zeros.compiled = false;
  grouped(routing(l, "combine.float", k * h, ActDtype::kFp32, true)).compiled = false;
  ActTensor& prod = grouped(routing(l, "combine.mul", k * h, ActDtype::kFp32, true));
  prod.eager = prod.compiled = false;
  ActTensor& cast = grouped(routing(l, "combine.cast", k * h, ActDtype::kCompute, true));
  cast.eager = cast.compiled = false;
  // --moe-impl loop: per expert its down projection's output (the multiply by its tokens' weights saves it
  // and the gathered weights) and the product, index_add_-ed into the zeroed output in place; index_add_'s
  // backward (torch 2.15 derivatives.yaml: `source: grad.index_select(dim, index).expand_as(source)`) saves
  // the product too.
  // deterministic_scatter_add's setup_context saves its index, token_idx.reshape(-1, 1).expand(-1, h)
  // (token_dispatcher.py combine; ops/scatter_add.py): a view with no storage of its own, which save_on_cpu
  // packs at its shape, h int64 per routed row (tools/reference/moe_tensors.py's module under
  // saved_tensors_hooks: 8·top_k·h bytes per token beside the indices' own 8·top_k).
  ActTensor& index = grouped(routing(l, "combine.scatter_index", k * h, ActDtype::kInt64, true));
  unsaved(index, ActLife::kUntracked).pack_only = true;
  // transformers 5.23's eager loop saves the same three per expert, its gathered weights
  // (`top_k_weights[token_idx, top_k_pos, None]`) in the router's dtype (fp32 from Mixtral's router: the
  // product is fp32 then, `.to(final_hidden_states.dtype)` the saved copy in the compute dtype).
  only(routing(l, "loop.expert_out", k * h, ActDtype::kCompute, true), ActOnly::kMoeExpertLoop).life =
      ActLife::kAtOnce;
  loop(routing(l, "loop.weights", k, ActDtype::kCompute, true)).life = ActLife::kAtOnce;
  only(routing(l, "hf_eager.weights", k, ActDtype::kFp32, true), ActOnly::kMoeHfEager).life =
      ActLife::kAtOnce;
  only(routing(l, "loop.product", k * h, ActDtype::kCompute, true), ActOnly::kMoeExpertLoop).life =
      ActLife::kAtOnce;
  hf_grouped_mm_combine(s, l);
  deepspeed_combine_activations(s, l);
}

void moe_combine_lifetimes(Layer& l, const std::string& output) {
  // Where a regime does not save them: the argsort result dies once the token indices replace it, the fp32
  // copy once the product exists, the product once the cast exists, the zeros once the scatter_add's output
  // (the layer's combined output) exists; the cast with combine's return (kLayer, the default).
  dies_after(l, "dispatch.sort_idx", "dispatch.token_idx");
  dies_after(l, "combine.float", "combine.mul");
  dies_after(l, "combine.mul", "combine.cast");
  dies_after(l, "combine.zeros", output);
  dies_after(l, "hf.weighted", "hf.unpermuted");
  dies_after(l, "hf.unpermuted", "hf.sum");
  dies_after(l, "hf.sum", output);
  deepspeed_combine_lifetimes(l, output);
}

MoeRoutingBytes moe_routing_bytes(const Layer& l) {
  // Per token, 16-bit compute, over the grouped implementation's tensors above (each read as its consumers
  // read it; the layer's one figure whatever --moe-impl):
  // gather x[token] (read and write the routed input); eager: .to(float32) (read the experts' output, write
  // the copy), the multiply (read the copy and the scores, write the product), .to(bf16) (read the product,
  // write the cast), zeros_like (write), scatter_add (read the cast and the zeros, write the output).
  // Compiled: inductor fuses cast, multiply and cast into one pass (read the output and the scores, write
  // the cast) and the zeros into the scatter.
  const double ri = bytes_of(l, "dispatch.routed_input"), wd = bytes_of(l, "experts.w_down.out"),
               sc = bytes_of(l, "dispatch.scores_sorted"), cf = bytes_of(l, "combine.float"),
               cm = bytes_of(l, "combine.mul"), cc = bytes_of(l, "combine.cast"),
               z = bytes_of(l, "combine.zeros");
  const double o = z;  // the combined output: T x h in the compute dtype, as the zeros
  // The router (TokenChoiceTopKRouter.forward, MoE.forward), on the token side, eager and compiled alike
  // (topk is an aten kernel under inductor too): softmax / sigmoid reads the gate's fp32 logits (as large as
  // its output, router.probs) and writes the probabilities; a routing bias ("router_bias": DeepSeek-V3's
  // expert_bias_E added to the scores, gpt-oss's router linear bias) adds a pass over E fp32 scores;
  // torch.topk reads them and writes the top-k values (fp32, as the sorted scores) and ids; gather reads the
  // ids and the chosen scores and writes them; the routing map is zeros_like (write), scatter_ (read the ids,
  // write) and its per-expert sum (read). route_norm / route_scale over K fp32 values per token are left out
  // (4K-byte passes beside the E- and K·h-sized ones).
  const double pr = bytes_of(l, "router.probs"), ids = bytes_of(l, "router.topk_ids"),
               map = bytes_of(l, "routing_map");
  bool bias = false;
  for (const Tensor& t : l.tensors) bias = bias || t.name == "router_bias";
  const double router = 2 * pr + (bias ? 2 * pr : 0.0) + (pr + sc + ids) + (ids + 2 * sc) + (3 * map + ids);
  MoeRoutingBytes b;
  b.eager = router + 2 * ri + (wd + cf) + (cf + sc + cm) + (cm + cc) + z + (cc + z + o);
  b.fused = router + 2 * ri + (wd + sc + cc) + (cc + o);
  return b;
}

}  // namespace shardplan::detail
