// The calibration profile ("schema": "shardplan.calibration/1"): what was measured on which hardware, raw
// samples per benchmark, fitted curves, and what failed. The simulator's cost model asks it for collective
// times, GEMM efficiency, HBM and optimizer bandwidth; every query answers std::nullopt when that was not
// calibrated.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "calibration/fit.hpp"
#include "core/collectives.hpp"

namespace shardplan {

inline constexpr const char* kCalibrationSchema = "shardplan.calibration/1";

/// What the machine was: filled by shardplan-calibrate from CUDA/NCCL, or by the importer from log headers.
struct CalibrationHardware {
  struct Gpu {
    std::string name;
    int count = 0;
  };
  std::vector<Gpu> gpus;       ///< distinct GPU names with how many ranks saw each
  int gpu_count = 0;           ///< total GPUs (ranks) seen; 0 = unknown
  int nodes = 0;               ///< 0 = unknown
  std::string driver_version;  ///< "" = unknown
  std::string cuda_version;
  std::string nccl_version;
  std::map<std::string, std::string> env;  ///< NCCL_* variables in effect
};

/// One timed point. time_s is the median over repetitions (nccl-tests text logs: their average, repetitions =
/// 1).
struct CalibrationSample {
  std::int64_t bytes = 0;  ///< collectives: whole buffer (nccl-tests size column); hbm: bytes copied
  double time_s = 0;
  std::optional<double> min_s, max_s;
  int repetitions = 1;
  std::int64_t iterations = 0;  ///< iterations per repetition; 0 = unknown
};

/// Samples of one collective at one (kind, ranks, nodes, dtype, placement), with fits derived from them.
struct CollectiveSeries {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  int ranks = 1;
  int nodes = 1;
  std::string dtype = "bfloat16";          ///< nccl-tests type names: bfloat16, half, float, ...
  std::string placement = "out_of_place";  ///< out_of_place | in_place
  std::string source;                      ///< where the numbers came from (log file, tool)
  std::vector<CalibrationSample> samples;
  // Derived on load and after every change (never trusted from the file):
  calibration::AlphaBetaFit alpha_beta;
  calibration::LogLogCurve curve;

  /// busbw implied by the alpha-beta fit (bytes/s); nullopt for one rank or a flat fit.
  std::optional<double> busbw_Bps() const;
};

struct GemmSample {
  std::int64_t m = 0, n = 0, k = 0;
  std::string dtype = "bf16";
  double time_s = 0;
  double flops_per_s = 0;  ///< 2mnk / time_s
  std::optional<double> min_s, max_s;
  int repetitions = 1;
  std::int64_t iterations = 0;
};

struct AdamwSample {
  std::int64_t params = 0;  ///< parameters in the shard updated by one step
  std::int64_t bytes = 0;   ///< params * adamw_bytes_per_param(layout)
  double time_s = 0;
  std::optional<double> min_s, max_s;
  int repetitions = 1;
  std::int64_t iterations = 0;
};

struct CalibrationFailure {
  std::string benchmark;  ///< benchmark id, e.g. "nccl/all_gather/n8/bfloat16"
  std::string error;
  std::optional<std::int64_t> bytes;  ///< size being measured when it failed
  std::string time;                   ///< UTC ISO-8601
};

struct CollectiveEstimate {
  double time_s = 0;
  enum class Source { kMeasuredCurve, kFittedAlphaBeta, kScaledCurve } source = Source::kMeasuredCurve;
  std::string detail;  ///< which series answered and how ("" for the legacy query)
};
const char* to_string(CollectiveEstimate::Source s);  ///< "measured curve" | "alpha-beta" | "scaled curve"

/// Where a queried group sits, in the terms a profile's series can be compared by. A series (ranks, hosts)
/// from a log is equivalent when it has the same ranks and hosts and, with the queried cluster's hosts per
/// NVLink domain, spans the same NVLink domains with the same ranks per domain (a 72-rank GB200 log on 18
/// trays is one NVLink domain of 72).
struct CollectivePlacement {
  int ranks = 1;
  int hosts = 1;    ///< hosts (operating-system instances) the group spans
  int domains = 1;  ///< NVLink domains the group spans
  int ranks_per_domain = 1;
  int hosts_per_domain = 1;  ///< of the queried cluster: NVLink-domain GPUs / GPUs per host (>= 1)
};
/// The analytic model's time for the queried placement shape with `ranks` ranks and `bytes` bytes.
using CollectiveShape = std::function<double(int ranks, double bytes)>;

class CalibrationProfile {
 public:
  CalibrationProfile();

  // ---- loading and saving ----
  /// Strict load: unknown keys, wrong types, impossible values raise InputError naming the file and JSON
  /// pointer.
  static CalibrationProfile load(const std::string& path);
  static CalibrationProfile from_json(const nlohmann::json& j, const std::string& file);
  nlohmann::json to_json() const;
  /// Atomic write (temporary file + rename).
  void save(const std::string& path) const;

