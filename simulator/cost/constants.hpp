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
  /// Block-scaled GEMMs (docs/model.md "Block-scaled fp8/fp4"): MXFP8 against the fp8 peak, NVFP4 against
  /// the fp4 peak, the bf16 shape curve times this ratio. Not fitted (no Blackwell records yet): torchao
  /// 0.18.0 testing/training/roofline_utils.py models every dtype's GEMM on B200 with the one achievable
  /// share of its peak (pct_achievable_gemm_tops 0.78, as bf16), i.e. a ratio of 1.
  double mxfp8_ratio = 1.0;
  double nvfp4_ratio = 1.0;
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
/// ZeRO++ qwZ (deepspeed 0.19.8 runtime/zero/partition_parameters.py CUDAQuantizer.target_group_size): the
/// int8 quantiser's target elements per scale group ("the optimal size is 4k, so we set the target to be
/// below 8k"); one fp32 scale per group.
inline constexpr std::int64_t kQwzTargetGroupElems = 8000;
/// ZeRO++ qgZ (deepspeed 0.19.8 runtime/comm/coalesced_collectives.py all_to_all_quant_reduce: swizzle_quant
/// and quantized_reduction with num_bits 4): bytes per gradient element on the wire.
inline constexpr double kQgzBytesPerElem = 0.5;
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
/// Newton-Schulz iterations of Muon (torch/optim/_muon.py DEFAULT_NS_STEPS = 5, KellerJordan/Muon ns_steps=5,
/// torchtitan 0.3.0 DistMuon ns_steps=5).
inline constexpr int kMuonNsSteps = 5;
/// Kernel launches of one matrix's Muon update (torch/optim/_muon.py _single_tensor_muon: momentum lerp_,
/// nesterov lerp, the bf16 copy, norm, clamp, div_, 3 GEMMs per iteration, mul_ and add_ on the parameter).
inline constexpr double kMuonLaunchesPerMatrix = 9 + 3 * kMuonNsSteps;
/// Element-wise HBM traffic of Muon per element of the whole (gathered) matrix, outside the GEMMs: the bf16
/// copy of the fp32 update (read 4, write 2), its norm (read 2), the in-place division (read 2, write 2).
inline constexpr double kMuonFullMatrixBytesPerElem = 12;
/// Kernel launches per tensor of the optimizers that loop over tensors in Python: lion-pytorch 0.2.5
/// update_fn (mul_, clone, mul_, add, sgn_, add_, mul_, add_) and torch 2.15's foreach Adafactor, whose norms
/// and their .item() run per tensor (p.norm, two vector_norms, row_var @ col_var, row_var.mean,
/// update.norm, and the foreach kernels' share).
inline constexpr double kLionLaunchesPerTensor = 8;
inline constexpr double kAdafactorLaunchesPerTensor = 7;
/// Device-to-host synchronisations per tensor of torch 2.15's Adafactor step: `p.norm(2).item()` and
/// `update.norm(2).item()` (torch/optim/_adafactor.py _multi_tensor_adafactor), each a D2H copy that waits
/// for the stream.
inline constexpr double kAdafactorSyncsPerTensor = 2;
/// One such synchronisation: the stream drains and the CPU reads the scalar before launching more (assumed
/// ~15 us: a D2H copy's launch and completion, twice docs/mechanics.md §5's 5-10 us launch).
inline constexpr double kDeviceSyncS = 15e-6;
/// fp16-mixed's dynamic loss scaler (docs/model.md "fp16 mixed precision"), HBM passes over each local
/// gradient before the step. torch 2.15 GradScaler.unscale_ / ShardedGradScaler._unscale_grads_
/// (torch/amp/grad_scaler.py, torch/distributed/fsdp/sharded_grad_scaler.py) and megatron-core 0.8.0
/// MixedPrecisionOptimizer._unscale_main_grads_and_check_for_nan (megatron/core/optimizer/optimizer.py) run
/// torch._amp_foreach_non_finite_check_and_unscale_: one read and one write of every gradient element.
inline constexpr double kTorchUnscalePasses = 2;
/// DeepSpeed 0.19.8's overflow check (deepspeed/runtime/utils.py has_inf_or_nan: `x.amax()` and `x.amin()`,
/// two reads of every gradient of the partition; zero/stage_1_and_2.py and zero/stage3.py has_overflow,
/// fp16/fused_optimizer.py via CheckOverflow). Its unscale rides on the clipping pass unscale_and_clip_grads,
/// which bf16 runs too (gradient_clipping), so it is not an fp16 extra.
inline constexpr double kDeepSpeedOverflowPasses = 2;
/// The loss scaler's flag, all-reduced (MAX) over the data-parallel ranks and read back by the CPU before the
/// step: torch's found_inf (fp32, one element: `torch.full((1,), 0.0, dtype=torch.float32)`), megatron's
/// found_inf (torch.cuda.FloatTensor([0.0])), DeepSpeed's overflow flag (invalid_grad_count.bool().byte():
/// 1 byte, counted as 4: the all-reduce of a scalar costs its latency).
inline constexpr double kLossScalerFlagBytes = 4;
/// QLoRA's dequantisation, HBM bytes per weight value (docs/model.md "LoRA and QLoRA"): bitsandbytes 0.50.2
/// dequantize_4bit (backends/cuda/ops.py _dequantize_4bit_impl) reads the packed codes (0.5 byte) and writes
/// the 16-bit weight (2); the nested absmax is dequantised first (1-byte code read, fp32 written and read:
/// 9 bytes per block of 64).
inline constexpr double kNf4DequantBytesPerValue = 2.5 + 9.0 / 64.0;
/// LLM.int8 (bitsandbytes 0.50.2 MatMul8bitLt): the int8 codes (1 byte) scaled by the row scales into a
/// 16-bit weight (2).
inline constexpr double kInt8DequantBytesPerValue = 3.0;

