// The names of the plan's enum values (plan_types.hpp): what the CLI, the run records and the reports print,
// and their parsers.
#include "simulator/plan/plan_types.hpp"

namespace shardplan {

const char* to_string(Runtime r) {
  return r == Runtime::kFsdp2       ? "fsdp2"
         : r == Runtime::kFsdp1     ? "fsdp1"
         : r == Runtime::kDeepSpeed ? "deepspeed"
                                    : "megatron";
}
const char* to_string(Precision p) {
  switch (p) {
    case Precision::kBf16Mixed:
      return "bf16-mixed";
    case Precision::kBf16:
      return "bf16";
    case Precision::kBf16True:
      return "bf16-true";
    case Precision::kFp32:
      return "fp32";
    case Precision::kFp16Mixed:
      return "fp16-mixed";
  }
  return "?";
}
const char* to_string(AcMode a) {
  return a == AcMode::kNone ? "none" : a == AcMode::kSelective ? "selective" : "full";
}
const char* to_string(Dtype d) {
  return d == Dtype::kFp32 ? "fp32" : "bf16";
}
const char* to_string(Offload o) {
  return o == Offload::kNone ? "none" : o == Offload::kOptimizer ? "optimizer" : "params";
}
const char* to_string(Fp8 f) {
  switch (f) {
    case Fp8::kNone:
      return "none";
    case Fp8::kTensorwise:
      return "tensorwise";
    case Fp8::kRowwise:
      return "rowwise";
    case Fp8::kMxfp8:
      return "mxfp8";
    case Fp8::kNvfp4:
      return "nvfp4";
  }
  return "none";
}
const char* to_string(AllocatorMode a) {
  return a == AllocatorMode::kDefault ? "default" : "expandable";
}
const char* to_string(LossImpl l) {
  return l == LossImpl::kEager ? "eager" : l == LossImpl::kCompiled ? "compiled" : "chunked";
}
const char* to_string(AttentionCore a) {
  return a == AttentionCore::kFlash ? "flash" : a == AttentionCore::kFusedSoftmax ? "fused-softmax" : "eager";
}
const char* to_string(MoeImpl m) {
  switch (m) {
    case MoeImpl::kGrouped:
      return "grouped";
    case MoeImpl::kLoop:
      return "loop";
    case MoeImpl::kHfGroupedMm:
      return "hf-grouped-mm";
    case MoeImpl::kHfEager:
      return "hf-eager";
    case MoeImpl::kDeepSpeed:
      return "deepspeed";
  }
  return "?";
}
const char* to_string(SdpaBackend b) {
  return b == SdpaBackend::kFlash ? "flash" : b == SdpaBackend::kCudnn ? "cudnn" : "efficient";
}
const char* to_string(SacSdpaOps o) {
  return o == SacSdpaOps::kAll ? "all" : "flash-efficient";
}
const char* to_string(RootParams r) {
  return r == RootParams::kNone ? "none" : "embedding-head";
}
const char* to_string(Optimizer o) {
  switch (o) {
    case Optimizer::kAdamW:
      return "adamw";
    case Optimizer::kAdam:
      return "adam";
    case Optimizer::kSgd:
      return "sgd";
    case Optimizer::kAdafactor:
      return "adafactor";
    case Optimizer::kAdamW8bit:
      return "adamw8bit";
    case Optimizer::kLion:
      return "lion";
    case Optimizer::kMuon:
      return "muon";
  }
  return "?";
}

const char* to_string(PpSchedule s) {
  switch (s) {
    case PpSchedule::kGpipe:
      return "gpipe";
    case PpSchedule::k1F1B:
      return "1f1b";
    case PpSchedule::kInterleaved1F1B:
      return "interleaved-1f1b";
    case PpSchedule::kZbv:
      return "zbv";
    case PpSchedule::kDualPipeV:
      return "dualpipev";
  }
  return "?";
}

std::optional<Runtime> parse_runtime(const std::string& s) {
  return parse_enum<Runtime>(s);
}
std::optional<Precision> parse_precision(const std::string& s) {
  return parse_enum<Precision>(s);
}
std::optional<AcMode> parse_ac(const std::string& s) {
  return parse_enum<AcMode>(s);
}
std::optional<Dtype> parse_dtype(const std::string& s) {
  return parse_enum<Dtype>(s);
}
std::optional<Offload> parse_offload(const std::string& s) {
  return parse_enum<Offload>(s);
}
}  // namespace shardplan
