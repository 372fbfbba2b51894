// Fits the caching-allocator fragmentation of the default stream's pool
// (ComputeConstants::fragmentation_eager, fragmentation_compiled) to every measured peak_reserved row of the
// development set.
//
// The prediction is R(f) = side + pool0 * (1 + f) (side = the all-gather / reduce-scatter streams' pools), so
// two evaluations, f = 0 and f = 0.1, give pool0 and side per row without touching the simulator; each row
// then implies f_row = (measured - side) / pool0 - 1, and the fit is the median f_row over the rows of one
// execution mode (eager or compiled). The median, not the mean: one row's software version or a run that
// filled the device (its allocator flushed the cache) must not move the constant. Rows are told apart by
// which constant moves them. Also prints leave-one-out errors: each row predicted with f fitted on the other
// rows of its mode.
//
// Usage: shardplan-fit-memory tests/data/runs/published_dev.json
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>

#include "planner/validate.hpp"

namespace {
using namespace shardplan;

std::map<std::string, std::pair<double, double>> reserved(const std::vector<std::string>& files, double eager,
                                                          double compiled) {
  std::function<ComputeConstants(GpuArch)> fn = [&](GpuArch a) {
    ComputeConstants k = default_compute_constants(a);
    k.fragmentation_eager = eager;
    k.fragmentation_compiled = compiled;
    return k;
  };
  std::map<std::string, std::pair<double, double>> out;  // id -> (predicted, measured)
  for (const auto& r : validate_files(files, nullptr, &fn).rows)
    if (r.term == "peak_reserved_bytes" && r.out_of_scope.empty()) out[r.id] = {r.predicted, r.measured};
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return 0;
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: shardplan-fit-memory RECORDS.json...\n";
    return 2;
  }
  const std::vector<std::string> files(argv + 1, argv + argc);
  const auto base = reserved(files, 0, 0), eager = reserved(files, 0.1, 0),
             compiled = reserved(files, 0, 0.1);
  struct Row {
    std::string id;
    double side, pool0, measured, f;
  };
  std::map<std::string, std::vector<Row>> modes;
  for (const auto& [id, pm] : base) {
    const double de = eager.at(id).first - pm.first, dc = compiled.at(id).first - pm.first;
    const char* mode = de > 0 ? "eager" : dc > 0 ? "compiled" : nullptr;
    if (!mode) continue;  // capped at the device's memory even without fragmentation: says nothing about f
    const double pool0 = std::max(de, dc) / 0.1, side = pm.first - pool0;
    modes[mode].push_back({id, side, pool0, pm.second, (pm.second - side) / pool0 - 1});
  }
  for (const auto& [mode, rows] : modes) {
    std::vector<double> fs;
    for (const auto& r : rows) fs.push_back(r.f);
    const double f = median(fs);
    fmt::print("{}: n={} fragmentation = median f_row = {:.3f}\n", mode, rows.size(), f);
    std::vector<double> loo_err;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      std::vector<double> others;
      for (std::size_t j = 0; j < rows.size(); ++j)
        if (j != i) others.push_back(rows[j].f);
      const double fo = median(others);
      const double e = (rows[i].side + rows[i].pool0 * (1 + fo)) / rows[i].measured - 1;
      loo_err.push_back(std::abs(e));
      fmt::print("  {:<52} f_row {:+.3f}  leave-one-out f {:.3f} -> error {:+.1f} % (uncapped)\n", rows[i].id,
                 rows[i].f, fo, 100 * e);
    }
    fmt::print("  leave-one-out median |error| {:.1f} %\n", 100 * median(loo_err));
  }
  return 0;
}
