// The graph JSON of the earlier format (model_graph_legacy.hpp): its per-token saved-byte figures as tensors.
#include "simulator/model/model_graph_legacy.hpp"

#include <boost/graph/topological_sort.hpp>
#include <map>

#include "simulator/model/layer_builders.hpp"

namespace shardplan::legacy_graph {

void read_legacy(JsonObj& lo, LegacyActivations& g) {
  for (const char* k :
       {"act_split_bytes_per_token", "act_replicated_bytes_per_token", "act_selective_split_bytes_per_token",
        "act_selective_replicated_bytes_per_token", "act_compiled_fewer_split_bytes_per_token",
        "act_selective_unread_replicated_bytes_per_token", "act_fp32_norm_bytes_per_token",
        "act_selective_row_output_bytes_per_token", "act_selective_tp_scatter_bytes_per_token",
        "act_eager_transient_split_bytes_per_token", "act_eager_output_bytes_per_token"})
    g.any = g.any || lo.has(k);
  g.split = lo.number("act_split_bytes_per_token", 0.0, 0.0, 1e12);
  g.rep = lo.number("act_replicated_bytes_per_token", 0.0, 0.0, 1e12);
  g.sel_split = lo.number("act_selective_split_bytes_per_token", g.split, 0.0, 1e12);
  g.sel_rep = lo.number("act_selective_replicated_bytes_per_token", g.rep, 0.0, 1e12);
  // What compile saves fewer cannot exceed what the layer saves.
  g.compiled_fewer = lo.number("act_compiled_fewer_split_bytes_per_token", 0.0, 0.0, g.split);
  g.unread = lo.number("act_selective_unread_replicated_bytes_per_token", 0.0, 0.0, g.sel_rep);
  g.fp32_norm = lo.number("act_fp32_norm_bytes_per_token", 0.0, 0.0, 1e12);
  // Saved row-parallel outputs are part of the selective replicated figure.
  g.row_output = lo.number("act_selective_row_output_bytes_per_token", 0.0, 0.0, g.sel_rep);
  g.tp_scatter = lo.number("act_selective_tp_scatter_bytes_per_token", 0.0, 0.0, 1e12);
  g.eager_transient = lo.number("act_eager_transient_split_bytes_per_token", 0.0, 0.0, 1e12);
  g.eager_output = lo.number("act_eager_output_bytes_per_token", 0.0, 0.0, 1e12);
}

/// The earlier per-token figures as tensors that add up to them in every regime: no AC eager (split + the
/// fp32 norm's copy with --fp32-norm), compiled (split less what compile saves fewer), op-level SAC (the
/// selective figures, the row-parallel outputs undivided by TP, the reduce-scatter outputs with TP > 1; under
/// compile less the unread outputs and the reduce-scatter outputs), the SDPA kernel's outputs by backend and
/// save list, the eager forward's transients and pre-residual output. The 16-bit bytes become elements of the
/// compute dtype (fp32 for the log-sum-exp and the norm's copy).
std::vector<ActTensor> legacy_activations(const LegacyActivations& g) {
  Layer l;
  auto add = [&](const char* name, double bytes, ActSplit split, bool eager, bool compiled, ActSac sac,
                 ActDtype dtype = ActDtype::kCompute) -> ActTensor* {
    if (bytes <= 0) return nullptr;
    ActTensor& a = detail::add_activation(l, name, bytes / act_dtype_bytes(dtype, 2.0), split, dtype);
    a.eager = eager;
    a.compiled = compiled;
    a.sac = sac;
    return &a;
  };
  const double base = g.sdpa_out + g.sdpa_lse;
  if (ActTensor* a = add("sdpa.out", g.sdpa_out, ActSplit::kTp, true, true, ActSac::kSave))
    a->role = ActRole::kSdpaOut;
  if (ActTensor* a = add("sdpa.lse", g.sdpa_lse, ActSplit::kTp, true, true, ActSac::kSave, ActDtype::kFp32))
    a->role = ActRole::kSdpaLse;
  const double eager = std::max(0.0, g.split - base),
               compiled = std::max(0.0, g.split - g.compiled_fewer - base),
               sel = std::max(0.0, g.sel_split - base), common = std::min(compiled, sel);
  add("legacy.split", common, ActSplit::kTp, true, true, ActSac::kSave);
  add("legacy.split.no_ac", compiled - common, ActSplit::kTp, true, true, ActSac::kRecompute);
  // (Saved by op-level SAC only: not lowered as a tensor the other regimes make and drop.)
  if (ActTensor* a = add("legacy.split.selective", sel - common, ActSplit::kTp, false, false, ActSac::kSave))
    a->life = ActLife::kUntracked;
  add("legacy.split.eager", eager - compiled, ActSplit::kTp, true, false, ActSac::kRecompute);
  add("legacy.replicated", g.rep, ActSplit::kSequence, true, true, ActSac::kRecompute);
  if (ActTensor* a = add("legacy.fp32_norm", g.fp32_norm, ActSplit::kSequence, true, false,
                         ActSac::kRecompute, ActDtype::kFp32))
    a->only = ActOnly::kFp32Norm;
  // The selective replicated figure: the saved row-parallel outputs (never divided; the unread part first),
  // the rest sequence-split.
  const double row_unread = std::min(g.unread, g.row_output), rest_unread = g.unread - row_unread;
  const double rest = std::max(0.0, g.sel_rep - g.row_output - rest_unread);
  if (ActTensor* a =
          add("legacy.replicated.selective", rest, ActSplit::kSequence, false, false, ActSac::kSave))
    a->life = ActLife::kUntracked;
  if (ActTensor* a = add("legacy.replicated.selective.unread", rest_unread, ActSplit::kSequence, false, false,
                         ActSac::kSave)) {
    a->sac_compiled_unread = true;
    a->life = ActLife::kUntracked;
  }
  // A saved row-parallel output is also the layer's output before the residual add (not a temporary where
  // the policy saves it).
  for (const bool unread : {false, true})
    if (ActTensor* a = add(unread ? "legacy.row_output.unread" : "legacy.row_output",
                           unread ? row_unread : g.row_output - row_unread, ActSplit::kNone, false, false,
                           ActSac::kSave)) {
      a->sac_compiled_unread = unread;
      a->life = ActLife::kOutput;
    }
  if (ActTensor* a =
          add("legacy.tp_scatter", g.tp_scatter, ActSplit::kSequence, false, false, ActSac::kSave)) {
    a->sac_compiled_unread = true;
    a->only = ActOnly::kTp;
    a->life = ActLife::kUntracked;
  }
  if (ActTensor* a =
          add("legacy.eager_transient", g.eager_transient, ActSplit::kTp, false, false, ActSac::kRecompute))
    a->life = ActLife::kTransient;
  if (ActTensor* a = add("legacy.eager_output", std::max(0.0, g.eager_output - g.row_output), ActSplit::kNone,
                         false, false, ActSac::kRecompute))
    a->life = ActLife::kOutput;
  return std::move(l.activations);
}

/// The earlier format's replicated figure holds the input that an attention's, a dense MLP's or the head's
/// column-parallel linears save (its width in 16-bit elements per token): split out as the layer's "input",
/// so that a TP plan which saves it all-gathered does so here too (add_tp_gathered_input).
void split_legacy_input(Layer& l) {
  if (l.kind != LayerKind::kAttention && l.kind != LayerKind::kMlp && l.kind != LayerKind::kLmHead) return;
  ActTensor* rep = nullptr;
  for (ActTensor& a : l.activations)
    if (a.name == "legacy.replicated") rep = &a;
  for (const Gemm& g : l.gemms) {
    const double width = static_cast<double>(g.k);
    if (g.tp != TpSplit::kColumn || !rep || rep->per_token < width) continue;
    rep->per_token -= width;
    detail::add_activation(l, "input", width, ActSplit::kSequence);  // lowered where legacy.replicated was
    detail::add_tp_gathered_input(l);
    return;
  }
}

/// A graph of the earlier format has no block-input tensor (its selective figures include the checkpoint's
/// input): each block's first layer gets one, hidden per token, kept by full AC alone.
void add_legacy_block_inputs(LayerGraph& g, const ModelSpec& s) {
  std::vector<LayerGraph::vertex_descriptor> topo;
  boost::topological_sort(g, std::back_inserter(topo));
  std::map<int, LayerGraph::vertex_descriptor> first;
  std::map<int, bool> has;
  for (auto it = topo.rbegin(); it != topo.rend(); ++it) {
    const Layer& l = g[*it];
    if (l.block < 0) continue;
    first.emplace(l.block, *it);
    for (const ActTensor& a : l.activations) has[l.block] = has[l.block] || a.role == ActRole::kBlockInput;
  }
  for (const auto& [block, v] : first) {
    if (has[block]) continue;
    ActTensor& a = detail::add_activation(g[v], "legacy.block_input", static_cast<double>(s.hidden),
                                          ActSplit::kSequence);
    a.eager = a.compiled = false;
    a.role = ActRole::kBlockInput;
  }
}

}  // namespace shardplan::legacy_graph
