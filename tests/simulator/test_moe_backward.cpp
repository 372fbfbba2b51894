// A MoE layer's backward op by op (docs/model.md "MoE layers' backward"; simulator/lowering/
// units_moe_backward.cpp): torchtitan 0.3.0's grouped experts and combine, whose worst op is the combine's
// three fp32 N x h tensors, against closed forms for a small MoE (the reference lane's qwen3 sizes,
// tools/reference/lane/titan_moe.py); transformers 5.23's experts implementations (--moe-impl hf-grouped-mm,
// hf-eager; docs/model.md "MoE implementations"): the tensors each saves against torchtitan's and
// transformers 4's, their backward's worst op and the eager loop's select_backward time (tests/reference/
// test_hf_moe_gloo.py compares the same with the real transformers run).
#include <catch2/catch.hpp>

#include "sim_helpers.hpp"
#include "simulator/lowering/units_stages.hpp"

using namespace shardplan;
using shardplan::test::Setup;
using shardplan::test::units_of;

namespace {

/// T = 64 tokens (mbs 1, seq 64), h = 64, 8 experts of f = 32, top-2 (test::lane_qwen3_moe): N = T·top_k =
/// 128 rows.
Plan small_plan(int ep, MoeImpl impl) {
  Plan p;
  p.mbs = 1;
  p.seq = 64;
  p.ac = AcMode::kNone;
  p.ep = ep;
  p.moe_impl = impl;
  return p;
}

/// Bytes the MoE layer's eager autograd saves at T tokens under the plan's --moe-impl.
double saved(const Setup& s, const Plan& p, double T) {
  double b = 0;
  for (const ActTensor& a : test::first_moe_layer(s.model).activations)
    b += act_saved_share(a, p, false) * act_bytes_per_token(a, p, T) * T;
  return b;
}

double excess(const Setup& s, const Plan& p, const detail::MoeGrads& g) {
  const detail::UnitContext c(s.model, *s.cluster, *s.costs, p, runtime_traits(p));
  return detail::moe_backward_excess(c, test::first_moe_layer(s.model), g, 64.0 * 64 * 2);
}

}  // namespace

TEST_CASE("torchtitan's grouped MoE backward: the combine's three fp32 tensors",
          "[simulator][moe][backward]") {
  Setup s(ModelGraph::from_spec(test::lane_qwen3_moe(0)), load_cluster_spec("dgx-h100"), 2);
  const Plan p = s.resolve(small_plan(1, MoeImpl::kGrouped));
  // The combine's backward (token_dispatcher.py combine, `(routed_output.to(float32) * scores).to(bf16)`):
  // the fp32 output gradient and the multiply's two fp32 gradients, N x h x 4 = 128·64·4 = 32,768 B each,
  // and the scores' gradient N x 4 = 512 B (the lane's trace: 32768, 32768, 32768, 512 at its peak).
  CHECK(detail::combine_fp32_bytes(p, s.model.spec(), test::first_moe_layer(s.model), 64.0) == 32768.0);
  // The experts' ops (EP 1, R = N = 128 rows): the three grouped dW of the 8 experts, 8·3·32·64·2 = 98,304,
  // with the gate GEMM's two R x h input gradients and SiLU's R x f gradient, (2·128·64 + 128·32)·2 =
  // 40,960, less what was consumed by then: the combine's fp32 copy (128·64·4 = 32,768), the sorted scores
  // (128·4 = 512) and the SwiGLU tensors (4·128·32·2 = 32,768): 98,304 + 40,960 - 66,048 = 73,216. The
  // combine's 3·32,768 + 512 = 98,816 is the worst.
  detail::MoeGrads g;
  g.experts = 98304;
  g.all = g.experts + 8 * 64 * 2;  // the router's gradient: written after both
  CHECK(excess(s, p, g) == 98816.0);
  // With an expert gradient above the combine's tensors, the experts' op: g.experts - 66,048 + 40,960.
  g.experts = 400000;
  g.all = g.experts + 1024;
  CHECK(excess(s, p, g) == 400000.0 - 66048.0 + 40960.0);
}

