// The per-parameter byte tables of simulator/constants.hpp.
#include "simulator/constants.hpp"

namespace shardplan {

BytesPerParam bytes_per_param(Runtime rt, Precision p) {
  switch (p) {
    case Precision::kBf16Mixed:
      return rt == Runtime::kDeepSpeed ? BytesPerParam{2, 2, 12} : BytesPerParam{4, 4, 8};
    case Precision::kBf16:
      return {2, 2, 8};
    case Precision::kBf16True:
      return {2, 2, 4};
    case Precision::kFp32:
      return {4, 4, 8};
  }
  return {4, 4, 8};
}

double optimizer_bytes_per_param(Runtime rt, Precision p, bool fused) {
  double b = 28;
  switch (p) {
    case Precision::kBf16Mixed:
      b = rt == Runtime::kDeepSpeed ? 40 : 28;
      break;
    case Precision::kBf16:
      b = 22;
      break;
    case Precision::kBf16True:
      b = 14;
      break;
    case Precision::kFp32:
      b = 28;
      break;
  }
  if (!fused) b *= fw::kForeachOptimizerTrafficFactor;
  return b + fw::kGradNormBytesPerParam;
}

}  // namespace shardplan
