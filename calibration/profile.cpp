// CalibrationProfile: strict JSON reading/writing, derived fits, and the queries the cost model uses.
#include "calibration/profile.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ctime>

#include "core/atomic_file.hpp"
#include "core/json_reader.hpp"
#include "core/units.hpp"

#ifndef SHARDPLAN_VERSION
#define SHARDPLAN_VERSION "unknown"
#endif

namespace shardplan {

using calibration::SizeTime;

const char* shardplan_version() {
  return SHARDPLAN_VERSION;
}

std::string utc_now_iso8601() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// ---------------------------------------------------------------- fits

std::optional<double> CollectiveSeries::busbw_Bps() const {
  const double factor = busbw_factor(kind, ranks);
  if (factor <= 0 || alpha_beta.per_byte_s <= 0) return std::nullopt;
  return factor / alpha_beta.per_byte_s;
}

void refit(CollectiveSeries& s) {
  std::vector<SizeTime> pts;
  for (const auto& x : s.samples) pts.push_back({static_cast<double>(x.bytes), x.time_s});
  pts = calibration::clean_points(std::move(pts));
  s.alpha_beta = calibration::fit_alpha_beta(pts);
  s.curve = calibration::LogLogCurve::fit(pts);
}

static bool same_key(const CollectiveSeries& a, const CollectiveSeries& b) {
  return a.kind == b.kind && a.ranks == b.ranks && a.nodes == b.nodes && a.dtype == b.dtype &&
         a.placement == b.placement;
}

CalibrationProfile::CalibrationProfile() : tool_version(SHARDPLAN_VERSION), created(utc_now_iso8601()) {}

void CalibrationProfile::add_collective_samples(const CollectiveSeries& series) {
  for (auto& s : collectives_) {
    if (!same_key(s, series)) continue;
    s.samples.insert(s.samples.end(), series.samples.begin(), series.samples.end());
    if (s.source.find(series.source) == std::string::npos)
      s.source += (s.source.empty() ? "" : "; ") + series.source;
    refit(s);
    return;
  }
  collectives_.push_back(series);
  refit(collectives_.back());
}

void CalibrationProfile::replace_collective_series(const CollectiveSeries& series) {
  std::erase_if(collectives_, [&](const CollectiveSeries& s) { return same_key(s, series); });
  collectives_.push_back(series);
  refit(collectives_.back());
}

void CalibrationProfile::set_gemm_peak(double flops_per_s, std::string source) {
  gemm_peak_flops_ = flops_per_s;
  gemm_peak_source_ = std::move(source);
}

void CalibrationProfile::add_adamw_sample(std::string_view layout, const AdamwSample& s) {
  adamw_[std::string(layout)].push_back(s);
}

void CalibrationProfile::mark_completed(const std::string& id) {
  if (!is_completed(id)) completed_.push_back(id);
}

bool CalibrationProfile::is_completed(const std::string& id) const {
  return std::find(completed_.begin(), completed_.end(), id) != completed_.end();
}

// ---------------------------------------------------------------- queries

static int dtype_rank(const std::string& d) {
  static const char* order[] = {"bfloat16", "half", "float"};
  for (int i = 0; i < 3; ++i)
    if (d == order[i]) return i;
  return 3;
}

/// The series answering for (kind, ranks, nodes): out-of-place first, then bf16 > half > float > others.
static const CollectiveSeries* best_series(const std::vector<CollectiveSeries>& all, CollectiveKind kind,
                                           int ranks, int nodes) {
  const CollectiveSeries* best = nullptr;
  auto better = [](const CollectiveSeries& a, const CollectiveSeries& b) {
    const bool ao = a.placement == "out_of_place", bo = b.placement == "out_of_place";
    if (ao != bo) return ao;
    if (dtype_rank(a.dtype) != dtype_rank(b.dtype)) return dtype_rank(a.dtype) < dtype_rank(b.dtype);
    return a.dtype < b.dtype;
  };
  for (const auto& s : all) {
    if (s.kind != kind || s.ranks != ranks || s.nodes != nodes || s.alpha_beta.points == 0) continue;
    if (!best || better(s, *best)) best = &s;
  }
  return best;
}

/// Latency steps of the ring algorithm (docs/mechanics.md §4.4, NCCL tuning.cc): AR 2(n-1), AG/RS n-1,
/// broadcast/reduce n (NCCL counts nRanks steps for them); all-to-all has no ring in NCCL: n-1 is our choice
/// (one step per peer).
static double ring_steps(CollectiveKind kind, int n) {
  if (kind == CollectiveKind::kSendRecv) return 1;
  const double s = n - 1.0;
  if (kind == CollectiveKind::kBroadcast || kind == CollectiveKind::kReduce) return n;
  return kind == CollectiveKind::kAllReduce ? 2 * s : s;
}

std::optional<CollectiveEstimate> CalibrationProfile::collective_time(CollectiveKind kind,
                                                                      std::int64_t buffer_bytes, int ranks,
                                                                      int nodes) const {
  if (buffer_bytes < 0 || ranks < 1 || nodes < 1) return std::nullopt;
  const double S = static_cast<double>(buffer_bytes);
  if (const auto* same = best_series(collectives_, kind, ranks, nodes)) {
    if (auto t = same->curve.time_s(S))
      return CollectiveEstimate{*t, CollectiveEstimate::Source::kMeasuredCurve, ""};
    return CollectiveEstimate{same->alpha_beta.time_s(S), CollectiveEstimate::Source::kFittedAlphaBeta, ""};
  }
  // Another rank count with the same span (within one node, or across nodes): one best series per (ranks,
  // nodes).
  const bool multi_node = nodes > 1;
  std::vector<const CollectiveSeries*> refs;
  for (const auto& s : collectives_) {
    if (s.kind != kind || (s.nodes > 1) != multi_node || s.ranks < 2 || !s.busbw_Bps()) continue;
    const auto* b = best_series(collectives_, kind, s.ranks, s.nodes);
    if (b == &s) refs.push_back(b);
  }
  if (refs.empty()) return std::nullopt;
  // busbw is (to first order) independent of n (nccl-tests PERFORMANCE.md): take it from the nearest rank
  // count.
  const auto* nearest = *std::min_element(refs.begin(), refs.end(), [&](const auto* a, const auto* b) {
    const double da = std::fabs(std::log(static_cast<double>(a->ranks) / ranks));
    const double db = std::fabs(std::log(static_cast<double>(b->ranks) / ranks));
    return da != db ? da < db : a->ranks > b->ranks;
  });
  // alpha(n): with two or more rank counts, least squares alpha = a + b * steps(n) (a, b >= 0); with one,
  // scale the reference alpha by the ratio of ring steps.
  double alpha = 0;
  std::vector<std::pair<double, double>> sa;  // (steps, alpha)
  for (const auto* r : refs) sa.emplace_back(ring_steps(kind, r->ranks), r->alpha_beta.alpha_s);
  const double steps_n = ring_steps(kind, ranks);
  bool distinct = false;
  for (const auto& p : sa) distinct |= p.first != sa.front().first;
  if (distinct) {
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    const double m = static_cast<double>(sa.size());
    for (const auto& [x, y] : sa) sx += x, sy += y, sxx += x * x, sxy += x * y;
    double b = (m * sxy - sx * sy) / (m * sxx - sx * sx);
    double a = (sy - b * sx) / m;
    if (b < 0) b = 0, a = sy / m;
    if (a < 0) a = 0, b = sxy / sxx;
    alpha = a + b * steps_n;
  } else {
    const double steps_ref = ring_steps(kind, nearest->ranks);
    alpha = steps_ref > 0 ? nearest->alpha_beta.alpha_s * steps_n / steps_ref : nearest->alpha_beta.alpha_s;
  }
  const double t = alpha + S * busbw_factor(kind, ranks) / *nearest->busbw_Bps();
  return CollectiveEstimate{t, CollectiveEstimate::Source::kFittedAlphaBeta, ""};
}

const char* to_string(CollectiveEstimate::Source s) {
  switch (s) {
    case CollectiveEstimate::Source::kMeasuredCurve:
      return "measured curve";
    case CollectiveEstimate::Source::kFittedAlphaBeta:
      return "alpha-beta";
    case CollectiveEstimate::Source::kScaledCurve:
      return "scaled curve";
  }
  return "measured curve";
}

namespace {
/// A series' placement on the queried cluster: its hosts grouped into NVLink domains of hosts_per_domain.
struct SeriesPlacement {
  int domains = 1, ranks_per_domain = 1, ranks_per_host = 1;
};
SeriesPlacement placement_of(const CollectiveSeries& s, int hosts_per_domain) {
  SeriesPlacement p;
  const int hosts = std::max(1, s.nodes);
  p.domains = (hosts + hosts_per_domain - 1) / hosts_per_domain;
  p.ranks_per_domain = (s.ranks + p.domains - 1) / p.domains;
  p.ranks_per_host = (s.ranks + hosts - 1) / hosts;
  return p;
}
}  // namespace

std::optional<CollectiveEstimate> CalibrationProfile::collective_time(CollectiveKind kind,
                                                                      std::int64_t buffer_bytes,
                                                                      const CollectivePlacement& q,
                                                                      const CollectiveShape& model,
                                                                      std::string* why) const {
  auto fail = [&](std::string reason) -> std::optional<CollectiveEstimate> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  if (buffer_bytes <= 0 || q.ranks < 2) return fail("nothing to move (one rank or an empty buffer)");
  if (!model) return collective_time(kind, buffer_bytes, q.ranks, q.hosts);
  const int hpd = std::max(1, q.hosts_per_domain);
  const int q_per_host = (q.ranks + std::max(1, q.hosts) - 1) / std::max(1, q.hosts);
  const double S = static_cast<double>(buffer_bytes);
  // Candidates: same collective, a usable curve, the same ranks per host and per domain shape.
  const CollectiveSeries* exact = nullptr;
  const CollectiveSeries* nearest = nullptr;
  std::string seen;
  for (const auto& s : collectives_) {
    if (s.kind != kind || s.curve.empty()) continue;
    const auto* b = best_series(collectives_, kind, s.ranks, s.nodes);
    if (b != &s) continue;
    const SeriesPlacement sp = placement_of(s, hpd);
    seen += fmt::format("{}{} ranks on {} host{} ({} NVLink domain{})", seen.empty() ? "" : ", ", s.ranks,
                        s.nodes, s.nodes > 1 ? "s" : "", sp.domains, sp.domains > 1 ? "s" : "");
    // Same shape: ranks per host, and one NVLink domain or several (the model carries the rest of the shape).
    if (sp.ranks_per_host != q_per_host || (sp.domains > 1) != (q.domains > 1)) continue;
    if (s.ranks == q.ranks && s.nodes == q.hosts && sp.domains == q.domains) exact = &s;
    auto dist = [&](const CollectiveSeries* x) { return std::fabs(std::log(double(x->ranks) / q.ranks)); };
    if (!nearest || dist(&s) < dist(nearest) || (dist(&s) == dist(nearest) && s.ranks > nearest->ranks))
      nearest = &s;
  }
  const CollectiveSeries* use = exact ? exact : nearest;
  if (!use)
    return fail(fmt::format(
        "the profile measured {} on {}; none {} with {} rank{} per host like the query ({} ranks, "
        "{} host{}, {} NVLink domain{})",
        collective_name(kind), seen.empty() ? "no placement" : seen,
        q.domains > 1 ? "spans several NVLink domains" : "fits in one NVLink domain", q_per_host,
        q_per_host > 1 ? "s" : "", q.ranks, q.hosts, q.hosts > 1 ? "s" : "", q.domains,
        q.domains > 1 ? "s" : ""));
  const std::string what = fmt::format("{} {} ranks on {} host{} ({})", collective_name(use->kind),
                                       use->ranks, use->nodes, use->nodes > 1 ? "s" : "", use->source);
  if (use == exact) {
    if (auto t = use->curve.time_s(S))
      return CollectiveEstimate{*t, CollectiveEstimate::Source::kMeasuredCurve, "measured curve of " + what};
  }
  // The model's shape, scaled by measured / model at the nearest measured size of the series.
  const double Sc = std::clamp(S, use->curve.min_bytes(), use->curve.max_bytes());
  const double measured = *use->curve.time_s(Sc);
  const double modelled = model(use->ranks, Sc);
  if (!(modelled > 0)) return fail("the analytic model has no time for the measured placement");
  const double t = model(q.ranks, S) * measured / modelled;
  return CollectiveEstimate{
      t, CollectiveEstimate::Source::kScaledCurve,
      fmt::format("model shape scaled by {:.3f} to the measured curve of {} at {} bytes", measured / modelled,
                  what, static_cast<std::int64_t>(Sc))};
}

std::optional<double> CalibrationProfile::gemm_peak_flops() const {
  return gemm_peak_flops_;
}

std::optional<double> CalibrationProfile::gemm_efficiency(std::int64_t m, std::int64_t n,
                                                          std::int64_t k) const {
  if (!gemm_peak_flops_ || *gemm_peak_flops_ <= 0 || m < 1 || n < 1 || k < 1) return std::nullopt;
  const GemmSample* best = nullptr;
  double best_d = INFINITY;
  for (const auto& s : gemm_) {
    if (s.dtype != "bf16" || s.flops_per_s <= 0) continue;
    const double d = std::pow(std::log(double(s.m) / m), 2) + std::pow(std::log(double(s.n) / n), 2) +
                     std::pow(std::log(double(s.k) / k), 2);
    if (d < best_d) best_d = d, best = &s;
  }
  if (!best) return std::nullopt;
  return best->flops_per_s / *gemm_peak_flops_;
}

std::optional<double> CalibrationProfile::hbm_Bps() const {
  std::optional<double> best;
  for (const auto& s : hbm_)
    if (s.time_s > 0) best = std::max(best.value_or(0.0), static_cast<double>(s.bytes) / s.time_s);
  return best;
}

std::optional<double> CalibrationProfile::adamw_Bps(std::string_view layout) const {
  auto it = adamw_.find(std::string(layout));
  if (it == adamw_.end() || it->second.empty()) return std::nullopt;
  const auto& v = it->second;
  const auto& largest =
      *std::max_element(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.params < b.params; });
  if (largest.time_s <= 0) return std::nullopt;
  return static_cast<double>(largest.bytes) / largest.time_s;
}

