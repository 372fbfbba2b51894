// Plan validation: impossible plans raise InputError naming the knob (plan.cpp resolve_plan).
#include <catch2/catch.hpp>
#include <string>

#include "sim_helpers.hpp"

using namespace shardplan;
using Catch::Matchers::Contains;
using shardplan::test::Setup;

TEST_CASE("bad plans raise InputError naming the knob", "[simulator][plan]") {
  SECTION("shard group that does not divide the data-parallel ranks") {
    // 16 GPUs, tp 1 ⇒ dp 16; 16 % 3 ≠ 0.
    Setup s("llama3-8b", "dgx-h100", 16);
    Plan p;
    p.shard_group = 3;
    CHECK_THROWS_AS(s.resolve(p), InputError);
    CHECK_THROWS_WITH(s.resolve(p), Contains("--shard-group"));
    // 6 divides neither: also refused; 8 divides 16: accepted with 2 replicas.
    p.shard_group = 6;
    CHECK_THROWS_AS(s.resolve(p), InputError);
    p.shard_group = 8;
    CHECK(s.resolve(p).replicas == 2);
  }
  SECTION("tensor parallel degree that does not divide the heads") {
    // gpt2-xl has 25 heads: tp 2 (which divides the 8 GPUs) does not divide 25.
    Setup s("gpt2-xl", "dgx-h100", 8);
    Plan p;
    p.tp = 2;
    CHECK_THROWS_AS(s.resolve(p), InputError);
    CHECK_THROWS_WITH(s.resolve(p), Contains("--tp") && Contains("heads"));
  }
  SECTION("ZeRO-1 with fsdp2 (and fsdp1): no such mode") {
    Setup s("llama3-8b", "dgx-h100", 8);
    Plan p;
    p.zero = 1;
    for (Runtime rt : {Runtime::kFsdp2, Runtime::kFsdp1}) {
      p.runtime = rt;
      CHECK_THROWS_AS(s.resolve(p), InputError);
      CHECK_THROWS_WITH(s.resolve(p), Contains("--zero"));
    }
    p.runtime = Runtime::kDeepSpeed;
    CHECK_NOTHROW(s.resolve(p));
  }
  SECTION("wrap larger than the number of blocks") {
    // llama3-8b has 32 blocks: wrap 32 is one unit of all blocks, wrap 33 is impossible.
    Setup s("llama3-8b", "dgx-h100", 8);
    Plan p;
    p.wrap = 32;
    CHECK_NOTHROW(s.resolve(p));
    p.wrap = 33;
    CHECK_THROWS_AS(s.resolve(p), InputError);
    CHECK_THROWS_WITH(s.resolve(p), Contains("--wrap"));
  }
  SECTION("sequence longer than the learned positions") {
    // gpt2-xl: learned positions, max_positions 1024 ⇒ seq 1024 is fine, 1025 is not.
    Setup s("gpt2-xl", "dgx-h100", 8);
    Plan p;
    p.seq = 1024;
    CHECK_NOTHROW(s.resolve(p));
    p.seq = 1025;
    CHECK_THROWS_AS(s.resolve(p), InputError);
    CHECK_THROWS_WITH(s.resolve(p), Contains("--seq"));
    // Rotary models have no such limit from the spec.
    Setup r("llama3-8b", "dgx-h100", 8);
    p.seq = 32768;
    CHECK_NOTHROW(r.resolve(p));
  }
  SECTION("tp beyond the NVLink domain, or not dividing the GPUs") {
    Setup s("llama3-70b", "dgx-h100", 16);
    Plan p;
    p.tp = 16;  // DGX H100 NVLink domain is 8 GPUs
    CHECK_THROWS_AS(s.resolve(p), InputError);
    Setup t("llama3-70b", "dgx-h100", 4);
    p.tp = 8;  // within the 8-GPU domain, but 4 % 8 ≠ 0
    CHECK_THROWS_AS(t.resolve(p), InputError);
    // 12 GPUs on 8-GPU nodes is refused already by the cluster.
    CHECK_THROWS_AS(Cluster(load_cluster_spec("dgx-h100"), 12), InputError);
  }
  SECTION("HSDP with DeepSpeed and a shard group with ZeRO-0") {
    Setup s("llama3-8b", "dgx-h100", 16);
    Plan p;
    p.runtime = Runtime::kDeepSpeed;
    p.shard_group = 8;
    CHECK_THROWS_AS(s.resolve(p), InputError);
    p.runtime = Runtime::kFsdp2;
    p.zero = 0;
    CHECK_THROWS_AS(s.resolve(p), InputError);
  }
}

TEST_CASE("bad model specs raise InputError", "[simulator][plan][model]") {
  // heads not a multiple of kv_heads; learned positions without max_positions.
  ModelSpec s = shardplan::test::small_llama(2);
  s.kv_heads = 5;  // 32 % 5 ≠ 0
  CHECK_THROWS_AS(ModelGraph::from_spec(s), InputError);
  s = shardplan::test::small_llama(2);
  s.positions = PositionKind::kLearned;
  s.max_positions = 0;
  CHECK_THROWS_AS(ModelGraph::from_spec(s), InputError);
  // Unsupported HF model_type names the field.
  CHECK_THROWS_WITH(parse_hf_config(Json{{"model_type", "t5"}}, "cfg.json"), Contains("/model_type"));
}
