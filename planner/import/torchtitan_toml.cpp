// The torchtitan TOML importer of --from (docs/formats.md, "--from"): the JobConfig layouts of 2024-2026
// (torchtitan/config/job_config.py of each date), older keys read as the ones they became.
#include <set>

#include "core/error.hpp"
#include "planner/import/common.hpp"

namespace shardplan::import {

namespace {

/// A small TOML reader for the flat subset torchtitan configs use: "section.key" -> raw value text (strings
/// unquoted; arrays kept as written).
std::map<std::string, std::string> read_toml(const std::string& path) {
  std::map<std::string, std::string> out;
  std::string section;
  int n = 0;
  for (const std::string& line : read_lines(path)) {
    ++n;
    std::string s = line;
    bool quoted = false;
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '"') quoted = !quoted;
      if (s[i] == '#' && !quoted) {
        s = s.substr(0, i);
        break;
      }
    }
    s = trim(s);
    if (s.empty()) continue;
    if (s.front() == '[') {
      if (s.back() != ']') throw InputError(path, line_key(n), "unterminated section header");
      section = trim(s.substr(1, s.size() - 2));
      continue;
    }
    const auto eq = s.find('=');
    if (eq == std::string::npos) throw InputError(path, line_key(n), "expected KEY = VALUE");
    out[(section.empty() ? "" : section + ".") + trim(s.substr(0, eq))] = unquote(trim(s.substr(eq + 1)));
  }
  return out;
}

/// Keys of a torchtitan TOML that leave per-GPU memory and step time alone (logging, checkpoints, data paths,
/// learning rate, validation): not named when the reader does not use them. Whole sections end with '.'.
bool titan_toml_inert(const std::string& key) {
  static const char* sections[] = {"job.",
                                   "profiling.",
                                   "metrics.",
                                   "checkpoint.",
                                   "validation.",
                                   "comm.",
                                   "lr_scheduler.",
                                   "fault_tolerance.",
                                   "memory_estimation.",
                                   "experimental.custom_import",
                                   "experimental.custom_args_module"};
  for (const char* sec : sections)
    if (key.rfind(sec, 0) == 0) return true;
  static const std::set<std::string> keys = {
      "model.name",
      "model.flavor",
      "model.tokenizer_path",
      "model.hf_assets_path",
      "optimizer.lr",
      "optimizer.eps",
      "optimizer.weight_decay",
      "optimizer.beta1",
      "optimizer.beta2",
      "optimizer.early_step_in_backward",
      "training.dataset",
      "training.dataset_path",
      "training.steps",
      "training.max_norm",
      "training.warmup_steps",
      "training.seed",
      "training.deterministic",
      "training.gc_freq",
      "training.gc_debug",
      "training.dataloader",
      "float8.precompute_float8_dynamic_scale_for_fsdp",
      "quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp",
      "quantize.dense.float8.precompute_float8_dynamic_scale_for_fsdp",
      "compile.components",
      "activation_checkpoint.selective_ac_option"};
  return keys.count(key) > 0;
}

/// Older layouts (before [parallelism], 2025-04): the parallel degrees under [training] and [experimental],
/// the float8 switch under [float8]; newer ones (2025-09): float8 under [quantize.dense.float8] /
/// [quantize.linear.float8]. Each is read as the [parallelism] / [float8] key it became.
void move_old_keys(std::map<std::string, std::string>& t, std::set<std::string>& read) {
  const std::pair<const char*, const char*> moved[] = {
      {"training.data_parallel_shard_degree", "parallelism.data_parallel_shard_degree"},
      {"training.data_parallel_replicate_degree", "parallelism.data_parallel_replicate_degree"},
      {"training.data_parallel_degree", "parallelism.data_parallel_shard_degree"},
      {"training.tensor_parallel_degree", "parallelism.tensor_parallel_degree"},
      {"training.enable_async_tensor_parallel", "parallelism.enable_async_tensor_parallel"},
      {"experimental.enable_async_tensor_parallel", "parallelism.enable_async_tensor_parallel"},
      {"experimental.pipeline_parallel_degree", "parallelism.pipeline_parallel_degree"},
      {"experimental.pipeline_parallel_schedule", "parallelism.pipeline_parallel_schedule"},
      {"experimental.context_parallel_degree", "parallelism.context_parallel_degree"},
      {"experimental.expert_parallel_degree", "parallelism.expert_parallel_degree"},
      {"quantize.dense.float8.enable_fsdp_float8_all_gather", "float8.enable_fsdp_float8_all_gather"},
      {"quantize.linear.float8.enable_fsdp_float8_all_gather", "float8.enable_fsdp_float8_all_gather"},
      {"quantize.dense.float8.recipe_name", "float8.recipe_name"},
      {"quantize.linear.float8.recipe_name", "float8.recipe_name"},
      {"quantize.dense.float8.filter_fqns", "float8.filter_fqns"},
      {"quantize.linear.float8.filter_fqns", "float8.filter_fqns"},
      {"quantize.dense.float8.emulate", "float8.emulate"},
      {"quantize.linear.float8.emulate", "float8.emulate"}};
  for (const auto& [old_key, new_key] : moved)
    if (auto it = t.find(old_key); it != t.end()) {
      read.insert(old_key);
      if (!t.count(new_key)) t[new_key] = it->second, read.insert(new_key);
    }
}

