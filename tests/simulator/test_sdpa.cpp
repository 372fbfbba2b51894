// The attention kernel (SDPA backend) and torchtitan's selective-AC save list (docs/model.md "Attention
// backends and SAC's save list"): the backend torch picks per GPU, what each backend saves, and cuDNN
// attention that the pre-0.2.1 save list recomputes (memory saved, forward attention added to the
// recomputation).
#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "sim_helpers.hpp"
#include "simulator/lowering/units.hpp"
#include "simulator/memory/accounting.hpp"

using namespace shardplan;
using shardplan::test::Setup;
using shardplan::test::units_of;

namespace {
const SimUnit& first_block_unit(const std::vector<SimUnit>& units) {
  for (const SimUnit& u : units)
    if (u.blocks > 0) return u;
  FAIL("no block unit");
  return units.front();
}
Plan llama3_8k(AcMode ac) {
  Plan p;
  p.seq = 8192;
  p.ac = ac;
  p.compile = true;
  return p;
}
}  // namespace

TEST_CASE("sdpa backend: unset, torch's choice on the cluster's GPU", "[simulator][sdpa]") {
  // sdp_utils.cpp (torch 2.15): cuDNN first on compute capability 9.0 / 10.0 (check_prefer_cudnn_attention),
  // flash on Ampere, efficient when the inputs are fp32; ROCm (arch other) has no cuDNN: flash (AOTriton).
  CHECK(Setup("llama3-8b", "dgx-b200", 8).resolve(Plan{}).sdpa() == SdpaBackend::kCudnn);
  CHECK(Setup("llama3-8b", "dgx-h100", 8).resolve(Plan{}).sdpa() == SdpaBackend::kCudnn);
  CHECK(Setup("llama3-8b", "dgx-a100-80g", 8).resolve(Plan{}).sdpa() == SdpaBackend::kFlash);
  ClusterSpec other = load_cluster_spec("dgx-h100");
  other.gpu.arch = GpuArch::kOther;
  CHECK(Setup(load_model("llama3-8b"), other, 8).resolve(Plan{}).sdpa() == SdpaBackend::kFlash);
  Plan fp32;
  fp32.precision = Precision::kFp32;
  const Setup h100("llama3-8b", "dgx-h100", 8);
  CHECK(h100.resolve(fp32).sdpa() == SdpaBackend::kEfficient);
  // An explicit backend wins over the GPU's; flash and cuDNN refuse fp32 inputs.
  Plan flash;
  flash.sdpa_backend = SdpaBackend::kFlash;
  CHECK(h100.resolve(flash).sdpa() == SdpaBackend::kFlash);
  fp32.sdpa_backend = SdpaBackend::kCudnn;
  CHECK_THROWS_AS(h100.resolve(fp32), InputError);
}

