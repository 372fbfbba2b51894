// Activation offload (--activation-offload; docs/model.md "Activation offload"): the saved tensors that leave
// the GPU under each runtime's mechanism (torch save_on_cpu, DeepSpeed cpu_checkpointing, Megatron-core
// cpu_offloading), the pinned host bytes, the PCIe time and what the capability table refuses.
#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "sim_helpers.hpp"
#include "simulator/plan/knobs.hpp"

using namespace shardplan;
using shardplan::test::Setup;
using shardplan::test::units_of;

namespace {
const CommStats& comm(const Result& r, CommKind k) {
  return r.comm[static_cast<int>(k)];
}
/// The saved bytes of the plan's units, and of its first block unit.
Bytes saved_bytes(const Setup& s, const Plan& p) {
  Bytes b = 0;
  for (const SimUnit& u : units_of(s, s.resolve(p))) b += u.act_bytes;
  return b;
}
Bytes block_saved_bytes(const Setup& s, const Plan& p) {
  for (const SimUnit& u : units_of(s, s.resolve(p)))
    if (u.blocks > 0) return u.act_bytes;
  return 0;
}
Plan llama(Runtime rt, int zero, AcMode ac) {
  Plan p;
  p.runtime = rt;
  p.zero = zero;
  p.ac = ac;
  p.seq = 8192;
  return p;
}
}  // namespace

TEST_CASE("activation offload: DeepSpeed cpu_checkpointing frees all but the last two checkpoint inputs",
          "[activation_offload][memory]") {
  // Llama 3 8B, 32 blocks, full AC: each block keeps only its input, T x h x 2 B = 8192 x 4096 x 2 =
  // 67,108,864 B. _ActivationOffloadEngine(keep_last_count=1) never copies the last block's input; the one
  // before it is copied but stays in the forward stash (max_fwd_stash_count=2); inputs 0..29 are dropped
  // once the block two later is offloaded, so at the peak (the last block's backward, every input still
  // held without offload) the GPU holds 30 x 67,108,864 = 2,013,265,920 B less. The host holds the 31
  // copied inputs per rank, 8 ranks a node: 31 x 67,108,864 x 8.
  Setup s("llama3-8b", "dgx-h100", 8);
  Plan p = llama(Runtime::kDeepSpeed, 3, AcMode::kFull);
  const Result base = s.run(p);
  p.activation_offload = kActivationOffloadAll;
  const Result r = s.run(p);
  const Bytes input = Bytes{8192} * 4096 * 2;
  CHECK(block_saved_bytes(s, p) == input);
  CHECK(base.peak_bytes - r.peak_bytes == 30 * input);
  CHECK(base.allocator.peak_allocated_bytes - r.allocator.peak_allocated_bytes == 30 * input);
  CHECK(r.activation_host_bytes == 31 * input);
  CHECK(r.host_bytes_per_node == 31 * input * 8);
  // PCIe: 31 inputs down, 30 back up (the stashed one is used from the GPU).
  CHECK(comm(r, CommKind::kOffloadCopy).bytes_per_rank == Approx(static_cast<double>(61 * input)));
  CHECK(r.step_s >= base.step_s);
}

TEST_CASE("activation offload: save_on_cpu moves every saved tensor, both copies are exposed",
          "[activation_offload][time]") {
  // torch save_on_cpu(pin_memory=True) under FSDP2: every unit's saved group goes down after its forward and
  // comes back before its backward, each copy on the compute stream, so the compute stream waits for them:
  // the step grows by exactly the exposed offload time, which is the PCIe time 2 x saved bytes / (pcie_Bps x
  // pcie_efficiency) less what runs while the compute stream waits on an all-gather anyway (a few percent).
  // The saved tensors include the weights the matmuls and norms save (the unsharded bf16 parameters): Llama
  // 3 8B's 8,030,261,248 parameters but the embedding's 128,256 x 4,096 = 525,336,576 (embedding saves its
  // indices), x 2 B = 15,009,849,344 B per micro-batch, whatever the sharding.
  Setup s("llama3-8b", "dgx-h100", 8);
  Plan p = llama(Runtime::kFsdp2, 3, AcMode::kNone);
  const Result base = s.run(p);
  p.activation_offload = kActivationOffloadAll;
  const Result r = s.run(p);
  const Bytes weights = (Bytes{8030261248} - Bytes{128256} * 4096) * 2;
  REQUIRE(weights == 15009849344);
  Bytes unit_weights = 0;
  for (const SimUnit& u : units_of(s, s.resolve(p))) unit_weights += u.saved_weight_bytes;
  CHECK(unit_weights == weights);
  // A tensor saved by k ops is packed k times (test_offload_packs.cpp): per block, T = 8,192, h = q = 4,096,
  // head_dim 128: the attention's input twice more, SDPA's output and the MLP's input once more (T x 8h =
  // 268,435,456) and the rotary table twice (2 x T x 64 x 8 = 8,388,608): 276,824,064 x 32 blocks, plus the
  // embedding's token ids (T x 8 = 65,536): 8,858,435,584 B.
  Bytes repacked = 0;
  for (const SimUnit& u : units_of(s, s.resolve(p))) repacked += u.repacked_act_bytes;
  CHECK(repacked == Bytes{276824064} * 32 + 65536);
  const Bytes saved = saved_bytes(s, p) + repacked + weights;
  CHECK(r.activation_host_bytes == saved);
  CHECK(r.host_bytes_per_node == saved * 8);
  const CommStats& c = comm(r, CommKind::kOffloadCopy);
  CHECK(c.bytes_per_rank == Approx(2.0 * static_cast<double>(saved)));
  CHECK(r.step_s - base.step_s == Approx(c.exposed_s));
  CHECK(c.exposed_s <= c.time_s);
  CHECK(c.exposed_s >= 0.95 * c.time_s);
  // Without offload the peak holds every block's saved tensors at the start of backward; with it, one
  // unit's (the one being reloaded) at a time: the drop is at least 30 of the 32 blocks' saved bytes.
  CHECK(base.peak_bytes - r.peak_bytes >= 30 * block_saved_bytes(s, p));
}

