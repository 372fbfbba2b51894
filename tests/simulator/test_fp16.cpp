// fp16 mixed precision (--precision fp16-mixed, docs/model.md "fp16 mixed precision"): the persistent state
// of each runtime from closed forms, the loss scaler's task (its pass over the gradients and its flag's
// all-reduce), DeepSpeed ZeRO-0's fp32 gradient copies, and Volta's refusals.
#include <catch2/catch.hpp>
#include <string>

#include "core/error.hpp"
#include "sim_helpers.hpp"
#include "simulator/cost/constants.hpp"

using namespace shardplan;
using shardplan::test::Setup;

namespace {
Bytes total(const std::array<Bytes, 3>& a) {
  return a[0] + a[1] + a[2];
}
std::int64_t tensor_count(const ModelGraph& m) {
  std::int64_t n = 0;
  for (const Layer* l : m.order()) n += static_cast<std::int64_t>(l->tensors.size());
  return n;
}
Plan fp16(Runtime rt, int zero) {
  Plan p;
  p.runtime = rt;
  p.zero = zero;
  p.precision = Precision::kFp16Mixed;
  p.seq = 1024;
  return p;
}
/// The duration of the first task whose label starts with `prefix` (a detail run), or -1.
double task_s(const Result& r, const std::string& prefix) {
  const Program& prog = r.detail->program;
  for (const Task& t : prog.tasks)
    if (prog.labels[t.label].rfind(prefix, 0) == 0) return t.duration_s;
  return -1;
}
}  // namespace

TEST_CASE("fp16-mixed: DeepSpeed ZeRO-0/1/2/3 persistent state is the ZeRO paper's K = 12 formulas",
          "[fp16][memory]") {
  // The ZeRO paper (Rajbhandari et al. 2020, §5) is written for fp16 mixed precision with Adam: fp16
  // parameters (2 Psi) and gradients (2 Psi), fp32 master copy + momentum + variance (K = 12 Psi):
  //   ZeRO-0: 16 Psi;  ZeRO-1: 4 Psi + 12 Psi/N;  ZeRO-2: 2 Psi + 14 Psi/N;  ZeRO-3: 16 Psi/N
  // DeepSpeed 0.19.8 keeps exactly these (FP16_Optimizer at ZeRO-0: fp16 params/grads + fp32_groups_flat
  // master; ZeRO: bit16 partitions + single_partition_of_fp32_groups). Llama 2 7B, Psi = 6,738,415,616, N =
  // 16; DeepSpeed pads each tensor's partition to whole elements: < #tensors x 16 elements x 16 B of slack.
  Setup s("llama2-7b", "dgx-h100", 16);
  const double psi = 6'738'415'616.0, N = 16;
  const double slack = static_cast<double>(tensor_count(s.model)) * 16.0 * 16.0;
  const double expected[4] = {16 * psi, 4 * psi + 12 * psi / N, 2 * psi + 14 * psi / N, 16 * psi / N};
  for (int z = 0; z <= 3; ++z) {
    INFO("zero " << z);
    const Bytes b = total(Simulator::persistent_state(s.model, s.resolve(fp16(Runtime::kDeepSpeed, z))));
    CHECK(static_cast<double>(b) >= expected[z]);
    CHECK(static_cast<double>(b) <= expected[z] + slack);
  }
}

