// Preset lookup shared by the model and cluster registries.
#include "core/embedded.hpp"

#include <filesystem>

#include "core/error.hpp"

namespace shardplan {

std::vector<std::string> embedded_names(const std::vector<EmbeddedFile>& files) {
  std::vector<std::string> n;
  for (const auto& f : files) n.emplace_back(f.name);
  return n;
}

const char* embedded_text(const std::vector<EmbeddedFile>& files, const std::string& name, const char* what,
                          const char* flag) {
  for (const auto& f : files)
    if (name == f.name) return f.text;
  auto names = embedded_names(files);
  std::string msg = std::string("unknown ") + what + " \"" + name + "\"";
  std::string sug = did_you_mean_list(name, names);
  if (!sug.empty()) msg += " (did you mean \"" + sug + "\"?)";
  msg += "; presets: " + join_names(names) + "; or give a path to a JSON file";
  throw InputError::flag(flag, msg);
}

bool looks_like_path(const std::string& s) {
  // The error_code overload: a name the filesystem cannot even look up (longer than NAME_MAX) is a preset
  // name.
  std::error_code ec;
  return s.find('/') != std::string::npos || s.find(".json") != std::string::npos ||
         std::filesystem::exists(s, ec);
}

}  // namespace shardplan
