// DeepSpeed ZeRO++'s tensors and quantised buffers (simulator/memory/zeropp.hpp).
#include "simulator/memory/zeropp.hpp"

#include "core/checked.hpp"
#include "simulator/cost/cost.hpp"
#include "simulator/memory/accounting.hpp"
#include "simulator/memory/layer_memory.hpp"

namespace shardplan {

Bytes hpz_secondary_bytes(const ModelGraph& model, const Plan& p) {
  if (p.hpz_partition <= 1 || offload_split(p).params) return 0;
  const Bytes elem_bytes = bytes_per_param(runtime_traits(p), p.precision).params;
  Bytes total = 0;
  // ZeRO-3 partitions each parameter tensor on its own: _aligned_size pads it to a multiple of the partition
  // world (dp), and the secondary tensor is aligned / zero_hpz_partition_size elements.
  model.for_each_model_tensor_group([&](const Tensor& ten, std::int64_t count, std::int64_t layers) {
    const std::int64_t n = tp_local_elems(ten, p.tp);
    const std::int64_t aligned = mul_checked(ceil_div(n, std::int64_t{p.dp}), p.dp, "hpZ elements");
    const Bytes one = allocation_bytes(mul_checked(aligned / p.hpz_partition, elem_bytes, "hpZ bytes"));
    total = add_checked(total, mul_checked(one, mul_checked(count, layers, "tensors"), "hpZ bytes"));
  });
  return total;
}

std::int64_t qwz_scale_groups(std::int64_t elems) {
  const std::int64_t target = fw::kQwzTargetGroupElems;
  const std::int64_t first = ceil_div(elems, target);
  if (elems <= 0 || elems % 8 != 0) return std::max<std::int64_t>(first, 1);
  std::int64_t groups = first;
  for (int step = 0; groups < elems && elems % (8 * groups) != 0; ++step, ++groups)
    if (step == 4096) return first;
  while (elems % (16 * groups) == 0 && elems / groups > target) groups *= 2;
  return groups;
}

double qwz_gather_bytes(std::int64_t part_elems, int world) {
  const double codes = static_cast<double>(part_elems) * world;  // int8: one byte each
  return codes + 4.0 * static_cast<double>(qwz_scale_groups(part_elems)) * world;
}

QgzBuffers qgz_buffers(double grad_elems, int local_ranks) {
  return {grad_elems * fw::kQgzBytesPerElem, grad_elems * fw::kQgzBytesPerElem / local_ranks};
}

}  // namespace shardplan
