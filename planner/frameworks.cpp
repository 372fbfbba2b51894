// The version-dependent defaults table (planner/frameworks.hpp). Each row cites the commit, PR or release
// that changed the value; docs/model.md and docs/validation-mapping.md explain the mechanisms.
#include "planner/frameworks.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "core/error.hpp"

namespace shardplan {

const std::vector<VersionRule>& version_rules() {
  static const std::vector<VersionRule> rules = {
      {"hold_logits", "torchtitan", "hold_logits", "true", "", "2024-06-12", "", false,
       "e29b6b4d4 (PR 391, 2024-06-12) added `del pred` before backward",
       "hold_logits: torchtitan's loop of this date keeps `pred` (fp32 logits) alive through backward; `del "
       "pred` was added in e29b6b4d4 (2024-06-12)"},
      {"rs_input_rs_stream", "torchtitan", "rs_input_rs_stream", "true", "", "2024-06-27", "", false,
       "pytorch PR 129721 (2024-06-27): FSDP2's reduce-scatter copy-in on the default stream (the nightly "
       "torch torchtitan ran at that date)",
       "rs_input_rs_stream: FSDP2 of this date allocates the reduce-scatter input on the reduce-scatter "
       "stream "
       "(moved to the default stream by pytorch PR 129721, 2024-06-27; FSDP1 ignores the knob)"},
      {"rs_input_rs_stream_torch", "torch", "rs_input_rs_stream", "true", "", "2.5.0", "", false,
       "pytorch PR 129721 (2024-06-27), first released in torch 2.5.0",
       "rs_input_rs_stream: FSDP2 before torch 2.5 allocates the reduce-scatter input on the reduce-scatter "
       "stream (pytorch PR 129721)"},
      {"root_params", "torchtitan", "root_params", "embedding-head", "", "2025-06-01", "root-unit", false,
       "torchtrain at 83c879f18 (PR 165, 2024-03) and torchtitan from 14d422f0c (2024-05-10) to 83e694105 "
       "(2025-07-28) wrapped the embedding, norm and head in the root "
       "fully_shard(model), which FSDP2 before pytorch PR 154704 (torch 2.8, 2025-06) never reshards after "
       "forward",
       "root_params embedding-head: torchtitan of this date leaves tok_embeddings, norm and output in the "
       "root "
       "fully_shard(model), which FSDP2 before pytorch PR 154704 (2025-06) never reshards after forward "
       "(units "
       "of their own since 83e694105, 2025-07-28)"},
      {"keep_last_block", "torchtitan", "keep_last_block", "true", "", "2025-06-01", "root-unit,zero=3",
       false,
       "the default reshard_after_forward policy of torchtrain at 83c879f18 (2024-03) and torchtitan to "
       "83e694105 (2025-07-28): "
       "`layer_id < len(layers) - 1`",
       "keep_last_block: torchtitan's default policy of this date does not reshard the last block after "
       "forward "
       "(reshard_after_forward = layer_id < len(layers) - 1)"},
      {"allocator_default", "torchtitan", "allocator", "default", "", "2024-10-22", "", true,
       "a5e57e4a9 (2024-10-22) added PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to run_llama_train.sh",
       "allocator default: torchtitan's run_llama_train.sh of this date does not set expandable_segments "
       "(added "
       "in a5e57e4a9, 2024-10-22)"},
      {"allocator_expandable", "torchtitan", "allocator", "expandable", "2024-10-22", "", "", true,
       "a5e57e4a9 (2024-10-22): run_llama_train.sh (run_train.sh from 82afc842e) sets "
       "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
       "allocator expandable: torchtitan's launch script of this date sets "
       "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (run_llama_train.sh from a5e57e4a9, 2024-10-22; "
       "run_train.sh)"},
      {"fused_optimizer", "torchtitan", "fused_optimizer", "false", "", "2025-02-24", "", false,
       "6e4988550 (2025-02-24) made fused AdamW the default (optimizer.fused)",
       "fused_optimizer false: torchtitan of this date runs foreach AdamW (optimizer.fused default False; "
       "fused "
       "became the default in 6e4988550, 2025-02-24)"},
      {"fp32_norm", "torchtitan", "fp32_norm", "true", "", "2025-03-19", "", false,
       "3b39d7ab0 (2025-03-19) replaced the Python fp32 RMSNorm (models/norms.py) with torch's",
       "fp32_norm: torchtitan of this date normalises in fp32 in a Python RMSNorm (models/norms.py until "
       "3b39d7ab0, 2025-03-19)"},
      {"loss_impl", "torchtitan", "loss_impl", "eager", "", "2025-04-02", "", false,
       "bbb1b616e (2025-04-02) compiles the cross-entropy with training.compile (components/loss.py)",
       "loss_impl eager: torchtitan of this date runs the eager loss (with compile, the blocks only are "
       "compiled); the loss is compiled with the model since bbb1b616e (2025-04-02, components/loss.py)"},
      {"sdpa_flash_blackwell", "torchtitan", "sdpa_backend", "flash", "", "2025-05-14", "arch=blackwell",
       false,
       "before 3b85aa31f (2025-05-14) torchtitan passes no SDPA backend list; torch's order puts flash first",
       "sdpa_backend flash: torchtitan of this date passes no backend list and torch's default order puts "
       "flash "
       "first"},
      {"sdpa_cudnn_blackwell", "torchtitan", "sdpa_backend", "cudnn", "2025-05-14", "", "arch=blackwell",
       false,
       "3b85aa31f (2025-05-14): ScaledDotProductAttention puts cuDNN first on compute capability >= 10.0",
       "sdpa_backend cudnn: torchtitan of this date puts cuDNN attention first on compute capability >= 10.0 "
       "(models/attention.py)"},
      {"sdpa_flash_hopper", "torchtitan", "sdpa_backend", "flash", "", "2025-10-09", "arch=hopper", false,
       "before 6a3a9da95 (2025-10-09) torchtitan asks for no cuDNN attention on H100 (torch's default order "
       "puts flash first; cuDNN opt-in since pytorch PR 138522)",
       "sdpa_backend flash: torchtitan of this date passes no backend list and torch's default order puts "
       "flash "
       "first on H100"},
      {"sdpa_cudnn_hopper", "torchtitan", "sdpa_backend", "cudnn", "2025-10-09", "", "arch=hopper", false,
       "6a3a9da95 (2025-10-09): ScaledDotProductAttention asks for [cuDNN, flash, efficient, math] with "
       "set_priority=True",
       "sdpa_backend cudnn: torchtitan 6a3a9da95 (2025-10-09) puts cuDNN attention first "
       "(models/attention.py "
       "ScaledDotProductAttention)"},
      {"sac_sdpa_ops", "torchtitan", "sac_sdpa_ops", "flash-efficient", "", "2025-12-01", "ac=selective",
       false,
       "b39377f9f (2025-12-01, first in v0.2.1) added the cuDNN, math and overrideable SDPA ops to the SAC "
       "save "
       "list",
       "sac_sdpa_ops flash-efficient: torchtitan's _save_list before b39377f9f (2025-12-01) holds the flash "
       "and "
       "efficient SDPA ops only (parallelize_llama.py at the PR's commit)"},
  };
  return rules;
}

const VersionRule& version_rule(const std::string& id) {
  for (const auto& r : version_rules())
    if (id == r.id) return r;
  throw std::logic_error("no version rule \"" + id + "\"");
}

const std::vector<std::pair<std::string, std::string>>& torchtitan_releases() {
  // Tag dates of pytorch/torchtitan (v0.1.0 .. v0.2.2); 0.3.0 is the PyPI release tools/pyenv.sh installs,
  // cut from main after the Python config system (9810191bb, 2026-02-23) and before 73aed7f6c (2026-08-20)
  // replaced training.local_batch_size / seq_len with num_tokens_per_microbatch_per_dp_rank /
  // max_context_length: its news reach 2026/08.
  static const std::vector<std::pair<std::string, std::string>> r = {{"0.1.0", "2025-06-17"},
                                                                     {"0.2.0", "2025-10-17"},
                                                                     {"0.2.1", "2025-12-26"},
                                                                     {"0.2.2", "2026-02-20"},
                                                                     {"0.3.0", "2026-08-19"}};
  return r;
}

namespace {

bool is_date(const std::string& s) {
  if (s.size() != 10 && s.size() != 7) return false;
  for (std::size_t i = 0; i < s.size(); ++i)
    if (i == 4 || i == 7 ? s[i] != '-' : !std::isdigit(static_cast<unsigned char>(s[i]))) return false;
  return true;
}

// "2.4.1" < "2.5.0" numerically, part by part ("2.5" == "2.5.0").
int compare_versions(const std::string& a, const std::string& b) {
  std::size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    long x = 0, y = 0;
    while (i < a.size() && a[i] != '.')
      x = x * 10 + (std::isdigit(static_cast<unsigned char>(a[i])) ? a[i] - '0' : 0), ++i;
    while (j < b.size() && b[j] != '.')
      y = y * 10 + (std::isdigit(static_cast<unsigned char>(b[j])) ? b[j] - '0' : 0), ++j;
    if (x != y) return x < y ? -1 : 1;
    ++i, ++j;
  }
  return 0;
}

bool in_range(const VersionRule& r, const FrameworkVersion& v) {
  if (r.framework != v.framework) return false;
  if (v.framework == "torchtitan") {
    const std::string& d = v.date;
    return (!*r.from || d >= r.from) && (!*r.to || d < r.to);
  }
  return (!*r.from || compare_versions(v.version, r.from) >= 0) &&
         (!*r.to || compare_versions(v.version, r.to) < 0);
}

bool condition_holds(const VersionRule& r, const Plan& p, GpuArch arch, bool tied) {
  const std::string c = r.condition;
  std::size_t pos = 0;
  while (pos < c.size()) {
    const std::size_t comma = c.find(',', pos);
    const std::string part = c.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? c.size() : comma + 1;
    if (part == "ac=selective" && p.ac != AcMode::kSelective) return false;
    if (part == "arch=hopper" && arch != GpuArch::kHopper) return false;
    if (part == "arch=blackwell" && arch != GpuArch::kBlackwell) return false;
    if (part == "zero=3" && p.zero != 3) return false;
    if (part == "root-unit" &&
        !(p.runtime == Runtime::kFsdp2 && p.zero >= 2 && p.tp == 1 && p.pp == 1 && p.ep == 1 && !tied))
      return false;
  }
  return true;
}

}  // namespace

