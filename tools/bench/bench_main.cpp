// Benchmarks (not tests): in-process simulation speed and plan-search throughput. Results go in
// docs/performance.md. Usage: shardplan-bench [iterations] [accum | scale | moe | moe-scale] ("scale": only
// the Llama 3 405B searches at 16,384 and ~131,072 GPUs; "moe-scale": the MoE presets on 2,048 H100s)
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "planner/search.hpp"
#include "simulator/memory/memory.hpp"
#include "simulator/model/model.hpp"
#include "simulator/plan/plan.hpp"

using namespace shardplan;
using Clock = std::chrono::steady_clock;

static double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Expert-parallel search (issue 16): the CLI's default `plan` search (three runtimes, compile and async TP
// searched, TP within the node, EP degrees for MoE) of Qwen3-30B-A3B on 16 H100s, global batch 64, seq 4096
// (`shardplan plan --model qwen3-30b-a3b --gpus 16 --global-batch 64 --seq 4096`), on 1 thread and on all
// cores.
static int bench_moe_search() {
  ModelGraph m = load_model("qwen3-30b-a3b");
  Cluster c(load_cluster_spec("dgx-h100"), 16);
  CostModel cm(c);
  SearchSpace sp;
  sp.runtimes = {Runtime::kFsdp2, Runtime::kFsdp1, Runtime::kDeepSpeed};
  sp.compile = {false, true};
  sp.async_tp = {false, true};
  sp.global_batch = 64;
  sp.seq = 4096;
  for (int threads : {1, 0}) {
    SearchOptions o;
    o.threads = threads;
    o.headroom = kDefaultHeadroom;
    auto t0 = Clock::now();
    const std::clock_t c0 = std::clock();
    SearchOutcome out = search_plans(m, c, cm, sp, o);
    const double s = seconds_since(t0);
    const double cpu_s = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
    fmt::print(
        "plan qwen3-30b-a3b on 16 GPUs, global batch 64, seq 4096, {} thread(s): {:.3f} s wall, {:.3f} s "
        "CPU, {} "
        "considered, {} simulated ({:.0f}/s wall), {} fit, {} replayed; recommends {}\n",
        threads == 0 ? std::string("all") : std::to_string(threads), s, cpu_s, out.stats.considered,
        out.stats.evaluated, static_cast<double>(out.stats.evaluated) / s, out.stats.fitting,
        out.stats.replayed, out.plans.empty() ? std::string("nothing") : plan_to_flags(out.plans[0].plan));
    std::fflush(stdout);
  }
  return 0;
}

// MoE searches at scale (issue 30): the CLI's default `plan` search of each MoE preset on 2,048 H100s (and
// Qwen3-30B-A3B on 64), global batch 2 x GPUs, seq 4096 (`shardplan plan --model M --cluster dgx-h100 --gpus
// G --global-batch 2G --seq 4096`), 2 threads; process CPU time and wall time. The CLI adds the model's
// loading and the output; the search is the rest (issue 30's goal: under 2 s on 2 cores).
static int bench_moe_scale() {
  struct Case {
    const char* model;
    int gpus;
  };
  for (const Case& k : {Case{"deepseek-v3", 2048}, Case{"qwen3-235b-a22b", 2048}, Case{"qwen3-30b-a3b", 2048},
                        Case{"qwen3-30b-a3b", 64}, Case{"llama4-scout", 2048}, Case{"gpt-oss-120b", 2048}}) {
    ModelGraph m = load_model(k.model);
    Cluster c(load_cluster_spec("dgx-h100"), k.gpus);
    CostModel cm(c);
    SearchSpace sp;
    sp.runtimes = {Runtime::kFsdp2, Runtime::kFsdp1, Runtime::kDeepSpeed};
    sp.compile = {false, true};
    sp.async_tp = {false, true};
    sp.global_batch = 2 * static_cast<std::int64_t>(k.gpus);
    sp.seq = 4096;
    SearchOptions o;
    o.threads = 2;
    auto t0 = Clock::now();
    const std::clock_t c0 = std::clock();
    SearchOutcome out = search_plans(m, c, cm, sp, o);
    const double s = seconds_since(t0);
    const double cpu_s = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
    fmt::print(
        "plan {} on {} H100, global batch {}, seq 4096, 2 threads: {:.3f} s wall, {:.3f} s CPU, {} "
        "considered, "
        "{} simulated, {} fit, {} replayed; recommends {}\n",
        k.model, k.gpus, sp.global_batch, s, cpu_s, out.stats.considered, out.stats.evaluated,
        out.stats.fitting, out.stats.replayed,
        out.plans.empty() ? std::string("nothing") : plan_to_flags(out.plans[0].plan));
    std::fflush(stdout);
  }
  return 0;
}

