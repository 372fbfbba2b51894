// Analytic compute and memory-bound costs, with calibration overrides.
#include "simulator/cost/cost_model.hpp"

namespace shardplan {

ComputeConstants default_compute_constants(GpuArch arch) {
  // GEMM and flash-attention efficiencies are fitted per architecture by tools/fit/fit_compute.cpp over the
  // 120 in-scope 16-bit throughput rows of the development set (capped mean |log error|); docs/model.md gives
  // the fit and its error.
  ComputeConstants k;
  switch (arch) {
    case GpuArch::kAmpere:  // A100 rows (MosaicML 40 GB and 80 GB)
      k.gemm_efficiency_max = 0.90;
      k.attention_efficiency = 0.35;
      break;
    case GpuArch::kHopper:  // H100 rows (flash-attention 2 reaches a smaller share of Hopper's peak)
      k.gemm_efficiency_max = 0.65;
      k.attention_efficiency = 0.20;
      break;
    default:  // Blackwell and others: no measured rows at nominal clocks; Hopper's values
      k.gemm_efficiency_max = 0.65;
      k.attention_efficiency = 0.20;
      break;
  }
  return k;
}

CostModel::CostModel(const Cluster& cluster, std::optional<ComputeConstants> constants,
                     CalibrationHooks hooks, CollectiveConstants collective)
    : cluster_(&cluster),
      k_(constants.value_or(default_compute_constants(cluster.spec().gpu.arch))),
      hooks_(std::move(hooks)),
      coll_(collective) {}

CollectiveCost CostModel::collective(CollectiveKind kind, double bytes, const GroupView& g) const {
  if (g.ranks <= 1 || bytes <= 0) return {};
  if (hooks_.collective_s) {
    if (auto c = hooks_.collective_s(kind, bytes, g)) return *c;
  }
  return collective_cost(kind, bytes, g, coll_);
}

double CostModel::collective_s(CollectiveKind kind, double bytes, const GroupView& g) const {
  if (g.ranks <= 1 || bytes <= 0) return 0;
  if (hooks_.collective_s) {
    if (auto c = hooks_.collective_s(kind, bytes, g)) return c->time_s;
  }
  return collective_cost(kind, bytes, g, coll_, /*explain=*/false).time_s;
}

double CostModel::gemm_efficiency(double m, double n, double k) const {
  if (hooks_.gemm_efficiency) {
    if (auto e = hooks_.gemm_efficiency(m, n, k)) return *e;
  }
  const double h = k_.gemm_half_dim;
  return k_.gemm_efficiency_max * (m / (m + h)) * (n / (n + h)) * (k / (k + h));
}

double CostModel::peak_flops(bool fp32) const {
  const auto& g = cluster_->spec().gpu;
  return fp32 ? g.peak_tf32_flops : g.peak_bf16_flops;
}

double CostModel::gemm_s(double m, double n, double k, bool fp32) const {
  if (m <= 0 || n <= 0 || k <= 0) return 0;
  return 2.0 * m * n * k / (peak_flops(fp32) * gemm_efficiency(m, n, k));
}

double CostModel::gemm_fp8_s(double m, double n, double k, double ratio) const {
  if (m <= 0 || n <= 0 || k <= 0) return 0;
  const auto& g = cluster_->spec().gpu;
  const double peak = g.peak_fp8_flops > 0 ? g.peak_fp8_flops : 2 * g.peak_bf16_flops;
  return 2.0 * m * n * k / (peak * gemm_efficiency(m, n, k) * ratio);
}

double CostModel::attention_fwd_s(double flops, bool fp32) const {
  return flops / (peak_flops(fp32) * k_.attention_efficiency);
}

double CostModel::memory_s(double bytes) const {
  double bw = hooks_.hbm_Bps.value_or(cluster_->spec().gpu.hbm_Bps * k_.hbm_efficiency);
  return bytes / bw;
}

double CostModel::optimizer_s(double bytes) const {
  double bw = hooks_.optimizer_Bps.value_or(cluster_->spec().gpu.hbm_Bps * k_.optimizer_efficiency);
  return bytes / bw;
}

}  // namespace shardplan