TEST_CASE("sac save list: cuDNN attention outside it is not saved, and its forward is recomputed",
          "[simulator][sdpa]") {
  // Llama 3 8B (q = 32 x 128 = 4096, 32 heads, 32 blocks), seq 8192, mbs 1: T = 8192 tokens, bf16. The
  // kernel's saved O (2q = 8192 bytes per token) and fp32 log-sum-exp (4 x 32 = 128) are 8192 x 8320 =
  // 68,157,440 bytes per block: kept under torchtitan's current list (all SDPA ops), recomputed under the
  // pre-0.2.1 list (flash-efficient) when the backend is cuDNN.
  const Setup s("llama3-8b", "dgx-b200", 8);
  Plan all = llama3_8k(AcMode::kSelective);
  all.sdpa_backend = SdpaBackend::kCudnn;
  Plan old = all;
  old.sac_sdpa_ops = SacSdpaOps::kFlashEfficient;
  const Plan ra = s.resolve(all), ro = s.resolve(old);
  CHECK(ra.sac_saves_sdpa());
  CHECK_FALSE(ro.sac_saves_sdpa());
  const auto ua = units_of(s, ra), uo = units_of(s, ro);
  const SimUnit &ba = first_block_unit(ua), &bo = first_block_unit(uo);
  CHECK(ba.act_bytes - bo.act_bytes == 68'157'440);
  // The whole model: 32 blocks x 68,157,440 = 2,181,038,080 bytes.
  CHECK(activation_bytes(s.model, ra) - activation_bytes(s.model, ro) == 2'181'038'080);
  // The recomputation adds one attention forward per block: causal, 2 x T x heads x (d + dv) x (s + 1) / 2
  // FLOPs = 2 x 8192 x 32 x 256 x 4096.5 at the cost model's attention efficiency.
  const double flops = 2.0 * 8192 * 32 * 256 * 4096.5;
  CHECK(bo.recompute_s - ba.recompute_s == Approx(s.costs->attention_fwd_s(flops, false)).epsilon(1e-9));
  CHECK(bo.fwd_s == ba.fwd_s);
  // The flash op is in both lists: the old list keeps flash attention's outputs.
  Plan flash_old = old;
  flash_old.sdpa_backend = SdpaBackend::kFlash;
  const Plan rf = s.resolve(flash_old);
  CHECK(rf.sac_saves_sdpa());
  CHECK(first_block_unit(units_of(s, rf)).act_bytes == ba.act_bytes);
  // Without AC nothing is recomputed: the save list changes nothing.
  Plan none_all = llama3_8k(AcMode::kNone), none_old = none_all;
  none_all.sdpa_backend = none_old.sdpa_backend = SdpaBackend::kCudnn;
  none_old.sac_sdpa_ops = SacSdpaOps::kFlashEfficient;
  CHECK(activation_bytes(s.model, s.resolve(none_all)) == activation_bytes(s.model, s.resolve(none_old)));
}

TEST_CASE("sac save list: the simulated peak drops by the unsaved attention outputs", "[simulator][sdpa]") {
  // The B200 torchao row's plan (FSDP2, 8 GPUs, selective AC, compile, expandable segments): the allocated
  // peak is in the loss backward, with every block's saved tensors alive; the saved O and log-sum-exp are
  // whole multiples of 512 bytes (67,108,864 and 1,048,576 per block), so the peak drops by exactly 32 x
  // 68,157,440.
  const Setup s("llama3-8b", "dgx-b200", 8);
  Plan all = llama3_8k(AcMode::kSelective);
  all.allocator = AllocatorMode::kExpandable;
  all.sdpa_backend = SdpaBackend::kCudnn;
  Plan old = all;
  old.sac_sdpa_ops = SacSdpaOps::kFlashEfficient;
  const Result ra = s.run(all), ro = s.run(old);
  CHECK(ra.allocator.peak_allocated_bytes - ro.allocator.peak_allocated_bytes == 2'181'038'080);
  CHECK(ro.step_s > ra.step_s);  // the attention forward runs again in every block's backward
}

TEST_CASE("sdpa backend: the memory-efficient kernel pads its log-sum-exp to 32 queries",
          "[simulator][sdpa]") {
  // torch/_meta_registrations.py (torch 2.15) meta__scaled_dot_product_efficient_attention: the log-sum-exp
  // is [b, heads, ceil(M / 32) x 32] fp32; flash's is [b, heads, M]. Seq 1000 (T = 1000, no AC): 32 heads x 4
  // bytes x (1024 - 1000) = 3,072 more bytes per block.
  const Setup s("llama3-8b", "dgx-a100-80g", 8);
  Plan flash;
  flash.seq = 1000;
  flash.sdpa_backend = SdpaBackend::kFlash;
  Plan eff = flash;
  eff.sdpa_backend = SdpaBackend::kEfficient;
  const auto uf = units_of(s, s.resolve(flash)), ue = units_of(s, s.resolve(eff));
  CHECK(static_cast<double>(first_block_unit(ue).act_bytes - first_block_unit(uf).act_bytes) ==
        Approx(3'072).margin(1));
  // A multiple of 32 pads nothing.
  flash.seq = eff.seq = 1024;
  CHECK(first_block_unit(units_of(s, s.resolve(eff))).act_bytes ==
        first_block_unit(units_of(s, s.resolve(flash))).act_bytes);
}