static std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return u == 0 ? fmt::format("{:.0f} B", b) : fmt::format("{:.4g} {}", b, units[u]);
}

std::string CalibrationProfile::describe() const {
  std::string out = fmt::format("calibration profile ({}), {} {}, created {}\n", kCalibrationSchema,
                                tool_name, tool_version, created);
  if (!source.empty()) out += fmt::format("source: {}\n", source);
  const auto& h = hardware_;
  std::string gpus;
  for (const auto& g : h.gpus) gpus += fmt::format("{}{} x {}", gpus.empty() ? "" : ", ", g.count, g.name);
  out += fmt::format(
      "hardware: {} GPU(s) [{}], {} node(s); driver {}, CUDA {}, NCCL {}\n", h.gpu_count,
      gpus.empty() ? "unknown" : gpus, h.nodes, h.driver_version.empty() ? "?" : h.driver_version,
      h.cuda_version.empty() ? "?" : h.cuda_version, h.nccl_version.empty() ? "?" : h.nccl_version);
  for (const auto& [k, v] : h.env) out += fmt::format("  {}={}\n", k, v);
  if (!collectives_.empty())
    out += "collectives (alpha-beta fit and log-log curve; residual = max |model/measured-1|):\n";
  for (const auto& s : collectives_) {
    const auto bw = s.busbw_Bps();
    out += fmt::format(
        "  {:<14} ranks {:>4} nodes {:>3} {:<8} {:<12} {:>3} sizes {}..{}: alpha {:.2f} us, busbw {}; "
        "alpha-beta residual {:.1f}% (>=1 MiB {:.1f}%); curve {} knots, residual {:.2f}% (>=1 MiB {:.2f}%)\n",
        collective_name(s.kind), s.ranks, s.nodes, s.dtype, s.placement, s.alpha_beta.points,
        human_bytes(s.curve.min_bytes()), human_bytes(s.curve.max_bytes()), s.alpha_beta.alpha_s / kUs,
        bw ? fmt::format("{:.2f} GB/s", *bw / kGB) : std::string("n/a"), 100 * s.alpha_beta.max_rel_error,
        100 * s.alpha_beta.max_rel_error_ge_1mib, s.curve.knots().size(), 100 * s.curve.max_rel_error(),
        100 * s.curve.max_rel_error_ge_1mib());
  }
  if (gemm_peak_flops_)
    out += fmt::format("gemm: peak dense bf16 {:.1f} TFLOP/s ({}), {} shapes\n", *gemm_peak_flops_ / kTFLOP,
                       gemm_peak_source_, gemm_.size());
  for (const auto& g : gemm_)
    out += fmt::format("  {}x{}x{} {}: {:.1f} TFLOP/s{}\n", g.m, g.n, g.k, g.dtype, g.flops_per_s / kTFLOP,
                       gemm_peak_flops_
                           ? fmt::format(" ({:.1f}% of peak)", 100 * g.flops_per_s / *gemm_peak_flops_)
                           : std::string());
  if (auto b = hbm_Bps()) out += fmt::format("hbm: {:.1f} GB/s device-to-device (read + write)\n", *b / kGB);
  for (const auto& [layout, v] : adamw_)
    if (auto b = adamw_Bps(layout))
      out += fmt::format("adamw {}: {:.1f} GB/s at the largest shard ({} samples)\n", layout, *b / kGB,
                         v.size());
  if (!failures_.empty()) out += fmt::format("failures ({}):\n", failures_.size());
  for (const auto& f : failures_)
    out += fmt::format("  {}{}: {}\n", f.benchmark,
                       f.bytes ? fmt::format(" at {} bytes", *f.bytes) : std::string(), f.error);
  return out;
}

