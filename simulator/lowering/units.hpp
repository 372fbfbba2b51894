// Units: the plan's FSDP units (DeepSpeed module groups) and, per unit, what one pass costs — parameter and
// shard sizes as the runtime pads them, GEMM / attention / elementwise time, saved activations per AC mode,
// and the tensor-parallel collectives. Everything the lowering needs about a unit, computed once per plan.
#pragma once
#include <string>
#include <vector>

#include "simulator/cost/cost.hpp"
#include "simulator/model/model.hpp"
#include "simulator/plan/plan.hpp"

namespace shardplan {

struct SimUnit {
  std::vector<const Layer*> layers;
  std::string name;
  bool has_loss = false;
  int blocks = 0;
  std::int64_t elems = 0;  ///< TP-local parameter elements, unpadded
  /// TP-local elements autocast casts to bf16 for the unit's matmuls (DDP under autocast): every weight but
  /// the embeddings' and the norms' (aten::embedding and the norms are not on autocast's lower-precision
  /// list); with tied embeddings the head's linear casts the embedding's V x h weight.
  std::int64_t autocast_copy_elems = 0;
  std::int64_t shard_elems = 0;     ///< local shard, padded as the runtime pads
  std::int64_t gathered_elems = 0;  ///< the all-gather output (shard x group); 0 if this unit gathers nothing
  std::int64_t fp8_gathered_elems = 0;  ///< of which gathered in float8 (1 byte each: --fp8-all-gather)
  bool reshard = true;                  ///< free unsharded parameters after forward
  int gather_owner = -1;          ///< FSDP1 root split in two: the head part uses the embedding's gather
  bool owns_merged_root = false;  ///< FSDP1 root: this (embedding) unit gathers and reduces the head too
  /// FSDP2 tied embeddings: the other unit of the [embedding, norm, output] group (RuntimeTraits::
  /// tied_weight_group). Both gather the whole group; the embedding's forward gather serves the head's
  /// forward.
  int tied_peer = -1;
  /// FSDP2 tied embeddings: the TP-local elements of the tied weight (V x h). Autograd sums the two uses'
  /// gradients in the AccumulateGrad node's input buffer before setting .grad (torch 2.15
  /// torch/csrc/autograd/input_buffer.cpp InputBuffer::add), so the head's gradient of it waits there until
  /// the embedding's backward; the head's post-backward finds no .grad on it and reduces only the norm's
  /// (the reference lane's trace of MPT 7B). Set on both units of the group.
  std::int64_t tied_grad_elems = 0;
  /// Of the group's gathered / shard elements, those whose gradients this unit's post-backward reduces (its
  /// own parameters: the head the norm's, the embedding the tied weight's); -1: all of them.
  std::int64_t reduced_gathered_elems = -1, reduced_shard_elems = -1;
  /// The chunked loss (--loss-impl chunked): the TP-local elements of the output projection, whose
  /// gradient torchtitan's ChunkedLossWrapper has already reduced inside the loss call (the loss layer's
  /// list, chunked_loss_tensors.cpp): the head unit's backward writes no unsharded gradient for them and its
  /// post-backward reduces only the norm's (reduced_gathered_elems / reduced_shard_elems).
  std::int64_t loss_reduced_elems = 0;
  /// LoRA's frozen parameters (docs/model.md "LoRA and QLoRA"): TP-local elements (no unsharded gradient)
  /// and this rank's padded shards, dense and of its experts (not reduce-scattered). 0 under FSDP1, whose
  /// FlatParameter gradient covers them.
  std::int64_t frozen_elems = 0, frozen_shard_elems = 0, frozen_expert_shard_elems = 0;
  /// The weights the unit's ops save for backward, TP-local, this EP rank's experts, in the dtype the forward
  /// reads them (bytes of one forward): every matrix a linear / grouped GEMM multiplies by an input that
  /// requires grad (torch derivatives.yaml `mm`: mat2 is saved for the input's gradient) and the norms'
  /// weights (`_fused_rms_norm`, `native_layer_norm`); not embeddings (`embedding` saves the indices), biases
  /// (their gradient needs none) or a quantised base (bitsandbytes MatMul4Bit / MatMul8bitLt keep theirs in
  /// ctx attributes, not save_for_backward). Autograd holds them by reference, so they cost nothing extra
  /// until a saved-tensor hook copies them: torch's save_on_cpu packs them with the activations.
  Bytes saved_weight_bytes = 0;
  /// The largest of those weights: save_on_cpu unpacks a saved tensor when the backward node reading it runs,
  /// and the copy dies with the node, so the device holds about one unpacked weight at a time.
  Bytes saved_weight_max_bytes = 0;
  /// What torch's save_on_cpu copies of the unit's activations beyond act_bytes (one copy per storage):
  /// a tensor saved by k ops is packed k times (ActTensor::packs: the attention's input by wq, wk and wv,
  /// SDPA's output by wo), and the pack-only tensors (the rotary table, the token ids; layer_repacked_bytes).
  /// Host and PCIe bytes only: on the device the saved variables share one storage. Set only where the plan
  /// offloads with save_on_cpu.
  Bytes repacked_act_bytes = 0;
  /// FSDP2 group of several blocks (fully_shard on a list, --wrap > 1): each block is a unit of its own whose
  /// all-gather brings the whole group; these are the other blocks' gathered / shard elements, and the
  /// group's first unit (-1: not in such a group).
  std::int64_t group_extra_gathered_elems = 0, group_extra_shard_elems = 0, group_extra_fp8_elems = 0;
  int group_first = -1;
  /// Compute of one forward / backward / recomputation, without the TP collectives (seconds).
  double fwd_s = 0, bwd_s = 0, recompute_s = 0;
  /// Compute the step's first micro-batch's forward adds to fwd_s (seconds): Transformer Engine's fp8 weight
  /// casts, made once per step and cached for the later micro-batches (Megatron's is_first_microbatch).
  double fwd_first_mb_s = 0;
  /// Tensor-parallel collectives of one forward and one backward (seconds), and their buffer bytes per
  /// forward.
  double tp_fwd_s = 0, tp_bwd_s = 0;
  double tp_ag_bytes = 0, tp_rs_bytes = 0;  ///< forward all-gathers / reduce-scatters (per forward pass)
  double tp_ag_mirror_bytes = 0;  ///< backward reduce-scatters mirroring the forward all-gathers (16-bit)
  double tp_fwd_ag_s = 0, tp_bwd_ag_s = 0;  ///< the all-gather share of tp_fwd_s / tp_bwd_s
  /// How many all-gathers / reduce-scatters one forward launches (per block one before attention and one
  /// before the MLP, and the reduce-scatters after them; the head all-gathers its input, the embedding
  /// reduce-scatters its output).
  int tp_ag_count = 0, tp_rs_count = 0;
  Bytes act_bytes = 0, recompute_bytes = 0, workspace_bytes = 0;
  /// The backward's workspace when the parameters already hold an accumulated gradient (a pipeline stage's
  /// micro-batches after the first, under no-sync): AccumulateGrad adds each weight gradient into it and
  /// frees it as autograd produces it, so no layer's weight gradients stay through the unit's backward.
  Bytes workspace_accum_bytes = 0;
  double flops_fwd = 0;

