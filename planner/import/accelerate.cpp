// The accelerate config importer of --from (docs/formats.md, "--from"): the YAML `accelerate config` writes
// (accelerate 1.x, commands/config/cluster.py) for FSDP, DeepSpeed and multi-GPU (DDP) runs.
#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include "core/error.hpp"
#include "planner/import/common.hpp"

namespace shardplan::import {

namespace {

/// The flat subset of YAML `accelerate config` writes: "key" or "parent.key" -> value text (unquoted).
std::map<std::string, std::string> read_flat_yaml(const std::string& path) {
  std::map<std::string, std::string> out;
  std::string parent;
  int n = 0;
  for (std::string line : read_lines(path)) {
    ++n;
    if (const auto h = line.find(" #"); h != std::string::npos) line = line.substr(0, h);
    if (trim(line).empty() || trim(line)[0] == '#' || trim(line) == "---") continue;
    const bool indented = line[0] == ' ' || line[0] == '\t';
    const std::string s = trim(line);
    const auto colon = s.find(':');
    if (colon == std::string::npos) throw InputError(path, line_key(n), "expected KEY: VALUE");
    const std::string key = trim(s.substr(0, colon));
    const std::string v = unquote(trim(s.substr(colon + 1)));
    if (!indented) {
      parent = v.empty() ? key : "";
      if (!v.empty()) out[key] = v;
    } else {
      if (parent.empty()) throw InputError(path, line_key(n), "indented key without a parent");
      out[parent + "." + key] = v;
    }
  }
  return out;
}

/// Keys of an accelerate config that leave per-GPU memory and step time alone (where and how processes start,
/// checkpoint formats, loading): not named when unread.
bool accelerate_inert(const std::string& k) {
  static const std::set<std::string> keys = {"compute_environment",
                                             "debug",
                                             "downcast_bf16",
                                             "gpu_ids",
                                             "machine_rank",
                                             "main_training_function",
                                             "num_machines",
                                             "num_processes",
                                             "rdzv_backend",
                                             "same_network",
                                             "tpu_env",
                                             "tpu_use_cluster",
                                             "tpu_use_sudo",
                                             "use_cpu",
                                             "enable_cpu_affinity",
                                             "main_process_ip",
                                             "main_process_port",
                                             "fsdp_config.fsdp_transformer_layer_cls_to_wrap",
                                             "fsdp_config.fsdp_cpu_ram_efficient_loading",
                                             "fsdp_config.fsdp_state_dict_type",
                                             "fsdp_config.fsdp_sync_module_states",
                                             "fsdp_config.fsdp_use_orig_params",
                                             "deepspeed_config.deepspeed_multinode_launcher",
                                             "deepspeed_config.zero3_init_flag",
                                             "deepspeed_config.zero3_save_16bit_model",
                                             "deepspeed_config.gradient_clipping"};
  return keys.count(k) > 0;
}

ImportedConfig import_accelerate_deepspeed(const std::string& path,
                                           const std::map<std::string, std::string>& y,
                                           std::set<std::string>& read) {
  auto get = [&](const std::string& k) -> const std::string* {
    read.insert(k);
    auto it = y.find(k);
    return it == y.end() ? nullptr : &it->second;
  };
  ImportedConfig c;
  if (auto* f = get("deepspeed_config.deepspeed_config_file")) {
    // The ds_config the YAML points to, beside the YAML unless absolute: read as --from FILE.json would.
    const std::string file =
        !f->empty() && (*f)[0] == '/' ? *f : (std::filesystem::path(path).parent_path() / *f).string();
    if (!std::filesystem::exists(file))
      throw InputError(path, "deepspeed_config.deepspeed_config_file", "cannot open " + file);
    c = import_deepspeed(file);
  } else {
    c.knobs["runtime"] = "deepspeed";
    const std::string z = get("deepspeed_config.zero_stage") ? *get("deepspeed_config.zero_stage") : "0";
    c.knobs["zero"] = int_text(path, "deepspeed_config.zero_stage", z);
    const std::string op = get("deepspeed_config.offload_param_device")
                               ? lower(*get("deepspeed_config.offload_param_device"))
                               : "none";
    const std::string oo = get("deepspeed_config.offload_optimizer_device")
                               ? lower(*get("deepspeed_config.offload_optimizer_device"))
                               : "none";
    c.knobs["offload"] = op != "none" ? "params" : oo != "none" ? "optimizer" : "none";
    if (op == "nvme" || oo == "nvme")
      c.unmodelled.push_back("deepspeed_config offload to nvme (simulated as cpu)");
    if (auto* g = get("deepspeed_config.gradient_accumulation_steps"))
      c.knobs["grad_accum"] = int_text(path, "deepspeed_config.gradient_accumulation_steps", *g);
  }
  c.format = "accelerate";
  if (auto* v = get("mixed_precision")) {
    if (*v == "bf16" || *v == "fp8") c.knobs["precision"] = "bf16-mixed";
    if (*v == "fp16") c.knobs["precision"] = "fp16-mixed";
    if (*v == "no") c.knobs["precision"] = "fp32";
    if (*v == "fp8")
      c.unmodelled.push_back("mixed_precision fp8 with DeepSpeed (Transformer Engine: not modelled)");
  }
  return c;
}

/// FSDP's sharding strategy (fsdp_sharding_strategy: FSDP1's names or accelerate's 1..5 numbering; FSDP2's
/// fsdp_reshard_after_forward) as the ZeRO stage, and HYBRID_SHARD's shard group (GPUs per node).
void read_fsdp_strategy(const std::string& path,
                        const std::function<const std::string*(const std::string&)>& get, ImportedConfig& c) {
  const std::string fc = "fsdp_config.";
  std::string strategy =
      get(fc + "fsdp_sharding_strategy") ? *get(fc + "fsdp_sharding_strategy") : "FULL_SHARD";
  const char* numbered[] = {"",         "FULL_SHARD",   "SHARD_GRAD_OP",
                            "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"};
  if (strategy.size() == 1 && strategy[0] >= '1' && strategy[0] <= '5')
    strategy = numbered[strategy[0] - '0'];
  if (auto* r = get(fc + "fsdp_reshard_after_forward")) {
    const std::string l = lower(*r);
    if (l == "true" || l == "false")
      strategy = l == "true" ? "FULL_SHARD" : "SHARD_GRAD_OP";
    else
      strategy = *r;  // accelerate also accepts the strategy names here
  }
  if (strategy == "FULL_SHARD")
    c.knobs["zero"] = "3";
  else if (strategy == "SHARD_GRAD_OP")
    c.knobs["zero"] = "2";
  else if (strategy == "NO_SHARD")
    c.knobs["zero"] = "0";
  else if (strategy == "HYBRID_SHARD" || strategy == "HYBRID_SHARD_ZERO2") {
    c.knobs["zero"] = strategy == "HYBRID_SHARD" ? "3" : "2";
    // HYBRID_SHARD shards within a node and replicates across nodes.
    auto* procs = get("num_processes");
    auto* machines = get("num_machines");
    if (!procs || !machines)
      throw InputError(path, fc + "fsdp_sharding_strategy",
                       strategy + " needs num_processes and num_machines (shard group = GPUs per node)");
    const long long p = std::stoll(int_text(path, "num_processes", *procs)),
                    m = std::stoll(int_text(path, "num_machines", *machines));
    if (m < 1 || p % m) throw InputError(path, "num_machines", "must divide num_processes");
    c.knobs["shard_group"] = std::to_string(p / m);
  } else {
    throw InputError(path, fc + "fsdp_sharding_strategy", "unknown strategy \"" + strategy + "\"");
  }
}

}  // namespace

ImportedConfig import_accelerate(const std::string& path) {
  const auto y = read_flat_yaml(path);
  std::set<std::string> read;
  auto get = [&](const std::string& k) -> const std::string* {
    read.insert(k);
    auto it = y.find(k);
    return it == y.end() ? nullptr : &it->second;
  };
  auto finish = [&](ImportedConfig c) {
    for (const auto& [k, v] : y)
      if (!read.count(k) && !accelerate_inert(k)) c.unread.push_back(k + ": " + v);
    return c;
  };
  ImportedConfig c;
  c.format = "accelerate";
  const std::string* dist = get("distributed_type");
  if (dist && *dist == "DEEPSPEED") return finish(import_accelerate_deepspeed(path, y, read));
  if (dist && *dist == "MULTI_GPU") {
    // accelerate's MULTI_GPU is PyTorch DistributedDataParallel: every rank holds the whole state.
    c.knobs["runtime"] = "fsdp2";
    c.knobs["zero"] = "0";
    c.assumed.push_back(
        "distributed_type MULTI_GPU is PyTorch DDP: simulated as --zero 0 (plain data parallel)");
    if (auto* v = get("mixed_precision")) {
      c.knobs["precision"] = *v == "no" ? "fp32" : *v == "fp16" ? "fp16-mixed" : "bf16-mixed";
      if (*v == "fp8") c.knobs["fp8"] = "tensorwise";
    }
    return finish(c);
  }
  if (!dist || *dist != "FSDP")
    throw InputError(path, "distributed_type",
                     "accelerate configs with distributed_type FSDP, DEEPSPEED or MULTI_GPU are read, got " +
                         (dist ? *dist : std::string("none")));
  const std::string fc = "fsdp_config.";
  const bool v2 = get(fc + "fsdp_version") && *get(fc + "fsdp_version") == "2";
  c.knobs["runtime"] = v2 ? "fsdp2" : "fsdp1";
  read_fsdp_strategy(path, get, c);
  if (auto* v = get(fc + "fsdp_activation_checkpointing");
      v && bool_text(path, fc + "fsdp_activation_checkpointing", *v) == "true")
    c.knobs["ac"] = "full";
  if (auto* v = get(fc + "fsdp_offload_params");
      v && bool_text(path, fc + "fsdp_offload_params", *v) == "true")
    c.knobs["offload"] = "params";
  if (auto* v = get("mixed_precision")) {
    if (*v == "bf16")
      c.knobs["precision"] = "bf16-mixed";
    else if (*v == "no")
      c.knobs["precision"] = "fp32";
    else if (*v == "fp16")
      c.knobs["precision"] = "fp16-mixed";  // accelerate: MixedPrecision(float16) + ShardedGradScaler
    else if (*v == "fp8") {
      c.knobs["precision"] = "bf16-mixed";
      c.knobs["fp8"] = "tensorwise";
    } else {
      throw InputError(path, "mixed_precision", "expected no, bf16, fp16 or fp8, got \"" + *v + "\"");
    }
  }
  if (auto* v = get(fc + "fsdp_backward_prefetch")) {
    if (*v == "NO_PREFETCH")
      c.knobs["prefetch"] = "0";
    else if (*v == "BACKWARD_POST")
      c.unmodelled.push_back(fc + "fsdp_backward_prefetch BACKWARD_POST");
  }
  if (auto* v = get(fc + "fsdp_forward_prefetch"); v && lower(*v) == "true")
    c.unmodelled.push_back(fc + "fsdp_forward_prefetch");
  if (auto* v = get(fc + "fsdp_auto_wrap_policy"); v && *v != "TRANSFORMER_BASED_WRAP")
    c.unmodelled.push_back(fc + "fsdp_auto_wrap_policy " + *v +
                           " (one unit per transformer block is simulated)");
  get(fc + "fsdp_min_num_params");
  get(fc + "fsdp_version");
  return finish(c);
}

}  // namespace shardplan::import
