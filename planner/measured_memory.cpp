// Measured memory (OOM message, memory snapshot) against the prediction, and the changes that would fit.
#include "planner/measured_memory.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "planner/report/report.hpp"
#include "planner/search.hpp"
#include "planner/validate.hpp"

namespace shardplan {

namespace {

double d(Bytes b) {
  return static_cast<double>(b);
}

void finish(MemoryComparison& c, const Result& r, double headroom) {
  c.predicted_demand = r.peak_reserved_bytes + r.overhead.total();
  c.predicted_fits = r.fits && c.predicted_demand <= c.capacity_bytes;
  c.limit_bytes = static_cast<Bytes>(d(c.capacity_bytes) * (1.0 - headroom));
  if (c.measured_demand > c.predicted_demand && c.predicted_demand > 0)
    c.correction = d(c.measured_demand) / d(c.predicted_demand);
}

}  // namespace

MemoryComparison compare_oom_message(const OomMessage& m, const Result& r, double headroom) {
  MemoryComparison c;
  c.source = "oom-message";
  c.measured_oom = true;
  c.capacity_bytes = m.allowed ? std::min(*m.allowed, m.total_capacity) : m.total_capacity;
  c.measured = {{"wording", m.wording},
                {"device", m.device},
                {"requested_bytes", m.requested},
                {"total_capacity_bytes", m.total_capacity},
                {"free_bytes", m.free},
                {"allocated_bytes", m.allocated},
                {"reserved_unallocated_bytes", m.reserved_unallocated},
                {"reserved_bytes", m.reserved()}};
  if (m.allowed) c.measured["allowed_bytes"] = *m.allowed;
  if (m.private_pools) c.measured["private_pools_bytes"] = *m.private_pools;
  if (m.process_in_use) c.measured["process_in_use_bytes"] = *m.process_in_use;
  if (m.non_pytorch()) c.measured["runtime_overhead_bytes"] = *m.non_pytorch();
  const std::string plus = " + the failed request (a lower bound of the demand)";
  c.terms.push_back({"reserved_bytes", "reserved by PyTorch" + plus, d(r.peak_reserved_bytes),
                     d(m.reserved() + m.requested)});
  c.terms.push_back(
      {"allocated_bytes", "allocated by PyTorch" + plus, d(r.peak_bytes), d(m.allocated + m.requested)});
  if (m.non_pytorch())
    c.terms.push_back({"runtime_overhead_bytes", "non-PyTorch memory of the process (in use - reserved)",
                       d(r.overhead.total()), d(*m.non_pytorch())});
  if (m.process_in_use) {
    c.terms.push_back({"device_bytes", "the process's memory in use" + plus,
                       d(r.peak_reserved_bytes + r.overhead.total()), d(*m.process_in_use + m.requested)});
    c.measured_demand = *m.process_in_use + m.requested;
  } else {
    c.measured_demand = m.reserved() + m.requested + r.overhead.total();
  }
  finish(c, r, headroom);
  return c;
}

MemoryComparison compare_snapshot(const SnapshotDevice& s, const Result& r, double headroom) {
  MemoryComparison c;
  c.source = "memory-snapshot";
  c.measured_oom = s.ooms > 0;
  c.capacity_bytes = r.capacity_bytes;
  c.measured = {{"device", s.device},
                {"segments", s.segments},
                {"blocks", s.blocks},
                {"reserved_bytes", s.reserved},
                {"allocated_bytes", s.allocated},
                {"active_bytes", s.active},
                {"requested_bytes", s.requested},
                {"trace_entries", s.trace_entries},
                {"peak_reserved_bytes", s.peak_reserved},
                {"peak_allocated_bytes", s.peak_allocated},
                {"peak_active_bytes", s.peak_active},
                {"ooms", s.ooms}};
  const std::string as =
      s.trace_entries > 0
          ? fmt::format("peak over the {} trace entries", s.trace_entries)
          : std::string("state at the snapshot (no history recorded: a lower bound of the peak)");
  for (const char* term : {"peak_reserved_bytes", "peak_allocated_bytes", "peak_active_bytes"}) {
    const Bytes v = c.measured[term].get<Bytes>();
    c.terms.push_back({term, as, predicted_term(term, r), d(v)});
  }
  if (c.measured_oom) {
    c.measured["oom_requested_bytes"] = s.oom_requested;
    c.measured["oom_device_free_bytes"] = s.oom_device_free;
    c.measured["reserved_at_oom_bytes"] = s.reserved_at_oom;
    c.measured_demand = s.reserved_at_oom + s.oom_requested + r.overhead.total();
  } else {
    c.measured_demand = s.peak_reserved + r.overhead.total();
  }
  finish(c, r, headroom);
  return c;
}

void add_fit_advice(MemoryComparison& c, const ModelGraph& model, const Cluster& cluster,
                    const CostModel& costs, const Result& r) {
  if (!c.measured_oom && c.predicted_fits) return;
  const Bytes limit = static_cast<Bytes>(d(c.limit_bytes) / c.correction);
  c.advice = fit_advice(model, cluster, costs, r, limit);
  if (c.correction > 1)
    c.advice += fmt::format(
        " (each change's predicted memory judged against {} = the {} limit / {:.3f}, the measured over the "
        "predicted demand of this run)",
        format_bytes(d(limit)), format_bytes(d(c.limit_bytes)), c.correction);
}

Json memory_comparison_json(const MemoryComparison& c) {
  Json terms = Json::array();
  for (const auto& t : c.terms)
    terms.push_back({{"term", t.term},
                     {"measured_as", t.measured_as},
                     {"predicted", t.predicted},
                     {"measured", t.measured},
                     {"rel_error", t.rel_error()}});
  Json j = {{"source", c.source},
            {"measured", c.measured},
            {"terms", terms},
            {"measured_oom", c.measured_oom},
            {"predicted_fits", c.predicted_fits},
            {"capacity_bytes", c.capacity_bytes},
            {"limit_bytes", c.limit_bytes},
            {"measured_demand_bytes", c.measured_demand},
            {"predicted_demand_bytes", c.predicted_demand},
            {"correction", c.correction}};
  j["advice"] = c.advice.empty() ? Json() : Json(c.advice);
  return j;
}

std::string memory_comparison_text(const MemoryComparison& c) {
  std::string s =
      fmt::format("{}: {}{}\n", c.source, c.measured_oom ? "the run ran out of memory" : "the run fit",
                  c.predicted_fits ? "; the prediction fits" : "; the prediction does not fit");
  s += fmt::format("  {:<24} {:>12} {:>12} {:>8}  measured as\n", "term", "predicted", "measured", "error");
  for (const auto& t : c.terms)
    s += fmt::format("  {:<24} {:>12} {:>12} {:>+7.1f}%  {}\n", t.term, format_bytes(t.predicted),
                     format_bytes(t.measured), 100 * t.rel_error(), t.measured_as);
  s += fmt::format("  demand (reserved + runtime overhead): measured {}, predicted {}; GPU {}\n",
                   format_bytes(d(c.measured_demand)), format_bytes(d(c.predicted_demand)),
                   format_bytes(d(c.capacity_bytes)));
  if (!c.advice.empty()) s += "  plan changes: " + c.advice + "\n";
  return s;
}

}  // namespace shardplan