// ---------------------------------------------------------------- JSON writing

static Json sample_json(const CalibrationSample& s) {
  Json j = {
      {"bytes", s.bytes}, {"time_s", s.time_s}, {"repetitions", s.repetitions}, {"iterations", s.iterations}};
  if (s.min_s) j["min_s"] = *s.min_s;
  if (s.max_s) j["max_s"] = *s.max_s;
  return j;
}

Json CalibrationProfile::to_json() const {
  Json j;
  j["schema"] = kCalibrationSchema;
  j["tool"] = {{"name", tool_name}, {"version", tool_version}};
  j["created"] = created;
  if (!source.empty()) j["source"] = source;
  if (!notes.empty()) j["notes"] = notes;
  Json hw;
  hw["gpus"] = Json::array();
  for (const auto& g : hardware_.gpus) hw["gpus"].push_back({{"name", g.name}, {"count", g.count}});
  hw["gpu_count"] = hardware_.gpu_count;
  hw["nodes"] = hardware_.nodes;
  hw["driver_version"] = hardware_.driver_version;
  hw["cuda_version"] = hardware_.cuda_version;
  hw["nccl_version"] = hardware_.nccl_version;
  hw["env"] = hardware_.env;
  j["hardware"] = hw;
  j["collectives"] = Json::array();
  for (const auto& s : collectives_) {
    Json c = {{"kind", collective_name(s.kind)}, {"ranks", s.ranks},  {"nodes", s.nodes}, {"dtype", s.dtype},
              {"placement", s.placement},        {"source", s.source}};
    c["samples"] = Json::array();
    for (const auto& x : s.samples) c["samples"].push_back(sample_json(x));
    Json fit = {{"alpha_s", s.alpha_beta.alpha_s},
                {"per_byte_s", s.alpha_beta.per_byte_s},
                {"alpha_beta_max_rel_error", s.alpha_beta.max_rel_error},
                {"alpha_beta_max_rel_error_ge_1mib", s.alpha_beta.max_rel_error_ge_1mib},
                {"curve_max_rel_error", s.curve.max_rel_error()},
                {"curve_max_rel_error_ge_1mib", s.curve.max_rel_error_ge_1mib()}};
    if (auto bw = s.busbw_Bps()) fit["busbw_Bps"] = *bw;
    fit["curve_knots"] = Json::array();
    for (const auto& k : s.curve.knots()) fit["curve_knots"].push_back({k.bytes, k.time_s});
    c["fit"] = fit;
    j["collectives"].push_back(c);
  }
  if (gemm_peak_flops_ || !gemm_.empty()) {
    Json g;
    if (gemm_peak_flops_) g["peak_flops"] = *gemm_peak_flops_, g["peak_source"] = gemm_peak_source_;
    g["samples"] = Json::array();
    for (const auto& s : gemm_) {
      Json x = {{"m", s.m},
                {"n", s.n},
                {"k", s.k},
                {"dtype", s.dtype},
                {"time_s", s.time_s},
                {"flops_per_s", s.flops_per_s},
                {"repetitions", s.repetitions},
                {"iterations", s.iterations}};
      if (s.min_s) x["min_s"] = *s.min_s;
      if (s.max_s) x["max_s"] = *s.max_s;
      g["samples"].push_back(x);
    }
    j["gemm"] = g;
  }
  if (!hbm_.empty()) {
    j["hbm"]["samples"] = Json::array();
    for (const auto& s : hbm_) j["hbm"]["samples"].push_back(sample_json(s));
  }
  if (!adamw_.empty()) {
    j["adamw"] = Json::object();
    for (const auto& [layout, v] : adamw_) {
      Json arr = Json::array();
      for (const auto& s : v) {
        Json x = {{"params", s.params},
                  {"bytes", s.bytes},
                  {"time_s", s.time_s},
                  {"repetitions", s.repetitions},
                  {"iterations", s.iterations}};
        if (s.min_s) x["min_s"] = *s.min_s;
        if (s.max_s) x["max_s"] = *s.max_s;
        arr.push_back(x);
      }
      j["adamw"][layout]["samples"] = arr;
    }
  }
  j["failures"] = Json::array();
  for (const auto& f : failures_) {
    Json x = {{"benchmark", f.benchmark}, {"error", f.error}, {"time", f.time}};
    if (f.bytes) x["bytes"] = *f.bytes;
    j["failures"].push_back(x);
  }
  j["completed"] = completed_;
  return j;
}

