// Staged plan search: enumerate -> resolve (structural validity) -> memory lower bound (prune) -> full
// simulation on worker threads -> deterministic ranking.
#include "planner/search.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <thread>

#include "simulator/knobs.hpp"
#include "topologies/cluster.hpp"

namespace shardplan {

namespace {
using Assign = std::function<void(SearchSpace&, const std::vector<Plan>&)>;

template <class T, class F>
std::vector<T> each(const std::vector<Plan>& v, F f) {
  std::vector<T> out;
  for (const Plan& p : v) out.push_back(f(p));
  return out;
}

// The searched knobs: run-record key -> how a --fix list of values (each parsed into a Plan by the knob table)
// replaces the search dimension.
const std::vector<std::pair<std::string, Assign>>& dimensions() {
  static const std::vector<std::pair<std::string, Assign>> d = {
      {"runtime", [](SearchSpace& s, const std::vector<Plan>& v) { s.runtimes = each<Runtime>(v, [](const Plan& p) { return p.runtime; }); }},
      {"zero", [](SearchSpace& s, const std::vector<Plan>& v) { s.zero = each<int>(v, [](const Plan& p) { return p.zero; }); }},
      {"shard_group", [](SearchSpace& s, const std::vector<Plan>& v) { s.shard_groups = each<int>(v, [](const Plan& p) { return p.shard_group; }); }},
      {"tp", [](SearchSpace& s, const std::vector<Plan>& v) { s.tp = each<int>(v, [](const Plan& p) { return p.tp; }); }},
      {"mbs", [](SearchSpace& s, const std::vector<Plan>& v) { s.mbs = each<int>(v, [](const Plan& p) { return p.mbs; }); }},
      {"ac", [](SearchSpace& s, const std::vector<Plan>& v) { s.ac = each<AcMode>(v, [](const Plan& p) { return p.ac; }); }},
      {"wrap", [](SearchSpace& s, const std::vector<Plan>& v) { s.wrap = each<int>(v, [](const Plan& p) { return p.wrap; }); }},
      {"prefetch", [](SearchSpace& s, const std::vector<Plan>& v) { s.prefetch = each<int>(v, [](const Plan& p) { return p.prefetch; }); }},
      {"reshard_after_forward",
       [](SearchSpace& s, const std::vector<Plan>& v) { s.reshard_after_forward = each<bool>(v, [](const Plan& p) { return p.reshard(); }); }},
      {"reduce_dtype", [](SearchSpace& s, const std::vector<Plan>& v) { s.reduce = each<Dtype>(v, [](const Plan& p) { return p.reduce(); }); }},
      {"offload", [](SearchSpace& s, const std::vector<Plan>& v) { s.offload = each<Offload>(v, [](const Plan& p) { return p.offload; }); }},
  };
  return d;
}
}  // namespace

const std::vector<std::string>& SearchSpace::searched_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k;
    for (const auto& [name, assign] : dimensions()) k.push_back(name);
    return k;
  }();
  return keys;
}

