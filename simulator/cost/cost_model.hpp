// CostModel: how long compute, memory-bound work and collectives take on a cluster. Defaults come from
// datasheets and published efficiencies (docs/model.md cites each); a calibration profile, when given,
// replaces them through CalibrationHooks (the simulator itself does not depend on the calibration library).
#pragma once
#include <array>
#include <functional>
#include <optional>

#include "simulator/collectives/collectives.hpp"
#include "simulator/cost/constants.hpp"
#include "topologies/cluster.hpp"

namespace shardplan {

/// Per-architecture defaults (docs/model.md).
ComputeConstants default_compute_constants(GpuArch arch);

/// Optional measured replacements for the analytic curves. Any hook may be empty.
struct CalibrationHooks {
  /// Whole-buffer collective time over `ranks` ranks spanning `nodes` nodes; nullopt = not measured.
  std::function<std::optional<CollectiveCost>(CollectiveKind, double buffer_bytes, const GroupView& g)>
      collective_s;
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
  /// One NVFP4 GEMM: FLOPs / (fp4 peak x bf16 efficiency(shape) x `ratio`) (cost_blockfp.cpp).
  double gemm_fp4_s(double m, double n, double k, double ratio) const;
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

/// CostModel::collective_s remembered for the few distinct collectives of one plan (every unit of the same
/// size repeats them). Keyed by the GroupView's address: use it only while those GroupViews live unchanged
/// (one lowering, one build_units call).
class CollectiveMemo {
 public:
  explicit CollectiveMemo(const CostModel& costs) : costs_(&costs) {}
  double operator()(CollectiveKind kind, double buffer_bytes, const GroupView& g) {
    for (int i = 0; i < size_; ++i) {
      const Entry& e = entries_[static_cast<std::size_t>(i)];
      if (e.kind == kind && e.bytes == buffer_bytes && e.group == &g) return e.time_s;
    }
    const double t = costs_->collective_s(kind, buffer_bytes, g);
    entries_[static_cast<std::size_t>(next_)] = {kind, buffer_bytes, &g, t};
    next_ = (next_ + 1) % kEntries;
    size_ = size_ < kEntries ? size_ + 1 : kEntries;
    return t;
  }

 private:
  struct Entry {
    CollectiveKind kind;
    double bytes;
    const GroupView* group;
    double time_s;
  };
  static constexpr int kEntries = 16;
  const CostModel* costs_;
  std::array<Entry, kEntries> entries_{};
  int size_ = 0, next_ = 0;
};

}  // namespace shardplan