/// FSDP's resharding, async TP, compiled autograd and activation checkpointing.
void read_sharding_ac(const std::string& path, const TitanGet& get, ImportedConfig& c) {
  if (auto* v = get("parallelism.fsdp_reshard_after_forward")) {
    if (*v == "always")
      c.knobs["reshard_after_forward"] = "true";
    else if (*v == "never")
      c.knobs["reshard_after_forward"] = "false";
    else if (*v != "default")
      throw InputError(path, "parallelism.fsdp_reshard_after_forward",
                       "expected default, always or never, got \"" + *v + "\"");
  }
  if (auto* v = get("parallelism.enable_async_tensor_parallel"))
    c.knobs["async_tp"] = bool_text(path, "parallelism.enable_async_tensor_parallel", *v);
  if (auto* v = get("parallelism.enable_compiled_autograd"); v && lower(*v) == "true")
    c.unmodelled.push_back("parallelism.enable_compiled_autograd");
  if (auto* v = get("activation_checkpoint.mode")) {
    if (*v != "none" && *v != "selective" && *v != "full")
      throw InputError(path, "activation_checkpoint.mode",
                       "expected none, selective or full, got \"" + *v + "\"");
    c.knobs["ac"] = *v;
    if (auto* o = get("activation_checkpoint.selective_ac_option"); o && *v == "selective" && *o != "op")
      c.unmodelled.push_back("activation_checkpoint.selective_ac_option " + *o +
                             " (layer-level SAC; simulated as the op policy)");
  }
}

/// The micro-batch, the global batch, the sequence length and (before 2025-06-05) the pipelined micro-batch
/// count, which becomes t's pipeline_parallel_microbatch_size.
void read_batch(const std::string& path, const TitanGet& get, std::map<std::string, std::string>& t,
                ImportedConfig& c) {
  for (const char* k : {"training.local_batch_size", "training.batch_size"})
    if (auto* v = get(k)) c.knobs["mbs"] = int_text(path, k, *v);
  if (auto* v = get("training.global_batch_size");
      v && std::stoll(int_text(path, "training.global_batch_size", *v)) > 0) {
    c.global_batch = std::stoll(*v);
    c.global_batch_key = "training.global_batch_size";
  }
  // Before 8570415c3 (2025-06-05) pipelined micro-batches were a count: batch_size split into
  // experimental.pipeline_parallel_microbatches micro-batches (default: the pipeline degree).
  if (auto* v = get("experimental.pipeline_parallel_microbatches");
      v && !t.count("parallelism.pipeline_parallel_microbatch_size")) {
    const long long n = std::stoll(int_text(path, "experimental.pipeline_parallel_microbatches", *v));
    const long long local = c.knobs.count("mbs") ? std::stoll(c.knobs["mbs"]) : 8;
    if (n < 1 || local % n)
      throw InputError(path, "experimental.pipeline_parallel_microbatches",
                       std::to_string(n) + " does not divide training.batch_size " + std::to_string(local));
    t["parallelism.pipeline_parallel_microbatch_size"] = std::to_string(local / n);
  }
  if (auto* v = get("experimental.pipeline_parallel_split_points"); v && *v != "[]")
    c.unmodelled.push_back("experimental.pipeline_parallel_split_points " + *v +
                           " (torchtitan's even split is simulated; give --pp-layers)");
  if (auto* v = get("training.seq_len")) c.knobs["seq"] = int_text(path, "training.seq_len", *v);
}

/// Mixed precision, CPU offload, compile and the norm kernel.
void read_precision_compile(const std::string& path, const TitanGet& get, ImportedConfig& c) {
  read_titan_precision(path, get, true, c);
  for (const char* k : {"compile.enable", "training.compile"})
    if (auto* v = get(k)) c.knobs["compile"] = bool_text(path, k, *v);
  if (auto* comps = get("compile.components"); comps && c.knobs.count("compile") &&
                                               c.knobs["compile"] == "true" &&
                                               comps->find("model") == std::string::npos) {
    c.knobs["compile"] = "false";
    c.unmodelled.push_back("compile.components " + *comps + " without \"model\" (simulated as no compile)");
  }
  // Norms (model.norm_type, until 2025-04-17): rmsnorm is torchtitan's Python RMSNorm of that date (the
  // version's fp32_norm default), fused_rmsnorm its Triton kernel (no fp32 copy), the layernorms are not
  // modelled for llama models.
  if (auto* v = get("model.norm_type")) {
    if (*v == "fused_rmsnorm")
      c.knobs["fp32_norm"] = "false";
    else if (*v != "rmsnorm")
      c.unmodelled.push_back("model.norm_type " + *v + " (the model's norm is simulated)");
  }
}

