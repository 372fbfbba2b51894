// Importers for --from: each maps the keys of a framework config to plan knobs as the framework means them.
// The mapping of every key is documented in docs/formats.md ("--from").
#include "planner/importers.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.hpp"
#include "core/json_reader.hpp"
#include "planner/frameworks.hpp"
#include "planner/py_config.hpp"

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
                                   "elasticity.",
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

ImportedConfig import_deepspeed(const std::string& path) {
  const Json j = load_json_file(path);
  if (!j.is_object()) throw InputError(path, "", "a ds_config is a JSON object");
  ImportedConfig c;
  c.format = "deepspeed";
  c.knobs["runtime"] = "deepspeed";
  std::set<std::string> read;
  auto value_of = [&](const Json& o, const std::string& prefix, const char* k) -> const Json* {
    read.insert(prefix.empty() ? k : prefix + "." + k);
    return o.is_object() && o.contains(k) ? &o[k] : nullptr;
  };
  // "auto" is the Hugging Face Trainer's placeholder: transformers' HfTrainerDeepSpeedConfig
  // (integrations/deepspeed.py trainer_config_process / trainer_config_finalize) fills it from the
  // TrainingArguments and the model. Each is resolved as transformers does with its defaults, or the
  // assumption is said.
  auto is_auto = [](const Json* v) { return v && v->is_string() && v->get<std::string>() == "auto"; };
  if (auto* v = value_of(j, "", "train_micro_batch_size_per_gpu"); v && !is_auto(v)) {
    c.knobs["mbs"] = json_int(*v, path, "train_micro_batch_size_per_gpu");
  } else if (is_auto(v)) {
    c.knobs["mbs"] = "8";
    c.assumed.push_back(
        "train_micro_batch_size_per_gpu \"auto\" = transformers' per_device_train_batch_size, "
        "taken at its default 8 (give --mbs for yours)");
  }
  if (auto* v = value_of(j, "", "gradient_accumulation_steps"); v && !is_auto(v))
    c.knobs["grad_accum"] = json_int(*v, path, "gradient_accumulation_steps");
  else if (is_auto(v))
    c.assumed.push_back(
        "gradient_accumulation_steps \"auto\" is transformers' gradient_accumulation_steps "
        "(default 1)");
  if (auto* v = value_of(j, "", "train_batch_size"); v && !is_auto(v)) {
    c.global_batch = std::stoll(json_int(*v, path, "train_batch_size"));
    c.global_batch_key = "train_batch_size";
  }
  const Json zero = j.value("zero_optimization", Json::object());
  const Json* st = value_of(zero, "zero_optimization", "stage");
  const int stage = st ? std::stoi(json_int(*st, path, "zero_optimization.stage")) : 0;
  if (stage < 0 || stage > 3) throw InputError(path, "zero_optimization.stage", "must be 0..3");
  c.knobs["zero"] = std::to_string(stage);
  // Precision (deepspeed/runtime/precision_config.py): bf16.enabled = bf16 compute with fp32 master weights
  // and Adam state, which is --precision bf16-mixed (not --precision bf16, whose master copy is 16-bit).
  const Json bf16 = j.value("bf16", Json::object()), fp16 = j.value("fp16", Json::object());
  const Json* bf16_on = value_of(bf16, "bf16", "enabled");
  const Json* fp16_on = value_of(fp16, "fp16", "enabled");
  value_of(bf16, "bf16", "bf16_optimizer_states");
  value_of(bf16, "bf16", "bf16_master_weights_and_grads");
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
  if (auto* v = value_of(j, "", "communication_data_type"); v && v->is_string()) {
    const std::string t = lower(v->get<std::string>());
    if (t == "fp32")
      c.knobs["reduce_dtype"] = "fp32";
    else if (t == "bf16" || t == "fp16")
      c.knobs["reduce_dtype"] = "bf16";
    else
      throw InputError(path, "communication_data_type", "expected fp32, bf16 or fp16, got \"" + t + "\"");
  }
  for (const char* tp_key : {"tensor_parallel", "tp"}) {
    const Json tp = j.value(tp_key, Json::object());
    if (const Json* v = value_of(tp, tp_key, "autotp_size")) {
      const std::string n = json_int(*v, path, std::string(tp_key) + ".autotp_size");
      if (std::stoll(n) > 1) c.knobs["tp"] = n;  // 0 = AutoTP off
    }
  }
  auto offload_device = [&](const char* k) -> std::string {
    const std::string key = std::string("zero_optimization.") + k;
    read.insert(key + ".device");
    if (!zero.contains(k) || !zero[k].is_object()) return "none";
    std::string d = lower(zero[k].value("device", std::string("none")));
    if (d == "nvme") c.unmodelled.push_back(key + ".device nvme (simulated as cpu)");
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
    const Json* v = value_of(zero, "zero_optimization", k);
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
  if (const Json* v = value_of(zero, "zero_optimization", "overlap_comm");
      v && v->is_boolean() && v->get<bool>() != (stage == 3))
    c.unmodelled.push_back("zero_optimization.overlap_comm");
  for (const char* k : {"mics_shard_size", "zero_hpz_partition_size"})
    if (const Json* v = value_of(zero, "zero_optimization", k); v && v->is_number() && v->get<double>() > 1)
      c.unmodelled.push_back(std::string("zero_optimization.") + k + " (MiCS / hpZ)");
  for (const char* k :
       {"zero_quantized_weights", "zero_quantized_gradients", "zero_quantized_nontrainable_weights"})
    if (const Json* v = value_of(zero, "zero_optimization", k); v && v->is_boolean() && v->get<bool>())
      c.unmodelled.push_back(std::string("zero_optimization.") + k + " (ZeRO++ quantized communication)");
  const Json ac = j.value("activation_checkpointing", Json::object());
  for (const char* k : {"partition_activations", "cpu_checkpointing"})
    if (value_of(ac, "activation_checkpointing", k) && json_true(ac, k))
      c.unmodelled.push_back(std::string("activation_checkpointing.") + k);
  for (const char* k :
       {"contiguous_memory_optimization", "number_checkpoints", "synchronize_checkpoint_boundary", "profile"})
    value_of(ac, "activation_checkpointing",
             k);  // settings of DeepSpeed's checkpointing API, used by the model
  const Json compile = j.value("compile", Json::object()), optimizer = j.value("optimizer", Json::object());
  if (const Json* v = value_of(compile, "compile", "enabled"); v && v->is_boolean())
    c.knobs["compile"] = v->get<bool>() ? "true" : "false";
  // The optimizer block (deepspeed/runtime/engine.py _configure_basic_optimizer, v0.19.8): "Adam" (and
  // FusedAdam / CPUAdam) runs AdamW unless adam_w_mode is false; other names FusedLion or torch.optim's class
  // of that name.
  if (const Json* t = value_of(optimizer, "optimizer", "type"); t && t->is_string()) {
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
  std::map<std::string, std::string> leaves;
  json_leaves(j, "", leaves);
  for (const auto& [k, v] : leaves)
    if (!read.count(k) && !deepspeed_inert(k)) c.unread.push_back(k + " = " + v);
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

/// The stages of parallelism.module_fqns_per_model_part, as the TOML writes it and TitanReader renders a
/// Python list of lists: [["tok_embeddings", "layers.0"], ["layers.1", "norm", "lm_head"]] -> module names
/// per stage.
std::vector<std::vector<std::string>> fqn_parts(const std::string& path, const std::string& key,
                                                const std::string& text) {
  std::vector<std::vector<std::string>> parts;
  int depth = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (ch == '[') {
      if (++depth == 2) parts.emplace_back();
      if (depth > 2) throw InputError(path, key, "expected a list of lists of module names");
    } else if (ch == ']') {
      --depth;
    } else if (ch == '"' || ch == '\'') {
      const std::size_t end = text.find(ch, i + 1);
      if (depth != 2 || end == std::string::npos)
        throw InputError(path, key, "expected a list of lists of module names, got " + text);
      parts.back().push_back(text.substr(i + 1, end - i - 1));
      i = end;
    }
  }
  if (depth != 0 || parts.empty()) throw InputError(path, key, "expected a list of lists of module names");
  return parts;
}

/// torch.distributed.pipelining's schedule names (get_schedule_class, torch/distributed/pipelining/
/// schedules.py) of the schedules the simulator models (simulator/parallel/pipeline_schedule.cpp), and the
/// plan's name.
const std::vector<std::pair<std::string, std::string>>& titan_schedules() {
  static const std::vector<std::pair<std::string, std::string>> s = {{"GPipe", "gpipe"},
                                                                     {"1F1B", "1f1b"},
                                                                     {"Interleaved1F1B", "interleaved-1f1b"},
                                                                     {"ZBVZeroBubble", "zbv"},
                                                                     {"DualPipeV", "dualpipev"}};
  return s;
}

/// The parallel degrees both torchtitan formats share (ParallelismConfig / [parallelism]): pipeline
/// parallelism (degree, schedule, stages), context and expert parallelism, the data-parallel shard and
/// replicate degrees as ZeRO stage and shard group, and tensor parallelism. `get(key)` is the file's value
/// text for a dotted key, or nullptr.
template <class Get>
void read_titan_parallelism(const std::string& path, const Get& get, ImportedConfig& c) {
  auto degree = [&](const char* knob, const std::string& key) {
    if (auto* v = get(key.c_str())) {
      c.knobs[knob] = int_text(path, key, *v);
      c.source[knob] = key + " = " + c.knobs[knob];
    }
  };
  degree("pp", "parallelism.pipeline_parallel_degree");
  if (c.knobs.count("pp") && std::stoll(c.knobs["pp"]) > 1) {
    // torchtitan/distributed/pipeline_parallel.py (0.3.0): the schedule by name, stages per rank from
    // module_fqns_per_model_part (or 1 for single-stage and 2 for looped schedules), micro-batches of
    // pipeline_parallel_microbatch_size out of local_batch_size (read_titan_pipeline_batch).
    const long long pp = std::stoll(c.knobs["pp"]);
    const std::string skey = "parallelism.pipeline_parallel_schedule";
    const std::string sched = get(skey.c_str()) ? *get(skey.c_str()) : "1F1B";
    std::string names;
    for (const auto& [titan, ours] : titan_schedules()) {
      names += (names.empty() ? "" : ", ") + titan;
      if (titan == sched) c.knobs["pp_schedule"] = ours;
    }
    if (!c.knobs.count("pp_schedule"))
      throw InputError(path, skey, "\"" + sched + "\" is not a schedule shardplan models (" + names + ")");
    c.source["pp_schedule"] = skey + " = " + sched;
    if (auto* v = get("parallelism.pipeline_parallel_schedule_csv"); v && !v->empty() && *v != "None")
      throw InputError(path, "parallelism.pipeline_parallel_schedule_csv",
                       "a schedule from a CSV file is not modelled");
    const std::string fkey = "parallelism.module_fqns_per_model_part";
    if (auto* v = get(fkey.c_str()); v && *v != "None") {
      const auto parts = fqn_parts(path, fkey, *v);
      if (parts.size() % static_cast<std::size_t>(pp) != 0)
        throw InputError(path, fkey,
                         std::to_string(parts.size()) +
                             " model parts are not a multiple of the pipeline degree " + std::to_string(pp));
      std::string layers;
      for (const auto& part : parts) {
        const auto n = std::count_if(part.begin(), part.end(),
                                     [](const std::string& m) { return m.rfind("layers.", 0) == 0; });
        layers += (layers.empty() ? "" : ",") + std::to_string(n);
      }
      c.knobs["virtual_stages"] = std::to_string(parts.size() / static_cast<std::size_t>(pp));
      c.knobs["pp_layers"] = layers;
      c.source["pp_layers"] = fkey;
      c.source["virtual_stages"] = fkey;
    } else if (auto* l = get("parallelism.pipeline_parallel_layers_per_stage"); l && *l != "None") {
      throw InputError(path, "parallelism.pipeline_parallel_layers_per_stage",
                       "stages of " + *l +
                           " layers are not read (the stage count depends on the model's layers): write "
                           "module_fqns_per_model_part, or give --virtual-stages / --pp-layers");
    }
    for (const char* k : {"parallelism.pipeline_parallel_first_stage_less_layers",
                          "parallelism.pipeline_parallel_last_stage_less_layers"})
      if (auto* v = get(k); v && int_text(path, k, *v) != "1" && !c.knobs.count("pp_layers"))
        c.unmodelled.push_back(std::string(k) + " " + *v + " (torchtitan's split with 1 is simulated)");
  }
  // Context and expert parallelism: the plan's cp and ep (torchtitan ParallelismConfig).
  degree("cp", "parallelism.context_parallel_degree");
  degree("ep", "parallelism.expert_parallel_degree");
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
  degree("tp", "parallelism.tensor_parallel_degree");
}

/// Under pipeline parallelism torchtitan splits each rank's local_batch_size into micro-batches of
/// pipeline_parallel_microbatch_size (pipeline_parallel.py _build_pipeline_schedule): the plan's micro-batch
/// is that size, and its micro-batches per step are local_batch_size / size times torchtitan's gradient
/// accumulation (derived from the global batch, or 1 without one).
template <class Get>
void read_titan_pipeline_batch(const std::string& path, const Get& get, ImportedConfig& c) {
  if (!c.knobs.count("pp") || std::stoll(c.knobs["pp"]) <= 1) return;
  const std::string mkey = "parallelism.pipeline_parallel_microbatch_size";
  const long long micro = get(mkey.c_str()) ? std::stoll(int_text(path, mkey, *get(mkey.c_str()))) : 1;
  if (micro < 1) throw InputError(path, mkey, "must be >= 1");
  const long long local = c.knobs.count("mbs") ? std::stoll(c.knobs["mbs"]) : 8;  // TrainingConfig default
  if (local % micro != 0)
    throw InputError(
        path, mkey,
        std::to_string(micro) + " does not divide training.local_batch_size " + std::to_string(local));
  c.knobs["mbs"] = std::to_string(micro);
  if (c.global_batch <= 0) c.knobs["grad_accum"] = std::to_string(local / micro);
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

/// A torchtitan TOML's layout dates it: each marker bounds the torchtitan commit dates whose JobConfig had it
/// (the dates of the train_configs that first / last carried it: git log of torchtitan/models/llama3/
/// train_configs/llama3_8b.toml and its predecessors). The version defaults are those of the latest date the
/// markers allow; the rows that change inside the range are named.
void date_titan_toml(const std::map<std::string, std::string>& t, ImportedConfig& c) {
  struct Marker {
    const char* what;
    bool (*present)(const std::map<std::string, std::string>&);
    const char* from;  // inclusive
    const char* to;    // exclusive
  };
  static const Marker markers[] = {
      {"[experimental] (parallel degrees beside [training])",
       [](const std::map<std::string, std::string>& m) {
         for (const auto& [k, v] : m)
           if (k.rfind("experimental.", 0) == 0 && k.find("parallel") != std::string::npos) return true;
         return false;
       },
       "2024-06-12", "2025-04-07"},
      {"training.tensor_parallel_degree",
       [](const std::map<std::string, std::string>& m) {
         return m.count("training.tensor_parallel_degree") > 0 ||
                m.count("training.data_parallel_shard_degree") > 0;
       },
       "", "2025-04-07"},
      {"float8.enable_float8_linear",
       [](const std::map<std::string, std::string>& m) { return m.count("float8.enable_float8_linear") > 0; },
       "", "2025-02-15"},
      {"model.norm_type",
       [](const std::map<std::string, std::string>& m) { return m.count("model.norm_type") > 0; }, "",
       "2025-04-17"},
      {"model.converters",
       [](const std::map<std::string, std::string>& m) { return m.count("model.converters") > 0; },
       "2025-02-15", ""},
      {"[parallelism]",
       [](const std::map<std::string, std::string>& m) {
         for (const auto& [k, v] : m)
           if (k.rfind("parallelism.", 0) == 0) return true;
         return false;
       },
       "2025-04-07", ""},
      {"training.local_batch_size",
       [](const std::map<std::string, std::string>& m) { return m.count("training.local_batch_size") > 0; },
       "2025-06-05", ""},
      {"[compile]",
       [](const std::map<std::string, std::string>& m) {
         for (const auto& [k, v] : m)
           if (k.rfind("compile.", 0) == 0) return true;
         return false;
       },
       "2025-08-20", ""},
      {"[quantize.*]",
       [](const std::map<std::string, std::string>& m) {
         for (const auto& [k, v] : m)
           if (k.rfind("quantize.", 0) == 0) return true;
         return false;
       },
       "2025-09-26", ""},
  };
  std::string from = "2024-04-01",
              to = "2026-02-23";  // the TOML era: torchtitan's first configs .. 9810191bb
  std::vector<std::string> seen;
  for (const Marker& m : markers) {
    if (!m.present(t)) continue;
    seen.push_back(m.what);
    if (*m.from && m.from > from) from = m.from;
    if (*m.to && m.to < to) to = m.to;
  }
  if (from >= to) {
    c.assumed.push_back("the file mixes torchtitan layouts of different dates (" + join_names(seen) +
                        "): no version defaults inferred (give --framework torchtitan@DATE)");
    return;
  }
  // The latest day before `to`: "2025-04-07" -> "2025-04-06" (day arithmetic on ISO dates via a civil day
  // count).
  auto days = [](const std::string& d) {
    int y = std::stoi(d.substr(0, 4)), m = std::stoi(d.substr(5, 2)), dd = std::stoi(d.substr(8, 2));
    y -= m <= 2;
    const int era = (y >= 0 ? y : y - 399) / 400;
    const int yoe = y - era * 400, doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + dd - 1;
    return era * 146097 + yoe * 365 + yoe / 4 - yoe / 100 + doy;
  };
  auto date_of = [](int z) {
    z += 719468;
    const int era = (z >= 0 ? z : z - 146096) / 146097, doe = z - era * 146097;
    const int yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365,
              doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    const int mp = (5 * doy + 2) / 153, d = doy - (153 * mp + 2) / 5 + 1, m = mp + (mp < 10 ? 3 : -9);
    const int y = yoe + era * 400 + (m <= 2);
    return fmt::format("{:04d}-{:02d}-{:02d}", y, m, d);
  };
  const std::string latest =
      date_of(days(to) - 1 - 719468);  // days() counts from 0000-03-01, date_of from 1970
  c.framework = "torchtitan@" + latest;
  std::string changing;
  std::set<std::string> named;
  for (const VersionRule& r : version_rules())
    if (std::string(r.framework) == "torchtitan" && !r.launcher &&
        ((*r.from && r.from > from && r.from < to) || (*r.to && r.to > from && r.to < to)) &&
        named.insert(r.knob).second)
      changing += std::string(changing.empty() ? "" : ", ") + r.knob + " (" + (*r.from ? r.from : r.to) + ")";
  c.framework_reason =
      "the file's layout (" + join_names(seen.empty() ? std::vector<std::string>{"no dated key"} : seen) +
      ") dates it to torchtitan of " + from + " .. " + to + ", the defaults of its latest day" +
      (changing.empty() ? "" : "; within that range changes " + changing);
}

ImportedConfig import_torchtitan(const std::string& path) {
  auto t = read_toml(path);
  ImportedConfig c;
  c.format = "torchtitan";
  c.knobs["runtime"] = "fsdp2";
  date_titan_toml(t, c);
  // Older layouts (before [parallelism], 2025-04): the parallel degrees under [training] and [experimental],
  // the float8 switch under [float8]; newer ones (2025-09): float8 under [quantize.dense.float8] /
  // [quantize.linear.float8]. Each is read as the [parallelism] / [float8] key it became.
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
  std::set<std::string> read;  // keys the reader used
  for (const auto& [old_key, new_key] : moved)
    if (auto it = t.find(old_key); it != t.end()) {
      read.insert(old_key);
      if (!t.count(new_key)) t[new_key] = it->second, read.insert(new_key);
    }
  auto get = [&](const char* k) -> const std::string* {
    read.insert(k);
    auto it = t.find(k);
    return it == t.end() ? nullptr : &it->second;
  };
  read_titan_parallelism(path, get, c);
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
  if (conv && conv->find("float8") == std::string::npos && *conv != "[]" && !conv->empty())
    c.unmodelled.push_back("model.converters " + *conv + " (not modelled)");
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
  if (auto* n = get("model.name"), *f = get("model.flavor"); n && f) c.model = *n + " " + *f;
  read_titan_pipeline_batch(path, get, c);
  for (const auto& [k, v] : t)
    if (!read.count(k) && !titan_toml_inert(k)) c.unread.push_back(k + " = " + v);
  return c;
}

// --- torchtitan 0.3.0's Python config (a function returning Trainer.Config)
// -------------------------------

/// The fields torchtitan's dataclasses take when a constructor leaves them out (torchtitan 0.3.0,
/// torchtitan/config/configs.py, trainer.py Trainer.Config, components/optimizer/optimizer.py,
/// components/quantization/float8.py): a constructor call in the file means exactly these unless its
/// arguments say otherwise.
const std::map<std::string, std::vector<std::pair<std::string, std::string>>>& titan_defaults() {
  static const std::map<std::string, std::vector<std::pair<std::string, std::string>>> d = {
      {"training",
       {{"local_batch_size", "8"},
        {"global_batch_size", "-1"},
        {"seq_len", "2048"},
        {"dtype", "float32"},
        {"mixed_precision_param", "bfloat16"},
        {"mixed_precision_reduce", "float32"},
        {"enable_cpu_offload", "false"}}},
      {"parallelism",
       {{"data_parallel_replicate_degree", "1"},
        {"data_parallel_shard_degree", "-1"},
        {"tensor_parallel_degree", "1"},
        {"fsdp_reshard_after_forward", "default"},
        {"enable_sequence_parallel", "true"},
        {"enable_fsdp_symm_mem", "false"},
        {"pipeline_parallel_degree", "1"},
        {"pipeline_parallel_schedule", "1F1B"},
        {"pipeline_parallel_microbatch_size", "1"},
        {"module_fqns_per_model_part", "None"},
        {"pipeline_parallel_layers_per_stage", "None"},
        {"pipeline_parallel_first_stage_less_layers", "1"},
        {"pipeline_parallel_last_stage_less_layers", "1"},
        {"context_parallel_degree", "1"},
        {"expert_parallel_degree", "1"}}},
      {"compile",
       {{"enable", "false"}, {"components", "model,loss"}, {"enable_async_tensor_parallel", "false"}}},
      {"optimizer", {{"implementation", "fused"}}},
      {"float8", {{"recipe_name", "rowwise"}, {"emulate", "false"}}},
  };
  return d;
}

/// Reads the config function of a torchtitan 0.3.0 module by following its statements in order: calls of
/// the config dataclasses (TrainingConfig(...), Trainer.Config(...), ...) set their section with the
/// dataclass defaults filled in, attribute assignments (config.training.seq_len = ...) set one field, and
/// calls of other functions of the same file are followed. Fields end up as "section.key" -> text.
class TitanReader {
 public:
  TitanReader(const py::Module& m, const std::string& path) : m_(m), path_(path) {}

  std::map<std::string, std::string> fields;
  std::map<std::string, int> lines;        ///< the line each field was set on (the file's own settings)
  std::vector<std::string> others;         ///< Trainer.Config arguments the reader does not know
  std::vector<std::string> notes;          ///< unmodelled / unread, for stderr
  std::string model_module, model_flavor;  ///< model_registry's module and flavor

  void run_function(const std::string& name, int depth = 0) {
    const py::Function* f = find(name);
    if (!f) throw InputError(path_, name, "no such function in the file");
    if (depth > 8) throw InputError(path_, name, "functions call each other more than 8 deep");
    std::map<std::string, py::Value> saved = vars_;
    for (const py::Stmt& st : f->body) {
      switch (st.kind) {
        case py::Stmt::Kind::kAssign: {
          const auto dot = st.target.find('.');
          if (dot == std::string::npos) {
            vars_[st.target] = st.value;
            // `config = Trainer.Config(...)`, `config = base()`: the object being configured.
            if (st.value.kind == py::Value::Kind::kCall) apply(st.value, "", depth);
          } else {
            const std::string field = st.target.substr(dot + 1);
            if (st.value.kind == py::Value::Kind::kCall || st.value.kind == py::Value::Kind::kName)
              apply(resolve(st.value), field, depth);
            else
              set(field, st.value);
          }
          break;
        }
        case py::Stmt::Kind::kReturn:
          if (st.value.kind == py::Value::Kind::kCall) apply(st.value, "", depth);
          break;
        case py::Stmt::Kind::kExpr:
          break;  // docstrings, bare calls (print, logger.info)
        case py::Stmt::Kind::kOther:
          if (st.keyword != "import" && st.keyword != "pass" && st.keyword != "assert")
            throw InputError(path_, "line " + std::to_string(st.line),
                             "'" + st.keyword + "' in " + name +
                                 "() is outside the subset --from reads (assignments, calls with literal "
                                 "arguments, return; docs/formats.md)");
          break;
      }
    }
    vars_ = std::move(saved);
  }

 private:
  const py::Module& m_;
  const std::string& path_;
  std::map<std::string, py::Value> vars_;

  const py::Function* find(const std::string& name) const {
    for (const auto& f : m_.functions)
      if (f.name == name) return &f;
    return nullptr;
  }

  py::Value resolve(const py::Value& v) const {
    if (v.kind == py::Value::Kind::kName)
      if (auto it = vars_.find(v.text); it != vars_.end()) return it->second;
    return v;
  }

  static std::string last(const std::string& dotted) {
    const auto d = dotted.rfind('.');
    // "SelectiveAC.Config" -> "SelectiveAC.Config"; "torchtitan.config.TrainingConfig" -> "TrainingConfig".
    if (d != std::string::npos && dotted.substr(d + 1) == "Config") {
      const auto d2 = dotted.rfind('.', d - 1);
      return d2 == std::string::npos ? dotted : dotted.substr(d2 + 1);
    }
    return d == std::string::npos ? dotted : dotted.substr(d + 1);
  }

  void set(const std::string& field, const py::Value& raw) {
    const py::Value v = resolve(raw);
    std::string text;
    switch (v.kind) {
      case py::Value::Kind::kNone:
        text = "None";
        break;
      case py::Value::Kind::kBool:
        text = v.b ? "true" : "false";
        break;
      case py::Value::Kind::kInt:
        text = std::to_string(v.i);
        break;
      case py::Value::Kind::kStr:
        text = v.text;
        break;
      case py::Value::Kind::kList:
        if (!v.items.empty() && v.items[0].kind == py::Value::Kind::kList) {
          // A list of lists of names (module_fqns_per_model_part), written as the TOML writes it.
          text = "[";
          for (std::size_t k = 0; k < v.items.size(); ++k) {
            text += k ? ", [" : "[";
            for (std::size_t i = 0; i < v.items[k].items.size(); ++i)
              text += (i ? ", \"" : "\"") + v.items[k].items[i].text + "\"";
            text += "]";
          }
          text += "]";
          break;
        }
        for (std::size_t k = 0; k < v.items.size(); ++k)
          text += (k ? "," : "") +
                  (v.items[k].kind == py::Value::Kind::kStr ? v.items[k].text : v.items[k].repr());
        break;
      default:
        // Not a literal (a variable of another function, an expression): kept so that a field the plan
        // needs says what it found.
        text = "`" + v.repr() + "`";
    }
    fields[field] = text;
    lines[field] = v.line;
  }

  void defaults(const std::string& section) {
    for (const auto& [k, v] : titan_defaults().at(section)) fields[section + "." + k] = v;
  }

  /// A call that builds (part of) the config, as the value of `field` ("" = the whole Trainer.Config).
  void apply(const py::Value& raw, const std::string& field, int depth) {
    const py::Value v = resolve(raw);
    if (v.kind == py::Value::Kind::kNone) {
      set(field, v);
      return;
    }
    if (v.kind != py::Value::Kind::kCall) {
      if (!field.empty()) set(field, v);
      return;
    }
    const std::string callee = last(v.text);
    auto section = [&](const std::string& s) {
      defaults(s);
      for (const auto& [k, a] : v.kwargs) set(s + "." + k, a);
    };
    if (callee == "Trainer.Config") {
      // Trainer.Config's default_factory fields (trainer.py): the sections, SelectiveAC, a fused optimizer.
      for (const char* s : {"training", "parallelism", "compile", "optimizer"}) defaults(s);
      fields["activation_checkpoint"] = "selective";
      for (const auto& [k, a] : v.kwargs) {
        // Sections that leave memory and time alone, and the ones read below; any other is named.
        static const std::set<std::string> inert = {
            "hf_assets_path", "profiler",     "metrics", "checkpoint",      "validator", "dataloader",
            "tokenizer",      "lr_scheduler", "comm",    "fault_tolerance", "debug",     "job"};
        static const std::set<std::string> known = {
            "training", "parallelism", "compile", "optimizer", "activation_checkpoint", "model_spec", "loss"};
        if (!inert.count(k) && !known.count(k)) others.push_back(k + " = " + resolve(a).repr());
        apply(a, k, depth);
      }
    } else if (callee == "TrainingConfig") {
      section("training");
    } else if (callee == "ParallelismConfig") {
      section("parallelism");
    } else if (callee == "CompileConfig") {
      section("compile");
    } else if (callee == "OptimizersContainer.Config") {
      section("optimizer");
      // The optimizers its param groups name (ParamGroupConfig(optimizer_name=...)), for the optimizer knob.
      std::string names;
      for (const auto& [k, a] : v.kwargs) {
        if (k != "param_groups") continue;
        for (const auto& g : resolve(a).items) {
          const py::Value call = resolve(g);
          for (const auto& [gk, ga] : call.kwargs)
            if (gk == "optimizer_name") names += (names.empty() ? "" : ",") + resolve(ga).text;
        }
      }
      fields["optimizer.names"] = names;
    } else if (callee == "default_adamw") {
      defaults("optimizer");  // OptimizersContainer.Config(param_groups=[AdamW]) (optimizer.py)
    } else if (callee == "SelectiveAC.Config" || callee == "FullAC.Config" ||
               callee == "MemoryBudgetAC.Config") {
      fields["activation_checkpoint"] = callee == "SelectiveAC.Config" ? "selective"
                                        : callee == "FullAC.Config"    ? "full"
                                                                       : "memory-budget";
      lines["activation_checkpoint"] = v.line;
    } else if (callee == "model_registry") {
      const auto it = m_.imports.find(v.text);
      model_module = it == m_.imports.end() ? "" : it->second;
      if (v.items.empty() || v.items[0].kind != py::Value::Kind::kStr)
        throw InputError(path_, "model_registry",
                         "expected the flavor as a string literal (line " + std::to_string(v.line) + ")");
      model_flavor = v.items[0].text;
      fields.erase("float8");
      for (const auto& [k, a] : v.kwargs)
        if (k == "converters")
          for (const auto& c : resolve(a).items) apply(c, "converter", depth);
    } else if (callee == "Float8LinearConverter.Config") {
      fields["float8"] = "true";
      section("float8");
    } else if (callee == "ChunkedLossWrapper.Config") {
      notes.push_back(
          "loss = ChunkedLossWrapper.Config (chunked cross-entropy: the simulator's loss holds the "
          "whole step's logits and their gradient; docs/model.md \"Records outside the defaults\")");
    } else if (callee == "MXFP8LinearConverter.Config" || callee == "NVFP4LinearConverter.Config" ||
               callee == "LoRAConverter.Config") {
      notes.push_back("model converter " + callee + " (not modelled)");
    } else if (find(v.text)) {
      run_function(v.text, depth + 1);  // a config function of this file (llama3_debugmodel_float8 style)
    } else if (field.empty()) {
      // A base config from elsewhere (torchtitan's llama3_8b(), say): its own settings cannot be read.
      const auto it = m_.imports.find(v.text);
      notes.push_back("the config starts from " + (it == m_.imports.end() ? v.text : it->second) +
                      "(), whose settings are not read (only what this file sets is)");
    } else if (field == "activation_checkpoint" || field == "training" || field == "parallelism" ||
               field == "compile") {
      notes.push_back(field + " = " + v.text + "(...) (not read)");
    }
  }
};

ImportedConfig import_torchtitan_py(const std::string& path_spec) {
  // FILE.py or FILE.py:FUNCTION (torchtitan's --config names the function).
  std::string path = path_spec, fn;
  if (const auto c = path_spec.rfind(".py:"); c != std::string::npos) {
    path = path_spec.substr(0, c + 3);
    fn = path_spec.substr(c + 4);
  }
  const py::Module m = py::parse_module(read_file(path), path);
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
  TitanReader r(m, path);
  r.run_function(fn);
  std::set<std::string> read;  // fields the reader used
  auto get = [&](const char* k) -> const std::string* {
    read.insert(k);
    auto it = r.fields.find(k);
    return it == r.fields.end() ? nullptr : &it->second;
  };
  ImportedConfig c;
  c.format = "torchtitan";
  c.knobs["runtime"] = "fsdp2";
  c.unmodelled = r.notes;
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
  read_titan_parallelism(path, get, c);
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
  // dtype bfloat16: parameters, gradients and optimizer state in bf16 (bf16-true); float32: FSDP2 mixed
  // precision over fp32 parameters with mixed_precision_param (bf16-mixed, or fp32).
  const std::string dtype =
      get("training.dtype") ? dtype_text(path, "training.dtype", *get("training.dtype")) : "";
  if (dtype == "bf16")
    c.knobs["precision"] = "bf16-true";
  else if (auto* v = get("training.mixed_precision_param"))
    c.knobs["precision"] =
        dtype_text(path, "training.mixed_precision_param", *v) == "fp32" ? "fp32" : "bf16-mixed";
  // FSDP2's MixedPrecisionPolicy reduce_dtype is mixed_precision_reduce with either dtype
  // (torchtitan/models/llama3/parallelize.py): bf16 gradients are reduced in fp32.
  if (auto* v = get("training.mixed_precision_reduce"))
    c.knobs["reduce_dtype"] = dtype_text(path, "training.mixed_precision_reduce", *v);
  if (auto* v = get("training.enable_cpu_offload");
      v && bool_text(path, "training.enable_cpu_offload", *v) == "true")
    c.knobs["offload"] = "params";
  else if (v)
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
  // "llama3 8B" from `from torchtitan.models.llama3 import model_registry` and model_registry("8B").
  if (!r.model_flavor.empty()) {
    std::string mod = r.model_module;
    if (mod.rfind("torchtitan.models.", 0) == 0) mod = mod.substr(18);
    // `from . import model_registry` in a model package's config_registry.py: the package is the folder.
    if (mod.empty() || mod[0] == '.') mod = std::filesystem::path(path).parent_path().filename().string();
    c.model = mod.substr(0, mod.find('.')) + " " + r.model_flavor;
  }
  if (!token_layout) read_titan_pipeline_batch(path, get, c);
  // The file's own settings the reader did not use, unless they leave memory and time alone.
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
                                              "converter"};
  for (const auto& [field, line] : r.lines)
    if (!read.count(field) && !inert.count(field) && field.find('.') != std::string::npos)
      c.unread.push_back(field + " = " + r.fields[field] + " (line " + std::to_string(line) + ")");
  for (const auto& o : r.others) c.unread.push_back(o);
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

}  // namespace

ImportedConfig import_config(const std::string& path) {
  auto ends = [&](const char* e) {
    const std::string s(e);
    return path.size() >= s.size() && lower(path.substr(path.size() - s.size())) == s;
  };
  if (ends(".json")) return import_deepspeed(path);
  if (ends(".toml")) return import_torchtitan(path);
  if (ends(".py") || path.find(".py:") != std::string::npos) return import_torchtitan_py(path);
  if (ends(".yaml") || ends(".yml")) return import_accelerate(path);
  throw InputError(
      path, "",
      "unknown config format: expected a DeepSpeed .json, a torchtitan .py (0.3.0 config function) or .toml "
      "(2024-2025), or an accelerate .yaml");
}

}  // namespace shardplan
