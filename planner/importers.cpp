// Importers for --from: each maps the keys of a framework config to plan knobs as the framework means them.
// The mapping of every key is documented in docs/formats.md ("--from").
#include "planner/importers.hpp"

#include <fstream>
#include <sstream>

#include "core/error.hpp"
#include "core/json_reader.hpp"

namespace shardplan {

namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InputError(path, "", "cannot open the file");
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  const auto a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r") - a + 1);
}

// --- DeepSpeed
// ------------------------------------------------------------------------------------------------

std::string json_int(const Json& j, const std::string& path, const std::string& key) {
  if (!j.is_number_integer() &&
      !(j.is_number() && j.get<double>() == static_cast<double>(j.get<std::int64_t>())))
    throw InputError(path, key, "expected an integer, got " + j.dump());
  return std::to_string(j.get<std::int64_t>());
}

bool json_true(const Json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_boolean() && j[key].get<bool>();
}

ImportedConfig import_deepspeed(const std::string& path) {
  const Json j = load_json_file(path);
  if (!j.is_object()) throw InputError(path, "", "a ds_config is a JSON object");
  ImportedConfig c;
  c.format = "deepspeed";
  c.knobs["runtime"] = "deepspeed";
  auto value_of = [&](const Json& o, const char* k) -> const Json* {
    return o.contains(k) ? &o[k] : nullptr;
  };
  // "auto" (the Hugging Face Trainer's placeholder) leaves the knob to the flags.
  auto is_auto = [](const Json* v) { return v && v->is_string() && v->get<std::string>() == "auto"; };
  if (auto* v = value_of(j, "train_micro_batch_size_per_gpu"); v && !is_auto(v))
    c.knobs["mbs"] = json_int(*v, path, "train_micro_batch_size_per_gpu");
  if (auto* v = value_of(j, "gradient_accumulation_steps"); v && !is_auto(v))
    c.knobs["grad_accum"] = json_int(*v, path, "gradient_accumulation_steps");
  if (auto* v = value_of(j, "train_batch_size"); v && !is_auto(v)) {
    c.global_batch = std::stoll(json_int(*v, path, "train_batch_size"));
    c.global_batch_key = "train_batch_size";
  }
  const Json zero = j.value("zero_optimization", Json::object());
  const int stage =
      zero.contains("stage") ? std::stoi(json_int(zero["stage"], path, "zero_optimization.stage")) : 0;
  if (stage < 0 || stage > 3) throw InputError(path, "zero_optimization.stage", "must be 0..3");
  c.knobs["zero"] = std::to_string(stage);
  // Precision (deepspeed/runtime/precision_config.py): bf16.enabled = bf16 compute with fp32 master weights
  // and Adam state, which is --precision bf16-mixed (not --precision bf16, whose master copy is 16-bit).
  const Json bf16 = j.value("bf16", Json::object()), fp16 = j.value("fp16", Json::object());
  if (json_true(bf16, "enabled")) {
    c.knobs["precision"] = json_true(bf16, "bf16_optimizer_states")           ? "bf16-true"
                           : json_true(bf16, "bf16_master_weights_and_grads") ? "bf16"
                                                                              : "bf16-mixed";
  } else if (json_true(fp16, "enabled")) {
    c.knobs["precision"] = "bf16-mixed";  // same bytes per parameter; loss scaling is not modelled
    c.unmodelled.push_back("fp16.enabled (simulated as bf16-mixed: same sizes, no loss scaling)");
  } else {
    c.knobs["precision"] = "fp32";
  }
  if (auto* v = value_of(j, "communication_data_type"); v && v->is_string()) {
    const std::string t = lower(v->get<std::string>());
    if (t == "fp32")
      c.knobs["reduce_dtype"] = "fp32";
    else if (t == "bf16" || t == "fp16")
      c.knobs["reduce_dtype"] = "bf16";
    else
      throw InputError(path, "communication_data_type", "expected fp32, bf16 or fp16, got \"" + t + "\"");
  }
  const Json tp = j.value("tensor_parallel", j.value("tp", Json::object()));
  if (tp.is_object() && tp.contains("autotp_size")) {
    const std::string v = json_int(tp["autotp_size"], path, "tensor_parallel.autotp_size");
    if (std::stoll(v) > 1) c.knobs["tp"] = v;  // 0 = AutoTP off
  }
  auto offload_device = [&](const char* k) -> std::string {
    if (!zero.contains(k) || !zero[k].is_object()) return "none";
    std::string d = lower(zero[k].value("device", std::string("none")));
    if (d == "nvme")
      c.unmodelled.push_back(std::string("zero_optimization.") + k + ".device nvme (simulated as cpu)");
    return d;
  };
  const std::string off_opt = offload_device("offload_optimizer"),
                    off_param = offload_device("offload_param");
  if (off_param != "none") {
    if (stage != 3)
      throw InputError(path, "zero_optimization.offload_param",
                       "DeepSpeed offloads parameters only in stage 3");
    c.knobs["offload"] = "params";
  } else if (off_opt != "none") {
    if (stage == 0) throw InputError(path, "zero_optimization.offload_optimizer", "needs stage 1, 2 or 3");
    c.knobs["offload"] = "optimizer";
  } else {
    c.knobs["offload"] = "none";
  }
  // DeepSpeed defaults the simulator assumes (deepspeed/runtime/zero/config.py; docs/mechanics.md §1.2).
  const std::pair<const char*, double> defaults[] = {{"reduce_bucket_size", 5e8},
                                                     {"allgather_bucket_size", 5e8},
                                                     {"stage3_prefetch_bucket_size", 5e7},
                                                     {"stage3_max_live_parameters", 1e9},
                                                     {"stage3_max_reuse_distance", 1e9},
                                                     {"stage3_param_persistence_threshold", 1e5},
                                                     {"sub_group_size", 1e9}};
  for (const auto& [k, def] : defaults)
    if (zero.contains(k) && zero[k].is_number() && zero[k].get<double>() != def)
      c.unmodelled.push_back(std::string("zero_optimization.") + k);
  if (zero.contains("overlap_comm") && zero["overlap_comm"].is_boolean() &&
      zero["overlap_comm"].get<bool>() != (stage == 3))
    c.unmodelled.push_back("zero_optimization.overlap_comm");
  for (const char* k : {"mics_shard_size", "zero_hpz_partition_size"})
    if (zero.contains(k) && zero[k].is_number() && zero[k].get<double>() > 1)
      c.unmodelled.push_back(std::string("zero_optimization.") + k + " (MiCS / hpZ)");
  const Json ac = j.value("activation_checkpointing", Json::object());
  for (const char* k : {"partition_activations", "cpu_checkpointing"})
    if (json_true(ac, k)) c.unmodelled.push_back(std::string("activation_checkpointing.") + k);
  if (j.contains("compile") && json_true(j["compile"], "enabled")) c.knobs["compile"] = "true";
  return c;
}