  // ---- queries for the simulator ----
  /// Time of one collective on a whole buffer of `buffer_bytes` over `ranks` ranks on `nodes` nodes. Within
  /// the measured size range of a series with the same (kind, ranks, nodes): log-log interpolation of the
  /// measured curve. Outside it, or for another rank count with the same span (one node vs several): the
  /// alpha-beta model. nullopt when nothing of that kind and span was calibrated.
  std::optional<CollectiveEstimate> collective_time(CollectiveKind kind, std::int64_t buffer_bytes, int ranks,
                                                    int nodes) const;
  /// Placement-aware query. Same collective on an equivalent placement (see CollectivePlacement): log-log
  /// interpolation of the measured curve inside its size range; outside it, the model's shape scaled to the
  /// nearest measured point. Another rank count with the same ranks per host, on one NVLink domain or several
  /// like the query: the model's shape scaled, size by size, to the nearest such series (in log ranks).
  /// nullopt otherwise, with the reason in `why`.
  std::optional<CollectiveEstimate> collective_time(CollectiveKind kind, std::int64_t buffer_bytes,
                                                    const CollectivePlacement& where,
                                                    const CollectiveShape& model,
                                                    std::string* why = nullptr) const;
  /// Achieved / peak dense bf16 FLOP/s for an m x n x k GEMM: the nearest measured shape in log space.
  std::optional<double> gemm_efficiency(std::int64_t m, std::int64_t n, std::int64_t k) const;
  /// Device-to-device copy bandwidth, read + write bytes per second (best large-copy sample).
  std::optional<double> hbm_Bps() const;
  /// Achieved AdamW bandwidth (bytes moved per second) for layout fp32 | bf16-mixed | bf16, at the largest
  /// shard.
  std::optional<double> adamw_Bps(std::string_view layout) const;
  /// Peak dense bf16 FLOP/s the GEMM efficiencies are relative to.
  std::optional<double> gemm_peak_flops() const;
  /// Human summary: hardware, one line per curve with fit residuals, failures.
  std::string describe() const;

  // ---- building (importer, benchmark runner) ----
  CalibrationHardware& hardware() { return hardware_; }
  const CalibrationHardware& hardware() const { return hardware_; }
  /// Adds samples to the series with the same key (creating it) and refits it.
  void add_collective_samples(const CollectiveSeries& series);
  /// Replaces the series with the same key (a rerun) and refits it.
  void replace_collective_series(const CollectiveSeries& series);
  const std::vector<CollectiveSeries>& collectives() const { return collectives_; }

  void set_gemm_peak(double flops_per_s, std::string source);
  const std::string& gemm_peak_source() const { return gemm_peak_source_; }
  void add_gemm_sample(const GemmSample& s) { gemm_.push_back(s); }
  const std::vector<GemmSample>& gemm_samples() const { return gemm_; }

  void add_hbm_sample(const CalibrationSample& s) { hbm_.push_back(s); }
  const std::vector<CalibrationSample>& hbm_samples() const { return hbm_; }

  void add_adamw_sample(std::string_view layout, const AdamwSample& s);
  const std::map<std::string, std::vector<AdamwSample>>& adamw_samples() const { return adamw_; }

  void record_failure(CalibrationFailure f) { failures_.push_back(std::move(f)); }
  const std::vector<CalibrationFailure>& failures() const { return failures_; }

  void mark_completed(const std::string& benchmark_id);
  bool is_completed(const std::string& benchmark_id) const;
  const std::vector<std::string>& completed() const { return completed_; }

  std::string tool_name = "shardplan";
  std::string tool_version;
  std::string created;  ///< UTC ISO-8601 of the run or import
  std::string source;   ///< free text: what produced this profile
  std::string notes;

 private:
  CalibrationHardware hardware_;
  std::vector<CollectiveSeries> collectives_;
  std::optional<double> gemm_peak_flops_;
  std::string gemm_peak_source_;
  std::vector<GemmSample> gemm_;
  std::vector<CalibrationSample> hbm_;
  std::map<std::string, std::vector<AdamwSample>> adamw_;
  std::vector<CalibrationFailure> failures_;
  std::vector<std::string> completed_;
};

/// Recomputes the derived fits of a series from its samples.
void refit(CollectiveSeries& s);
/// Whether two series measure the same thing (kind, ranks, nodes, dtype, placement): one series per key.
bool same_series(const CollectiveSeries& a, const CollectiveSeries& b);
/// Current UTC time as "YYYY-MM-DDTHH:MM:SSZ".
std::string utc_now_iso8601();
/// The shardplan version this library was built as.
const char* shardplan_version();

}  // namespace shardplan
