// The loss layer's tensor lists (simulator/model/loss_tensors.cpp): each kernel's live bytes at its forward
// and backward peaks and what it saves, against the closed forms of the real losses' allocations
// (tools/reference/loss_tensors.py: torchtitan 0.3.0 cross_entropy_loss, transformers ForCausalLMLoss and
// Megatron-core vocab_parallel_cross_entropy on CPU tensors at (T, V) = (64, 1000), (128, 4096), (256, 2048);
// the compiled loss from inductor's output code), and the lowering and lower bound reading them.
#include <catch2/catch.hpp>

#include "sim_helpers.hpp"

using namespace shardplan;
using shardplan::test::Setup;

namespace {
struct Walk {
  double fwd_peak = 0, bwd_peak = 0, saved = 0, to_head = 0;
};
// Walks kernel k's list op by op as the lowering does, in bytes per T x V element (compute dtype `bc`, loss
// dtype `lb`; per-token tensors left out: T = 1, V large), without hold_logits.
Walk walk(LossKernel k, double bc, double lb) {
  const ModelGraph m = ModelGraph::from_spec(load_model("llama3-8b").spec());
  std::vector<const LossTensor*> list;
  for (const Layer* l : m.order())
    if (l->kind == LayerKind::kLoss) list = loss_tensors_of(l->loss_tensors, k);
  REQUIRE(!list.empty());
  const LossOps o = loss_ops(k);
  Walk w;
  double live = 0;
  for (int op = 0; op < o.ops; ++op) {
    for (const LossTensor* t : list)
      if (t->made == op && t->vocab) live += loss_dtype_bytes(t->dtype, bc, lb);
    double& peak = op < o.forward_ops ? w.fwd_peak : w.bwd_peak;
    peak = std::max(peak, live);
    for (const LossTensor* t : list)
      if (t->freed == op && t->made != kLossCarried && t->vocab) live -= loss_dtype_bytes(t->dtype, bc, lb);
  }
  for (const LossTensor* t : list) {
    if (t->vocab && loss_saved(*t, o)) w.saved += loss_dtype_bytes(t->dtype, bc, lb);
    if (t->freed == kLossToHead) w.to_head += loss_dtype_bytes(t->dtype, bc, lb);
  }
  return w;
}
}  // namespace

TEST_CASE("Loss tensors: each kernel's peaks match the real loss's allocations",
          "[simulator][memory][loss]") {
  // torchtitan / HF eager, bf16 logits, fp32 loss. Measured: forward mm (2), _to_copy fp32 (4),
  // _log_softmax (4, saved) -> 10; backward nll_loss_backward (4), _log_softmax_backward_data (4) with the
  // saved output -> 12, then _to_copy bf16 (2) for the head.
  Walk e = walk(LossKernel::kEager, 2, 4);
  CHECK(e.fwd_peak == 10);
  CHECK(e.bwd_peak == 12);
  CHECK(e.saved == 4);
  CHECK(e.to_head == 2);
  // 16-bit loss: logits (2) + log-softmax (2) = 4; backward saved + two gradients = 6, the last to the head.
  e = walk(LossKernel::kEager16, 2, 2);
  CHECK(e.fwd_peak == 4);
  CHECK(e.bwd_peak == 6);
  CHECK(e.to_head == 2);
  // Loss parallel (fp32): the saved output and zeros_like, exp, their sum = 16; then the product replaces
  // exp.
  e = walk(LossKernel::kEagerParallel, 2, 4);
  CHECK(e.fwd_peak == 10);
  CHECK(e.bwd_peak == 16);
  // Compiled: the saved bf16 logits (2) and the one bf16 gradient (2) = 4.
  e = walk(LossKernel::kCompiled, 2, 4);
  CHECK(e.fwd_peak == 2);
  CHECK(e.bwd_peak == 4);
  CHECK(e.saved == 2);
  // Compiled loss parallel: logits (2) + two fp32 buffers (8) = 10 forward; saved fp32 (4) + bf16 grad = 6.
  e = walk(LossKernel::kCompiledParallel, 2, 4);
  CHECK(e.fwd_peak == 10);
  CHECK(e.bwd_peak == 6);
  // Megatron-core: bf16 logits (2) + the fp32 copy made the softmax in place (4) = 6 forward; backward the
  // gradient in the softmax's storage (4) and the bf16 cast (2) = 6. Measured: forward mm (2), _to_copy
  // fp32 (4); backward _to_copy bf16 (2), no other vocabulary-sized buffer.
  e = walk(LossKernel::kMegatron, 2, 4);
  CHECK(e.fwd_peak == 6);
  CHECK(e.bwd_peak == 6);
  CHECK(e.saved == 4);
  CHECK(e.to_head == 2);
  // Every kernel hands the head one gradient in the compute dtype (the head frees logits_elems x bc).
  for (LossKernel k :
       {LossKernel::kEagerModelUpcast, LossKernel::kEagerModelUpcastParallel, LossKernel::kEagerParallel16})
    CHECK(walk(k, 2, k == LossKernel::kEagerParallel16 ? 2 : 4).to_head == 2);
}

