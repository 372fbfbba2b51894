// Preset registries and file-kind detection for --model and --cluster.
#include "simulator/presets.hpp"

#include <filesystem>

#include "simulator/core/embedded.hpp"

namespace shardplan_generated {
const std::vector<shardplan::EmbeddedFile>& model_presets();
const std::vector<shardplan::EmbeddedFile>& cluster_presets();
}  // namespace shardplan_generated

namespace shardplan {

static std::vector<std::string> names_of(const std::vector<EmbeddedFile>& files) {
  std::vector<std::string> n;
  for (const auto& f : files) n.emplace_back(f.name);
  return n;
}
std::vector<std::string> model_preset_names() { return names_of(shardplan_generated::model_presets()); }
std::vector<std::string> cluster_preset_names() { return names_of(shardplan_generated::cluster_presets()); }

static const char* find_text(const std::vector<EmbeddedFile>& files, const std::string& name, const char* what,
                             const char* flag) {
  for (const auto& f : files)
    if (name == f.name) return f.text;
  auto names = names_of(files);
  std::string msg = std::string("unknown ") + what + " \"" + name + "\"";
  std::string sug = did_you_mean_list(name, names);
  if (!sug.empty()) msg += " (did you mean \"" + sug + "\"?)";
  msg += "; presets: " + join_names(names) + "; or give a path to a JSON file";
  throw InputError::flag(flag, msg);
}
const char* model_preset_text(const std::string& name) {
  return find_text(shardplan_generated::model_presets(), name, "model", "--model");
}
const char* cluster_preset_text(const std::string& name) {
  return find_text(shardplan_generated::cluster_presets(), name, "cluster", "--cluster");
}

static bool looks_like_path(const std::string& s) {
  // The error_code overload: a name the filesystem cannot even look up (longer than NAME_MAX) is a preset name.
  std::error_code ec;
  return s.find('/') != std::string::npos || s.find(".json") != std::string::npos || std::filesystem::exists(s, ec);
}

ModelGraph load_model_json(const Json& j, const std::string& file, const std::string& where) {
  if (!j.is_object()) throw InputError(file, where.empty() ? "/" : where, "expected a model object");
  if (j.contains("model_type")) return ModelGraph::from_spec(parse_hf_config(j, file));
  std::string schema = j.contains("schema") && j["schema"].is_string() ? j["schema"].get<std::string>() : "";
  if (schema == "shardplan.graph/1") return ModelGraph::from_graph_json(j, file);
  if (schema.empty() || schema == "shardplan.model/1") return ModelGraph::from_spec(parse_model_spec(JsonObj(j, file, where)));
  throw InputError(file, where + "/schema",
                   "unknown schema \"" + schema +
                       "\"; a model is a shardplan.model/1 spec, a shardplan.graph/1 graph or a Hugging Face config.json");
}

ModelGraph load_model(const std::string& s) {
  if (!looks_like_path(s)) return load_model_json(parse_json_text(model_preset_text(s), "preset " + s), "preset " + s, "");
  return load_model_json(load_json_file(s), s, "");
}

ClusterSpec load_cluster_json(const Json& j, const std::string& file, const std::string& where) {
  return parse_cluster_spec(JsonObj(j, file, where));
}

ClusterSpec load_cluster_spec(const std::string& s) {
  if (!looks_like_path(s)) return load_cluster_json(parse_json_text(cluster_preset_text(s), "preset " + s), "preset " + s, "");
  return load_cluster_json(load_json_file(s), s, "");
}

}  // namespace shardplan
