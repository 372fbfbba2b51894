// DeepSpeed ZeRO++ (docs/model.md "ZeRO++"): hpZ's secondary partition as persistent parameter bytes, from
// the closed form; the knobs refused where DeepSpeed has no such mechanism.
#include <catch2/catch.hpp>

#include "sim_helpers.hpp"

using namespace shardplan;
using namespace shardplan::test;

TEST_CASE("ZeRO++ hpZ: a secondary 16-bit partition of 2 Psi / S bytes per rank beside ZeRO-3's 2 Psi / N",
          "[zeropp]") {
  // Llama-3-8B, Psi = 8,030,261,248, DeepSpeed ZeRO-3 over N = 16 ranks, bf16-mixed: the fp16 parameters'
  // primary partition 2 Psi / 16 = 1,003,782,656 B; hpZ over S = 8 adds 2 Psi / 8 = 2,007,565,312 B
  // (DeepSpeed 0.19.8 partition_parameters.py ds_secondary_tensor); gradients and optimizer state stay over
  // N.
  const Setup s("llama3-8b", "dgx-h100", 16);
  Plan p;
  p.runtime = Runtime::kDeepSpeed;
  p.zero = 3;
  const Result base = s.run(p);
  p.hpz_partition = 8;
  const Result hpz = s.run(p);
  const std::int64_t psi = 8030261248;
  CHECK(base.persistent_split[0] == 2 * psi / 16);
  CHECK(hpz.persistent_split[0] == 2 * psi / 16 + 2 * psi / 8);
  CHECK(hpz.persistent_split[1] == base.persistent_split[1]);
  CHECK(hpz.persistent_split[2] == base.persistent_split[2]);
  // Below ZeRO-3 or under FSDP2 there is no secondary partition: refused.
  Plan low = p;
  low.zero = 2;
  CHECK_THROWS_AS(s.resolve(low), InputError);
  Plan fsdp = p;
  fsdp.runtime = Runtime::kFsdp2;
  CHECK_THROWS_AS(s.resolve(fsdp), InputError);
}
