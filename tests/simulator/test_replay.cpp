// The caching-allocator replay of a simulated step (simulator/memory/replay.cpp) and the tensor identity of
// the lowering's memory effects (simulator/lowering/lowering_tensors.cpp): the replay's allocations add up to
// the aggregate walk, the streams are the runtime's, reserved is at least the per-stream lower bound, and the
// knob selects expandable segments.
#include <algorithm>
#include <catch2/catch.hpp>

#include "sim_helpers.hpp"
#include "simulator/memory/replay.hpp"
#include "simulator/simulate/summary.hpp"

using namespace shardplan;
using shardplan::test::Setup;

namespace {

struct Case {
  const char* what;
  Runtime runtime;
  int zero;
  AcMode ac;
  int grad_accum;
  bool hold_logits;
  bool fused;
};

/// The plan simulated with the allocator replay, then by the planner's walk (one effect per buffer).
std::pair<Result, Result> with_and_without_replay(const Setup& s, const Plan& rp) {
  Simulator sim(s.model, *s.cluster, *s.costs);
  Result with = sim.run(rp);
  sim.set_allocator_replay(false);
  return {with, sim.run(rp)};
}

}  // namespace

TEST_CASE("allocator replay: the replayed requests are the aggregate walk, tensor by tensor",
          "[simulator][replay]") {
  Setup s("llama3-8b", "dgx-h100", 8);
  for (const Case c : {Case{"fsdp2 zero3", Runtime::kFsdp2, 3, AcMode::kNone, 1, false, true},
                       Case{"fsdp2 zero3 selective ga2 hold foreach", Runtime::kFsdp2, 3, AcMode::kSelective,
                            2, true, false},
                       Case{"fsdp2 zero2 full", Runtime::kFsdp2, 2, AcMode::kFull, 2, false, true},
                       Case{"ddp", Runtime::kFsdp2, 0, AcMode::kFull, 1, false, true},
                       Case{"fsdp1 zero3", Runtime::kFsdp1, 3, AcMode::kSelective, 2, false, true},
                       Case{"deepspeed zero1", Runtime::kDeepSpeed, 1, AcMode::kFull, 2, false, true},
                       Case{"deepspeed zero3", Runtime::kDeepSpeed, 3, AcMode::kFull, 1, false, true}}) {
    INFO(c.what);
    Plan p;
    p.runtime = c.runtime;
    p.zero = c.zero;
    p.ac = c.ac;
    p.seq = 2048;
    p.grad_accum = c.grad_accum;
    p.hold_logits = c.hold_logits;
    p.fused_optimizer = c.fused;
    const Plan rp = s.resolve(p);
    Simulator sim(s.model, *s.cluster, *s.costs);
    const Result r = sim.run(rp);
    REQUIRE(r.allocator.replayed);
    // Replay without a capacity: step 2 starts with the optimizer state and every buffer that lives across
    // steps, so its requested (unrounded) peak is the aggregate walk's steady-state peak to the byte; step 1,
    // whose optimizer state appears only at its optimizer step, is never above it.
    AllocatorReplay replay;
    const ReplayOutcome& o = replay.run(sim.program(), AllocatorConfig{});
    CHECK(o.stats.requested_peak_bytes == sim.timeline().peak_bytes);
    CHECK(o.stats.num_ooms == 0);
    // Everything the step allocates it frees: what is live at the end is the persistent state (+ held
    // logits).
    Bytes initial = 0;
    for (const MemEffect& e : sim.program().initial) initial += e.delta_bytes;
    CHECK(o.stats.requested_bytes == initial);
    // Reserved is at least each stream's peak of rounded allocations, all at once (no segment is released
    // without memory pressure), and at least what is allocated.
    CHECK(o.stats.reserved_peak_bytes >= reserved_lower_bound(sim.timeline()));
    CHECK(o.stats.reserved_peak_bytes >= o.stats.allocated_peak_bytes);
    CHECK(r.peak_reserved_bytes == o.stats.reserved_peak_bytes);  // same replay (the device is not short)
  }
}