TEST_CASE("fp16-mixed: FSDP2 ZeRO-3 keeps fp32 shards, fp32 gradients and fp32 Adam: 16 Psi/N exactly",
          "[fp16][memory]") {
  // MixedPrecisionPolicy(param_dtype=float16, reduce_dtype=float32) over fp32 sharded parameters: 4 + 4 + 8
  // bytes per parameter on each of 16 ranks. Every dim 0 of Llama-3-70B divides by 16 (no padding):
  // 16 x 70,553,706,496 / 16 = 70,553,706,496, plus fused AdamW's `step` scalar per parameter tensor (723
  // tensors: 9 per block x 80 + embedding, final norm, output) at 512 B each.
  Setup s("llama3-70b", "dgx-h100", 16);
  const auto ps = Simulator::persistent_state(s.model, s.resolve(fp16(Runtime::kFsdp2, 3)));
  CHECK(total(ps) == 70'553'706'496 + 723 * 512);
  CHECK(ps[0] == 4 * 4'409'606'656);  // fp32 shards: Psi/16 = 4,409,606,656 per rank
  CHECK(ps[1] == 4 * 4'409'606'656);  // fp32 gradient shards (reduce_dtype fp32)
}

TEST_CASE("fp16-mixed: the loss scaler reads and writes every local gradient and all-reduces its flag",
          "[fp16][time]") {
  // FSDP2 ZeRO-3 on 8 H100s: torch._amp_foreach_non_finite_check_and_unscale_ reads and writes each fp32
  // gradient shard (2 x 4 B x Psi / 8), then found_inf (4 B) is all-reduced over the 8 ranks.
  Setup s("llama3-8b", "dgx-h100", 8);
  const Result r = s.run(fp16(Runtime::kFsdp2, 3), true);
  const double psi = 8'030'261'248.0;
  const double want =
      s.costs->memory_s(2 * 4 * psi / 8) +
      s.costs->collective_s(CollectiveKind::kAllReduce, fw::kLossScalerFlagBytes, s.cluster->group(8, 1));
  CHECK(task_s(r, "loss scaler") == Approx(want).epsilon(1e-9));
  // bf16-mixed has no loss scaler; fp16-mixed's step is longer by at least the scaler's pass.
  Plan bf = fp16(Runtime::kFsdp2, 3);
  bf.precision = Precision::kBf16Mixed;
  const Result b = s.run(bf, true);
  CHECK(task_s(b, "loss scaler") < 0);
  CHECK(r.step_s - b.step_s >= s.costs->memory_s(2 * 4 * psi / 8));
  // DeepSpeed ZeRO-2: has_inf_or_nan's amax and amin read the fp16 gradient partition twice (2 x 2 B x
  // Psi / 8, the partition padded per tensor).
  const Result d = s.run(fp16(Runtime::kDeepSpeed, 2), true);
  const double part = static_cast<double>(state_elems(s.model, d.plan).optimizer);
  CHECK(part >= psi / 8);
  const double want_ds =
      s.costs->memory_s(2 * 2 * part) +
      s.costs->collective_s(CollectiveKind::kAllReduce, fw::kLossScalerFlagBytes, s.cluster->group(8, 1));
  CHECK(task_s(d, "loss scaler") == Approx(want_ds).epsilon(1e-9));
}

TEST_CASE("fp16-mixed: DeepSpeed ZeRO-0's FP16_Optimizer flattens fp32 copies of every gradient",
          "[fp16][memory]") {
  // fused_optimizer.py step: `p.grad.to(float32)` for every parameter (4 B x Psi, alive together) flattened
  // into one fp32 gradient (another 4 B x Psi) before the copies are freed: the optimizer category rises by
  // 8 B x Psi over its persistent level for that moment, and by 4 B x Psi through the step.
  Setup s("gpt2-xl", "dgx-h100", 1);
  const Result r = s.run(fp16(Runtime::kDeepSpeed, 0), true);
  const Result b = s.run(
      [&] {
        Plan p = fp16(Runtime::kDeepSpeed, 0);
        p.precision = Precision::kBf16Mixed;
        return p;
      }(),
      true);
  const double psi = static_cast<double>(s.model.parameters());
  const Bytes hi16 = test::max_category_bytes(r.detail->program, MemCategory::kOptimizer);
  const Bytes hibf = test::max_category_bytes(b.detail->program, MemCategory::kOptimizer);
  CHECK(static_cast<double>(hi16 - hibf) == Approx(8 * psi).epsilon(1e-6));
}

TEST_CASE("fp16-mixed: Volta refuses bf16 precisions, float8 and flash attention in one line",
          "[fp16][plan]") {
  Setup s("llama3-8b", "dgx-v100-32g", 8);
  Plan p;  // bf16-mixed, the default
  try {
    s.resolve(p);
    FAIL("bf16-mixed resolved on Volta");
  } catch (const InputError& e) {
    const std::string w = e.what();
    CHECK(w.find("--precision") != std::string::npos);
    CHECK(w.find("Volta") != std::string::npos);
    CHECK(w.find("fp16-mixed") != std::string::npos);
    CHECK(w.find('\n') == std::string::npos);
  }
  for (Precision q : {Precision::kBf16, Precision::kBf16True}) {
    p.precision = q;
    CHECK_THROWS_AS(s.resolve(p), InputError);
  }
  p.precision = Precision::kFp16Mixed;
  CHECK_NOTHROW(s.resolve(p));
  p.fp8 = Fp8::kTensorwise;
  CHECK_THROWS_WITH(s.resolve(p), Catch::Contains("float8"));
  p.fp8 = Fp8::kNone;
  p.sdpa_backend = SdpaBackend::kFlash;
  CHECK_THROWS_WITH(s.resolve(p), Catch::Contains("sm80"));
  // fp16 on Volta computes at the preset's 16-bit tensor rate: 125 TFLOPS (V100 SXM2 datasheet).
  CHECK(s.cluster->spec().gpu.peak_bf16_flops == 125e12);
}
