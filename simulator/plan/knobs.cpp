// The plan knob table and what is generated from it that needs no CLI library: text parsing of knob values
// and plan_to_flags. The run-record JSON form (plan.cpp) and the CLI options (planner/cli/common.cpp) read
// the same table.
#include "simulator/plan/knobs.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <tuple>

#include "core/error.hpp"
#include "simulator/plan/knob_builders.hpp"

namespace shardplan {

namespace {

std::vector<Knob> build_table() {
  using namespace knob_detail;
  std::vector<Knob> t;
  add_sharding_knobs(t);
  add_lora_knobs(t);
  t.push_back(activation_offload_knob());
  add_kernel_knobs(t);
  add_precision_and_layer_knobs(t);
  add_allocator_knobs(t);
  add_pipeline_knobs(t);
  add_cp_ep_knobs(t);
  add_zeropp_knobs(t);
  return t;
}

std::string normalized(std::string s) {
  if (s.rfind("--", 0) == 0) s = s.substr(2);
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
}

}  // namespace

const std::vector<Knob>& plan_knobs() {
  static const std::vector<Knob> table = build_table();
  return table;
}

const Knob* find_knob(const std::string& key) {
  const std::string k = normalized(key);
  for (const Knob& knob : plan_knobs())
    if (k == knob.key || k == normalized(knob.flag)) return &knob;
  return nullptr;
}

std::vector<std::string> knob_keys() {
  std::vector<std::string> out;
  for (const Knob& k : plan_knobs()) out.push_back(k.key);
  return out;
}

void set_knob(const Knob& k, Plan& p, const std::string& text, const std::string& where) {
  std::string why = k.set(p, text);
  if (!why.empty()) throw InputError::flag(where, why);
}

std::string plan_to_flags(const Plan& p) {
  std::string out;
  for (const Knob& k : plan_knobs()) {
    const std::string v = k.get(p);
    if (v.empty()) continue;
    if (k.kind == KnobKind::kSwitch) {
      if (v == k.switch_sets) out += (out.empty() ? "" : " ") + std::string(k.flag);
      continue;
    }
    out += (out.empty() ? "" : " ") + std::string(k.flag) + " " + v;
  }
  return out;
}

}  // namespace shardplan
