// The backward workspace of a unit (build_units' stage; docs/model.md "Backward inside a block", "MoE layers'
// backward"): the op-by-op walk over the unit's layers in reverse, with each layer's saved tensors, gradients
// and transients (a MoE layer's: units_moe_backward.cpp), and its peak over the saved tensors.
#include <algorithm>
#include <cmath>

#include "core/checked.hpp"
#include "simulator/lowering/units_stages.hpp"
#include "simulator/parallel/parallel.hpp"

namespace shardplan::detail {

double backward_extra(const UnitContext& c, const SimUnit& u) {
  const Plan& p = c.p;
  const auto& s = c.s;
  const double T = c.T, f_local = c.f_local;
  double extra = 0;  // transients of every layer's backward beside the op-level ones below
  // Float8: the fp8 copies of one linear's input and output gradient live beside the 16-bit ones
  // (block-scaled recipes: with their scales, NVFP4 its row and column copies of the gradient,
  // units_blockfp.cpp).
  if (u.blocks > 0 && p.fp8 != Fp8::kNone)
    extra += T * (static_cast<double>(s.hidden) + f_local) * fp8_workspace_bytes_per_elem(p.fp8);
  // QLoRA / LLM.int8: one linear's dequantised 16-bit weight [out, in] (bitsandbytes MatMul4Bit.backward
  // dequantize_4bit, and the fp32 absmax it first dequantises, one per block of 64 values).
  double dequant = 0;
  for (const Layer* l : u.layers)
    for (const Tensor& ten : l->tensors)
      if (ten.store == WeightStore::kNf4 || ten.store == WeightStore::kInt8)
        dequant = std::max(dequant, static_cast<double>(ten.parameters()) *
                                        (2.0 + (ten.store == WeightStore::kNf4 ? 4.0 / 64.0 : 0.0)));
  extra += dequant;
  // --ep-backend allgather: the backward's all-gather of the combine's output gradient and the dispatch's
  // reduce-scatter input are [T x ep, h] (ep_dispatch.cpp), one MoE layer at a time.
  if (p.ep > 1 && p.ep_dispatch() == EpBackend::kAllGather)
    for (const Layer* l : u.layers)
      if (l->moe_experts > 0) {
        extra += allgather_dispatch_buffer_bytes(s, p, T);
        break;
      }
  if (p.cp > 1) {  // the ring's buffers of one attention layer's backward (context_parallel.cpp)
    double ring = 0;
    for (const Layer* l : u.layers)
      if (l->attn_heads > 0) ring = std::max(ring, context_parallel_workspace_bytes(*l, p, T));
    extra += ring;
  }
  return extra;
}

void unit_workspace(const UnitContext& c, SimUnit& u, double extra) {
  const Plan& p = c.p;
  const RuntimeTraits& rt = c.rt;
  const auto& s = c.s;
  const int t = c.t;
  const bool ep = c.ep;
  const double T = c.T, bc = c.bc, rep_div = c.rep_div, f_local = c.f_local;
  double workspace = T * bc * 2.0 * static_cast<double>(s.hidden);  // outside blocks: dx and the residual sum
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
                          : rt.grad_kept_until_boundary ? bytes_per_param(rt, p.precision).grads
                                                        : bc;
    // peak_accum: the same walk for a backward whose parameters hold an accumulated gradient
    // (SimUnit::workspace_accum_bytes): the weight gradients written so far are not held.
    double live = static_cast<double>(u.act_bytes), grads = 0, peak = 0, peak_accum = 0;
    for (std::size_t i = u.layers.size(); i-- > 0;) {
      const Layer& l = *u.layers[i];
      const bool in_block = l.block >= 0;
      const bool block_end = in_block && (i + 1 == u.layers.size() || u.layers[i + 1]->block != l.block);
      if (block_end && (full || sel)) {  // the block's recomputation
        double none = 0, kept = 0, input = 0;
        for (const Layer* m : u.layers)
          if (m->block == l.block) {
            none += c.saved(*m, false);
            kept += full ? 0.0 : c.saved(*m, true);
            input += c.block_input(*m);
          }
        live += full ? std::max(0.0, none - input) : none - kept;
      }
      MoeGrads mg;
      for (const auto& ten : l.tensors) {
        const double e = static_cast<double>(tp_local_elems(ten, t)) / (ep && ten.expert ? p.ep : 1);
        mg.all += e;
        if (ten.expert) mg.experts += e;
        if (ten.name.rfind("shared.", 0) == 0) mg.shared += e;
      }
      mg.all *= grad_b;
      mg.experts *= grad_b;
      mg.shared *= grad_b;
      const double g = mg.all;
      double x = layer_backward_excess_bytes(l, p, T);
      double x_accum = layer_backward_excess_bytes(l, p, T, true);
      if (x <= 0 && l.kind == LayerKind::kMoe && l.moe_experts > 0 && l.moe_top_k > 0)
        x = moe_backward_excess(c, l, mg, flowing);
      // Routed experts and layers without a dense output projection (norms: small weight gradients): the
      // same transients with an accumulated gradient.
      if (x <= 0) x = g + 2.0 * flowing + (l.kind == LayerKind::kMoe ? 2.0 * T * f_local * bc : 0.0);
      if (x_accum <= 0) x_accum = x;
      peak = std::max(peak, live + grads + x + flowing + extra);
      peak_accum = std::max(peak_accum, live + x_accum + flowing + extra);
      // Everything the layer saved (after recomputation: the no-AC set) is consumed.
      live -= in_block && (full || sel) ? c.saved(l, false) : c.saved(l, sel && in_block);
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
}

}  // namespace shardplan::detail
