// Persistent state, initial allocations, the lower bound, reserved memory and runtime overhead (docs/model.md
// "Memory").
#include "simulator/memory.hpp"

#include <cmath>

#include "core/checked.hpp"
#include "simulator/constants.hpp"
#include "simulator/units.hpp"

namespace shardplan {

std::array<Bytes, 3> persistent_state(const ModelGraph& model, const Plan& p) {
  const RuntimeTraits rt = runtime_traits(p);
  const int F = p.shard_group, t = p.tp;
  std::int64_t local = 0, shard = 0;
  for (const Layer* l : model.order()) {
    for (const auto& ten : l->tensors) {
      local = add_checked(local, mul_checked(tp_local_rows(ten, t), tp_local_cols(ten, t), "tensor elements"));
      if (rt.padding != Padding::kFlatUnit) shard = add_checked(shard, tensor_shard_elems(ten, t, F, rt.padding));
    }
  }
  if (rt.padding == Padding::kFlatUnit) shard = ceil_div(local, F);  // one padded flat parameter, approximately
  const BytesPerParam b = bytes_per_param(p.runtime, p.precision);
  const bool ds = p.runtime == Runtime::kDeepSpeed;
  // DeepSpeed ZeRO-1/2 partition one flat group padded to 2 x F (nccl_start_alignment_factor, §1.8).
  const std::int64_t part = ds && p.zero < 3 ? ceil_div(local, 2 * F) * 2 : shard;
  std::int64_t pe = local, ge = local, oe = local;
  if (p.zero >= 1) oe = part;
  if (p.zero >= 2) ge = part;
  if (p.zero >= 3 || (!ds && p.zero == 2)) pe = shard;
  if (!ds && p.zero >= 2) ge = oe = shard;
  if (p.offload == Offload::kOptimizer) oe = 0;
  return {mul_checked(pe, b.params, "parameter bytes"), mul_checked(ge, b.grads, "gradient bytes"),
          mul_checked(oe, b.optimizer, "optimizer bytes")};
}

Bytes activation_bytes(const ModelGraph& model, const Plan& p) {
  const double T = static_cast<double>(p.mbs) * static_cast<double>(p.seq);
  const double bc = p.precision == Precision::kFp32 ? 4.0 : 2.0;
  double total = 0;
  for (const Layer* l : model.order()) {
    if (p.ac == AcMode::kFull && l->block >= 0) continue;  // block inputs added below
    total += layer_saved_bytes(*l, p, T, p.ac == AcMode::kSelective && l->block >= 0);
  }
  if (p.ac == AcMode::kFull) total += static_cast<double>(model.blocks()) * block_input_bytes(model.spec(), p, T);
  // The saved log-softmax output of the loss (in the loss dtype, vocab-parallel under TP).
  total += T * (p.loss_dtype == Dtype::kFp32 ? 4.0 : bc) * static_cast<double>(model.spec().vocab) / p.tp;
  return static_cast<Bytes>(total);
}

std::array<Bytes, kMemCategories> initial_allocation(const ModelGraph& model, const Plan& p, const RuntimeTraits& rt,
                                                     const std::array<Bytes, 3>& ps) {
  std::array<Bytes, kMemCategories> initial{};
  initial[static_cast<int>(MemCategory::kParams)] = ps[0];
  initial[static_cast<int>(MemCategory::kOptimizer)] = ps[2];
  if (rt.grads_persistent) initial[static_cast<int>(MemCategory::kGrads)] = ps[1];
  if (rt.ipg_bucket_persistent)  // DeepSpeed ZeRO-3: IPG bucket allocated at optimizer init (§1.6)
    initial[static_cast<int>(MemCategory::kCommBuffers)] = static_cast<Bytes>(
        std::min(fw::kDeepSpeedReduceBucketElems, static_cast<double>(model.parameters()) / p.tp)) * 2;
  // Plain data parallel (ZeRO-0 on the fsdp2 runtime = DDP / composable replicate): the Reducer's flat bucket
  // buffers hold a second copy of every gradient for the life of the model (gradient_as_bucket_view=False, the
  // default; the DDP docs: the view "saves memory equal to the total gradients size").
  if (rt.ddp_reducer_buckets) initial[static_cast<int>(MemCategory::kCommBuffers)] = ps[1];
  if (p.hold_logits) {  // the previous micro-step's logits (the loss input), still referenced by the training loop
    const double lb = p.loss_dtype == Dtype::kFp32 ? 4.0 : (p.precision == Precision::kFp32 ? 4.0 : 2.0);
    initial[static_cast<int>(MemCategory::kActivations)] =
        static_cast<Bytes>(std::llround(lb * static_cast<double>(p.mbs) * static_cast<double>(p.seq) *
                                        static_cast<double>(model.spec().vocab) / p.tp));
  }
  return initial;
}

RuntimeOverhead runtime_overhead(const Plan& p) {
  RuntimeOverhead o;
  o.cuda_context_bytes = fw::kCudaContextBytes;
  const int comms = (p.shard_group > 1 || p.dp > 1 ? 1 : 0) + (p.replicas > 1 ? 1 : 0) + (p.tp > 1 ? 1 : 0);
  o.nccl_bytes = comms * fw::kNcclCommunicatorBytes;
  return o;
}

Bytes memory_lower_bound(const ModelGraph& model, const Plan& p) {
  const auto ps = persistent_state(model, p);
  return ps[0] + ps[2] + activation_bytes(model, p) + fw::kCudaContextBytes;
}

Bytes reserved_from_pools(const Timeline& tl, const Plan& p, const ComputeConstants& k) {
  Bytes reserved = 0;
  const double frag = p.compile ? k.fragmentation_compiled : k.fragmentation_eager;
  for (std::size_t i = 0; i < tl.pool_peak_bytes.size(); ++i) {
    const Bytes b = tl.pool_peak_bytes[i];
    reserved += i == kPoolDefault ? allocator_round(static_cast<Bytes>(static_cast<double>(b) * (1.0 + frag))) : b;
  }
  return std::max(reserved, tl.peak_bytes);
}

}  // namespace shardplan
