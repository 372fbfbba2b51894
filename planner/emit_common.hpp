// Internal to planner/emit*.cpp: what the emitters share (Python and TOML spellings of plan values, the notes
// as comments, the allocator's launch variable, torchtitan's pipeline stages).
#pragma once
#include <string>
#include <vector>

#include "simulator/model/model.hpp"
#include "simulator/plan/plan.hpp"

namespace shardplan::emit_detail {

/// Python's spelling of a bool.
const char* py_bool(bool b);
/// torch.nn.attention.SDPBackend's member for a backend.
const char* sdpa_backend_name(SdpaBackend b);
/// Lines of `notes` as comments ("# NOTE: " prefix), for the Python and TOML outputs.
std::string comment_lines(const std::vector<std::string>& notes);
/// torch.distributed.pipelining's name of a schedule, as torchtitan's pipeline_parallel_schedule takes it.
const char* titan_schedule(PpSchedule s);
/// The PYTORCH_CUDA_ALLOC_CONF value of the plan's allocator knobs, or "" with PyTorch's defaults.
std::string alloc_conf(const Plan& p);
/// torchtitan's module_fqns_per_model_part for the plan's stages, or "" where torchtitan's own split is the
/// plan's.
std::string titan_fqn_parts(const Plan& p, const ModelGraph& model);

}  // namespace shardplan::emit_detail
