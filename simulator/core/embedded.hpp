// Files (model and cluster presets) embedded into the binary at build time, so shardplan runs from any directory.
#pragma once
#include <string>
#include <vector>

namespace shardplan {
struct EmbeddedFile {
  const char* name;  ///< file stem, e.g. "llama3-70b"
  const char* text;  ///< the JSON text
};
}  // namespace shardplan