void SearchSpace::fix(const std::string& kv) {
  auto eq = kv.find('=');
  if (eq == std::string::npos) throw InputError::flag("--fix", "expected KEY=VALUE, got \"" + kv + "\"");
  std::string key = kv.substr(0, eq), v = kv.substr(eq + 1);
  std::replace(key.begin(), key.end(), '-', '_');
  const Knob* k = find_knob(key);
  if (!k) {
    const std::vector<std::string> keys = knob_keys();
    std::string sug = did_you_mean_list(key, keys);
    throw InputError::flag("--fix", "unknown knob \"" + key + "\"" + (sug.empty() ? "" : " (did you mean \"" + sug + "\"?)") +
                                        "; knobs: " + join_names(keys));
  }
  const std::string where = "--fix " + key;
  // A switch named by its flag (foreach_optimizer) means what the flag sets: foreach_optimizer=true is
  // fused_optimizer=false.
  auto value = [&](const std::string& item) {
    if (k->kind != KnobKind::kSwitch || key == k->key || std::string(k->switch_sets) == "true") return item;
    return item == "true" ? std::string("false") : item == "false" ? std::string("true") : item;
  };
  for (const auto& [name, assign] : dimensions()) {
    if (name != k->key) continue;
    std::vector<Plan> values;
    std::size_t pos = 0;
    while (true) {
      const std::size_t c = v.find(',', pos);
      Plan one;
      set_knob(*k, one, value(v.substr(pos, c == std::string::npos ? std::string::npos : c - pos)), where);
      values.push_back(one);
      if (c == std::string::npos) break;
      pos = c + 1;
    }
    assign(*this, values);
    return;
  }
  if (v.find(',') != std::string::npos)
    throw InputError::flag(where, "is not searched: give one value, got \"" + v + "\"");
  set_knob(*k, base, value(v), where);
  if (std::string(k->key) == "grad_accum") grad_accum = base.grad_accum;
  if (std::string(k->key) == "seq") seq = base.seq;
}

bool better(const Evaluation& a, const Evaluation& b) {
  const double scale = std::max(std::abs(a.tokens_per_s_per_gpu), std::abs(b.tokens_per_s_per_gpu));
  if (std::abs(a.tokens_per_s_per_gpu - b.tokens_per_s_per_gpu) > 1e-9 * scale) return a.tokens_per_s_per_gpu > b.tokens_per_s_per_gpu;
  return a.peak_reserved_bytes < b.peak_reserved_bytes;
}

static void reject(Rejections& r, const std::string& reason, const std::string& example) {
  if (r.count[reason]++ == 0) r.example[reason] = example;
}

std::vector<Plan> enumerate_candidates(const ModelGraph& model, const Cluster& cluster, const SearchSpace& sp,
                                       SearchStats& stats) {
  std::vector<Plan> out;
  const int node = cluster.spec().node.nvlink_domain_gpus;
  for (Runtime rt : sp.runtimes)
    for (int tp : sp.tp)
      for (int zero : sp.zero) {
        // Shard groups: divisors of dp that respect node boundaries (within a node: powers of two dividing the
        // node's data-parallel ranks; across: whole nodes).
        const int dp = cluster.gpus() / std::max(1, tp);
        std::vector<int> groups = sp.shard_groups;
        if (groups.empty()) {
          if (zero == 0) groups = {0};
          else
            for (int g = 1; g <= dp; ++g)
              if (dp % g == 0 && ((g * tp) % node == 0 || node % (g * tp) == 0) && (g == dp || (g & (g - 1)) == 0 || g * tp >= node))
                groups.push_back(g);
        }
        // reshard_after_forward is ZeRO-3's defining knob (false = SHARD_GRAD_OP, searched as zero 2).
        const bool raf = zero == 3;
        if (std::find(sp.reshard_after_forward.begin(), sp.reshard_after_forward.end(), raf) == sp.reshard_after_forward.end())
          continue;
        for (int g : groups)
            for (int mbs : sp.mbs)
              for (AcMode ac : sp.ac)
                for (int wrap : sp.wrap)
                  for (int pf : sp.prefetch)
                    for (Dtype rd : sp.reduce)
                      for (Offload off : sp.offload) {
                        ++stats.considered;
                        Plan p = sp.base;
                        p.runtime = rt;
                        p.zero = zero;
                        p.tp = tp;
                        p.shard_group = g;
                        p.mbs = mbs;
                        p.ac = ac;
                        p.wrap = wrap;
                        p.prefetch = pf;
                        p.reduce_dtype = rd;
                        p.offload = off;
                        if (sp.seq > 0) p.seq = sp.seq;
                        if (zero == 3) p.reshard_after_forward = true;
                        if (rt != Runtime::kFsdp2 && pf > 1) {  // explicit prefetch depth is an FSDP2 knob: not a candidate
                          --stats.considered;
                          continue;
                        }
                        if (p.precision == Precision::kFp32 && rd == Dtype::kBf16) {
                          reject(stats.rejections, "fp32 precision reduces in fp32", plan_to_flags(p));
                          continue;
                        }
                        try {
                          Plan r = resolve_plan(p, model, cluster, sp.global_batch);
                          if (sp.grad_accum && r.grad_accum != *sp.grad_accum) {
                            reject(stats.rejections, "--grad-accum differs from --fix grad_accum",
                                   plan_to_flags(r) + fmt::format("  (global batch {} needs {} micro-batches)",
                                                                  sp.global_batch, r.grad_accum));
                            continue;
                          }
                          out.push_back(r);
                        } catch (const InputError& e) {
                          // Group reasons by flag and the start of the message (numbers stripped).
                          std::string key = e.where();
                          std::string msg = std::string(e.what());
                          if (msg.find("global batch") != std::string::npos) key += " not a multiple of dp x mbs";
                          else if (msg.find("does not divide") != std::string::npos) key += " does not divide";
                          else if (msg.find("no ZeRO-1") != std::string::npos) key += " has no ZeRO-1 mode";
                          else if (msg.find("exceeds") != std::string::npos) key += " exceeds the limit";
                          else if (msg.find("hybrid") != std::string::npos) key += " HSDP not modelled for deepspeed";
                          else if (e.where() == "--offload") key += " not available for this runtime and stage";
                          reject(stats.rejections, key, plan_to_flags(p) + "  (" + msg + ")");
                        }
                      }
      }
  return out;
}

