// Benchmarks (not tests): in-process simulation speed and plan-search throughput. Results go in
// docs/performance.md. Usage: shardplan-bench [iterations]
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>

#include "planner/search.hpp"
#include "simulator/presets.hpp"

using namespace shardplan;
using Clock = std::chrono::steady_clock;

static double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::max(1, std::atoi(argv[1])) : 50;
  {
    // Llama-3.1-405B, 16 micro-batches, 16,384 GPUs, FSDP2 ZeRO-3 x TP 8.
    ModelGraph m = load_model("llama3.1-405b");
    Cluster c(load_cluster_spec("dgx-h100"), 16384);
    CostModel cm(c);
    Plan p;
    p.tp = 8;
    p.mbs = 1;
    p.ac = AcMode::kFull;
    p = resolve_plan(p, m, c, 16 * 2048);
    Simulator sim(m, c, cm);
    sim.run(p);  // warm: buffers sized
    auto t0 = Clock::now();
    double step = 0;
    for (int i = 0; i < iters; ++i) step += sim.run(p).step_s;
    const double per_run = seconds_since(t0) / iters;
    const double tasks = static_cast<double>(sim.program().tasks.size());
    fmt::print("simulate llama3.1-405b, {} GPUs, tp {}, {} micro-batches: {:.3f} ms per simulation, {} tasks, {:.2f} M tasks/s "
               "(step {:.2f} s)\n",
               c.gpus(), p.tp, p.grad_accum, 1e3 * per_run, tasks, tasks / per_run / 1e6, step / iters);
  }
  for (const char* model : {"llama3-70b", "llama3.1-405b"}) {
    const bool big = std::string(model) == "llama3.1-405b";
    ModelGraph m = load_model(model);
    Cluster c(load_cluster_spec("dgx-h100"), big ? 16384 : 2048);
    CostModel cm(c);
    SearchSpace sp;
    sp.runtimes = {Runtime::kFsdp2, Runtime::kFsdp1, Runtime::kDeepSpeed};
    sp.global_batch = 2048;
    sp.seq = 8192;
    for (int threads : {1, 2}) {
      SearchOptions o;
      o.threads = threads;
      auto t0 = Clock::now();
      SearchOutcome out = search_plans(m, c, cm, sp, o);
      const double s = seconds_since(t0);
      fmt::print("plan {} on {} GPUs, global batch 2048, seq 8192, {} thread(s): {:.3f} s, {} considered ({:.0f}/s), {} simulated "
                 "({:.0f}/s), {} fit\n",
                 model, c.gpus(), threads, s, out.stats.considered, static_cast<double>(out.stats.considered) / s, out.stats.evaluated,
                 static_cast<double>(out.stats.evaluated) / s, out.stats.fitting);
    }
  }
  return 0;
}
