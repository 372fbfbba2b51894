// The model code's buffers (simulator/memory/model_buffers.cpp): the RoPE buffers of the code the plan runs
// (torchtitan 0.3.0's caches, one per attention module; Hugging Face's and Megatron-core's, one per model;
// ModelSpec::rope_cache overrides) and torchtitan's MoE counters, allocated before the step in `other`.
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

TEST_CASE("the RoPE buffers follow the model code the runtime runs, the spec's rope_cache overrides",
          "[simulator][memory]") {
  Plan p;
  p.seq = 64;
  // Llama 3 8B under fsdp2 runs torchtitan's llama3 (ComplexRoPE): 32 attention modules, each [64, 128 / 2]
  // complex64 = 64 x 64 x 8 = 32,768 B (torchtitan 0.3.0 on the meta device: llama3 8B holds 32 caches
  // [max_seq_len, 64] complex64).
  Setup l("llama3-8b", "dgx-h100", 8);
  CHECK(model_buffer_bytes(l.model, l.resolve(p)) == 32 * 32768);
  // Hugging Face (deepspeed, fsdp1, or the MoE loop): model.rotary_emb's inv_freq and original_inv_freq,
  // fp32 [64] = 256 B each, one 512-byte block each (transformers 5.23 on the meta device).
  Plan hf = p;
  hf.runtime = Runtime::kDeepSpeed;
  CHECK(model_buffer_bytes(l.model, l.resolve(hf)) == 2 * 512);
  hf.runtime = Runtime::kFsdp1;
  CHECK(model_buffer_bytes(l.model, l.resolve(hf)) == 2 * 512);
  // Megatron-core: inv_freq (512) and the lru-cached emb [64, 1, 1, 128] fp32 = 32,768 B.
  Plan mg = p;
  mg.runtime = Runtime::kMegatron;
  mg.zero = 1;
  CHECK(model_buffer_bytes(l.model, l.resolve(mg)) == 512 + 32768);
  // Qwen3 (per-head q/k norm) runs torchtitan's qwen3 (CosSinRoPE): 36 x [64, 2 x 128] fp32 = 65,536 B each.
  Setup q("qwen3-8b", "dgx-h100", 8);
  CHECK(model_buffer_bytes(q.model, q.resolve(p)) == 36 * 65536);
  // DeepSeek-V3 (MLA: the rotary width is qk_rope_head_dim 64): 61 x [64, 32] complex64 = 16,384 B, plus
  // torchtitan's MoE counters of its 58 MoE blocks, fp32 [256] = 1024 B, 2 each.
  Setup d("deepseek-v3", "dgx-h100", 8);
  CHECK(model_buffer_bytes(d.model, d.resolve(p)) == 61 * 16384 + 58 * 2 * 1024);
  // The spec's rope_cache wins over the code's: none under fsdp2, a torchtitan cache under deepspeed.
  ModelSpec none = l.model.spec();
  none.rope_cache = RopeCache::kNone;
  Setup ln(ModelGraph::from_spec(none), load_cluster_spec("dgx-h100"), 8);
  CHECK(model_buffer_bytes(ln.model, ln.resolve(p)) == 0);
  ModelSpec cos = l.model.spec();
  cos.rope_cache = RopeCache::kCosSin;
  Setup lc(ModelGraph::from_spec(cos), load_cluster_spec("dgx-h100"), 8);
  CHECK(model_buffer_bytes(lc.model, lc.resolve(hf)) == 32 * 65536);
  // No rotary positions, no RoPE buffer (MPT's ALiBi).
  Setup m("mpt-7b", "dgx-h100", 8);
  CHECK(model_buffer_bytes(m.model, m.resolve(p)) == 0);
}

TEST_CASE("a RoPE cache needs rotary positions", "[simulator][model]") {
  ModelSpec s = test::lane_qwen3_moe(0, RopeCache::kCosSin);
  s.positions = PositionKind::kAlibi;
  CHECK_THROWS_AS(validate_model_spec(s, "spec.json"), InputError);
  s.positions = PositionKind::kRotary;
  CHECK_NOTHROW(validate_model_spec(s, "spec.json"));
}
