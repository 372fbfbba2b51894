// Shared pieces of the --from importers (planner/importers.hpp): reading a file's text and lines, value text
// checked against the type a key wants, the torchtitan parallelism keys both torchtitan formats share, and
// each format's importer. Internal to planner/import/; callers use planner/importers.hpp.
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "planner/importers.hpp"

namespace shardplan::import {

// --- text (text.cpp)
std::string read_file(const std::string& path);
/// The file's lines, as std::getline splits them (InputError naming the file when it cannot be opened).
std::vector<std::string> read_lines(const std::string& path);
std::string lower(std::string s);
std::string trim(const std::string& s);
/// A value written in matching single or double quotes, without them; any other text as it is.
std::string unquote(const std::string& v);
/// "line N", the key of an InputError about a file's line N.
std::string line_key(int n);
/// The value text `v` of `key` as an integer / true|false / float32|bfloat16 (fp32, bf16), or InputError.
std::string int_text(const std::string& path, const std::string& key, const std::string& v);
std::string bool_text(const std::string& path, const std::string& key, const std::string& v);
std::string dtype_text(const std::string& path, const std::string& key, const std::string& v);

// --- torchtitan keys both formats share (titan_shared.cpp)
/// The file's value text for a dotted key ("parallelism.tensor_parallel_degree"), or nullptr; a getter
/// records the keys asked for (the "not read" list).
using TitanGet = std::function<const std::string*(const char*)>;
/// Parallel degrees (ParallelismConfig / [parallelism]): pipeline (degree, schedule, stages), context and
/// expert parallelism, data-parallel shard and replicate degrees as ZeRO stage and shard group, TP.
void read_titan_parallelism(const std::string& path, const TitanGet& get, ImportedConfig& c);
/// Under pipeline parallelism: the micro-batch size and count out of local_batch_size.
void read_titan_pipeline_batch(const std::string& path, const TitanGet& get, ImportedConfig& c);
/// training.mixed_precision_param as the precision (when `read_param`), mixed_precision_reduce as the
/// reduce dtype, enable_cpu_offload true as parameter offload; returns enable_cpu_offload's text or nullptr.
const std::string* read_titan_precision(const std::string& path, const TitanGet& get, bool read_param,
                                        ImportedConfig& c);

// --- the formats
ImportedConfig import_deepspeed(const std::string& path);      // deepspeed.cpp
ImportedConfig import_torchtitan(const std::string& path);     // torchtitan_toml.cpp
ImportedConfig import_torchtitan_py(const std::string& path);  // torchtitan_py.cpp
ImportedConfig import_accelerate(const std::string& path);     // accelerate.cpp
ImportedConfig import_peft(const std::string& path);           // peft.cpp
/// Whether the file is named adapter_config.json, PEFT's name for an adapter's config (peft.cpp).
bool peft_adapter_file(const std::string& path);
/// The TOML's layout dates it (torchtitan_toml_date.cpp): c.framework / framework_reason, or an assumption.
void date_titan_toml(const std::map<std::string, std::string>& t, ImportedConfig& c);

}  // namespace shardplan::import