void CalibrationProfile::save(const std::string& path) const {
  write_file_atomic(path, to_json().dump(2) + "\n");
}

// ---------------------------------------------------------------- JSON reading (strict)

namespace {

const Json& array_at(JsonObj& o, const std::string& key) {
  const Json& a = o.raw(key);
  if (!a.is_array()) o.fail(key, "expected an array, got " + json_brief(a));
  return a;
}

void read_timing(JsonObj& x, std::optional<double>& min_s, std::optional<double>& max_s, int& reps,
                 std::int64_t& iters, double time_s) {
  x.allow({"min_s", "max_s"});  // optional keys read only when present: known, so typos get a suggestion
  if (x.has("min_s")) min_s = x.number("min_s", 0, 1e9);
  if (x.has("max_s")) max_s = x.number("max_s", 0, 1e9);
  if (min_s && *min_s > time_s) x.fail("min_s", "min_s is larger than time_s (the median)");
  if (max_s && *max_s < time_s) x.fail("max_s", "max_s is smaller than time_s (the median)");
  reps = static_cast<int>(x.integer("repetitions", 1, 1, 1000000));
  iters = x.integer("iterations", 0, 0, INT64_MAX);
}

CalibrationSample read_sample(const Json& j, const std::string& file, const std::string& ptr) {
  if (!j.is_object()) throw InputError(file, ptr, "expected an object, got " + json_brief(j));
  JsonObj x(j, file, ptr);
  CalibrationSample s;
  s.bytes = x.integer("bytes", 0, INT64_MAX);
  s.time_s = x.number("time_s", 0, 1e9);
  if (!(s.time_s > 0)) x.fail("time_s", "time must be > 0");
  read_timing(x, s.min_s, s.max_s, s.repetitions, s.iterations, s.time_s);
  x.finish();
  return s;
}

std::vector<std::string> collective_names() {
  std::vector<std::string> out;
  for (const auto& c : kCollectives) out.emplace_back(c.name);
  return out;
}

}  // namespace

