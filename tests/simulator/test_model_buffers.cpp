// The model code's buffers (simulator/memory/model_buffers.cpp): torchtitan 0.3.0's RoPE caches, one per
// attention module (ModelSpec::rope_cache), and its MoE counters, allocated before the step in `other`.
#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "sim_helpers.hpp"
#include "simulator/memory/accounting.hpp"

using namespace shardplan;
using shardplan::test::Setup;

namespace {

Plan lane_plan(MoeImpl impl) {
  Plan p;
  p.mbs = 1;
  p.seq = 64;
  p.moe_impl = impl;
  return p;
}

}  // namespace

TEST_CASE("torchtitan's RoPE caches and MoE counters are buffers of every rank", "[simulator][memory][moe]") {
  // CosSinRoPE: [seq, 2·head_dim] fp32 = 64·32·4 = 8192 B per attention layer, 2 layers: 16,384; the MoE
  // counters tokens_per_expert and expert_bias, fp32 [8] = 32 B each, rounded to 512: 2 blocks x 2 x 512 =
  // 2048. 18,432 B: the lane's measured `other` (tests/reference/test_moe_model_ep.py).
  Setup cos(ModelGraph::from_spec(test::lane_qwen3_moe(0, RopeCache::kCosSin)), load_cluster_spec("dgx-h100"),
            2);
  CHECK(model_buffer_bytes(cos.model, cos.resolve(lane_plan(MoeImpl::kGrouped))) == 18432);
  // Hugging Face's loop has no counters; ComplexRoPE: [seq, head_dim / 2] complex64 = 64·8·8 = 4096 B.
  CHECK(model_buffer_bytes(cos.model, cos.resolve(lane_plan(MoeImpl::kLoop))) == 16384);
  Setup cx(ModelGraph::from_spec(test::lane_qwen3_moe(0, RopeCache::kComplex)), load_cluster_spec("dgx-h100"),
           2);
  CHECK(model_buffer_bytes(cx.model, cx.resolve(lane_plan(MoeImpl::kLoop))) == 8192);
  // No cache (Hugging Face's rotary embedding computes cos and sin every forward): the counters alone.
  Setup none(ModelGraph::from_spec(test::lane_qwen3_moe(0, RopeCache::kNone)), load_cluster_spec("dgx-h100"),
             2);
  CHECK(model_buffer_bytes(none.model, none.resolve(lane_plan(MoeImpl::kGrouped))) == 2048);
  // Alive from before the step to its end: the simulated peak moves by the caches exactly.
  const Plan p = lane_plan(MoeImpl::kGrouped);
  CHECK(cos.run(p).peak_bytes - none.run(p).peak_bytes == 16384);
}

TEST_CASE("a RoPE cache needs rotary positions", "[simulator][model]") {
  ModelSpec s = test::lane_qwen3_moe(0, RopeCache::kCosSin);
  s.positions = PositionKind::kAlibi;
  CHECK_THROWS_AS(validate_model_spec(s, "spec.json"), InputError);
  s.positions = PositionKind::kRotary;
  CHECK_NOTHROW(validate_model_spec(s, "spec.json"));
}
