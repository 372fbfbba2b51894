// CalibrationProfile: JSON writing, derived fits, and the queries the cost model uses (strict reading:
// profile_json.cpp).
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

bool same_series(const CollectiveSeries& a, const CollectiveSeries& b) {
  return a.kind == b.kind && a.ranks == b.ranks && a.nodes == b.nodes && a.dtype == b.dtype &&
         a.placement == b.placement;
}

CalibrationProfile::CalibrationProfile() : tool_version(SHARDPLAN_VERSION), created(utc_now_iso8601()) {}

void CalibrationProfile::add_collective_samples(const CollectiveSeries& series) {
  for (auto& s : collectives_) {
    if (!same_series(s, series)) continue;
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
  std::erase_if(collectives_, [&](const CollectiveSeries& s) { return same_series(s, series); });
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

}  // namespace shardplan
