// A MoE layer's time on the busiest expert-parallel rank (docs/model.md "Expert parallelism", the MoE layer's
// terms): the routed experts' grouped GEMMs over the rows this rank's experts receive, and the elementwise
// work on those rows (the experts' activation, expert parallelism's _permute and _unpermute). Under
// --moe-imbalance F the busiest rank's experts receive ceil(F x T x top_k) rows (ep_busiest_rows, the one
// rounding); the router, the local reorder and the combine run on this rank's own T x top_k rows (the token
// side).
#include <algorithm>
#include <array>
#include <cmath>
#include <string_view>

#include "core/checked.hpp"
#include "simulator/cost/cost.hpp"
#include "simulator/lowering/units_stages.hpp"

namespace shardplan::detail {

namespace {

/// A tensor of the MoE layer's list under either spelling of the SwiGLU projections (separate gate and up, or
/// one fused gate_up: mlp_activations); the second empty where there is only one.
using Names = std::array<std::string_view, 2>;

/// One memory-bound op on the experts' side of the dispatch: the tensors it reads and the one it writes
/// (each read or written once, whole), and when it runs as a pass of its own.
struct ExpertSideOp {
  std::array<Names, 2> reads;  ///< an empty first spelling: no second input
  Names write;
  bool eager, compiled;  ///< runs without / with fused elementwise kernels (torch.compile, TE's fusions)
  /// Only under EP with the all-to-all dispatcher: not in the layer's elementwise_bytes_per_token (built
  /// without a plan), whose other entries here are (mlp_builders.cpp make_mlp: 6 / 10 / 4 bytes per routed
  /// row and unit of width).
  bool ep_permute;
  /// Only under --moe-impl deepspeed (its fixed-size buffers; like ep_permute, not in the layer's
  /// elementwise_bytes_per_token).
  bool deepspeed = false;
};

constexpr Names kGate{"experts.w_gate.out", "experts.w_gate_up.out[gate]"};
constexpr Names kUp{"experts.w_up.out", "experts.w_gate_up.out[up]"};
constexpr Names kSilu{"experts.silu.out", ""}, kMul{"experts.mul.out", ""};
constexpr Names kFc1{"experts.w_fc1.out", ""}, kGelu{"experts.gelu.out", ""};
constexpr Names kRouted{"dispatch.routed_input", ""}, kIndex{"dispatch.ep_permuted_indices", ""};
constexpr Names kDown{"experts.w_down.out", ""}, kNone{"", ""};
constexpr Names kDsSource{"ds.slot_source", ""}, kDsDispatched{"ds.dispatched_input", ""};
constexpr Names kDsExpertOut{"ds.expert_output", ""}, kDsPadded{"ds.padded_output", ""};
constexpr Names kDsSlots{"ds.slots", ""}, kDsRouted{"ds.routed", ""}, kDsGates{"ds.route_gates", ""};
constexpr Names kDsWeighted{"ds.weighted", ""}, kDsSum{"ds.sum", ""}, kDsOut{"w_down.out", "w_fc2.out"};

/// torchtitan 0.3.0 models/common/moe.py GroupedExperts.forward: `h = F.silu(w1 x) * (w3 x)` between the
/// grouped GEMMs (eager: silu reads w1's output and writes its own, the product reads both and writes; fused:
/// one pass reading w1's and w3's outputs), GELU likewise. models/common/token_dispatcher.py
/// AllToAllTokenDispatcher: `_permute` gathers the all-to-all's received rows into expert-major order
/// (`routed_input_RD[permuted_indices, :]`: reads the received rows, as large as the routed input it writes,
/// and the int64 index) and `_unpermute` writes the experts' output back in received order
/// (`out[permuted_indices, :] = routed_output_RD`: reads the output and the index, writes as many bytes)
/// before the return all-to-all; no fusion crosses the all-to-alls, so both run compiled too. The bf16
/// grouped GEMMs take each expert's rows unpadded (torch._grouped_mm's `offs`; only
/// TokenGroupPaddingDispatcher, for the quantised grouped GEMMs, pads the groups): no padding pass.
/// DeepSpeed 0.19.8 deepspeed/moe/sharded_moe.py (the tensors of moe_tensors_deepspeed.cpp): _sparse_encode's
/// index_select writes the [E, C, M] buffer (reading as many input rows, the pad row for empty slots, and
/// the slot map), Experts.forward's torch.cat the experts' [ep, E / ep, C, M] output (experts.py line 38),
/// _sparse_decode's torch.cat its padded copy, its index_select the [k, S, M] rows (reading them and the
/// slots), then, eager, the fp32 multiply by the gates, the sum over the k routes and the cast (compiled: one
/// pass reading the rows and the gates, writing the output).
constexpr std::array<ExpertSideOp, 14> kOps{{
    {{kGate, kNone}, kSilu, true, false, false},
    {{kSilu, kUp}, kMul, true, false, false},
    {{kGate, kUp}, kMul, false, true, false},
    {{kFc1, kNone}, kGelu, true, true, false},
    {{kRouted, kIndex}, kRouted, true, true, true},
    {{kDown, kIndex}, kDown, true, true, true},
    {{kDsDispatched, kDsSource}, kDsDispatched, true, true, false, true},
    {{kDsExpertOut, kNone}, kDsExpertOut, true, true, false, true},
    {{kDsExpertOut, kNone}, kDsPadded, true, true, false, true},
    {{kDsRouted, kDsSlots}, kDsRouted, true, true, false, true},
    {{kDsRouted, kDsGates}, kDsWeighted, true, false, false, true},
    {{kDsWeighted, kNone}, kDsSum, true, false, false, true},
    {{kDsSum, kNone}, kDsOut, true, false, false, true},
    {{kDsRouted, kDsGates}, kDsOut, false, true, false, true},
}};

const ActTensor* find(const Layer& l, const Names& n) {
  if (n[0].empty()) return nullptr;
  for (const ActTensor& a : l.activations)
    if (a.name == n[0] || (!n[1].empty() && a.name == n[1])) return &a;
  return nullptr;
}

}  // namespace

double moe_expert_rows(const UnitContext& c, const Layer& l) {
  return static_cast<double>(moe_busiest_rows(std::llround(c.T), l.moe_top_k, l.moe_experts, c.p));
}

double hf_eager_select_bwd_s(const UnitContext& c, const Layer& l) {
  if (c.p.moe_impl != MoeImpl::kHfEager || l.kind != LayerKind::kMoe || l.moe_experts <= 0) return 0;
  // transformers 5.23's eager loop (modeling_mixtral.py MixtralExperts.forward) reads `gate_up_proj[e]` and
  // `down_proj[e]`: each expert's weight gradient is select_backward's zero-filled tensor of the whole
  // parameter (write it), added out of place into the running sum from the second expert on (read two,
  // write one; torch/csrc/autograd/input_buffer.cpp). Over the rank's local experts, every one of them hit
  // (a balanced router at T·top_k >> E rows): (E + 3 (E - 1)) times the experts' gradient bytes. The grouped
  // GEMM (hf-grouped-mm) writes the 3-D gradient once, as torchtitan's does.
  const double local_experts = static_cast<double>(l.moe_experts) / (c.ep ? std::max(1, c.p.ep) : 1);
  double elems = 0;
  for (const Tensor& t : l.tensors)
    if (t.expert) elems += static_cast<double>(tp_local_elems(t, c.t)) / (c.ep ? std::max(1, c.p.ep) : 1);
  return c.costs.memory_s(elems * c.bc * (local_experts + 3.0 * (local_experts - 1.0)));
}

/// One routed-expert GEMM of a MoE layer as the grouped GEMM runs it: torchtitan's GroupedExperts
/// (models/moe/moe.py at 003edbe, _run_experts_grouped_mm; 0.3.0 models/common/moe.py GroupedExperts.forward:
/// torch._grouped_mm over the experts' token groups, `offs` = the cumulative rows per expert) and Megatron's
/// GroupedMLP compute one GEMM per local expert over the rows routed to it, not one GEMM over every token:
/// the rank's `rows` (T·top_k, the busiest rank's under EP: T·top_k·ep / experts per local expert at the
/// mean) are spread over its local experts, and each group's efficiency is that of its own M
/// (CostModel::gemm_efficiency): under --moe-imbalance F the busiest rank's groups are F times larger. The
/// FLOPs are those of g.count = top_k GEMMs over rows / top_k tokens.
double routed_experts_gemm_s(const CostModel& costs, const Layer& l, const Gemm& g, const Plan& p,
                             double rows, double n, double k, bool fp32) {
  const double ep = std::max(1, p.ep), top_k = std::max(1, l.moe_top_k);
  const double local_experts = static_cast<double>(l.moe_experts) / ep;
  const double per_expert = rows / local_experts;  // the rank's rows, spread evenly over its experts
  const double gemms = g.count / top_k;            // per row: 2 for gate and up, 1 for down
  return gemms * local_experts * costs.gemm_s(per_expert, n, k, fp32);
}

MoeExpertSideBytes moe_expert_side_bytes(const Layer& l, const Plan& p, double tokens, bool fused) {
  MoeExpertSideBytes b;
  if (l.kind != LayerKind::kMoe || l.moe_experts == 0) return b;
  const bool permute = p.ep > 1 && p.ep_dispatch() == EpBackend::kAllToAll && p.moe_impl == MoeImpl::kGrouped;
  for (const ExpertSideOp& op : kOps) {
    if (!(fused ? op.compiled : op.eager) || (op.ep_permute && !permute)) continue;
    if (op.deepspeed && p.moe_impl != MoeImpl::kDeepSpeed) continue;
    const ActTensor* w = find(l, op.write);
    if (!w) continue;  // a GELU layer has no SwiGLU tensors, and the reverse
    double busiest = 0, mean = 0;
    auto add = [&](const ActTensor& a) {
      const double bytes = act_bytes_per_token(a, p, tokens);  // the busiest rank's rows (act_rows_scale)
      busiest += bytes;
      mean += bytes / act_rows_scale(a, p, tokens);
    };
    add(*w);
    for (const Names& r : op.reads)
      if (const ActTensor* a = find(l, r)) add(*a);
    b.busiest += busiest;
    if (!op.ep_permute && !op.deepspeed) b.in_layer += mean;
  }
  return b;
}

double UnitContext::moe_token_side_extra_bytes(const Layer& l, bool fused) const {
  const double moe_div = moe_token_divisor(p);
  if (l.kind != LayerKind::kMoe || moe_div == rep_div) return 0;
  LayerMemo& m = memo(l);
  double& routing = fused ? m.routing_fused : m.routing_eager;
  if (routing < 0) routing = moe_routing_elementwise_bytes(l, fused);
  return routing * (1.0 / moe_div - 1.0 / rep_div);
}

double UnitContext::moe_expert_extra_bytes(const Layer& l) const {
  // Without EP only a padded capacity adds rows (--moe-capacity-factor; rows a capacity drops are not taken
  // off the layer's scalar: max below).
  // --moe-impl deepspeed pads every expert to its capacity whatever the knob (moe_busiest_rows).
  if (l.kind != LayerKind::kMoe || (!ep && p.moe_capacity_factor <= 0 && p.moe_impl != MoeImpl::kDeepSpeed))
    return 0;
  LayerMemo& m = memo(l);
  if (m.moe_extra < 0) {
    const MoeExpertSideBytes b = moe_expert_side_bytes(l, p, T, p.compile || rt.fused_kernels);
    m.moe_extra = std::max(0.0, b.busiest - b.in_layer);
  }
  return m.moe_extra;
}

}  // namespace shardplan::detail
