// The keys both torchtitan formats share (--from FILE.toml and FILE.py): torchtitan's ParallelismConfig
// (torchtitan/config/configs.py), the pipelined micro-batches of torchtitan/distributed/pipeline_parallel.py
// and TrainingConfig's mixed precision and CPU offload.
#include <algorithm>

#include "core/error.hpp"
#include "planner/import/common.hpp"

namespace shardplan::import {

namespace {

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

}  // namespace

/// The parallel degrees both torchtitan formats share (ParallelismConfig / [parallelism]): pipeline
/// parallelism (degree, schedule, stages), context and expert parallelism, the data-parallel shard and
/// replicate degrees as ZeRO stage and shard group, and tensor parallelism. `get(key)` is the file's value
/// text for a dotted key, or nullptr.
void read_titan_parallelism(const std::string& path, const TitanGet& get, ImportedConfig& c) {
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
void read_titan_pipeline_batch(const std::string& path, const TitanGet& get, ImportedConfig& c) {
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

const std::string* read_titan_precision(const std::string& path, const TitanGet& get, bool read_param,
                                        ImportedConfig& c) {
  if (auto* v = read_param ? get("training.mixed_precision_param") : nullptr)
    c.knobs["precision"] =
        dtype_text(path, "training.mixed_precision_param", *v) == "fp32" ? "fp32" : "bf16-mixed";
  // FSDP2's MixedPrecisionPolicy reduce_dtype is mixed_precision_reduce with either dtype
  // (torchtitan/models/llama3/parallelize.py): bf16 gradients are reduced in fp32.
  if (auto* v = get("training.mixed_precision_reduce"))
    c.knobs["reduce_dtype"] = dtype_text(path, "training.mixed_precision_reduce", *v);
  const std::string* offload = get("training.enable_cpu_offload");
  if (offload && bool_text(path, "training.enable_cpu_offload", *offload) == "true")
    c.knobs["offload"] = "params";
  return offload;
}

}  // namespace shardplan::import