TEST_CASE("allocator replay: FSDP2's buffers are tensors on the runtime's streams", "[simulator][replay]") {
  // Llama-3-8B block: 9 parameters (q, k, v, o, gate, up, down, two norms); 8 GPUs. The all-gather output is
  // one flat buffer per unit on the all-gather stream; copy-out makes one tensor per parameter on the
  // default stream; the sharded gradients are per parameter on the reduce-scatter stream.
  Setup s("llama3-8b", "dgx-h100", 8);
  Plan p;
  p.seq = 2048;
  Simulator sim(s.model, *s.cluster, *s.costs);
  sim.run(s.resolve(p));
  const Program& prog = sim.program();
  const auto& units = sim.units();
  int copy_out_tensors = -1, ag_buffers = 0, rs_grad_tensors = 0;
  for (const Task& t : prog.tasks) {
    if (t.unit != 1 || t.micro_batch != 0) continue;  // blocks.0, forward and backward
    int tensors_here = 0;
    for (std::uint32_t e = t.first_effect; e < t.first_effect + t.n_effects; ++e) {
      const MemEffect& fx = prog.effects[e];
      REQUIRE(fx.tensor >= 0);
      if (fx.delta_bytes <= 0) continue;
      if (fx.category == MemCategory::kGathered && fx.pool == kPoolAllGather) {
        ++ag_buffers;
        CHECK(fx.count == 1);
        CHECK(fx.delta_bytes == units[1].gathered_elems * 2);  // bf16 flat output
      }
      if (fx.category == MemCategory::kGathered && fx.pool == kPoolDefault && t.type == TaskType::kCopy)
        tensors_here += fx.count;
      if (fx.category == MemCategory::kGrads && fx.pool == kPoolReduceScatter) rs_grad_tensors += fx.count;
    }
    if (tensors_here > 0 && copy_out_tensors < 0) copy_out_tensors = tensors_here;
  }
  CHECK(ag_buffers == 2);  // forward and backward all-gather of blocks.0
  CHECK(copy_out_tensors == 9);
  CHECK(rs_grad_tensors == 9);
}

TEST_CASE("allocator replay: --allocator expandable replays with expandable segments",
          "[simulator][replay]") {
  Setup s("llama3-8b", "dgx-h100", 8);
  Plan p;
  p.seq = 4096;
  const Result d = s.run(p);
  p.allocator = AllocatorMode::kExpandable;
  const Result x = s.run(p);
  CHECK(d.allocator.mode == AllocatorMode::kDefault);
  CHECK(x.allocator.mode == AllocatorMode::kExpandable);
  // Same tensors: the same allocated peak (512-byte rounding in both modes).
  CHECK(x.allocator.peak_allocated_bytes == d.allocator.peak_allocated_bytes);
  // Expandable segments map 2 / 20 MiB pages instead of whole rounded segments: no cudaMalloc segments, and
  // here (docs/allocator.md "Reference-lane traces": 0.9-6.1 GiB saved on similar traces) less reserved.
  CHECK(x.allocator.segments == 0);
  CHECK(d.allocator.segments > 0);
  CHECK(x.peak_reserved_bytes <= d.peak_reserved_bytes);
  CHECK(x.peak_reserved_bytes >= x.allocator.peak_allocated_bytes);
}

TEST_CASE("planner pass without the replay: one effect per buffer, same walk, reserved = the lower bound",
          "[simulator][replay]") {
  Setup s("llama3-8b", "dgx-h100", 8);
  Plan p;
  p.seq = 2048;
  p.ac = AcMode::kSelective;
  const Plan rp = s.resolve(p);
  Simulator sim(s.model, *s.cluster, *s.costs);
  const Result with = sim.run(rp);
  const std::size_t effects_with = sim.program().effects.size();
  sim.set_allocator_replay(false);
  const Result without = sim.run(rp);
  CHECK_FALSE(without.allocator.replayed);
  CHECK(without.peak_bytes == with.peak_bytes);
  CHECK(without.step_s == with.step_s);
  CHECK(sim.program().effects.size() < effects_with);
  CHECK(without.peak_reserved_bytes == reserved_lower_bound(sim.timeline()));
  CHECK(without.peak_reserved_bytes <= with.peak_reserved_bytes);
}

TEST_CASE("planner pass without the replay: held logits are released as with the replay",
          "[simulator][replay]") {
  // The training loop's reference to the previous step's logits is in the step's initial totals; the loss
  // drops it. Without tensor lists that free needs a group of its own (the planner's first pass aborted with
  // "activations not released at the end of the step": 1,050,673,152 B = 4 x 2048 x 128,256, the fp32
  // logits).
  Setup s("llama3-8b", "dgx-h100", 16);
  for (int accum : {1, 3}) {
    Plan p;
    p.seq = 2048;
    p.ac = AcMode::kSelective;
    p.hold_logits = true;
    p.grad_accum = accum;
    const auto [with, without] = with_and_without_replay(s, s.resolve(p));
    CHECK(without.peak_bytes == with.peak_bytes);
    CHECK(without.step_s == with.step_s);
  }
}

