// Lowering, the optimizer's work beyond AdamW's one fused pass (docs/model.md "Optimizers"): the step's HBM
// traffic and CPU cost per optimizer, and Muon's orthogonalisation: each of the blocks' matrices gathered
// over the shard group when sharded (Moonlight's distributed Muon, arXiv:2502.16982 Algorithm 1: gather the
// partitioned momentum update, Newton-Schulz on the full matrix on every rank, keep the local part) and
// orthogonalised by torch/optim/_muon.py _zeropower_via_newtonschulz (torch 2.15).
#include "core/checked.hpp"
#include "simulator/lowering/lowering_state.hpp"

namespace shardplan::detail {

double Lowering::optimizer_device_s() const {
  const OptimizerWork w = optimizer_work(in_.model, p_);
  const double rest = static_cast<double>(w.elems - w.matrix_elems);
  double bytes = 0;
  if (p_.optimizer == Optimizer::kMuon) {
    // Muon's matrices: the local momentum update and the parameter's update; the rest: its AdamW.
    bytes = static_cast<double>(w.matrix_elems) *
                optimizer_bytes_per_param(rt_, p_.precision, p_.fused_optimizer, Optimizer::kMuon) +
            rest * optimizer_bytes_per_param(rt_, p_.precision, p_.fused_optimizer, Optimizer::kAdamW);
  } else {
    bytes = static_cast<double>(w.elems) *
            optimizer_bytes_per_param(rt_, p_.precision, p_.fused_optimizer, p_.optimizer);
  }
  double s = in_.costs.optimizer_s(bytes);
  // torch 2.15's Adafactor reads two norms back per tensor (.item()): the stream drains each time.
  if (p_.optimizer == Optimizer::kAdafactor)
    s += static_cast<double>(w.tensors) * fw::kAdafactorSyncsPerTensor * fw::kDeviceSyncS;
  return s;
}

double Lowering::optimizer_cpu_s() const {
  double launches = fw::kOptimizerLaunches;
  if (p_.optimizer == Optimizer::kLion || p_.optimizer == Optimizer::kAdafactor) {
    const OptimizerWork w = optimizer_work(in_.model, p_);
    launches +=
        static_cast<double>(w.tensors) *
        (p_.optimizer == Optimizer::kLion ? fw::kLionLaunchesPerTensor : fw::kAdafactorLaunchesPerTensor);
  }
  return K_.kernel_launch_s * launches;
}

std::int32_t Lowering::muon_orthogonalise(std::int32_t after) {
  const MemCategory C = MemCategory::kOptimizer;
  const bool sharded = p_.zero >= 1;
  const int F = sharded ? p_.fsdp_ranks() : 1;
  // The momentum update is in the sharded gradient's dtype (fp32 under bf16-mixed); Newton-Schulz runs in
  // bf16 whatever the training precision (_zeropower_via_newtonschulz: grad.to(torch.bfloat16)).
  const double gb = bytes_per_param(rt_, p_.precision).grads;
  std::int32_t last = after;
  for (int u = 0; u < U_; ++u) {
    for (const Layer* l : unit(u).layers) {
      if (l->block < 0) continue;
      l->for_each_tensor_group([&](const Tensor& ten, std::int64_t count) {
        if (ten.dim1 <= 1) return;
        const double R = static_cast<double>(ten.dim0), Cc = static_cast<double>(ten.dim1);
        const double rows_local = sharded ? static_cast<double>(ceil_div(ten.dim0, F)) : R;
        const double m = std::min(R, Cc), n = std::max(R, Cc);
        // Identical matrices of one layer (w1 and w3, experts) as up to 8 tasks each: the gather of the next
        // overlaps the orthogonalisation of the one before.
        const int tasks = static_cast<int>(std::min<std::int64_t>(count, 8));
        for (int k = 0; k < tasks; ++k) {
          const double reps = static_cast<double>(count / tasks + (k < count % tasks ? 1 : 0));
          // `update = grad.lerp(buf, momentum)` (the local shard), then the gathered whole matrix.
          const Bytes upd_b = B(rows_local * Cc * gb), full_b = B(F * rows_local * Cc * gb);
          std::int32_t gather = -1;
          const std::int32_t g = out_.program.new_tensor();
          if (sharded && F > 1) {
            gather = add_collective(
                CollectiveKind::kAllGather, CommKind::kOptimizerAllGather, kLaneShard, reps * full_b,
                shard_g_, after, reps * busbw_factor(CollectiveKind::kAllGather, F) * full_b,
                [&] { return "muon all_gather " + l->name + "." + ten.name; }, -1, -1);
            alloc_one(C, kPoolDefault, upd_b, g);
            alloc_one(C, kPoolDefault, full_b, g);
          }
          // Newton-Schulz on the whole matrix, X of m x n (the short side first), in bf16: per iteration
          // X X^T (m x m x n), a G G + b G (m x m x m), a X + (b G + c G G) X (m x n x m); then the update
          // of the local rows.
          const double ns_s = fw::kMuonNsSteps * (in_.costs.gemm_s(m, m, n) + in_.costs.gemm_s(m, m, m) +
                                                  in_.costs.gemm_s(m, n, m)) +
                              in_.costs.memory_s(fw::kMuonFullMatrixBytesPerElem * m * n);
          Task t;
          t.type = TaskType::kOptimizer;
          t.lane = kLaneCompute;
          t.duration_s = reps * ns_s;
          t.cpu_s = reps * K_.kernel_launch_s * fw::kMuonLaunchesPerMatrix;
          t.deps = {gather >= 0 ? gather : after, last, -1};
          t.label = label([&] { return "muon newton-schulz " + l->name + "." + ten.name; });
          last = out_.program.add(t);
          out_.optimizer_s += t.duration_s;
          if (!(sharded && F > 1)) alloc_one(C, kPoolDefault, upd_b, g);
          // Inside the iterations: X and its successor (2 m n bytes each), the Gram matrix and its update (2
          // m^2 each) at once; the result X (2 m n) lives until the parameter is updated.
          const Bytes x_b = B(2 * m * n), gram_b = B(2 * m * m);
          const std::int32_t ns = out_.program.new_tensor();
          for (Bytes b : {x_b, gram_b, gram_b, x_b}) alloc_one(C, kPoolDefault, b, ns);
          free_group(C, ns);
          alloc_one(C, kPoolDefault, x_b, g);
          free_group(C, g);
        }
      });
    }
  }
  return last;
}

}  // namespace shardplan::detail