/// Float8 training (model.converters, [float8], the mid-2024 training.fp8_linear) and other converters.
void read_float8(const std::string& path, const TitanGet& get, std::set<std::string>& read,
                 ImportedConfig& c) {
  const std::string* conv = get("model.converters");
  const bool fp8 = (conv && conv->find("float8") != std::string::npos) ||
                   (get("float8.enable_float8_linear") && *get("float8.enable_float8_linear") == "true") ||
                   (get("training.fp8_linear") && lower(*get("training.fp8_linear")) == "true");  // mid-2024
  if (fp8) {
    c.knobs["fp8"] =
        get("float8.recipe_name") && *get("float8.recipe_name") == "rowwise" ? "rowwise" : "tensorwise";
    if (auto* v = get("float8.enable_fsdp_float8_all_gather"))
      c.knobs["fp8_all_gather"] = bool_text(path, "float8.enable_fsdp_float8_all_gather", *v);
    if (auto* v = get("float8.emulate"); v && lower(*v) == "true")
      c.unmodelled.push_back("float8 emulate = true (emulated GEMMs, not float8 tensor cores)");
    if (auto* v = get("float8.filter_fqns"); v && *v != "[\"output\"]" && *v != "['output']" && *v != "[]")
      c.unmodelled.push_back("float8.filter_fqns " + *v +
                             " (the blocks' linear layers are simulated in float8)");
  } else {
    // Float8 settings without a float8 converter change nothing.
    for (const char* k : {"float8.enable_fsdp_float8_all_gather", "float8.recipe_name", "float8.emulate",
                          "float8.filter_fqns", "float8.enable_float8_linear"})
      read.insert(k);
  }
  // torchtitan 2025 config/job_config.py class MX: converters ["mx"], recipe_name "mxfp8_cublas" (or
  // "mxfp8_cutlass", "mxfp8_cublas_rceil": mxfp8 GEMMs too), filter_fqns ["output"].
  const bool mx = conv && conv->find("\"mx\"") != std::string::npos;
  if (mx && !fp8) {
    c.knobs["fp8"] = "mxfp8";
    c.source["fp8"] = "model.converters = [\"mx\"] (--fp8 mxfp8)";  // a refusal names the file's key
    const std::string* recipe = get("mx.recipe_name");
    if (recipe && recipe->rfind("mxfp8", 0) != 0)
      c.unmodelled.push_back("mx.recipe_name " + *recipe + " (simulated as --fp8 mxfp8)");
    if (auto* v = get("mx.filter_fqns"); v && *v != "[\"output\"]" && *v != "['output']")
      c.unmodelled.push_back("mx.filter_fqns " + *v + " (the blocks' linear layers are simulated in mxfp8)");
    get("mx.mxfp8_dim1_cast_kernel_choice");  // the cast kernel: not modelled apart
  }
  if (conv && conv->find("float8") == std::string::npos && !mx && *conv != "[]" && !conv->empty())
    c.unmodelled.push_back("model.converters " + *conv + " (not modelled)");
}

/// The optimizer's name and implementation (build_optimizers).
void read_optimizer(const TitanGet& get, ImportedConfig& c) {
  if (auto* v = get("optimizer.implementation")) {
    if (*v == "fused")
      c.knobs["fused_optimizer"] = "true";
    else if (*v == "foreach" || *v == "for-loop")
      c.knobs["fused_optimizer"] = "false";
  }
  if (auto* v = get("optimizer.name")) {  // build_optimizers: "Adam" or "AdamW"
    if (*v == "Adam")
      c.knobs["optimizer"] = "adam";
    else if (*v == "AdamW")
      c.knobs["optimizer"] = "adamw";
    else
      c.unmodelled.push_back("optimizer.name " + *v + " (AdamW's state is simulated)");
  }
}

}  // namespace

ImportedConfig import_torchtitan(const std::string& path) {
  auto t = read_toml(path);
  ImportedConfig c;
  c.format = "torchtitan";
  c.knobs["runtime"] = "fsdp2";
  date_titan_toml(t, c);
  std::set<std::string> read;  // keys the reader used
  move_old_keys(t, read);
  const TitanGet get = [&](const char* k) -> const std::string* {
    read.insert(k);
    auto it = t.find(k);
    return it == t.end() ? nullptr : &it->second;
  };
  read_titan_parallelism(path, get, c);
  read_sharding_ac(path, get, c);
  read_batch(path, get, t, c);
  read_precision_compile(path, get, c);
  read_float8(path, get, read, c);
  read_optimizer(get, c);
  if (auto* n = get("model.name"), *f = get("model.flavor"); n && f) c.model = *n + " " + *f;
  read_titan_pipeline_batch(path, get, c);
  for (const auto& [k, v] : t)
    if (!read.count(k) && !titan_toml_inert(k)) c.unread.push_back(k + " = " + v);
  return c;
}

}  // namespace shardplan::import