TEST_CASE("grouped MoE backward: the shared experts' gradients wait through the combine",
          "[simulator][moe][backward]") {
  // One shared expert of f = 32 (deepseek_v3's order: `out + shared_experts(x)`, so its backward runs first):
  // its three dW, 3·32·64·2 = 12,288, and its input gradient T x h x 2 = 8,192 live through the combine:
  // 12,288 + 8,192 + 98,816 = 119,296 (its own worst op, 12,288 + 3·64·32·2 = 24,576, is below).
  Setup s(ModelGraph::from_spec(test::lane_qwen3_moe(1)), load_cluster_spec("dgx-h100"), 2);
  const Plan p = s.resolve(small_plan(1, MoeImpl::kGrouped));
  detail::MoeGrads g;
  g.experts = 98304;
  g.shared = 12288;
  g.all = g.experts + g.shared + 1024;
  CHECK(excess(s, p, g) == 12288.0 + 8192.0 + 98816.0);
}

TEST_CASE("grouped MoE backward: the unit's workspace holds the combine's tensors",
          "[simulator][moe][backward]") {
  // EP 2 over 2 GPUs (the lane's qwen3 world-2 plan without q/k norms): the MoE layer, first in the block's
  // reverse walk with every saved tensor still live, is the block's worst op; the workspace is its excess
  // over the saved tensors plus the gradient flowing in: 98,816 + 64·64·2 = 107,008 (the lane's shardplan
  // breakdown at its peak: other 107,008).
  Setup s(ModelGraph::from_spec(test::lane_qwen3_moe(0)), load_cluster_spec("dgx-h100"), 2);
  const auto units = units_of(s, s.resolve(small_plan(2, MoeImpl::kGrouped)));
  REQUIRE(units.size() == 4);  // embedding, 2 blocks, head
  CHECK(units[1].workspace_bytes == 107008);
  // Hugging Face's loop (--moe-impl loop): none of the combine's fp32 tensors.
  const Plan pl = s.resolve(small_plan(1, MoeImpl::kLoop));
  CHECK(detail::combine_fp32_bytes(pl, s.model.spec(), test::first_moe_layer(s.model), 64.0) == 0.0);
}

