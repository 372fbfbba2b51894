// The PEFT adapter importer of --from (docs/formats.md, "--from"): a LoRA adapter_config.json, as PEFT 0.21.2
// writes it (peft/tuners/lora/config.py LoraConfig, saved by PeftModel.save_pretrained beside
// adapter_model.safetensors), into the LoRA knobs lora_rank and lora_targets (docs/model.md "LoRA and
// QLoRA"). The base model is --model's: the adapter file names it (base_model_name_or_path) but does not size
// it.
#include <cctype>
#include <map>
#include <set>

#include "core/error.hpp"
#include "core/json_reader.hpp"
#include "planner/import/common.hpp"

namespace shardplan::import {

namespace {

/// LoraConfig fields that leave per-GPU memory and step time alone: the adapters' scaling (lora_alpha,
/// use_rslora, alpha_pattern), their initialisation (init_lora_weights and its loftq / eva / corda / ...
/// configs), the weight layout flag fan_in_fan_out (GPT-2's Conv1D), bookkeeping (task_type, revision,
/// peft_version, auto_mapping, inference_mode, which save_pretrained sets), Megatron's module path (used only
/// with megatron_config) and QALoRA's group size (used only with use_qalora).
bool peft_inert(const std::string& key) {
  static const std::set<std::string> keys = {
      "lora_alpha",         "use_rslora",        "alpha_pattern",
      "init_lora_weights",  "loftq_config",      "eva_config",
      "corda_config",       "lora_ga_config",    "fan_in_fan_out",
      "task_type",          "revision",          "peft_version",
      "auto_mapping",       "inference_mode",    "megatron_core",
      "peft_type",          "qalora_group_size", "base_model_name_or_path",
      "ensure_weight_tying"};
  return keys.count(key) > 0;
}

/// Whether a LoraConfig field is at its "off" value: null, false, an empty list / object / string, or 0.
bool unset(const Json& v) {
  return v.is_null() || (v.is_boolean() && !v.get<bool>()) ||
         ((v.is_array() || v.is_object()) && v.empty()) || (v.is_string() && v.get<std::string>().empty()) ||
         (v.is_number() && v.get<double>() == 0);
}

bool identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_') return false;
  return true;
}

/// A regex target_modules (PEFT: re.fullmatch against each module's full name, tuners_utils.py
/// check_target_module_exists): the identifiers it names outside character classes and quantifiers, e.g.
/// ".*\.(q_proj|v_proj)$" -> q_proj, v_proj; "model.layers.*.self_attn.q_proj" -> model, layers, self_attn,
/// q_proj. The caller keeps those that are module names (planner/ has no model here: the CLI checks them
/// against --model's modules).
std::vector<std::string> regex_identifiers(const std::string& re) {
  std::vector<std::string> out;
  std::string cur;
  auto flush = [&] {
    if (identifier(cur)) out.push_back(cur);
    cur.clear();
  };
  for (std::size_t i = 0; i < re.size(); ++i) {
    const char ch = re[i];
    if (ch == '\\' && i + 1 < re.size()) {  // an escape: "\." ends a name, "\d" is a class
      flush();
      ++i;
    } else if (ch == '[' || ch == '{') {  // a character class or a count: skip it
      flush();
      const std::size_t end = re.find(ch == '[' ? ']' : '}', i);
      i = end == std::string::npos ? re.size() : end;
    } else if (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_') {
      cur += ch;
    } else {
      flush();
    }
  }
  flush();
  return out;
}

/// The layer-prefix words of PEFT's module names (model.layers.N.self_attn.q_proj,
/// transformer.h.N.attn.c_attn): no module a LoRA adapter wraps, dropped from a regex's names.
bool container_name(const std::string& s) {
  static const std::set<std::string> names = {"model",     "layers",     "self_attn",      "mlp",     "attn",
                                              "attention", "h",          "transformer",    "decoder", "block",
                                              "blocks",    "base_model", "language_model", "experts"};
  return names.count(s) > 0;
}

/// target_modules: a list of module names (PEFT matches each as the last part of a module's name), PEFT's
/// "all-linear", or a regex; null leaves PEFT's default for the model type (the knob's default).
void read_targets(const std::string& path, const Json& v, ImportedConfig& c) {
  if (v.is_null()) return;
  std::vector<std::string> names;
  if (v.is_array()) {
    for (const Json& item : v) {
      if (!item.is_string())
        throw InputError(path, "target_modules", "expected module names as strings, got " + item.dump());
      std::string name = item.get<std::string>();
      if (const auto dot = name.rfind('.'); dot != std::string::npos) name = name.substr(dot + 1);
      if (!identifier(name))
        throw InputError(path, "target_modules", "\"" + item.get<std::string>() + "\" is not a module name");
      names.push_back(name);
    }
    if (names.empty()) throw InputError(path, "target_modules", "an empty list wraps no module");
  } else if (v.is_string() && v.get<std::string>() == "all-linear") {
    names.push_back("all-linear");
  } else if (v.is_string()) {
    const std::string re = v.get<std::string>();
    for (const std::string& n : regex_identifiers(re))
      if (!container_name(n)) names.push_back(n);
    if (names.empty())
      throw InputError(path, "target_modules", "the regex \"" + re + "\" names no module (give a list)");
    c.assumed.push_back("target_modules regex \"" + re + "\" read as the modules it names (" +
                        join_names(names) + ") in every block");
  } else {
    throw InputError(path, "target_modules", "expected a list of module names or a string, got " + v.dump());
  }
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ",") + n;
  c.knobs["lora_targets"] = list;
  c.source["lora_targets"] = "target_modules = " + (v.is_string() ? v.get<std::string>() : v.dump());
}

