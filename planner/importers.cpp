// --from FILE: the importer of the file's format (planner/import/: deepspeed.cpp, torchtitan_toml.cpp,
// torchtitan_py.cpp, accelerate.cpp). Each maps the keys of a framework config to plan knobs as the framework
// means them; the mapping of every key is documented in docs/formats.md ("--from").
#include "planner/importers.hpp"

#include "core/error.hpp"
#include "planner/import/common.hpp"

namespace shardplan {

ImportedConfig import_config(const std::string& path) {
  using namespace import;
  auto ends = [&](const char* e) {
    const std::string s(e);
    return path.size() >= s.size() && lower(path.substr(path.size() - s.size())) == s;
  };
  if (ends(".json")) return import_deepspeed(path);
  if (ends(".toml")) return import_torchtitan(path);
  if (ends(".py") || path.find(".py:") != std::string::npos) return import_torchtitan_py(path);
  if (ends(".yaml") || ends(".yml")) return import_accelerate(path);
  throw InputError(
      path, "",
      "unknown config format: expected a DeepSpeed .json, a torchtitan .py (0.3.0 config function) or .toml "
      "(2024-2025), or an accelerate .yaml");
}

}  // namespace shardplan
