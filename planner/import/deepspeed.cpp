// The DeepSpeed ds_config importer of --from (docs/formats.md, "--from"): each key as DeepSpeed (v0.19.8,
// deepspeed/runtime/config.py, zero/config.py) and transformers' "auto" fills mean it.
#include <map>
#include <set>

#include "core/error.hpp"
#include "core/json_reader.hpp"
#include "planner/import/common.hpp"

namespace shardplan::import {

namespace {

std::string json_int(const Json& j, const std::string& path, const std::string& key) {
  if (!j.is_number_integer() &&
      !(j.is_number() && j.get<double>() == static_cast<double>(j.get<std::int64_t>())))
    throw InputError(path, key, "expected an integer, got " + j.dump());
  return std::to_string(j.get<std::int64_t>());
}

bool json_true(const Json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_boolean() && j[key].get<bool>();
}

/// Keys of a ds_config that leave per-GPU memory and step time alone (logging, the learning rate schedule,
/// clipping, checkpoint saving): not named when unread. Objects end with '.'.
bool deepspeed_inert(const std::string& key) {
  static const char* prefixes[] = {"scheduler.",
                                   "steps_per_print",
                                   "wall_clock_breakdown",
                                   "gradient_clipping",
                                   "tensorboard.",
                                   "wandb.",
                                   "csv_monitor.",
                                   "comms_logger.",
                                   "flops_profiler.",
                                   "dump_state",
                                   "memory_breakdown",
                                   "seed",
                                   "optimizer.params.",
                                   "zero_allow_untested_optimizer",
                                   "prescale_gradients",
                                   "gradient_predivide_factor",
                                   "checkpoint.",
                                   "autotuning.",
                                   "fp16.loss_scale",
                                   "fp16.initial_scale_power",
                                   "fp16.hysteresis",
                                   "fp16.min_loss_scale",
                                   "fp16.loss_scale_window",
                                   "fp16.auto_cast",
                                   "bf16.immediate_grad_update",
                                   "zero_optimization.stage3_gather_16bit_weights_on_model_save",
                                   "zero_optimization.gather_16bit_weights_on_model_save",
                                   "zero_optimization.round_robin_gradients",
                                   "zero_optimization.ignore_unused_parameters",
                                   "zero_optimization.load_from_fp32_weights",
                                   "zero_optimization.elastic_checkpoint",
                                   "zero_optimization.offload_optimizer.pin_memory",
                                   "zero_optimization.offload_param.pin_memory",
                                   "zero_optimization.offload_optimizer.nvme_path",
                                   "zero_optimization.offload_param.nvme_path",
                                   "zero_optimization.offload_optimizer.buffer_count",
                                   "zero_optimization.offload_param.buffer_count",
                                   "zero_optimization.offload_param.buffer_size",
                                   "zero_optimization.offload_param.max_in_cpu",
                                   "zero_optimization.offload_optimizer.fast_init",
                                   "zero_optimization.offload_optimizer.pipeline_read",
                                   "zero_optimization.offload_optimizer.pipeline_write",
                                   "zero_optimization.stage3_gather_fp16_weights_on_model_save",
                                   "zero_optimization.contiguous_gradients",
                                   "zero_optimization.allgather_partitions",
                                   "zero_optimization.reduce_scatter"};
  for (const char* p : prefixes)
    if (key.rfind(p, 0) == 0) return true;
  return false;
}

/// Every leaf key of a JSON object, dotted ("zero_optimization.offload_param.device").
void json_leaves(const Json& j, const std::string& prefix, std::map<std::string, std::string>& out) {
  if (j.is_object() && !j.empty()) {
    for (const auto& [k, v] : j.items()) json_leaves(v, prefix.empty() ? k : prefix + "." + k, out);
    return;
  }
  out[prefix] = j.is_string() ? j.get<std::string>() : j.dump();
}

/// The reading of one ds_config: the knobs it yields and the dotted keys it looked at (the rest, unless
/// inert, are named as not read).
struct DsRead {
  const std::string& path;
  ImportedConfig c;
  std::set<std::string> read;