// --- a small TOML reader for the flat subset torchtitan configs use
// --------------------------------------------

/// "section.key" -> raw value text (strings unquoted; arrays kept as written).
std::map<std::string, std::string> read_toml(const std::string& path) {
  std::map<std::string, std::string> out;
  std::istringstream in(read_file(path));
  std::string line, section;
  int n = 0;
  while (std::getline(in, line)) {
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
      if (s.back() != ']') throw InputError(path, "line " + std::to_string(n), "unterminated section header");
      section = trim(s.substr(1, s.size() - 2));
      continue;
    }
    const auto eq = s.find('=');
    if (eq == std::string::npos) throw InputError(path, "line " + std::to_string(n), "expected KEY = VALUE");
    std::string v = trim(s.substr(eq + 1));
    if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'') && v.back() == v.front())
      v = v.substr(1, v.size() - 2);
    out[(section.empty() ? "" : section + ".") + trim(s.substr(0, eq))] = v;
  }
  return out;
}

std::string int_text(const std::string& path, const std::string& key, const std::string& v) {
  try {
    std::size_t used = 0;
    const long long x = std::stoll(v, &used);
    if (used != v.size()) throw std::invalid_argument(v);
    return std::to_string(x);
  } catch (const std::exception&) {
    throw InputError(path, key, "expected an integer, got \"" + v + "\"");
  }
}

