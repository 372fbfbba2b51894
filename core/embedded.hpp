// Files (model and cluster presets) embedded into the binary at build time, so shardplan runs from any
// directory, and the lookup every preset registry shares: by name, with the valid names (and a did-you-mean)
// on a miss.
#pragma once
#include <string>
#include <vector>

namespace shardplan {
struct EmbeddedFile {
  const char* name;  ///< file stem, e.g. "llama3-70b"
  const char* text;  ///< the JSON text
};

std::vector<std::string> embedded_names(const std::vector<EmbeddedFile>& files);
/// The text of the preset `name`; InputError on `flag` naming the valid presets (`what`: "model", "cluster").
const char* embedded_text(const std::vector<EmbeddedFile>& files, const std::string& name, const char* what,
                          const char* flag);
/// A --model/--cluster argument that names a file rather than a preset.
bool looks_like_path(const std::string& s);
}  // namespace shardplan
