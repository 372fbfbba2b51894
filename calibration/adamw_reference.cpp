// CPU AdamW reference and host-side step math (see adamw_reference.hpp). Compiled by the host compiler, so
// the CPU tests check exactly what the CUDA benchmark compares its kernel against.
#include "calibration/adamw_reference.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

namespace shardplan::calibration {

std::string_view adamw_layout_name(AdamwLayout layout) {
  return kAdamwLayoutNames[static_cast<int>(layout)];
}

std::optional<AdamwLayout> parse_adamw_layout(std::string_view name) {
  for (int i = 0; i < 3; ++i)
    if (name == kAdamwLayoutNames[i]) return static_cast<AdamwLayout>(i);
  return std::nullopt;
}

std::vector<std::string> adamw_layout_names() {
  return {kAdamwLayoutNames[0], kAdamwLayoutNames[1], kAdamwLayoutNames[2]};
}

std::int64_t adamw_bytes_per_param(AdamwLayout layout) {
  switch (layout) {
    case AdamwLayout::kFp32:
      return 16 + 12;  // read p g m v, write p m v
    case AdamwLayout::kBf16Mixed:
      return (2 + 4 + 4 + 4) + (4 + 4 + 4 + 2);  // + bf16 param copy
    case AdamwLayout::kBf16:
      return 8 + 6;
  }
  return 0;
}

AdamwStepScalars adamw_step_scalars(const AdamwHyper& h, std::int64_t step) {
  if (step < 1) throw std::invalid_argument("AdamW step must be >= 1");
  const double t = static_cast<double>(step);
  const double bc1 = 1.0 - std::pow(h.beta1, t);
  const double bc2 = 1.0 - std::pow(h.beta2, t);
  AdamwStepScalars s;
  s.lr = static_cast<float>(h.lr);
  s.beta1 = static_cast<float>(h.beta1);
  s.beta2 = static_cast<float>(h.beta2);
  s.eps = static_cast<float>(h.eps);
  s.weight_decay = static_cast<float>(h.weight_decay);
  s.step_size = static_cast<float>(h.lr / bc1);
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(bc2));
  return s;
}

std::size_t AdamwHostState::size() const {
  switch (layout) {
    case AdamwLayout::kFp32:
    case AdamwLayout::kBf16Mixed:
      return p32.size();
    case AdamwLayout::kBf16:
      return p16.size();
  }
  return 0;
}

AdamwHostState AdamwHostState::random(AdamwLayout layout, std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> param(-1.0f, 1.0f), grad(-0.1f, 0.1f), mom(-0.01f, 0.01f),
      var(0.0f, 1e-4f);
  AdamwHostState st;
  st.layout = layout;
  auto fill = [&](std::vector<float>& v, auto& dist) {
    v.resize(n);
    for (auto& x : v) x = dist(rng);
  };
  auto fill16 = [&](std::vector<std::uint16_t>& v, auto& dist) {
    v.resize(n);
    for (auto& x : v) x = float_to_bf16_bits(dist(rng));
  };
  switch (layout) {
    case AdamwLayout::kFp32:
      fill(st.p32, param), fill(st.g32, grad), fill(st.m32, mom), fill(st.v32, var);
      break;
    case AdamwLayout::kBf16Mixed:
      fill(st.p32, param), fill16(st.g16, grad), fill(st.m32, mom), fill(st.v32, var);
      st.p16.resize(n);
      for (std::size_t i = 0; i < n; ++i) st.p16[i] = float_to_bf16_bits(st.p32[i]);
      break;
    case AdamwLayout::kBf16:
      fill16(st.p16, param), fill16(st.g16, grad), fill16(st.m16, mom), fill16(st.v16, var);
      break;
  }
  return st;
}

void adamw_reference_step(AdamwHostState& st, const AdamwStepScalars& s) {
  const std::size_t n = st.size();
  for (std::size_t i = 0; i < n; ++i) {
    switch (st.layout) {
      case AdamwLayout::kFp32:
        adamw_update(st.p32[i], st.g32[i], st.m32[i], st.v32[i], s);
        break;
      case AdamwLayout::kBf16Mixed:
        adamw_update(st.p32[i], bf16_bits_to_float(st.g16[i]), st.m32[i], st.v32[i], s);
        st.p16[i] = float_to_bf16_bits(st.p32[i]);
        break;
      case AdamwLayout::kBf16: {
        float p = bf16_bits_to_float(st.p16[i]), m = bf16_bits_to_float(st.m16[i]),
              v = bf16_bits_to_float(st.v16[i]);
        adamw_update(p, bf16_bits_to_float(st.g16[i]), m, v, s);
        st.p16[i] = float_to_bf16_bits(p), st.m16[i] = float_to_bf16_bits(m),
        st.v16[i] = float_to_bf16_bits(v);
        break;
      }
    }
  }
}

double adamw_max_rel_diff(const AdamwHostState& a, const AdamwHostState& b, double floor) {
  if (a.layout != b.layout || a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double x = a.layout == AdamwLayout::kBf16 ? bf16_bits_to_float(a.p16[i]) : a.p32[i];
    const double y = b.layout == AdamwLayout::kBf16 ? bf16_bits_to_float(b.p16[i]) : b.p32[i];
    worst = std::max(worst, std::fabs(x - y) / std::max(std::fabs(y), floor));
  }
  return worst;
}

}  // namespace shardplan::calibration