std::string binding_constraint(const Result& r) {
  const double used = static_cast<double>(r.peak_reserved_bytes + r.overhead.total());
  if (!r.fits || used > 0.9 * static_cast<double>(r.capacity_bytes)) return "memory";
  if (r.exposed_comm_s > 0.15 * r.step_s) return "exposed communication";
  if (r.step_s > 0 && r.compute_s < 0.75 * r.step_s) return "CPU / launch overhead";
  return "compute";
}

// What would help a plan that does not fit, naming only settings the closest plan does not have yet.
static std::string no_fit_advice(const Plan& c, bool persistent_bound, double persistent_bytes, double need_gpus,
                                 int nvlink_domain_gpus) {
  std::vector<std::string> tips;
  if (persistent_bound) {
    tips.push_back(fmt::format("shard over more GPUs (about {:.0f}+ GPUs for ZeRO-3)", need_gpus));
    if (c.zero < 3) tips.push_back(fmt::format("--zero 3 (the closest uses --zero {})", c.zero));
    if (c.offload == Offload::kNone) tips.push_back("offload to the host (--offload params, or --offload optimizer with deepspeed)");
    else if (c.offload == Offload::kOptimizer) tips.push_back("offload the parameters too (--offload params with --zero 3)");
    if (c.tp < nvlink_domain_gpus) tips.push_back(fmt::format("more tensor parallelism (the closest uses --tp {})", c.tp));
  } else {
    if (c.ac != AcMode::kFull) tips.push_back(fmt::format("--ac full (the closest uses --ac {})", to_string(c.ac)));
    if (c.mbs > 1) tips.push_back(fmt::format("a smaller --mbs (the closest uses {})", c.mbs));
    if (c.tp < nvlink_domain_gpus) tips.push_back(fmt::format("more tensor parallelism (the closest uses --tp {})", c.tp));
    if (tips.empty()) tips.push_back(fmt::format("more GPUs or a shorter --seq (the closest uses {})", c.seq));
  }
  std::string joined;
  for (std::size_t i = 0; i < tips.size(); ++i)
    joined += (i == 0 ? "" : i + 1 == tips.size() ? " or " : ", ") + tips[i];
  return persistent_bound ? fmt::format("persistent state alone ({:.1f} GiB per GPU) leaves no room: {}",
                                        persistent_bytes / static_cast<double>(kGiB), joined)
                          : "activations and transients dominate: " + joined;
}