TEST_CASE("activation offload: more host bandwidth is never slower, and offload never beats no offload",
          "[activation_offload][time]") {
  Plan p = llama(Runtime::kFsdp2, 3, AcMode::kNone);
  p.seq = 4096;
  double prev = 0;
  for (double pcie : {64e9, 32e9, 16e9, 8e9}) {  // falling bandwidth: the step never gets faster
    ClusterSpec spec = load_cluster_spec("dgx-h100");
    spec.node.pcie_Bps = pcie;
    Setup s(load_model("llama3-8b"), spec, 8);
    Plan none = p;
    const Result base = s.run(none);
    Plan off = p;
    off.activation_offload = kActivationOffloadAll;
    const Result r = s.run(off);
    INFO("pcie " << pcie);
    CHECK(r.step_s >= base.step_s);
    CHECK(r.step_s >= prev);
    prev = r.step_s;
  }
  // Megatron's copies overlap the next layer's compute: still never faster than without.
  for (double pcie : {64e9, 8e9}) {
    ClusterSpec spec = load_cluster_spec("dgx-h100");
    spec.node.pcie_Bps = pcie;
    Setup s(load_model("llama3-8b"), spec, 8);
    Plan m = llama(Runtime::kMegatron, 1, AcMode::kNone);
    const Result base = s.run(m);
    m.activation_offload = 16;
    CHECK(s.run(m).step_s >= base.step_s);
  }
}

TEST_CASE("activation offload: Megatron cpu_offloading_num_layers moves the first N layers",
          "[activation_offload][memory]") {
  // N = 16 of 32 layers: the host holds their saved tensors; at the peak (the last layer's backward, before
  // any reload: the reload runs one layer ahead, and the double buffer is dropped at the commits of layers
  // N - 1 and N) the GPU holds exactly those N layers' saved bytes less.
  Setup s("llama3-8b", "dgx-h100", 8);
  Plan p = llama(Runtime::kMegatron, 1, AcMode::kNone);
  const Result base = s.run(p);
  p.activation_offload = 16;
  const Result r = s.run(p);
  const Bytes layer = block_saved_bytes(s, p);
  CHECK(r.activation_host_bytes == 16 * layer);
  CHECK(base.peak_bytes - r.peak_bytes == 16 * layer);
  CHECK(comm(r, CommKind::kOffloadCopy).bytes_per_rank == Approx(2.0 * 16 * static_cast<double>(layer)));
  // More layers offloaded: less on the GPU, more on the host.
  p.activation_offload = 24;
  const Result r24 = s.run(p);
  CHECK(r24.peak_bytes < r.peak_bytes);
  CHECK(r24.activation_host_bytes == 24 * layer);
}

TEST_CASE("activation offload: what a runtime does not have is refused naming --activation-offload",
          "[activation_offload][capabilities]") {
  Setup s("llama3-8b", "dgx-h100", 8);
  auto refused = [&](Plan p, const char* what) {
    INFO(what);
    CHECK_THROWS_WITH(s.resolve(p), Catch::Contains("--activation-offload") && Catch::Contains(what));
  };
  Plan p = llama(Runtime::kFsdp2, 3, AcMode::kNone);
  p.activation_offload = 4;
  refused(p, "save_on_cpu");  // no layer count
  p.activation_offload = kActivationOffloadAll;
  p.ac = AcMode::kFull;
  refused(p, "not modelled");
  Plan d = llama(Runtime::kDeepSpeed, 3, AcMode::kNone);
  d.activation_offload = kActivationOffloadAll;
  refused(d, "use --ac full");
  Plan m = llama(Runtime::kMegatron, 1, AcMode::kNone);
  m.activation_offload = kActivationOffloadAll;
  refused(m, "cpu_offloading_num_layers < num_layers");
  m.activation_offload = 32;
  refused(m, "below the model's 32 blocks");
  m.activation_offload = 8;
  m.ac = AcMode::kSelective;
  refused(m, "recomputation");
  // The knob reads and prints none | all | N; none prints nothing (repro lines without it are unchanged).
  const Knob* k = find_knob("--activation-offload");
  REQUIRE(k != nullptr);
  Plan x;
  CHECK(k->get(x).empty());
  CHECK(k->set(x, "all").empty());
  CHECK(plan_to_flags(x).find("--activation-offload all") != std::string::npos);
  CHECK(k->set(x, "12").empty());
  CHECK(x.activation_offload == 12);
  CHECK(k->set(x, "none").empty());
  CHECK(x.activation_offload == 0);
  CHECK_FALSE(k->set(x, "half").empty());
}
