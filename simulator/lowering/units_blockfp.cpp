// Block-scaled fp8/fp4 linears (docs/model.md "Block-scaled fp8/fp4"): the recipes' GEMM ratios, the bytes
// of their low-precision copies with block scales, and the traffic of their casts.
#include "simulator/lowering/units_stages.hpp"

namespace shardplan::detail {

double fp8_recipe_ratio(Fp8 f, const ComputeConstants& K) {
  switch (f) {
    case Fp8::kRowwise:
      return K.fp8_rowwise_ratio;
    case Fp8::kMxfp8:
      return K.mxfp8_ratio;
    case Fp8::kNvfp4:
      return K.nvfp4_ratio;
    case Fp8::kNone:
    case Fp8::kTensorwise:
      break;
  }
  return K.fp8_tensorwise_ratio;
}

// MXFP8 (OCP MX spec v1.0; torchao 0.18.0 prototype/mx_formats/mx_tensor.py to_mx): one float8_e4m3fn byte
// per element and one float8_e8m0fnu scale byte per block of 32 along the contraction dim. NVFP4 (torchao
// 0.18.0 prototype/moe_training/nvfp4_training/nvfp4_linear.py): two float4_e2m1 values per byte and one
// float8_e4m3fn scale per 16 (BlockWise1x16), beside one fp32 per-tensor amax (4 bytes per tensor, not per
// element, left out here).
double fp8_copy_bytes_per_elem(Fp8 f) {
  switch (f) {
    case Fp8::kMxfp8:
      return 1.0 + 1.0 / 32.0;
    case Fp8::kNvfp4:
      return 0.5 + 1.0 / 16.0;
    case Fp8::kNone:
    case Fp8::kTensorwise:
    case Fp8::kRowwise:
      break;
  }
  return 1.0;
}

double fp8_workspace_bytes_per_elem(Fp8 f) {
  return fp8_copy_bytes_per_elem(f) * (f == Fp8::kNvfp4 ? 2.0 : 1.0);
}

// Bytes moved by the casts of one GEMM, X / Y / W the input, output and weight elements (`X` already 0
// where a shared column-parallel input was cast by an earlier projection).
// MXFP8, torchao 0.18.0 prototype/moe_training/mxfp8_linear.py mx_mm: forward casts input and weight along
// dim0 (read 2, write the 1 + 1/32 copy); backward casts grad_output along dim0 and dim1, the saved bf16
// weight along dim1 and the saved bf16 input along dim1 (each read 2 + write 1 + 1/32): the bf16 operands,
// not fp8 copies, are what mx_mm saves, so every backward cast starts again from 16 bits.
// NVFP4, nvfp4_linear.py nvfp4_mm_triton: forward reads the input twice (triton_rht_amax, then
// triton_rht_quantize_row_col writing its row and column copies, 2 x (1/2 + 1/16)) and the weight twice
// (its amax, then triton_weight_quantize_2d writing row and column copies); backward quantizes only
// grad_output (amax + row/column quantize with stochastic rounding): input and weight were saved quantized.
void blockfp_cast_bytes(UnitSums& m, Fp8 f, double X, double Y, double W) {
  const double c = fp8_copy_bytes_per_elem(f);
  if (f == Fp8::kMxfp8) {
    const double per_cast = 2.0 + c;
    m.cast_fwd_bytes += per_cast * (X + W);
    m.cast_bwd_bytes += per_cast * (X + W + 2.0 * Y);
  } else {
    const double per_operand = 2.0 + 2.0 + 2.0 * c;
    m.cast_fwd_bytes += per_operand * (X + W);
    m.cast_bwd_bytes += per_operand * Y;
  }
}

}  // namespace shardplan::detail
