// The capability table of each runtime, every entry with its source at the pinned version (torch 2.15,
// torchtitan 0.3.0 and deepspeed 0.19.8 as tools/pyenv-requirements.txt installs them; megatron-core 0.8.0
// from PyPI, the core_r0.8.0 the Megatron runtime is modelled on), and what is derived from it.
#include "simulator/plan/capabilities.hpp"

#include <iterator>
#include <stdexcept>

#include "core/error.hpp"
#include "simulator/plan/capability_rows.hpp"

namespace shardplan {

namespace {

using Table = std::array<std::array<Capability, kFeatures>, kRuntimes>;

Table build_table() {
  Table t{};
  std::array<std::array<bool, kFeatures>, kRuntimes> seen{};
  auto fill = [&](Runtime r, const auto& rows) {
    const auto ri = static_cast<std::size_t>(r);
    for (const Row& row : rows) {
      const auto fi = static_cast<std::size_t>(row.feature);
      if (seen[ri][fi]) throw std::logic_error("capability table: a feature listed twice");
      seen[ri][fi] = true;
      t[ri][fi] = Capability{row.support, row.source, row.note};
    }
  };
  fill(Runtime::kFsdp2, fsdp2_rows());
  fill(Runtime::kFsdp1, fsdp1_rows());
  fill(Runtime::kDeepSpeed, deepspeed_rows());
  fill(Runtime::kMegatron, megatron_rows());
  for (Runtime r : EnumValues<Runtime>::v) fill(r, activation_offload_rows(r));
  for (Runtime r : EnumValues<Runtime>::v) fill(r, ep_backend_capability_rows(r));
  for (Runtime r : EnumValues<Runtime>::v) fill(r, zeropp_rows(r));
  for (Runtime r : EnumValues<Runtime>::v) fill(r, blockfp_rows(r));
  for (Runtime r : EnumValues<Runtime>::v) fill(r, chunked_loss_rows(r));
  for (Runtime r : EnumValues<Runtime>::v) fill(r, moe_capacity_rows(r));
  for (const auto& r : seen)
    for (bool s : r)
      if (!s) throw std::logic_error("capability table: a runtime without an entry for a feature");
  return t;
}

const Table& table() {
  static const Table t = build_table();
  return t;
}

}  // namespace

Feature schedule_feature(PpSchedule s) {
  switch (s) {
    case PpSchedule::kGpipe:
      return Feature::kScheduleGpipe;
    case PpSchedule::k1F1B:
      return Feature::kSchedule1F1B;
    case PpSchedule::kInterleaved1F1B:
      return Feature::kScheduleInterleaved;
    case PpSchedule::kZbv:
      return Feature::kScheduleZbv;
    case PpSchedule::kDualPipeV:
      return Feature::kScheduleDualPipeV;
  }
  return Feature::kSchedule1F1B;
}

namespace {
struct FeatureInfo {
  const char* name;
  const char* flag;
};
// In Feature's order (a static_assert below keeps the count).
constexpr FeatureInfo kFeatureInfo[] = {
    {"ZeRO-1", "--zero"},                                                  // kZero1
    {"ZeRO-2", "--zero"},                                                  // kZero2
    {"ZeRO-3", "--zero"},                                                  // kZero3
    {"HSDP (shard group < data-parallel ranks)", "--shard-group"},         // kHsdp
    {"tensor parallelism", "--tp"},                                        // kTensorParallel
    {"sequence parallelism with TP", "--tp"},                              // kSequenceParallel
    {"TP with HSDP", "--shard-group"},                                     // kTpWithHsdp
    {"async TP", "--async-tp"},                                            // kAsyncTp
    {"async TP without torch.compile", "--async-tp"},                      // kAsyncTpEager
    {"torch.compile", "--compile"},                                        // kCompile
    {"prefetch depth > 1", "--prefetch"},                                  // kPrefetchDepth
    {"pipeline parallelism", "--pp"},                                      // kPipeline
    {"PP with ZeRO-2/3", "--pp"},                                          // kPipelineSharded
    {"PP schedule gpipe", "--pp-schedule"},                                // kScheduleGpipe
    {"PP schedule 1f1b", "--pp-schedule"},                                 // kSchedule1F1B
    {"PP schedule interleaved-1f1b", "--pp-schedule"},                     // kScheduleInterleaved
    {"PP schedule zbv", "--pp-schedule"},                                  // kScheduleZbv
    {"PP schedule dualpipev", "--pp-schedule"},                            // kScheduleDualPipeV
    {"context parallelism", "--cp"},                                       // kContextParallel
    {"expert parallelism", "--ep"},                                        // kExpertParallel
    {"optimizer-only offload", "--offload"},                               // kOffloadOptimizer
    {"parameter offload", "--offload"},                                    // kOffloadParams
    {"parameter offload below ZeRO-3", "--offload"},                       // kOffloadBelowZero3
    {"offload with ZeRO-0", "--offload"},                                  // kOffloadWithDdp
    {"parameter offload with gradient accumulation", "--offload"},         // kOffloadWithAccum
    {"float8 linears", "--fp8"},                                           // kFp8
    {"float8 all-gather", "--fp8-all-gather"},                             // kFp8AllGather
    {"root unit with embedding and head", "--root-params"},                // kRootParams
    {"last block kept after forward", "--keep-last-block"},                // kKeepLastBlock
    {"precision other than bf16-/fp16-mixed", "--precision"},              // kNonMixedPrecision
    {"optimizer other than adamw, adam or sgd", "--optimizer"},            // kOptimizerOther
    {"muon", "--optimizer"},                                               // kOptimizerMuon
    {"muon with TP- or EP-split matrices", "--optimizer"},                 // kMuonSplitMatrices
    {"adafactor over ZeRO-2/3 shards", "--optimizer"},                     // kAdafactorSharded
    {"offload with an optimizer other than adamw or adam", "--offload"},   // kOffloadOtherOptimizer
    {"fp16 mixed precision (dynamic loss scaling)", "--precision"},        // kFp16Mixed
    {"LoRA (frozen base, trainable adapters)", "--lora-rank"},             // kLora
    {"LoRA with TP", "--lora-rank"},                                       // kLoraTp
    {"quantised LoRA base with TP", "--lora-base"},                        // kLoraQuantTp
    {"4-bit LoRA base under ZeRO-1/2/3", "--lora-base"},                   // kLoraNf4Sharded
    {"LLM.int8 LoRA base under ZeRO-1/2/3", "--lora-base"},                // kLoraInt8Sharded
    {"activation offload of every block", "--activation-offload"},         // kActOffloadAll
    {"activation offload of the first N blocks", "--activation-offload"},  // kActOffloadLayers
    {"activation offload with AC", "--activation-offload"},                // kActOffloadWithAc
    {"activation offload without full AC", "--activation-offload"},        // kActOffloadWithoutFullAc
    {"activation offload with PP", "--activation-offload"},                // kActOffloadPipeline
    {"activation offload with torch.compile", "--activation-offload"},     // kActOffloadCompile
    {"all-gather token dispatch", "--ep-backend"},                         // kEpAllGather
    {"DeepEP token dispatch", "--ep-backend"},                             // kEpDeepEp
    {"DeepEP token dispatch without EP", "--ep-backend"},                  // kEpDeepEpWithoutEp
    {"expert loop with expert parallelism", "--moe-impl"},                 // kMoeLoopWithEp
    {"transformers 5.23 experts implementations", "--moe-impl"},           // kHfExperts
    {"transformers 5.23 experts with expert parallelism", "--moe-impl"},   // kHfExpertsWithEp
    {"ZeRO++ hpZ (secondary parameter partition)", "--hpz-partition"},     // kHpz
    {"hpZ with TP", "--hpz-partition"},                                    // kHpzWithTp
    {"ZeRO++ qwZ (int8 weight all-gather)", "--quantized-weights"},        // kQuantizedWeights
    {"ZeRO++ qgZ (int4 gradient all-to-all)", "--quantized-gradients"},    // kQuantizedGradients
    {"ZeRO++ below ZeRO-3", "--zero"},                                     // kZeroppBelowZero3
    {"hpZ or qgZ with expert parallelism", "--ep"},                        // kZeroppWithEp
    {"MXFP8 linears (block-scaled float8)", "--fp8"},                      // kMxfp8
    {"NVFP4 linears (block-scaled fp4)", "--fp8"},                         // kNvfp4
    {"chunked loss (head + loss per sequence chunk)", "--loss-impl"},      // kChunkedLoss
    {"chunked loss with TP, CP or PP", "--loss-impl"},                     // kChunkedLossParallel
    {"chunked loss without the head as its own unit", "--loss-impl"},      // kChunkedLossUnsharded
    {"chunked loss in 16 bits or with a held output", "--loss-impl"},      // kChunkedLoss16
    {"expert capacity factor (token dropping)", "--moe-capacity-factor"},  // kMoeCapacity
    {"capacity factor without the all-to-all dispatcher", "--moe-capacity-factor"},  // kMoeCapacityDispatcher
    {"DeepSpeed-MoE layer (capacity-padded experts)", "--moe-impl"},                 // kDeepSpeedMoe
};
static_assert(std::size(kFeatureInfo) == kFeatures);
}  // namespace

const char* to_string(Feature f) {
  return kFeatureInfo[static_cast<std::size_t>(f)].name;
}

const char* feature_flag(Feature f) {
  return kFeatureInfo[static_cast<std::size_t>(f)].flag;
}

const char* runtime_version(Runtime r) {
  switch (r) {
    case Runtime::kFsdp2:
      return "torch 2.15 + torchtitan 0.3.0";
    case Runtime::kFsdp1:
      return "torch 2.15";
    case Runtime::kDeepSpeed:
      return "deepspeed 0.19.8";
    case Runtime::kMegatron:
      return "megatron-core 0.8.0";
  }
  return "";
}

const Capability& capability(Runtime r, Feature f) {
  return table()[static_cast<std::size_t>(r)][static_cast<std::size_t>(f)];
}

std::array<bool, kFeatures> plan_features(const Plan& p, int dp) {
  std::array<bool, kFeatures> u{};
  auto use = [&](Feature f, bool on) { u[static_cast<std::size_t>(f)] = on; };
  const int group = p.shard_group == 0 ? dp : p.shard_group;
  const bool hsdp = p.zero > 0 && group < dp;
  use(Feature::kZero1, p.zero == 1);
  use(Feature::kZero2, p.zero == 2);
  use(Feature::kZero3, p.zero == 3);
  use(Feature::kHsdp, hsdp);
  use(Feature::kTensorParallel, p.tp > 1);
  use(Feature::kTpWithHsdp, p.tp > 1 && hsdp);
  use(Feature::kAsyncTp, p.async_tp && p.tp > 1);
  use(Feature::kAsyncTpEager, p.async_tp && p.tp > 1 && !p.compile);
  use(Feature::kCompile, p.compile);
  use(Feature::kPrefetchDepth, p.prefetch > 1);
  use(Feature::kPipeline, p.pp > 1);
  use(Feature::kPipelineSharded, p.pp > 1 && p.zero >= 2);
  if (p.pp > 1) use(schedule_feature(p.pp_schedule), true);
  use(Feature::kContextParallel, p.cp > 1);
  use(Feature::kExpertParallel, p.ep > 1);
  use(Feature::kOffloadOptimizer, p.offload == Offload::kOptimizer);
  use(Feature::kOffloadParams, p.offload == Offload::kParams);
  use(Feature::kOffloadBelowZero3, p.offload == Offload::kParams && p.zero > 0 && p.zero < 3);
  use(Feature::kOffloadWithDdp, p.offload != Offload::kNone && p.zero == 0);
  use(Feature::kOffloadWithAccum, p.offload == Offload::kParams && p.grad_accum > 1);
  use(Feature::kFp8, p.fp8 != Fp8::kNone);
  use(Feature::kFp8AllGather, p.fp8_all_gather);
  use(Feature::kRootParams, p.root_params != RootParams::kNone);
  use(Feature::kKeepLastBlock, p.keep_last_block);
  use(Feature::kNonMixedPrecision, !p.mixed());
  use(Feature::kFp16Mixed, p.fp16());
  const Optimizer o = p.optimizer;
  use(Feature::kOptimizerOther, o != Optimizer::kAdamW && o != Optimizer::kAdam && o != Optimizer::kSgd);
  use(Feature::kOptimizerMuon, o == Optimizer::kMuon);
  use(Feature::kMuonSplitMatrices, o == Optimizer::kMuon && (p.tp > 1 || p.ep > 1));
  use(Feature::kAdafactorSharded, o == Optimizer::kAdafactor && p.zero >= 2);
  use(Feature::kOffloadOtherOptimizer,
      p.offload != Offload::kNone && o != Optimizer::kAdamW && o != Optimizer::kAdam);
  const bool lora = p.lora_rank > 0;
  use(Feature::kLora, lora);
  use(Feature::kLoraTp, lora && p.tp > 1);
  use(Feature::kLoraQuantTp, lora && p.lora_base != LoraBase::kBf16 && p.tp > 1);
  use(Feature::kLoraNf4Sharded, lora && p.lora_base == LoraBase::kNf4 && p.zero >= 1);
  use(Feature::kLoraInt8Sharded, lora && p.lora_base == LoraBase::kInt8 && p.zero >= 1);
  const bool act_off = p.activation_offload != 0;
  use(Feature::kActOffloadAll, p.activation_offload == kActivationOffloadAll);
  use(Feature::kActOffloadLayers, p.activation_offload > 0);
  use(Feature::kActOffloadWithAc, act_off && p.ac != AcMode::kNone);
  use(Feature::kActOffloadWithoutFullAc, act_off && p.ac != AcMode::kFull);
  use(Feature::kActOffloadPipeline, act_off && p.pp > 1);
  use(Feature::kActOffloadCompile, act_off && p.compile);
  const EpBackend ep_backend = p.ep_dispatch();
  use(Feature::kEpAllGather, p.ep > 1 && ep_backend == EpBackend::kAllGather);
  use(Feature::kEpDeepEp, ep_backend == EpBackend::kDeepEp);
  use(Feature::kEpDeepEpWithoutEp, p.ep == 1 && ep_backend == EpBackend::kDeepEp);
  use(Feature::kMoeLoopWithEp, p.ep > 1 && p.moe_impl == MoeImpl::kLoop);
  const bool hf_experts = p.moe_impl == MoeImpl::kHfGroupedMm || p.moe_impl == MoeImpl::kHfEager;
  use(Feature::kHfExperts, hf_experts);
  use(Feature::kHfExpertsWithEp, hf_experts && p.ep > 1);
  const bool hpz = p.hpz_partition > 1;
  use(Feature::kHpz, hpz);
  use(Feature::kHpzWithTp, hpz && p.tp > 1);
  use(Feature::kQuantizedWeights, p.quantized_weights);
  use(Feature::kQuantizedGradients, p.quantized_gradients);
  use(Feature::kZeroppBelowZero3, (hpz || p.quantized_weights || p.quantized_gradients) && p.zero < 3);
  use(Feature::kZeroppWithEp, (hpz || p.quantized_gradients) && p.ep > 1);
  use(Feature::kMxfp8, p.fp8 == Fp8::kMxfp8);
  use(Feature::kNvfp4, p.fp8 == Fp8::kNvfp4);
  const bool chunked = p.loss() == LossImpl::kChunked;
  use(Feature::kChunkedLoss, chunked);
  use(Feature::kChunkedLossParallel, chunked && (p.tp > 1 || p.cp > 1 || p.pp > 1));
  use(Feature::kChunkedLossUnsharded, chunked && (p.zero == 0 || p.root_params != RootParams::kNone));
  use(Feature::kChunkedLoss16, chunked && (p.loss_dtype != Dtype::kFp32 || p.hold_logits));
  // --moe-impl deepspeed brings its own capacity (DeepSpeed-MoE's _capacity) and dispatch (its _AllToAll):
  // the capacity factor under it is that layer's, allowed wherever the layer is.
  const bool ds_moe = p.moe_impl == MoeImpl::kDeepSpeed;
  const bool capacity = p.moe_capacity_factor > 0 && !ds_moe;
  use(Feature::kMoeCapacity, capacity);
  use(Feature::kMoeCapacityDispatcher, capacity && p.ep_dispatch() != EpBackend::kAllToAll);
  use(Feature::kDeepSpeedMoe, ds_moe);
  return u;
}

std::optional<Feature> capability_refusal(const Plan& p, int dp) {
  const auto used = plan_features(p, dp);
  const auto& row = table()[static_cast<std::size_t>(p.runtime)];
  for (std::size_t f = 0; f < used.size(); ++f)
    if (used[f] && row[f].support != Support::kYes) return static_cast<Feature>(f);
  return std::nullopt;
}

std::string refusal_sentence(Runtime r, Feature f) {
  const Capability& c = capability(r, f);
  const std::string what = c.support == Support::kNotModelled ? " is not modelled for " : " is not in ";
  return std::string(to_string(f)) + what + to_string(r) + " (" + c.source + "): " + c.note;
}

void check_capabilities(const Plan& p, int dp) {
  if (const auto f = capability_refusal(p, dp))
    throw InputError::flag(feature_flag(*f), refusal_sentence(p.runtime, *f));
}

std::string capability_table_markdown() {
  std::string s =
      "# Capabilities of each runtime\n\n"
      "Generated from `simulator/plan/capabilities.cpp` (`capability_table_markdown()`; the test \"docs/"
      "capabilities.md is the capability table\" fails when this file differs). `simulate`, `memory` and "
      "`validate` refuse a plan that uses a feature its runtime does not have (exit 2, one sentence naming "
      "the runtime and its source); `plan` enumerates only what the table allows. yes: the runtime has it "
      "and the simulator lowers it; no: the runtime does not have it; not modelled: it has it, the simulator "
      "does not lower it (refused too).\n\n"
      "Versions: fsdp2 = torch 2.15 + torchtitan 0.3.0; fsdp1 = torch 2.15; deepspeed = deepspeed 0.19.8; "
      "megatron = megatron-core 0.8.0 (core_r0.8.0).\n\n"
      "| feature | flag | fsdp2 | fsdp1 | deepspeed | megatron |\n|---|---|---|---|---|---|\n";
  auto cell = [](Support x) {
    return x == Support::kYes ? "yes" : x == Support::kNo ? "no" : "not modelled";
  };
  for (int f = 0; f < kFeatures; ++f) {
    const auto F = static_cast<Feature>(f);
    s += std::string("| ") + to_string(F) + " | `" + feature_flag(F) + "` |";
    for (Runtime r : EnumValues<Runtime>::v) s += std::string(" ") + cell(capability(r, F).support) + " |";
    s += "\n";
  }
  s += "\n## Sources and notes\n";
  for (Runtime r : EnumValues<Runtime>::v) {
    s += std::string("\n### ") + to_string(r) + " (" + runtime_version(r) + ")\n\n";
    for (int f = 0; f < kFeatures; ++f) {
      const Capability& c = capability(r, static_cast<Feature>(f));
      s += std::string("- **") + to_string(static_cast<Feature>(f)) + "**: " + cell(c.support) + ". " +
           c.note + " (`" + c.source + "`)\n";
    }
  }
  return s;
}

}  // namespace shardplan
