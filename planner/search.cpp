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

#include "topologies/cluster.hpp"

namespace shardplan {

namespace {
std::vector<int> parse_int_list(const std::string& key, const std::string& v) {
  std::vector<int> out;
  std::size_t pos = 0;
  while (pos <= v.size()) {
    std::size_t c = v.find(',', pos);
    std::string item = v.substr(pos, c == std::string::npos ? std::string::npos : c - pos);
    try {
      std::size_t used = 0;
      long long x = std::stoll(item, &used);
      if (used != item.size() || x < 0 || x > (1 << 24)) throw std::invalid_argument(item);
      out.push_back(static_cast<int>(x));
    } catch (const std::exception&) {
      throw InputError::flag("--fix " + key, "expected an integer (or a comma-separated list), got \"" + item + "\"");
    }
    if (c == std::string::npos) break;
    pos = c + 1;
  }
  return out;
}
bool parse_bool(const std::string& key, const std::string& v) {
  if (v == "true") return true;
  if (v == "false") return false;
  throw InputError::flag("--fix " + key, "expected true or false, got \"" + v + "\"");
}

template <class T>
std::vector<T> parse_enum_list(const std::string& key, const std::string& v) {
  std::vector<T> out;
  std::size_t pos = 0;
  while (true) {
    std::size_t c = v.find(',', pos);
    out.push_back(parse_enum_or_throw<T>(v.substr(pos, c == std::string::npos ? std::string::npos : c - pos),
                                         "--fix " + key));
    if (c == std::string::npos) break;
    pos = c + 1;
  }
  return out;
}
}  // namespace

void SearchSpace::fix(const std::string& kv) {
  auto eq = kv.find('=');
  if (eq == std::string::npos) throw InputError::flag("--fix", "expected KEY=VALUE, got \"" + kv + "\"");
  std::string key = kv.substr(0, eq), v = kv.substr(eq + 1);
  std::replace(key.begin(), key.end(), '-', '_');
  if (key == "runtime")
    runtimes = parse_enum_list<Runtime>(key, v);
  else if (key == "zero") zero = parse_int_list(key, v);
  else if (key == "tp") tp = parse_int_list(key, v);
  else if (key == "mbs") mbs = parse_int_list(key, v);
  else if (key == "wrap") wrap = parse_int_list(key, v);
  else if (key == "prefetch") prefetch = parse_int_list(key, v);
  else if (key == "shard_group") shard_groups = parse_int_list(key, v);
  else if (key == "ac")
    ac = parse_enum_list<AcMode>(key, v);
  else if (key == "reduce_dtype")
    reduce = parse_enum_list<Dtype>(key, v);
  else if (key == "offload")
    offload = parse_enum_list<Offload>(key, v);
  else if (key == "precision") {
    precision = parse_enum_or_throw<Precision>(v, "--fix precision");
  } else if (key == "seq") {
    auto s = parse_int_list(key, v);
    if (s.size() != 1 || s[0] < 1) throw InputError::flag("--fix seq", "expected one positive integer");
    seq = s[0];
  } else if (key == "fp8") {
    fp8 = parse_enum_or_throw<Fp8>(v, "--fix fp8");
  } else if (key == "fp8_all_gather") {
    fp8_all_gather = parse_bool(key, v);
  } else if (key == "reshard_after_forward") {
    reshard_after_forward = {parse_bool(key, v)};
  } else {
    static const std::vector<std::string> keys = {"runtime", "zero", "tp", "mbs", "wrap", "prefetch", "shard_group", "ac",
                                                  "reduce_dtype", "offload", "precision", "seq", "reshard_after_forward",
                                                  "fp8", "fp8_all_gather"};
    std::string sug = did_you_mean_list(key, keys);
    throw InputError::flag("--fix", "unknown knob \"" + key + "\"" + (sug.empty() ? "" : " (did you mean \"" + sug + "\"?)") +
                                        "; knobs: " + join_names(keys));
  }
}

bool better(const Evaluation& a, const Evaluation& b) {
  const double scale = std::max(std::abs(a.tokens_per_s_per_gpu), std::abs(b.tokens_per_s_per_gpu));
  if (std::abs(a.tokens_per_s_per_gpu - b.tokens_per_s_per_gpu) > 1e-9 * scale) return a.tokens_per_s_per_gpu > b.tokens_per_s_per_gpu;
  return a.peak_reserved_bytes < b.peak_reserved_bytes;
}

static std::string plan_flags(const Plan& p) {
  return fmt::format("--runtime {} --zero {} --shard-group {} --tp {} --mbs {} --grad-accum {} --ac {} --wrap {} --prefetch {} "
                     "--reshard-after-forward {} --precision {} --reduce-dtype {} --offload {}{}{}",
                     to_string(p.runtime), p.zero, p.shard_group, p.tp, p.mbs, p.grad_accum, to_string(p.ac), p.wrap,
                     p.prefetch, p.reshard() ? "true" : "false", to_string(p.precision), to_string(p.reduce()),
                     to_string(p.offload), p.fp8 == Fp8::kNone ? "" : std::string(" --fp8 ") + to_string(p.fp8),
                     p.fp8_all_gather ? " --fp8-all-gather" : "");
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
                        Plan p;
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
                        p.precision = sp.precision;
                        p.fp8 = sp.fp8;
                        p.fp8_all_gather = sp.fp8_all_gather;
                        p.seq = sp.seq;
                        if (zero == 3) p.reshard_after_forward = true;
                        if (rt != Runtime::kFsdp2 && pf > 1) {  // explicit prefetch depth is an FSDP2 knob: not a candidate
                          --stats.considered;
                          continue;
                        }
                        if (p.precision == Precision::kFp32 && rd == Dtype::kBf16) {
                          reject(stats.rejections, "fp32 precision reduces in fp32", plan_flags(p));
                          continue;
                        }
                        try {
                          out.push_back(resolve_plan(p, model, cluster, sp.global_batch));
                        } catch (const InputError& e) {
                          // Group reasons by flag and the start of the message (numbers stripped).
                          std::string key = e.where();
                          std::string msg = std::string(e.what());
                          if (msg.find("global batch") != std::string::npos) key += " not a multiple of dp x mbs";
                          else if (msg.find("does not divide") != std::string::npos) key += " does not divide";
                          else if (msg.find("no ZeRO-1") != std::string::npos) key += " has no ZeRO-1 mode";
                          else if (msg.find("exceeds") != std::string::npos) key += " exceeds the limit";
                          else if (msg.find("hybrid") != std::string::npos) key += " HSDP not modelled for deepspeed";
                          reject(stats.rejections, key, plan_flags(p) + "  (" + msg + ")");
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
             plan_flags(cands[i]) + fmt::format("  (lower bound {:.2f} GiB > limit {:.2f} GiB)",
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
             plan_flags(r.plan) + fmt::format("  (peak {:.2f} GiB > limit {:.2f} GiB)", static_cast<double>(used) / static_cast<double>(kGiB),
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
      if (persistent > 0.6 * static_cast<double>(limit))
        out.binding_hint = fmt::format(
            "persistent state alone ({:.1f} GiB per GPU) leaves no room: shard over more GPUs (about {:.0f}+ GPUs for "
            "ZeRO-3) or offload the optimizer",
            persistent / static_cast<double>(kGiB), need_gpus);
      else
        out.binding_hint = "activations and transients dominate: use --ac full, a smaller --mbs, or tensor parallelism";
      out.explanation = fmt::format("no plan fits: the closest ({}) needs {} more than the {:.2f} GiB limit; {}",
                                    plan_flags(c.plan), fmt::format("{:.2f} GiB", static_cast<double>(out.closest_over_bytes) / static_cast<double>(kGiB)),
                                    static_cast<double>(limit) / static_cast<double>(kGiB), out.binding_hint);
    } else {
      out.explanation = "no structurally valid plan: every candidate was rejected (see rejections)";
    }
  } else if (out.plans.size() >= 2) {
    const Result& a = out.plans[0];
    const Result& b = out.plans[1];
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
  out.stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace shardplan
