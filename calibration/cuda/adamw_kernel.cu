// Multi-tensor fused AdamW (see adamw_kernel.hpp): the launch argument carries a table of tensors and, per
// block, which tensor and which 64 Ki-element chunk it updates. Every element goes through adamw_update in
// fp32.
#include "calibration/cuda/adamw_kernel.hpp"
#include "calibration/cuda/cuda_check.hpp"

namespace shardplan::calibration::cuda {

namespace {

constexpr int kMaxTensors = 24;
constexpr int kMaxBlocks = 320;
constexpr std::int64_t kChunk = 65536;
constexpr int kThreads = 512;

struct LaunchTable {  // ~3 KiB: fits the 4 KiB kernel-parameter limit of every architecture
  AdamwDeviceTensor t[kMaxTensors];
  unsigned char block_tensor[kMaxBlocks];
  int block_chunk[kMaxBlocks];
};

template <AdamwLayout L>
__global__ void __launch_bounds__(kThreads) adamw_kernel(LaunchTable table, AdamwStepScalars s) {
  const AdamwDeviceTensor& t = table.t[table.block_tensor[blockIdx.x]];
  const std::int64_t begin = static_cast<std::int64_t>(table.block_chunk[blockIdx.x]) * kChunk;
  const std::int64_t end = begin + kChunk < t.n ? begin + kChunk : t.n;
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    if constexpr (L == AdamwLayout::kFp32) {
      float p = t.p32[i], m = t.m32[i], v = t.v32[i];
      adamw_update(p, t.g32[i], m, v, s);
      t.p32[i] = p, t.m32[i] = m, t.v32[i] = v;
    } else if constexpr (L == AdamwLayout::kBf16Mixed) {
      float p = t.p32[i], m = t.m32[i], v = t.v32[i];
      adamw_update(p, bf16_bits_to_float(t.g16[i]), m, v, s);
      t.p32[i] = p, t.m32[i] = m, t.v32[i] = v;
      t.p16[i] = float_to_bf16_bits(p);
    } else {
      float p = bf16_bits_to_float(t.p16[i]), m = bf16_bits_to_float(t.m16[i]),
            v = bf16_bits_to_float(t.v16[i]);
      adamw_update(p, bf16_bits_to_float(t.g16[i]), m, v, s);
      t.p16[i] = float_to_bf16_bits(p), t.m16[i] = float_to_bf16_bits(m), t.v16[i] = float_to_bf16_bits(v);
    }
  }
}

void launch(AdamwLayout layout, const LaunchTable& table, int blocks, const AdamwStepScalars& s,
            cudaStream_t st) {
  switch (layout) {
    case AdamwLayout::kFp32:
      adamw_kernel<AdamwLayout::kFp32><<<blocks, kThreads, 0, st>>>(table, s);
      break;
    case AdamwLayout::kBf16Mixed:
      adamw_kernel<AdamwLayout::kBf16Mixed><<<blocks, kThreads, 0, st>>>(table, s);
      break;
    case AdamwLayout::kBf16:
      adamw_kernel<AdamwLayout::kBf16><<<blocks, kThreads, 0, st>>>(table, s);
      break;
  }
  SP_CUDA(cudaGetLastError());
}

}  // namespace

void adamw_multi_tensor_step(AdamwLayout layout, const std::vector<AdamwDeviceTensor>& tensors,
                             const AdamwStepScalars& s, cudaStream_t stream) {
  LaunchTable table{};
  int n_tensors = 0, n_blocks = 0;
  for (const auto& t : tensors) {
    if (t.n <= 0) continue;
    // A tensor occupies one table slot; its chunks may span several launches.
    if (n_tensors == kMaxTensors) {
      launch(layout, table, n_blocks, s, stream);
      n_tensors = 0, n_blocks = 0;
    }
    table.t[n_tensors] = t;
    const std::int64_t chunks = (t.n + kChunk - 1) / kChunk;
    for (std::int64_t c = 0; c < chunks; ++c) {
      table.block_tensor[n_blocks] = static_cast<unsigned char>(n_tensors);
      table.block_chunk[n_blocks] = static_cast<int>(c);
      if (++n_blocks == kMaxBlocks) {
        launch(layout, table, n_blocks, s, stream);
        n_blocks = 0;
        if (c + 1 < chunks) {  // the rest of this tensor continues in slot 0 of the next launch
          table.t[0] = t;
          n_tensors = 0;
        } else {
          n_tensors = -1;
        }
      }
    }
    ++n_tensors;
  }
  if (n_blocks > 0) launch(layout, table, n_blocks, s, stream);
}

}  // namespace shardplan::calibration::cuda
