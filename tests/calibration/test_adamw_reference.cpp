// The CPU AdamW reference (the yardstick of the CUDA kernel) against values computed by hand.
#include <catch2/catch.hpp>

#include "calibration/adamw_reference.hpp"

using namespace shardplan::calibration;

TEST_CASE("AdamW step matches hand-computed values", "[adamw]") {
  // lr 0.1, betas (0.9, 0.999), eps 1e-8, weight decay 0.1; p = 1, g = 0.5, m = v = 0.
  const AdamwHyper h{0.1, 0.9, 0.999, 1e-8, 0.1};
  float p = 1.0f, m = 0.0f, v = 0.0f;
  // Step 1: p = 1 * (1 - 0.1*0.1) = 0.99; m = 0.1*0.5 = 0.05; v = 0.001*0.25 = 2.5e-4;
  // step_size = 0.1 / (1 - 0.9) = 1; sqrt(v)/sqrt(1 - 0.999) = 0.0158114/0.0316228 = 0.5;
  // p = 0.99 - 1 * 0.05 / (0.5 + 1e-8) = 0.89.
  const auto s1 = adamw_step_scalars(h, 1);
  CHECK(s1.step_size == Approx(1.0f));
  CHECK(s1.bias_correction2_sqrt == Approx(0.0316227766f));
  adamw_update(p, 0.5f, m, v, s1);
  CHECK(m == Approx(0.05f));
  CHECK(v == Approx(2.5e-4f).epsilon(1e-4));  // 1 - 0.999f carries float rounding of 0.999
  CHECK(p == Approx(0.89f).epsilon(1e-6));
  // Step 2: p = 0.89 * 0.99 = 0.8811; m = 0.9*0.05 + 0.05 = 0.095; v = 0.999*2.5e-4 + 2.5e-4 = 4.9975e-4;
  // v / (1 - 0.999^2) = 4.9975e-4 / 1.999e-3 = 0.25 -> denom 0.5; step_size = 0.1 / 0.19;
  // p = 0.8811 - (0.1/0.19) * 0.095 / 0.5 = 0.8811 - 0.1 = 0.7811.
  adamw_update(p, 0.5f, m, v, adamw_step_scalars(h, 2));
  CHECK(m == Approx(0.095f));
  CHECK(v == Approx(4.9975e-4f).epsilon(1e-4));
  CHECK(p == Approx(0.7811f).epsilon(1e-5));
  CHECK_THROWS(adamw_step_scalars(h, 0));
}

TEST_CASE("bf16 conversion rounds to nearest even", "[adamw]") {
  CHECK(float_to_bf16_bits(1.0f) == 0x3F80);
  CHECK(bf16_bits_to_float(0x3F80) == 1.0f);
  CHECK(float_to_bf16_bits(1.00390625f) == 0x3F80);  // exactly halfway between 0x3F80 and 0x3F81: keep even
  CHECK(float_to_bf16_bits(1.01171875f) == 0x3F82);  // halfway between 0x3F81 and 0x3F82: round to even
  CHECK(float_to_bf16_bits(1.0078125f) == 0x3F81);   // representable
}

TEST_CASE("layouts: bytes per parameter and the reference update", "[adamw]") {
  // mechanics.md section 5: fp32 16 read + 12 written; bf16-mixed (2+4+4+4) + (4+4+4+2); bf16 8 + 6.
  CHECK(adamw_bytes_per_param(AdamwLayout::kFp32) == 28);
  CHECK(adamw_bytes_per_param(AdamwLayout::kBf16Mixed) == 28);
  CHECK(adamw_bytes_per_param(AdamwLayout::kBf16) == 14);
  CHECK(*parse_adamw_layout("bf16-mixed") == AdamwLayout::kBf16Mixed);
  CHECK_FALSE(parse_adamw_layout("fp16"));

  const auto s = adamw_step_scalars({}, 1);
  auto fp32 = AdamwHostState::random(AdamwLayout::kFp32, 1000, 7);
  auto mixed = AdamwHostState::random(AdamwLayout::kBf16Mixed, 1000, 7);
  const auto before = fp32;
  adamw_reference_step(fp32, s);
  adamw_reference_step(mixed, s);
  CHECK(adamw_max_rel_diff(fp32, before) > 0);  // something moved
  // bf16-mixed writes the bf16 copy of the fp32 master.
  for (std::size_t i = 0; i < mixed.size(); ++i) CHECK(mixed.p16[i] == float_to_bf16_bits(mixed.p32[i]));
  // A bf16 state follows the fp32 one to bf16 precision (relative 2^-8 per rounding, a few roundings).
  auto b16 = AdamwHostState::random(AdamwLayout::kBf16, 1000, 7);
  auto as32 = AdamwHostState{};
  as32.layout = AdamwLayout::kFp32;
  for (std::size_t i = 0; i < b16.size(); ++i) {
    as32.p32.push_back(bf16_bits_to_float(b16.p16[i]));
    as32.g32.push_back(bf16_bits_to_float(b16.g16[i]));
    as32.m32.push_back(bf16_bits_to_float(b16.m16[i]));
    as32.v32.push_back(bf16_bits_to_float(b16.v16[i]));
  }
  adamw_reference_step(b16, s);
  adamw_reference_step(as32, s);
  auto b16_as32 = as32;
  for (std::size_t i = 0; i < b16.size(); ++i) b16_as32.p32[i] = bf16_bits_to_float(b16.p16[i]);
  CHECK(adamw_max_rel_diff(b16_as32, as32, 1e-3) < 0.02);
}
