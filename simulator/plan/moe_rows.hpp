// The rows the busiest expert-parallel rank's routed experts receive: --moe-imbalance and the expert
// capacity (moe_rows.cpp; docs/model.md "Capacity factor").
#pragma once
#include <cstdint>

#include "simulator/plan/plan_types.hpp"

namespace shardplan {

/// One expert's capacity of routed rows under a capacity factor F when a rank routes `mean_rows` (tokens x
/// top_k) over `experts` experts: ceil(mean_rows / experts x F) (Megatron-core's get_capacity).
std::int64_t moe_expert_capacity(std::int64_t mean_rows, int experts, double factor);
/// The rows the busiest expert-parallel rank's experts receive when the mean is `mean_rows` (tokens x top_k)
/// over `experts` routed experts: ceil(mean_rows x --moe-imbalance) with ep > 1 (the one rounding of the
/// imbalance onto rows), else mean_rows (with ep 1 every rank runs its own tokens: nothing to balance);
/// under --moe-capacity-factor at most experts x moe_expert_capacity (dropped rows skip the experts), with
/// --moe-pad-to-capacity exactly that.
std::int64_t ep_busiest_rows(std::int64_t mean_rows, int experts, const Plan& p);
/// DeepSpeed 0.19.8 layer.py MoE's defaults (deepspeed/moe/layer.py lines 44 and 46: capacity_factor=1.0,
/// min_capacity=4), taken under --moe-impl deepspeed when --moe-capacity-factor is 0.
inline constexpr double kDeepSpeedCapacityFactor = 1.0;
inline constexpr std::int64_t kDeepSpeedMinCapacity = 4;
/// One expert's capacity in DeepSpeed-MoE when a rank's gate sees `tokens` tokens: ceil(tokens / experts x
/// (F x top_k)), at least kDeepSpeedMinCapacity (sharded_moe.py _capacity); F 0 takes DeepSpeed's default 1.
std::int64_t deepspeed_expert_capacity(std::int64_t tokens, int experts, int top_k, double factor);
/// The rows the busiest EP rank's experts run when each rank routes `tokens` tokens to top_k of `experts`:
/// under --moe-impl deepspeed experts x deepspeed_expert_capacity (every expert padded, at any imbalance),
/// else ep_busiest_rows(tokens x top_k, ...).
std::int64_t moe_busiest_rows(std::int64_t tokens, int top_k, int experts, const Plan& p);
/// moe_busiest_rows over the mean when a rank holds `tokens` tokens routed to top_k of `experts` experts: 1
/// with ep 1 or --moe-imbalance 1 and no capacity factor.
double moe_rows_factor(double tokens, int top_k, int experts, const Plan& p);

}  // namespace shardplan
