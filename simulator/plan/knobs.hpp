// The one table of plan knobs: every knob of a Plan declared once (run-record key, CLI flag, kind, default,
// help, valid values, how to read and write it on a Plan). The CLI flags, the run-record plan JSON, `plan
// --fix` and the printed repro line (plan_to_flags) are all generated from it.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "simulator/plan/plan_types.hpp"

namespace shardplan {

enum class KnobKind {
  kInt,     ///< integer in [lo, hi]; JSON integer
  kBool,    ///< true | false given as a value (--reshard-after-forward false); JSON boolean
  kSwitch,  ///< a flag without value (--compile); JSON boolean
  kEnum,    ///< one of `values`; JSON string
  kText,    ///< free text its setter parses (--pp-layers 3,4,4,3); JSON string
  kDouble,  ///< real number in [dlo, dhi]; JSON number
};

struct Knob {
  const char* key = "";   ///< run-record plan key and `--fix` key ("shard_group")
  const char* flag = "";  ///< CLI flag ("--shard-group")
  KnobKind kind = KnobKind::kInt;
  const char* help = "";
  const char* default_text = "";    ///< shown in --help ("the model's", "fsdp2")
  std::vector<std::string> values;  ///< enum spellings (EnumValues order); {"true", "false"} for booleans
  std::int64_t lo = 0, hi = 0;      ///< integer range, for flags, `--fix` and run records alike
  double dlo = 0, dhi = 0;          ///< kDouble: the range
  /// kSwitch only: the value the flag sets ("true"; "false" for --foreach-optimizer, which clears
  /// fused_optimizer).
  const char* switch_sets = "true";
  /// The knob's value on `p` as text ("" when unset and without a resolved form, e.g. seq 0 before
  /// resolve_plan).
  std::function<std::string(const Plan&)> get;
  /// Writes `text` into `p`; returns "" or the reason `text` is not a valid value (the caller names the flag,
  /// `--fix` key or JSON field).
  std::function<std::string(Plan&, const std::string&)> set;
};

/// Every plan knob, in the order plan_to_flags prints them.
const std::vector<Knob>& plan_knobs();
/// The knob with run-record key `key`, or with flag `key` (leading "--" optional, '-' and '_' alike); nullptr
/// if none.
const Knob* find_knob(const std::string& key);
/// Run-record keys of every knob, in table order (for "valid keys" messages).
std::vector<std::string> knob_keys();

/// Sets knob `k` from text; InputError naming `where` (a flag, "--fix KEY") when the value is invalid.
void set_knob(const Knob& k, Plan& p, const std::string& text, const std::string& where);

/// The full CLI flags of a plan, every knob with a value ("--runtime fsdp2 --zero 3 ... --loss-dtype fp32");
/// switches appear only when set. `shardplan simulate ... <flags>` with these flags simulates exactly `p`.
std::string plan_to_flags(const Plan& p);

}  // namespace shardplan
