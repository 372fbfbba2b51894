// DeepSpeed ZeRO++ (deepspeed 0.19.8; arXiv 2306.10209; docs/model.md "ZeRO++"): hpZ's secondary parameter
// partitions as tensors, and the buffers qwZ's int8 all-gathers and qgZ's int4 all-to-alls move.
#pragma once
#include <cstdint>

#include "simulator/engine/engine.hpp"
#include "simulator/model/model.hpp"
#include "simulator/plan/plan.hpp"

namespace shardplan {

/// hpZ: the bytes of one rank's secondary partitions (partition_parameters.py _partition_param_sec): per
/// parameter tensor one torch.empty of (its elements padded to a multiple of dp) / hpz_partition elements
/// in the 16-bit parameter dtype, each rounded as the caching allocator rounds it. 0 without hpZ, and with
/// parameter offload (the secondary tensor lives on the remote device, the host).
Bytes hpz_secondary_bytes(const ModelGraph& model, const Plan& p);

/// qwZ: the scale groups CUDAQuantizer.quantize picks for `elems` elements (ceil(elems / 8000), raised to
/// the first count with elems % (8 x groups) == 0, then doubled while groups of more than 8000 elements
/// remain and elems % (16 x groups) == 0). Elements not a multiple of 8 (DeepSpeed asserts) and a divisor
/// not found within 4,096 steps keep ceil(elems / 8000).
std::int64_t qwz_scale_groups(std::int64_t elems);

/// qwZ: the all-gather of a coalesced partition of `part_elems` elements per rank over `world` ranks: the
/// int8 output (world x part bytes) and the fp32 scales gathered beside it (world x groups x 4 bytes).
double qwz_gather_bytes(std::int64_t part_elems, int world);

/// qgZ: per-rank buffers of all_to_all_quant_reduce for `grad_elems` gradient elements with `local_ranks`
/// GPUs per node: the intra-node all-to-all moves the int4 codes of every element, the inter-node one the
/// int4 codes of the 1/local_ranks the node-local reduction leaves (fp32 scales, one per
/// max(rows, cols, world) group of a tensor, are not counted: < 0.5 % of the codes for Llama-size
/// matrices).
struct QgzBuffers {
  double intra_bytes = 0, inter_bytes = 0;
};
QgzBuffers qgz_buffers(double grad_elems, int local_ranks);

}  // namespace shardplan
