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
  // Hopper and Ampere GEMM efficiencies are fitted separately (other archs keep their defaults); the
  // attention efficiency is shared.
  struct Best {
    double score = 1e9, gemm = 0, gemm_a100 = 0, attn = 0;
  } best;
  for (double gemm : {0.55, 0.60, 0.65, 0.70, 0.75})
    for (double gemm_a100 : {0.70, 0.75, 0.80, 0.85})
      for (double attn : {0.25, 0.30, 0.35, 0.40}) {
          std::function<ComputeConstants(GpuArch)> fn = [&](GpuArch a) {
            ComputeConstants k = default_compute_constants(a);
            if (a == GpuArch::kHopper) k.gemm_efficiency_max = gemm;
            if (a == GpuArch::kAmpere) k.gemm_efficiency_max = gemm_a100;
            k.attention_efficiency = attn;
            return k;
          };
          ValidationReport v = validate_files(files, nullptr, &fn);
          std::vector<double> e;
          for (const auto& r : v.rows)
            if (r.term == "tokens_per_s_per_gpu" && r.measured > 0 && r.predicted > 0) e.push_back(std::abs(std::log(r.predicted / r.measured)));
          std::sort(e.begin(), e.end());
          double med = e.empty() ? 1e9 : e[e.size() / 2];
          if (med < best.score) best = {med, gemm, gemm_a100, attn};
          fmt::print("gemm hopper {:.2f} ampere {:.2f} attn {:.2f} -> median |log err| {:.3f} (n={})\n", gemm, gemm_a100, attn, med, e.size());
        }
  fmt::print("best: gemm_efficiency_max hopper {:.2f} ampere {:.2f}, attention_efficiency {:.2f}: median |log err| {:.3f}\n",
             best.gemm, best.gemm_a100, best.attn, best.score);
  return 0;
}
