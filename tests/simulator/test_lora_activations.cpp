// What a frozen base no longer saves: autograd saves a linear's input only for its weight gradient
// (torch 2.15 derivatives.yaml `mm`), so under LoRA the inputs of linears without an adapter are not saved,
// while a targeted linear's input is (PEFT's lora_A reads the same x). Expected values from the model's
// dimensions.
#include <catch2/catch.hpp>

#include "sim_helpers.hpp"
#include "simulator/memory/layer_memory.hpp"
#include "simulator/plan/plan.hpp"

using namespace shardplan;
using shardplan::test::Setup;

namespace {

/// Saved bytes per token of the first block's layers (no AC) and of the LM head under plan p.
struct Saved {
  double attention = 0, mlp = 0, head = 0;
};
Saved saved_per_token(const ModelGraph& m, const Plan& p) {
  Saved s;
  for (const Layer* l : m.order()) {
    const double b = layer_saved_bytes(*l, p, 1.0, false);
    if (l->block == 0 && l->kind == LayerKind::kAttention) s.attention = b;
    if (l->block == 0 && l->kind == LayerKind::kMlp) s.mlp = b;
    if (l->kind == LayerKind::kLmHead) s.head = b;
  }
  return s;
}

Saved lora_saved(const std::string& model, int rank, const std::string& targets) {
  Setup base(model, "dgx-h100", 8);
  Plan want;
  want.lora_rank = rank;
  want.lora_targets = targets;
  want.seq = 1024;
  const Plan p = base.resolve(want);
  return saved_per_token(lora_model(base.model, p), p);
}

}  // namespace

TEST_CASE("LoRA: a frozen linear's input is saved only where an adapter reads it", "[lora][activations]") {
  // Llama 3 8B, bf16 (2 bytes), h = 4096, f = 14336, r = 16.
  const double h = 4096, f = 14336, r = 16;
  Setup base("llama3-8b", "dgx-h100", 8);
  Plan fp;
  fp.seq = 1024;
  const Saved full = saved_per_token(base.model, base.resolve(fp));
  // PEFT's default targets (q_proj, v_proj): the attention's input stays (lora_A of q and v reads it) and
  // each adds its [T, r] A output; the MLP's input (gate/up's) and the product (down's input) go: 2(h + f);
  // the LM head's input (the final norm's output) goes: 2h.
  const Saved qv = lora_saved("llama3-8b", 16, "");
  CHECK(qv.attention == Approx(full.attention + 2 * 2 * r));
  CHECK(full.mlp - qv.mlp == Approx(2 * (h + f)));
  CHECK(full.head - qv.head == Approx(2 * h));
  // gate_proj alone: the MLP's input stays (its adapter reads it), the product goes; the attention's input
  // goes (no adapter on q, k or v).
  const Saved gate = lora_saved("llama3-8b", 16, "gate_proj");
  CHECK(full.mlp - gate.mlp == Approx(2 * f - 2 * r));
  CHECK(full.attention - gate.attention == Approx(2 * h));
  // all-linear: every input stays (the head is not targeted by all-linear: its input goes).
  const Saved all = lora_saved("llama3-8b", 16, "all-linear");
  CHECK(all.mlp == Approx(full.mlp + 2 * 3 * r));
  CHECK(all.attention == Approx(full.attention + 2 * 4 * r));
  CHECK(full.head - all.head == Approx(2 * h));
}

TEST_CASE("LoRA: what a frozen base does not save lowers the simulated activations at the peak",
          "[lora][activations]") {
  // Llama 3 8B on 8 GPUs, FSDP2 ZeRO-3, no AC, 4096 tokens a rank: with PEFT's default targets each of the
  // 32 blocks saves 2(h + f) bytes per token fewer in its MLP; the adapters add 2 x 2r per token in its
  // attention. At the peak (backward's start) every block's saved tensors are alive.
  const double h = 4096, f = 14336, r = 16, tokens = 4096, blocks = 32;
  Setup base("llama3-8b", "dgx-h100", 8);
  Plan want;
  want.lora_rank = 16;
  want.seq = 4096;
  want.zero = 3;
  const Plan p = base.resolve(want);
  Setup lora(lora_model(base.model, p), load_cluster_spec("dgx-h100"), 8);
  const Result with = lora.run(want);
  Plan fp = want;
  fp.lora_rank = 0;
  const Result full = base.run(fp);
  const auto act = static_cast<int>(MemCategory::kActivations);
  const double fewer = static_cast<double>(full.breakdown[act] - with.breakdown[act]);
  const double expected = blocks * tokens * (2 * (h + f) - 2 * 2 * r);
  CHECK(fewer >= expected * 0.98);
  CHECK(fewer <= expected * 1.05);  // and the LM head's input (2h per token), transients at the peak
  CHECK(with.peak_bytes < full.peak_bytes);
}
