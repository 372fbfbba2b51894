// `shardplan plan`: search the plan space and recommend a plan, with a ranked table, JSON and framework
// configs.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "planner/cli/commands.hpp"
#include "planner/cli/common.hpp"
#include "planner/cli/plan_args.hpp"
#include "planner/emit.hpp"
#include "planner/emit_target.hpp"
#include "planner/report/evidence.hpp"
#include "planner/report/html.hpp"
#include "planner/report/margin.hpp"
#include "planner/report/report.hpp"
#include "planner/search.hpp"
#include "simulator/plan/plan.hpp"

namespace shardplan::cli {

namespace {

// One table row; `alt` says how it compares with the fastest plan (every difference is to the fastest, and
// `~` marks exactly the rows within the tie tolerance of it: the plans the tie rule could have recommended).
std::string plan_row(const Result& r, const Alternative& alt, int rank) {
  std::string extra;  // knobs away from the defaults that the columns do not show
  if (r.plan.compile) extra += "compile ";
  if (r.plan.async_tp) extra += "async-tp ";
  if (r.plan.fp8 != Fp8::kNone) extra += std::string("fp8=") + to_string(r.plan.fp8) + " ";
  if (r.plan.offload != Offload::kNone) extra += std::string("offload=") + to_string(r.plan.offload) + " ";
  if (r.plan.optimizer != Optimizer::kAdamW) extra += std::string("opt=") + to_string(r.plan.optimizer) + " ";
  const std::string vs = alt.delta_fastest == 0 ? std::string("fastest ")
                                                : fmt::format("{:>+7.1f}%{}", 100 * alt.delta_fastest,
                                                              alt.within_error ? "~" : " ");
  return fmt::format(
      "{:>3} {:<9} {:>4} {:>6} {:>3} {:>3} {:>3} {:<22} {:>4} {:>5} {:<9} {:>4} {:>3} {:<5} {:<22} {:>9.3f} "
      "{:>10.0f} {:>10} {:>6.1f} {:>10} {:>10} {:>9.3f}  {}\n",
      rank, to_string(r.plan.runtime), r.plan.zero, r.plan.shard_group, r.plan.tp, r.plan.cp, r.plan.ep,
      r.plan.pp > 1 ? fmt::format("{} {} v{}", r.plan.pp, to_string(r.plan.pp_schedule),
                                  std::max(1, r.plan.virtual_stages))
                    : std::string("1"),
      r.plan.mbs, r.plan.grad_accum, to_string(r.plan.ac), r.plan.wrap, r.plan.prefetch,
      to_string(r.plan.reduce()), extra.empty() ? "-" : extra.substr(0, extra.size() - 1), r.step_s,
      r.tokens_per_s_per_gpu, vs, 100 * r.mfu,
      format_bytes(static_cast<double>(r.peak_reserved_bytes + r.overhead.total())),
      format_bytes(static_cast<double>(r.headroom_bytes())), r.exposed_comm_s, binding_constraint(r));
}

// One --emit target: the recommended plan as the target runs it (re-simulated where it cannot express a
// knob), its notes on stderr (`lines`) and in the file.
void emit_one(EmitTarget target, const std::string& file, bool replaces_recommendation, const Result& best,
              SearchOutcome& o, const Loaded& l, const PlanArgs& a,
              std::vector<std::pair<std::string, std::string>>& files, std::string& lines) {
  const std::string kind = to_string(target);
  // Megatron / NeMo are configured by their own arguments, which no emitter writes.
  if (best.plan.runtime == Runtime::kMegatron)
    throw InputError::flag(
        "--emit",
        "the recommended plan runs megatron, which has no emitter (set its tp/pp/cp and the "
        "distributed optimizer in Megatron/NeMo)");
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
    if (replaces_recommendation) {  // the printed numbers are the emitted plan's
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

// --emit: each target's file from the recommended plan as that target runs it. Where the target cannot
// express a knob the plan is re-simulated as it will run (said on stderr and in the file); when the targets
// share a runtime (the search was constrained to it) the first target's run replaces the recommendation's
// numbers.
std::string write_emits(const std::vector<std::pair<EmitTarget, std::string>>& emits, SearchOutcome& o,
                        const Loaded& l, const PlanArgs& a,
                        std::vector<std::pair<std::string, std::string>>& files,
                        std::vector<std::string>& refused) {
  std::string lines;  // printed on stderr once the outputs are built
  if (emits.empty()) return lines;
  const Result best = o.plans[0];
  std::vector<EmitTarget> targets;
  for (const auto& [t, file] : emits) targets.push_back(t);
  for (std::size_t i = 0; i < emits.size(); ++i) try {
      const auto& [target, file] = emits[i];
      emit_one(target, file, i == 0 && same_runtime(targets), best, o, l, a, files, lines);
    } catch (const InputError& e) {
      // One target the plan cannot be emitted as: the table, the JSON, the HTML and the other targets are
      // still written; the refusal is named on stderr and the exit status is 2.
      refused.push_back(
          fmt::format("--emit {}:{}: {}", to_string(emits[i].first), emits[i].second, e.what()));
    }
  return lines;
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
                            {"role", o.alternatives[i].role},
                            {"tokens_per_s_per_gpu", o.plans[i].tokens_per_s_per_gpu},
                            {"delta_vs_recommended", o.alternatives[i].delta_rel},
                            {"delta_vs_fastest", o.alternatives[i].delta_fastest},
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
            {"headroom_rule", a.headroom_rule},
            {"risk", a.risk != -1 ? Json(a.risk) : Json(nullptr)},
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
  if (a.risk != -1) s += fmt::format("headroom {:.1f} % ({})\n\n", 100 * o.headroom, a.headroom_rule);
  if (!o.plans.empty()) {
    s += fmt::format(
        "{:>3} {:<9} {:>4} {:>6} {:>3} {:>3} {:>3} {:<22} {:>4} {:>5} {:<9} {:>4} {:>3} {:<5} {:<22} {:>9} "
        "{:>10} {:>10} {:>6} {:>10} {:>10} {:>9}  {}\n",
        "#", "runtime", "zero", "shard", "tp", "cp", "ep", "pp (schedule, V)", "mbs", "accum", "ac", "wrap",
        "pf", "red", "other", "step (s)", "tok/s/GPU", "vs fastest", "MFU%", "peak mem", "headroom",
        "exposed", "binding");
    for (std::size_t i = 0; i < o.plans.size(); ++i)
      s += plan_row(o.plans[i], o.alternatives[i], static_cast<int>(i + 1));
    s += fmt::format(
        "(row 1: the recommendation; {}the fastest plan of each other family (runtime x TP x PP x CP x EP x "
        "AC x "
        "HSDP); vs fastest: tokens/s against the fastest fitting plan, ~: within the model's {:.1f} % "
        "throughput error of it, a tie)\n",
        o.fastest ? "row 2: the fastest plan; then " : "rows 2+: ", 100 * o.tie_tolerance);
    s += "\nrecommended: shardplan simulate --model " + a.in.model + " --cluster " + a.in.cluster +
         fmt::format(" --gpus {} ", l.cluster->gpus()) + plan_to_flags(o.plans[0].plan) + "\n";
    s += o.explanation + "\n";
    s += margin_statement(o.plans[0]) + "\n";
    for (const auto& w : evidence_warnings(o.plans[0], l.model->spec(), l.cluster->spec()))
      s += "warning: " + w + "\n";
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
// Progress on stderr for a search that takes more than 2 s (SHARDPLAN_PROGRESS_AFTER_S overrides the delay,
// for tests): a watcher thread prints what the search reports (the first pass's share of its simulations)
// and the time, as one updating line on a terminal, else one line every 10 s, and says when it is done.
// Nothing for a quick search.
class ProgressLine {
 public:
  explicit ProgressLine(SearchOptions& opts) : tty_(::isatty(2)), start_(std::chrono::steady_clock::now()) {
    if (const char* env = std::getenv("SHARDPLAN_PROGRESS_AFTER_S")) after_s_ = std::atof(env);
    opts.progress = [this](double f) { fraction_ = f; };
    watcher_ = std::thread([this] { watch(); });
  }
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;
  ~ProgressLine() { stop(); }
  /// Ends the watcher and, if it printed, says that the search is done.
  void done(const SearchOutcome& o) {
    stop();
    if (shown_)
      std::cerr << (tty_ ? "\r" : "")
                << fmt::format("shardplan: search done: {} plans simulated in {:.1f} s\n", o.stats.evaluated,
                               o.stats.seconds);
  }

 private:
  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  void watch() {
    std::unique_lock<std::mutex> lock(mu_);
    double next = after_s_;
    while (!cv_.wait_until(lock, start_ + std::chrono::duration<double>(next), [this] { return done_; })) {
      const std::string line =
          fmt::format("shardplan: searching: {:.0f} % of the first pass simulated, {:.1f} s",
                      100 * fraction_.load(), elapsed());
      std::cerr << (tty_ ? "\r" + line : line + "\n") << std::flush;
      shown_ = true;
      next = elapsed() + (tty_ ? 0.5 : 10.0);
    }
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (watcher_.joinable()) watcher_.join();
  }
  const bool tty_;
  const std::chrono::steady_clock::time_point start_;
  double after_s_ = 2.0;
  std::atomic<double> fraction_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false, shown_ = false;
  std::thread watcher_;
};

// The headroom of the search: --headroom, --risk's (every accepted plan's OOM probability at most P), or the
// default rule; sets a.headroom_rule.
double search_headroom(PlanArgs& a) {
  double h = a.headroom >= 0 ? a.headroom : kDefaultHeadroom;
  if (h >= 1) throw InputError::flag("--headroom", "must be in [0, 1)");
  a.headroom_rule = a.headroom >= 0 ? "--headroom" : kDefaultHeadroomRule;
  if (a.risk == -1) return h;
  if (a.headroom >= 0) throw InputError::flag("--risk", "give --risk or --headroom, not both");
  if (!(a.risk > 0 && a.risk < 1))
    throw InputError::flag("--risk", fmt::format("must be a probability in (0, 1), got {}", a.risk));
  a.headroom_rule = fmt::format(
      "--risk {}: at this headroom every accepted plan's probability of running out of memory is at most {}",
      a.risk, format_probability(a.risk));
  return risk_headroom(a.risk);
}
}  // namespace

Command add_plan_command(CLI::App& app) {
  auto* sub = app.add_subcommand("plan", "search sharding plans and recommend one");
  auto a = std::make_shared<PlanArgs>();
  add_input_options(sub, a->in, true);
  CLI::Option* global_batch_opt = sub->add_option("--global-batch", a->global_batch,
                                                  "sequences per optimizer step (or the --from file's)");
  sub->add_option(
      "--from", a->from,
      "your own config (DeepSpeed .json, torchtitan 0.3.0 .py[:FUNCTION] or 2024-2025 .toml, accelerate FSDP "
      ".yaml): its choices of the "
      "knobs that are not searched are kept (as --fix), the searched ones are searched");
  sub->add_option("--seq", a->seq, "sequence length (default: the model's)");
  sub->add_option("--framework", a->framework,
                  "the framework version whose defaults pin the knobs you do not: torchtitan@YYYY-MM-DD, "
                  "torchtitan@0.1.0..0.3.0, torch@VERSION, deepspeed@VERSION (`shardplan list frameworks`)");
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
  sub->add_option(
      "--risk", a->risk,
      "accepted probability of running out of memory, e.g. 0.01: sets the headroom at which every "
      "accepted plan's OOM probability is at most this (docs/model.md \"Out-of-memory "
      "probability\"); instead of --headroom");
  sub->add_option("--json", a->json, "write the JSON result to FILE or - for stdout");
  sub->add_option("--html", a->html, "write a self-contained HTML report of the ranked plans to FILE");
  sub->add_option("--emit", a->emits,
                  "fsdp2:FILE, deepspeed:FILE, torchtitan:FILE (torchtitan 0.3.0 Python config) or "
                  "torchtitan-toml:FILE (2024-2025 TOML) for the recommended plan");
  return {sub, [a, global_batch_opt]() {
            // A --global-batch given as 0 or less is a bad value, not a missing flag.
            if (global_batch_opt->count() > 0 && a->global_batch < 1)
              throw InputError::flag("--global-batch", fmt::format("must be >= 1, got {}", a->global_batch));
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
            opts.headroom = search_headroom(*a);
            SearchOutcome o;
            {
              ProgressLine progress(opts);
              o = search_plans(*l.model, *l.cluster, *l.costs, space, opts);
              progress.done(o);
            }
            if (o.plans.empty() && !o.closest)
              // No candidate passed the structural checks: bad input, with what would give one (--fix named
              // only when one was given).
              throw InputError::flag(o.no_candidate.rfind("global batch", 0) == 0 ? "--global-batch"
                                     : space.fixed_keys.empty()                   ? "plan"
                                                                                  : "--fix",
                                     o.no_candidate);
            // Build all outputs before writing any.
            std::vector<std::pair<std::string, std::string>> files;
            std::vector<std::string> refused;  // --emit targets the recommendation cannot be written as
            std::string emit_lines;            // printed on stderr once the outputs are built
            if (!o.plans.empty()) emit_lines = write_emits(emits, o, l, *a, files, refused);
            if (!a->html.empty()) files.push_back({a->html, html_plan_report(o, *l.model, *l.cluster)});
            if (!a->json.empty()) files.insert(files.begin(), {a->json, plan_json(o, l, *a).dump(1) + "\n"});
            if (a->json != "-") std::cout << plan_text(o, l, *a);
            std::cerr << emit_lines;
            for (const auto& [file, text] : files) write_output(file, text);
            for (const auto& r : refused) std::cerr << "shardplan: error: " << r << "\n";
            if (!refused.empty()) return 2;
            return o.plans.empty() ? 1 : 0;
          }};
}

}  // namespace shardplan::cli
