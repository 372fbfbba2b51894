// Every constant of the cost model, in one place, each with its source: a framework's source (file, version),
// a datasheet, a paper, or "fitted" with the command that refits it and its error. The NCCL tuning tables
// (base and per-hop latencies, protocol ceilings) are NCCL's own and live beside the code that uses them in
// simulator/collectives/collectives.cpp, each line citing NCCL's source file. docs/model.md explains how each
// is used.
#pragma once
#include <cstdint>

#include "core/units.hpp"
#include "simulator/plan/plan.hpp"

namespace shardplan {

/// Efficiencies of compute and memory-bound work, per GPU architecture (default_compute_constants in
/// cost_model.cpp). A calibration profile replaces the GEMM curve, HBM and optimizer bandwidths it measured.
struct ComputeConstants {
  /// Achieved / peak bf16 for large, aligned GEMMs. Fitted per architecture by tools/fit/fit_compute.cpp over
  /// the in-scope 16-bit throughput rows of the development set (docs/model.md "Compute"): Hopper 0.65,
  /// Ampere 0.90.
  double gemm_efficiency_max = 0.80;
  /// Each GEMM dimension d scales efficiency by d / (d + gemm_half_dim): the small-dimension roll-off of
  /// cuBLAS tiles (128-256 wide). Chosen, not fitted: 160 (docs/model.md "Compute").
  double gemm_half_dim = 160;
  /// Flash-attention FLOP/s / peak; fitted with gemm_efficiency_max (Hopper 0.20, Ampere 0.35).
  double attention_efficiency = 0.35;
  /// Backward / forward time of the attention core: FlashAttention-2's backward recomputes the scores and
  /// does 2.5x the forward's matmul work (Dao 2023, arXiv:2307.08691, §3.1).
  double attention_bwd_ratio = 2.5;
  /// Memory-bound kernels: achieved / nominal HBM bandwidth (STREAM-class kernels reach 0.8-0.9 of nominal on
  /// A100/H100; docs/mechanics.md §5).
  double hbm_efficiency = 0.80;
  /// Fused AdamW: achieved / nominal HBM bandwidth (docs/mechanics.md §5: 0.7-0.85 for fused kernels).
  double optimizer_efficiency = 0.80;
  double kernel_launch_s = 5e-6;   ///< CPU cost per kernel launch (docs/mechanics.md §5: ~5-10 us)
  double unit_hook_cpu_s = 60e-6;  ///< CPU cost of one FSDP unit's pre/post hooks (PyTorch profiler traces)
  double collective_launch_s = 15e-6;  ///< CPU cost of issuing one NCCL collective through c10d
  /// Float8 GEMMs: efficiency against the fp8 peak = the bf16 shape curve times this ratio per recipe. Fitted
  /// by tools/fit/fit_compute.cpp on pairs of H100 records that differ only in the recipe (docs/model.md
  /// "Float8").
  double fp8_tensorwise_ratio = 0.925;  // 5 H100 pairs: mean |log speed-up error| 0.028, worst 0.085
  double fp8_rowwise_ratio = 0.55;      // 5 H100 pairs: mean 0.071, worst 0.114
  /// Share of the TP collectives' time left exposed by async TP; fitted on torchtitan's async/plain TP pairs.
  double async_tp_exposed = 0.55;  // 6 H100 async/plain pairs: mean |log speed-up error| 0.023, worst 0.059
  /// The share of a pass's TP collectives that blocks the compute stream: all of it, async_tp_exposed with
  /// async TP (Lowering::tp_collectives; the pipeline step's per-micro-batch view).
  double tp_exposed_share(bool async_tp) const { return async_tp ? async_tp_exposed : 1.0; }
  /// Host (CPU) optimizer: achieved / nominal DRAM bandwidth of DeepSpeed's AVX-512 CPUAdam and torch's CPU
  /// AdamW. ZeRO-Offload reports CPU Adam at 6x PyTorch's CPU Adam and near memory bandwidth (Ren et al.
  /// 2021, arXiv:2101.06840, §5.1, Table 2); taken as 0.5 of nominal (STREAM on two-socket servers reaches
  /// ~0.7).
  double host_optimizer_efficiency = 0.5;
  /// PyTorch's AdamW on CPU tensors (what FSDP's CPU offload runs) against DeepSpeed's vectorised CPUAdam:
  /// ZeRO-Offload reports its CPU-Adam about 6x faster than PyTorch's CPU Adam (Ren et al. 2021, §4.2 / §6).
  double torch_cpu_adam_slowdown = 6.0;
  /// Host<->device copies of CPU offload: achieved / nominal PCIe bandwidth for pinned, large copies
  /// (~80 % of the link, CUDA bandwidthTest on Gen4/Gen5 x16).
  double pcie_efficiency = 0.8;
};

/// Fixed facts of the frameworks the lowering uses (not fitted).
namespace fw {
/// Memory outside PyTorch's allocator (docs/mechanics.md §6): the CUDA context is ~300 MB with lazy module
/// loading and up to ~700 MB on large GPUs with cuBLAS/cuDNN handles (pytorch#107667, #28113): 512 MiB.
inline constexpr Bytes kCudaContextBytes = 512 * kMiB;
/// NCCL per communicator: ring buffers of 2 connections x channels x (Simple 4 MiB + LL128 4.69 MiB + LL
/// 0.5 MiB) (NCCL src/init.cc computeBuffSizes) for ~16 NVLink channels, plus NVLS buffers on Hopper: ~0.3-2
/// GB per communicator (docs/mechanics.md §6, NVIDIA/nccl#986): 384 MiB.
inline constexpr Bytes kNcclCommunicatorBytes = 384 * kMiB;
/// DeepSpeed `reduce_bucket_size` default, in elements (deepspeed/runtime/zero/config.py, v0.16.5): the IPG
/// bucket is min(this, parameters) elements of the 16-bit dtype.
inline constexpr double kDeepSpeedReduceBucketElems = 5e8;
/// Kernel launches per layer, forward and backward (torch profiler of an eager Llama block: ~12 per layer
/// forward, about twice in backward), and of a fused optimizer step (multi-tensor-apply launches and the
/// norm/clip kernels).
inline constexpr double kForwardLaunchesPerLayer = 12;
inline constexpr double kBackwardLaunchesPerLayer = 24;
inline constexpr double kOptimizerLaunches = 20;
/// The foreach (unfused) AdamW makes ~8 passes over the state where the fused kernel makes one
/// (docs/mechanics.md §5: torch/optim/adamw.py _multi_tensor_adamw: mul, lerp, mul, addcmul, sqrt, div, add,
/// addcdiv); the measured step time ratio is lower than 8 because several passes read fewer tensors: 2.8x the
/// fused traffic.
inline constexpr double kForeachOptimizerTrafficFactor = 2.8;
/// Host memory bandwidth assumed when a cluster file does not give node.host_memory_Bps: one socket of 8
/// channels of DDR4-3200 (204.8 GB/s).
inline constexpr double kDefaultHostMemoryBps = 204.8e9;
/// Bytes read to compute the gradient norm for clipping, per local parameter (one fp32 read).
inline constexpr double kGradNormBytesPerParam = 4;
}  // namespace fw

/// Persistent bytes per parameter (docs/mechanics.md §1.2).
struct BytesPerParam {
  int params, grads, optimizer;
};
/// FSDP bf16-mixed keeps fp32 sharded params, fp32 grads and Adam moments (4/4/8); DeepSpeed bf16-mixed keeps
/// bf16 params and grads with fp32 master + moments (2/2/12); bf16 2/2/8; bf16-true 2/2/4; fp32 4/4/8.
BytesPerParam bytes_per_param(Runtime rt, Precision p);
/// HBM traffic of the optimizer step per local parameter (docs/mechanics.md §5): fused AdamW on fp32 state 28
/// B, DeepSpeed (bf16->fp32 grad convert, Adam, fp32->bf16 copy) 40 B, bf16 params + fp32 moments 22 B,
/// all-bf16 14 B; times kForeachOptimizerTrafficFactor when not fused; plus kGradNormBytesPerParam.
double optimizer_bytes_per_param(Runtime rt, Precision p, bool fused);
/// Host DRAM traffic of a CPU optimizer step per parameter: DeepSpeed CPUAdam reads fp32 param, grad, m, v
/// (16 B) and writes param, m, v (12 B) and the bf16 copy sent back (2 B) (csrc/adam/cpu_adam_impl.cpp,
/// v0.16.5).
inline constexpr double kHostAdamBytesPerParam = 30;

}  // namespace shardplan
