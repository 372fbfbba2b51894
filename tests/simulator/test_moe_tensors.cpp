// A MoE layer's routing tensors (simulator/model/moe_tensors.cpp): torchtitan 0.3.0's router, dispatcher and
// combine in the layer's list, what eager autograd and inductor save of them (checked on the real module:
// tests/reference/test_moe_tensors.py), and the routing traffic summed over the same tensors.
#include <catch2/catch.hpp>

#include "sim_helpers.hpp"
#include "simulator/memory/layer_memory.hpp"

using namespace shardplan;

namespace {
// Bytes per token (16-bit compute, TP 1, no AC) of the layer's tensors saved by eager autograd (or inductor),
// the layer's input left out.
// Under --moe-impl `impl` and --ep `ep` (the list's entries that exist there: act_condition).
double saved_per_token(const Layer& l, bool compiled, MoeImpl impl = MoeImpl::kGrouped, int ep = 1) {
  Plan p;
  p.moe_impl = impl;
  p.ep = ep;
  double b = 0;
  for (const ActTensor& a : l.activations)
    if (a.name != "input" && act_condition(a, p) && (compiled ? a.compiled : a.eager))
      b += a.per_token * act_dtype_bytes(a.dtype, 2.0);
  return b;
}
}  // namespace

TEST_CASE("MoE routing tensors: saved bytes per token, eager and compiled", "[simulator][moe][activations]") {
  // Qwen3-30B-A3B: h 2048, 128 experts of f 768, top 8, no shared experts. Eager: router.probs fp32 4·128,
  // top-k ids, argsort and token indices int64 3·8·8, sorted scores fp32 4·8, routed input 2·8·2048, the
  // experts' gate, SiLU, up and product 4·2·8·768, the combine's fp32 copy 4·8·2048:
  // 512 + 192 + 32 + 32768 + 49152 + 65536 = 148,192. Inductor: the experts' bf16 output (2·8·2048) in place
  // of the fp32 copy, SiLU recomputed (-2·8·768): 148,192 - 65,536 + 32,768 - 12,288 = 103,136.
  const ModelGraph m = load_model("qwen3-30b-a3b");
  const Layer& moe = test::first_moe_layer(m);
  CHECK(saved_per_token(moe, false) == 148192.0);
  CHECK(saved_per_token(moe, true) == 103136.0);
}

TEST_CASE("MoE routing tensors: the routing traffic is the sum over the listed tensors",
          "[simulator][moe][cost]") {
  // Qwen3-30B-A3B (K 8, h 2048, f 768): per token, 16-bit. Eager: gather (read and write the routed input,
  // 2·2KD), .to(fp32) (2KD + 4KD), multiply (4KD + 4K + 4KD), .to(bf16) (4KD + 2KD), zeros (2h), scatter_add
  // (2KD + 2h + 2h): 26KD + 4K + 6h = 425,984 + 32 + 12,288 = 438,304. Fused: gather 4KD, one pass reading
  // the experts' output and the scores and writing the cast (2KD + 4K + 2KD), the scatter (2KD + 2h):
  // 10KD + 4K + 2h = 163,840 + 32 + 4,096 = 167,968. The router, both ways (E 128, no routing bias): softmax
  // reads the fp32 logits and writes the probabilities (2·4E = 1,024), topk reads them and writes fp32 values
  // and int64 ids (4E + 4K + 8K = 608), gather reads the ids and K scores and writes K (8K + 2·4K = 128), the
  // bool routing map is written, scattered into (reading the ids) and summed (3E + 8K = 448): 2,208. With the
  // SwiGLU's own traffic (fa = K f = 6,144: eager 10 fa + 6h = 73,728, fused 6 fa + 6h = 49,152) the layer's
  // totals are 438,304 + 2,208 + 73,728 = 514,240 and 167,968 + 2,208 + 49,152 = 219,328.
  const ModelGraph m = load_model("qwen3-30b-a3b");
  const Layer& moe = test::first_moe_layer(m);
  CHECK(moe.eager_elementwise_bytes_per_token == 514240.0);
  CHECK(moe.elementwise_bytes_per_token == 219328.0);
  // DeepSeek-V3's router adds its routing bias to the probabilities before topk (E 256: 2·4E = 2,048 more).
  const ModelGraph d = load_model("deepseek-v3");
  const Layer& dmoe = test::first_moe_layer(d);
  const ModelGraph dn = [&] {
    ModelSpec sp = d.spec();
    sp.moe.router_bias = false;
    return ModelGraph::from_spec(sp);
  }();
  CHECK(dmoe.elementwise_bytes_per_token - test::first_moe_layer(dn).elementwise_bytes_per_token == 2048.0);
}

