// Cluster preset registry and --cluster loading.
#include "topologies/presets.hpp"

#include "core/embedded.hpp"

namespace shardplan_generated {
const std::vector<shardplan::EmbeddedFile>& cluster_presets();
}  // namespace shardplan_generated

namespace shardplan {

std::vector<std::string> cluster_preset_names() {
  return embedded_names(shardplan_generated::cluster_presets());
}

const char* cluster_preset_text(const std::string& name) {
  return embedded_text(shardplan_generated::cluster_presets(), name, "cluster", "--cluster");
}

ClusterSpec load_cluster_json(const Json& j, const std::string& file, const std::string& where) {
  return parse_cluster_spec(JsonObj(j, file, where));
}

ClusterSpec load_cluster_spec(const std::string& s) {
  if (!looks_like_path(s))
    return load_cluster_json(parse_json_text(cluster_preset_text(s), "preset " + s), "preset " + s, "");
  return load_cluster_json(load_json_file(s), s, "");
}

}  // namespace shardplan
