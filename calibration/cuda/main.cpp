// shardplan-calibrate: measures this machine (NCCL collectives, cuBLASLt GEMMs, HBM copy, our fused AdamW)
// into a calibration profile, written atomically after every benchmark. Exit codes: 0 all benchmarks done, 1
// some failed (recorded in the profile), 2 bad input or no GPU.
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>

#ifdef SHARDPLAN_WITH_MPI
#include "calibration/cuda/mpi_bootstrap.hpp"
#endif

#include "calibration/adamw_reference.hpp"
#include "calibration/cuda/benchmarks.hpp"
#include "calibration/cuda/nccl_comm.hpp"
#include "calibration/profile.hpp"
#include "calibration/sweep.hpp"
#include "core/error.hpp"

extern char** environ;

namespace {

using namespace shardplan;
using namespace shardplan::calibration;

std::string version_string(int v) {  // CUDA encodes 1000*major + 10*minor
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

void fill_hardware(CalibrationProfile& p, int gpus, int nodes) {
  auto& hw = p.hardware();
  hw.gpus.clear();
  for (int d = 0; d < gpus; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) continue;
    auto it =
        std::find_if(hw.gpus.begin(), hw.gpus.end(), [&](const auto& g) { return g.name == prop.name; });
    if (it == hw.gpus.end())
      hw.gpus.push_back({prop.name, 1});
    else
      ++it->count;
  }
  hw.gpu_count = gpus;
  hw.nodes = nodes;
  int v = 0;
  if (cudaDriverGetVersion(&v) == cudaSuccess) hw.driver_version = "CUDA driver API " + version_string(v);
  if (cudaRuntimeGetVersion(&v) == cudaSuccess) hw.cuda_version = version_string(v);
  hw.nccl_version = cuda::nccl_runtime_version();
  hw.env.clear();
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    if (kv.rfind("NCCL_", 0) == 0 && kv.find('=') != std::string::npos)
      hw.env[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
  }
}

int run(int argc, char** argv) {
  CLI::App app("shardplan-calibrate: measure this machine into a shardplan.calibration/1 profile");
  std::string what = "all", output;
  bool resume = false;
  double min_time_s = 0.05, deadline_s = 120;
  std::int64_t max_bytes = 0, hidden = 0, ffn = 0, tokens = 8192;
  int tp = 1, repetitions = 5;
  app.add_option("WHAT", what, "nccl | gemm | adamw | hbm | all")
      ->check(CLI::IsMember({"nccl", "gemm", "adamw", "hbm", "all"}));
  app.add_option("-o,--output", output, "profile to write (updated after every benchmark)")->required();
  app.add_flag("--resume", resume, "keep the benchmarks already in the profile, run the rest");
  app.add_option("--min-time", min_time_s, "seconds per repetition (iterations are tuned to reach it)");
  app.add_option("--repetitions", repetitions, "timed repetitions per point (median and spread reported)");
  app.add_option("--max-bytes", max_bytes, "largest buffer: collective whole buffer, copy size, AdamW bytes");
  app.add_option("--deadline", deadline_s, "seconds before a hung collective is aborted");
  app.add_option("--hidden", hidden, "model width h: adds the layer's GEMM shapes");
  app.add_option("--ffn", ffn, "MLP width f (default 4h)");
  app.add_option("--tp", tp, "tensor-parallel degree dividing the GEMM shapes");
  app.add_option("--tokens", tokens, "tokens per micro-batch (GEMM M)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (min_time_s <= 0 || repetitions < 1 || tp < 1 || max_bytes < 0 || deadline_s <= 0) {
    std::cerr << "shardplan-calibrate: --min-time, --repetitions, --tp, --deadline must be positive\n";
    return 2;
  }
  int gpus = 0;
  const cudaError_t e = cudaGetDeviceCount(&gpus);
  if (e != cudaSuccess || gpus == 0) {
    std::cerr << "shardplan-calibrate: no CUDA GPU available ("
              << (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices") << "); nothing was measured\n";
    return 2;
  }
  int mpi_rank = 0, nodes = 1;
#ifdef SHARDPLAN_WITH_MPI
  // Collective: every rank gets here (the checks above are the same on every rank).
  const cuda::MpiTopology topo = cuda::mpi_topology(MPI_COMM_WORLD);
  mpi_rank = topo.rank;
  nodes = topo.nodes;
#endif
  CalibrationProfile profile;
  if (resume && std::filesystem::exists(output)) profile = CalibrationProfile::load(output);
  profile.tool_name = "shardplan-calibrate";
  profile.tool_version = shardplan_version();
  profile.source = "shardplan-calibrate " + what;

  MeasureOptions mo;
  mo.min_time_s = min_time_s;
  mo.repetitions = repetitions;
  std::vector<BenchmarkEntry> entries;
  if (what == "hbm" || what == "all") entries.push_back(cuda::hbm_entry(mo, max_bytes));
  if (what == "gemm" || what == "all")
    entries.push_back(cuda::gemm_entry(mo, cuda::gemm_shapes(hidden, ffn, tp, tokens)));
  if (what == "adamw" || what == "all")
    for (auto layout : {AdamwLayout::kFp32, AdamwLayout::kBf16Mixed, AdamwLayout::kBf16})
      entries.push_back(cuda::adamw_entry(layout, mo, max_bytes));
  SteadyClock clock;
  NcclSweepOptions nccl;
  nccl.measure = mo;
  nccl.max_bytes = max_bytes;
  nccl.deadline_s = deadline_s;
  if (what == "nccl" || what == "all") {
#ifdef SHARDPLAN_WITH_MPI
    const int world = topo.size;
    if (world > 1) {
      nccl.group_sizes = {world};
      std::vector<BenchmarkEntry> mpi =
          nccl_sweep_entries([](int) { return cuda::make_mpi_nccl_comm(); }, world, nccl, clock);
      entries.insert(entries.end(), mpi.begin(), mpi.end());
    } else
#endif
    {
      auto v = nccl_sweep_entries(cuda::make_local_nccl_comm, gpus, nccl, clock);
      entries.insert(entries.end(), v.begin(), v.end());
    }
  }
  fill_hardware(profile, gpus, nodes);
  RunnerHooks hooks;
  hooks.save = [&](const CalibrationProfile& p) {
    if (mpi_rank == 0) p.save(output);
  };
  hooks.progress = [&](const std::string& s) {
    if (mpi_rank == 0) std::cerr << "shardplan-calibrate: " << s << "\n";
  };
  const int failed = run_benchmarks(profile, entries, resume, hooks);
  if (mpi_rank == 0) {
    hooks.save(profile);
    std::cout << profile.describe();
  }
  return failed > 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
#ifdef SHARDPLAN_WITH_MPI
  MPI_Init(&argc, &argv);
#endif
  int rc = 2;
  try {
    rc = run(argc, argv);
  } catch (const shardplan::InputError& e) {
    std::cerr << e.what() << "\n";
    rc = 2;
  } catch (const std::exception& e) {
    std::cerr << "shardplan-calibrate: " << e.what() << "\n";
    rc = 1;
  }
#ifdef SHARDPLAN_WITH_MPI
  MPI_Finalize();
#endif
  return rc;
}
