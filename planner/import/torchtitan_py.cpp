// The torchtitan 0.3.0 Python config importer of --from (docs/formats.md, "--from"): TitanReader's fields
// (torchtitan_py_reader.hpp) as torchtitan 0.3.0 (and the token-sized micro-batches after it) means them.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "core/error.hpp"
#include "planner/import/common.hpp"
#include "planner/import/torchtitan_py_reader.hpp"
#include "planner/py_config.hpp"
#include "simulator/plan/plan.hpp"

namespace shardplan::import {

namespace {

/// FILE.py's config function: FUNCTION of FILE.py:FUNCTION, else the file's only function or
/// shardplan_config.
std::string config_function(const py::Module& m, const std::string& path, std::string fn) {
  if (fn.empty()) {
    std::vector<std::string> names;
    for (const auto& f : m.functions) names.push_back(f.name);
    if (names.size() == 1)
      fn = names[0];
    else if (std::find(names.begin(), names.end(), "shardplan_config") != names.end())
      fn = "shardplan_config";
    else
      throw InputError(path, "",
                       names.empty() ? "no config function (def NAME() -> Trainer.Config)"
                                     : "several functions (" + join_names(names) +
                                           "): name the config as FILE.py:FUNCTION");
  }
  return fn;
}

/// The file's version: torchtitan after 0.3.0 (token-sized micro-batches, true) or 0.3.0 (false).
bool date_titan_py(TitanReader& r, ImportedConfig& c) {
  // torchtitan after 0.3.0 (73aed7f6c, 2026-08-20, "fold batch dim") sizes a micro-batch in tokens:
  // training.num_tokens_per_microbatch_per_dp_rank over max_context_length sequences (TrainingConfig defaults
  // 16384 and 2048), the step in num_tokens_per_train_step, pipelined micro-batches in
  // parallelism.num_pp_microbatches. 0.3.0 has local_batch_size and seq_len.
  const bool token_layout = r.lines.count("training.num_tokens_per_microbatch_per_dp_rank") ||
                            r.lines.count("training.max_context_length") ||
                            r.lines.count("training.num_tokens_per_train_step") ||
                            r.lines.count("parallelism.num_pp_microbatches");
  if (token_layout) {
    for (const char* k : {"training.local_batch_size", "training.seq_len", "training.global_batch_size"})
      if (!r.lines.count(k)) r.fields.erase(k);  // 0.3.0's defaults, not this version's
    c.framework = "torchtitan@2026-08-20";
    c.framework_reason =
        "training.num_tokens_per_microbatch_per_dp_rank / max_context_length: torchtitan from 73aed7f6c "
        "(2026-08-20)";
  } else {
    c.framework = "torchtitan@0.3.0";
    c.framework_reason =
        "a Python config with training.local_batch_size / seq_len: torchtitan 0.3.0 (Python configs from "
        "9810191bb, 2026-02-23, to 73aed7f6c, 2026-08-20)";
  }
  return token_layout;
}

/// FSDP's resharding, sequence parallelism, symmetric memory and activation checkpointing.
void read_py_sharding_ac(const std::string& path, const TitanGet& get, ImportedConfig& c) {
  if (auto* v = get("parallelism.fsdp_reshard_after_forward")) {
    // "default" is "always" without pipeline parallelism and "never" with it (torchtitan/distributed/fsdp.py
    // get_fsdp_reshard_after_forward_policy); the latter is resolve_plan's default under PP, left to it.
    const bool pipelined = c.knobs.count("pp") && c.knobs["pp"] != "1";
    if (*v == "default" && pipelined) {
    } else if (*v == "always" || *v == "default")
      c.knobs["reshard_after_forward"] = "true";
    else if (*v == "never")
      c.knobs["reshard_after_forward"] = "false";
    else
      throw InputError(path, "parallelism.fsdp_reshard_after_forward",
                       "expected default, always or never, got \"" + *v + "\"");
  }
  if (auto* v = get("parallelism.enable_sequence_parallel");
      v && bool_text(path, "parallelism.enable_sequence_parallel", *v) == "false" && c.knobs.count("tp") &&
      c.knobs["tp"] != "1")
    c.unmodelled.push_back("parallelism.enable_sequence_parallel False (TP without sequence parallelism)");
  if (auto* v = get("parallelism.enable_fsdp_symm_mem");
      v && bool_text(path, "parallelism.enable_fsdp_symm_mem", *v) == "true")
    c.unmodelled.push_back("parallelism.enable_fsdp_symm_mem");
  if (auto* v = get("activation_checkpoint")) {
    if (*v == "None")
      c.knobs["ac"] = "none";
    else if (*v == "selective" || *v == "full")
      c.knobs["ac"] = *v;  // SelectiveAC: the op policy, every second matmul saved (as simulated)
    else
      c.unmodelled.push_back("activation_checkpoint " + *v + " (not modelled; --ac from the flags)");
  }
}

/// The micro-batch, sequence length and global batch: in tokens (after 0.3.0) or sequences (0.3.0).
void read_py_batch(const std::string& path, const TitanGet& get, bool token_layout, ImportedConfig& c) {
  if (token_layout) {
    auto number = [&](const char* k, long long def) {
      const std::string* v = get(k);
      return v ? std::stoll(int_text(path, k, *v)) : def;
    };
    const long long tokens = number("training.num_tokens_per_microbatch_per_dp_rank", 16384);
    const long long ctx = number("training.max_context_length", 2048);
    const long long step_tokens = number("training.num_tokens_per_train_step", -1);
    if (tokens < 1 || ctx < 1 || tokens % ctx)
      throw InputError(path, "training.num_tokens_per_microbatch_per_dp_rank",
                       std::to_string(tokens) + " tokens are not a whole number of max_context_length " +
                           std::to_string(ctx) + " sequences");
    c.knobs["seq"] = std::to_string(ctx);
    c.knobs["mbs"] = std::to_string(tokens / ctx);
    c.assumed.push_back(
        fmt::format("micro-batch {} sequences of {} tokens (num_tokens_per_microbatch_per_dp_rank "
                    "{} / max_context_length {}; documents packed to the context length)",
                    tokens / ctx, ctx, tokens, ctx));
    if (step_tokens > 0) {
      if (step_tokens % ctx)
        throw InputError(path, "training.num_tokens_per_train_step",
                         "not a whole number of max_context_length sequences");
      c.global_batch = step_tokens / ctx;
      c.global_batch_key = "training.num_tokens_per_train_step";
    }
    if (const std::string* n = get("parallelism.num_pp_microbatches");
        n && c.knobs.count("pp") && c.knobs["pp"] != "1")
      c.knobs["grad_accum"] = int_text(path, "parallelism.num_pp_microbatches", *n);
  } else {
    if (auto* v = get("training.local_batch_size"))
      c.knobs["mbs"] = int_text(path, "training.local_batch_size", *v);
    if (auto* v = get("training.global_batch_size");
        v && std::stoll(int_text(path, "training.global_batch_size", *v)) > 0) {
      c.global_batch = std::stoll(*v);
      c.global_batch_key = "training.global_batch_size";
    }
    if (auto* v = get("training.seq_len")) c.knobs["seq"] = int_text(path, "training.seq_len", *v);
  }
}

/// Precision, CPU offload and compile.
void read_py_precision_compile(const std::string& path, const TitanGet& get, ImportedConfig& c) {
  // dtype bfloat16: parameters, gradients and optimizer state in bf16 (bf16-true); float32: FSDP2 mixed
  // precision over fp32 parameters with mixed_precision_param (bf16-mixed, or fp32).
  const std::string dtype =
      get("training.dtype") ? dtype_text(path, "training.dtype", *get("training.dtype")) : "";
  if (dtype == "bf16") c.knobs["precision"] = "bf16-true";
  if (const std::string* offload = read_titan_precision(path, get, dtype != "bf16", c);
      offload && lower(*offload) == "false")
    c.knobs["offload"] = "none";
  if (auto* v = get("compile.enable")) {
    const bool on = bool_text(path, "compile.enable", *v) == "true";
    const std::string* comps = get("compile.components");
    const bool model = !comps || ("," + *comps + ",").find(",model,") != std::string::npos;
    c.knobs["compile"] = on && model ? "true" : "false";
    if (on && !model)
      c.unmodelled.push_back("compile.components without \"model\" (simulated as no compile)");
    if (auto* b = get("compile.backend"); on && b && *b != "inductor")
      c.unmodelled.push_back("compile.backend " + *b);
  }
  if (auto* v = get("compile.enable_async_tensor_parallel"))
    c.knobs["async_tp"] = bool_text(path, "compile.enable_async_tensor_parallel", *v);
}

/// loss = ChunkedLossWrapper.Config(num_chunks=N): --loss-impl chunked where modelled (the capability rows
/// kChunkedLossParallel / kChunkedLossUnsharded), else named as not modelled.
void read_py_chunked_loss(const TitanGet& get, ImportedConfig& c) {
  if (!get("loss.chunked")) return;
  const std::string n = *get("loss.num_chunks");
  auto degree = [&](const char* k) { return c.knobs.count(k) ? std::stoll(c.knobs[k]) : 1LL; };
  if (degree("tp") > 1 || degree("cp") > 1 || degree("pp") > 1 ||
      (c.knobs.count("zero") && c.knobs["zero"] == "0")) {
    c.unmodelled.push_back("loss = ChunkedLossWrapper.Config(num_chunks=" + n +
                           ") with TP, CP, PP or ZeRO-0 (simulated as the whole-logits loss)");
    return;
  }
  c.knobs["loss_impl"] = "chunked";
  c.source["loss_impl"] = "loss = ChunkedLossWrapper.Config";
  if (n != std::to_string(kTorchtitanLossChunks)) c.knobs["loss_chunks"] = n;
}

/// Float8 (Float8LinearConverter.Config) and the optimizer.
void read_py_float8_optimizer(const std::string& path, const TitanGet& get, const TitanReader& r,
                              ImportedConfig& c) {
  if (get("float8")) {
    const std::string recipe = *get("float8.recipe_name");
    if (recipe == "rowwise" || recipe == "tensorwise")
      c.knobs["fp8"] = recipe;
    else if (recipe == "rowwise_with_gw_hp") {
      c.knobs["fp8"] = "rowwise";
      c.unmodelled.push_back("float8 recipe rowwise_with_gw_hp (simulated as rowwise)");
    } else {
      throw InputError(path, "Float8LinearConverter.Config.recipe_name",
                       "expected rowwise, rowwise_with_gw_hp or tensorwise, got \"" + recipe + "\"");
    }
    if (bool_text(path, "Float8LinearConverter.Config.emulate", *get("float8.emulate")) == "true")
      c.unmodelled.push_back("float8 emulate=True (emulated GEMMs, not float8 tensor cores)");
  } else if (const std::string* blockfp = get("blockfp")) {
    c.knobs["fp8"] = *blockfp;
    // A refusal of the recipe (Blackwell only) names the converter the file sets, not --fp8.
    c.source["fp8"] = std::string(*blockfp == "mxfp8" ? "MXFP8LinearConverter" : "NVFP4LinearConverter") +
                      ".Config (--fp8 " + *blockfp + ")";
    const std::string* fqns = get("blockfp.fqns");
    if (!fqns || fqns->find("layers") == std::string::npos)
      c.unmodelled.push_back(*blockfp + " converter fqns " + (fqns ? *fqns : std::string("[]")) +
                             " (the simulator converts the blocks' linears, \"layers.\")");
  } else if (!r.model_flavor.empty()) {
    c.knobs["fp8"] = "none";
  }
  // OptimizersContainer.Config(param_groups=[ParamGroupConfig(..., optimizer_name="Adam" | "AdamW" |
  // "DistMuon")]) (components/optimizer/optimizer.py); default_adamw is AdamW.
  if (auto* v = get("optimizer.names"); v && !v->empty()) {
    if (v->find("DistMuon") != std::string::npos)
      c.unmodelled.push_back(
          "optimizer DistMuon (torchtitan's owned-rank Muon; --optimizer muon models the "
          "gathered-on-every-rank variant)");
    else if (*v == "Adam")
      c.knobs["optimizer"] = "adam";
    else if (*v == "AdamW")
      c.knobs["optimizer"] = "adamw";
    else
      c.unmodelled.push_back("optimizer param groups " + *v + " (one optimizer per model is modelled)");
  }
  if (auto* v = get("optimizer.implementation")) {
    if (*v == "fused")
      c.knobs["fused_optimizer"] = "true";
    else if (*v == "foreach" || *v == "for-loop")
      c.knobs["fused_optimizer"] = "false";
    else if (*v == "fused_opt_states_bf16")
      c.unmodelled.push_back("optimizer.implementation fused_opt_states_bf16 (bf16 Adam moments)");
    else
      throw InputError(path, "optimizer.implementation",
                       "expected fused, foreach, for-loop or fused_opt_states_bf16, got \"" + *v + "\"");
  }
}

/// "llama3 8B" from `from torchtitan.models.llama3 import model_registry` and model_registry("8B").
std::string titan_model(const TitanReader& r, const std::string& path) {
  std::string mod = r.model_module;
  if (mod.rfind("torchtitan.models.", 0) == 0) mod = mod.substr(18);
  // `from . import model_registry` in a model package's config_registry.py: the package is the folder.
  if (mod.empty() || mod[0] == '.') mod = std::filesystem::path(path).parent_path().filename().string();
  return mod.substr(0, mod.find('.')) + " " + r.model_flavor;
}

/// The file's own settings the reader did not use, unless they leave memory and time alone.
void name_unread(TitanReader& r, const std::set<std::string>& read, ImportedConfig& c) {
  static const std::set<std::string> inert = {"training.steps",
                                              "training.max_norm",
                                              "training.gc_freq",
                                              "training.gc_debug",
                                              "training.disable_cuda_graphs",
                                              "optimizer.lr",
                                              "optimizer.weight_decay",
                                              "optimizer.eps",
                                              "compile.components",
                                              "float8.filter_fqns",
                                              "float8.model_compile_enabled",
                                              "blockfp.fqns",
                                              "blockfp.model_compile_enabled",
                                              "converter"};
  for (const auto& [field, line] : r.lines)
    if (!read.count(field) && !inert.count(field) && field.find('.') != std::string::npos)
      c.unread.push_back(field + " = " + r.fields[field] + " (line " + std::to_string(line) + ")");
  for (const auto& o : r.others) c.unread.push_back(o);
}

}  // namespace

ImportedConfig import_torchtitan_py(const std::string& path_spec) {
  // FILE.py or FILE.py:FUNCTION (torchtitan's --config names the function).
  std::string path = path_spec, fn;
  if (const auto c = path_spec.rfind(".py:"); c != std::string::npos) {
    path = path_spec.substr(0, c + 3);
    fn = path_spec.substr(c + 4);
  }
  const py::Module m = py::parse_module(read_file(path), path);
  fn = config_function(m, path, fn);
  TitanReader r(m, path);
  r.run_function(fn);
  std::set<std::string> read;  // fields the reader used
  const TitanGet get = [&](const char* k) -> const std::string* {
    read.insert(k);
    auto it = r.fields.find(k);
    return it == r.fields.end() ? nullptr : &it->second;
  };
  ImportedConfig c;
  c.format = "torchtitan";
  c.knobs["runtime"] = "fsdp2";
  c.unmodelled = r.notes;
  const bool token_layout = date_titan_py(r, c);
  read_titan_parallelism(path, get, c);
  read_py_sharding_ac(path, get, c);
  read_py_batch(path, get, token_layout, c);
  read_py_precision_compile(path, get, c);
  read_py_float8_optimizer(path, get, r, c);
  read_py_chunked_loss(get, c);
  if (!r.model_flavor.empty()) c.model = titan_model(r, path);
  if (!token_layout) read_titan_pipeline_batch(path, get, c);
  name_unread(r, read, c);
  return c;
}

}  // namespace shardplan::import
