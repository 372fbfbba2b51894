// Unit partition and per-unit costs (docs/model.md "Units"; activations docs/mechanics.md §2.2, float8 casts
// docs/model.md "Float8", tensor parallelism §2.1).
#include "simulator/lowering/units.hpp"

#include <cmath>

#include "core/checked.hpp"
#include "simulator/cost/cost.hpp"
#include "simulator/memory/memory.hpp"
#include "simulator/parallel/parallel.hpp"

namespace shardplan {

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

void build_units(const ModelGraph& model, const Cluster& cluster, const CostModel& costs, const Plan& p,
                 const RuntimeTraits& rt, std::vector<SimUnit>& units) {
  units.clear();
  const auto& s = model.spec();
  // FSDP shards the dense parameters over dp_shard x cp and one EP rank's experts over dp_shard x cp / ep
  // (torchtitan's fsdp and efsdp meshes); with cp = ep = 1 both are the shard group.
  const int t = p.tp, F = p.fsdp_ranks(), Fe = p.efsdp_ranks();
  const bool ep = p.ep > 1;
  const bool fp32 = p.precision == Precision::kFp32;
  const double bc = p.compute_bytes();
  // Tokens of one micro-batch on this rank: context parallelism gives each rank seq / cp of every sequence.
  const double T = static_cast<double>(p.mbs) * static_cast<double>(p.seq) / p.cp;
  const double rep_div = sequence_parallel_divisor(p);
  const auto& K = costs.constants();
  const double fp8_ratio = p.fp8 == Fp8::kRowwise ? K.fp8_rowwise_ratio : K.fp8_tensorwise_ratio;
  const GroupView tpg = cluster.group(t, 1);
  CollectiveMemo coll(costs);  // every block unit repeats the same TP collectives
  const double f_local = static_cast<double>(s.ffn_hidden) / t;

  // Partition layers into units: the embedding unit, one unit per `wrap` blocks, and the head unit (from the
  // final norm on). Names are for reports only.
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

  for (std::size_t ui = 0; ui < units.size(); ++ui) {
    SimUnit& u = units[ui];
    std::int64_t flat = 0, fp8_shard = 0, expert_flat = 0;
    double gemm = 0, attn = 0, elem = 0, act_none = 0, act_sel = 0, act_full = 0;
    double score_fwd = 0, score_bwd = 0;            // materialised attention cores (attention_core.cpp)
    double cast_fwd_bytes = 0, cast_bwd_bytes = 0;  // float8 scaling and casting of the linears' operands
    for (const Layer* l : u.layers) {
      // torchao converts the blocks' dense linear layers; embedding, LM head, attention core and MoE experts
      // stay.
      const bool fp8_layer = p.fp8 != Fp8::kNone && l->block >= 0 &&
                             (l->kind == LayerKind::kAttention || l->kind == LayerKind::kMlp);
      const bool cast_by_autocast = l->kind != LayerKind::kEmbedding &&
                                    l->kind != LayerKind::kPositionEmbedding && l->kind != LayerKind::kNorm &&
                                    l->kind != LayerKind::kFinalNorm;
      if (l->kind == LayerKind::kLmHead && s.tied_embeddings)
        u.autocast_copy_elems +=
            (static_cast<std::int64_t>(s.vocab) + t - 1) / t *
            static_cast<std::int64_t>(s.hidden);  // the tied weight, vocab-parallel under TP
      // Identical tensors (a MoE layer's experts) as one group times its count: the same sums.
      l->for_each_tensor_group([&](const Tensor& ten, std::int64_t count) {
        const std::int64_t n = tp_local_elems(ten, t) * count;
        if (cast_by_autocast) u.autocast_copy_elems += ep && ten.expert ? n / p.ep : n;
        if (ep && ten.expert) {  // summed over all experts here, this rank's experts / ep after the loop
          u.expert_elems += n;
          if (rt.padding == Padding::kFlatUnit)
            expert_flat += n;
          else  // this rank's shard already (its experts only)
            u.expert_shard_elems += rank_shard_elems(ten, count, t, Fe, rt.padding, p.ep);
          return;
        }
        u.elems += n;
        if (rt.padding == Padding::kFlatUnit)
          flat += n;
        else
          u.shard_elems += tensor_shard_elems(ten, t, F, rt.padding) * count;
        if (fp8_layer && p.fp8_all_gather && ten.dim1 > 1)  // weights, not biases
          fp8_shard += tensor_shard_elems(ten, t, F, Padding::kPerTensorDim0) * count;
      });
      // The column-parallel projections of a layer share one input (q/k/v, gate/up).
      bool column_input_cast = false;
      for (const auto& g : l->gemms) {
        const double n = g.tp == TpSplit::kColumn ? static_cast<double>(g.n) / t : static_cast<double>(g.n);
        const double k = g.tp == TpSplit::kRow ? static_cast<double>(g.k) / t : static_cast<double>(g.k);
        // The busiest EP rank's routed experts see `moe_imbalance` times the mean tokens
        // (expert_parallel.cpp).
        const double imbalance = ep && g.expert ? p.moe_imbalance : 1.0;
        if (fp8_layer) {
          gemm += g.count * costs.gemm_fp8_s(T, n, k, fp8_ratio);
          // Bytes per element moved by the casts (docs/model.md "Float8"): tensorwise = amax pass (read 2) +
          // cast (read 2, write 1) per operand, transposes of fp8 copies (read 1, write 1) where backward
          // needs the other layout; rowwise = row scales fused into the cast (3), column scales need their
          // own pass (5). An input shared by several projections is cast once; with TP, tensorwise casts the
          // sequence shard before the all-gather.
          const bool shared = g.tp == TpSplit::kColumn;
          const double X = shared ? (column_input_cast ? 0.0 : T * k) : T * k * g.count;
          if (shared) column_input_cast = true;
          const double Y = T * n * g.count, W = n * k * g.count;
          if (p.fp8 == Fp8::kTensorwise) {
            const double x_fwd = shared && t > 1 ? X / t : X;
            cast_fwd_bytes += 5 * x_fwd + (p.fp8_all_gather ? 0 : 5 * W);
            cast_bwd_bytes += 5 * X + (p.fp8_all_gather ? 2 * W : 5 * W) + 7 * Y;
          } else {
            cast_fwd_bytes += 3 * X + 3 * W;
            cast_bwd_bytes += 5 * X + 5 * W + 8 * Y;
          }
        } else if (imbalance != 1.0) {
          gemm += g.count * costs.gemm_s(T * imbalance, n, k, fp32);
        } else {
          gemm += g.count * costs.gemm_s(T, n, k, fp32);
        }
        u.flops_fwd += 2.0 * T * n * k * g.count;
      }
      if (l->attn_heads > 0) {
        const double heads = static_cast<double>(l->attn_heads) / t;
        // Flash attention: QK^T (head_dim) and AV (v_head_dim) over the positions each query attends (causal:
        // (s + 1) / 2 on average; sliding or chunked windows fewer), 2 FLOPs per MAC.
        const double flops = 2.0 * T * heads * static_cast<double>(l->attn_head_dim + l->v_head_dim()) *
                             l->attended_positions(p.seq);
        // A materialised core runs batched GEMMs over whole s x s rows and memory-bound passes over them
        // instead; the useful FLOPs counted are the same.
        if (p.attention == AttentionCore::kFlash) {
          attn += costs.attention_fwd_s(flops, fp32);
        } else {
          const bool alibi =
              s.positions == PositionKind::kAlibi && p.attention == AttentionCore::kFusedSoftmax;
          score_fwd += score_core_fwd_s(*l, p, alibi, costs, T);
          score_bwd += score_core_bwd_s(*l, p, alibi, costs, T);
        }
        u.flops_fwd += flops;
      }
      // Megatron-core with Transformer Engine runs the elementwise work fused, as compiled code does: the
      // norm inside TE's LayerNormLinear / LayerNormMLP, rotary embedding (apply_rope_fusion), the MLP
      // activation (megatron/core/fusions/fused_bias_swiglu.py, fused_bias_gelu.py) and bias-dropout-add
      // (fused_bias_dropout.py) as single kernels (core_r0.8.0).
      const bool fused = p.compile || p.runtime == Runtime::kMegatron;
      double el = fused ? l->elementwise_bytes_per_token : l->eager_elementwise_bytes_per_token;
      if (l->kind == LayerKind::kLoss)
        el = el / t;  // vocab-parallel loss
      else if (l->block >= 0)
        el = el / rep_div;
      elem += costs.memory_s(T * el * bc / 2);
      const double saved = layer_saved_bytes(*l, p, T, false);
      act_none += saved;
      act_sel += layer_saved_bytes(*l, p, T, l->block >= 0);
      if (l->block < 0) act_full += saved;
    }
    // Full AC keeps each block's input (layers outside blocks keep what they save without recomputation).
    act_full += static_cast<double>(u.blocks) * block_input_bytes(s, p, T);
    if (rt.padding == Padding::kFlatUnit) u.shard_elems = ceil_div(flat, F);
    if (ep) {
      // Every expert of a layer has the same tensors and ep divides the expert count (resolve_plan): this
      // rank's experts are exactly 1 / ep of them.
      u.expert_elems /= p.ep;
      if (rt.padding == Padding::kFlatUnit) u.expert_shard_elems = ceil_div(expert_flat / p.ep, Fe);
      u.elems += u.expert_elems;
    }
    double workspace =
        T * bc * 2.0 * static_cast<double>(s.hidden);  // outside blocks: dx and the residual sum
    double extra = 0;  // transients of every layer's backward beside the op-level ones below
    // Float8: the fp8 copies of one linear's input and output gradient live beside the 16-bit ones.
    if (u.blocks > 0 && p.fp8 != Fp8::kNone) extra += T * (static_cast<double>(s.hidden) + f_local);
    if (p.cp > 1) {  // the ring's buffers of one attention layer's backward (context_parallel.cpp)
      double ring = 0;
      for (const Layer* l : u.layers)
        if (l->attn_heads > 0) ring = std::max(ring, context_parallel_workspace_bytes(*l, p, T));
      extra += ring;
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
            u.blocks > 0 ? static_cast<Bytes>(std::max(0.0, act_none / u.blocks - block_input_bytes(s, p, T)))
                         : 0;
        break;
    }
    if (u.blocks > 0) {
      // The unit's backward op by op (docs/model.md "Backward inside a block"): layers in reverse; a layer's
      // saved tensors are freed when its backward is done and its weight gradients (unsharded, compute dtype)
      // stay until the post-backward's reduce-scatter. Full AC recomputes a block's forward when the block's
      // backward starts (the checkpoint's first unpack), selective AC the tensors its policy did not save. At
      // a layer's worst op live are: the saved tensors of the unit not yet consumed, the gradients written so
      // far, the gradient flowing in (tokens x hidden) and the layer's own transients
      // (layer_backward_excess_bytes; norms and other layers: their input gradient and the residual sum).
      // The lowering emits the excess of this peak over the saved tensors as the backward's workspace and
      // allocates the gradients once the saved tensors are freed, so the allocator sees the peak at the op
      // where autograd reaches it and the unit ends with only its gradients.
      const bool full = p.ac == AcMode::kFull, sel = p.ac == AcMode::kSelective;
      const double flowing = T * static_cast<double>(s.hidden) * bc / rep_div;
      // Gradients written into persistent buffers take no new memory; DDP's and ZeRO-1's .grad are in the
      // gradient dtype (DDP under autocast: fp32, the parameter's), FSDP's unsharded gradients in bc.
      const double grad_b = rt.grads_persistent           ? 0.0
                            : rt.grad_kept_until_boundary ? bytes_per_param(p.runtime, p.precision).grads
                                                          : bc;
      // peak_accum: the same walk for a backward whose parameters hold an accumulated gradient
      // (SimUnit::workspace_accum_bytes): the weight gradients written so far are not held.
      double live = static_cast<double>(u.act_bytes), grads = 0, peak = 0, peak_accum = 0;
      for (std::size_t i = u.layers.size(); i-- > 0;) {
        const Layer& l = *u.layers[i];
        const bool in_block = l.block >= 0;
        const bool block_end = in_block && (i + 1 == u.layers.size() || u.layers[i + 1]->block != l.block);
        if (block_end && (full || sel)) {  // the block's recomputation
          double none = 0, kept = 0;
          for (const Layer* m : u.layers)
            if (m->block == l.block) {
              none += layer_saved_bytes(*m, p, T, false);
              kept += full ? 0.0 : layer_saved_bytes(*m, p, T, true);
            }
          live += full ? std::max(0.0, none - block_input_bytes(s, p, T)) : none - kept;
        }
        double g = 0, g_experts = 0;
        for (const auto& ten : l.tensors) {
          const double e = static_cast<double>(tp_local_elems(ten, t)) / (ep && ten.expert ? p.ep : 1);
          g += e;
          if (ten.expert) g_experts += e;
        }
        g *= grad_b;
        g_experts *= grad_b;
        double x = layer_backward_excess_bytes(l, p, T);
        double x_accum = layer_backward_excess_bytes(l, p, T, true);
        if (x <= 0 && l.kind == LayerKind::kMoe && l.moe_experts > 0 && l.moe_top_k > 0) {
          // Routed experts run one after the other (Hugging Face MixtralSparseMoeBlock's loop over experts,
          // the lane's SparseMoe): autograd walks them in reverse, and expert k's backward consumes its saved
          // tensors (C tokens: input, gate and up outputs, SiLU(gate), product, 8f bytes per token at 16
          // bits) and writes its weight gradients before the next starts. At expert k's SwiGLU backward live
          // are the k - 1 earlier experts' gradients without their saved tensors, its own gradient and its
          // gate/up output gradients (2 C f); linear in k, so the worst is the first or the last expert.
          // Balanced router: C = T top_k / local experts (under EP the rank's experts receive every EP rank's
          // tokens).
          const double local_experts = static_cast<double>(l.moe_experts) / (ep ? p.ep : 1);
          double f_expert = 0;
          for (const Gemm& gm : l.gemms)
            if (gm.expert && gm.tp == TpSplit::kColumn) f_expert = static_cast<double>(gm.n) / t;
          const double C = T * l.moe_top_k / local_experts;
          const double saved_e = C * 8.0 * f_expert * bc / 2.0, g_e = g_experts / local_experts;
          x = (g - g_experts) + 2.0 * flowing +
              std::max(g_e + 2.0 * C * f_expert * bc,
                       (local_experts - 1) * (g_e - saved_e) + g_e + 2.0 * C * f_expert * bc);
        }
        // Routed experts and layers without a dense output projection (norms: small weight gradients): the
        // same transients with an accumulated gradient.
        if (x <= 0) x = g + 2.0 * flowing + (l.kind == LayerKind::kMoe ? 2.0 * T * f_local * bc : 0.0);
        if (x_accum <= 0) x_accum = x;
        peak = std::max(peak, live + grads + x + flowing + extra);
        peak_accum = std::max(peak_accum, live + x_accum + flowing + extra);
        // Everything the layer saved (after recomputation: the no-AC set) is consumed.
        live -= in_block && (full || sel) ? layer_saved_bytes(l, p, T, false)
                                          : layer_saved_bytes(l, p, T, sel && in_block);
        grads += g;
      }
      workspace =
          std::max(0.0, peak - static_cast<double>(u.act_bytes) - static_cast<double>(u.recompute_bytes));
      u.workspace_accum_bytes =
          static_cast<Bytes>(std::min(workspace, std::max(0.0, peak_accum - static_cast<double>(u.act_bytes) -
                                                                   static_cast<double>(u.recompute_bytes))));
    } else {
      workspace += extra;
    }
    u.workspace_bytes = static_cast<Bytes>(workspace);
    if (u.blocks == 0) u.workspace_accum_bytes = u.workspace_bytes;
    // Tensor-parallel collectives (sequence parallel): per block an all-gather before and a reduce-scatter
    // after attention and the MLP; the head all-gathers its input, the embedding reduce-scatters its output.
    if (t > 1) {
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
      u.tp_ag_bytes = ag * ag_buf;
      u.tp_ag_mirror_bytes = ag * buf;
      u.tp_rs_bytes = rs * buf;
      u.tp_fwd_ag_s = ag * coll(CollectiveKind::kAllGather, ag_buf, tpg);
      u.tp_fwd_s = u.tp_fwd_ag_s + rs * coll(CollectiveKind::kReduceScatter, buf, tpg);
      // Backward: the mirror of each forward all-gather is a 16-bit reduce-scatter of the input gradient, and
      // of each reduce-scatter a 16-bit all-gather of the output gradient.
      u.tp_bwd_ag_s = rs * coll(CollectiveKind::kAllGather, buf, tpg);
      u.tp_bwd_s = ag * coll(CollectiveKind::kReduceScatter, buf, tpg) + u.tp_bwd_ag_s;
    }
    for (const Layer* l : u.layers) {
      if (p.cp > 1) add_cp_cost(u, context_parallel_layer_cost(*l, cluster, costs, p, T));
      if (ep) add_ep_cost(u, expert_parallel_layer_cost(*l, s, cluster, costs, p, T));
    }
    const double cast_fwd = costs.memory_s(cast_fwd_bytes), cast_bwd = costs.memory_s(cast_bwd_bytes);
    u.fwd_s = gemm + attn + elem + cast_fwd + score_fwd;
    u.bwd_s = 2 * gemm + K.attention_bwd_ratio * attn + 2 * elem + cast_bwd + score_bwd;
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
    if (rt.head_not_resharded && ui + 1 == units.size() && rt.gathers_params)
      u.reshard = false;  // [norm, output]
    // torchtitan's "default" policy before 83e694105 (2025-07-28): the last block (the unit before the head)
    // is not resharded after forward, since its backward comes first (parallelize_llama.py at 5940ddeb5).
    if (p.keep_last_block && u.blocks > 0 && ui + 2 == units.size()) u.reshard = false;
  }
  if (per_module_groups) {
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

}  // namespace shardplan
