// CostModel: how long compute, memory-bound work and collectives take on a cluster. Defaults come from
// datasheets and published efficiencies (docs/model.md cites each); a calibration profile, when given,
// replaces them through CalibrationHooks (the simulator itself does not depend on the calibration library).
#pragma once
#include <functional>
#include <optional>

#include "simulator/collective.hpp"
#include "topologies/cluster.hpp"

namespace shardplan {

struct ComputeConstants {
  double gemm_efficiency_max = 0.80;  ///< achieved / peak bf16 for large, aligned GEMMs
  double gemm_half_dim = 160;         ///< each GEMM dimension d scales efficiency by d / (d + gemm_half_dim)
  double attention_efficiency = 0.35; ///< flash-attention FLOP/s / peak, fitted on end-to-end runs
  double attention_bwd_ratio = 2.5;   ///< backward / forward time of the attention core (recompute inside)
  double hbm_efficiency = 0.80;       ///< memory-bound kernels: achieved / nominal HBM bandwidth
  double optimizer_efficiency = 0.80; ///< fused AdamW: achieved / nominal HBM bandwidth
  double kernel_launch_s = 5e-6;      ///< CPU cost per kernel launch
  double unit_hook_cpu_s = 60e-6;     ///< CPU cost of one FSDP unit's pre/post hooks
  double collective_launch_s = 15e-6; ///< CPU cost of issuing one collective
  /// Caching-allocator fragmentation of the default stream's pool: reserved = rounded peak x (1 + f). Eager
  /// autograd frees many differently sized temporaries between long-lived saved tensors and lazily created
  /// gradients, leaving split blocks that later, larger requests cannot use; torch.compile plans fewer, reused
  /// buffers. Fitted by tools/fit/fit_memory.cpp over every measured peak_reserved row (docs/model.md).
  double fragmentation_eager = 0.23;     // 4 eager rows (torchtitan PR 165), leave-one-out median |error| 1.2 %
  double fragmentation_compiled = 0.06;  // 7 compiled rows (torchtitan PR 165, torchao), leave-one-out 6.8 %
  /// Float8 GEMMs: efficiency against the fp8 peak = the bf16 shape curve (or the calibrated bf16 efficiency)
  /// times this ratio per recipe; tensorwise runs cuBLAS fp8 kernels, rowwise CUTLASS row-scaled ones. Fitted
  /// by tools/fit/fit_compute.cpp on pairs of H100 records that differ only in the recipe (float8 vs bf16
  /// speed-up; docs/model.md); the casts are counted as HBM traffic apart. Other architectures use the same
  /// ratios.
  double fp8_tensorwise_ratio = 0.925;  // 5 H100 pairs: mean |log speed-up error| 0.028, worst 0.085
  double fp8_rowwise_ratio = 0.55;      // 5 H100 pairs: mean 0.071, worst 0.114
  /// Share of the TP collectives' time left exposed by async TP (micro-pipelined all-gather/reduce-scatter
  /// with the GEMMs); fitted on torchtitan's async/plain TP pairs (docs/model.md).
  double async_tp_exposed = 0.55;  // 6 H100 async/plain pairs: mean |log speed-up error| 0.023, worst 0.059
};

/// Per-architecture defaults (docs/model.md).
ComputeConstants default_compute_constants(GpuArch arch);

/// Optional measured replacements for the analytic curves. Any hook may be empty.
struct CalibrationHooks {
  /// Whole-buffer collective time over `ranks` ranks spanning `nodes` nodes; nullopt = not measured.
  std::function<std::optional<CollectiveCost>(CollectiveKind, double buffer_bytes, const GroupView& g)> collective_s;
  std::function<std::optional<double>(double m, double n, double k)> gemm_efficiency;
  std::optional<double> hbm_Bps;
  std::optional<double> optimizer_Bps;
  std::string source;  ///< profile file, for reports
};

class CostModel {
 public:
  explicit CostModel(const Cluster& cluster, std::optional<ComputeConstants> constants = std::nullopt,
                     CalibrationHooks hooks = {}, CollectiveConstants collective = {});
  const Cluster& cluster() const { return *cluster_; }
  const ComputeConstants& constants() const { return k_; }
  const CalibrationHooks& hooks() const { return hooks_; }

  /// Whole-buffer collective time over a group (calibrated when the profile covers it).
  double collective_s(CollectiveKind kind, double buffer_bytes, const GroupView& g) const;
  CollectiveCost collective(CollectiveKind kind, double buffer_bytes, const GroupView& g) const;
  /// One GEMM [m x k] @ [k x n] in the compute dtype (fp32 plans pass fp32 = true).
  double gemm_s(double m, double n, double k, bool fp32 = false) const;
  double gemm_efficiency(double m, double n, double k) const;
  /// One float8 GEMM: FLOPs / (fp8 peak x bf16 efficiency(shape) x `ratio`, the recipe's constant).
  double gemm_fp8_s(double m, double n, double k, double ratio) const;
  /// Flash-attention forward core: `flops` of QK^T and AV together.
  double attention_fwd_s(double flops, bool fp32 = false) const;
  /// Memory-bound work moving `bytes` through HBM.
  double memory_s(double bytes) const;
  /// Optimizer step moving `bytes` through HBM.
  double optimizer_s(double bytes) const;
  double peak_flops(bool fp32) const;

 private:
  const Cluster* cluster_;
  ComputeConstants k_;
  CalibrationHooks hooks_;
  CollectiveConstants coll_;
};

}  // namespace shardplan