// Llama 3 405B at scale (issue 16): the CLI's default search at 16,384 and ~131,072 GPUs.
static void bench_405b_searches() {
  // Llama 3 405B at scale (issue 16): the CLI's default `plan` search (three runtimes, compile and async TP
  // searched; PP plans join on clusters this large) at the paper's 16,384 H100s and 2,048 x 8,192 tokens,
  // the same with PP pinned to the paper's degree 16 and schedule (interleaved 1F1B, V 4), and ~131,072
  // GPUs: H100 (dgx-h100) at 16,384 sequences, and GB200 NVL72 racks (gb200-nvl72-multirack, 1,820 racks =
  // 131,040 GPUs: 131,072 is no whole number of 72-GPU racks) at 16,380 sequences (a global batch of 2,048
  // leaves no valid plan there: dp x micro-batches must divide it and PP needs micro-batches >= pp). 2
  // threads; process CPU time and wall time.
  struct Case {
    const char* cluster;
    int gpus;
    std::int64_t global_batch;
    bool pin_pp;
  };
  for (const Case& k :
       {Case{"dgx-h100", 16384, 2048, false}, Case{"dgx-h100", 16384, 2048, true},
        Case{"dgx-h100", 131072, 16384, false}, Case{"gb200-nvl72-multirack", 131040, 16380, false}}) {
    ModelGraph m = load_model("llama3.1-405b");
    Cluster c(load_cluster_spec(k.cluster), k.gpus);
    CostModel cm(c);
    SearchSpace sp;
    sp.runtimes = {Runtime::kFsdp2, Runtime::kFsdp1, Runtime::kDeepSpeed};
    sp.compile = {false, true};
    sp.async_tp = {false, true};
    sp.global_batch = k.global_batch;
    sp.seq = 8192;
    if (k.pin_pp) {
      sp.pp = {16};
      sp.pp_schedules = {PpSchedule::kInterleaved1F1B};
      sp.virtual_stages = {4};
    }
    SearchOptions o;
    o.threads = 2;
    auto t0 = Clock::now();
    const std::clock_t c0 = std::clock();
    SearchOutcome out = search_plans(m, c, cm, sp, o);
    const double s = seconds_since(t0);
    const double cpu_s = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
    std::string rec = "nothing fits";
    if (!out.plans.empty()) {
      const Result& r = out.plans.at(0);
      rec = fmt::format("{} tp {} pp {} {} V {} mbs {} ga {} ({:.0f} tokens/s/GPU, MFU {:.1f} %)",
                        to_string(r.plan.runtime), r.plan.tp, r.plan.pp, to_string(r.plan.pp_schedule),
                        r.plan.virtual_stages, r.plan.mbs, r.plan.grad_accum, r.tokens_per_s_per_gpu,
                        100 * r.mfu);
    }
    fmt::print(
        "plan llama3.1-405b on {} x {}, global batch {} x 8192{}, 2 threads: {:.3f} s wall, {:.3f} s CPU; "
        "{} "
        "considered, {} simulated, {} fit; recommends {}\n",
        k.gpus, k.cluster, k.global_batch, k.pin_pp ? ", pp 16 interleaved-1f1b V 4 pinned" : "", s, cpu_s,
        out.stats.considered, out.stats.evaluated, out.stats.fitting, rec);
    std::fflush(stdout);
  }
}

// The 405B recipe's pipelined simulation (TP 8, PP 16, 16 micro-batches), V = 1, 2, 4.
static void bench_405b_pipelined(int iters) {
  // One pipelined simulation of the 405B recipe (TP 8, PP 16, DP 128, 16 micro-batches): every stage's
  // slice simulated for one micro-batch (pp x V stage programs, whatever the micro-batch count), then the
  // schedule's timeline over pp x V x m actions.
  ModelGraph m = load_model("llama3.1-405b");
  Cluster c(load_cluster_spec("dgx-h100"), 16384);
  CostModel cm(c);
  for (int V : {1, 2, 4}) {
    Plan p;
    p.tp = 8;
    p.pp = 16;
    p.pp_schedule = V == 1 ? PpSchedule::k1F1B : PpSchedule::kInterleaved1F1B;
    p.virtual_stages = V;
    p.seq = 8192;
    p = resolve_plan(p, m, c, 2048);
    Simulator sim(m, c, cm);
    for (bool replay : {false, true}) {
      sim.set_allocator_replay(replay);
      sim.run(p);
      auto t0 = Clock::now();
      const int n = std::max(1, iters / 5);
      double step = 0;
      for (int i = 0; i < n; ++i) step += sim.run(p).step_s;
      fmt::print(
          "simulate llama3.1-405b pipelined, 16384 GPUs, tp 8 pp 16 {} V {}, {} micro-batches, allocator "
          "replay "
          "{}: {:.2f} ms per simulation (step {:.3f} s)\n",
          to_string(p.pp_schedule), V, p.grad_accum, replay ? "on" : "off", 1e3 * seconds_since(t0) / n,
          step / n);
    }
  }
}

