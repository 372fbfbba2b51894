// The model preset registry and file-kind detection for --model.
#include "simulator/model/presets.hpp"

#include "core/embedded.hpp"

namespace shardplan_generated {
const std::vector<shardplan::EmbeddedFile>& model_presets();
}  // namespace shardplan_generated

namespace shardplan {

std::vector<std::string> model_preset_names() {
  return embedded_names(shardplan_generated::model_presets());
}

const char* model_preset_text(const std::string& name) {
  return embedded_text(shardplan_generated::model_presets(), name, "model", "--model");
}

ModelGraph load_model_json(const Json& j, const std::string& file, const std::string& where) {
  if (!j.is_object()) throw InputError(file, where.empty() ? "/" : where, "expected a model object");
  if (j.contains("model_type")) return ModelGraph::from_spec(parse_hf_config(j, file));
  std::string schema = j.contains("schema") && j["schema"].is_string() ? j["schema"].get<std::string>() : "";
  if (schema == "shardplan.graph/1") return ModelGraph::from_graph_json(j, file);
  if (schema.empty() || schema == "shardplan.model/1")
    return ModelGraph::from_spec(parse_model_spec(JsonObj(j, file, where)));
  throw InputError(
      file, where + "/schema",
      "unknown schema \"" + schema +
          "\"; a model is a shardplan.model/1 spec, a shardplan.graph/1 graph or a Hugging Face config.json");
}

ModelGraph load_model(const std::string& s) {
  if (!looks_like_path(s))
    return load_model_json(parse_json_text(model_preset_text(s), "preset " + s), "preset " + s, "");
  return load_model_json(load_json_file(s), s, "");
}

}  // namespace shardplan
