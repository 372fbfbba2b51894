// Reading a user's own training config (a DeepSpeed ds_config JSON, a torchtitan TOML of the 2024-2025
// format, an accelerate FSDP YAML) into plan knobs, for `--from FILE` (docs/formats.md, "--from").
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace shardplan {

struct ImportedConfig {
  std::string format;                        ///< "deepspeed", "torchtitan", "accelerate"
  std::map<std::string, std::string> knobs;  ///< knob key (simulator/knobs.hpp) -> value text
  std::int64_t global_batch = 0;             ///< sequences per optimizer step the file states (0: none)
  std::string global_batch_key;              ///< the key it came from, for the consistency error
  std::vector<std::string> unmodelled;       ///< keys that change memory or time but are not modelled
};

/// Reads `path` by its extension (.json, .toml, .yaml/.yml); InputError naming the file, key and reason for a
/// file that cannot be read or a value the plan cannot take.
ImportedConfig import_config(const std::string& path);

}  // namespace shardplan