bool searched_condition(const VersionRule& r) {
  return std::string(r.condition).find("root-unit") != std::string::npos;
}

FrameworkVersion parse_framework(const std::string& text, const std::string& where) {
  const auto at = text.find('@');
  const std::string forms =
      "torchtitan@YYYY-MM-DD (a commit date), torchtitan@RELEASE (0.1.0 .. 0.3.0), torch@VERSION, "
      "deepspeed@VERSION";
  if (at == std::string::npos)
    throw InputError::flag(where, "expected FRAMEWORK@VERSION (" + forms + "), got \"" + text + "\"");
  FrameworkVersion v;
  v.framework = text.substr(0, at);
  v.version = text.substr(at + 1);
  if (v.framework != "torchtitan" && v.framework != "torch" && v.framework != "deepspeed") {
    const std::string m = did_you_mean(v.framework, {"torchtitan", "torch", "deepspeed"});
    throw InputError::flag(where, "unknown framework \"" + v.framework + "\"" +
                                      (m.empty() ? "" : " (did you mean " + m + "?)") + "; " + forms);
  }
  if (v.framework == "torchtitan") {
    if (is_date(v.version)) {
      v.date = v.version.size() == 7 ? v.version + "-01" : v.version;
    } else {
      for (const auto& [rel, date] : torchtitan_releases())
        if (v.version == rel || v.version == "v" + rel) v.date = date;
      if (v.date.empty()) {
        std::string rels;
        for (const auto& [rel, date] : torchtitan_releases()) rels += (rels.empty() ? "" : ", ") + rel;
        throw InputError::flag(
            where, "torchtitan@" + v.version + ": expected a date (YYYY-MM-DD) or a release (" + rels + ")");
      }
    }
    return v;
  }
  if (v.version.empty() || !std::isdigit(static_cast<unsigned char>(v.version[0])))
    throw InputError::flag(where, v.framework + "@" + v.version + ": expected a release number (2.4.1)");
  return v;
}

