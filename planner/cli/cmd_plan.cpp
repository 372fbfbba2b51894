// `shardplan plan`: search the plan space and recommend a plan, with a ranked table, JSON and framework
// configs.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iostream>

#include "planner/cli/commands.hpp"
#include "planner/cli/common.hpp"
#include "planner/emit.hpp"
#include "planner/emit_target.hpp"
#include "planner/report/html.hpp"
#include "planner/report/margin.hpp"
#include "planner/report/report.hpp"
#include "planner/search.hpp"
#include "simulator/plan/plan.hpp"

namespace shardplan::cli {

namespace {
struct PlanArgs {
  Inputs in;
  std::int64_t global_batch = 0;
  std::string seq;
  std::vector<std::string> fixes, emits;
  int top = 10, threads = 0;
  double headroom = -1;
  std::string json, html, from;
};

// One table row; `alt` says how it compares with the recommendation (row 1).
std::string plan_row(const Result& r, const Alternative& alt, int rank) {
  std::string extra;  // knobs away from the defaults that the columns do not show
  if (r.plan.compile) extra += "compile ";
  if (r.plan.async_tp) extra += "async-tp ";
  if (r.plan.fp8 != Fp8::kNone) extra += std::string("fp8=") + to_string(r.plan.fp8) + " ";
  if (r.plan.pp > 1)
    extra += fmt::format("pp{} {}{} ", r.plan.pp, to_string(r.plan.pp_schedule),
                         r.plan.virtual_stages > 1 ? fmt::format(" V{}", r.plan.virtual_stages) : "");
  if (r.plan.cp > 1) extra += "cp" + std::to_string(r.plan.cp) + " ";
  if (r.plan.ep > 1) extra += "ep" + std::to_string(r.plan.ep) + " ";
  const std::string vs = rank == 1
                             ? std::string("      rec")
                             : fmt::format("{:>+8.1f}%{}", 100 * alt.delta_rel, alt.within_error ? "~" : " ");
  return fmt::format(
      "{:>3} {:<9} {:>4} {:>6} {:>3} {:>4} {:>5} {:<9} {:>4} {:>3} {:<5} {:<32} {:>9.3f} {:>10.0f} {:>10} "
      "{:>6.1f} {:>10} {:>10} {:>9.3f}  {}\n",
      rank, to_string(r.plan.runtime), r.plan.zero, r.plan.shard_group, r.plan.tp, r.plan.mbs,
      r.plan.grad_accum, to_string(r.plan.ac), r.plan.wrap, r.plan.prefetch, to_string(r.plan.reduce()),
      extra.empty() ? "-" : extra.substr(0, extra.size() - 1), r.step_s, r.tokens_per_s_per_gpu, vs,
      100 * r.mfu, format_bytes(static_cast<double>(r.peak_reserved_bytes + r.overhead.total())),
      format_bytes(static_cast<double>(r.headroom_bytes())), r.exposed_comm_s, binding_constraint(r));
}

// --emit: each target's file from the recommended plan as that target runs it. Where the target cannot
// express a knob the plan is re-simulated as it will run (said on stderr and in the file); when the targets
// share a runtime (the search was constrained to it) the first target's run replaces the recommendation's
// numbers.
std::string write_emits(const std::vector<std::pair<EmitTarget, std::string>>& emits, SearchOutcome& o,
                        const Loaded& l, const PlanArgs& a,
                        std::vector<std::pair<std::string, std::string>>& files) {
  std::string lines;  // printed on stderr once the outputs are built
  if (emits.empty()) return lines;
  const Result best = o.plans[0];
  std::vector<EmitTarget> targets;
  for (const auto& [t, file] : emits) targets.push_back(t);
  // Megatron / NeMo are configured by their own arguments, which no emitter writes.
  if (best.plan.runtime == Runtime::kMegatron)
    throw InputError::flag(
        "--emit",
        "the recommended plan runs megatron, which has no emitter (set its tp/pp/cp and the "
        "distributed optimizer in Megatron/NeMo)");
  for (std::size_t i = 0; i < emits.size(); ++i) {
    const auto& [target, file] = emits[i];
    const std::string kind = to_string(target);
    const EmittedRun run = emitted_run(target, best, *l.model, *l.cluster, *l.costs);
    std::vector<std::string> file_notes;
    if (run.result) {
      const Result& r = *run.result;
      file_notes.push_back(fmt::format(
          "the recommended plan is {}; re-simulated under {} as the {} output runs it ({}): step {:.3f} s "
          "(was "
          "{:.3f} s), {:.0f} tokens/s/GPU (was {:.0f}), peak {} of {} ({}): shardplan simulate --model {} "
          "--cluster {} --gpus {} {}",
          to_string(best.plan.runtime), to_string(run.plan.runtime), kind, run.changes, r.step_s, best.step_s,
          r.tokens_per_s_per_gpu, best.tokens_per_s_per_gpu,
          format_bytes(static_cast<double>(r.peak_reserved_bytes + r.overhead.total())),
          format_bytes(static_cast<double>(r.capacity_bytes)),
          r.headroom_bytes() >= 0 ? "fits" : "does NOT fit", a.in.model, a.in.cluster, l.cluster->gpus(),
          plan_to_flags(run.plan)));
      lines += "emit " + kind + ": " + file_notes.back() + "\n";
      if (i == 0 && same_runtime(targets)) {  // the printed numbers are the emitted plan's
        o.plans[0] = r;
        for (std::size_t k = 1; k < o.plans.size(); ++k)
          o.alternatives[k].delta_rel = o.plans[k].tokens_per_s_per_gpu / r.tokens_per_s_per_gpu - 1;
        o.explanation += "\nas emitted (" + kind + "): " + file_notes.back();
      }
    }
    for (const auto& note : emit_notes(kind, run.written)) lines += "emit " + kind + ": " + note + "\n";
    // The FSDP2 script carries the simulated units, to compare with the units it builds.
    const std::vector<EmitUnit> units = target == EmitTarget::kFsdp2
                                            ? simulated_units(run.written, *l.model, *l.cluster, *l.costs)
                                            : std::vector<EmitUnit>{};
    files.push_back({file, emit(kind, run.written, *l.model, l.cluster->gpus(), l.cluster->spec().node.gpus,
                                file_notes, units)});
  }
  return lines;
}

// The search space of `plan`: the CLI's defaults (three runtimes, compile and async TP searched, TP within
// the NVLink domain), the --from file's knobs and the --fix pins.
SearchSpace plan_space(PlanArgs& a, const Loaded& l) {
  // --from: the user's file fixes every knob the search does not vary (its runtime, precision, offload,
  // ...) unless --fix names it; the searched knobs (zero, shard group, tp, mbs, ac, ...) are searched.
  std::vector<std::string> fixes = a.fixes;
  if (!a.from.empty()) {
    PlanFlags pf;
    pf.from = a.from;
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
  // The --from file's knobs pin the space; only --fix keys count as the user's pins (the no-plan message
  // names
  // --fix only when one was given).
  for (const auto& f : fixes) space.fix(f);
  space.fixed_keys.resize(a.fixes.size());  // one key per fix(), the user's first
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
  return space;
}

// The `plan --json` document (docs/json.md).
Json plan_json(const SearchOutcome& o, const Loaded& l, const PlanArgs& a) {
  ReportInputs ri{l.model.get(), l.cluster.get(), l.calibration};
  Json plans = Json::array();
  for (const auto& r : o.plans) {
    Json rep = report_json(r, ri);
    rep["binding_constraint"] = binding_constraint(r);
    plans.push_back(rep);
  }
  Json alternatives = Json::array();
  for (std::size_t i = 0; i < o.plans.size(); ++i)
    alternatives.push_back({{"family", o.alternatives[i].family},
                            {"tokens_per_s_per_gpu", o.plans[i].tokens_per_s_per_gpu},
                            {"delta_vs_recommended", o.alternatives[i].delta_rel},
                            {"within_error", o.alternatives[i].within_error},
                            {"flags", plan_to_flags(o.plans[i].plan)}});
  Json pareto = Json::array();
  for (const auto& r : o.pareto)
    pareto.push_back({{"tokens_per_s_per_gpu", r.tokens_per_s_per_gpu},
                      {"headroom_bytes", r.headroom_bytes()},
                      {"network_bytes_per_gpu", network_bytes_per_gpu(r)},
                      {"family", plan_family(r.plan)},
                      {"recommended", r.plan == o.plans[0].plan},
                      {"flags", plan_to_flags(r.plan)}});
  Json rejected = Json::object(), examples = Json::array(), capability = Json::object();
  for (const auto& [reason, n] : o.stats.rejections.count) {
    rejected[to_string(reason)] = n;
    examples.push_back(
        {{"reason", to_string(reason)}, {"count", n}, {"example", o.stats.rejections.example.at(reason)}});
  }
  for (const auto& [feature, n] : o.stats.rejections.capability) capability[to_string(feature)] = n;
  Json j = {{"schema", "shardplan.plan/1"},
            {"inputs",
             {{"model", {{"name", l.model->spec().name}, {"parameters", l.model->parameters()}}},
              {"cluster", l.cluster->spec().name},
              {"gpus", l.cluster->gpus()},
              {"global_batch", a.global_batch},
              {"fix", a.fixes}}},
            {"plans", plans},
            {"recommended", plans.empty() ? Json(nullptr) : plans[0]},
            {"explanation", o.explanation},
            {"alternatives", alternatives},
            {"ranking",
             {{"tie_tolerance", o.tie_tolerance},
              {"tie_rule", o.tie_rule.empty() ? Json(nullptr) : Json(o.tie_rule)},
              {"tied", o.tied},
              {"fastest", o.fastest ? Json(plan_to_flags(o.fastest->plan)) : Json(nullptr)},
              {"rule", kThroughputTieRule}}},
            {"pareto", pareto},
            {"headroom", o.headroom},
            {"search",
             {{"considered", o.stats.considered},
              {"evaluated", o.stats.evaluated},
              {"fitting", o.stats.fitting},
              {"rejected", rejected},
              {"rejected_by_capability", capability},
              {"seconds", o.stats.seconds},
              {"simulated_per_s",
               o.stats.seconds > 0 ? static_cast<double>(o.stats.evaluated) / o.stats.seconds : 0}}},
            {"rejections", examples}};
  if (o.closest) {
    j["closest"] = report_json(*o.closest, ri);
    j["closest_over_bytes"] = o.closest_over_bytes;
    j["binding_hint"] = o.binding_hint;
  }
  return j;
}

// The text `plan` prints: the ranked table, the recommendation's repro line, the explanation and the
// rejections.
std::string plan_text(const SearchOutcome& o, const Loaded& l, const PlanArgs& a) {
  std::string s = fmt::format("{} ({} parameters) on {} x {} ({}), global batch {} sequences of {} tokens\n",
                              l.model->spec().name, l.model->parameters(), l.cluster->gpus(),
                              l.cluster->spec().gpu.model, l.cluster->spec().name, a.global_batch,
                              o.plans.empty() ? o.closest->plan.seq : o.plans[0].plan.seq);
  s += fmt::format(
      "searched {} plans: {} simulated, {} fit under {:.0f} % of memory, in {:.3f} s ({:.0f} "
      "simulations/s)\n\n",
      o.stats.considered, o.stats.evaluated, o.stats.fitting, 100 * (1 - o.headroom), o.stats.seconds,
      o.stats.seconds > 0 ? static_cast<double>(o.stats.evaluated) / o.stats.seconds : 0.0);
  if (!o.plans.empty()) {
    s += "  # runtime   zero  shard  tp  mbs accum ac        wrap  pf red   other                         "
         "     step (s)  tok/s/GPU     vs rec  MFU%   peak mem   headroom   exposed  binding\n";
    for (std::size_t i = 0; i < o.plans.size(); ++i)
      s += plan_row(o.plans[i], o.alternatives[i], static_cast<int>(i + 1));
    s += fmt::format(
        "(row 1: the recommendation; rows 2+: the best plan of each other family; ~: within the "
        "model's "
        "{:.1f} % throughput error, a tie)\n",
        100 * o.tie_tolerance);
    s += "\nrecommended: shardplan simulate --model " + a.in.model + " --cluster " + a.in.cluster +
         fmt::format(" --gpus {} ", l.cluster->gpus()) + plan_to_flags(o.plans[0].plan) + "\n";
    s += o.explanation + "\n";
    s += margin_statement(o.plans[0]) + "\n";
  } else {
    s += o.explanation + "\n";
  }
  s += "rejected:\n";
  for (const auto& [reason, n] : o.stats.rejections.count) {
    s += fmt::format("  {:>8}  {}", n, to_string(reason));
    if (reason == Rejection::kCapability) {
      std::string by;
      for (const auto& [f, k] : o.stats.rejections.capability)
        by += fmt::format("{}{} {}", by.empty() ? "" : ", ", k, to_string(f));
      s += " (" + by + ")";
    }
    s += "\n";
  }
  return s;
}
}  // namespace

Command add_plan_command(CLI::App& app) {
  auto* sub = app.add_subcommand("plan", "search sharding plans and recommend one");
  auto a = std::make_shared<PlanArgs>();
  add_input_options(sub, a->in, true);
  sub->add_option("--global-batch", a->global_batch, "sequences per optimizer step (or the --from file's)");
  sub->add_option(
      "--from", a->from,
      "your own config (DeepSpeed .json, torchtitan 0.3.0 .py[:FUNCTION] or 2024-2025 .toml, accelerate FSDP "
      ".yaml): its choices of the "
      "knobs that are not searched are kept (as --fix), the searched ones are searched");
  sub->add_option("--seq", a->seq, "sequence length (default: the model's)");
  std::string fix_help = "pin a knob: KEY=VALUE, or KEY=V1,V2 for a searched knob (searched:";
  for (const auto& k : SearchSpace::searched_keys()) fix_help += " " + k;
  fix_help += "; every other knob takes one value applied to every candidate:";
  for (const auto& k : knob_keys())
    if (std::find(SearchSpace::searched_keys().begin(), SearchSpace::searched_keys().end(), k) ==
        SearchSpace::searched_keys().end())
      fix_help += " " + k;
  sub->add_option("--fix", a->fixes, fix_help + ")");
  sub->add_option("--top", a->top, "plans to list")->capture_default_str();
  sub->add_option("--threads", a->threads, "worker threads (default: all cores)");
  sub->add_option("--headroom", a->headroom,
                  fmt::format("fraction of GPU memory kept free (default {:.2f}: {})", kDefaultHeadroom,
                              kDefaultHeadroomRule));
  sub->add_option("--json", a->json, "write the JSON result to FILE or - for stdout");
  sub->add_option("--html", a->html, "write a self-contained HTML report of the ranked plans to FILE");
  sub->add_option("--emit", a->emits,
                  "fsdp2:FILE, deepspeed:FILE, torchtitan:FILE (torchtitan 0.3.0 Python config) or "
                  "torchtitan-toml:FILE (2024-2025 TOML) for the recommended plan");
  return {sub, [a]() {
            Loaded l = load_inputs(a->in);
            SearchSpace space = plan_space(*a, l);
            if (a->top < 1) throw InputError::flag("--top", "must be >= 1");
            if (a->threads < 0) throw InputError::flag("--threads", "must be >= 0");
            std::vector<std::pair<EmitTarget, std::string>> emits;
            for (const auto& e : a->emits) {
              const auto [kind, file] = parse_emit_spec(e);
              emits.push_back({*parse_emit_target(kind), file});
            }
            // The targets' capabilities constrain the search (emit_target.hpp).
            std::vector<EmitTarget> targets;
            for (const auto& [t, file] : emits) targets.push_back(t);
            if (!targets.empty()) constrain_to_targets(targets, space);
            SearchOptions opts;
            opts.top = a->top;
            opts.threads = a->threads;
            opts.headroom = a->headroom >= 0 ? a->headroom : kDefaultHeadroom;
            if (opts.headroom >= 1) throw InputError::flag("--headroom", "must be in [0, 1)");
            const bool tty = ::isatty(2);
            auto start = std::chrono::steady_clock::now();
            bool shown = false;
            if (tty)
              opts.progress = [&](double f) {
                double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
                if (el < 0.5 && f < 1) return;
                shown = true;
                int w = 40, fill = static_cast<int>(f * w);
                std::cerr << "\r[" << std::string(static_cast<std::size_t>(fill), '#')
                          << std::string(static_cast<std::size_t>(w - fill), ' ') << "] "
                          << static_cast<int>(100 * f) << "% " << std::flush;
              };
            SearchOutcome o = search_plans(*l.model, *l.cluster, *l.costs, space, opts);
            if (shown) std::cerr << "\r" << std::string(50, ' ') << "\r";
            if (o.plans.empty() && !o.closest)
              // No candidate passed the structural checks: bad input, with what would give one (--fix named
              // only when one was given).
              throw InputError::flag(o.no_candidate.rfind("global batch", 0) == 0 ? "--global-batch"
                                     : space.fixed_keys.empty()                   ? "plan"
                                                                                  : "--fix",
                                     o.no_candidate);
            // Build all outputs before writing any.
            std::vector<std::pair<std::string, std::string>> files;
            std::string emit_lines;  // printed on stderr once the outputs are built
            if (!o.plans.empty()) emit_lines = write_emits(emits, o, l, *a, files);
            if (!a->html.empty()) files.push_back({a->html, html_plan_report(o, *l.model, *l.cluster)});
            if (!a->json.empty()) files.insert(files.begin(), {a->json, plan_json(o, l, *a).dump(1) + "\n"});
            if (a->json != "-") std::cout << plan_text(o, l, *a);
            std::cerr << emit_lines;
            for (const auto& [file, text] : files) write_output(file, text);
            return o.plans.empty() ? 1 : 0;
          }};
}

}  // namespace shardplan::cli
