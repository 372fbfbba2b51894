// Lowering, DeepSpeed ZeRO++ (docs/model.md "ZeRO++"): the all-gather output under qwZ (int8 codes and fp32
// scales over the group the gather runs in, hpZ's or the partition's) and qgZ's gradient reduction as two
// int4 all-to-alls with their buffers.
#include "simulator/lowering/lowering_state.hpp"

namespace shardplan::detail {

double Lowering::ag_out_bytes(int u, bool backward, int mb) const {
  if (!p_.quantized_weights) return ag_bytes(u);
  // partition_parameters.py _all_gather_coalesced (quantize=True): the unit's coalesced partitions, the
  // primary shard or (hpZ) the secondary one of dp / hpz shards, quantised as one tensor; int8 output
  // world x partition and fp32 scales world x groups.
  const int world = ag_world(backward, mb);
  const auto gathered = static_cast<std::int64_t>(std::llround(ag_shard_elems(u))) * p_.fsdp_ranks();
  return qwz_gather_bytes(gathered / world, world);
}

std::int32_t Lowering::qgz_reduce(int u, int mb, double rs_elems, std::int32_t dep) {
  // coalesced_collectives.py all_to_all_quant_reduce, on the reduce stream: swizzle_quant's int4 codes and
  // all_to_all_single's output (each n / 2 bytes) for the node-local all-to-all; quantized_reduction's
  // codes and the cross-node all-to-all's output (each n / 2L bytes) and the fp16 dequantised rows
  // (n / L x 2 bytes) for the cross-node one; the mean of the node chunks is the rank's shard.
  const QgzBuffers q = qgz_buffers(rs_elems, local_g_.ranks);
  const SimUnit& un = unit(u);
  const Bytes intra_buf = B(2 * q.intra_bytes);
  const std::int32_t intra_id = alloc_one(MemCategory::kCommBuffers, kPoolReduceScatter, intra_buf);
  const std::int32_t intra = add_collective(
      CollectiveKind::kAllToAll, CommKind::kReduceScatter, kLaneShard, q.intra_bytes, local_g_, dep,
      busbw_factor(CollectiveKind::kAllToAll, local_g_.ranks) * q.intra_bytes,
      [&] { return "qgz all_to_all (node) " + un.name + mb_suffix(mb); }, u, mb);
  const Bytes inter_buf = B(2 * q.inter_bytes + 2.0 * rs_elems / local_g_.ranks);
  const std::int32_t inter_id = alloc_one(MemCategory::kCommBuffers, kPoolReduceScatter, inter_buf);
  free_group(MemCategory::kCommBuffers, intra_id);
  const std::int32_t inter = add_collective(
      CollectiveKind::kAllToAll, CommKind::kReduceScatter, kLaneShard, q.inter_bytes, nodes_g_, intra,
      busbw_factor(CollectiveKind::kAllToAll, nodes_g_.ranks) * q.inter_bytes,
      [&] { return "qgz all_to_all (nodes) " + un.name + mb_suffix(mb); }, u, mb);
  free_group(MemCategory::kCommBuffers, inter_id);
  return inter;
}

}  // namespace shardplan::detail