  const Json* value_of(const Json& o, const std::string& prefix, const char* k) {
    read.insert(prefix.empty() ? k : prefix + "." + k);
    return o.is_object() && o.contains(k) ? &o[k] : nullptr;
  }
};

// "auto" is the Hugging Face Trainer's placeholder: transformers' HfTrainerDeepSpeedConfig
// (integrations/deepspeed.py trainer_config_process / trainer_config_finalize) fills it from the
// TrainingArguments and the model. Each is resolved as transformers does with its defaults, or the
// assumption is said.
bool is_auto(const Json* v) {
  return v && v->is_string() && v->get<std::string>() == "auto";
}

/// Micro-batch, gradient accumulation and the global batch.
void read_batch(DsRead& r, const Json& j) {
  ImportedConfig& c = r.c;
  if (auto* v = r.value_of(j, "", "train_micro_batch_size_per_gpu"); v && !is_auto(v)) {
    c.knobs["mbs"] = json_int(*v, r.path, "train_micro_batch_size_per_gpu");
  } else if (is_auto(v)) {
    c.knobs["mbs"] = "8";
    c.assumed.push_back(
        "train_micro_batch_size_per_gpu \"auto\" = transformers' per_device_train_batch_size, "
        "taken at its default 8 (give --mbs for yours)");
  }
  if (auto* v = r.value_of(j, "", "gradient_accumulation_steps"); v && !is_auto(v))
    c.knobs["grad_accum"] = json_int(*v, r.path, "gradient_accumulation_steps");
  else if (is_auto(v))
    c.assumed.push_back(
        "gradient_accumulation_steps \"auto\" is transformers' gradient_accumulation_steps "
        "(default 1)");
  if (auto* v = r.value_of(j, "", "train_batch_size"); v && !is_auto(v)) {
    c.global_batch = std::stoll(json_int(*v, r.path, "train_batch_size"));
    c.global_batch_key = "train_batch_size";
  }
}

/// Precision (deepspeed/runtime/precision_config.py): bf16.enabled = bf16 compute with fp32 master weights
/// and Adam state, which is --precision bf16-mixed (not --precision bf16, whose master copy is 16-bit); the
/// gradient reduction's dtype; AutoTP's degree.
void read_precision(DsRead& r, const Json& j) {
  ImportedConfig& c = r.c;
  const Json bf16 = j.value("bf16", Json::object()), fp16 = j.value("fp16", Json::object());
  const Json* bf16_on = r.value_of(bf16, "bf16", "enabled");
  const Json* fp16_on = r.value_of(fp16, "fp16", "enabled");
  r.value_of(bf16, "bf16", "bf16_optimizer_states");
  r.value_of(bf16, "bf16", "bf16_master_weights_and_grads");
  const bool bf16_auto = is_auto(bf16_on), fp16_auto = is_auto(fp16_on);
  if (bf16_auto || (fp16_auto && !json_true(bf16, "enabled")))
    c.assumed.push_back(
        std::string(bf16_auto ? "bf16.enabled" : "fp16.enabled") +
        " \"auto\": transformers enables it from --bf16 / --fp16; taken as bf16 mixed precision "
        "(bf16 compute, fp32 master weights and Adam state); give --precision otherwise");
  if (json_true(bf16, "enabled") || bf16_auto || (fp16_auto && !json_true(fp16, "enabled"))) {
    c.knobs["precision"] = json_true(bf16, "bf16_optimizer_states")           ? "bf16-true"
                           : json_true(bf16, "bf16_master_weights_and_grads") ? "bf16"
                                                                              : "bf16-mixed";
  } else if (json_true(fp16, "enabled")) {
    c.knobs["precision"] = "fp16-mixed";  // fp16 compute, fp32 master copy, the loss scaler's checks
  } else {
    c.knobs["precision"] = "fp32";
  }
  if (auto* v = r.value_of(j, "", "communication_data_type"); v && v->is_string()) {
    const std::string t = lower(v->get<std::string>());
    if (t == "fp32")
      c.knobs["reduce_dtype"] = "fp32";
    else if (t == "bf16" || t == "fp16")
      c.knobs["reduce_dtype"] = "bf16";
    else
      throw InputError(r.path, "communication_data_type", "expected fp32, bf16 or fp16, got \"" + t + "\"");
  }
  for (const char* tp_key : {"tensor_parallel", "tp"}) {
    const Json tp = j.value(tp_key, Json::object());
    if (const Json* v = r.value_of(tp, tp_key, "autotp_size")) {
      const std::string n = json_int(*v, r.path, std::string(tp_key) + ".autotp_size");
      if (std::stoll(n) > 1) c.knobs["tp"] = n;  // 0 = AutoTP off
    }
  }
}

/// zero_optimization.offload_optimizer / offload_param: the plan's offload.
void read_offload(DsRead& r, const Json& zero, int stage) {
  ImportedConfig& c = r.c;
  auto offload_device = [&](const char* k) -> std::string {
    const std::string key = std::string("zero_optimization.") + k;
    r.read.insert(key + ".device");
    if (!zero.contains(k) || !zero[k].is_object()) return "none";
    std::string d = lower(zero[k].value("device", std::string("none")));
    if (d == "nvme") c.unmodelled.push_back(key + ".device nvme (simulated as cpu)");
    return d;
  };
  const std::string off_opt = offload_device("offload_optimizer"),
                    off_param = offload_device("offload_param");
  if (off_param != "none") {
    if (stage != 3)
      throw InputError(r.path, "zero_optimization.offload_param",
                       "DeepSpeed offloads parameters only in stage 3");
    c.knobs["offload"] = "params";
  } else if (off_opt != "none") {
    if (stage == 0) throw InputError(r.path, "zero_optimization.offload_optimizer", "needs stage 1, 2 or 3");
    c.knobs["offload"] = "optimizer";
  } else {
    c.knobs["offload"] = "none";
  }
}

/// ZeRO's buffer sizes and communication options the simulator takes at DeepSpeed's defaults: any other
/// value is named.
void read_zero_unmodelled(DsRead& r, const Json& zero, int stage) {
  ImportedConfig& c = r.c;
  // DeepSpeed defaults the simulator assumes (deepspeed/runtime/zero/config.py; docs/mechanics.md §1.2).
  // "auto" values are transformers' fills from the model's hidden size H: reduce_bucket_size H², stage-3
  // prefetch 0.9 H², persistence threshold 10 H (integrations/deepspeed.py trainer_config_finalize) — not
  // DeepSpeed's defaults, so named.
  const std::pair<const char*, double> defaults[] = {{"reduce_bucket_size", 5e8},
                                                     {"allgather_bucket_size", 5e8},
                                                     {"stage3_prefetch_bucket_size", 5e7},
                                                     {"stage3_max_live_parameters", 1e9},
                                                     {"stage3_max_reuse_distance", 1e9},
                                                     {"stage3_param_persistence_threshold", 1e5},
                                                     {"sub_group_size", 1e9}};
  for (const auto& [k, def] : defaults) {
    const Json* v = r.value_of(zero, "zero_optimization", k);
    if (v && v->is_number() && v->get<double>() != def)
      c.unmodelled.push_back(std::string("zero_optimization.") + k);
    if (is_auto(v))
      c.unmodelled.push_back(std::string("zero_optimization.") + k + " \"auto\" (transformers: " +
                             (std::string(k) == "reduce_bucket_size"                   ? "hidden_size²"
                              : std::string(k) == "stage3_prefetch_bucket_size"        ? "0.9 x hidden_size²"
                              : std::string(k) == "stage3_param_persistence_threshold" ? "10 x hidden_size"
                                                                                       : "its fill") +
                             "; the simulator assumes DeepSpeed's default)");
  }
  if (const Json* v = r.value_of(zero, "zero_optimization", "overlap_comm");
      v && v->is_boolean() && v->get<bool>() != (stage == 3))
    c.unmodelled.push_back("zero_optimization.overlap_comm");
  if (const Json* v = r.value_of(zero, "zero_optimization", "zero_quantized_nontrainable_weights");
      v && v->is_boolean() && v->get<bool>())
    c.unmodelled.push_back(
        "zero_optimization.zero_quantized_nontrainable_weights (ZeRO++ int8 gathers of frozen weights)");
}

/// ZeRO++ (deepspeed/runtime/zero/config.py, v0.19.8: zero_hpz_partition_size default 1,
/// zero_quantized_weights / zero_quantized_gradients default false): the plan's hpz_partition,
/// quantized_weights and quantized_gradients (docs/model.md "ZeRO++"). Below stage 3 DeepSpeed does not use
/// them (engine.py _configure_zero_optimizer hands them to the stage-3 optimizer only): read, said, not set.
void read_zeropp(DsRead& r, const Json& zero, int stage) {
  ImportedConfig& c = r.c;
  if (stage != 3) {
    for (const char* k : {"zero_hpz_partition_size", "zero_quantized_weights", "zero_quantized_gradients"})
      if (r.value_of(zero, "zero_optimization", k))
        c.assumed.push_back(std::string("zero_optimization.") + k + " is ignored by DeepSpeed below stage 3");
    return;
  }
  if (const Json* v = r.value_of(zero, "zero_optimization", "zero_hpz_partition_size")) {
    const std::string n = json_int(*v, r.path, "zero_optimization.zero_hpz_partition_size");
    if (std::stoll(n) < 1)
      throw InputError(r.path, "zero_optimization.zero_hpz_partition_size", "must be >= 1, got " + n);
    c.knobs["hpz_partition"] = n;
  }
  for (const auto& [key, knob] : {std::pair{"zero_quantized_weights", "quantized_weights"},
                                  std::pair{"zero_quantized_gradients", "quantized_gradients"}}) {
    const Json* v = r.value_of(zero, "zero_optimization", key);
    if (!v) continue;
    if (!v->is_boolean())
      throw InputError(r.path, std::string("zero_optimization.") + key,
                       "expected true or false, got " + v->dump());
    c.knobs[knob] = v->get<bool>() ? "true" : "false";
  }
}

/// Activation checkpointing options, compile and the optimizer block.
void read_ac_compile_optimizer(DsRead& r, const Json& j) {
  ImportedConfig& c = r.c;
  const Json ac = j.value("activation_checkpointing", Json::object());
  if (r.value_of(ac, "activation_checkpointing", "partition_activations") &&
      json_true(ac, "partition_activations"))
    c.unmodelled.push_back("activation_checkpointing.partition_activations");
  // cpu_checkpointing moves each checkpoint's input to the host (deepspeed/runtime/activation_checkpointing/
  // checkpointing.py, v0.19.8: CheckpointFunction.forward copies inputs with .cpu() when
  // CPU_CHECKPOINT); it acts only where the model calls deepspeed.checkpointing.checkpoint, i.e. full
  // activation checkpointing of every block: --activation-offload all under --ac full.
  if (r.value_of(ac, "activation_checkpointing", "cpu_checkpointing") && json_true(ac, "cpu_checkpointing")) {
    c.knobs["activation_offload"] = "all";
    c.knobs["ac"] = "full";
    c.assumed.push_back(
        "activation_checkpointing.cpu_checkpointing: the model checkpoints every block with "
        "deepspeed.checkpointing.checkpoint (--ac full), whose inputs go to pinned host memory");
  }
  for (const char* k :
       {"contiguous_memory_optimization", "number_checkpoints", "synchronize_checkpoint_boundary", "profile"})
    r.value_of(ac, "activation_checkpointing",
               k);  // settings of DeepSpeed's checkpointing API, used by the model
  const Json compile = j.value("compile", Json::object()), optimizer = j.value("optimizer", Json::object());
  if (const Json* v = r.value_of(compile, "compile", "enabled"); v && v->is_boolean())
    c.knobs["compile"] = v->get<bool>() ? "true" : "false";
  // The optimizer block (deepspeed/runtime/engine.py _configure_basic_optimizer, v0.19.8): "Adam" (and
  // FusedAdam / CPUAdam) runs AdamW unless adam_w_mode is false; other names FusedLion or torch.optim's class
  // of that name.
  if (const Json* t = r.value_of(optimizer, "optimizer", "type"); t && t->is_string()) {
    const std::string ty = lower(t->get<std::string>());
    const Json params = optimizer.value("params", Json::object());
    const bool w_mode = !(params.is_object() && params.contains("adam_w_mode") &&
                          params["adam_w_mode"].is_boolean() && !params["adam_w_mode"].get<bool>());
    const bool adam = ty == "adam" || ty == "fusedadam" || ty == "cpuadam";
    if (ty == "adamw" || (adam && w_mode))
      c.knobs["optimizer"] = "adamw";
    else if (adam)
      c.knobs["optimizer"] = "adam";
    else if (ty == "sgd" || ty == "lion" || ty == "adafactor" || ty == "muon")
      c.knobs["optimizer"] = ty;
    else
      c.unmodelled.push_back("optimizer.type " + t->get<std::string>() +
                             " (AdamW's state and step are simulated)");
  }
}

/// Keys DeepSpeed 0.19.8 refuses (deepspeed/runtime/config.py _REMOVED_TOP_LEVEL_CONFIG_KEYS and
/// _REMOVED_ZERO_CONFIG_KEYS, _reject_removed_config_keys raises DeepSpeedConfigError; deepspeedai/DeepSpeed
/// issue 8489): the config does not run there, so it is refused here too, with what replaces the feature.
void refuse_removed_keys(const std::string& path, const Json& j) {
  static const std::pair<const char*, const char*> kTop[] = {
      {"nebula", "Nebula checkpointing was removed"},
      {"compression_training", "the compression library was removed"},
      {"amp", "the Apex AMP integration was removed; use bf16 or fp16"},
      {"quantize_training", "Mixture-of-Quantization was removed"},
      {"sparse_gradients", "sparse embedding-gradient compression was removed"},
      {"eigenvalue", "eigenvalue-based MoQ was removed"},
      {"sparse_attention", "DeepSpeed Sparse Attention was removed"},
      {"elasticity", "elastic training was removed; set the batch keys directly"},
      {"graph_harvesting", "graph harvesting was removed"}};
  static const std::pair<const char*, const char*> kZero[] = {
      {"mics_shard_size",
       "MiCS ZeRO-3 sharding was removed (a secondary partition inside a node is ZeRO++'s "
       "zero_hpz_partition_size)"},
      {"mics_hierarchical_params_gather", "MiCS ZeRO-3 sharding was removed"},
      {"zeropp_loco_param", "LoCo-ZeRO++ was removed (zero_quantized_gradients is plain qgZ)"}};
  const std::string tail = " (DeepSpeed 0.19.8 refuses the key: deepspeed/runtime/config.py, issue 8489)";
  for (const auto& [k, why] : kTop)
    if (j.contains(k)) throw InputError(path, k, std::string(why) + tail);
  const Json zero = j.value("zero_optimization", Json::object());
  for (const auto& [k, why] : kZero)
    if (zero.is_object() && zero.contains(k))
      throw InputError(path, std::string("zero_optimization.") + k, std::string(why) + tail);
}

}  // namespace

ImportedConfig import_deepspeed(const std::string& path) {
  const Json j = load_json_file(path);
  if (!j.is_object()) throw InputError(path, "", "a ds_config is a JSON object");
  refuse_removed_keys(path, j);
  DsRead r{path, {}, {}};
  r.c.format = "deepspeed";
  r.c.knobs["runtime"] = "deepspeed";
  read_batch(r, j);
  const Json zero = j.value("zero_optimization", Json::object());
  const Json* st = r.value_of(zero, "zero_optimization", "stage");
  const int stage = st ? std::stoi(json_int(*st, path, "zero_optimization.stage")) : 0;
  if (stage < 0 || stage > 3) throw InputError(path, "zero_optimization.stage", "must be 0..3");
  r.c.knobs["zero"] = std::to_string(stage);
  read_precision(r, j);
  read_offload(r, zero, stage);
  read_zero_unmodelled(r, zero, stage);
  read_zeropp(r, zero, stage);
  read_ac_compile_optimizer(r, j);
  std::map<std::string, std::string> leaves;
  json_leaves(j, "", leaves);
  for (const auto& [k, v] : leaves)
    if (!r.read.count(k) && !deepspeed_inert(k)) r.c.unread.push_back(k + " = " + v);
  return r.c;
}

}  // namespace shardplan::import