TEST_CASE("allocator replay: FSDP2 before pytorch PR 129721 reduces on the reduce-scatter stream",
          "[simulator][replay]") {
  // Llama-3-8B blocks.0 on 8 GPUs, fp32 reduction of fp32 sharded parameters. Its parameters: q and o
  // 4096 x 4096 (16,777,216 each), k and v 1024 x 4096 (4,194,304 each), gate, up, down 14,336 x 4096
  // (58,720,256 each), two norms of 4,096: 218,112,000 elements, every dim 0 a multiple of 8 (no padding).
  // The reduce-scatter input is the unsharded gradient in fp32: 218,112,000 x 4 = 872,448,000 B; the reduced
  // shard 218,112,000 / 8 x 4 = 109,056,000 B.
  Setup s("llama3-8b", "dgx-h100", 8);
  for (const bool legacy : {false, true}) {
    INFO("rs_input_rs_stream " << legacy);
    Plan p;
    p.seq = 2048;
    p.rs_input_rs_stream = legacy;
    Simulator sim(s.model, *s.cluster, *s.costs);
    sim.run(s.resolve(p));
    const Program& prog = sim.program();
    // blocks.0's allocations of reduction buffers and sharded gradients, in order (the all-gather stream's
    // bf16 casts are left out).
    std::vector<MemEffect> allocs;
    for (const Task& t : prog.tasks) {
      if (t.unit != 1) continue;
      for (std::uint32_t e = t.first_effect; e < t.first_effect + t.n_effects; ++e) {
        const MemEffect& fx = prog.effects[e];
        if (fx.delta_bytes > 0 && fx.pool != kPoolAllGather &&
            (fx.category == MemCategory::kCommBuffers ||
             (fx.category == MemCategory::kGrads && fx.pool == kPoolReduceScatter)))
          allocs.push_back(fx);
      }
    }
    if (legacy) {
      // pytorch 415cc262 foreach_reduce: `reduce_scatter_input` and `post_reduce_output` under
      // `torch.cuda.stream(reduce_scatter_stream)`; the sharded gradients are `torch.as_strided` views of the
      // output: one allocation, no copy.
      REQUIRE(allocs.size() == 2);
      CHECK(allocs[0].category == MemCategory::kCommBuffers);
      CHECK(allocs[0].pool == kPoolReduceScatter);
      CHECK(allocs[0].delta_bytes == 872'448'000);
      CHECK(allocs[1].category == MemCategory::kGrads);
      CHECK(allocs[1].pool == kPoolReduceScatter);
      CHECK(allocs[1].count == 1);
      CHECK(allocs[1].delta_bytes == 109'056'000);
    } else {
      // torch >= 2.5: the input on the default stream, then the output and the 9 per-parameter gradients (in
      // runs of equal sizes: 2,048 B norm, 8 MiB q, 2 x 4 MiB k and v, ...) on the reduce-scatter stream.
      REQUIRE(allocs.size() >= 3);
      CHECK(allocs[0].pool == kPoolDefault);
      CHECK(allocs[0].delta_bytes == 872'448'000);
      CHECK(allocs[1].category == MemCategory::kCommBuffers);
      CHECK(allocs[1].pool == kPoolReduceScatter);
      CHECK(allocs[1].delta_bytes == 109'056'000);
      Bytes grads = 0;
      int tensors = 0;
      for (std::size_t i = 2; i < allocs.size(); ++i) {
        CHECK(allocs[i].category == MemCategory::kGrads);
        grads += allocs[i].delta_bytes;
        tensors += allocs[i].count;
      }
      CHECK(grads == 109'056'000);
      CHECK(tensors == 9);
    }
  }
}

