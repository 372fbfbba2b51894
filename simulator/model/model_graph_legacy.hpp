// Internal to simulator/model/model_graph_json*.cpp: the graph JSON of the earlier format (per-token
// saved-byte keys per layer, before the activation lists), read by converting those figures into tensors of
// the same bytes in every regime (model_graph_legacy.cpp).
#pragma once
#include "core/json_reader.hpp"
#include "simulator/model/model_graph.hpp"

namespace shardplan::legacy_graph {

/// The per-token saved-byte figures of the graph JSON before the activation lists (bytes per token at 16-bit
/// compute and TP = 1).
struct LegacyActivations {
  bool any = false;
  double split = 0, rep = 0, sel_split = 0, sel_rep = 0, sdpa_out = 0, sdpa_lse = 0, compiled_fewer = 0,
         unread = 0, fp32_norm = 0, row_output = 0, tp_scatter = 0, eager_transient = 0, eager_output = 0;
};

/// Reads the earlier format's per-token keys of one layer into `g` (g.any when there was one).
void read_legacy(JsonObj& lo, LegacyActivations& g);
/// The activation tensors that carry the earlier figures' bytes.
std::vector<ActTensor> legacy_activations(const LegacyActivations& g);
/// Splits the layer's input out of the replicated figure (split_legacy_input in the .cpp).
void split_legacy_input(Layer& l);
/// Each block's first layer gets a block-input tensor.
void add_legacy_block_inputs(LayerGraph& g, const ModelSpec& s);

}  // namespace shardplan::legacy_graph
