// Fits the compute-efficiency constants of the cost model to every throughput record of the development set:
// a grid search minimising the median |log(predicted / measured)| of tokens/s per GPU over ALL rows (not one).
// Usage: shardplan-fit-compute tests/data/runs/published_dev.json
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iostream>

#include "planner/validate.hpp"

int main(int argc, char** argv) {
  using namespace shardplan;
  if (argc < 2) {
    std::cerr << "usage: shardplan-fit-compute RECORDS.json...\n";
    return 2;
  }
  std::vector<std::string> files(argv + 1, argv + argc);
  struct Best {
    double score = 1e9, gemm = 0, attn = 0, hbm = 0, hook = 0;
  } best;
  for (double gemm : {0.50, 0.55, 0.60, 0.65, 0.70, 0.78})
    for (double attn : {0.30, 0.40, 0.50})
      for (double hbm : {0.5, 0.8})
        for (double hook : {60e-6, 200e-6}) {
          std::function<ComputeConstants(GpuArch)> fn = [&](GpuArch a) {
            ComputeConstants k = default_compute_constants(a);
            const double scale = gemm / default_compute_constants(GpuArch::kHopper).gemm_efficiency_max;
            k.gemm_efficiency_max *= scale;
            k.attention_efficiency = attn;
            k.hbm_efficiency = hbm;
            k.unit_hook_cpu_s = hook;
            return k;
          };
          ValidationReport v = validate_files(files, "", nullptr, &fn);
          std::vector<double> e;
          for (const auto& r : v.rows)
            if (r.term == "tokens_per_s_per_gpu" && r.measured > 0 && r.predicted > 0) e.push_back(std::abs(std::log(r.predicted / r.measured)));
          std::sort(e.begin(), e.end());
          double med = e.empty() ? 1e9 : e[e.size() / 2];
          if (med < best.score) best = {med, gemm, attn, hbm, hook};
          fmt::print("gemm {:.2f} attn {:.2f} hbm {:.1f} hook {:>3.0f}us -> median |log err| {:.3f} (n={})\n", gemm, attn, hbm, hook * 1e6, med, e.size());
        }
  fmt::print("best: gemm_efficiency_max {:.2f} (Hopper; other archs scaled alike) attention_efficiency {:.2f} "
             "hbm_efficiency {:.1f} unit_hook_cpu_s {:.0f}us  median |log err| {:.3f}\n",
             best.gemm, best.attn, best.hbm, best.hook * 1e6, best.score);
  return 0;
}