// DeepEP v2 (deepseek-ai/DeepEP at dd758ca, the ElasticBuffer torchtitan 0.3.0's DeepEPTokenDispatcher
// creates; docs/model.md "Token dispatch backends"). Layout facts of ElasticBuffer.get_buffer_size_hint
// (csrc/elastic/buffer.hpp calculate_buffer_size):
/// Alignment of every buffer and of the workspace: symmetric::kNumAlignmentBytes (csrc/kernels/backend/
/// symmetric.hpp) = 2 MiB.
inline constexpr Bytes kDeepEpBufferAlignBytes = 2 * kMiB;
/// Alignment of each part of a token's slot (hidden, scales, metadata): ptx::kNumTMAAlignBytes
/// (deep_ep/include/deep_ep/common/ptx.cuh) = 32.
inline constexpr Bytes kDeepEpTmaAlignBytes = 32;
/// Channels of the hybrid (multi-node) send/receive layouts: ElasticBuffer::kNumMaxChannels =
/// kNumMaxChannelsPerSM 8 x kNumMaxSMs 160 (csrc/elastic/buffer.hpp).
inline constexpr std::int64_t kDeepEpMaxChannels = 8 * 160;
/// The symmetric-memory workspace in front of the buffer: layout::WorkspaceLayout::get_num_bytes()
/// (deep_ep/include/deep_ep/common/layout.cuh, kNumMaxRanks 1024, kNumMaxExperts 2048, kNumMaxChannels 1024,
/// kNumMaxInflightAGRS 32) = 16 + 3072 x 8 + 2048 x 8 x 2 ... + 33 x 1024 x 4 = 12,820,528 bytes, aligned to
/// 2 MiB in the ElasticBuffer constructor: 14 MiB.
inline constexpr Bytes kDeepEpWorkspaceBytes = 14 * kMiB;
/// Achieved share of the link bandwidth of DeepEP's normal (high-throughput) dispatch/combine kernels, from
/// DeepEP's measured table (docs/legacy.md "Performance", H800 with NVLink ~160 GB/s and CX7 400 Gb/s
/// ~50 GB/s per GPU, DeepSeek-V3 setting: 4096 tokens, hidden 7168, top-8): intranode EP 8 dispatch 153 GB/s,
/// combine 158 GB/s; internode EP 16 dispatch and combine 43 GB/s (the lowest of EP 16/32/64). The smaller of
/// dispatch and combine over the stated link maximum. V2's README reports equal or higher bandwidth at fewer
/// SMs (SM90 EP 8 x 2: 90 / 81 GB/s logical, which counts the local traffic) without the link maxima; the V1
/// fractions are kept as the documented ones.
inline constexpr double kDeepEpNvlinkFraction = 153.0 / 160.0;
inline constexpr double kDeepEpRdmaFraction = 43.0 / 50.0;
}  // namespace fw

