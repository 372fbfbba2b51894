// The chunked loss's tensors (simulator/model/chunked_loss_tensors.cpp, torchtitan 0.3.0 ChunkedLossWrapper):
// the list walked op by op as the lowering walks it, against the closed form that
// tools/reference/chunked_loss.py checks on the real wrapper (tests/reference/test_chunked_loss.py).
#include <catch2/catch.hpp>

#include "sim_helpers.hpp"

using namespace shardplan;
using shardplan::test::Setup;

namespace {

std::vector<const LossTensor*> list_of(LossKernel k) {
  const ModelGraph m = ModelGraph::from_spec(load_model("llama3-8b").spec());
  static std::vector<LossTensor> all;  // the loss layer's list outlives the graph
  for (const Layer* l : m.order())
    if (l->kind == LayerKind::kLoss) all = l->loss_tensors;
  return loss_tensors_of(all, k);
}

/// The forward's peak live bytes: at op k the tensors made at k are allocated, then those freed at k freed.
double forward_peak(LossKernel k, const LossDims& x) {
  const auto list = list_of(k);
  const LossOps o = loss_ops(k);
  double live = 0, peak = 0;
  for (int op = 0; op < o.forward_ops; ++op) {
    for (const LossTensor* t : list)
      if (t->made == op) live += loss_tensor_bytes(*t, x);
    peak = std::max(peak, live);
    for (const LossTensor* t : list)
      if (t->freed == op) live -= loss_tensor_bytes(*t, x);
  }
  return peak;
}

/// The closed form (tools/reference/chunked_loss.py closed_form): T tokens, Tc = T / N, c compute bytes, R =
/// max(reduce, compute) bytes, G = R V D for N >= 2. The loop holds X + 4 T D (X = c T D when mbs > 1: the
/// chunks' contiguous copies; GradAccumulator's fp32 buffer) and on top the largest of op 5 (G + 14 Tc V:
/// bf16 logits 2, log-softmax output 4, nll_loss's and log-softmax's gradients 4 + 4), op 7 (G + 4 Tc V + c
/// Tc D + c V D: logits, the cast gradient, lm_head's input and weight gradients), op 8 (2 G + 2 Tc V + c Tc
/// D + c V D: AccumulateGrad's upcast copy), op 9 (G + 2 Tc V + c Tc D + R V D: the last chunk's
/// reduce-scatter input; with a single chunk its compute-dtype .grad, c V D, instead of G) and op 10 (2 Tc V
/// + c Tc D + R V D (1 + 1 / shard) + 4 Tc D: its output and the accumulator's fp32 copy of h_chunk.grad).
double closed_form(const LossDims& x) {
  const double T = x.tokens, Tc = T / x.chunks, V = x.vocab, D = x.hidden, c = x.compute_bytes;
  const double R = std::max(x.reduce_bytes, c), G = x.chunks >= 2 ? R * V * D : c * V * D;
  const double X = x.mbs > 1 ? c * T * D : 0.0;
  const double Gh = x.chunks >= 2 ? G : 0.0;  // the held gradient before op 9
  const double inner =
      std::max({Gh + 14 * Tc * V, Gh + 4 * Tc * V + c * (Tc * D + V * D),
                2 * Gh + 2 * Tc * V + c * (Tc * D + V * D), G + 2 * Tc * V + c * Tc * D + R * V * D,
                2 * Tc * V + c * Tc * D + R * V * D * (1 + 1.0 / x.shard) + 4 * Tc * D});
  return X + 4 * T * D + inner;
}

/// Live bytes when the call returns: the assembled gradient of h (c T D), and two buffers that outlive the
/// loss's list: the last reduce-scatter's input FSDP2 still holds (R V D) and its output, lm_head's sharded
/// gradient (R V D / shard).
double after_return(const LossDims& x) {
  const double R = std::max(x.reduce_bytes, x.compute_bytes);
  return x.compute_bytes * x.tokens * x.hidden + R * x.vocab * x.hidden * (1 + 1.0 / x.shard);
}

/// The list's live bytes after its forward's last op.
double forward_end(LossKernel k, const LossDims& x) {
  const auto list = list_of(k);
  const LossOps o = loss_ops(k);
  double live = 0;
  for (int op = 0; op < o.forward_ops; ++op)
    for (const LossTensor* t : list) {
      if (t->made == op) live += loss_tensor_bytes(*t, x);
      if (t->freed == op) live -= loss_tensor_bytes(*t, x);
    }
  return live;
}

LossDims dims(double T, double V, double D, int N, int mbs, int shard) {
  LossDims x;
  x.tokens = T, x.vocab = V, x.hidden = D, x.chunks = N, x.mbs = mbs, x.shard = shard;
  x.compute_bytes = 2, x.loss_bytes = 4, x.reduce_bytes = 4;
  return x;
}

}  // namespace

