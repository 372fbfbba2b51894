// The megatron runtime (Megatron-core DistributedDataParallel + distributed optimizer,
// simulator/plan/runtime.cpp): persistent bytes per rank in closed form, the grad-buffer buckets, the
// reduce-scatter and all-gather bytes, a pipeline-parallel case and the plans it refuses.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "sim_helpers.hpp"
#include "simulator/cost/constants.hpp"
#include "simulator/plan/runtime.hpp"

using namespace shardplan;
using Catch::Matchers::Contains;
using shardplan::test::Setup;

namespace {
Plan megatron_plan() {
  Plan p;
  p.runtime = Runtime::kMegatron;
  p.zero = 1;
  p.seq = 4096;
  return p;
}
// llama2-7b: N = 6,738,415,616 parameters (test_models.cpp).
constexpr std::int64_t kLlama2_7b = 6'738'415'616;
}  // namespace

TEST_CASE("megatron: persistent bytes per rank are 2N + 4N + 12 N / (dp x cp)", "[simulator][megatron]") {
  Setup s("llama2-7b", "dgx-h100", 8);
  const Result r = s.run(megatron_plan());
  // bf16 param buffer 2 x 6,738,415,616 = 13,476,831,232; fp32 grad buffer (grad_reduce_in_fp32) 4 x N =
  // 26,953,662,464; fp32 main parameters + exp_avg + exp_avg_sq over dp = 8 ranks: N / 8 = 842,301,952
  // (exact), x 12 = 10,107,623,424. Total 50,538,117,120.
  CHECK(r.persistent_split[0] == 13'476'831'232);
  CHECK(r.persistent_split[1] == 26'953'662'464);
  CHECK(r.persistent_split[2] == 10'107'623'424);
  CHECK(r.persistent_bytes == 50'538'117'120);
  // A bf16 grad buffer (grad_sync_dtype bf16) halves the gradients: 2 x N = 13,476,831,232.
  Plan b = megatron_plan();
  b.reduce_dtype = Dtype::kBf16;
  CHECK(s.run(b).persistent_split[1] == 13'476'831'232);
  // Context parallelism shards the optimizer over dp x cp: 8 GPUs as dp 4 x cp 2 give the same 8-way shard.
  Plan c = megatron_plan();
  c.cp = 2;
  CHECK(s.run(c).persistent_split[2] == 10'107'623'424);
  // ZeRO-0 (Megatron DDP without the distributed optimizer): the optimizer state is whole, 12 x N.
  Plan d = megatron_plan();
  d.zero = 0;
  CHECK(s.run(d).persistent_split[2] == 12 * kLlama2_7b);
}

TEST_CASE("megatron: grad-buffer buckets fill to the bucket size, a parameter never split",
          "[simulator][megatron]") {
  // Bucket 40M: 30M -> bucket 0 (holds 30M < 40M), 30M -> bucket 0 (60M), 30M -> 60M >= 40M opens bucket 1,
  // 5M -> bucket 1 (holds 30M).
  CHECK(grad_buffer_bucket_index({30'000'000, 30'000'000, 30'000'000, 5'000'000}, 40e6) ==
        std::vector<int>{0, 0, 1, 1});
  // A piece larger than the bucket fills it alone; no bucket size: one bucket.
  CHECK(grad_buffer_bucket_index({50'000'000, 1, 50'000'000}, 40e6) == std::vector<int>{0, 1, 1});
  CHECK(grad_buffer_bucket_index({50'000'000, 1, 50'000'000}, 0) == std::vector<int>{0, 0, 0});
  // distributed_data_parallel.py: bucket_size = max(40,000,000, 1,000,000 x dp).
  Plan p = megatron_plan();
  p.dp = 8;
  CHECK(runtime_traits(p).grad_bucket_elems == 40e6);
  p.dp = 64;
  CHECK(runtime_traits(p).grad_bucket_elems == 64e6);
}

TEST_CASE("megatron: the gradients are reduce-scattered once per step, bucket by bucket",
          "[simulator][megatron]") {
  Setup s("llama2-7b", "dgx-h100", 8);
  Plan p = megatron_plan();
  p.grad_accum = 4;
  const Result r = s.run(p);
  const auto& rs = r.comm[static_cast<int>(CommKind::kReduceScatter)];
  const auto& ag = r.comm[static_cast<int>(CommKind::kAllGather)];
  // Units in backward order: head (norm 4,096 + output 131,072,000), 32 blocks of 202,383,360, embedding
  // 131,072,000: each is over the 40M bucket size (dp 8), so each closes its own bucket: 34 reduce-scatters,
  // at the last of the 4 micro-batches only (is_last_microbatch).
  CHECK(rs.count == 34);
  CHECK(r.comm[static_cast<int>(CommKind::kAllReduce)].count == 0);
  // Bytes sent per rank: the fp32 buffer 4 x N = 26,953,662,464, ring factor (8 - 1) / 8 -> 23,584,454,656.
  CHECK(rs.bytes_per_rank == Approx(23'584'454'656.0).epsilon(1e-12));
  // The updated bf16 parameters all-gathered before the first forward, the same 34 buckets:
  // 2 x N x 7/8 = 11,792,227,328.
  CHECK(ag.count == 34);
  CHECK(ag.bytes_per_rank == Approx(11'792'227'328.0).epsilon(1e-12));
  // One more micro-batch adds compute, no data-parallel traffic.
  Plan q = p;
  q.grad_accum = 5;
  CHECK(s.run(q).comm[static_cast<int>(CommKind::kReduceScatter)].count == 34);
}

TEST_CASE("megatron with pipeline parallelism: each stage's state sharded over its data-parallel ranks",
          "[simulator][megatron][pipeline]") {
  // llama2-13b on 16 GPUs, pp 2 x dp 8, 20 blocks per stage. Block = 4 x 5120^2 + 3 x 5120 x 13824 + 2 x 5120
  // = 317,204,480. Stage 0 = embedding 32000 x 5120 = 163,840,000 + 20 blocks = 6,507,929,600; stage 1 =
  // 20 blocks + norm 5,120 + output 163,840,000 = 6,507,934,720 (sum 13,015,864,320, the preset's count).
  Setup s("llama2-13b", "dgx-h100", 16);
  Plan p = megatron_plan();
  p.pp = 2;
  p.pp_schedule = PpSchedule::k1F1B;
  p.pp_layers = {20, 20};
  p.grad_accum = 4;
  const Result r = s.run(p);
  REQUIRE(r.pipeline);
  REQUIRE(r.pipeline->stage_detail.size() == 2);
  // Stage 0: 6 x 6,507,929,600 + 12 x 6,507,929,600 / 8 (= 813,491,200) = 39,047,577,600 + 9,761,894,400.
  CHECK(r.pipeline->stage_detail[0].persistent_bytes == 48'809'472'000);
  // Stage 1: 6 x 6,507,934,720 + 12 x 813,491,840 = 39,047,608,320 + 9,761,902,080.
  CHECK(r.pipeline->stage_detail[1].persistent_bytes == 48'809'510'400);
  // With context parallelism a GPU handles seq / cp of each of its pipeline's sequences: tokens per GPU per
  // step = mbs x seq x micro-batches / (tp x cp x pp) = 4096 x 4 / (2 x 2) = 4096.
  Plan c = p;
  c.cp = 2;
  const Result rc = s.run(c);
  CHECK(rc.tokens_per_s_per_gpu == Approx(4096.0 / rc.step_s).epsilon(1e-12));
  CHECK(rc.pipeline->p2p_bytes_per_step <
        r.pipeline->p2p_bytes_per_step);  // each rank sends its seq / cp share
  // Interleaved 1F1B with virtual stages is Megatron's other schedule; the zero-bubble ones are not.
  Plan z = p;
  z.pp_schedule = PpSchedule::kZbv;
  z.pp_layers.clear();
  CHECK_THROWS_WITH(s.resolve(z), Contains("megatron runs 1f1b or interleaved-1f1b"));
}

TEST_CASE("megatron refuses what it does not run", "[simulator][megatron][plan]") {
  Setup s("llama2-7b", "dgx-h100", 8);
  Plan p = megatron_plan();
  p.zero = 3;
  CHECK_THROWS_WITH(s.resolve(p), Contains("--zero 1 (distributed optimizer)"));
  p = megatron_plan();
  p.precision = Precision::kBf16;
  CHECK_THROWS_WITH(s.resolve(p), Contains("--precision bf16-mixed"));
  p = megatron_plan();
  p.offload = Offload::kOptimizer;
  CHECK_THROWS_WITH(s.resolve(p), Contains("megatron"));
}
