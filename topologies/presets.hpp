// The registry of built-in cluster presets (topologies/presets/*.json, embedded at build time) and the loader
// for `--cluster NAME|PATH`.
#pragma once
#include <string>
#include <vector>

#include "core/json_reader.hpp"
#include "topologies/cluster.hpp"

namespace shardplan {

std::vector<std::string> cluster_preset_names();
/// The preset's JSON text; InputError naming the valid presets if unknown.
const char* cluster_preset_text(const std::string& name);
/// `--cluster NAME|PATH`.
ClusterSpec load_cluster_spec(const std::string& name_or_path);
/// From an already-parsed JSON value (an inline cluster in a run record); `where` names it in errors.
ClusterSpec load_cluster_json(const Json& j, const std::string& file, const std::string& where);

}  // namespace shardplan
