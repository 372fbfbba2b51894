// Validation of predictions against measured runs: run records (and torchtitan training logs they point to)
// are simulated with the same code path as `simulate`, and each measured term is compared.
#include "planner/validate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <regex>
#include <sstream>

#include "core/embedded.hpp"
#include "planner/report/evidence.hpp"
#include "simulator/model/model.hpp"
#include "simulator/plan/plan.hpp"

namespace shardplan {

namespace {

struct Measured {
  std::vector<std::pair<std::string, double>> terms;
};

// torchtitan log lines: "step: 10  loss:  7.93  memory: 37.12GiB(39.08%)  tps: 5,802  tflops: 338.0
// mfu: 34.17%"
Measured parse_torchtitan_log(const std::string& path, int warmup_steps) {
  std::ifstream in(path);
  if (!in) throw InputError(path, "", "cannot open torchtitan log");
  static const std::regex step_re(R"(step:\s*(\d+))"), mem_re(R"(memory:\s*([0-9.]+)\s*GiB)"),
      tps_re(R"(tps:\s*([0-9,]+))"), mfu_re(R"(mfu:\s*([0-9.]+)\s*%)");
  std::vector<double> tps, mfu;
  double mem_gib = 0;
  std::string line;
  int lineno = 0, steps = 0;
  while (std::getline(in, line)) {
    ++lineno;
    std::smatch m;
    if (!std::regex_search(line, m, step_re)) continue;
    const int step = std::stoi(m[1]);
    if (std::regex_search(line, m, mem_re)) mem_gib = std::max(mem_gib, std::stod(m[1]));
    if (step <= warmup_steps) continue;
    if (std::regex_search(line, m, tps_re)) {
      std::string v = m[1];
      v.erase(std::remove(v.begin(), v.end(), ','), v.end());
      tps.push_back(std::stod(v));
    }
    if (std::regex_search(line, m, mfu_re)) mfu.push_back(std::stod(m[1]) / 100);
    ++steps;
  }
  if (steps == 0 && mem_gib == 0)
    throw InputError(path, fmt::format("line {}", lineno),
                     "no torchtitan step lines (\"step: N ... tps: ...\") found");
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  Measured out;
  // torchtitan's "memory" is torch.cuda.max_memory_reserved in GiB (its device memory monitor).
  if (mem_gib > 0) out.terms.push_back({"peak_reserved_bytes", mem_gib * static_cast<double>(kGiB)});
  if (!tps.empty()) out.terms.push_back({"tokens_per_s_per_gpu", median(tps)});
  if (!mfu.empty()) out.terms.push_back({"mfu", median(mfu)});
  return out;
}

const std::vector<std::string>& known_terms() {
  static const std::vector<std::string> t = {"peak_allocated_bytes",
                                             "peak_active_bytes",
                                             "peak_reserved_bytes",
                                             "peak_device_bytes",
                                             "step_s",
                                             "tokens_per_s_per_gpu",
                                             "mfu"};
  return t;
}

using ConstantsFn = std::function<ComputeConstants(GpuArch)>;

void validate_record(const Json& rec, const std::string& file, const std::string& where,
                     const CalibrationHooks* hooks, const ConstantsFn* constants, ValidationReport& out,
                     std::string& bad_rank) {
  JsonObj o(rec, file, where);
  std::string id = o.str("id", where);
  if (o.has("schema") && o.str("schema") != "shardplan.run/1")
    o.fail("schema", "expected \"shardplan.run/1\"");
  o.allow({"notes", "environment", "details"});
  std::string scope_time, scope_memory;
  if (auto sc = o.optional_object("out_of_scope")) {
    if (sc->has("throughput")) scope_time = sc->str("throughput");
    if (sc->has("memory")) scope_memory = sc->str("memory");
    sc->finish();
  }
  std::string source =
      o.has("source") ? (o.raw("source").is_string() ? o.str("source") : o.raw("source").dump()) : "";
  if (source.size() > 120) source = fmt::format("{}...", source.substr(0, 117));
  // A model or cluster named by a relative path is the record file's neighbour, wherever validate runs from
  // (as measured.torchtitan_log below); a preset name stays a name.
  auto beside_record = [&file](const std::string& name) {
    if (!looks_like_path(name) || name.empty() || name[0] == '/') return name;
    const auto slash = file.find_last_of('/');
    return slash == std::string::npos ? name : file.substr(0, slash + 1) + name;
  };
  const Json& mj = o.raw("model");
  ModelGraph model = mj.is_string() ? load_model(beside_record(mj.get<std::string>()))
                                    : load_model_json(mj, file, o.pointer("model"));
  const Json& cj = o.raw("cluster");
  ClusterSpec cspec = cj.is_string() ? load_cluster_spec(beside_record(cj.get<std::string>()))
                                     : load_cluster_json(cj, file, o.pointer("cluster"));
  const int gpus = static_cast<int>(o.integer("gpus", 1, 1 << 24));
  Plan plan = plan_from_json(o.object("plan"));
  Measured meas;
  int pp_rank = -1;
  if (auto m = o.optional_object("measured")) {
    m->allow({"source", "notes", "peak_memory_kind"});
    // A pipeline-parallel measurement of one pipeline rank (the reference lane's --pp-rank): its memory terms
    // are compared with that rank's peak, not the busiest rank's.
    if (m->raw_optional("pp_rank")) pp_rank = static_cast<int>(m->integer("pp_rank", 0, 0, 4096));
    // Every term is a valid key (an unknown key's message lists them all), present or not.
    for (const auto& t : known_terms())
      if (m->raw_optional(t)) meas.terms.push_back({t, m->number(t, 0.0, 1e18)});
    if (auto log = m->raw_optional("torchtitan_log")) {
      std::string path = json_string(*log, file, m->pointer("torchtitan_log"));
      if (!path.empty() && path[0] != '/') {
        auto slash = file.find_last_of('/');
        if (slash != std::string::npos) path = file.substr(0, slash + 1) + path;
      }
      Measured lm = parse_torchtitan_log(path, static_cast<int>(m->integer("warmup_steps", 3, 0, 1000000)));
      meas.terms.insert(meas.terms.end(), lm.terms.begin(), lm.terms.end());
    } else {
      m->raw_optional("warmup_steps");
    }
    m->finish();
  } else {
    o.fail("measured", "a run record needs measured values");
  }
  o.finish();
  try {
    Cluster cluster(std::move(cspec), gpus);
    Plan p = resolve_plan(plan, model, cluster);
    std::optional<ComputeConstants> k;
    if (constants) k = (*constants)(cluster.spec().gpu.arch);
    CostModel costs(cluster, k, hooks ? *hooks : CalibrationHooks{});
    const ModelGraph run_model = lora_model(model, p);  // LoRA: frozen base and adapters
    Simulator sim(run_model, cluster, costs);
    const Result& r = sim.run(p);
    ValidationRecord vr;
    vr.id = id;
    vr.group = fmt::format("{} | {} | {} | {}", source, mj.dump(), cj.dump(), gpus);
    for (const Knob& k : plan_knobs()) vr.knobs.push_back(k.get(p));
    vr.plan = p;
    vr.gpu = cluster.spec().gpu.model;
    vr.arch = to_string(cluster.spec().gpu.arch);
    vr.features = model_features(model.spec());
    vr.predicted_reserved_bytes = r.peak_reserved_bytes;
    vr.overhead_bytes = r.overhead.total();
    vr.capacity_bytes = r.capacity_bytes;
    vr.predicted_mfu = r.mfu;
    vr.predicted_tokens_per_s = r.tokens_per_s_per_gpu;
    vr.scope_time = scope_time;
    vr.scope_memory = scope_memory;
    vr.file = file;
    out.records.push_back(std::move(vr));
    if (pp_rank >= p.pp) {
      bad_rank = fmt::format("{} is not a rank of pp {}", pp_rank, p.pp);
      return;
    }
    for (const auto& [term, value] : meas.terms) {
      const bool memory_term = term.find("bytes") != std::string::npos;
      double predicted = predicted_term(term, r);
      if (pp_rank >= 0 && term == "peak_allocated_bytes" && r.pipeline)
        for (const PipelineStage& d : r.pipeline->stage_detail)
          if (d.rank == pp_rank) predicted = static_cast<double>(d.peak_bytes);
      out.rows.push_back({id, source, term, predicted, value, memory_term ? scope_memory : scope_time});
    }
  } catch (const InputError& e) {
    out.skipped.push_back({id, fmt::format("not expressible: {}", e.what())});
  }
}

void validate_record(const Json& rec, const std::string& file, const std::string& where,
                     const CalibrationHooks* hooks, const ConstantsFn* constants, ValidationReport& out) {
  std::string bad_rank;
  validate_record(rec, file, where, hooks, constants, out, bad_rank);
  if (!bad_rank.empty()) throw InputError(file, where + "/measured/pp_rank", bad_rank);
}

}  // namespace

double predicted_term(const std::string& term, const Result& r) {
  if (term == "peak_allocated_bytes" || term == "peak_active_bytes") return static_cast<double>(r.peak_bytes);
  // A measured max_memory_reserved cannot exceed what the device has: when the cache reaches it, the caching
  // allocator frees its cached blocks and retries (the run goes on if the allocated peak fits). So the
  // prediction compared with a measurement is the demand capped at the device's memory.
  const Bytes device_cap = std::max(r.capacity_bytes - r.overhead.total(), r.peak_bytes);
  if (term == "peak_reserved_bytes") return static_cast<double>(std::min(r.peak_reserved_bytes, device_cap));
  if (term == "peak_device_bytes")
    return static_cast<double>(std::min(r.peak_reserved_bytes, device_cap) + r.overhead.total());
  if (term == "step_s") return r.step_s;
  if (term == "tokens_per_s_per_gpu") return r.tokens_per_s_per_gpu;
  if (term == "mfu") return r.mfu;
  return 0;
}

namespace {
std::vector<ValidationReport::Summary> summarise(const std::vector<ValidationRow>& rows, bool all) {
  std::vector<ValidationReport::Summary> out;
  for (const auto& term : known_terms()) {
    std::vector<double> e;
    for (const auto& r : rows)
      if (r.term == term && (all || r.out_of_scope.empty())) e.push_back(std::abs(r.rel_error()));
    if (e.empty()) continue;
    std::sort(e.begin(), e.end());
    ValidationReport::Summary s;
    s.term = term;
    s.n = static_cast<int>(e.size());
    s.median_abs = e.size() % 2 ? e[e.size() / 2] : 0.5 * (e[e.size() / 2 - 1] + e[e.size() / 2]);
    for (double x : e) s.mape += x;
    s.mape /= static_cast<double>(e.size());
    s.worst_abs = e.back();
    out.push_back(s);
  }
  return out;
}
}  // namespace

std::vector<ValidationReport::Summary> ValidationReport::summary() const {
  return summarise(rows, false);
}
std::vector<ValidationReport::Summary> ValidationReport::summary_all() const {
  return summarise(rows, true);
}

std::vector<ValidationReport::Summary> ValidationReport::summary_by_source(const std::string& term) const {
  std::vector<std::string> sources;
  for (const auto& r : rows)
    if (r.term == term && r.out_of_scope.empty() &&
        std::find(sources.begin(), sources.end(), r.source) == sources.end())
      sources.push_back(r.source);
  std::vector<Summary> out;
  for (const auto& src : sources) {
    ValidationReport sub;
    for (const auto& r : rows)
      if (r.term == term && r.source == src) sub.rows.push_back(r);
    auto s = sub.summary();
    if (!s.empty()) {
      s[0].term = src;
      out.push_back(s[0]);
    }
  }
  return out;
}

bool KnobPair::direction_right() const {
  if (std::abs(predicted_change) < kFlatChange && std::abs(measured_change) < kFlatChange) return true;
  return (predicted_change > 0) == (measured_change > 0) && predicted_change != 0 && measured_change != 0;
}

std::vector<KnobPair> ValidationReport::knob_pairs() const {
  std::vector<KnobPair> out;
  const auto& knobs = plan_knobs();
  auto find_row = [&](const std::string& id, const std::string& term) -> const ValidationRow* {
    for (const auto& r : rows)
      if (r.id == id && r.term == term && r.out_of_scope.empty()) return &r;
    return nullptr;
  };
  for (std::size_t i = 0; i < records.size(); ++i) {
    for (std::size_t j = i + 1; j < records.size(); ++j) {
      const ValidationRecord& a = records[i];
      const ValidationRecord& b = records[j];
      if (a.group != b.group || a.knobs.size() != b.knobs.size()) continue;
      int differ = -1, n_differ = 0;
      for (std::size_t k = 0; k < a.knobs.size(); ++k)
        if (a.knobs[k] != b.knobs[k]) differ = static_cast<int>(k), ++n_differ;
      if (n_differ != 1) continue;
      const auto d = static_cast<std::size_t>(differ);
      auto add = [&](const std::string& term) {
        const ValidationRow* ra = find_row(a.id, term);
        const ValidationRow* rb = find_row(b.id, term);
        if (!ra || !rb || ra->predicted <= 0 || ra->measured <= 0) return false;
        out.push_back({knobs[d].key, a.knobs[d], b.knobs[d], a.id, b.id, term,
                       rb->predicted / ra->predicted - 1, rb->measured / ra->measured - 1});
        return true;
      };
      if (!add("tokens_per_s_per_gpu")) add("step_s");
      for (const char* term :
           {"peak_allocated_bytes", "peak_active_bytes", "peak_reserved_bytes", "peak_device_bytes"})
        add(term);
    }
  }
  return out;
}

ValidationReport validate_files(const std::vector<std::string>& files, const CalibrationHooks* hooks,
                                const ConstantsFn* constants) {
  ValidationReport out;
  for (const auto& f : files) {
    Json j = load_json_file(f);
    if (j.is_array()) {
      for (std::size_t i = 0; i < j.size(); ++i)
        validate_record(j[i], f, fmt::format("/{}", i), hooks, constants, out);
    } else if (j.is_object() && j.contains("records")) {
      JsonObj o(j, f);
      o.allow({"skipped", "source", "notes", "description"});
      if (o.has("schema") && o.str("schema") != "shardplan.runs/1")
        o.fail("schema", "expected \"shardplan.runs/1\"");
      const Json& recs = o.raw("records");
      if (!recs.is_array()) o.fail("records", "expected an array of run records");
      o.finish();
      for (std::size_t i = 0; i < recs.size(); ++i)
        validate_record(recs[i], f, fmt::format("/records/{}", i), hooks, constants, out);
    } else {
      validate_record(j, f, "", hooks, constants, out);
    }
  }
  return out;
}

}  // namespace shardplan