std::vector<AppliedDefault> framework_defaults(const FrameworkVersion& v, const Plan& p, GpuArch arch,
                                               bool tied_embeddings, bool with_launcher,
                                               const std::set<std::string>& explicit_keys) {
  std::vector<AppliedDefault> out;
  for (const VersionRule& r : version_rules()) {
    if (!in_range(r, v) || (r.launcher && !with_launcher) || explicit_keys.count(r.knob)) continue;
    if (!condition_holds(r, p, arch, tied_embeddings)) continue;
    // A value the plan has already (or resolves to: torch's own SDPA choice on the GPU, cuDNN on Hopper and
    // Blackwell) is not pinned: the plan stays as the user would write it.
    const Knob* k = find_knob(r.knob);
    if (k && k->get(p) == r.value) continue;
    if (std::string(r.knob) == "sdpa_backend" && p.precision == Precision::kFp32)
      continue;  // no flash/cuDNN in fp32
    if (std::string(r.knob) == "sdpa_backend" && !p.sdpa_backend &&
        std::string(r.value) == (arch == GpuArch::kHopper || arch == GpuArch::kBlackwell ? "cudnn" : "flash"))
      continue;
    out.push_back({r.knob, r.value, &r});
  }
  return out;
}

Json version_rules_json() {
  Json rows = Json::array();
  for (const VersionRule& r : version_rules())
    rows.push_back({{"id", r.id},
                    {"framework", r.framework},
                    {"knob", r.knob},
                    {"value", r.value},
                    {"from", r.from},
                    {"to", r.to},
                    {"condition", r.condition},
                    {"launcher", r.launcher},
                    {"source", r.source},
                    {"note", r.note}});
  Json releases = Json::object();
  for (const auto& [rel, date] : torchtitan_releases()) releases[rel] = date;
  return {{"schema", "shardplan.frameworks/1"},
          {"generated_by",
           "shardplan list frameworks --json (planner/frameworks.cpp, the one table); do not edit by hand"},
          {"torchtitan_releases", releases},
          {"rules", rows}};
}

}  // namespace shardplan