TEST_CASE("grouped MoE backward: Mixtral's few large experts peak at the gate GEMM's backward",
          "[simulator][moe][backward]") {
  // Mixtral 8x7B (h = 4096, f = 14,336, 8 experts, top 2), FSDP2 bf16-mixed, 8 GPUs, mbs 1, seq 4096, no EP:
  // T = 4096, N = R = 8192 rows. The combine: 3·8192·4096·4 + 8192·4 = 402,685,952. The experts' ops: the
  // eight experts' dW, 8·3·4096·14,336·2 = 2,818,572,288, with the gate GEMM's two input gradients and
  // SiLU's, (2·8192·4096 + 8192·14,336)·2 = 369,098,752, less the consumed combine copy (8192·4096·4 =
  // 134,217,728), sorted scores (32,768) and SwiGLU tensors (4·8192·14,336·2 = 939,524,096): 2,113,896,448,
  // the worst. The MoE layer is the block's last: workspace = that + the flowing gradient T·h·2 =
  // 33,554,432: 2,147,450,880 (Hugging Face's loop: 1,921,056,768, test_lane_mechanisms.cpp).
  Setup s("mixtral-8x7b", "dgx-h100", 8);
  Plan p;
  p.seq = 4096;
  p.mbs = 1;
  p.moe_impl = MoeImpl::kGrouped;
  const auto units = units_of(s, s.resolve(p));
  REQUIRE(units.size() == 34);
  CHECK(units[1].workspace_bytes == 2'147'450'880LL);
}

TEST_CASE("transformers 5.23 experts: saved tensors per routed row against torchtitan's and transformers 4's",
          "[simulator][moe][hf]") {
  Setup s(ModelGraph::from_spec(test::lane_qwen3_moe(0)), load_cluster_spec("dgx-h100"), 2);
  const double T = 64, k = 2, h = 64;
  const auto sv = [&](MoeImpl m) { return saved(s, s.resolve(small_plan(1, m)), T); };
  // grouped_mm_experts_forward against torchtitan's grouped MoE, per token: the down projection's bf16 output
  // (2kh) instead of the combine's fp32 copy (4kh); transformers' router's renormalisation (the clone of the
  // top-k values, fp32 k, and their sum, fp32 1) and inv_perm (int64 k) beside the same sort, sorted weights,
  // token indices and gathered input: -2kh + 4k + 4 + 8k = -228 B per token, -14,592 B at T = 64 (Mixtral
  // 8x7B at seq 4096: -2·2·4096·4096 = -64 MiB per layer and 12·2 + 4 B per token).
  CHECK(sv(MoeImpl::kHfGroupedMm) - sv(MoeImpl::kGrouped) == T * (-2 * k * h + 12 * k + 4));
  // The eager loop against transformers 4's: torch.where's [C, 2] int64 (16 B per routed row) for the token
  // indices (8) and the expert-ordered pairs (8); the gathered weights in fp32 (4) for the compute dtype (2):
  // +2 B per routed row, 256 B at T = 64.
  CHECK(sv(MoeImpl::kHfEager) - sv(MoeImpl::kLoop) == T * k * 2);
}

TEST_CASE("transformers 5.23 experts: the backward's worst op", "[simulator][moe][hf][backward]") {
  Setup s(ModelGraph::from_spec(test::lane_qwen3_moe(0)), load_cluster_spec("dgx-h100"), 2);
  detail::MoeGrads g;
  g.experts = 98304;               // 8 experts x (gate, up, down) 32·64 bf16: 8·3·32·64·2
  g.all = g.experts + 8 * 64 * 2;  // and the router's gradient
  // hf-grouped-mm: the combine's three fp32 N x h tensors (Mixtral's fp32 router weights: the index's
  // zeros and the multiply's two products, 128·64·4 = 32,768 each) and the weights' gradient (128·4): 98,816.
  // The experts' ops: the packed gate_up GEMM's backward, its output gradient (R x 2f) and input gradient
  // (R x h): (128·64 + 2·128·32)·2 = 32,768, beside the three dW (98,304), less what the combine and the
  // SwiGLU consumed (the SwiGLU tensors 4·128·32·2 = 32,768, the sorted weights 512, the down projection's
  // output 128·64·2 = 16,384, inv_perm 1,024): 98,304 - 50,688 + 32,768 = 80,384, below the combine.
  const Plan hg = s.resolve(small_plan(1, MoeImpl::kHfGroupedMm));
  CHECK(detail::combine_fp32_bytes(hg, s.model.spec(), test::first_moe_layer(s.model), 64.0) == 32768.0);
  CHECK(excess(s, hg, g) == 98816.0);
  g.experts = 400000;
  g.all = g.experts + 1024;
  CHECK(excess(s, hg, g) == 400000.0 - 50688 + 32768);
  // hf-eager: the other gradients (1,024), twice the gradient flowing in (2·64·64·2 = 16,384), the experts'
  // gradients (98,304) and two more whole gate_up gradients (select_backward's and the out-of-place sum:
  // 2·(2/3)·98,304 = 131,072), the expert's gate and up output gradients (2·C·f·2 at C = 128 / 8 = 16:
  // 2,048): 248,832. No combine (0).
  g.experts = 98304;
  g.all = g.experts + 1024;
  const Plan he = s.resolve(small_plan(1, MoeImpl::kHfEager));
  CHECK(detail::combine_fp32_bytes(he, s.model.spec(), test::first_moe_layer(s.model), 64.0) == 0.0);
  CHECK(excess(s, he, g) == 1024 + 16384 + 98304 + 131072 + 2048);
}

TEST_CASE("transformers 5.23 experts: the eager loop's select_backward traffic",
          "[simulator][moe][hf][time]") {
  // Each of the 8 experts' weight gradients is select_backward's whole [E, 2f, h] and [E, h, f] tensor
  // (write), summed out of place from the second expert on (read two, write one): (8 + 3·7) times the
  // experts' 49,152 bf16 elements (8·3·32·64) = 2,850,816 bytes in backward, beyond the grouped GEMM's
  // one write; nothing else differs between the two plans' time.
  Setup s(ModelGraph::from_spec(test::lane_qwen3_moe(0)), load_cluster_spec("dgx-h100"), 2);
  const auto eager = units_of(s, s.resolve(small_plan(1, MoeImpl::kHfEager)));
  const auto grouped = units_of(s, s.resolve(small_plan(1, MoeImpl::kHfGroupedMm)));
  REQUIRE(eager.size() == 4);  // embedding, 2 blocks, head
  const double select_s = s.costs->memory_s(49152.0 * 2 * (8 + 3 * 7));
  CHECK(eager[1].bwd_s - grouped[1].bwd_s == Approx(select_s).epsilon(1e-12));
  CHECK(eager[1].fwd_s == grouped[1].fwd_s);
  CHECK(eager[0].bwd_s == grouped[0].bwd_s);  // the embedding has no experts
}

TEST_CASE("under TP a MoE's token side is on the tokens the MoE code gives the TP rank",
          "[simulator][moe][tp]") {
  // torchtitan 0.3.0 (models/common/moe_sharding.py): without EP the router's and routed experts' input is
  // Replicate() (every TP rank routes and combines all T tokens; the experts' output Partial, reduce-
  // scattered after the combine); with EP the MoE input is redistributed to Shard(1) over the TP axis (T /
  // tp tokens each). Hugging Face's loop and Megatron-core: as the sequence-parallel residual stream.
  Setup s(ModelGraph::from_spec(test::lane_qwen3_moe(0)), load_cluster_spec("dgx-h100"), 4);
  Plan p = small_plan(1, MoeImpl::kGrouped);
  p.tp = 2;
  const Plan no_ep = s.resolve(p);
  p.ep = 2;
  const Plan with_ep = s.resolve(p);
  const Layer& l = test::first_moe_layer(s.model);
  CHECK(moe_token_divisor(no_ep) == 1);
  CHECK(moe_token_divisor(with_ep) == 2);
  // The combine's fp32 backward tensor over the rank's T = 64 tokens (mbs x seq): N x h x 4 with N = T·top_k
  // = 128 rows without EP, 64 with it: 32,768 and 16,384 B.
  CHECK(detail::combine_fp32_bytes(no_ep, s.model.spec(), l, 64.0) == 32768.0);
  CHECK(detail::combine_fp32_bytes(with_ep, s.model.spec(), l, 64.0) == 16384.0);
  // The combine's saved fp32 copy per token of the micro-batch: top_k·h·4 = 512 B on all tokens, 256 B on
  // T / 2.
  const ActTensor* copy = nullptr;
  for (const ActTensor& a : l.activations)
    if (a.name == "combine.float") copy = &a;
  REQUIRE(copy != nullptr);
  CHECK(act_bytes_per_token(*copy, no_ep, 64) == 512.0);
  CHECK(act_bytes_per_token(*copy, with_ep, 64) == 256.0);
  // The routing's forward traffic: the block's elementwise bytes are divided by the sequence-parallel
  // divisor (2); without EP the routing's share runs on all tokens, its other half added back.
  const detail::UnitContext c(s.model, *s.cluster, *s.costs, no_ep, runtime_traits(no_ep));
  CHECK(c.moe_token_side_extra_bytes(l, false) == moe_routing_elementwise_bytes(l, false) / 2);
  const detail::UnitContext ce(s.model, *s.cluster, *s.costs, with_ep, runtime_traits(with_ep));
  CHECK(ce.moe_token_side_extra_bytes(l, false) == 0.0);
  // Hugging Face's expert loop and Megatron-core: the token side follows sequence parallelism.
  Plan loop = small_plan(1, MoeImpl::kLoop);
  loop.tp = 2;
  CHECK(moe_token_divisor(s.resolve(loop)) == 2);
  Plan mg = small_plan(1, MoeImpl::kGrouped);
  mg.tp = 2;
  mg.runtime = Runtime::kMegatron;
  mg.zero = 1;
  CHECK(moe_token_divisor(s.resolve(mg)) == 2);
}
