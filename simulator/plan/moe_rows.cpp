// The rows the busiest expert-parallel rank's routed experts receive (docs/model.md "Expert parallelism",
// "Capacity factor"): the router's imbalance (--moe-imbalance) and Megatron-core's expert capacity
// (--moe-capacity-factor, --moe-pad-to-capacity), the one place both become rows.
#include "simulator/plan/moe_rows.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/checked.hpp"
#include "core/error.hpp"

namespace shardplan {

namespace {

/// A whole row count from a ceil()'d double: exact below 2^53; beyond it (or NaN) refused as an overflow.
std::int64_t whole_rows(double rows, const char* what) {
  if (!(rows < 9007199254740992.0)) throw OverflowError(std::string("integer overflow computing ") + what);
  return static_cast<std::int64_t>(rows);
}

}  // namespace

std::int64_t moe_expert_capacity(std::int64_t mean_rows, int experts, double factor) {
  // megatron-core 0.8.0 megatron/core/transformer/moe/moe_utils.py get_capacity, called by
  // topk_softmax_with_capacity with num_tokens = the router's tokens x topk and no min_capacity:
  // math.ceil((num_tokens / num_experts) * capacity_factor), in that order of operations.
  return whole_rows(std::ceil(static_cast<double>(mean_rows) / std::max(1, experts) * factor),
                    "the expert capacity");
}

std::int64_t ep_busiest_rows(std::int64_t mean_rows, int experts, const Plan& p) {
  std::int64_t rows = mean_rows;
  if (p.ep > 1 && p.moe_imbalance != 1.0) {
    // A row is whole: the busiest rank receives ceil(F x the mean rows) (F >= 1, resolve_plan).
    rows = std::max(mean_rows, whole_rows(std::ceil(static_cast<double>(mean_rows) * p.moe_imbalance),
                                          "the busiest EP rank's rows"));
  }
  if (p.moe_capacity_factor <= 0) return rows;
  // Each source rank keeps at most `capacity` rows per expert (the router drops on its own tokens), so a
  // rank's experts receive at most ep x (experts / ep) x capacity = experts x capacity rows; padded, exactly
  // that (megatron-core 0.8.0 moe_utils.py topk_softmax_with_capacity, pad_to_capacity: [experts,
  // capacity] indices per rank).
  const std::int64_t capped = mul_checked(moe_expert_capacity(mean_rows, experts, p.moe_capacity_factor),
                                          std::max(1, experts), "expert capacity rows");
  return p.moe_pad_to_capacity ? capped : std::min(rows, capped);
}

std::int64_t deepspeed_expert_capacity(std::int64_t tokens, int experts, int top_k, double factor) {
  // deepspeed 0.19.8 deepspeed/moe/sharded_moe.py _capacity (lines 152-162): torch.ceil((num_tokens /
  // num_experts) * capacity_factor), at least min_capacity (torch.maximum), where top1gating passes
  // capacity_factor, top2gating capacity_factor * 2 and topkgating capacity_factor * k (lines 232, 364, 446):
  // the factor multiplies by top_k before the tokens per expert, unlike get_capacity above.
  const double f = (factor > 0 ? factor : kDeepSpeedCapacityFactor) * std::max(1, top_k);
  return std::max(
      whole_rows(std::ceil(static_cast<double>(tokens) / std::max(1, experts) * f), "the expert capacity"),
      kDeepSpeedMinCapacity);
}

std::int64_t moe_busiest_rows(std::int64_t tokens, int top_k, int experts, const Plan& p) {
  // DeepSpeed-MoE (MOELayer.forward) dispatches a fixed [E, C, M] buffer per rank whatever the routing: after
  // the all-to-all a rank's experts run [ep, E / ep, C, M], E x C rows (--moe-imbalance does not enter).
  if (p.moe_impl == MoeImpl::kDeepSpeed)
    return mul_checked(deepspeed_expert_capacity(tokens, experts, top_k, p.moe_capacity_factor),
                       std::max(1, experts), "expert capacity rows");
  return ep_busiest_rows(mul_checked(tokens, std::max(1, top_k), "routed rows"), experts, p);
}

double moe_rows_factor(double tokens, int top_k, int experts, const Plan& p) {
  if ((p.ep <= 1 || p.moe_imbalance == 1.0) && p.moe_capacity_factor <= 0 &&
      p.moe_impl != MoeImpl::kDeepSpeed)
    return 1.0;
  const std::int64_t mean = mul_checked(std::llround(tokens), std::max(1, top_k), "routed rows");
  if (mean <= 0) return 1.0;
  return static_cast<double>(moe_busiest_rows(std::llround(tokens), top_k, experts, p)) /
         static_cast<double>(mean);
}

}  // namespace shardplan
