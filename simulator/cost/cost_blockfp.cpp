// The NVFP4 GEMM time (docs/model.md "Block-scaled fp8/fp4"); MXFP8 GEMMs run at the fp8 peak
// (CostModel::gemm_fp8_s).
#include "simulator/cost/cost_model.hpp"

namespace shardplan {

double CostModel::gemm_fp4_s(double m, double n, double k, double ratio) const {
  if (m <= 0 || n <= 0 || k <= 0) return 0;
  // plan.cpp refuses --fp8 nvfp4 on a GPU without an fp4 peak.
  const double peak = cluster_->spec().gpu.peak_fp4_flops;
  return 2.0 * m * n * k / (peak * gemm_efficiency(m, n, k) * ratio);
}

}  // namespace shardplan
