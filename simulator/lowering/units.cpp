// Unit partition and per-unit costs (docs/model.md "Units"; activations docs/mechanics.md §2.2, float8 casts
// docs/model.md "Float8", tensor parallelism §2.1).
#include "simulator/lowering/units.hpp"

#include <algorithm>
#include <cmath>

#include "core/checked.hpp"
#include "simulator/cost/cost.hpp"
#include "simulator/lowering/units_stages.hpp"
#include "simulator/memory/memory.hpp"
#include "simulator/parallel/parallel.hpp"

namespace shardplan {

using detail::UnitContext;
using detail::UnitSums;

namespace {
void add_cp_cost(SimUnit& u, const CpLayerCost& c) {
  u.cp_fwd_s += c.fwd_s;
  u.cp_bwd_s += c.bwd_s;
  u.cp_fwd_exposed_s += c.fwd_exposed_s;
  u.cp_bwd_exposed_s += c.bwd_exposed_s;
  u.cp_fwd_bytes += c.fwd_bytes;
  u.cp_bwd_bytes += c.bwd_bytes;
  u.cp_fwd_count += c.fwd_count;
  u.cp_bwd_count += c.bwd_count;
}
void add_ep_cost(SimUnit& u, const EpLayerCost& c) {
  u.a2a_s += c.a2a_s;
  u.a2a_bytes += c.a2a_bytes;
  u.a2a_count += c.a2a_count;
}
}  // namespace

TpPass tp_pass(const SimUnit& u, bool backward, bool recompute) {
  TpPass t;
  if (!backward) {
    t.ag_s = u.tp_fwd_ag_s;
    t.rs_s = u.tp_fwd_s - u.tp_fwd_ag_s;
    t.n_ag = u.tp_ag_count;
    t.n_rs = u.tp_rs_count;
    t.ag_bytes = u.tp_ag_bytes;
    t.rs_bytes = u.tp_rs_bytes;
    return t;
  }
  t.ag_s = u.tp_bwd_ag_s + (recompute ? u.tp_fwd_ag_s : 0.0);
  t.rs_s = (u.tp_bwd_s - u.tp_bwd_ag_s) + (recompute ? u.tp_fwd_s - u.tp_fwd_ag_s : 0.0);
  t.n_ag = u.tp_rs_count + (recompute ? u.tp_ag_count : 0);
  t.n_rs = u.tp_ag_count + (recompute ? u.tp_rs_count : 0);
  t.ag_bytes = u.tp_rs_bytes + (recompute ? u.tp_ag_bytes : 0.0);
  t.rs_bytes = u.tp_ag_mirror_bytes + (recompute ? u.tp_rs_bytes : 0.0);
  return t;
}

namespace {

/// Partitions the layers into units: the embedding unit, one unit per `wrap` blocks, and the head unit (from
/// the final norm on). Names are for reports only. Returns whether FSDP2 runs a group of several blocks per
/// module (each block a unit of its own whose gather brings the whole group).
bool partition_units(const UnitContext& c, std::vector<SimUnit>& units) {
  const ModelGraph& model = c.model;
  const Plan& p = c.p;
  const RuntimeTraits& rt = c.rt;
  units.reserve(model.order().size() + 2);
  auto new_unit = [&](std::string name) {
    units.emplace_back();
    units.back().name = std::move(name);
    return &units.back();
  };
  SimUnit* cur = new_unit("embedding");
  int blocks_in_unit = 0;
  // FSDP2 runs the hooks of a group of several modules per module (torch 2.15 _fsdp_state.py: each module of
  // fully_shard([...]) gets the state's pre/post forward and backward hooks; the reference lane's trace of
  // --wrap 2: four all-gathers of a group in one forward and, in backward, a reduce-scatter after each
  // block of the gradients written so far, then the group gathered again for the next block). With
  // resharding after forward each block is then a unit of its own whose gather brings the whole group.
  const bool per_module_groups = rt.head_group_regathered && rt.gathers_params && p.wrap > 1 && p.reshard();
  const int unit_wrap = per_module_groups ? 1 : p.wrap;
  for (const Layer* l : model.order()) {
    if (l->block >= 0) {
      const bool new_block = cur->layers.empty() || cur->layers.back()->block != l->block;
      if (new_block) {
        if ((cur->blocks == 0 && units.size() == 1) || blocks_in_unit == unit_wrap) {
          cur = new_unit("blocks." + std::to_string(l->block));
          blocks_in_unit = 0;
        }
        ++blocks_in_unit;
        cur->blocks++;
        if (cur->blocks > 1)
          cur->name = cur->name.substr(0, cur->name.find('-')) + "-" + std::to_string(l->block);
      }
    } else if (l->kind == LayerKind::kFinalNorm) {
      cur = new_unit("head");
    }
    cur->layers.push_back(l);
    if (l->kind == LayerKind::kLoss) cur->has_loss = true;
  }

  return per_module_groups;
}

/// The unit's saved activations per AC mode (SimUnit::act_bytes, recompute_bytes), and its shard sizes
/// once the layers are summed (FSDP1's flat padding, this EP rank's experts).
void unit_activations(const UnitContext& c, SimUnit& u, UnitSums& m) {
  const Plan& p = c.p;
  const RuntimeTraits& rt = c.rt;
  const int F = c.F, Fe = c.Fe;
  const bool ep = c.ep;
  double &act_full = m.act_full, &block_inputs = m.block_inputs, &act_none = m.act_none, &act_sel = m.act_sel;
  const std::int64_t flat = m.flat, expert_flat = m.expert_flat;
  // Full AC keeps each block's input (layers outside blocks keep what they save without recomputation).
  act_full += block_inputs;
  if (rt.padding == Padding::kFlatUnit) u.shard_elems = ceil_div(flat, F);
  if (ep) {
    // Every expert of a layer has the same tensors and ep divides the expert count (resolve_plan): this
    // rank's experts are exactly 1 / ep of them.
    u.expert_elems /= p.ep;
    if (rt.padding == Padding::kFlatUnit) u.expert_shard_elems = ceil_div(expert_flat / p.ep, Fe);
    u.elems += u.expert_elems;
  }
  switch (p.ac) {
    case AcMode::kNone:
      u.act_bytes = static_cast<Bytes>(act_none);
      break;
    case AcMode::kSelective:
      u.act_bytes = static_cast<Bytes>(u.blocks > 0 ? act_sel : act_none);
      break;
    case AcMode::kFull:
      u.act_bytes = static_cast<Bytes>(u.blocks > 0 ? act_full : act_none);
      // One block at a time: what its recomputed forward saves again; the block's input is the checkpoint's
      // own saved tensor (act_full), which the recomputed first norm saves without a copy.
      u.recompute_bytes =
          u.blocks > 0 ? static_cast<Bytes>(std::max(0.0, act_none / u.blocks - block_inputs / u.blocks)) : 0;
      break;
  }
}

/// Tensor-parallel collectives (sequence parallel): per block an all-gather before and a reduce-scatter
/// after attention and the MLP; the head all-gathers its input, the embedding reduce-scatters its output.
void unit_tp_collectives(UnitContext& c, SimUnit& u, const UnitSums& m) {
  const Plan& p = c.p;
  const auto& s = c.s;
  const int t = c.t;
  const double T = c.T, bc = c.bc;
  const GroupView& tpg = c.tpg;
  CollectiveMemo& coll = c.coll;
  if (t > 1 && c.rt.tp_all_reduce) {
    // DeepSpeed AutoTP (deepspeed 0.19.8 module_inject/layers.py): no sequence parallelism; each block
    // all-reduces the outputs of its two row-parallel projections (LinearAllreduce, RowParallel) in forward
    // and the input gradients of its column-parallel projections (ColumnParallel.backward) in backward,
    // over the full sequence. The embedding's output and the head's input gradient are one all-reduce each.
    // An all-reduce is reported as its reduce-scatter and all-gather halves (the ring's bytes exactly); no
    // sequence-parallel all-gather or reduce-scatter is launched (the counts stay 0).
    const double buf = T * static_cast<double>(s.hidden) * bc;
    const double ar = coll(CollectiveKind::kAllReduce, buf, tpg);
    const int fwd = u.blocks > 0 ? 2 * u.blocks : u.has_loss ? 0 : 1;
    const int bwd = u.blocks > 0 ? 2 * u.blocks : u.has_loss ? 1 : 0;
    u.tp_ag_bytes = u.blocks > 0 || !u.has_loss ? fwd * buf : 0.0;
    u.tp_rs_bytes = std::max(fwd, bwd) * buf;
    u.tp_ag_mirror_bytes = bwd * buf;
    u.tp_fwd_s = fwd * ar;
    u.tp_fwd_ag_s = 0.5 * u.tp_fwd_s;
    u.tp_bwd_s = bwd * ar;
    u.tp_bwd_ag_s = 0.5 * u.tp_bwd_s;
  } else if (t > 1) {
    const double buf = T * static_cast<double>(s.hidden) * bc;
    int ag = 0, rs = 0;
    if (u.blocks > 0)
      ag = rs = 2 * u.blocks;
    else if (u.has_loss)
      ag = 1;
    else
      rs = 1;
    // torchtitan's float8 tensorwise TP plan (Float8ColwiseParallel) casts the block inputs to fp8 before
    // the sequence-parallel all-gather: 1 byte per element. Rowwise keeps the 16-bit TP plan.
    const double ag_buf = u.blocks > 0 && p.fp8 == Fp8::kTensorwise ? buf / bc : buf;
    u.tp_ag_count = ag;
    u.tp_rs_count = rs;
    u.tp_ag_bytes = ag * ag_buf;
    u.tp_ag_mirror_bytes = ag * buf;
    u.tp_rs_bytes = rs * buf;
    u.tp_fwd_ag_s = ag * coll(CollectiveKind::kAllGather, ag_buf, tpg);
    u.tp_fwd_s = u.tp_fwd_ag_s + rs * coll(CollectiveKind::kReduceScatter, buf, tpg);
    // Backward: the mirror of each forward all-gather is a 16-bit reduce-scatter of the input gradient, and
    // of each reduce-scatter a 16-bit all-gather of the output gradient.
    u.tp_bwd_ag_s = rs * coll(CollectiveKind::kAllGather, buf, tpg);
    u.tp_bwd_s = ag * coll(CollectiveKind::kReduceScatter, buf, tpg) + u.tp_bwd_ag_s;
    if (c.rt.tp_backward_overlap && u.blocks > 0) {
      // Megatron-core's column-parallel linears save their input's sequence shard and all-gather it again in
      // backward, asynchronously beside the input-gradient GEMM, then reduce-scatter the input gradient
      // asynchronously beside the weight-gradient GEMM (core_r0.8.0 tensor_parallel/layers.py
      // LinearWithGradAccumulationAndAsyncCommunication.backward: all_gather_into_tensor(async_op=True),
      // handle.wait() after the dgrad GEMM; reduce_scatter_tensor(async_op=True) waited after wgrad;
      // Transformer Engine v1.8 module/linear.py _Linear.backward, "Overlap input AG with dgrad" and
      // "Overlap dgrad-RS/AR with wgrad"). Each stays exposed only beyond its GEMM (the column GEMMs' dgrad
      // and wgrad each cost what their forward does); the row-parallel linears' output-gradient all-gather
      // runs before their dgrad and stays exposed.
      const double regather = ag * coll(CollectiveKind::kAllGather, ag_buf, tpg);
      const double reduce = ag * coll(CollectiveKind::kReduceScatter, buf, tpg);
      u.tp_bwd_ag_s += std::max(0.0, regather - m.column_gemm);
      u.tp_bwd_s = u.tp_bwd_ag_s + std::max(0.0, reduce - m.column_gemm);
    }
  }
}

/// CP and EP collectives, the pass times, and which units gather and reshard after forward.
void unit_times_and_gathers(UnitContext& c, SimUnit& u, const UnitSums& m, std::size_t ui,
                            std::size_t n_units) {
  const Plan& p = c.p;
  const RuntimeTraits& rt = c.rt;
  const auto& s = c.s;
  const CostModel& costs = c.costs;
  const Cluster& cluster = c.cluster;
  const ComputeConstants& K = c.K;
  const int F = c.F, Fe = c.Fe;
  const bool ep = c.ep;
  const double T = c.T;
  const double gemm = m.gemm, attn = m.attn, elem = m.elem, score_fwd = m.score_fwd, score_bwd = m.score_bwd;
  const std::int64_t fp8_shard = m.fp8_shard;
  for (const Layer* l : u.layers) {
    if (p.cp > 1) add_cp_cost(u, context_parallel_layer_cost(*l, cluster, costs, p, T));
    if (ep) add_ep_cost(u, expert_parallel_layer_cost(*l, s, cluster, costs, p, T, moe_expert_rows(c, *l)));
  }
  // A quantised base is dequantised in forward and again in backward (bitsandbytes MatMul4Bit).
  const double cast_fwd = costs.memory_s(m.cast_fwd_bytes + m.dequant_bytes),
               cast_bwd = costs.memory_s(m.cast_bwd_bytes + m.dequant_bytes);
  u.fwd_s = gemm + attn + elem + cast_fwd + score_fwd;
  u.fwd_first_mb_s = costs.memory_s(m.cast_first_mb_bytes);
  // A frozen weight's GEMM computes the input gradient only (LoRA's base): one GEMM in backward, not two.
  u.bwd_s = 2 * gemm - m.frozen_gemm + K.attention_bwd_ratio * attn + 2 * elem + cast_bwd + score_bwd +
            m.moe_select_bwd;
  if (p.ac == AcMode::kFull && u.blocks > 0)
    u.recompute_s = u.fwd_s;
  else if (p.ac == AcMode::kSelective && u.blocks > 0)
    // Half the matmuls, the materialised score tensors, and the attention kernel too when the policy does
    // not save its outputs (cuDNN attention under torchtitan's pre-0.2.1 save list).
    u.recompute_s = 0.5 * (gemm + cast_fwd) + elem + score_fwd + (p.sac_saves_sdpa() ? 0.0 : attn);
  // Which units gather, and whether they reshard after forward.
  u.expert_gathered_elems = rt.gathers_params ? u.expert_shard_elems * Fe : 0;
  u.gathered_elems = rt.gathers_params ? u.shard_elems * F + u.expert_gathered_elems : 0;
  u.shard_elems += u.expert_shard_elems;
  u.fp8_gathered_elems = rt.gathers_params ? fp8_shard * F : 0;
  u.reshard = p.reshard();
  if (rt.head_not_resharded && ui + 1 == n_units && rt.gathers_params) u.reshard = false;  // [norm, output]
  // torchtitan's "default" policy before 83e694105 (2025-07-28): the last block (the unit before the head)
  // is not resharded after forward, since its backward comes first (parallelize_llama.py at 5940ddeb5).
  if (p.keep_last_block && u.blocks > 0 && ui + 2 == n_units) u.reshard = false;
}

/// FSDP2 groups of several blocks run per module (partition_units): groups of `wrap` consecutive block units,
/// each all-gathering the group's parameters.
void link_module_groups(std::vector<SimUnit>& units, const Plan& p) {
  // Groups of `wrap` consecutive block units, each all-gathering the group's parameters.
  for (std::size_t first = 0; first < units.size();) {
    if (units[first].blocks == 0) {
      ++first;
      continue;
    }
    std::size_t end = first;
    std::int64_t g = 0, sh = 0, f8 = 0;
    for (int k = 0; k < p.wrap && end < units.size() && units[end].blocks > 0; ++k, ++end) {
      g += units[end].gathered_elems;
      sh += units[end].shard_elems;
      f8 += units[end].fp8_gathered_elems;
    }
    for (std::size_t k = first; k < end; ++k) {
      SimUnit& m = units[k];
      m.group_extra_gathered_elems = g - m.gathered_elems;
      m.group_extra_shard_elems = sh - m.shard_elems;
      m.group_extra_fp8_elems = f8 - m.fp8_gathered_elems;
      m.group_first = static_cast<int>(first);
    }
    first = end;
  }
}

/// The units outside the blocks that one parameter group spans: FSDP1's (and FSDP2's embedding-head) root,
/// FSDP2's tied embeddings.
void share_root_or_tied_group(const UnitContext& c, std::vector<SimUnit>& units) {
  const Plan& p = c.p;
  const RuntimeTraits& rt = c.rt;
  const auto& s = c.s;
  const int t = c.t, F = c.F;
  if (rt.root_gathered_through_step && rt.gathers_params && units.size() >= 2) {
    // FSDP1 root: embedding and head are one FlatParameter, gathered at the start of forward and kept until
    // the end of backward (docs/mechanics.md §1.9). FSDP2 with --root-params embedding-head: the root
    // fully_shard(model) owns them as one parameter group with the same life (docs/model.md "FSDP2's root
    // unit").
    SimUnit& emb = units.front();
    SimUnit& head = units.back();
    emb.shard_elems = rt.padding == Padding::kFlatUnit ? ceil_div(emb.elems + head.elems, F)
                                                       : emb.shard_elems + head.shard_elems;
    emb.gathered_elems = emb.shard_elems * F;
    emb.owns_merged_root = true;
    head.shard_elems = 0;
    head.gathered_elems = 0;
    head.gather_owner = 0;
    emb.reshard = head.reshard = false;
  } else if (rt.tied_weight_group && s.tied_embeddings && rt.gathers_params && p.pp == 1 &&
             units.size() >= 2 && units.back().has_loss) {
    // FSDP2 tied embeddings: one group [tok_embeddings, norm, lm_head]. Each of the two units gathers the
    // whole group. The head's backward writes the tied weight's first gradient (lm_head's dW), which autograd
    // holds until the embedding's backward adds the second (SimUnit::tied_grad_elems); each post-backward
    // reduces only the gradients that exist by then: the head the norm's, the embedding the tied weight's.
    SimUnit& emb = units.front();
    SimUnit& head = units.back();
    std::int64_t tied = 0;
    for (const Layer* l : emb.layers)
      if (l->kind == LayerKind::kEmbedding)
        for (const auto& ten : l->tensors) tied += tp_local_elems(ten, t);
    emb.tied_grad_elems = head.tied_grad_elems = tied;
    emb.reduced_gathered_elems = emb.gathered_elems;
    emb.reduced_shard_elems = emb.shard_elems;
    head.reduced_gathered_elems = head.gathered_elems;
    head.reduced_shard_elems = head.shard_elems;
    const std::int64_t group_shard = emb.shard_elems + head.shard_elems;
    const std::int64_t group_gathered = emb.gathered_elems + head.gathered_elems;
    emb.shard_elems = head.shard_elems = group_shard;
    emb.gathered_elems = head.gathered_elems = group_gathered;
    head.elems += emb.elems;
    emb.tied_peer = static_cast<int>(units.size()) - 1;
    head.tied_peer = 0;
    emb.reshard = head.reshard = false;
  }
}

/// The chunked loss (torchtitan 0.3.0 components/loss.py ChunkedLossWrapper): lm_head's gradient is
/// accumulated and reduce-scattered inside the loss call, at its last chunk (the loss layer's list); the head
/// unit's own post-backward, after the decoder's backward reaches the final norm, finds only the norm's .grad
/// (torch 2.15 _fsdp_param_group.py _take_unsharded_grads_to_reduce skips a parameter without one). Seen in
/// the reference lane's trace (tools/reference/run.py --loss-impl chunked): the head's second reduce-scatter
/// input is the norm's D fp32 elements.
void chunked_loss_head(const UnitContext& c, std::vector<SimUnit>& units) {
  if (units.empty() || !units.back().has_loss || c.rt.padding == Padding::kFlatUnit) return;
  SimUnit& head = units.back();
  std::int64_t elems = 0, shard = 0;
  for (const Layer* l : head.layers)
    if (l->kind == LayerKind::kLmHead)
      for (const auto& ten : l->tensors) {
        elems = add_checked(elems, tp_local_elems(ten, c.t), "lm_head elements");
        shard = add_checked(shard, tensor_shard_elems(ten, c.t, c.F, c.rt.padding), "lm_head shard");
      }
  head.loss_reduced_elems = elems;
  head.reduced_shard_elems = head.shard_elems - shard;
  head.reduced_gathered_elems = head.reduced_shard_elems * c.F;
}

}  // namespace

void build_units(const ModelGraph& model, const Cluster& cluster, const CostModel& costs, const Plan& p,
                 const RuntimeTraits& rt, std::vector<SimUnit>& units) {
  units.clear();
  UnitContext c(model, cluster, costs, p, rt);
  const bool per_module_groups = partition_units(c, units);
  for (std::size_t ui = 0; ui < units.size(); ++ui) {
    SimUnit& u = units[ui];
    UnitSums m = unit_layers(c, u);
    unit_activations(c, u, m);
    unit_workspace(c, u, backward_extra(c, u));
    unit_tp_collectives(c, u, m);
    unit_times_and_gathers(c, u, m, ui, units.size());
  }
  if (per_module_groups) link_module_groups(units, p);
  share_root_or_tied_group(c, units);
  if (p.loss() == LossImpl::kChunked) chunked_loss_head(c, units);
}

}  // namespace shardplan