TEST_CASE("Loss tensors: the kernel follows the runtime, loss_impl, TP and loss dtype", "[simulator][loss]") {
  Plan p;
  p.runtime = Runtime::kFsdp2;
  CHECK(loss_kernel(p, runtime_traits(p)) == LossKernel::kEager);
  p.tp = 2;
  CHECK(loss_kernel(p, runtime_traits(p)) == LossKernel::kEagerParallel);
  p.compile = true;
  CHECK(loss_kernel(p, runtime_traits(p)) == LossKernel::kCompiledParallel);
  p.tp = 1;
  p.loss_dtype = Dtype::kBf16;
  CHECK(loss_kernel(p, runtime_traits(p)) == LossKernel::kCompiled);
  p.compile = false;
  CHECK(loss_kernel(p, runtime_traits(p)) == LossKernel::kEager16);
  p.runtime = Runtime::kMegatron;
  CHECK(loss_kernel(p, runtime_traits(p)) == LossKernel::kMegatron);
}

TEST_CASE("Loss tensors: the lower bound's saved loss bytes per kernel", "[simulator][memory][loss]") {
  // Llama 3 8B (V = 128,256), one sequence of 4,096 tokens: T V = 525,336,576.
  const ModelGraph m = load_model("llama3-8b");
  const double T = 4096, TV = T * 128256;
  Plan p;
  p.mbs = 1;
  p.seq = 4096;
  // Eager: the fp32 log-softmax output.
  CHECK(loss_saved_bytes(m, p, T) == 4 * TV);
  // Compiled: the bf16 logits and two fp32 statistics per token.
  p.loss_impl = LossImpl::kCompiled;
  CHECK(loss_saved_bytes(m, p, T) == 2 * TV + 8 * T);
  // Megatron-core: the fp32 softmax, target_mask (bool) and masked_target_1d (int64) per token.
  p.loss_impl.reset();
  p.runtime = Runtime::kMegatron;
  CHECK(loss_saved_bytes(m, p, T) == 4 * TV + 9 * T);
}

TEST_CASE("Loss tensors: the lowering's loss peak grows by the kernel's backward bytes per vocabulary entry",
          "[simulator][memory][loss][megatron]") {
  // One Llama-2-7B-shaped block, 8 GPUs, full AC, 8 x 4,096 tokens (T = 32,768), vocabularies 256,000 and
  // 128,000: the activations' highest point is the loss backward, and nothing else among the activations
  // depends on V, so the difference of the two maxima is the kernel's backward peak per T x V times
  // T x 128,000: Megatron-core's in-place loss 6 bytes (the fp32 softmax turned gradient and the bf16 cast),
  // eager cross_entropy on FSDP2 12 (the saved log-softmax and two fp32 gradients).
  const double T = 8.0 * 4096, dV = 128000;
  auto max_act = [](Runtime rt, std::int64_t vocab) {
    Setup s(ModelGraph::from_spec(test::small_llama(1, vocab)), load_cluster_spec("dgx-h100"), 8);
    Plan p;
    p.runtime = rt;
    if (rt == Runtime::kMegatron) p.zero = 1;  // the distributed optimizer
    p.ac = AcMode::kFull;
    p.mbs = 8;
    p.seq = 4096;
    Simulator sim(s.model, *s.cluster, *s.costs);
    sim.run(s.resolve(p));
    return test::max_category_bytes(sim.program(), MemCategory::kActivations);
  };
  CHECK(max_act(Runtime::kMegatron, 256000) - max_act(Runtime::kMegatron, 128000) ==
        static_cast<Bytes>(6 * T * dV));
  CHECK(max_act(Runtime::kFsdp2, 256000) - max_act(Runtime::kFsdp2, 128000) ==
        static_cast<Bytes>(12 * T * dV));
}
