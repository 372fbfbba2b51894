// `shardplan list knobs`: the one knob table (simulator/plan/knobs*.cpp) as JSON and as text.
#include "planner/knob_table.hpp"

#include <fmt/format.h>

#include "simulator/plan/plan.hpp"

namespace shardplan {

namespace {

const char* kind_name(KnobKind k) {
  switch (k) {
    case KnobKind::kInt:
      return "int";
    case KnobKind::kBool:
      return "bool";
    case KnobKind::kSwitch:
      return "switch";
    case KnobKind::kEnum:
      return "enum";
    case KnobKind::kText:
      return "text";
    case KnobKind::kDouble:
      return "double";
  }
  return "";
}

/// Whether the knob's default text is itself a value of the knob, the one an unset plan has: the setter takes
/// it and a default Plan reads the same after it ("3" for --zero, "adamw" for --optimizer), as opposed to a
/// phrase ("the model's", "true for ZeRO-3, false otherwise").
bool default_is_value(const Knob& k) {
  if (k.kind == KnobKind::kSwitch) return true;  // "true" / "false": the key's value without the flag
  Plan p;
  if (!k.set(p, k.default_text).empty()) return false;
  return k.get(p) == k.get(Plan{});
}

/// The capability-table features whose refusal names `flag`, each with every runtime's support.
Json knob_capabilities(const std::string& flag) {
  Json out = Json::array();
  for (int f = 0; f < kFeatures; ++f) {
    const auto feature = static_cast<Feature>(f);
    if (flag != feature_flag(feature)) continue;
    Json support = Json::object();
    for (Runtime r : EnumValues<Runtime>::v) {
      const Support s = capability(r, feature).support;
      support[to_string(r)] = s == Support::kYes ? "yes" : s == Support::kNo ? "no" : "not modelled";
    }
    out.push_back({{"feature", to_string(feature)}, {"support", support}});
  }
  return out;
}

Json knob_json(const Knob& k) {
  Json j = {{"key", k.key},
            {"flag", k.flag},
            {"kind", kind_name(k.kind)},
            {"help", k.help},
            {"default", k.default_text},
            {"default_is_value", default_is_value(k)}};
  if (!k.values.empty()) j["values"] = k.values;
  if (k.kind == KnobKind::kInt) j["range"] = {k.lo, k.hi};
  if (k.kind == KnobKind::kDouble) j["range"] = {k.dlo, k.dhi};
  if (k.kind == KnobKind::kSwitch) j["switch_sets"] = k.switch_sets;
  j["capabilities"] = knob_capabilities(k.flag);
  return j;
}

}  // namespace

Json knob_table_json() {
  Json knobs = Json::array();
  for (const Knob& k : plan_knobs()) knobs.push_back(knob_json(k));
  Json runtimes = Json::array();
  for (Runtime r : EnumValues<Runtime>::v) runtimes.push_back(to_string(r));
  return {
      {"schema", "shardplan.knobs/1"},
      {"generated_by",
       "shardplan list knobs --json (simulator/plan/knobs*.cpp, the one knob table); do not edit by hand"},
      {"runtimes", runtimes},
      {"knobs", knobs}};
}

std::string knob_table_text() {
  std::string out = "Plan knobs (`simulate`/`memory` flags, `plan --fix KEY=VALUE`, run-record plan keys):\n";
  for (const Knob& k : plan_knobs()) {
    std::string values;
    if (k.kind == KnobKind::kInt) values = fmt::format("{}..{}", k.lo, k.hi);
    if (k.kind == KnobKind::kDouble) values = fmt::format("{}..{}", k.dlo, k.dhi);
    if (k.kind == KnobKind::kEnum || k.kind == KnobKind::kBool)
      for (const std::string& v : k.values) values += (values.empty() ? "" : "|") + v;
    if (k.kind == KnobKind::kSwitch) values = "(switch)";
    if (k.kind == KnobKind::kText) values = "TEXT";
    out += fmt::format("  {:<26} {:<40}  default: {}\n", k.flag, values, k.default_text);
  }
  return out;
}

}  // namespace shardplan