TEST_CASE("MoE routing tensors: lifetimes where a regime does not save them",
          "[simulator][moe][activations]") {
  // The argsort result dies once the token indices exist, the fp32 copy once the product exists, the
  // product once the cast exists, the zeros once the combined output exists (torchtitan 0.3.0
  // token_dispatcher.py _local_reorder and combine; the lane's rule of ActLife::kTransient).
  const ModelGraph m = load_model("qwen3-30b-a3b");
  const Layer& moe = test::first_moe_layer(m);
  auto index_of = [&](const std::string& n) {
    for (std::size_t i = 0; i < moe.activations.size(); ++i)
      if (moe.activations[i].name == n) return static_cast<int>(i);
    return -1;
  };
  auto consumer = [&](const std::string& n) {
    const int i = index_of(n);
    REQUIRE(i >= 0);
    CHECK(moe.activations[static_cast<std::size_t>(i)].life == ActLife::kTransient);
    return static_cast<int>(moe.activations[static_cast<std::size_t>(i)].consumer);
  };
  CHECK(consumer("dispatch.sort_idx") == index_of("dispatch.token_idx"));
  CHECK(consumer("combine.float") == index_of("combine.mul"));
  CHECK(consumer("combine.mul") == index_of("combine.cast"));
  CHECK(consumer("combine.zeros") == index_of("w_down.out"));
}

TEST_CASE("MoE routing tensors: Hugging Face's loop over the experts (--moe-impl loop)",
          "[simulator][moe][activations]") {
  // Mixtral 8x7B: h 4096, 8 experts of f 14,336, top 2. The loop (transformers MixtralSparseMoeBlock; the
  // reference lane's SparseMoe) saves, beyond the router's scores (4·8) and top-k ids (8·2): the renormalised
  // weights and their sum (fp32 4·2 + 4), the pairs in expert order and each expert's token indices (int64
  // 2·8·2), its gathered input (2·2·4096), the experts' SwiGLU tensors (4·2·2·14,336), each expert's down
  // output and its product with the weights (2 x 2·2·4096) and its gathered weights (2·2):
  // 32 + 16 + 12 + 32 + 16,384 + 229,376 + 32,768 + 4 = 278,624 bytes per token (measured on the lane's
  // module at h 32, f 48, 8 experts, top 2: 1,248 bytes per token, the same terms); the grouped dispatcher's
  // fp32 copy (4·2·4096) and indices are absent.
  const ModelGraph m = load_model("mixtral-8x7b");
  const Layer& moe = test::first_moe_layer(m);
  CHECK(saved_per_token(moe, false, MoeImpl::kLoop) == 278624.0);
  // The plan decides which exist: the lower bound's saved bytes differ by the two lists' difference.
  Plan p;
  p.mbs = 1;
  p.seq = 1024;
  const double grouped = layer_saved_bytes(moe, p, 1024.0, false);
  p.moe_impl = MoeImpl::kLoop;
  const double loop = layer_saved_bytes(moe, p, 1024.0, false);
  CHECK(grouped - loop == 1024.0 * (saved_per_token(moe, false) - 278624.0));
}

TEST_CASE("MoE under expert parallelism: _permute's index of the received rows is saved",
          "[simulator][moe][ep]") {
  // torchtitan's AllToAllTokenDispatcher._permute saves routed_input_RD[permuted_indices]'s int64 index, one
  // per received row: top_k rows per token on average, 8 · 8 = 64 B per token for Qwen3-30B-A3B (top 8);
  // listed only with --ep > 1 under the grouped implementation (tests/reference/test_moe_ep.py measures it).
  const ModelGraph m = load_model("qwen3-30b-a3b");
  const Layer& moe = test::first_moe_layer(m);
  CHECK(saved_per_token(moe, false) == 148192.0);  // the grouped list without EP: unchanged
  // With EP the list adds the EP index alone: 64 B per token.
  CHECK(saved_per_token(moe, false, MoeImpl::kGrouped, 8) - saved_per_token(moe, false) == 64.0);
  Plan p;
  p.moe_impl = MoeImpl::kGrouped;
  const ActTensor* idx = nullptr;
  for (const ActTensor& a : moe.activations)
    if (a.name == "dispatch.ep_permuted_indices") idx = &a;
  REQUIRE(idx);
  p.ep = 1;
  CHECK_FALSE(act_exists(*idx, p));
  p.ep = 8;
  CHECK(act_exists(*idx, p));
  p.moe_impl = MoeImpl::kLoop;
  CHECK_FALSE(act_exists(*idx, p));
}
