// Reports format a Result; they compute nothing. JSON follows the "shardplan.report/1" contract (DESIGN.md),
// text is the readable table, the trace is Chrome trace-event JSON that Perfetto opens.
#pragma once
#include <string>

#include "simulator/simulate/simulate.hpp"

namespace shardplan {

struct ReportInputs {
  const ModelGraph* model;
  const Cluster* cluster;
  std::string calibration;  ///< profile path, or "" for datasheet defaults
};

/// One "shardplan.report/1" document (memory/simulate output, and each entry of a plan's `plans`).
Json report_json(const Result& r, const ReportInputs& in);
/// Human-readable summary: breakdown table, step time, communication.
std::string report_text(const Result& r, const ReportInputs& in, bool with_time);
/// Chrome trace-event JSON for the simulator's last run (needs detail = true for the memory counter).
/// `r` comes from a detail run (Simulator::run(plan, true)).
std::string trace_json(const Result& r);
/// "12.34 GiB"
std::string format_bytes(double bytes);

}  // namespace shardplan