TEST_CASE("eager forward transients: the complex rotary's temporaries and the pre-residual outputs",
          "[simulator][replay]") {
  // Reference-lane trace of a Llama 3 8B block (torchtitan 0.3.0's apply_rotary_emb, eager): wq's and wk's
  // bf16 outputs, their fp32 copies and the complex products, 10 bytes per element of q (4,096) and k
  // (1,024), die when the rotary returns; the output projections' outputs (2h) die after the residual add.
  Setup s("llama3-8b", "dgx-h100", 8);
  const Layer* attn = nullptr;
  const Layer* mlp = nullptr;
  for (const Layer* l : s.model.order()) {
    if (l->block != 0) continue;
    if (l->kind == LayerKind::kAttention) attn = l;
    if (l->kind == LayerKind::kMlp) mlp = l;
    if (l->kind == LayerKind::kNorm) CHECK(test::act_life_bytes(*l, ActLife::kTransient) == 0);
  }
  REQUIRE(attn);
  REQUIRE(mlp);
  CHECK(test::act_life_bytes(*attn, ActLife::kTransient) == 51200.0);
  CHECK(test::act_life_bytes(*attn, ActLife::kOutput) == 8192.0);
  CHECK(test::act_life_bytes(*mlp, ActLife::kTransient) == 0);
  CHECK(test::act_life_bytes(*mlp, ActLife::kOutput) == 8192.0);

  // In the lowering: blocks.0's forward allocates and frees, within its own task, each of the rotary's
  // temporaries in the lane's order (2,048 tokens x wq's 8,192 B, wk's 2,048, xq.float()'s 16,384,
  // xk.float()'s 4,096 and the complex products' 16,384 and 4,096 per token), then the outputs of wo and w2
  // (2,048 x 8,192 B each); compiled it does not, and without tensor lists it is one transient (the same
  // peak).
  Bytes kept = 0;  // activations the forward task allocates and does not free
  auto transients = [&](const Plan& p, bool tensors) {
    Simulator sim(s.model, *s.cluster, *s.costs);
    sim.set_allocator_replay(tensors);
    sim.run(s.resolve(p));
    const Program& prog = sim.program();
    std::vector<Bytes> freed_in_task;  // per tensor group allocated and freed within the task: its bytes
    kept = 0;
    for (const Task& t : prog.tasks) {
      if (t.unit != 1 || t.micro_batch != 0 || t.backward || t.type != TaskType::kCompute) continue;
      std::vector<std::pair<std::int32_t, Bytes>> groups;  // in order of first allocation
      for (std::uint32_t e = t.first_effect; e < t.first_effect + t.n_effects; ++e) {
        const MemEffect& a = prog.effects[e];
        if (a.category != MemCategory::kActivations) continue;
        auto it =
            std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == a.tensor; });
        if (a.delta_bytes > 0) {
          if (it == groups.end())
            groups.emplace_back(a.tensor, a.delta_bytes);
          else
            it->second += a.delta_bytes;
        } else if (it != groups.end() && it->second == -a.delta_bytes) {
          freed_in_task.push_back(it->second);
          it->second = 0;
        }
      }
      for (const auto& g : groups) kept += g.second;
    }
    return freed_in_task;
  };
  Plan p;
  p.seq = 2048;
  p.ac = AcMode::kNone;
  const std::vector<Bytes> rotary = {2048 * 8192,  2048 * 2048, 2048 * 16384, 2048 * 4096,
                                     2048 * 16384, 2048 * 4096, 2048 * 8192,  2048 * 8192};
  CHECK(transients(p, true) == rotary);
  // The planner's walk: one transient, the unit's layer-by-layer peak over its saved tensors.
  CHECK(transients(p, false).size() == 1);
  p.compile = true;
  CHECK(transients(p, true).empty());
  p.compile = false;
  // Full AC: the checkpointed forward keeps only the block's input (2,048 x 8,192 B; here the next block's,
  // which this block's last residual add makes); every layer's no-AC saved set, the temporaries and the
  // outputs are freed within the task: the first norm's rstd (its input is the checkpoint's), the
  // attention's 13 tensors, the second norm's input (the residual stream, at the block's end) and rstd, the
  // MLP's 6: 22.
  p.ac = AcMode::kFull;
  const std::vector<Bytes> full = transients(p, true);
  CHECK(kept == 2048 * 8192);
  CHECK(std::count(full.begin(), full.end(), Bytes{2048 * 16384}) == 2);  // the fp32 q copy and product
  CHECK(full.size() == 22);

  // The planner's walk lowers the same peak as the replay's tensors, and the replay's reserved is never below
  // the walk's per-stream lower bound.
  p.ac = AcMode::kSelective;
  const auto [with, without] = with_and_without_replay(s, s.resolve(p));
  CHECK(without.peak_bytes == with.peak_bytes);
  CHECK(with.peak_reserved_bytes >= without.peak_reserved_bytes);
}

TEST_CASE("allocator replay: the first allocation that fails ends the replay, as PyTorch raises there",
          "[simulator][replay]") {
  // A plan replayed against a capacity below its allocated peak: PyTorch's malloc frees its cache, retries
  // once and raises OutOfMemoryError (CUDACachingAllocator.cpp malloc); the replay stops at that allocation:
  // one OOM, and no malloc after it.
  Setup s("llama3-8b", "dgx-h100", 8);
  Plan p;
  p.seq = 8192;
  p.grad_accum = 2;
  const Plan rp = s.resolve(p);
  Simulator sim(s.model, *s.cluster, *s.costs);
  sim.run(rp);
  AllocatorReplay replay;
  const AllocatorStats full = replay.run(sim.program(), AllocatorConfig{}).stats;
  AllocatorConfig cfg;
  cfg.capacity_bytes = full.allocated_peak_bytes / 2;
  const AllocatorStats capped = replay.run(sim.program(), cfg).stats;
  CHECK(capped.num_ooms == 1);
  CHECK(capped.malloc_calls == capped.first_oom_malloc_index + 1);
  CHECK(capped.malloc_calls < full.malloc_calls);
  CHECK(capped.reserved_peak_bytes <= cfg.capacity_bytes);
}