// One 405B simulation with FSDP2 ZeRO-3 x TP 8 and 16 micro-batches, with and without the allocator replay.
static void bench_405b_simulate(int iters) {
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
  for (bool replay : {false, true}) {
    sim.set_allocator_replay(replay);
    sim.run(p);  // warm: buffers sized
    auto t0 = Clock::now();
    double step = 0;
    for (int i = 0; i < iters; ++i) step += sim.run(p).step_s;
    const double per_run = seconds_since(t0) / iters;
    const double tasks = static_cast<double>(sim.program().tasks.size());
    fmt::print(
        "simulate llama3.1-405b, {} GPUs, tp {}, {} micro-batches, allocator replay {}: {:.3f} ms per "
        "simulation, {} tasks, {} memory effects, {:.2f} M tasks/s (step {:.2f} s)\n",
        c.gpus(), p.tp, p.grad_accum, replay ? "on" : "off", 1e3 * per_run, tasks,
        sim.program().effects.size(), tasks / per_run / 1e6, step / iters);
  }
}

// The 70B and 405B default searches on 1 and 2 threads.
static void bench_dense_searches() {
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
      fmt::print(
          "plan {} on {} GPUs, global batch 2048, seq 8192, {} thread(s): {:.3f} s, {} considered "
          "({:.0f}/s), {} simulated "
          "({:.0f}/s), {} fit, {} replayed through the caching allocator\n",
          model, c.gpus(), threads, s, out.stats.considered, static_cast<double>(out.stats.considered) / s,
          out.stats.evaluated, static_cast<double>(out.stats.evaluated) / s, out.stats.fitting,
          out.stats.replayed);
    }
  }
}

// Search time against accumulation (issue 18).
static void bench_accumulation() {
  // Search time against accumulation (issue 18 "fast at every batch size"): the CLI's default `plan` search
  // (three runtimes, compile and async TP searched, TP within the node) of Llama-3-8B on 8 H100s and
  // Llama-3-70B on 64 H100s at global batches giving 1, 8, 64 (and more) micro-batches per step at
  // micro-batch 1, with the steady-state extension (simulator/simulate/steady_state.hpp) and with every
  // micro-batch simulated; 1 thread.
  struct Case {
    const char* model;
    int gpus;
    std::vector<std::int64_t> batches;
  };
  for (const Case& k :
       {Case{"llama3-8b", 8, {8, 64, 512, 1024}}, Case{"llama3-70b", 64, {64, 512, 2048, 4096}}}) {
    ModelGraph m = load_model(k.model);
    Cluster c(load_cluster_spec("dgx-h100"), k.gpus);
    CostModel cm(c);
    for (std::int64_t gb : k.batches) {
      for (bool steady : {true, false}) {
        SearchSpace sp;
        sp.runtimes = {Runtime::kFsdp2, Runtime::kFsdp1, Runtime::kDeepSpeed};
        sp.compile = {false, true};
        sp.async_tp = {false, true};
        sp.global_batch = gb;
        sp.seq = 8192;
        SearchOptions o;
        o.threads = 1;
        o.simulator.steady_state = steady;
        auto t0 = Clock::now();
        const std::clock_t c0 = std::clock();
        SearchOutcome out = search_plans(m, c, cm, sp, o);
        const double s = seconds_since(t0);
        // Process CPU time: on a shared, loaded machine the wall time measures the other jobs too.
        const double cpu_s = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
        const Plan& rec = out.plans.at(0).plan;
        fmt::print(
            "plan {} on {} GPUs, global batch {} (accumulation {} at mbs 1), seq 8192, 1 thread, {}: "
            "{:.3f} s "
            "CPU ({:.3f} s wall), {} simulated ({:.0f}/s CPU); recommends {} tp {} mbs {} ga {} ({:.1f} "
            "tokens/s/GPU)\n",
            k.model, k.gpus, gb, gb / k.gpus, steady ? "steady-state extension" : "every micro-batch", cpu_s,
            s, out.stats.evaluated, static_cast<double>(out.stats.evaluated) / cpu_s, to_string(rec.runtime),
            rec.tp, rec.mbs, rec.grad_accum, out.plans.at(0).tokens_per_s_per_gpu);
        std::fflush(stdout);
      }
    }
  }
}