CalibrationProfile CalibrationProfile::from_json(const Json& j, const std::string& file) {
  if (!j.is_object())
    throw InputError(file, "",
                     "expected a JSON object with \"schema\": \"" + std::string(kCalibrationSchema) + "\"");
  JsonObj root(j, file);
  const std::string schema = root.str("schema");
  if (schema != kCalibrationSchema)
    root.fail("schema", "unsupported schema \"" + schema + "\" (expected \"" + kCalibrationSchema + "\")");
  root.allow({"notes", "source", "description"});
  root.allow({"collectives", "failures", "completed"});  // read only when present; listed for suggestions
  CalibrationProfile p;
  p.source = root.str("source", "");
  p.notes = root.str("notes", "");
  {
    JsonObj t = root.object("tool");
    p.tool_name = t.str("name");
    p.tool_version = t.str("version");
    t.finish();
  }
  p.created = root.str("created");
  {
    JsonObj h = root.object("hardware");
    const Json& gpus = array_at(h, "gpus");
    for (std::size_t i = 0; i < gpus.size(); ++i) {
      const std::string ptr = h.pointer("gpus") + "/" + std::to_string(i);
      if (!gpus[i].is_object()) throw InputError(file, ptr, "expected an object, got " + json_brief(gpus[i]));
      JsonObj g(gpus[i], file, ptr);
      p.hardware_.gpus.push_back({g.str("name"), static_cast<int>(g.integer("count", 0, 1 << 24))});
      g.finish();
    }
    p.hardware_.gpu_count = static_cast<int>(h.integer("gpu_count", 0, 0, 1 << 24));
    p.hardware_.nodes = static_cast<int>(h.integer("nodes", 0, 0, 1 << 24));
    p.hardware_.driver_version = h.str("driver_version", "");
    p.hardware_.cuda_version = h.str("cuda_version", "");
    p.hardware_.nccl_version = h.str("nccl_version", "");
    if (const Json* env = h.raw_optional("env")) {
      if (!env->is_object()) h.fail("env", "expected an object of strings, got " + json_brief(*env));
      for (auto it = env->begin(); it != env->end(); ++it)
        p.hardware_.env[it.key()] = json_string(it.value(), file, h.pointer("env") + "/" + it.key());
    }
    h.finish();
  }
  if (root.has("collectives")) {
    const Json& arr = array_at(root, "collectives");
    for (std::size_t i = 0; i < arr.size(); ++i) {
      const std::string ptr = "/collectives/" + std::to_string(i);
      if (!arr[i].is_object()) throw InputError(file, ptr, "expected an object, got " + json_brief(arr[i]));
      JsonObj c(arr[i], file, ptr);
      CollectiveSeries s;
      const std::string kind = c.str("kind");
      const auto k = parse_collective(kind);
      if (!k) {
        const std::string dym = did_you_mean_list(kind, collective_names());
        c.fail("kind", "unknown collective \"" + kind + "\"" +
                           (dym.empty() ? "" : " (did you mean \"" + dym + "\"?)") +
                           "; valid: " + join_names(collective_names()));
      }
      s.kind = *k;
      s.ranks = static_cast<int>(c.integer("ranks", 1, 1 << 24));
      s.nodes = static_cast<int>(c.integer("nodes", 1, 1 << 24));
      if (s.nodes > s.ranks)
        c.fail("nodes",
               "more nodes (" + std::to_string(s.nodes) + ") than ranks (" + std::to_string(s.ranks) + ")");
      s.dtype = c.str("dtype");
      s.placement = c.str("placement", "out_of_place");
      if (s.placement != "out_of_place" && s.placement != "in_place")
        c.fail("placement", "expected \"out_of_place\" or \"in_place\", got \"" + s.placement + "\"");
      s.source = c.str("source", "");
      c.allow({"fit"});  // derived data, recomputed from the samples on load
      const Json& samples = array_at(c, "samples");
      if (samples.empty()) c.fail("samples", "a series needs at least one sample");
      for (std::size_t k2 = 0; k2 < samples.size(); ++k2)
        s.samples.push_back(read_sample(samples[k2], file, c.pointer("samples") + "/" + std::to_string(k2)));
      c.finish();
      for (const auto& prev : p.collectives_)
        if (same_key(prev, s))
          throw InputError(file, ptr, "duplicate series (same kind, ranks, nodes, dtype, placement)");
      p.collectives_.push_back(std::move(s));
      refit(p.collectives_.back());
    }
  }
  if (auto g = root.optional_object("gemm")) {
    g->allow({"peak_flops", "peak_source"});
    if (g->has("peak_flops")) {
      p.gemm_peak_flops_ = g->number("peak_flops", 1, 1e20);
      p.gemm_peak_source_ = g->str("peak_source", "");
    }
    const Json& arr = array_at(*g, "samples");
    for (std::size_t i = 0; i < arr.size(); ++i) {
      const std::string ptr = g->pointer("samples") + "/" + std::to_string(i);
      if (!arr[i].is_object()) throw InputError(file, ptr, "expected an object, got " + json_brief(arr[i]));
      JsonObj x(arr[i], file, ptr);
      GemmSample s;
      s.m = x.integer("m", 1, INT64_MAX), s.n = x.integer("n", 1, INT64_MAX),
      s.k = x.integer("k", 1, INT64_MAX);
      s.dtype = x.str("dtype", "bf16");
      s.time_s = x.number("time_s", 0, 1e9);
      if (!(s.time_s > 0)) x.fail("time_s", "time must be > 0");
      s.flops_per_s = x.number("flops_per_s", 0, 1e20);
      read_timing(x, s.min_s, s.max_s, s.repetitions, s.iterations, s.time_s);
      x.finish();
      p.gemm_.push_back(s);
    }
    g->finish();
  }
  if (auto h = root.optional_object("hbm")) {
    const Json& arr = array_at(*h, "samples");
    for (std::size_t i = 0; i < arr.size(); ++i)
      p.hbm_.push_back(read_sample(arr[i], file, h->pointer("samples") + "/" + std::to_string(i)));
    h->finish();
  }
  if (auto a = root.optional_object("adamw")) {
    for (auto it = a->json().begin(); it != a->json().end(); ++it) {
      const std::string layout = it.key();
      if (layout != "fp32" && layout != "bf16-mixed" && layout != "bf16")
        a->fail(layout, "unknown AdamW layout \"" + layout + "\"; valid: fp32, bf16-mixed, bf16");
      JsonObj l = a->object(layout);
      const Json& arr = array_at(l, "samples");
      for (std::size_t i = 0; i < arr.size(); ++i) {
        const std::string ptr = l.pointer("samples") + "/" + std::to_string(i);
        if (!arr[i].is_object()) throw InputError(file, ptr, "expected an object, got " + json_brief(arr[i]));
        JsonObj x(arr[i], file, ptr);
        AdamwSample s;
        s.params = x.integer("params", 1, INT64_MAX);
        s.bytes = x.integer("bytes", 1, INT64_MAX);
        s.time_s = x.number("time_s", 0, 1e9);
        if (!(s.time_s > 0)) x.fail("time_s", "time must be > 0");
        read_timing(x, s.min_s, s.max_s, s.repetitions, s.iterations, s.time_s);
        x.finish();
        p.adamw_[layout].push_back(s);
      }
      l.finish();
    }
    a->finish();
  }
  if (root.has("failures")) {
    const Json& arr = array_at(root, "failures");
    for (std::size_t i = 0; i < arr.size(); ++i) {
      const std::string ptr = "/failures/" + std::to_string(i);
      if (!arr[i].is_object()) throw InputError(file, ptr, "expected an object, got " + json_brief(arr[i]));
      JsonObj x(arr[i], file, ptr);
      CalibrationFailure f;
      f.benchmark = x.str("benchmark");
      f.error = x.str("error");
      f.time = x.str("time", "");
      x.allow({"bytes"});
      if (x.has("bytes")) f.bytes = x.integer("bytes", 0, INT64_MAX);
      x.finish();
      p.failures_.push_back(f);
    }
  }
  if (root.has("completed")) {
    const Json& arr = array_at(root, "completed");
    for (std::size_t i = 0; i < arr.size(); ++i)
      p.mark_completed(json_string(arr[i], file, "/completed/" + std::to_string(i)));
  }
  root.finish();
  return p;
}

CalibrationProfile CalibrationProfile::load(const std::string& path) {
  return from_json(load_json_file(path), path);
}

}  // namespace shardplan
