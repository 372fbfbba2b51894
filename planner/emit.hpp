// Framework configs for a plan: a PyTorch FSDP2 snippet, a DeepSpeed ds_config.json, a torchtitan TOML.
#pragma once
#include <string>

#include "simulator/model_graph.hpp"
#include "simulator/plan.hpp"

namespace shardplan {

std::string emit_fsdp2(const Plan& p, const ModelGraph& model, int gpus_per_node);
std::string emit_deepspeed(const Plan& p, const ModelGraph& model);
std::string emit_torchtitan(const Plan& p, const ModelGraph& model, int gpus);
/// "fsdp2:FILE" etc.; returns {kind, file}; InputError for an unknown kind.
std::pair<std::string, std::string> parse_emit_spec(const std::string& spec);
std::string emit(const std::string& kind, const Plan& p, const ModelGraph& model, int gpus, int gpus_per_node);

}  // namespace shardplan