std::string bool_text(const std::string& path, const std::string& key, const std::string& v) {
  const std::string l = lower(v);
  if (l == "true" || l == "false") return l;
  throw InputError(path, key, "expected true or false, got \"" + v + "\"");
}

std::string dtype_text(const std::string& path, const std::string& key, const std::string& v) {
  if (v == "float32") return "fp32";
  if (v == "bfloat16") return "bf16";
  throw InputError(path, key, "expected float32 or bfloat16, got \"" + v + "\"");
}

ImportedConfig import_torchtitan(const std::string& path) {
  const auto t = read_toml(path);
  auto get = [&](const char* k) -> const std::string* {
    auto it = t.find(k);
    return it == t.end() ? nullptr : &it->second;
  };
  ImportedConfig c;
  c.format = "torchtitan";
  c.knobs["runtime"] = "fsdp2";
  for (const char* k : {"parallelism.pipeline_parallel_degree"})
    if (auto* v = get(k); v && std::stoll(int_text(path, k, *v)) > 1)
      throw InputError(path, k, "pipeline parallelism is not modelled");
  // Context and expert parallelism: the plan's cp and ep (torchtitan ParallelismConfig).
  if (auto* v = get("parallelism.context_parallel_degree"))
    c.knobs["cp"] = int_text(path, "parallelism.context_parallel_degree", *v);
  if (auto* v = get("parallelism.expert_parallel_degree"))
    c.knobs["ep"] = int_text(path, "parallelism.expert_parallel_degree", *v);
  const long long shard = get("parallelism.data_parallel_shard_degree")
                              ? std::stoll(int_text(path, "parallelism.data_parallel_shard_degree",
                                                    *get("parallelism.data_parallel_shard_degree")))
                              : -1;
  const long long rep = get("parallelism.data_parallel_replicate_degree")
                            ? std::stoll(int_text(path, "parallelism.data_parallel_replicate_degree",
                                                  *get("parallelism.data_parallel_replicate_degree")))
                            : 1;
  // shard degree -1: every data-parallel rank not used by replicate (torchtitan's ParallelDims); 1 with
  // replicas: plain data parallel (DDP), which is ZeRO-0.
  if (shard == -1 && rep > 1)
    throw InputError(path, "parallelism.data_parallel_shard_degree",
                     "give the shard degree explicitly with data_parallel_replicate_degree > 1 (HSDP)");
  if (shard == 1 && rep > 1) {
    c.knobs["zero"] = "0";
  } else {
    c.knobs["zero"] = "3";
    if (shard > 1) c.knobs["shard_group"] = std::to_string(shard);
  }
  if (auto* v = get("parallelism.tensor_parallel_degree"))
    c.knobs["tp"] = int_text(path, "parallelism.tensor_parallel_degree", *v);
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
  if (auto* v = get("activation_checkpoint.mode")) {
    if (*v != "none" && *v != "selective" && *v != "full")
      throw InputError(path, "activation_checkpoint.mode",
                       "expected none, selective or full, got \"" + *v + "\"");
    c.knobs["ac"] = *v;
    if (auto* o = get("activation_checkpoint.selective_ac_option"); o && *v == "selective" && *o != "op")
      c.unmodelled.push_back("activation_checkpoint.selective_ac_option " + *o +
                             " (layer-level SAC; simulated as the op policy)");
  }
  for (const char* k : {"training.local_batch_size", "training.batch_size"})
    if (auto* v = get(k)) c.knobs["mbs"] = int_text(path, k, *v);
  if (auto* v = get("training.global_batch_size");
      v && std::stoll(int_text(path, "training.global_batch_size", *v)) > 0) {
    c.global_batch = std::stoll(*v);
    c.global_batch_key = "training.global_batch_size";
  }
  if (auto* v = get("training.seq_len")) c.knobs["seq"] = int_text(path, "training.seq_len", *v);
  if (auto* v = get("training.mixed_precision_param"))
    c.knobs["precision"] =
        dtype_text(path, "training.mixed_precision_param", *v) == "fp32" ? "fp32" : "bf16-mixed";
  if (auto* v = get("training.mixed_precision_reduce"))
    c.knobs["reduce_dtype"] = dtype_text(path, "training.mixed_precision_reduce", *v);
  if (auto* v = get("training.enable_cpu_offload");
      v && bool_text(path, "training.enable_cpu_offload", *v) == "true")
    c.knobs["offload"] = "params";
  for (const char* k : {"compile.enable", "training.compile"})
    if (auto* v = get(k)) c.knobs["compile"] = bool_text(path, k, *v);
  const std::string* conv = get("model.converters");
  const bool fp8 = (conv && conv->find("float8") != std::string::npos) ||
                   (get("float8.enable_float8_linear") && *get("float8.enable_float8_linear") == "true");
  if (fp8) {
    c.knobs["fp8"] =
        get("float8.recipe_name") && *get("float8.recipe_name") == "rowwise" ? "rowwise" : "tensorwise";
    if (auto* v = get("float8.enable_fsdp_float8_all_gather"))
      c.knobs["fp8_all_gather"] = bool_text(path, "float8.enable_fsdp_float8_all_gather", *v);
  }
  if (auto* v = get("optimizer.implementation")) {
    if (*v == "fused")
      c.knobs["fused_optimizer"] = "true";
    else if (*v == "foreach" || *v == "for-loop")
      c.knobs["fused_optimizer"] = "false";
  }
  return c;
}