TEST_CASE("chunked loss: the list's forward peak is the closed form", "[simulator][memory][loss][chunked]") {
  // Llama-4-style vocabulary 202,048, hidden 5,120, 65,536 tokens per GPU in 8 chunks, 8 FSDP ranks:
  // Tc V = 8,192 x 202,048 = 1,655,177,216; 14 Tc V = 23,172,481,024; 4 T D = 4 x 65,536 x 5,120 =
  // 1,342,177,280; G = 4 V D = 4,137,943,040; op 5 peaks: 28,652,601,344 bytes (26.69 GiB).
  const LossDims big = dims(65536, 202048, 5120, 8, 1, 8);
  CHECK(closed_form(big) == 28652601344.0);
  CHECK(forward_peak(LossKernel::kChunked, big) == 28652601344.0);
  // The real wrapper's cases (tools/reference/chunked_loss.py: V = 2,048, D = 256, one rank), where the
  // head's gradient terms compete: (2 x 512, 8 chunks) peaks at AccumulateGrad's upcast, 7,405,568 bytes.
  for (auto [B, L, N] :
       {std::tuple{1, 1024, 4}, std::tuple{2, 512, 8}, std::tuple{1, 512, 1}, std::tuple{4, 256, 2}}) {
    const LossDims x = dims(static_cast<double>(B) * L, 2048, 256, N, B, 1);
    INFO(B << " x " << L << " / " << N);
    CHECK(forward_peak(LossKernel::kChunked, x) == closed_form(x));
  }
  CHECK(closed_form(dims(1024, 2048, 256, 8, 2, 1)) == 7405568.0);
  // At the call's return (the real wrapper's after_bytes at (1 x 1,024, 4 chunks): 4,718,596 B): c T D +
  // R V D (1 + 1/shard) = 2 x 1,024 x 256 + 4 x 2,048 x 256 x 2 = 524,288 + 4,194,304 = 4,718,592; at the
  // big case 2 x 65,536 x 5,120 + 4 x 202,048 x 5,120 x 9 / 8 = 671,088,640 + 4,655,185,920.
  CHECK(after_return(dims(1024, 2048, 256, 4, 1, 1)) == 4718592.0);
  CHECK(forward_end(LossKernel::kChunked, dims(1024, 2048, 256, 4, 1, 1)) == 4718592.0);
  CHECK(forward_end(LossKernel::kChunked, big) == 671088640.0 + 4655185920.0);
  CHECK(forward_end(LossKernel::kChunkedCompiled, big) == 671088640.0 + 4655185920.0);
  // The saved bytes: the assembled bf16 gradient of h, 2 T D (the only tensor living into the backward).
  const auto list = list_of(LossKernel::kChunked);
  double saved = 0;
  for (const LossTensor* t : list)
    if (loss_saved(*t, loss_ops(LossKernel::kChunked))) saved += loss_tensor_bytes(*t, big);
  CHECK(saved == 2.0 * 65536 * 5120);
}

TEST_CASE("chunked loss: compiled inner loss, kernels, lower bound and refusals",
          "[simulator][loss][chunked]") {
  // Compiled inner loss (ops 0-8): op 3 holds the logits and inductor's Tc x V bf16 gradient (the two fp32
  // statistics freed), op 4 adds lm_head's gradients, op 5 AccumulateGrad's upcast copy (G): at the big case
  // op 5 wins: 4 T D + 2 G + 2 Tc V + 2 Tc D + 2 V D = 1,342,177,280 + 8,275,886,080 + 3,310,354,432 +
  // 83,886,080 + 2,068,971,520 = 15,081,275,392 (op 4: 14,253,686,784).
  const LossDims big = dims(65536, 202048, 5120, 8, 1, 8);
  CHECK(forward_peak(LossKernel::kChunkedCompiled, big) == 15081275392.0);
  Plan p;
  p.loss_impl = LossImpl::kChunked;
  CHECK(loss_kernel(p, runtime_traits(p)) == LossKernel::kChunked);
  p.compile = true;
  CHECK(loss_kernel(p, runtime_traits(p)) == LossKernel::kChunkedCompiled);
  // The lower bound's saved loss bytes: 2 T D for T = 4,096 tokens of Llama 3 8B (D = 4,096).
  const ModelGraph m = load_model("llama3-8b");
  p.compile = false;
  p.mbs = 1;
  p.seq = 4096;
  CHECK(loss_saved_bytes(m, p, 4096) == 2.0 * 4096 * 4096);
  // Capability: FSDP2 only, tp/cp/pp 1, the head its own unit, an fp32 loss.
  CHECK(!capability_refusal(p, 8));
  p.tp = 2;
  CHECK(capability_refusal(p, 4) == Feature::kChunkedLossParallel);
  p.tp = 1;
  p.zero = 0;
  CHECK(capability_refusal(p, 8) == Feature::kChunkedLossUnsharded);
  p.zero = 3;
  p.loss_dtype = Dtype::kBf16;
  CHECK(capability_refusal(p, 8) == Feature::kChunkedLoss16);
  p.loss_dtype = Dtype::kFp32;
  p.runtime = Runtime::kDeepSpeed;
  CHECK(capability_refusal(p, 8) == Feature::kChunkedLoss);
}

TEST_CASE("chunked loss: resolve_plan checks --loss-chunks", "[simulator][loss][chunked]") {
  Setup s("llama3-8b", "dgx-h100", 8);
  Plan p;
  p.seq = 4096;
  p.loss_chunks = 4;
  CHECK_THROWS_WITH(s.resolve(p), Catch::Contains("--loss-impl chunked"));
  p.loss_impl = LossImpl::kChunked;
  p.loss_chunks = 3;
  CHECK_THROWS_WITH(s.resolve(p), Catch::Contains("does not divide into 3 chunks"));
  p.loss_chunks = 0;  // torchtitan's default, 8
  CHECK(s.resolve(p).chunks() == 8);
}
