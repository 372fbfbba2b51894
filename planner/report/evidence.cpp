// The measured evidence of the predictions (planner/evidence.json), the OOM probability drawn from it, and
// the warnings where a prediction leaves it.
#include "planner/report/evidence.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "core/embedded.hpp"
#include "planner/validate.hpp"

namespace shardplan_generated {
const std::vector<shardplan::EmbeddedFile>& evidence_files();
}

namespace shardplan {

std::vector<std::string> model_features(const ModelSpec& s) {
  std::vector<std::string> f = {to_string(s.mlp), to_string(s.norm), to_string(s.positions)};
  if (s.kv_heads > 0 && s.kv_heads < s.heads) f.push_back("gqa");
  if (s.moe.experts > 0) f.push_back("moe");
  if (s.mla.enabled()) f.push_back("mla");
  if (s.qk_norm != QkNormKind::kNone) f.push_back("qk-norm");
  if (s.window > 0) f.push_back("local-attention");
  if (s.attn_softcap > 0 || s.final_softcap > 0) f.push_back("softcap");
  if (s.attn_bias) f.push_back(s.qkv_bias_only ? "qkv-bias" : "attn-bias");
  if (s.mlp_bias) f.push_back("mlp-bias");
  if (s.tied_embeddings) f.push_back("tied-embeddings");
  if (s.embedding_norm) f.push_back("embedding-norm");
  if (s.norm_placement != NormPlacement::kPre)
    f.push_back(std::string("norm-") + to_string(s.norm_placement));
  return f;
}

std::vector<std::string> plan_features(const Plan& p) {
  std::vector<std::string> f = {std::string("runtime=") + to_string(p.runtime),
                                std::string("precision=") + to_string(p.precision),
                                std::string("ac=") + to_string(p.ac), fmt::format("zero={}", p.zero)};
  if (p.compile) f.push_back("compile");
  if (p.fp8 != Fp8::kNone) f.push_back(std::string("fp8=") + to_string(p.fp8));
  if (p.fp8_all_gather) f.push_back("fp8-all-gather");
  if (p.tp > 1) f.push_back("tp");
  if (p.pp > 1) f.push_back("pp");
  if (p.cp > 1) f.push_back("cp");
  if (p.ep > 1) f.push_back("ep");
  if (p.zero > 0 && p.shard_group > 0 && p.shard_group < p.dp) f.push_back("hsdp");
  if (p.offload != Offload::kNone) f.push_back(std::string("offload=") + to_string(p.offload));
  if (p.async_tp) f.push_back("async-tp");
  if (p.activation_offload != 0) f.push_back("activation-offload");
  return f;
}

namespace {
// What a feature means in a sentence.
std::string feature_words(const std::string& f) {
  if (f == "compile") return "torch.compile";
  if (f == "tp") return "tensor parallelism";
  if (f == "pp") return "pipeline parallelism";
  if (f == "cp") return "context parallelism";
  if (f == "ep") return "expert parallelism";
  if (f == "hsdp") return "HSDP (a shard group smaller than the data-parallel ranks)";
  if (f == "async-tp") return "async TP";
  if (f == "activation-offload") return "activation offload";
  if (f == "fp8-all-gather") return "float8 all-gather";
  const auto eq = f.find('=');
  if (eq == std::string::npos) return f;
  const std::string k = f.substr(0, eq), v = f.substr(eq + 1);
  if (k == "runtime") return "runtime " + v;
  if (k == "precision") return "precision " + v;
  if (k == "ac") return "AC " + v;
  if (k == "zero") return "ZeRO " + v;
  if (k == "fp8") return "float8 " + v;
  if (k == "offload") return "offload " + v;
  return f;
}

std::string regime_of(const std::string& runtime, bool mp, bool compile, const std::string& allocator) {
  return fmt::format("{}, {}, {}, {} segments", runtime, mp ? "TP/PP" : "no TP/PP",
                     compile ? "compiled" : "eager", allocator);
}

double normal_cdf(double z) {
  return 0.5 * std::erfc(-z / std::sqrt(2.0));
}
}  // namespace

const Evidence::Cell* Evidence::cell(const std::string& a, const std::string& feature) const {
  for (const Cell& c : coverage)
    if (c.arch == a && c.feature == feature) return &c;
  return nullptr;
}

const Evidence::Arch* Evidence::arch(const std::string& name) const {
  for (const Arch& a : archs)
    if (a.arch == name) return &a;
  return nullptr;
}

Evidence evidence_from(const ValidationReport& dev, const ValidationReport* lane) {
  Evidence e;
  std::map<std::string, const ValidationRecord*> rec;
  for (const auto& r : dev.records) rec[r.id] = &r;
  std::map<std::pair<std::string, std::string>, Evidence::Cell> cells;
  std::map<std::string, Evidence::Arch> archs;
  std::set<std::string> time_done, memory_done;  // one count per record and kind
  std::map<std::string, std::string> first_gpu;  // an architecture's GPU where no time row names one
  for (const ValidationRow& row : dev.rows) {
    const auto it = rec.find(row.id);
    if (it == rec.end()) continue;
    const ValidationRecord& r = *it->second;
    const bool memory = row.term.find("bytes") != std::string::npos;
    Evidence::Arch& a = archs[r.arch];
    a.arch = r.arch;
    first_gpu.emplace(r.arch, r.gpu);
    if (!memory && row.out_of_scope.empty() && time_done.insert(r.id).second) {
      ++a.time_records;
      for (const auto& f : plan_features(r.plan)) {
        auto& c = cells[{r.arch, f}];
        c.arch = r.arch, c.feature = f, ++c.time;
      }
      // The record's MFU in the simulator's FLOP count: its predicted MFU scaled by measured / predicted
      // speed.
      double mfu = 0;
      for (const ValidationRow& t : dev.rows)
        if (t.id == row.id && t.term == "tokens_per_s_per_gpu" && t.predicted > 0)
          mfu = r.predicted_mfu * t.measured / t.predicted;
      if (mfu == 0)
        for (const ValidationRow& t : dev.rows)
          if (t.id == row.id && t.term == "step_s" && t.measured > 0)
            mfu = r.predicted_mfu * t.predicted / t.measured;
      if (mfu > a.best_mfu) a.best_mfu = mfu, a.best_mfu_id = r.id, a.gpu = r.gpu;
    }
    if (!memory && !row.out_of_scope.empty() && time_done.insert(r.id + "|out").second) {
      ++a.out_of_scope_records;
      if (a.out_of_scope_reason.empty()) a.out_of_scope_reason = row.out_of_scope;
      if (a.gpu.empty()) a.gpu = r.gpu;
    }
    if (memory && row.out_of_scope.empty() && memory_done.insert(r.id).second)
      for (const auto& f : plan_features(r.plan)) {
        auto& c = cells[{"any", f}];
        c.arch = "any", c.feature = f, ++c.memory;
      }
    if (row.term == "peak_reserved_bytes" && row.out_of_scope.empty() && row.measured > 0)
      e.reserved.push_back({r.id, std::round(row.rel_error() * 1e6) / 1e6, to_string(r.plan.runtime),
                            r.plan.tp > 1 || r.plan.pp > 1, r.plan.compile, to_string(r.plan.allocator)});
  }
  if (lane) {
    std::set<std::string> seen;
    for (const auto& r : lane->records) {
      if (!seen.insert(r.id).second) continue;
      ++e.reference_records;
      for (const auto& f : r.features) ++e.reference_features[f];
      for (const auto& f : plan_features(r.plan)) {
        auto& c = cells[{"any", f}];
        c.arch = "any", c.feature = f, ++c.memory;
      }
    }
  }
  for (auto& [k, c] : cells) e.coverage.push_back(c);
  for (auto& [k, a] : archs) {
    a.best_mfu = std::round(a.best_mfu * 1e4) / 1e4;
    if (a.time_records > 0) a.out_of_scope_reason.clear();
    if (a.gpu.empty()) a.gpu = first_gpu[k];
    e.archs.push_back(a);
  }
  return e;
}

Json evidence_to_json(const Evidence& e) {
  Json reserved = Json::array(), coverage = Json::array(), archs = Json::array();
  for (const auto& r : e.reserved)
    reserved.push_back({{"id", r.id},
                        {"error", r.error},
                        {"runtime", r.runtime},
                        {"model_parallel", r.model_parallel},
                        {"compile", r.compile},
                        {"allocator", r.allocator}});
  for (const auto& c : e.coverage)
    coverage.push_back({{"arch", c.arch}, {"feature", c.feature}, {"time", c.time}, {"memory", c.memory}});
  for (const auto& a : e.archs)
    archs.push_back({{"arch", a.arch},
                     {"gpu", a.gpu},
                     {"time_records", a.time_records},
                     {"out_of_scope_records", a.out_of_scope_records},
                     {"best_mfu", a.best_mfu},
                     {"best_mfu_id", a.best_mfu_id},
                     {"out_of_scope_reason", a.out_of_scope_reason}});
  Json features = Json::object();
  for (const auto& [f, n] : e.reference_features) features[f] = n;
  return {{"schema", "shardplan.evidence/1"},
          {"generated_by",
           "tools/accuracy.sh: shardplan validate tests/data/runs/published_dev.json --reference-lane "
           "tools/reference/data/records.json --evidence planner/evidence.json; do not edit by hand"},
          {"reserved_memory_errors", reserved},
          {"coverage", coverage},
          {"archs", archs},
          {"reference_lane", {{"records", e.reference_records}, {"model_features", features}}}};
}

Evidence evidence_from_json(const Json& j, const std::string& file) {
  Evidence e;
  JsonObj o(j, file);
  if (o.str("schema") != "shardplan.evidence/1") o.fail("schema", "expected \"shardplan.evidence/1\"");
  o.str("generated_by");
  const Json& reserved = o.raw("reserved_memory_errors");
  for (std::size_t i = 0; i < reserved.size(); ++i) {
    JsonObj r(reserved[i], file, fmt::format("/reserved_memory_errors/{}", i));
    e.reserved.push_back({r.str("id"), r.number("error", -1, 10), r.str("runtime"),
                          r.boolean("model_parallel"), r.boolean("compile"), r.str("allocator")});
    r.finish();
  }
  const Json& coverage = o.raw("coverage");
  for (std::size_t i = 0; i < coverage.size(); ++i) {
    JsonObj c(coverage[i], file, fmt::format("/coverage/{}", i));
    e.coverage.push_back({c.str("arch"), c.str("feature"), static_cast<int>(c.integer("time", 0, 1 << 30)),
                          static_cast<int>(c.integer("memory", 0, 1 << 30))});
    c.finish();
  }
  const Json& archs = o.raw("archs");
  for (std::size_t i = 0; i < archs.size(); ++i) {
    JsonObj a(archs[i], file, fmt::format("/archs/{}", i));
    Evidence::Arch x;
    x.arch = a.str("arch");
    x.gpu = a.str("gpu");
    x.time_records = static_cast<int>(a.integer("time_records", 0, 1 << 30));
    x.out_of_scope_records = static_cast<int>(a.integer("out_of_scope_records", 0, 1 << 30));
    x.best_mfu = a.number("best_mfu", 0, 1);
    x.best_mfu_id = a.str("best_mfu_id");
    x.out_of_scope_reason = a.str("out_of_scope_reason");
    a.finish();
    e.archs.push_back(x);
  }
  JsonObj lane = o.object("reference_lane");
  e.reference_records = static_cast<int>(lane.integer("records", 0, 1 << 30));
  for (const auto& [f, n] : lane.raw("model_features").items()) e.reference_features[f] = n.get<int>();
  lane.finish();
  o.finish();
  return e;
}

const Evidence& builtin_evidence() {
  static const Evidence e = [] {
    const char* text = embedded_text(shardplan_generated::evidence_files(), "evidence", "evidence", "");
    return evidence_from_json(Json::parse(text), "planner/evidence.json");
  }();
  return e;
}

OomModel oom_model(const Evidence& e, const Plan& p, const std::string& exclude_id) {
  OomModel m;
  const std::string runtime = to_string(p.runtime), allocator = to_string(p.allocator);
  const bool mp = p.tp > 1 || p.pp > 1;
  m.regime = regime_of(runtime, mp, p.compile, allocator);
  std::vector<bool> in_regime;
  for (const auto& r : e.reserved) {
    if (r.id == exclude_id) continue;
    m.errors.push_back(r.error);
    const bool same =
        r.runtime == runtime && r.model_parallel == mp && r.compile == p.compile && r.allocator == allocator;
    in_regime.push_back(same);
    m.regime_runs += same;
  }
  const double n = static_cast<double>(m.errors.size()), k = m.regime_runs, w = kRegimePoolingRuns;
  m.runs = static_cast<int>(m.errors.size());
  if (m.errors.empty()) return m;
  for (std::size_t i = 0; i < m.errors.size(); ++i)
    m.weights.push_back((in_regime[i] ? 1.0 / (k + w) : 0.0) + (w / (k + w)) / n);
  // Silverman's rule over the pooled errors: 0.9 min(sd, IQR / 1.34) n^(-1/5).
  std::vector<double> s = m.errors;
  std::sort(s.begin(), s.end());
  double mean = 0, var = 0;
  for (double x : s) mean += x / n;
  for (double x : s) var += (x - mean) * (x - mean) / std::max(1.0, n - 1);
  auto quantile = [&](double q) {
    const double at = q * (n - 1);
    const auto lo = static_cast<std::size_t>(std::floor(at));
    const std::size_t hi = std::min(lo + 1, s.size() - 1);
    return s[lo] + (at - static_cast<double>(lo)) * (s[hi] - s[lo]);
  };
  const double iqr = quantile(0.75) - quantile(0.25);
  const double spread = iqr > 0 ? std::min(std::sqrt(var), iqr / 1.34) : std::sqrt(var);
  m.bandwidth = std::max(1e-4, 0.9 * spread * std::pow(n, -0.2));
  return m;
}

double oom_probability(const OomModel& m, double predicted_reserved, double room) {
  if (room <= 0) return 1.0;
  if (m.errors.empty()) return predicted_reserved > room ? 1.0 : 0.0;
  // The run needs measured = predicted / (1 + e) > room, i.e. e < predicted / room - 1.
  const double at = predicted_reserved / room - 1;
  double p = 0;
  for (std::size_t i = 0; i < m.errors.size(); ++i)
    p += m.weights[i] * normal_cdf((at - m.errors[i]) / m.bandwidth);
  return std::clamp(p, 0.0, 1.0);
}

double oom_error_quantile(const OomModel& m, double p) {
  double lo = -0.99, hi = 10;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    // CDF(mid) = oom_probability at predicted / room = 1 + mid.
    (oom_probability(m, 1 + mid, 1) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

double oom_probability(const Result& r, const Evidence& e) {
  return oom_probability(oom_model(e, r.plan), static_cast<double>(r.peak_reserved_bytes),
                         static_cast<double>(r.capacity_bytes - r.overhead.total()));
}

double risk_headroom(double p, const Evidence& e) {
  double h = 0;
  for (Runtime rt : {Runtime::kFsdp2, Runtime::kFsdp1, Runtime::kDeepSpeed, Runtime::kMegatron})
    for (bool mp : {false, true})
      for (bool compile : {false, true})
        for (AllocatorMode a : {AllocatorMode::kDefault, AllocatorMode::kExpandable}) {
          Plan q;
          q.runtime = rt, q.tp = mp ? 2 : 1, q.compile = compile, q.allocator = a;
          h = std::max(h, -oom_error_quantile(oom_model(e, q), p));
        }
  return h;
}

OomCalibration oom_calibration(const ValidationReport& dev, const Evidence& e) {
  OomCalibration c;
  std::map<std::string, const ValidationRecord*> rec;
  for (const auto& r : dev.records) rec[r.id] = &r;
  for (int b = 0; b < 10; ++b) c.levels.push_back({0.1 * b, 0.1 * (b + 1), 0, 0, 0});
  for (const auto& row : e.reserved) {
    const auto it = rec.find(row.id);
    if (it == rec.end()) continue;
    const OomModel m = oom_model(e, it->second->plan, row.id);
    for (int k = 0; k < 20; ++k) {
      const double p = 0.025 + 0.05 * k;
      // The run goes over the memory at which it has probability p iff its error is below the p-quantile.
      const bool oom = row.error < oom_error_quantile(m, p);
      auto& bin = c.levels[static_cast<std::size_t>(k / 2)];
      ++bin.cases, bin.oom += oom, bin.mean_p += p;
    }
  }
  for (auto& b : c.levels)
    if (b.cases) b.mean_p /= b.cases;
  std::set<std::string> reserved_ids;
  for (const auto& row : e.reserved) reserved_ids.insert(row.id);
  for (const auto& r : dev.records) {
    OomCalibration::Run run;
    run.id = r.id;
    run.measured_reserved = reserved_ids.count(r.id) > 0;
    run.memory_in_scope = r.scope_memory.empty();
    const OomModel m = oom_model(e, r.plan, run.measured_reserved ? r.id : "");
    run.p = oom_probability(m, static_cast<double>(r.predicted_reserved_bytes),
                            static_cast<double>(r.capacity_bytes - r.overhead_bytes));
    run.used_fraction = r.capacity_bytes > 0
                            ? static_cast<double>(r.predicted_reserved_bytes + r.overhead_bytes) /
                                  static_cast<double>(r.capacity_bytes)
                            : 0;
    c.runs.push_back(run);
  }
  const std::vector<double> edges = {0, 0.01, 0.05, 0.2, 0.5, 0.8, 1.0000001};
  for (std::size_t b = 0; b + 1 < edges.size(); ++b) {
    OomCalibration::Bin bin{edges[b], std::min(1.0, edges[b + 1]), 0, 0, 0};
    for (const auto& run : c.runs)
      if (run.p >= edges[b] && run.p < edges[b + 1]) ++bin.cases, bin.oom += run.oom, bin.mean_p += run.p;
    if (bin.cases) bin.mean_p /= bin.cases;
    c.actual.push_back(bin);
  }
  return c;
}

std::vector<std::string> evidence_warnings(const Result& r, const ModelSpec& model,
                                           const ClusterSpec& cluster, const Evidence& e) {
  std::vector<std::string> w;
  const std::string arch = to_string(cluster.gpu.arch);
  const Evidence::Arch* a = e.arch(arch);
  const auto features = plan_features(r.plan);
  if (!a || a->time_records == 0) {
    w.push_back(fmt::format(
        "time: no measured run on {} GPUs ({}) is in the model's scope{}: step time, tokens/s and MFU are "
        "the datasheet model's, unchecked",
        arch, cluster.gpu.model,
        a && !a->out_of_scope_reason.empty()
            ? fmt::format(" ({} out of scope: {})", a->out_of_scope_records, a->out_of_scope_reason)
            : ""));
  } else {
    std::vector<std::string> missing;
    for (const auto& f : features) {
      const Evidence::Cell* c = e.cell(arch, f);
      if (!c || c->time == 0) missing.push_back(feature_words(f));
    }
    if (!missing.empty()) {
      std::string list;
      for (std::size_t i = 0; i < missing.size(); ++i) list += (i ? ", " : "") + missing[i];
      w.push_back(fmt::format(
          "time: no measured run on {} GPUs with {} (docs/accuracy.md \"Coverage\"): the time prediction "
          "of this combination is unchecked",
          arch, list));
    }
    if (r.mfu > a->best_mfu && a->best_mfu > 0)
      w.push_back(fmt::format(
          "time: predicted MFU {:.1f} % is above the best measured on {} GPUs ({:.1f} %, {}): treat the "
          "speed as an upper bound",
          100 * r.mfu, arch, 100 * a->best_mfu, a->best_mfu_id));
  }
  std::vector<std::string> missing;
  for (const auto& f : features) {
    const Evidence::Cell* c = e.cell("any", f);
    if (!c || c->memory == 0) missing.push_back(feature_words(f));
  }
  if (!missing.empty()) {
    std::string list;
    for (std::size_t i = 0; i < missing.size(); ++i) list += (i ? ", " : "") + missing[i];
    w.push_back(fmt::format(
        "memory: no measured run and no reference-lane configuration with {}: the memory prediction of this "
        "combination is unchecked",
        list));
  }
  std::vector<std::string> unchecked;
  for (const auto& f : model_features(model)) {
    const auto it = e.reference_features.find(f);
    if (it == e.reference_features.end() || it->second == 0) unchecked.push_back(f);
  }
  if (!unchecked.empty()) {
    std::string list;
    for (std::size_t i = 0; i < unchecked.size(); ++i) list += (i ? ", " : "") + unchecked[i];
    w.push_back(fmt::format(
        "memory: the reference lane (the real PyTorch step, docs/reference-lane.md) has never run a model "
        "with {} ({}): its saved tensors are unchecked",
        list, model.name));
  }
  // A node without NVSwitch (dgx-v100-32g: the DGX-1's NVLink hybrid cube-mesh; AMD's Infinity Fabric full
  // mesh) is modelled as if every GPU reached the others at its full link bandwidth; a group that takes
  // 2 .. G-1 of the node's G GPUs runs over the links between its members only: its collectives are
  // optimistic. Without NVLink at all (l40s-pcie) NCCL runs P2P over PCIe (its PCI_BW, src/graph/topo.h) or
  // through the CPUs across sockets; the model takes one PCIe figure per GPU for every pair.
  const int G = cluster.node.gpus;
  const bool pcie_only = cluster.node.nvlink_Bps <= 0;
  if (pcie_only && G > 1 && static_cast<std::int64_t>(r.plan.dp_cp()) * r.plan.tp * r.plan.pp > 1)
    w.push_back(fmt::format(
        "time: {} has no NVLink: collectives run over PCIe ({:.0f} GB/s per direction per GPU), with no "
        "LL128 and no NVLS; the path across CPU sockets is not modelled apart, so its communication time "
        "is unchecked",
        cluster.name, cluster.node.pcie_Bps / 1e9));
  if (!pcie_only && !cluster.node.nvswitch && G > 2) {
    const Plan& p = r.plan;
    const char* mesh = is_amd(cluster.gpu.arch) ? "Infinity Fabric mesh" : "NVLink mesh";
    auto in_node = [&](int size, int stride) { return std::min(size, std::max(1, G / stride)); };
    for (const auto& [what, k] : {std::pair{"tensor-parallel", in_node(p.tp, 1)},
                                  std::pair{"data-parallel", in_node(p.dp_cp(), p.tp)},
                                  std::pair{"shard", in_node(p.fsdp_ranks(), p.tp)}})
      if (k > 1 && k < G) {
        w.push_back(fmt::format(
            "time: the {} group takes {} of a node's {} GPUs, which {} links without a switch ({}): it is "
            "modelled at the full per-GPU link bandwidth, so its communication time is optimistic",
            what, k, G, cluster.name, mesh));
        break;
      }
  }
  // AMD Instinct (ROCm): RCCL, NCCL's fork, with its own tuning model (rccl src/graph/tuning.cc) over the
  // Infinity Fabric mesh; the collectives here follow NCCL's tables.
  if (is_amd(cluster.gpu.arch))
    w.push_back(fmt::format(
        "time: {} GPUs communicate through RCCL over an Infinity Fabric mesh; the collectives are modelled "
        "with NCCL's tuning tables over a switch of the mesh's total link bandwidth, unchecked against RCCL",
        cluster.gpu.model));
  const OomModel m = oom_model(e, r.plan);
  if (m.regime_runs == 0)
    w.push_back(fmt::format(
        "memory: no measured reserved memory in this regime ({}); the OOM probability uses the {} measured "
        "runs of other regimes",
        m.regime, m.runs));
  return w;
}

}  // namespace shardplan