TEST_CASE(
    "allocator replay of a truncated step: the steady micro-batch repeated equals the whole step's replay",
    "[simulator][replay][steady]") {
  // The simulator lowers micro-batches 0, 1, 2 and the last; the replay runs micro-batch 2 once per skipped
  // micro-batch (its tensors renamed per copy) and skips the copies once the allocator's state repeats. Every
  // figure the report takes from the replay must equal the replay of the whole step's program.
  struct C {
    const char* what;
    const char* model;
    int gpus;
    Runtime runtime;
    int zero;
    AcMode ac;
    int grad_accum;
    bool hold_logits, expandable;
    int ep;
    double capacity_scale;  // of the device memory; < 1: at the capacity, with retries
  };
  for (const C c : {C{"fsdp2 zero3 selective", "llama3-8b", 8, Runtime::kFsdp2, 3, AcMode::kSelective, 16,
                      false, false, 1, 1.0},
                    C{"fsdp2 zero2 full, held logits", "llama3-8b", 8, Runtime::kFsdp2, 2, AcMode::kFull, 9,
                      true, false, 1, 1.0},
                    C{"fsdp2 zero3 none, expandable", "llama3-8b", 8, Runtime::kFsdp2, 3, AcMode::kNone, 12,
                      false, true, 1, 1.0},
                    C{"fsdp1 zero3 selective", "llama3-8b", 8, Runtime::kFsdp1, 3, AcMode::kSelective, 10,
                      false, false, 1, 1.0},
                    C{"deepspeed zero2 full", "llama3-8b", 8, Runtime::kDeepSpeed, 2, AcMode::kFull, 11,
                      false, false, 1, 1.0},
                    C{"fsdp2 zero3 at the capacity", "llama3-8b", 8, Runtime::kFsdp2, 3, AcMode::kSelective,
                      16, false, false, 1, 0.62},
                    C{"qwen3-30b-a3b ep 8", "qwen3-30b-a3b", 16, Runtime::kFsdp2, 3, AcMode::kFull, 8, false,
                      false, 8, 1.0}}) {
    INFO(c.what);
    ClusterSpec spec = load_cluster_spec("dgx-h100");
    spec.gpu.memory_bytes = static_cast<Bytes>(static_cast<double>(spec.gpu.memory_bytes) * c.capacity_scale);
    Setup s(load_model(c.model), spec, c.gpus);
    Plan p;
    p.runtime = c.runtime;
    p.zero = c.zero;
    p.ac = c.ac;
    p.seq = c.gpus > 8 ? 4096 : 8192;
    p.grad_accum = c.grad_accum;
    p.hold_logits = c.hold_logits;
    p.ep = c.ep;
    p.allocator = c.expandable ? AllocatorMode::kExpandable : AllocatorMode::kDefault;
    const Plan rp = s.resolve(p);
    Simulator extended(s.model, *s.cluster, *s.costs);
    SimulatorOptions full_options;
    full_options.steady_state = false;
    Simulator full(s.model, *s.cluster, *s.costs, full_options);
    const Result a = extended.run(rp), b = full.run(rp);
    INFO((extended.stats().last_fallback ? extended.stats().last_fallback : "none"));
    CHECK(extended.stats().extended == 1);
    REQUIRE(a.allocator.replayed);
    CHECK(a.allocator.peak_reserved_bytes == b.allocator.peak_reserved_bytes);
    CHECK(a.allocator.peak_allocated_bytes == b.allocator.peak_allocated_bytes);
    CHECK(a.allocator.segments == b.allocator.segments);
    CHECK(a.allocator.device_allocs == b.allocator.device_allocs);
    CHECK(a.allocator.alloc_retries == b.allocator.alloc_retries);
    CHECK(a.allocator.oom == b.allocator.oom);
    CHECK(a.allocator.reserved_peak_phase == b.allocator.reserved_peak_phase);
    CHECK(a.peak_reserved_bytes == b.peak_reserved_bytes);
    CHECK(a.peak_bytes == b.peak_bytes);
    CHECK(a.fits == b.fits);
  }
}