  // ---- context parallelism (context_parallel.cpp): the ring attention of one pass ----
  /// Time of the CP collectives of one forward / backward (seconds), the part of it the attention compute
  /// does not hide, the bytes each rank sends, and how many collectives they are.
  double cp_fwd_s = 0, cp_bwd_s = 0, cp_fwd_exposed_s = 0, cp_bwd_exposed_s = 0;
  double cp_fwd_bytes = 0, cp_bwd_bytes = 0;
  int cp_fwd_count = 0, cp_bwd_count = 0;

  // ---- expert parallelism (expert_parallel.cpp) ----
  /// Of elems / shard_elems / gathered_elems: the routed experts this EP rank holds (experts / ep of each MoE
  /// layer), FSDP-sharded over the efsdp ranks instead of the dense fsdp ranks. 0 when ep = 1 (the experts
  /// are then sharded like the dense parameters).
  std::int64_t expert_elems = 0, expert_shard_elems = 0, expert_gathered_elems = 0;
  /// Token dispatch + combine all-to-alls of one pass (two per MoE layer): time (blocking: the experts need
  /// the dispatched tokens), bytes each rank sends, and count.
  double a2a_s = 0, a2a_bytes = 0;
  int a2a_count = 0;
};

/// One pass's tensor-parallel collectives of a unit, as Lowering::tp_collectives issues them: time of the
/// all-gathers and of the reduce-scatters, how many, and their buffer bytes.
struct TpPass {
  double ag_s = 0, rs_s = 0;
  int n_ag = 0, n_rs = 0;
  double ag_bytes = 0, rs_bytes = 0;
};
/// The forward's, or the backward's: it mirrors the forward (each all-gather's gradient is reduce-scattered
/// and each reduce-scatter's all-gathered, in 16 bits), and with `recompute` (full AC recomputing a block)
/// also runs the forward's again.
TpPass tp_pass(const SimUnit& u, bool backward, bool recompute);

/// Partitions the model into units and computes each unit's costs.
void build_units(const ModelGraph& model, const Cluster& cluster, const CostModel& costs, const Plan& p,
                 const RuntimeTraits& rt, std::vector<SimUnit>& units);

}  // namespace shardplan