SearchOutcome search_plans(const ModelGraph& model, const Cluster& cluster, const CostModel& costs,
                           const SearchSpace& space, const SearchOptions& opts) {
  auto t0 = std::chrono::steady_clock::now();
  SearchOutcome out;
  out.headroom = opts.headroom;
  std::vector<Plan> cands = enumerate_candidates(model, cluster, space, out.stats);
  const Bytes capacity = cluster.spec().gpu.memory_bytes;
  const Bytes limit = static_cast<Bytes>(static_cast<double>(capacity) * (1.0 - opts.headroom));

  // Stage 2: cheap lower bound = persistent params + optimizer + one micro-batch of saved activations.
  std::vector<std::size_t> survivors;
  std::vector<Bytes> bound(cands.size());
  for (std::size_t i = 0; i < cands.size(); ++i) {
    auto ps = Simulator::persistent_state(model, cands[i]);
    bound[i] = ps[0] + ps[2] + Simulator::activation_bytes(model, cands[i]) + 512 * kMiB;
    if (bound[i] > limit) {
      reject(out.stats.rejections, "memory lower bound exceeds capacity",
             plan_to_flags(cands[i]) + fmt::format("  (lower bound {:.2f} GiB > limit {:.2f} GiB)",
                                                static_cast<double>(bound[i]) / static_cast<double>(kGiB),
                                                static_cast<double>(limit) / static_cast<double>(kGiB)));
      continue;
    }
    survivors.push_back(i);
  }

  // Stage 3: full simulation of survivors on worker threads; results stored by index (thread-count independent).
  std::vector<Result> results(survivors.size());
  std::atomic<std::size_t> next{0}, done{0};
  int threads = opts.threads > 0 ? opts.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = std::max(1, std::min<int>(threads, static_cast<int>(std::max<std::size_t>(1, survivors.size()))));
  auto worker = [&]() {
    Simulator sim(model, cluster, costs);
    for (std::size_t k; (k = next.fetch_add(1)) < survivors.size();) {
      results[k] = sim.run(cands[survivors[k]]);
      done.fetch_add(1);
    }
  };
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i) pool.emplace_back(worker);
  if (opts.progress) {
    // The calling thread works too; progress is reported between its plans.
    Simulator sim(model, cluster, costs);
    for (std::size_t k; (k = next.fetch_add(1)) < survivors.size();) {
      results[k] = sim.run(cands[survivors[k]]);
      done.fetch_add(1);
      opts.progress(static_cast<double>(done.load()) / static_cast<double>(survivors.size()));
    }
  } else {
    worker();
  }
  for (auto& t : pool) t.join();
  out.stats.evaluated = static_cast<std::int64_t>(survivors.size());

  // Stage 4: rank those under the limit.
  std::vector<std::size_t> fitting;
  std::optional<std::size_t> closest;
  Bytes closest_over = 0;
  for (std::size_t k = 0; k < results.size(); ++k) {
    const Result& r = results[k];
    const Bytes used = r.peak_reserved_bytes + r.overhead.total();
    if (used <= limit) {
      fitting.push_back(k);
    } else {
      reject(out.stats.rejections, "simulated peak exceeds capacity x (1 - headroom)",
             plan_to_flags(r.plan) + fmt::format("  (peak {:.2f} GiB > limit {:.2f} GiB)", static_cast<double>(used) / static_cast<double>(kGiB),
                                              static_cast<double>(limit) / static_cast<double>(kGiB)));
      if (!closest || used - limit < closest_over) closest = k, closest_over = used - limit;
    }
  }
  out.stats.fitting = static_cast<std::int64_t>(fitting.size());
  auto eval = [&](std::size_t k) {
    const Result& r = results[k];
    return Evaluation{true, r.tokens_per_s_per_gpu, r.peak_reserved_bytes + r.overhead.total(), r.capacity_bytes};
  };
  std::stable_sort(fitting.begin(), fitting.end(), [&](std::size_t a, std::size_t b) { return better(eval(a), eval(b)); });
  for (std::size_t i = 0; i < fitting.size() && static_cast<int>(i) < std::max(1, opts.top); ++i) out.plans.push_back(results[fitting[i]]);

  if (out.plans.empty()) {
    // Nothing fits: which constraint binds, and how far the closest plan is.
    std::size_t best_bound = 0;
    for (std::size_t i = 1; i < cands.size(); ++i)
      if (bound[i] < bound[best_bound]) best_bound = i;
    if (closest) {
      out.closest = results[*closest];
      out.closest_over_bytes = closest_over;
    } else if (!cands.empty()) {
      Simulator sim(model, cluster, costs);
      out.closest = sim.run(cands[best_bound]);
      out.closest_over_bytes = out.closest->peak_reserved_bytes + out.closest->overhead.total() - limit;
    }
    if (out.closest) {
      const Result& c = *out.closest;
      const double persistent = static_cast<double>(c.persistent_bytes);
      const double need_gpus = std::ceil(static_cast<double>(cluster.gpus()) * persistent / (0.6 * static_cast<double>(limit)));
      out.binding_hint = no_fit_advice(c.plan, persistent > 0.6 * static_cast<double>(limit), persistent, need_gpus,
                                       cluster.spec().node.nvlink_domain_gpus);
      out.explanation = fmt::format("no plan fits: the closest ({}) needs {} more than the {:.2f} GiB limit; {}",
                                    plan_to_flags(c.plan), fmt::format("{:.2f} GiB", static_cast<double>(out.closest_over_bytes) / static_cast<double>(kGiB)),
                                    static_cast<double>(limit) / static_cast<double>(kGiB), out.binding_hint);
    } else {
      out.explanation = "no structurally valid plan: every candidate was rejected (see rejections)";
    }
  } else if (fitting.size() >= 2) {
    // The next plan, even when --top 1 lists only the recommendation.
    const Result& a = results[fitting[0]];
    const Result& b = results[fitting[1]];
    std::vector<std::string> why;
    if (a.exposed_comm_s + 1e-6 < b.exposed_comm_s)
      why.push_back(fmt::format("{:.1f} ms less exposed communication", 1e3 * (b.exposed_comm_s - a.exposed_comm_s)));
    if (a.compute_s + 1e-6 < b.compute_s)
      why.push_back(fmt::format("{:.1f} ms less compute (recomputation, GEMM shapes)", 1e3 * (b.compute_s - a.compute_s)));
    if (a.peak_reserved_bytes < b.peak_reserved_bytes)
      why.push_back(fmt::format("{:.2f} GiB more memory headroom", static_cast<double>(b.peak_reserved_bytes - a.peak_reserved_bytes) / static_cast<double>(kGiB)));
    out.explanation = fmt::format("recommended: {:.0f} tokens/s/GPU vs {:.0f} for the next plan ({:+.1f} %)", a.tokens_per_s_per_gpu,
                                  b.tokens_per_s_per_gpu, 100.0 * (a.tokens_per_s_per_gpu / b.tokens_per_s_per_gpu - 1));
    if (!why.empty()) {
      out.explanation += ": ";
      for (std::size_t i = 0; i < why.size(); ++i) out.explanation += (i ? ", " : "") + why[i];
    }
  } else {
    out.explanation = "the only plan that fits";
  }
  if (out.stats.fitting > static_cast<std::int64_t>(out.plans.size()))
    out.explanation += fmt::format("; {} plans fit, the top {} {} listed (--top)", out.stats.fitting, out.plans.size(),
                                   out.plans.size() == 1 ? "is" : "are");
  out.stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace shardplan
