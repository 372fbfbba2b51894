// The backward inside a transformer block, op by op (docs/model.md "Backward inside a block"): the layers'
// transients at their worst op, the closed-form peak of a block unit's backward, and the lowering's order
// (gradients allocated once the saved tensors are consumed), and FSDP2 groups of several blocks, whose hooks
// run per block.
#include <catch2/catch.hpp>

#include "sim_helpers.hpp"
#include "simulator/lowering/units.hpp"

using namespace shardplan;
using shardplan::test::Setup;
using shardplan::test::units_of;

namespace {
const Layer& first_block_layer(const ModelGraph& m, LayerKind kind) {
  for (const Layer* l : m.order())
    if (l->block == 0 && l->kind == kind) return *l;
  FAIL("no layer of that kind in block 0");
  return *m.order().front();
}
}  // namespace

TEST_CASE("a Llama layer's backward transients at its worst op", "[simulator][memory][backward]") {
  // Llama-3-8B, bf16, TP 1: h = q = 4096, kv = 1024, f = 14336; per token (tokens = 1) plus the weight
  // gradient, which does not scale with tokens.
  Setup s("llama3-8b", "dgx-h100", 8);
  const Plan p = s.resolve(Plan{});
  // Attention: wo's weight gradient 4096·4096·2 = 33,554,432, its input gradient (dO) 2q = 8192, then flash
  // attention's dq, dk, dv 2·(4096 + 2·1024) = 12,288; O is still read by the attention backward (not freed).
  CHECK(layer_backward_excess_bytes(first_block_layer(s.model, LayerKind::kAttention), p, 1.0) ==
        33'554'432.0 + 8'192.0 + 12'288.0);
  // SwiGLU: w2's weight gradient 4096·14336·2 = 117,440,512, its input gradient 2f = 28,672, the gate and up
  // output gradients 2·2f = 57,344, less the product (2f) freed after w2's backward.
  CHECK(layer_backward_excess_bytes(first_block_layer(s.model, LayerKind::kMlp), p, 1.0) ==
        117'440'512.0 + 28'672.0 + 57'344.0 - 28'672.0);
  // A norm has no GEMM: the walk uses its input gradient and the residual sum instead.
  CHECK(layer_backward_excess_bytes(first_block_layer(s.model, LayerKind::kNorm), p, 1.0) == 0.0);
}

TEST_CASE("with an accumulated gradient the output projection's weight gradient is freed as written",
          "[simulator][memory][backward]") {
  // Llama-2-7B, bf16, TP 1: h = 4096, f = 11008, T = 4096 tokens (the lane's pp 4 GPipe row: mbs 2 x seq
  // 2048). Every SwiGLU tensor below is 11008 x 4096 x 2 = 90,177,536 bytes: w2's weight gradient, its input
  // gradient (dProduct), the gate and up output gradients, the product.
  //   first micro-batch (dW2 held through the layer): dW2 + dProduct + dGate + dUp - Product = 3 x
  //   90,177,536; later micro-batches under PP no-sync (AccumulateGrad adds dW2 into the fp32 gradient and
  //   frees it before SwiGLU's backward; the lane's trace): max(dW2 + dProduct, dProduct + dGate + dUp -
  //   Product) = 2 x.
  Setup s("llama2-7b", "dgx-h100", 8);
  const Plan p = s.resolve(Plan{});
  const Layer& mlp = first_block_layer(s.model, LayerKind::kMlp);
  CHECK(layer_backward_excess_bytes(mlp, p, 4096.0) == 3 * 90'177'536.0);
  CHECK(layer_backward_excess_bytes(mlp, p, 4096.0, true) == 2 * 90'177'536.0);
  // Attention (h = q = kv = 4096): wo's weight gradient 33,554,432 with dO (2qT = 33,554,432), or dO with dq,
  // dk, dv (3 x 33,554,432): the second, 4 x 33,554,432, where the held one adds wo's weight gradient.
  const Layer& attn = first_block_layer(s.model, LayerKind::kAttention);
  CHECK(layer_backward_excess_bytes(attn, p, 4096.0) == 5 * 33'554'432.0);
  CHECK(layer_backward_excess_bytes(attn, p, 4096.0, true) == 4 * 33'554'432.0);
}

TEST_CASE("a GELU MLP's backward: the up projection's input gradient can be the worst op",
          "[simulator][memory][backward]") {
  // MPT-7B, bf16, TP 1: h = 4096, f = 16384, one column projection (up), GELU, down. At T tokens:
  //   GELU backward (as SwiGLU's mul): down's weight gradient 16384·4096·2 = 134,217,728, its input gradient
  //     2fT, the up output's gradient 2fT, less the GELU output (2fT) freed: 134,217,728 + 32,768·T;
  //   up's input gradient: both weight gradients 2·134,217,728, the up output's gradient 2fT and the input
  //     gradient 2hT, less the consumed up output and GELU output (4fT): 268,435,456 - 24,576·T.
  // T = 2048 (the lane's MPT 7B no-AC row): 201,326,592 vs 218,103,808, the second (16 MiB more, as the
  // trace); T = 4096: 268,435,456 vs 167,772,160, the first.
  Setup s("mpt-7b", "dgx-h100", 8);
  const Plan p = s.resolve(Plan{});
  const Layer& mlp = first_block_layer(s.model, LayerKind::kMlp);
  CHECK(layer_backward_excess_bytes(mlp, p, 2048.0) == 218'103'808.0);
  CHECK(layer_backward_excess_bytes(mlp, p, 4096.0) == 268'435'456.0);
}

TEST_CASE("a block unit's backward peak in closed form: no AC and full AC reach the same op",
          "[simulator][memory][backward]") {
  // Llama-3-8B, 8 GPUs, FSDP2 bf16-mixed, mbs 1, seq 4096: T = 4096 tokens. Per token a block saves
  // 168,072 B (test_memory: 41h + 136): attention_norm 8196, attention 28,800, ffn_norm 8196, MLP 122,880.
  // Reverse walk of one block (the unit's backward starts with all of it saved; the flowing gradient 2h):
  //   MLP:       168,072·T + 117,440,512 + (28,672 + 57,344 - 28,672)·T + 8192·T
  //            = 233,608·T + 117,440,512 = 1,074,290,688 at T = 4096            <- the peak
  //   ffn_norm:  (168,072 - 122,880)·T + 3·117,440,512 (MLP gradients) + 8192 + 2·8192·T + 8192·T
  //            = 69,768·T + 352,329,728 = 638,099,456
  //   attention: (45,192 - 8196)·T + 352,329,728 + 33,554,432 + 20,480·T + 8192·T
  //            = 65,668·T + 385,884,160 = 654,860,288
  //   attention_norm: smaller still (only its own 8196·T saved, all but 4096·2 B of the gradients).
  // The workspace is the peak less what is saved at the start: 117,440,512 + 65,536·4096 = 385,875,968.
  Setup s("llama3-8b", "dgx-h100", 8);
  Plan p;
  p.seq = 4096;
  p.mbs = 1;
  const auto none = units_of(s, s.resolve(p));
  REQUIRE(none.size() == 34);  // embedding, 32 blocks, head
  CHECK(none[1].act_bytes == 168'072LL * 4096);
  CHECK(none[1].recompute_bytes == 0);
  CHECK(none[1].workspace_bytes == 385'875'968LL);
  // Full AC keeps the block input (2h·T) and recomputes the rest (168,072 - 8192)·T when the block's backward
  // starts: the same tensors are live at the MLP's worst op, so the same workspace over act + recompute.
  p.ac = AcMode::kFull;
  const auto full = units_of(s, s.resolve(p));
  CHECK(full[1].act_bytes == 8192LL * 4096);
  CHECK(full[1].recompute_bytes == (168'072LL - 8192) * 4096);
  CHECK(full[1].workspace_bytes == 385'875'968LL);
}

TEST_CASE("the lowering frees a block's saved tensors before it allocates the block's gradients",
          "[simulator][memory][backward]") {
  // Autograd consumes a block's saved tensors while it writes the block's weight gradients, so the unit ends
  // with its gradients alone: in the block's backward task the activations (and the workspace) are freed
  // before the unsharded gradients are allocated. The old order (gradients first) held act + workspace +
  // gradients at once, above any op's live set.
  Setup s("llama3-8b", "dgx-h100", 8);
  Plan p;
  p.seq = 4096;
  Simulator sim(s.model, *s.cluster, *s.costs);
  sim.run(s.resolve(p));
  const Program& prog = sim.program();
  bool seen = false;
  for (const Task& t : prog.tasks) {
    if (t.type != TaskType::kCompute || !t.backward || t.unit != 1) continue;
    int act_free = -1, grad_alloc = -1;
    for (std::uint32_t e = t.first_effect; e < t.first_effect + t.n_effects; ++e) {
      const MemEffect& m = prog.effects[e];
      if (m.category == MemCategory::kActivations && m.delta_bytes < 0 && act_free < 0)
        act_free = static_cast<int>(e);
      if (m.category == MemCategory::kGrads && m.delta_bytes > 0 && grad_alloc < 0)
        grad_alloc = static_cast<int>(e);
    }
    REQUIRE(act_free >= 0);
    REQUIRE(grad_alloc >= 0);
    CHECK(act_free < grad_alloc);
    seen = true;
  }
  CHECK(seen);
}

TEST_CASE("FSDP2 --wrap 2: each block is a unit that all-gathers its two-block group",
          "[simulator][memory][backward]") {
  // fully_shard on a list of two blocks runs the group's hooks per block (docs/model.md "FSDP2 groups of
  // several blocks"). Llama-3-8B block: attention 4096·(4096 + 2·1024 + 4096) = 41,943,040, SwiGLU
  // 3·4096·14336 = 176,160,768, two norms 8192: 218,112,000 parameters; on 8 ranks every dim 0 divides by 8,
  // so a block gathers exactly that many elements and its group partner's as many again.
  Setup s("llama3-8b", "dgx-h100", 8);
  Plan p;
  p.wrap = 2;
  const Plan r = s.resolve(p);
  const auto units = units_of(s, r);
  REQUIRE(units.size() == 34);  // embedding, 32 one-block units, head
  CHECK(units[1].gathered_elems == 218'112'000);
  CHECK(units[1].group_extra_gathered_elems == 218'112'000);
  CHECK(units[1].group_first == 1);
  CHECK(units[2].group_first == 1);
  CHECK(units[3].group_first == 3);
  // Every block's forward and backward gathers the group once: 32 all-gathers of 2·218,112,000 bf16 elements
  // per pass (backward: the group's last block has it from the previous prefetch, its first block gathers it
  // again and prefetches the previous group's last block).
  Simulator sim(s.model, *s.cluster, *s.costs);
  sim.run(r);
  int fwd = 0, bwd = 0;
  for (const Task& t : sim.program().tasks)
    if (t.type == TaskType::kCollective && t.comm_kind == static_cast<std::uint8_t>(CommKind::kAllGather) &&
        t.unit >= 1 && t.unit <= 32)
      ++(t.backward ? bwd : fwd);
  CHECK(fwd == 32);
  CHECK(bwd == 32);
  // Without resharding after forward (ZeRO-2) the group stays gathered: one unit of two blocks.
  p.zero = 2;
  const auto kept = units_of(s, s.resolve(p));
  REQUIRE(kept.size() == 18);
  CHECK(kept[1].group_first == -1);
  CHECK(kept[1].gathered_elems == 2 * 218'112'000LL);
}

TEST_CASE("a grouped MoE's backward workspace holds torch._grouped_mm's outputs whole",
          "[simulator][memory][backward][moe]") {
  // Mixtral 8x7B, FSDP2 bf16-mixed, 8 GPUs, mbs 1, seq 4096, no EP: R = 8192 routed rows; the block's
  // workspace is 2,147,450,880 B (test_moe_backward.cpp), its worst op the gate GEMM's backward. torch.
  // _grouped_mm allocates each output as one tensor (aten GroupedMMUtils.h
  // create_grouped_gemm_output_tensor): in autograd's order down's weight gradient [8, 4096, 14336] x 2 B =
  // 939,524,096, its input gradient R x f = 8192·14,336·2 = 234,881,024, up's weight gradient 939,524,096,
  // then up's input gradient R x h = 67,108,864, which no longer fits (2,181,038,080 > 2,147,450,880): the
  // rest, 33,521,664 B, spreads over the generic tensors. Before, the whole workspace was spread in
  // proportion (no tensor above 410 MB).
  Setup s("mixtral-8x7b", "dgx-h100", 8);
  Plan p;
  p.seq = 4096;
  p.mbs = 1;
  const Plan r = s.resolve(p);
  REQUIRE(units_of(s, r)[1].workspace_bytes == 2'147'450'880LL);
  Simulator sim(s.model, *s.cluster, *s.costs);
  sim.run(r);
  const Program& prog = sim.program();
  std::vector<Bytes> other;  // unit 1's backward allocations in `other`, one entry per tensor
  for (const Task& t : prog.tasks) {
    if (t.type != TaskType::kCompute || !t.backward || t.unit != 1 || !other.empty()) continue;
    for (std::uint32_t e = t.first_effect; e < t.first_effect + t.n_effects; ++e) {
      const MemEffect& m = prog.effects[e];
      if (m.category == MemCategory::kOther && m.delta_bytes > 0)
        for (int i = 0; i < m.count; ++i) other.push_back(m.delta_bytes / m.count);
    }
  }
  REQUIRE(other.size() >= 3);
  CHECK(other[0] == 939'524'096);
  CHECK(other[1] == 234'881'024);
  CHECK(other[2] == 939'524'096);
  Bytes sum = 0;
  for (Bytes b : other) sum += b;
  CHECK(sum == 2'147'450'880LL);
}
