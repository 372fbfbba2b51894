// build_units' stages (internal to simulator/lowering/): the context every stage reads, the sums of one pass
// over a unit's layers, and the backward workspace stage (units_workspace.cpp).
#pragma once
#include <cstdint>

#include "simulator/lowering/units.hpp"
#include "simulator/memory/memory.hpp"

namespace shardplan::detail {

/// A float8 recipe's GEMM ratio against its peak (ComputeConstants; units_blockfp.cpp).
double fp8_recipe_ratio(Fp8 f, const ComputeConstants& K);
/// Bytes per element of one operand's low-precision copy with its block scales: 1 for the float8 recipes,
/// 1 + 1/32 for MXFP8 (e4m3 + an e8m0 scale per 32), 1/2 + 1/16 for NVFP4 (e2m1 + an e4m3 scale per 16).
double fp8_copy_bytes_per_elem(Fp8 f);
/// Bytes per element of the low-precision copies of one backward operand (fp8_copy_bytes_per_elem; NVFP4
/// quantizes grad_output to a row and a column copy at once, nvfp4_linear.py).
double fp8_workspace_bytes_per_elem(Fp8 f);

/// What every stage of build_units reads: the plan's sizes and the cost model.
struct UnitContext {
  UnitContext(const ModelGraph& model, const Cluster& cluster, const CostModel& costs, const Plan& p,
              const RuntimeTraits& rt)
      : model(model),
        s(model.spec()),
        cluster(cluster),
        costs(costs),
        p(p),
        rt(rt),
        t(p.tp),
        F(p.fsdp_ranks()),
        Fe(p.efsdp_ranks()),
        ep(p.ep > 1),
        fp32(p.precision == Precision::kFp32),
        bc(p.compute_bytes()),
        T(static_cast<double>(p.mbs) * static_cast<double>(p.seq) / p.cp),
        rep_div(sequence_parallel_divisor(p)),
        K(costs.constants()),
        fp8_ratio(fp8_recipe_ratio(p.fp8, K)),
        tpg(cluster.group(t, 1)),
        coll(costs),
        f_local(static_cast<double>(model.spec().ffn_hidden) / t) {}
  const ModelGraph& model;
  const ModelSpec& s;
  const Cluster& cluster;
  const CostModel& costs;
  const Plan& p;
  const RuntimeTraits& rt;
  // FSDP shards the dense parameters over dp_shard x cp and one EP rank's experts over dp_shard x cp / ep
  // (torchtitan's fsdp and efsdp meshes); with cp = ep = 1 both are the shard group.
  const int t, F, Fe;
  const bool ep, fp32;
  const double bc;
  /// Tokens of one micro-batch on this rank: context parallelism gives each rank seq / cp of every sequence.
  const double T;
  const double rep_div;
  const ComputeConstants& K;
  const double fp8_ratio;
  const GroupView tpg;
  CollectiveMemo coll;  ///< every block unit repeats the same TP collectives
  const double f_local;
  /// A layer's saved bytes per micro-batch (layer_saved_bytes without and with the selective policy) and its
  /// block-input bytes, computed once per distinct layer content (Layer::content) for this plan: identical
  /// blocks repeat the same walks over their activation lists.
  double saved(const Layer& l, bool selective) const {
    LayerMemo& m = memo(l);
    double& v = selective ? m.sel : m.none;
    if (v < 0) v = layer_saved_bytes(l, p, T, selective);
    return v;
  }
  double block_input(const Layer& l) const {
    LayerMemo& m = memo(l);
    if (m.input < 0) m.input = block_input_bytes(l, p, T);
    return m.input;
  }
  /// A MoE layer's elementwise bytes per micro-batch token beyond its elementwise_bytes_per_token under EP:
  /// the expert side's on the busiest rank's extra rows and the all-to-all dispatcher's permutations
  /// (moe_expert_side_bytes, units_moe.cpp); 0 without EP and for other layers.
  double moe_expert_extra_bytes(const Layer& l) const;
  /// A MoE layer's elementwise bytes per micro-batch token of its block beyond elementwise_bytes_per_token /
  /// rep_div: its routing traffic (moe_routing_elementwise_bytes) on the tokens the MoE code gives the TP
  /// rank (moe_token_divisor) rather than the residual stream's (units_moe.cpp); 0 where the two agree.
  double moe_token_side_extra_bytes(const Layer& l, bool fused) const;
  /// A MoE layer's saved bytes per micro-batch that its grouped backward consumes before the grouped GEMMs'
  /// input gradients (the combine's fp32 copy and sorted scores, the experts' SwiGLU tensors) and those of
  /// its routed input (units_moe_backward.cpp).
  struct MoeConsumed {
    double consumed = 0, routed_input = 0;
  };
  MoeConsumed moe_consumed(const Layer& l) const;