// The caching-allocator replay on a synthetic FSDP-like trace.
static void bench_allocator(int iters) {
  // Caching-allocator replay: a synthetic FSDP-like trace (80 layers x 8 micro-batches: per layer an
  // all-gather output on stream 1, six activations of varied sizes on stream 0 kept until backward, a
  // reduce-scatter buffer on stream 2), replayed warm with reset() between runs.
  struct Ev {
    bool alloc;
    Bytes size;
    int stream;
    int slot;
  };
  std::vector<Ev> evs;
  int slots = 0;
  const Bytes act[6] = {3 * kMiB + 4096, 48 * kMiB, 192 * kMiB, 48 * kMiB, 700 * kKiB, 96 * kMiB + 512};
  for (int mb = 0; mb < 8; ++mb) {
    std::vector<int> saved;
    for (int l = 0; l < 80; ++l) {
      const int ag = slots++;
      evs.push_back({true, 218 * kMiB + 2 * kMiB * (l % 3), 1, ag});
      for (int k = 0; k < 6; ++k) {
        saved.push_back(slots);
        evs.push_back({true, act[k] + 512 * (mb % 4), 0, slots++});
      }
      evs.push_back({false, 0, 0, ag});
    }
    for (int l = 79; l >= 0; --l) {
      const int ag = slots++, rs = slots++;
      evs.push_back({true, 218 * kMiB + 2 * kMiB * (l % 3), 1, ag});
      evs.push_back({true, 27 * kMiB, 2, rs});
      for (int k = 0; k < 6; ++k) {
        evs.push_back({false, 0, 0, saved.back()});
        saved.pop_back();
      }
      evs.push_back({false, 0, 0, ag});
      evs.push_back({false, 0, 0, rs});
    }
  }
  std::vector<BlockId> ids(static_cast<std::size_t>(slots));
  for (bool expandable : {false, true}) {
    AllocatorConfig cfg;
    cfg.expandable_segments = expandable;
    CachingAllocator alloc(cfg);
    auto replay = [&] {
      alloc.reset(cfg);
      for (const Ev& e : evs) {
        if (e.alloc)
          ids[static_cast<std::size_t>(e.slot)] = alloc.malloc(e.size, e.stream);
        else
          alloc.free(ids[static_cast<std::size_t>(e.slot)]);
      }
    };
    replay();  // warm: containers sized
    const int reps = 5 * iters;
    auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) replay();
    const double per_run = seconds_since(t0) / reps;
    fmt::print(
        "allocator replay ({}), {} events: {:.3f} ms per replay, {:.1f} M events/s (peak reserved {:.2f} "
        "GiB, "
        "allocated {:.2f} GiB)\n",
        expandable ? "expandable segments" : "default", evs.size(), 1e3 * per_run,
        static_cast<double>(evs.size()) / per_run / 1e6,
        static_cast<double>(alloc.stats().reserved_peak_bytes) / static_cast<double>(kGiB),
        static_cast<double>(alloc.stats().allocated_peak_bytes) / static_cast<double>(kGiB));
  }
}

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::max(1, std::atoi(argv[1])) : 50;
  // A second argument "accum" runs only the search-against-accumulation benchmark.
  const bool only_accum = argc > 2 && std::string(argv[2]) == "accum";
  // "moe" runs only the expert-parallel search benchmark (issue 16).
  if (argc > 2 && std::string(argv[2]) == "moe") return bench_moe_search();
  // "moe-scale": only the MoE presets' searches on 2,048 (and 64) H100s (issue 30).
  if (argc > 2 && std::string(argv[2]) == "moe-scale") return bench_moe_scale();
  const bool only_scale = argc > 2 && std::string(argv[2]) == "scale";
  if (!only_accum) {
    bench_405b_searches();
    bench_405b_pipelined(iters);
  }
  if (only_scale) return 0;
  if (!only_accum) {
    bench_405b_simulate(iters);
    bench_dense_searches();
  }
  bench_accumulation();
  if (!only_accum) bench_allocator(iters);
  return 0;
}
