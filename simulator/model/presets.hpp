// The registry of built-in model presets (embedded at build time) and the loader that accepts a preset name
// or a file path and detects the kind of file from its content. Cluster presets: topologies/presets.hpp.
#pragma once
#include <string>
#include <vector>

#include "simulator/model/model_graph.hpp"
#include "topologies/presets.hpp"

namespace shardplan {

std::vector<std::string> model_preset_names();
/// The preset's JSON text; InputError naming the valid presets if unknown.
const char* model_preset_text(const std::string& name);

/// `--model NAME|PATH`: a preset name, a model spec JSON, a graph JSON or a Hugging Face config.json.
ModelGraph load_model(const std::string& name_or_path);
/// Same, from an already-parsed JSON value (an inline spec in a run record); `where` names it in errors.
ModelGraph load_model_json(const Json& j, const std::string& file, const std::string& where);

}  // namespace shardplan