 private:
  struct LayerMemo {
    double none = -1, sel = -1, input = -1, moe_extra = -1;
    double routing_fused = -1, routing_eager = -1;  ///< moe_routing_bytes of a MoE layer
    MoeConsumed moe_consumed{-1, -1};
  };
  mutable std::vector<LayerMemo> memo_ = std::vector<LayerMemo>(static_cast<std::size_t>(model.contents()));
  LayerMemo& memo(const Layer& l) const {
    // A layer outside a finalized graph has no content number: its own slot, never shared.
    if (l.content < 0) return scratch_ = LayerMemo{};
    return memo_.at(static_cast<std::size_t>(l.content));
  }
  mutable LayerMemo scratch_;
};

/// What one pass over a unit's layers sums (unit_layers).
struct UnitSums {
  std::int64_t flat = 0, fp8_shard = 0, expert_flat = 0;
  double gemm = 0, attn = 0, elem = 0, act_none = 0, act_sel = 0, act_full = 0, block_inputs = 0;
  double score_fwd = 0, score_bwd = 0;            ///< materialised attention cores (attention_core.cpp)
  double cast_fwd_bytes = 0, cast_bwd_bytes = 0;  ///< float8 scaling and casting of the linears' operands
  double cast_first_mb_bytes = 0;                 ///< once per step: Transformer Engine's cached fp8 weights
  double column_gemm = 0;    ///< forward time of the dense column-parallel GEMMs (TP backward overlap)
  double dequant_bytes = 0;  ///< QLoRA / LLM.int8: HBM bytes of dequantising the base weights once
  double frozen_gemm = 0;  ///< forward time of the GEMMs over frozen weights (no weight gradient in backward)
  double moe_select_bwd = 0;  ///< --moe-impl hf-eager: backward time of the per-expert full-size gradients
};

/// The cast traffic of one block-scaled GEMM (mxfp8 / nvfp4) with X / Y / W input, output and weight
/// elements (units_blockfp.cpp).
void blockfp_cast_bytes(UnitSums& m, Fp8 f, double X, double Y, double W);

/// One pass over the unit's layers (units_layers.cpp): parameter and shard elements into `u`, and the sums.
UnitSums unit_layers(const UnitContext& c, SimUnit& u);
/// Transients of every layer's backward beside the op-level ones of unit_workspace: float8's copies, the CP
/// ring's buffers.
double backward_extra(const UnitContext& c, const SimUnit& u);
/// A MoE layer's unsharded gradient bytes (unit_workspace): all of them, its routed experts' and its shared
/// experts'.
struct MoeGrads {
  double all = 0, experts = 0, shared = 0;
};
/// A MoE layer's worst backward op: its transients beyond the unit's saved tensors and the gradient flowing
/// in (`flowing`, T x h), by Plan::moe_impl (units_moe_backward.cpp).
double moe_backward_excess(const UnitContext& c, const Layer& l, const MoeGrads& g, double flowing);
/// One of the three fp32 N x h tensors of torchtitan's combine backward (N = T·top_k) for a MoE layer under
/// --moe-impl grouped, else 0; T: the rank's tokens of a micro-batch (units_moe_backward.cpp).
double combine_fp32_bytes(const Plan& p, const ModelSpec& s, const Layer& l, double T);
/// The unit's backward workspace: its op-level peak over the saved tensors (SimUnit::workspace_bytes, and
/// workspace_accum_bytes for a backward into accumulated gradients). `extra`: backward_extra.
void unit_workspace(const UnitContext& c, SimUnit& u, double extra);

/// The rows the routed experts of MoE layer `l` run on this rank per micro-batch: T x top_k, under EP the
/// busiest rank's ep_busiest_rows(T x top_k) (units_moe.cpp).
double moe_expert_rows(const UnitContext& c, const Layer& l);
/// --moe-impl hf-eager: the backward time of MoE layer `l`'s select_backward gradients, one zero-filled
/// tensor of each whole 3-D expert parameter per local expert, summed out of place (units_moe.cpp); else 0.
double hf_eager_select_bwd_s(const UnitContext& c, const Layer& l);
/// One routed-expert GEMM (Layer::gemms entry `g`, `g.expert`) of a MoE layer as the grouped GEMM runs it
/// over `rows` routed rows (moe_expert_rows): one GEMM per local expert over its share (units_moe.cpp).
double routed_experts_gemm_s(const CostModel& costs, const Layer& l, const Gemm& g, const Plan& p,
                             double rows, double n, double k, bool fp32);
/// Bytes per token of a MoE layer's memory-bound ops on the experts' side of the dispatch (units_moe.cpp):
/// `busiest` on the busiest EP rank's rows (act_bytes_per_token), `in_layer` the part of them the layer's
/// elementwise_bytes_per_token already holds at the mean rows.
struct MoeExpertSideBytes {
  double busiest = 0, in_layer = 0;
};
MoeExpertSideBytes moe_expert_side_bytes(const Layer& l, const Plan& p, double tokens, bool fused);

}  // namespace shardplan::detail
