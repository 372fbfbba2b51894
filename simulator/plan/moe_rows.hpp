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
/// ep_busiest_rows over the mean when a rank holds `tokens` tokens routed to top_k of `experts` experts: 1
/// with ep 1 or --moe-imbalance 1 and no capacity factor.
double moe_rows_factor(double tokens, int top_k, int experts, const Plan& p);

}  // namespace shardplan
