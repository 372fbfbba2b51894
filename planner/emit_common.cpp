// What the emitters share (emit_common.hpp).
#include "planner/emit_common.hpp"

#include <fmt/format.h>

namespace shardplan::emit_detail {

const char* py_bool(bool b) {
  return b ? "True" : "False";
}

/// torch.nn.attention.SDPBackend's member for a backend.
const char* sdpa_backend_name(SdpaBackend b) {
  switch (b) {
    case SdpaBackend::kFlash:
      return "FLASH_ATTENTION";
    case SdpaBackend::kCudnn:
      return "CUDNN_ATTENTION";
    case SdpaBackend::kEfficient:
      return "EFFICIENT_ATTENTION";
  }
  return "FLASH_ATTENTION";
}

/// Lines of `notes` as comments ("# " prefix), for the Python and TOML outputs.
std::string comment_lines(const std::vector<std::string>& notes) {
  std::string s;
  for (const auto& n : notes) s += "# NOTE: " + n + "\n";
  return s;
}

/// torch.distributed.pipelining's name of a schedule (get_schedule_class, torch/distributed/pipelining/
/// schedules.py), as torchtitan's pipeline_parallel_schedule takes it.
const char* titan_schedule(PpSchedule s) {
  switch (s) {
    case PpSchedule::kGpipe:
      return "GPipe";
    case PpSchedule::k1F1B:
      return "1F1B";
    case PpSchedule::kInterleaved1F1B:
      return "Interleaved1F1B";
    case PpSchedule::kZbv:
      return "ZBVZeroBubble";
    case PpSchedule::kDualPipeV:
      return "DualPipeV";
  }
  return "1F1B";
}

/// The PYTORCH_CUDA_ALLOC_CONF value of the plan's allocator knobs (c10/core/AllocatorConfig.cpp option
/// names: expandable_segments, garbage_collection_threshold), or "" with PyTorch's defaults. The variable is
/// read when the caching allocator initialises, so it is set before the job touches CUDA.
std::string alloc_conf(const Plan& p) {
  std::string s;
  if (p.allocator == AllocatorMode::kExpandable) s = "expandable_segments:True";
  if (p.allocator_gc_threshold > 0)
    s += (s.empty() ? "" : ",") + fmt::format("garbage_collection_threshold:{}", p.allocator_gc_threshold);
  return s;
}

/// torchtitan's module_fqns_per_model_part for the plan's stages, or "" when torchtitan's own split is the
/// plan's (no --pp-layers, the schedule's default stages per rank: 1 for GPipe / 1F1B, 2 for the looped ones,
/// torchtitan/distributed/pipeline_parallel.py _get_pipeline_metadata). Module names of torchtitan 0.3.0's
/// decoders: tok_embeddings, layers.N, norm, lm_head.
std::string titan_fqn_parts(const Plan& p, const ModelGraph& model) {
  const bool single = p.pp_schedule == PpSchedule::kGpipe || p.pp_schedule == PpSchedule::k1F1B;
  if (p.pp_layers.empty() && std::max(p.virtual_stages, 1) == (single ? 1 : 2)) return "";
  const std::vector<int> blocks = stage_blocks(p, model.blocks());
  std::string s = "[";
  int next = 0;
  for (std::size_t k = 0; k < blocks.size(); ++k) {
    std::vector<std::string> names;
    if (k == 0) names.push_back("tok_embeddings");
    for (int b = 0; b < blocks[k]; ++b) names.push_back("layers." + std::to_string(next++));
    if (k + 1 == blocks.size()) names.push_back("norm"), names.push_back("lm_head");
    s += k ? ", [" : "[";
    for (std::size_t i = 0; i < names.size(); ++i) s += (i ? ", \"" : "\"") + names[i] + "\"";
    s += "]";
  }
  return s + "]";
}

}  // namespace shardplan::emit_detail
