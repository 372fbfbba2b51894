// Mechanisms the reference lane's traces showed for DDP, FSDP1 and MoE blocks (docs/reference-lane.md, issue
// 14): gradients created in backward under DDP, autocast's weight copies under full AC, a tied weight's two
// gradients, FSDP1's backward prefetch after the loss backward, and a MoE layer's experts walked one at a
// time.
#include <catch2/catch.hpp>

#include "sim_helpers.hpp"
#include "simulator/lowering/units.hpp"
#include "simulator/lowering/units_stages.hpp"

using namespace shardplan;
using shardplan::test::Setup;
using shardplan::test::units_of;
using shardplan::test::walk_category;

namespace {
// A preset with fewer blocks, as the lane runs it (`run.py --layers K`).
ModelGraph with_layers(const std::string& name, int layers) {
  ModelSpec sp = load_model(name).spec();
  sp.layers = layers;
  return ModelGraph::from_spec(sp);
}
Bytes category(const Result& r, MemCategory c) {
  return r.breakdown[static_cast<int>(c)];
}
}  // namespace

TEST_CASE(
    "DDP: no gradient before backward, under full AC only the head's autocast copy at the loss backward",
    "[simulator][memory][ddp]") {
  // The lane's row ref-llama3-8b-g8-layers-2-zero-0-ac-full-mbs-1-seq-4096: Llama 3 8B with 2 blocks,
  // P = 1,486,901,248 parameters, DDP bf16-mixed on 8 GPUs. zero_grad(set_to_none=True) leaves no .grad at
  // the step's start, so at the peak (the loss backward, before any unit's backward) grads are 0 and the
  // Reducer's buckets hold 4P = 5,947,604,992 B (the lane's breakdown: grads=0, comm_buffers=5,947,604,992).
  // The autocast cache died when the forward's autocast region exited: the checkpointed blocks saved only
  // their inputs, the embedding's weight is never cast (aten::embedding is not on autocast's list), so only
  // the head's bf16 copy, V·h·2 = 128,256·4096·2 = 1,050,673,152 B, is live (before: the embedding's and both
  // blocks' copies as well, 2·1,050,673,152 + 2·218,112,000·2 = 2,973,794,304 B).
  Setup s(with_layers("llama3-8b", 2), load_cluster_spec("dgx-h100"), 8);
  Plan p;
  p.zero = 0;
  p.seq = 4096;
  p.mbs = 1;
  p.ac = AcMode::kFull;
  const Result r = s.run(p);
  REQUIRE(s.model.parameters() == 1'486'901'248);
  CHECK(category(r, MemCategory::kGrads) == 0);
  CHECK(category(r, MemCategory::kCommBuffers) == 5'947'604'992LL);
  CHECK(category(r, MemCategory::kGathered) == 1'050'673'152LL);
  // The gradients still count in the state a step holds (memory JSON `persistent.grads`): 4 B per parameter.
  CHECK(r.persistent_split[1] == 5'947'604'992LL);
  // Until the autocast region exits (after the loss) the cache holds every copy: the head's V·h = 525,336,576
  // elements and each block's matmul weights, 218,112,000 less its two norms (8192): 2·(525,336,576 +
  // 2·218,103,808) = 1,923,088,384 B at the most.
  Simulator sim(s.model, *s.cluster, *s.costs);
  sim.run(s.resolve(p));
  CHECK(shardplan::test::max_category_bytes(sim.program(), MemCategory::kGathered) == 1'923'088'384LL);
}

TEST_CASE("DDP: every gradient is created in backward and freed by zero_grad after the step",
          "[simulator][memory][ddp]") {
  // Llama 3 8B with 2 blocks, no AC: the grads category rises from 0 to exactly 4P = 5,947,604,992 B (fp32
  // .grad of every parameter, created by each unit's backward) and is back to 0 after the optimizer step.
  Setup s(with_layers("llama3-8b", 2), load_cluster_spec("dgx-h100"), 8);
  Plan p;
  p.zero = 0;
  p.seq = 2048;
  Simulator sim(s.model, *s.cluster, *s.costs);
  sim.run(s.resolve(p));
  const Program& prog = sim.program();
  CHECK(shardplan::test::max_category_bytes(prog, MemCategory::kGrads) == 5'947'604'992LL);
  Bytes end = 0;
  for (const Task& t : prog.tasks)
    for (std::uint32_t e = t.first_effect; e < t.first_effect + t.n_effects; ++e)
      if (prog.effects[e].category == MemCategory::kGrads) end += prog.effects[e].delta_bytes;
  CHECK(end == 0);
}

TEST_CASE("DDP with tied embeddings: the head's and the embedding's gradients and their sum at once",
          "[simulator][memory][ddp]") {
  // MPT 7B with 2 blocks (tied, V = 50,432, h = 4096): the head's backward writes the tied weight's fp32
  // gradient (V·h·4 = 826,277,888 B), the embedding's backward a second one and their sum a third: at that
  // point every gradient (4P) and two more V·h fp32 tensors, 4P + 1,652,555,776 B, then 4P.
  Setup s(with_layers("mpt-7b", 2), load_cluster_spec("dgx-h100"), 8);
  Plan p;
  p.zero = 0;
  p.seq = 2048;
  p.ac = AcMode::kSelective;
  Simulator sim(s.model, *s.cluster, *s.costs);
  sim.run(s.resolve(p));
  const Bytes P = s.model.parameters();
  CHECK(shardplan::test::max_category_bytes(sim.program(), MemCategory::kGrads) == 4 * P + 1'652'555'776LL);
}

TEST_CASE("FSDP1: the first backward prefetch is issued after the loss's backward", "[simulator][fsdp1]") {
  // FSDP1's root pre-backward hook sits on the logits and fires after the cross-entropy backward: the last
  // block's all-gather comes after the loss backward's buffers (the head's backward task, which carries
  // them), so the loss backward's peak does not hold a block's unsharded parameters (Llama 3 8B, 4 blocks, 8
  // GPUs: the lane's row ref-llama3-8b-g8-layers-4-runtime-fsdp1-ac-none-mbs-1-seq-4096, +3.1 % before, 0.0 %
  // now).
  Setup s(with_layers("llama3-8b", 4), load_cluster_spec("dgx-h100"), 8);
  Plan p;
  p.runtime = Runtime::kFsdp1;
  p.seq = 4096;
  p.mbs = 1;
  Simulator sim(s.model, *s.cluster, *s.costs);
  sim.run(s.resolve(p));
  const Program& prog = sim.program();
  int head_bwd = -1, first_bwd_ag = -1;
  for (std::size_t i = 0; i < prog.tasks.size(); ++i) {
    const Task& t = prog.tasks[i];
    if (t.type == TaskType::kCompute && t.backward && t.unit == 5 && head_bwd < 0)
      head_bwd = static_cast<int>(i);
    if (t.type == TaskType::kCollective && t.backward &&
        t.comm_kind == static_cast<std::uint8_t>(CommKind::kAllGather) && first_bwd_ag < 0)
      first_bwd_ag = static_cast<int>(i);
  }
  REQUIRE(head_bwd >= 0);
  REQUIRE(first_bwd_ag >= 0);
  CHECK(first_bwd_ag > head_bwd);
  CHECK(prog.tasks[static_cast<std::size_t>(first_bwd_ag)].unit == 4);  // the last block
}

TEST_CASE("MoE: the experts' backward one expert at a time", "[simulator][memory][backward][moe]") {
  // Mixtral 8x7B (h = 4096, f = 14,336, 8 experts, top 2), FSDP2 bf16-mixed, 8 GPUs, mbs 1, seq 4096, Hugging
  // Face's loop (--moe-impl loop, as the lane's Mixtral records; torchtitan's grouped experts:
  // test_moe_backward.cpp): T = 4096, C = T·2/8 = 1024 tokens per expert (balanced router). Per expert:
  // weight gradients g_e = 3·4096·14,336·2 = 352,321,536 B; saved tensors (input, gate and up outputs, SiLU,
  // product: 8f B per token) 1024·8·14,336 = 117,440,512 B and its routing tensors (the loop's token order
  // and indices 2·16 B, gathered input, down output and product 3·2·4096·2 B, gathered weights 4 B: 49,188 B
  // per token, moe_tensors.cpp) T·49,188/8 = 25,184,256 B; gate/up output gradients 2·C·f·2 = 58,720,256 B;
  // at its SwiGLU backward only the down projection's dW exists, g_e / 3 = 117,440,512 B. The last of the
  // eight experts is the worst: 7·(352,321,536 - 142,624,768) + 117,440,512 + 58,720,256 = 1,644,038,144,
  // plus the router's gradient 8·4096·2 = 65,536 and two flowing gradients 2·T·h·2 = 67,108,864: the layer's
  // excess 1,711,212,544 over the saved tensors and gradients so far (1,887,502,336 without the routing
  // tensors in the expert's saved set).
  Setup s("mixtral-8x7b", "dgx-h100", 8);
  Plan p;
  p.seq = 4096;
  p.mbs = 1;
  p.moe_impl = MoeImpl::kLoop;
  const Plan rp = s.resolve(p);
  const Layer* moe = nullptr;
  for (const Layer* l : s.model.order())
    if (!moe && l->kind == LayerKind::kMoe) moe = l;
  REQUIRE(moe);
  const detail::UnitContext c(s.model, *s.cluster, *s.costs, rp, runtime_traits(rp));
  detail::MoeGrads g;
  g.experts = 8 * 352'321'536.0;
  g.all = g.experts + 65'536.0;
  CHECK(detail::moe_backward_excess(c, *moe, g, 33'554'432.0) == 1'711'212'544.0);
}

TEST_CASE("FSDP2 tied embeddings: the head's gradient of the tied weight waits for the embedding's",
          "[simulator][memory][fsdp2]") {
  // The lane's row ref-mpt-7b-g8-layers-3-ac-none-mbs-1-seq-2048 (-7.2 % before, -0.4 % now), here with 2
  // blocks: MPT 7B (V = 50,432, h = 4096, tied), FSDP2 on 8 GPUs, bf16-mixed, fp32 reduction. The two uses of
  // the tied weight feed one AccumulateGrad node: autograd sums their gradients in its input buffer before
  // it sets .grad, so the head's dW (V·h·2 = 413,138,944 B) stays alive through every block's backward, the
  // embedding's backward writes a second one and the out-of-place sum a third, then both addends are freed:
  // in order +X (head), +X (embedding), -X, -X for X = 413,138,944 (the sum is the embedding unit's .grad).
  // (seq 1024: the loss's logits buffers, 1024·V·2 and 1024·V·4 B, are not of X's size.)
  Setup s(with_layers("mpt-7b", 2), load_cluster_spec("dgx-h100"), 8);
  Plan p;
  p.seq = 1024;
  p.mbs = 1;
  p.ac = AcMode::kNone;
  Simulator sim(s.model, *s.cluster, *s.costs);
  sim.run(s.resolve(p));
  const Program& prog = sim.program();
  const Bytes X = 50'432LL * 4096 * 2;
  REQUIRE(X == 413'138'944LL);
  const int head = 3;                       // units: embedding, blocks.0, blocks.1, head
  std::vector<std::pair<int, Bytes>> tied;  // (unit, delta) of the V·h activations in backward
  walk_category(prog, MemCategory::kActivations, [&](const Task& t, const MemEffect& e, Bytes) {
    if (t.backward && (e.delta_bytes == X || e.delta_bytes == -X)) tied.emplace_back(t.unit, e.delta_bytes);
  });
  REQUIRE(tied.size() == 4);
  CHECK(tied[0] == std::make_pair(head, X));
  CHECK(tied[1] == std::make_pair(0, X));
  CHECK(tied[2] == std::make_pair(0, -X));
  CHECK(tied[3] == std::make_pair(0, -X));
  // Each post-backward reduces only the gradients that exist: the head's reduce-scatter input is the norm's
  // weight in fp32 (4096·4 = 16,384 B; 4096 rows pad to a multiple of 8 as they are), the embedding's the
  // tied weight's (50,432·4096·4 = 826,277,888 B; 50,432 = 8·6,304). Before, each took the whole group's
  // (826,294,272 B).
  std::vector<std::pair<int, Bytes>> rs_inputs;
  for (const Task& t : prog.tasks)
    if (t.type == TaskType::kCopy && t.backward && (t.unit == 0 || t.unit == head))
      for (std::uint32_t e = t.first_effect; e < t.first_effect + t.n_effects; ++e)
        if (prog.effects[e].category == MemCategory::kCommBuffers && prog.effects[e].delta_bytes > 0)
          rs_inputs.emplace_back(t.unit, prog.effects[e].delta_bytes);
  REQUIRE(rs_inputs.size() == 2);
  CHECK(rs_inputs[0] == std::make_pair(head, Bytes{16'384}));
  CHECK(rs_inputs[1] == std::make_pair(0, Bytes{826'277'888}));
}

TEST_CASE("FSDP2 with TP: the embedding's Partial gradient and its redistributed shard at once",
          "[simulator][memory][fsdp2][tp]") {
  // The lane's row ref-llama3-70b-g64-layers-3-tp-8-ac-selective-mbs-1-seq-4096 (-3.1 % before, -0.1 % now):
  // Llama 3 70B (V = 128,256, h = 8192), TP 8 on 64 GPUs. The row-wise embedding's backward writes a Partial
  // gradient of the whole V x h (V·h·2 = 2,101,346,304 B: the unit's local V/8 rows plus the other 7/8);
  // FSDP2's post-backward redistributes it to the parameter's Shard(0) placement, a new local tensor of
  // V/8·h·2 = 262,668,288 B, while the Partial one is still referenced. Over the embedding's backward the
  // gradients rise by at most 2,101,346,304 + 262,668,288 = 2,364,014,592 B (the sharded fp32 gradient,
  // V/8·h/8·4 = 65,667,072 B, is allocated after the redistributed tensor is freed).
  Setup s(with_layers("llama3-70b", 3), load_cluster_spec("dgx-h100"), 64);
  Plan p;
  p.tp = 8;
  p.seq = 4096;
  p.mbs = 1;
  p.ac = AcMode::kSelective;
  Simulator sim(s.model, *s.cluster, *s.costs);
  sim.run(s.resolve(p));
  Bytes before = -1, hi = 0;
  walk_category(sim.program(), MemCategory::kGrads, [&](const Task& t, const MemEffect& e, Bytes cur) {
    if (!t.backward || t.unit != 0) return;
    if (before < 0) before = cur - e.delta_bytes;
    hi = std::max(hi, cur);
  });
  REQUIRE(before >= 0);
  CHECK(hi - before == 2'364'014'592LL);
}
