// Per-layer memory for a plan: a tensor's TP-local shape and shard as each runtime pads it, the activations a
// layer saves for backward (no AC, selective, full) and its backward's transient excess.
#pragma once
#include <cstdint>

#include "simulator/model/model.hpp"
#include "simulator/plan/plan.hpp"

namespace shardplan {

/// What TP divides the h-sized (sequence-parallel) activations by: tp with TP where the runtime runs sequence
/// parallelism (torchtitan, FSDP1 with DTensor TP, Megatron), 1 without TP or without sequence parallelism
/// (DeepSpeed AutoTP; capabilities.hpp tp_sequence_parallel).
double sequence_parallel_divisor(const Plan& p);
/// The TP ranks a MoE layer's token side (router, dispatch, combine: ActSplit::kMoeTokens) is split over:
/// torchtitan's MoE splits its tokens over TP only under EP, Megatron-core as its sequence parallelism.
double moe_token_divisor(const Plan& p);
/// The TP-local shape of a tensor: column-parallel tensors split dim 0, row-parallel ones dim 1.
std::int64_t tp_local_rows(const Tensor& t, int tp);
std::int64_t tp_local_cols(const Tensor& t, int tp);
/// TP-local elements of a tensor (every slice of a grouped expert weight).
std::int64_t tp_local_elems(const Tensor& t, int tp);
/// Elements of this rank's shard of one tensor under per-tensor padding (FSDP2: dim 0; DeepSpeed: numel).
/// FSDP1 pads the unit's flat parameter instead: use ceil_div(sum of local elements, F). A grouped expert
/// weight counts `stack` of its slices (t.stack by default; expert parallelism: the rank's t.stack / ep).
std::int64_t tensor_shard_elems(const Tensor& t, int tp, int shard_group, Padding padding,
                                std::int64_t stack = 0);
/// This rank's elements of `count` identical tensors: TP-local (rank_local_elems) and its shard over
/// `shard_group` ranks (rank_shard_elems). An expert tensor under expert parallelism (ep > 1) counts the
/// rank's experts only: a grouped weight its stack / ep slices, per-expert tensors count / ep of them.
std::int64_t rank_local_elems(const Tensor& t, std::int64_t count, int tp, int ep);
std::int64_t rank_shard_elems(const Tensor& t, std::int64_t count, int tp, int shard_group, Padding padding,
                              int ep);

/// What plan p's activation checkpointing keeps of one activation tensor for backward, in a layer where
/// op-level selective AC applies (`selective`: a block layer under --ac selective) or where nothing is
/// recomputed: 1 saved, 0 not (recomputed, or not there: a condition of ActTensor::only unmet), 0.5 an mm
/// output whose parity is not tracked (ActSac::kHalf).
double act_saved_share(const ActTensor& a, const Plan& p, bool selective);
/// What the busiest EP rank's rows make of an expert-side tensor (ActTensor::expert_rows) over `tokens`
/// tokens of the layer's input: moe_rows_factor(tokens, expert_rows, expert_count); 1 for token-side
/// tensors. Every byte count of an activation tensor goes through it (act_bytes_per_token,
/// layer_saved_bytes).
double act_rows_scale(const ActTensor& a, const Plan& p, double tokens);
/// What tensor parallelism divides a tensor of that split rule by under plan p.
double act_split_divisor(ActSplit split, const Plan& p);
/// Bytes of one activation tensor per token of this rank under plan p, the rank holding `tokens` tokens of
/// the layer's input: its dtype (the compute dtype's bytes, or fixed), divided as its split rule says, the
/// memory-efficient SDPA log-sum-exp's padding of the queries, an expert-side tensor's rows on the busiest EP
/// rank (act_rows_scale).
double act_bytes_per_token(const ActTensor& a, const Plan& p, double tokens);
/// Whether the tensor exists on the device at all under plan p (ActTensor::only; not a pack-only tensor).
bool act_exists(const ActTensor& a, const Plan& p);
/// Whether plan p meets the tensor's condition (ActTensor::only), pack-only tensors included.
bool act_condition(const ActTensor& a, const Plan& p);
/// Activation bytes one layer saves for backward over `tokens` tokens, with nothing recomputed or under
/// selective (op-level) recomputation: the sum over its tensor list of what the regime keeps, plus a
/// materialised attention core's score tensors without recomputation. Full AC keeps only the block input
/// (block_input_bytes).
double layer_saved_bytes(const Layer& l, const Plan& p, double tokens, bool selective);
/// What torch's save_on_cpu copies to the host of one layer's activations (no recomputation) beyond
/// layer_saved_bytes's one copy per storage: a tensor saved by k ops packed k - 1 more times
/// (ActTensor::packs), and the tensors packed that are no activation on the device (ActTensor::pack_only:
/// the rotary table, one row per sequence position; the token ids; the MoE combine's expanded scatter index).
/// Device memory is unchanged by it.
double layer_repacked_bytes(const Layer& l, const Plan& p, double tokens);
/// The part of layer_saved_bytes on the experts' side of the dispatch (ActTensor::expert_rows): under EP the
/// busiest rank's received rows.
double layer_expert_side_saved_bytes(const Layer& l, const Plan& p, double tokens, bool selective);
/// The transient bytes of one layer's backward at its worst op beyond its saved tensors and the gradient
/// flowing in: for an attention or MLP layer (ending in a row-parallel output projection) the output
/// projection's weight and input gradients and the column projections' output gradients (less the MLP's
/// product, freed by then), or, for an MLP with a single column projection (GELU), up's input gradient if
/// worse; 0 for other layers (docs/model.md "Backward inside a block"). `accumulated`: the parameters hold an
/// accumulated gradient, into which each weight gradient is added and freed as soon as it is written (the
/// output projection's then lives only next to its input gradient, not through the later ops).
double layer_backward_excess_bytes(const Layer& l, const Plan& p, double tokens, bool accumulated = false);
/// What full activation checkpointing keeps of a layer: its block's input (the ActRole::kBlockInput tensor,
/// hidden x tokens in the compute dtype) if it is the block's first layer, else 0.
double block_input_bytes(const Layer& l, const Plan& p, double tokens);

}  // namespace shardplan