// --- accelerate's FSDP YAML (the flat subset `accelerate config` writes)
// -------------------------------------

std::map<std::string, std::string> read_flat_yaml(const std::string& path) {
  std::map<std::string, std::string> out;
  std::istringstream in(read_file(path));
  std::string line, parent;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (const auto h = line.find(" #"); h != std::string::npos) line = line.substr(0, h);
    if (trim(line).empty() || trim(line)[0] == '#' || trim(line) == "---") continue;
    const bool indented = line[0] == ' ' || line[0] == '\t';
    const std::string s = trim(line);
    const auto colon = s.find(':');
    if (colon == std::string::npos)
      throw InputError(path, "line " + std::to_string(n), "expected KEY: VALUE");
    const std::string key = trim(s.substr(0, colon));
    std::string v = trim(s.substr(colon + 1));
    if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'') && v.back() == v.front())
      v = v.substr(1, v.size() - 2);
    if (!indented) {
      parent = v.empty() ? key : "";
      if (!v.empty()) out[key] = v;
    } else {
      if (parent.empty())
        throw InputError(path, "line " + std::to_string(n), "indented key without a parent");
      out[parent + "." + key] = v;
    }
  }
  return out;
}

ImportedConfig import_accelerate(const std::string& path) {
  const auto y = read_flat_yaml(path);
  auto get = [&](const std::string& k) -> const std::string* {
    auto it = y.find(k);
    return it == y.end() ? nullptr : &it->second;
  };
  ImportedConfig c;
  c.format = "accelerate";
  if (auto* v = get("distributed_type"); !v || *v != "FSDP")
    throw InputError(path, "distributed_type",
                     "only accelerate FSDP configs are read (distributed_type: FSDP)");
  const std::string fc = "fsdp_config.";
  const bool v2 = get(fc + "fsdp_version") && *get(fc + "fsdp_version") == "2";
  c.knobs["runtime"] = v2 ? "fsdp2" : "fsdp1";
  // fsdp_sharding_strategy (FSDP1; names or accelerate's 1..5 numbering); FSDP2 uses
  // fsdp_reshard_after_forward.
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
    else if (*v == "fp16") {
      c.knobs["precision"] = "bf16-mixed";
      c.unmodelled.push_back("mixed_precision fp16 (simulated as bf16-mixed: same sizes, no loss scaling)");
    } else if (*v == "fp8") {
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
  return c;
}

}  // namespace

ImportedConfig import_config(const std::string& path) {
  auto ends = [&](const char* e) {
    const std::string s(e);
    return path.size() >= s.size() && lower(path.substr(path.size() - s.size())) == s;
  };
  if (ends(".json")) return import_deepspeed(path);
  if (ends(".toml")) return import_torchtitan(path);
  if (ends(".yaml") || ends(".yml")) return import_accelerate(path);
  throw InputError(
      path, "",
      "unknown config format: expected a DeepSpeed .json, a torchtitan .toml or an accelerate .yaml");
}

}  // namespace shardplan
