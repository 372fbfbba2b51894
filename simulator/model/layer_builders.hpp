// The layer builders of ModelGraph::from_spec (internal to simulator/model/): each makes one layer of a
// transformer spec — its parameter tensors, GEMMs, attention core and its list of activation tensors
// (activations.hpp), derived from torchtitan 0.3.0's model code and torch 2.15's saved tensors.
#pragma once
#include <initializer_list>
#include <string>

#include "simulator/model/model_graph.hpp"

namespace shardplan::detail {

/// Appends one activation tensor to `l` (saved without AC by eager and compiled autograd until told
/// otherwise) and returns it; the reference is valid until the next append.
ActTensor& add_activation(Layer& l, std::string name, double per_token, ActSplit split,
                          ActDtype dtype = ActDtype::kCompute);
/// Where a regime drops the tensor `name`, it dies once the layer's tensor `consumer` has been made.
void dies_after(Layer& l, const std::string& name, const std::string& consumer);
/// Marks the layer's "input" tensor as its block's input (ActRole::kBlockInput): the checkpoint's one saved
/// tensor under full AC, and the checkpointed function's input, which op-level SAC keeps.
void mark_block_input(Layer& l);
/// Marks the activation `name` as saved only as the input of the layer's linear weights `weights` (those
/// that exist in l.tensors; ActTensor::weight_grad_only).
void weight_grad_input(Layer& l, const std::string& name, std::initializer_list<const char*> weights);
/// The layer's input, made by the previous layer (ActTensor::input).
ActTensor& input(Layer& l, double per_token, ActSplit split);
/// A tensor no regime without AC saves (a GEMM output the next op consumes, a temporary).
ActTensor& unsaved(ActTensor& a, ActLife life);
/// A GEMM's output: call `call` of l.gemms[gemm]; op-level SAC saves it by the block's mm parity
/// (selective_mm_parity), counted at half where the parity is not tracked.
ActTensor& gemm_out(ActTensor& a, std::size_t gemm, int call = 0);

Layer make_norm(const ModelSpec& s, std::string name, int block, LayerKind kind = LayerKind::kNorm);
/// Attention (multi-head, GQA, multi-head latent) of block `block`.
Layer make_attention(const ModelSpec& s, int block);
/// The MLP of block `block`: dense (SwiGLU or GELU) or a mixture of experts.
Layer make_mlp(const ModelSpec& s, int block);
/// A layer whose column-parallel linears read its input (attention without a latent, a dense MLP, the head):
/// adds the all-gathered copy of that input the linears save under torchtitan's TP plan
/// (ActOnly::kTpGathered, whole sequence, recomputed by op-level SAC) and marks the input
/// ActTensor::saved_gathered.
void add_tp_gathered_input(Layer& l);
/// A MoE layer's routing tensors (moe_tensors.cpp): the router's top-k ids and the dispatcher's reordering
/// and routed input, appended after the router's scores; the experts' output and the combine's tensors,
/// appended before the combined output `output`, whose lifetimes moe_combine_lifetimes completes after it.
void moe_dispatch_activations(const ModelSpec& s, Layer& l);
void moe_combine_activations(const ModelSpec& s, Layer& l);
void moe_combine_lifetimes(Layer& l, const std::string& output);
/// The same for --moe-impl deepspeed (moe_tensors_deepspeed.cpp: DeepSpeed 0.19.8's MOELayer and TopKGate).
void deepspeed_dispatch_activations(const ModelSpec& s, Layer& l);
void deepspeed_combine_activations(const ModelSpec& s, Layer& l);
void deepspeed_combine_lifetimes(Layer& l, const std::string& output);
/// The routing's memory-bound traffic per token (16-bit compute) summed over those tensors' writes and
/// reads: op by op (eager) and with inductor's fusions (fused).
struct MoeRoutingBytes {
  double eager = 0, fused = 0;
};
MoeRoutingBytes moe_routing_bytes(const Layer& l);
/// torchtitan's op-level selective AC on a dense attention + MLP pair that makes a checkpointed block: the
/// exact mm parity of its save list.
void selective_mm_parity(Layer& attn, Layer& mlp);

}  // namespace shardplan::detail
