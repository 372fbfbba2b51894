// Reading a user's own training config (a DeepSpeed ds_config JSON, a torchtitan config: torchtitan 0.3.0's
// Python config function or the 2024-2025 TOML, an accelerate FSDP YAML) into plan knobs, for `--from FILE`
// (docs/formats.md, "--from").
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace shardplan {

struct ImportedConfig {
  std::string format;                        ///< "deepspeed", "torchtitan", "accelerate"
  std::map<std::string, std::string> knobs;  ///< knob key (simulator/plan/knobs.hpp) -> value text
  std::int64_t global_batch = 0;             ///< sequences per optimizer step the file states (0: none)
  std::string global_batch_key;              ///< the key it came from, for the consistency error
  std::vector<std::string> unmodelled;       ///< keys that change memory or time but are not modelled
  /// Keys the reader does not know, set in the file: they may change memory or time (named on stderr).
  std::vector<std::string> unread;
  /// Values the file leaves to someone else ("auto", a layout's defaults) and what the reader took for them.
  std::vector<std::string> assumed;
  /// The framework version the file's layout dates it to ("torchtitan@2025-02-14"), and why; "" when none.
  std::string framework, framework_reason;
  std::string model;  ///< the torchtitan flavor the file builds ("llama3 8B"), if any
  /// knob key -> "field = value" of the file it was read from (parallel degrees), so that a plan the --model
  /// cannot take names the file's field rather than a flag nobody gave.
  std::map<std::string, std::string> source;
};

/// Reads `path` by its extension (.json, .py or .py:FUNCTION, .toml, .yaml/.yml); InputError naming the file,
/// key and reason for a file that cannot be read or a value the plan cannot take.
ImportedConfig import_config(const std::string& path);

}  // namespace shardplan
