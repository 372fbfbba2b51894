// The search space of `shardplan plan` (plan_args.hpp): the CLI's defaults, the --from file's knobs, the
// --framework version's defaults and the --fix pins, each pinned value checked against the candidates.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <optional>
#include <set>

#include "planner/cli/plan_args.hpp"
#include "planner/frameworks.hpp"
#include "planner/importers.hpp"
#include "simulator/plan/plan.hpp"

namespace shardplan::cli {

namespace {

// The framework version's defaults (--framework, or the version the --from file's layout dates it to) pin
// the knobs neither --fix nor the file sets (appended to `fixes`, said on stderr). Rows that hold only for
// part of the searched layouts (torchtitan's root unit: FSDP2, ZeRO 2/3, no TP/PP) cannot be pinned for every
// candidate: named.
void framework_fixes(const PlanFlags& pf, const Loaded& l, std::vector<std::string>& fixes) {
  bool inferred = false;
  const auto fw = framework_of(pf, inferred);
  if (!fw) return;
  std::set<std::string> explicit_keys;
  for (const auto& f : fixes) {
    std::string key = f.substr(0, f.find('='));
    std::replace(key.begin(), key.end(), '-', '_');
    if (const Knob* k = find_knob(key)) explicit_keys.insert(k->key);
  }
  Plan probe;
  probe.ac = AcMode::kSelective;  // sac_sdpa_ops matters only under selective AC: pinning it is harmless
  std::string line =
      "shardplan: " + fw->spec() + (inferred ? " (" + imported_config(pf)->framework_reason + ")" : "");
  std::vector<std::string> skipped;
  int n = 0;
  for (const auto& d : framework_defaults(*fw, probe, l.cluster->spec().gpu.arch,
                                          l.model->spec().tied_embeddings, !inferred, explicit_keys)) {
    if (searched_condition(*d.rule)) {
      skipped.push_back(d.knob + "=" + d.value);
      continue;
    }
    fixes.push_back(d.knob + "=" + d.value);
    line += (n++ ? ", " : ": ") + d.knob + "=" + d.value;
  }
  if (n == 0) line += ": its defaults are the plan's";
  if (!skipped.empty()) {
    line +=
        "; not pinned in the search (they hold for FSDP2 ZeRO-2/3 plans without TP or PP only; simulate the "
        "recommendation with --framework for them):";
    for (const auto& k : skipped) line += " " + k;
  }
  std::cerr << line << "\n";
}

// A pinned value that no candidate can take is bad input (exit 2), not a search without result (or a detour
// to pipelined plans that ignore it): each value of a searched knob --fix lists is enumerated alone on the
// space without the user's pins (`inherited`) and, when that space has candidates and the value leaves none,
// refused with the reason whose share of the rejections the value raised most. Pins that only fail together
// are left to the search's own no-candidate advice.
void check_fix_values(const PlanArgs& a, const Loaded& l, const SearchSpace& inherited) {
  // The space without the pins, enumerated only when a pinned value leaves no candidate (without pins
  // nothing is checked): an empty one blames no value; its rejection shares are the baseline a value's are
  // compared with.
  SearchStats st0;
  std::optional<bool> inherited_empty;
  auto baseline_empty = [&] {
    if (!inherited_empty)
      inherited_empty = enumerate_candidates(*l.model, *l.cluster, inherited, st0).empty();
    return *inherited_empty;
  };
  auto share = [](const SearchStats& st, Rejection r) {
    const auto it = st.rejections.count.find(r);
    return it == st.rejections.count.end() || st.considered == 0
               ? 0.0
               : static_cast<double>(it->second) / static_cast<double>(st.considered);
  };
  const auto& searched = SearchSpace::searched_keys();
  for (const auto& f : a.fixes) {
    const auto eq = f.find('=');
    if (eq == std::string::npos) continue;
    std::string key = f.substr(0, eq);
    std::replace(key.begin(), key.end(), '-', '_');
    const Knob* k = find_knob(key);
    if (!k || std::string(k->key) == "pp" ||
        std::find(searched.begin(), searched.end(), k->key) == searched.end())
      continue;
    for (std::size_t pos = eq + 1;;) {
      const std::size_t c = f.find(',', pos);
      const std::string v = f.substr(pos, c == std::string::npos ? std::string::npos : c - pos);
      SearchSpace one = inherited;
      one.fix(std::string(k->key) + "=" + v);
      SearchStats st;
      // considered == 0: the value needs another pin (an interleaved schedule needs pp > 1), not refused.
      if (enumerate_candidates(*l.model, *l.cluster, one, st).empty() && st.considered > 0) {
        if (baseline_empty()) return;
        Rejection reason{};
        double raised = -2;
        for (const auto& [r, n] : st.rejections.count)
          if (share(st, r) - share(st0, r) > raised) reason = r, raised = share(st, r) - share(st0, r);
        const std::string example =
            st.rejections.example.count(reason) ? st.rejections.example.at(reason) : "";
        const auto cut = example.find("  (");
        throw InputError::flag(
            "--fix " + std::string(k->key),
            fmt::format("{} = {}: no plan can take it ({} of {} candidates: {})", k->key, v,
                        st.rejections.count[reason], st.considered,
                        cut == std::string::npos ? std::string(to_string(reason))
                                                 : example.substr(cut + 3, example.size() - cut - 4)));
      }
      if (c == std::string::npos) break;
      pos = c + 1;
    }
  }
}

}  // namespace

// The search space of `plan`: the CLI's defaults (three runtimes, compile and async TP searched, TP within
// the NVLink domain), the --from file's knobs and the --fix pins.
SearchSpace plan_space(PlanArgs& a, const Loaded& l) {
  // --from: the user's file fixes every knob the search does not vary (its runtime, precision, offload,
  // ...) unless --fix names it; the searched knobs (zero, shard group, tp, mbs, ac, ...) are searched.
  std::vector<std::string> fixes = a.fixes;
  // One PlanFlags for the file and the framework: the file is read (and its stderr lines said) once.
  PlanFlags pf;
  pf.from = a.from;
  pf.framework = a.framework;
  if (!a.from.empty()) {
    const ImportedConfig* c = imported_config(pf);
    check_from_model(pf, *l.model);
    const auto& searched = SearchSpace::searched_keys();
    auto fixed = [&](const std::string& key) {
      for (const auto& f : a.fixes)
        if (f.rfind(key + "=", 0) == 0) return true;
      return false;
    };
    // The runtime is the user's framework: kept although searched. grad_accum follows the global batch.
    for (const auto& [key, value] : c->knobs)
      if ((key == "runtime" || std::find(searched.begin(), searched.end(), key) == searched.end()) &&
          key != "grad_accum" && !fixed(key))
        fixes.push_back(key + "=" + value);
    if (a.global_batch == 0) a.global_batch = c->global_batch;
  }
  framework_fixes(pf, l, fixes);
  if (a.global_batch == 0)
    throw InputError::flag("--global-batch", "required (or a --from file that states it)");
  SearchSpace space;
  space.runtimes = {Runtime::kFsdp2, Runtime::kFsdp1, Runtime::kDeepSpeed};
  // torchtitan's standard settings are searched too (async TP only where tp > 1).
  space.compile = {false, true};
  space.async_tp = {false, true};
  space.global_batch = a.global_batch;
  if (a.global_batch <= 0) throw InputError::flag("--global-batch", "must be >= 1");
  if (!a.seq.empty()) {
    set_knob(*find_knob("seq"), space.base, a.seq, "--seq");
    space.seq = space.base.seq;
  }
  // TP only inside an NVLink domain and only as far as the node allows.
  space.tp.erase(
      std::remove_if(
          space.tp.begin(), space.tp.end(),
          [&](int t) { return t > l.cluster->spec().node.nvlink_domain_gpus || l.cluster->gpus() % t; }),
      space.tp.end());
  // Volta has no bf16 (resolve_plan's check_volta): its plans search fp16-mixed, the one 16-bit precision it
  // has, unless --fix precision or the --from file says otherwise.
  if (l.cluster->spec().gpu.arch == GpuArch::kVolta) space.base.precision = Precision::kFp16Mixed;
  // The space without the user's --fix pins: the CLI's defaults and the --from / --framework knobs (what
  // check_fix_values blames a pinned value against).
  SearchSpace inherited = space;
  for (std::size_t i = a.fixes.size(); i < fixes.size(); ++i) inherited.fix(fixes[i]);
  // The --from file's knobs pin the space; only --fix keys count as the user's pins (the no-plan message
  // names --fix only when one was given).
  for (const auto& f : fixes) space.fix(f);
  space.fixed_keys.resize(a.fixes.size());  // one key per fix(), the user's first
  // LoRA is pinned, never searched: the model every candidate runs on carries its adapters and frozen base.
  if (space.base.lora_rank > 0) *l.model = lora_model(*l.model, space.base);
  // A pinned TP degree the cluster cannot have is bad input, not a search without result.
  const int domain = l.cluster->spec().node.nvlink_domain_gpus;
  for (int t : space.tp) {
    if (t > domain)
      throw InputError::flag("--fix tp", fmt::format("tp {} exceeds the {} GPUs of one NVLink domain of {}",
                                                     t, domain, l.cluster->spec().name));
    if (l.cluster->gpus() % t)
      throw InputError::flag("--fix tp",
                             fmt::format("tp {} does not divide the {} GPUs", t, l.cluster->gpus()));
  }
  check_fix_values(a, l, inherited);
  return space;
}

}  // namespace shardplan::cli