/// Persistent bytes per parameter (docs/mechanics.md §1.2).
struct BytesPerParam {
  int params, grads, optimizer;
};
/// FSDP bf16-mixed keeps fp32 sharded params, fp32 grads and Adam moments (4/4/8); a runtime with the master
/// weights in the optimizer (DeepSpeed bf16-mixed) bf16 params and grads with fp32 master + moments (2/2/12;
/// Megatron-core's grads in the reduce dtype, 4 by default); bf16 2/2/8; bf16-true 2/2/4; fp32 4/4/8.
BytesPerParam bytes_per_param(const RuntimeTraits& rt, Precision p);
/// HBM traffic of the optimizer step per local parameter (docs/mechanics.md §5): fused AdamW on fp32 state 28
/// B, DeepSpeed (bf16->fp32 grad convert, Adam, fp32->bf16 copy) 40 B, bf16 params + fp32 moments 22 B,
/// all-bf16 14 B; times kForeachOptimizerTrafficFactor when not fused; plus kGradNormBytesPerParam. Other
/// optimizers scale AdamW's fused traffic by optimizer_traffic_vs_adamw (Muon: its matrices' local update;
/// the gathered matrix's passes and GEMMs are added by the lowering).
double optimizer_bytes_per_param(const RuntimeTraits& rt, Precision p, bool fused,
                                 Optimizer o = Optimizer::kAdamW);
/// The optimizer's HBM traffic per element over fused AdamW's 28 B (fp32 parameter, gradient and state;
/// counted per pass, reads + writes):
/// sgd 20 (p r+w, g r, momentum r+w: fused SGD, torch/optim/sgd.py); lion 76 (lion-pytorch 0.2.5
/// update_fn, eight unfused passes: p.mul_ 8, clone 8, mul_ 8, add 12, sgn_ 8, p.add_ 12, mul_ 8, add_ 12);
/// adafactor 76 (torch 2.15 _multi_tensor_adafactor on a matrix: p.norm 4, weight decay 8, row and column
/// norms 8, row_var @ col_var 4, div_ 8, clamp_min_ 8, rsqrt_ 8, mul_ by the gradient 12, update.norm 4,
/// p.add_ 12); adamw8bit 16 (one fused kernel: p r+w 8, g 4, two 8-bit states r+w 4, block scales; the
/// bitsandbytes kernel, and torchao's compiled single_param_adam); muon 42 per local element of a matrix
/// (buf.lerp_ 12, grad.lerp 12, p.mul_ 8, p.add_ of the bf16 update 10; the gathered matrix's passes are
/// kMuonFullMatrixBytesPerElem). 1 for adamw and adam.
double optimizer_traffic_vs_adamw(Optimizer o);
/// Host DRAM traffic of a CPU optimizer step per parameter: DeepSpeed CPUAdam reads fp32 param, grad, m, v
/// (16 B) and writes param, m, v (12 B) and the bf16 copy sent back (2 B) (csrc/adam/cpu_adam_impl.cpp,
/// v0.16.5).
inline constexpr double kHostAdamBytesPerParam = 30;

}  // namespace shardplan
