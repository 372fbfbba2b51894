// TitanReader (torchtitan_py_reader.hpp): torchtitan 0.3.0's config dataclasses as a Python config function
// builds them, with the dataclasses' defaults.
#include "planner/import/torchtitan_py_reader.hpp"

#include <set>
#include <utility>

#include "core/error.hpp"
#include "simulator/plan/plan.hpp"

namespace shardplan::import {

namespace {

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
      {"blockfp", {}},  // MXFP8LinearConverter / NVFP4LinearConverter.Config: fqns defaults to [] (all)
  };
  return d;
}

}  // namespace

void TitanReader::run_function(const std::string& name, int depth) {
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

const py::Function* TitanReader::find(const std::string& name) const {
  for (const auto& f : m_.functions)
    if (f.name == name) return &f;
  return nullptr;
}

py::Value TitanReader::resolve(const py::Value& v) const {
  if (v.kind == py::Value::Kind::kName)
    if (auto it = vars_.find(v.text); it != vars_.end()) return it->second;
  return v;
}

std::string TitanReader::last(const std::string& dotted) {
  const auto d = dotted.rfind('.');
  if (d != std::string::npos && dotted.substr(d + 1) == "Config") {
    const auto d2 = dotted.rfind('.', d - 1);
    return d2 == std::string::npos ? dotted : dotted.substr(d2 + 1);
  }
  return d == std::string::npos ? dotted : dotted.substr(d + 1);
}

void TitanReader::set(const std::string& field, const py::Value& raw) {
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
        text +=
            (k ? "," : "") + (v.items[k].kind == py::Value::Kind::kStr ? v.items[k].text : v.items[k].repr());
      break;
    default:
      // Not a literal (a variable of another function, an expression): kept so that a field the plan
      // needs says what it found.
      text = "`" + v.repr() + "`";
  }
  fields[field] = text;
  lines[field] = v.line;
}

void TitanReader::defaults(const std::string& section) {
  for (const auto& [k, v] : titan_defaults().at(section)) fields[section + "." + k] = v;
}

void TitanReader::apply(const py::Value& raw, const std::string& field, int depth) {
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
    fields.erase("blockfp");
    for (const auto& [k, a] : v.kwargs)
      if (k == "converters")
        for (const auto& c : resolve(a).items) apply(c, "converter", depth);
  } else if (callee == "Float8LinearConverter.Config") {
    fields["float8"] = "true";
    section("float8");
  } else if (callee == "ChunkedLossWrapper.Config") {
    // --loss-impl chunked; num_chunks defaults to 8 (components/loss.py:610); loss_fn is the inner loss.
    fields["loss.chunked"] = "true";
    fields["loss.num_chunks"] = std::to_string(kTorchtitanLossChunks);
    for (const auto& [k, a] : v.kwargs)
      if (k == "num_chunks") set("loss.num_chunks", a);
  } else if (callee == "MXFP8LinearConverter.Config" || callee == "NVFP4LinearConverter.Config") {
    // --fp8 mxfp8 / nvfp4 (mx.py / nvfp4.py: `fqns`, empty = every Linear.Config, the LM head included).
    fields["blockfp"] = callee == "MXFP8LinearConverter.Config" ? "mxfp8" : "nvfp4";
    section("blockfp");
  } else if (callee == "LoRAConverter.Config") {
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

}  // namespace shardplan::import