/// Fields that change memory or time and that the model does not express: named, the rest is simulated.
void name_unmodelled(const Json& j, ImportedConfig& c) {
  if (auto it = j.find("lora_dropout"); it != j.end() && it->is_number() && it->get<double>() > 0)
    c.unmodelled.push_back(
        "lora_dropout " + it->dump() +
        " (nn.Dropout on each adapter's input: its mask and dropped copy are not simulated)");
  if (auto it = j.find("bias"); it != j.end() && it->is_string() && it->get<std::string>() != "none")
    c.unmodelled.push_back("bias " + it->get<std::string>() + " (trainable biases are not simulated)");
  static const std::pair<const char*, const char*> fields[] = {
      {"use_dora", "DoRA's magnitude vector and weight-norm pass are not simulated"},
      {"modules_to_save", "full trainable copies of these modules are not simulated"},
      {"rank_pattern", "per-module ranks: r is simulated for every module"},
      {"layers_to_transform", "adapters in some layers only: every block is simulated with them"},
      {"layers_pattern", "adapters in some layers only: every block is simulated with them"},
      {"exclude_modules", "excluded modules: every targeted module is simulated with adapters"},
      {"target_parameters", "LoRA on nn.Parameter (MoE experts) is not simulated"},
      {"lora_bias", "a bias on lora_B is not simulated"},
      {"trainable_token_indices", "trainable embedding rows are not simulated"},
      {"layer_replication", "replicated layers are not simulated"},
      {"use_qalora", "QALoRA's pooled adapter input is not simulated"},
      {"megatron_config", "Megatron's parallel LoRA layers are not simulated"}};
  for (const auto& [k, why] : fields)
    if (auto it = j.find(k); it != j.end() && !unset(*it))
      c.unmodelled.push_back(std::string(k) + " " + (it->is_string() ? it->get<std::string>() : it->dump()) +
                             " (" + why + ")");
}

}  // namespace

bool peft_adapter_file(const std::string& path) {
  const std::string name = "adapter_config.json";
  return path.size() >= name.size() && path.compare(path.size() - name.size(), name.size(), name) == 0 &&
         (path.size() == name.size() || path[path.size() - name.size() - 1] == '/');
}

ImportedConfig import_peft(const std::string& path) {
  const Json j = load_json_file(path);
  if (!j.is_object()) throw InputError(path, "", "an adapter_config.json is a JSON object");
  if (auto it = j.find("peft_type"); it == j.end() || !it->is_string() || it->get<std::string>() != "LORA")
    throw InputError(path, "peft_type",
                     "LoRA adapters (\"LORA\") are read, got " + (it == j.end() ? "none" : it->dump()));
  ImportedConfig c;
  c.format = "peft";
  // r: LoraConfig's default 8 when the file leaves it out (save_pretrained writes every field).
  const Json r = j.value("r", Json(8));
  if (!r.is_number_integer() || r.get<std::int64_t>() < 1 || r.get<std::int64_t>() > (1 << 16))
    throw InputError(path, "r", "expected the adapter rank as an integer 1..65536, got " + r.dump());
  c.knobs["lora_rank"] = std::to_string(r.get<std::int64_t>());
  c.source["lora_rank"] = "r = " + c.knobs["lora_rank"];
  if (!j.contains("r")) c.assumed.push_back("r not given: LoraConfig's default 8");
  read_targets(path, j.value("target_modules", Json()), c);
  if (auto it = j.find("base_model_name_or_path"); it != j.end() && it->is_string())
    c.assumed.push_back("base_model_name_or_path \"" + it->get<std::string>() +
                        "\": the base model simulated is --model's");
  name_unmodelled(j, c);
  static const std::set<std::string> modelled = {"r",
                                                 "target_modules",
                                                 "lora_dropout",
                                                 "bias",
                                                 "use_dora",
                                                 "modules_to_save",
                                                 "rank_pattern",
                                                 "layers_to_transform",
                                                 "layers_pattern",
                                                 "exclude_modules",
                                                 "target_parameters",
                                                 "lora_bias",
                                                 "trainable_token_indices",
                                                 "layer_replication",
                                                 "use_qalora",
                                                 "megatron_config"};
  for (const auto& [k, v] : j.items())
    if (!modelled.count(k) && !peft_inert(k) && !unset(v)) c.unread.push_back(k + " = " + v.dump());
  return c;
}

}  // namespace shardplan::import
