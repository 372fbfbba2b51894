// The chunked loss in the whole step (docs/model.md "Chunked loss", lowering_chunked_loss.cpp): what the loss
// call leaves to the decoder's backward under FSDP2 (torch 2.15, torchtitan 0.3.0 ChunkedLossWrapper), as the
// reference lane's trace of Llama 3 8B with 2 blocks shows it (tools/reference/run.py --loss-impl chunked,
// tests/reference/test_chunked_loss.py).
#include <catch2/catch.hpp>

#include "sim_helpers.hpp"
#include "simulator/lowering/units.hpp"

using namespace shardplan;
using shardplan::test::Setup;
using shardplan::test::units_of;

namespace {

/// The lane's row: Llama 3 8B with 2 blocks on 8 GPUs, seq 4,096, full AC, with loss `loss`.
struct LaneRow {
  Setup s{with_blocks(2), load_cluster_spec("dgx-h100"), 8};
  static ModelGraph with_blocks(int layers) {
    ModelSpec sp = load_model("llama3-8b").spec();
    sp.layers = layers;
    return ModelGraph::from_spec(sp);
  }
  static Plan plan(LossImpl loss) {
    Plan p;
    p.seq = 4096;
    p.ac = AcMode::kFull;
    p.loss_impl = loss;
    return p;
  }
};

/// The head unit's backward compute task (its memory: the loss's backward, the norm's gradient, the
/// reduction): the running total of `cat` before its effects and the highest during them, and the number of
/// the head unit's backward all-gathers.
struct HeadBackward {
  Bytes before = -1, high = -1;
  int gathers = 0;
};

HeadBackward head_backward(const Program& prog, MemCategory cat, int head) {
  HeadBackward h;
  Bytes cur = 0;
  for (const Task& t : prog.tasks) {
    const bool compute = t.unit == head && t.backward && t.type == TaskType::kCompute && h.before < 0;
    if (compute) h.before = h.high = cur;
    for (std::uint32_t e = t.first_effect; e < t.first_effect + t.n_effects; ++e)
      if (prog.effects[e].category == cat) {
        cur += prog.effects[e].delta_bytes;
        if (compute) h.high = std::max(h.high, cur);
      }
    if (t.unit == head && t.backward && t.type == TaskType::kCollective &&
        t.comm_kind == static_cast<std::uint8_t>(CommKind::kAllGather))
      ++h.gathers;
  }
  return h;
}

}  // namespace

TEST_CASE("chunked loss: the head unit's backward after the loss call",
          "[simulator][memory][loss][chunked]") {
  // Llama 3 8B with 2 blocks on 8 GPUs, seq 4,096, full AC, 8 chunks, bf16-mixed with an fp32 reduction:
  // V = 128,256, D = 4,096, V D = 525,336,576 (divisible by 8: no padding).
  LaneRow row;
  Setup& s = row.s;
  const Plan r = s.resolve(LaneRow::plan(LossImpl::kChunked));
  const std::vector<SimUnit> units = units_of(s, r);
  const int head = static_cast<int>(units.size()) - 1;
  // The head unit [norm, lm_head]: lm_head's gradient is reduced inside the loss call, so its own
  // post-backward reduces only the norm's D elements (shard D / 8 = 512, gathered 4,096).
  REQUIRE(units[static_cast<std::size_t>(head)].has_loss);
  CHECK(units[static_cast<std::size_t>(head)].loss_reduced_elems == 525'336'576);
  CHECK(units[static_cast<std::size_t>(head)].reduced_shard_elems == 512);
  CHECK(units[static_cast<std::size_t>(head)].reduced_gathered_elems == 4096);
  Simulator sim(s.model, *s.cluster, *s.costs);
  sim.run(r);
  const Program& prog = sim.program();
  // When the head's backward compute starts (the norm's backward), against the lane's trace at the norm's
  // backward (event 623 of tools/reference/run.py --model llama3-8b --layers 2 --gpus 8 --seq 4096 --ac full
  // --loss-impl chunked --loss-chunks 8): the last chunk's fp32 reduce-scatter input, V D x 4 =
  // 2,101,346,304 B, still held by FSDP2's reduce_scatter_states (the lane frees it at the head's
  // post-backward), and no other communication buffer;
  const HeadBackward comm = head_backward(prog, MemCategory::kCommBuffers, head);
  CHECK(comm.before == 2'101'346'304LL);
  // the gathered head group, (V D + D) x 2 = 1,050,681,344 B, gathered again after the wrapper's reshard, and
  // the last block it prefetched, 436,224,000 B (the lane: 1,486,905,344 B);
  const HeadBackward gathered = head_backward(prog, MemCategory::kGathered, head);
  CHECK(gathered.before == 1'050'681'344LL + 436'224'000LL);
  // gradients: lm_head's sharded gradient from the loss call's reduce-scatter, V D x 4 / 8 = 262,668,288 B
  // (the lane's grads), then the norm's unsharded bf16 gradient, D x 2 = 8,192 B, and no more (before: the
  // whole unit's, (V D + D) x 2 = 1,050,681,344 B, no shard yet, and the input freed in the loss call).
  const HeadBackward grads = head_backward(prog, MemCategory::kGrads, head);
  CHECK(grads.before == 262'668'288LL);
  CHECK(grads.high == 262'668'288LL + 8'192);
  // The wrapper resharded lm_head's group after the loop (loss.py:772): the backward gathers it once (the
  // lane: one all-gather of 1,050,681,344 B at the head's backward; no second gather for the norm).
  CHECK(comm.gathers == 1);
}

TEST_CASE("chunked loss: one extra reduce-scatter, the same persistent gradients",
          "[simulator][memory][loss][chunked]") {
  // The head weight's reduce-scatter moves from the head unit's post-backward into the loss call: the same
  // number of reduce-scatters plus one (the head unit still reduces its norm), and the step keeps the same
  // gradient shards as with the eager loss (the memory JSON's persistent grads).
  LaneRow row;
  Setup& s = row.s;
  const Plan p = LaneRow::plan(LossImpl::kChunked), e = LaneRow::plan(LossImpl::kEager);
  const Result eager = s.run(e);
  const Result chunked = s.run(p);
  CHECK(chunked.persistent_split[1] == eager.persistent_split[1]);
  auto reduce_scatters = [&](const Plan& q) {
    Simulator sim(s.model, *s.cluster, *s.costs);
    sim.run(s.resolve(q));
    int n = 0;
    for (const Task& t : sim.program().tasks)
      if (t.type == TaskType::kCollective &&
          t.comm_kind == static_cast<std::uint8_t>(CommKind::kReduceScatter))
        ++n;
    return n;
  };
  CHECK(reduce_scatters(p) == reduce_scatters(e) + 1);
}
