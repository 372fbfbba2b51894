// Internal to simulator/plan/knobs*.cpp: how one knob of the table is written (parsers of its text, the
// builders of an integer, switch or enum knob from a Plan field).
#pragma once
#include <charconv>
#include <cmath>
#include <string>
#include <vector>

#include "simulator/plan/knobs.hpp"

namespace shardplan::knob_detail {

/// Shortest text that reads back as `v` ("1", "1.25").
inline std::string format_double(double v) {
  char buf[32];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, ptr) : std::to_string(v);
}

inline std::string parse_int(const std::string& text, std::int64_t lo, std::int64_t hi, std::int64_t& out) {
  std::int64_t v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || ptr != end) return "expected an integer, got \"" + text + "\"";
  if (v < lo || v > hi)
    return "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + text;
  out = v;
  return "";
}

inline std::string parse_double(const std::string& text, double lo, double hi, double& out) {
  double v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || ptr != end || !std::isfinite(v))
    return "expected a number, got \"" + text + "\"";
  if (v < lo || v > hi)
    return "must be in [" + format_double(lo) + ", " + format_double(hi) + "], got " + text;
  out = v;
  return "";
}

inline std::string parse_bool(const std::string& text, bool& out) {
  if (text == "true") return out = true, "";
  if (text == "false") return out = false, "";
  return "expected true or false, got \"" + text + "\"";
}

template <class E>
std::vector<std::string> names() {
  std::vector<std::string> out;
  for (E e : EnumValues<E>::v) out.push_back(to_string(e));
  return out;
}

template <class E>
std::string parse_enum_text(const std::string& text, E& out) {
  if (auto e = parse_enum<E>(text)) return out = *e, "";
  return "unknown value \"" + text + "\"; expected one of: " + enum_names<E>();
}

inline Knob make(const char* key, const char* flag, KnobKind kind, const char* help, const char* def,
                 std::vector<std::string> values = {}, std::int64_t lo = 0, std::int64_t hi = 0) {
  Knob k;
  k.key = key;
  k.flag = flag;
  k.kind = kind;
  k.help = help;
  k.default_text = def;
  k.values = std::move(values);
  k.lo = lo;
  k.hi = hi;
  return k;
}

template <class T>
Knob int_knob(const char* key, const char* flag, const char* help, const char* def, std::int64_t lo,
              std::int64_t hi, T Plan::*field) {
  Knob k = make(key, flag, KnobKind::kInt, help, def, {}, lo, hi);
  k.get = [field](const Plan& p) { return std::to_string(p.*field); };
  k.set = [field, lo, hi](Plan& p, const std::string& t) {
    std::int64_t v = 0;
    std::string why = parse_int(t, lo, hi, v);
    if (why.empty()) p.*field = static_cast<T>(v);
    return why;
  };
  return k;
}

inline Knob switch_knob(const char* key, const char* flag, const char* help, bool Plan::*field,
                        bool flag_sets = true) {
  Knob k = make(key, flag, KnobKind::kSwitch, help, flag_sets ? "false" : "true", {"true", "false"});
  k.switch_sets = flag_sets ? "true" : "false";
  k.get = [field](const Plan& p) { return std::string(p.*field ? "true" : "false"); };
  k.set = [field](Plan& p, const std::string& t) { return parse_bool(t, p.*field); };
  return k;
}

template <class E>
Knob enum_knob(const char* key, const char* flag, const char* help, E Plan::*field) {
  Knob k = make(key, flag, KnobKind::kEnum, help, to_string(Plan{}.*field), names<E>());
  k.get = [field](const Plan& p) { return std::string(to_string(p.*field)); };
  k.set = [field](Plan& p, const std::string& t) { return parse_enum_text(t, p.*field); };
  return k;
}

/// An enum knob whose default prints nothing: repro lines and run records of plans without it are unchanged.
template <class E>
Knob quiet_enum_knob(const char* key, const char* flag, const char* help, E Plan::*field) {
  Knob k = enum_knob(key, flag, help, field);
  k.get = [field, def = Plan{}.*field](const Plan& p) {
    return p.*field == def ? std::string() : std::string(to_string(p.*field));
  };
  return k;
}

/// The knob groups of the table, in its order (knobs_groups.cpp).
void add_sharding_knobs(std::vector<Knob>& t);
void add_lora_knobs(std::vector<Knob>& t);
Knob activation_offload_knob();
void add_kernel_knobs(std::vector<Knob>& t);
void add_precision_and_layer_knobs(std::vector<Knob>& t);
void add_allocator_knobs(std::vector<Knob>& t);
void add_pipeline_knobs(std::vector<Knob>& t);
void add_cp_ep_knobs(std::vector<Knob>& t);
void add_zeropp_knobs(std::vector<Knob>& t);

}  // namespace shardplan::knob_detail
