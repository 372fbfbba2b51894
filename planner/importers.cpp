// --from FILE: the importer of the file's format (planner/import/: deepspeed.cpp, torchtitan_toml.cpp,
// torchtitan_py.cpp, accelerate.cpp). Each maps the keys of a framework config to plan knobs as the framework
// means them; the mapping of every key is documented in docs/formats.md ("--from").
#include "planner/importers.hpp"

#include <filesystem>

#include "core/error.hpp"
#include "core/json_reader.hpp"
#include "planner/import/common.hpp"

namespace shardplan {

ImportedConfig import_config(const std::string& path) {
  using namespace import;
  auto ends = [&](const char* e) {
    const std::string s(e);
    return path.size() >= s.size() && lower(path.substr(path.size() - s.size())) == s;
  };
  // A PEFT checkpoint folder (adapter_config.json beside adapter_model.safetensors), its adapter_config.json,
  // or a JSON file of a LoRA adapter under another name (a "peft_type" key; a ds_config has none).
  if (std::error_code ec; std::filesystem::is_directory(path, ec)) {
    const std::string adapter = (std::filesystem::path(path) / "adapter_config.json").string();
    if (!std::filesystem::exists(adapter, ec))
      throw InputError(path, "",
                       "a folder is read as a PEFT adapter checkpoint, and it has no adapter_config.json");
    ImportedConfig c = import_peft(adapter);
    // A base model's config.json beside the adapter (a merged or hand-assembled checkpoint): --model reads
    // it.
    if (const auto base = std::filesystem::path(path) / "config.json"; std::filesystem::exists(base, ec))
      c.assumed.push_back(base.string() + " is beside the adapter: give --model " + base.string() +
                          " to simulate that base model");
    return c;
  }
  if (ends(".json") && peft_adapter_file(path)) return import_peft(path);
  if (ends(".json")) {
    const Json j = load_json_file(path);
    if (j.is_object() && j.contains("peft_type")) return import_peft(path);
    return import_deepspeed(path);
  }
  if (ends(".toml")) return import_torchtitan(path);
  if (ends(".py") || path.find(".py:") != std::string::npos) return import_torchtitan_py(path);
  if (ends(".yaml") || ends(".yml")) return import_accelerate(path);
  throw InputError(
      path, "",
      "unknown config format: expected a DeepSpeed .json, a torchtitan .py (0.3.0 config function) or .toml "
      "(2024-2025), an accelerate .yaml, or a PEFT adapter_config.json (or its folder)");
}

}  // namespace shardplan
