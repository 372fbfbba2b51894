// The version-dependent defaults of the frameworks a plan runs on: one table, each row a knob value that
// holds for a range of framework versions (torchtitan by commit date or release, torch by release), with the
// commit or release that changed it. `--framework torchtitan@DATE|torchtitan@RELEASE|torch@VERSION|
// deepspeed@VERSION` applies the rows of that version; `--from` infers the torchtitan version from a config's
// layout. tools/convert_published.py reads the same rows from tools/framework_defaults.json, which
// `shardplan list frameworks --json` writes from this table (a test keeps the two equal).
#pragma once
#include <set>
#include <string>
#include <vector>

#include "core/json_reader.hpp"
#include "simulator/plan/plan.hpp"
#include "topologies/cluster.hpp"

namespace shardplan {

/// One version-dependent default: `knob` = `value` from `from` (inclusive) to `to` (exclusive); "" = open.
/// torchtitan versions are commit dates (YYYY-MM-DD), torch and deepspeed versions release numbers.
struct VersionRule {
  const char* id;         ///< stable name (the converter looks rules up by it)
  const char* framework;  ///< "torchtitan", "torch", "deepspeed"
  const char* knob;       ///< plan knob key (simulator/plan/knobs.hpp)
  const char* value;
  const char* from;
  const char* to;
  /// When the row applies beyond the version: "" always; "ac=selective"; "arch=hopper" / "arch=blackwell"
  /// (the GPU); "root-unit" (FSDP2 with ZeRO 2 or 3, no TP / PP / EP: torchtitan's wrapping of the root);
  /// "root-unit,zero=3".
  const char* condition;
  /// Set by the framework's launch script rather than by its config (torchtitan's run_train.sh): applied by
  /// --framework, not inferred from a --from file.
  bool launcher;
  const char* source;  ///< the commit, PR or release that changed it
  const char* note;    ///< one sentence (the converter writes it into the run records' notes)
};

/// Every row, in a stable order.
const std::vector<VersionRule>& version_rules();
/// The rule with id `id`; std::logic_error if none (a caller's typo).
const VersionRule& version_rule(const std::string& id);

/// A framework at a version: "torchtitan@2024-12-15", "torchtitan@0.2.1" (its release date), "torch@2.4.1",
/// "deepspeed@0.16.4".
struct FrameworkVersion {
  std::string framework, version;  ///< version as given
  std::string date;                ///< torchtitan: the commit date the version means (a release's date)
  std::string spec() const { return framework + "@" + version; }
};
/// Parses --framework's value; InputError naming `where` with the valid forms.
FrameworkVersion parse_framework(const std::string& text, const std::string& where);

/// torchtitan releases and their dates (PyPI / the repository's tags), for "torchtitan@0.2.1".
const std::vector<std::pair<std::string, std::string>>& torchtitan_releases();

/// The knob values a framework version sets on a plan: the rows of that framework and version whose condition
/// holds for `p` on `arch` (launcher rows only with `with_launcher`), as (knob key, value, the row) in table
/// order. Keys in `explicit_keys` are left out (the user's flags and files win).
struct AppliedDefault {
  std::string knob, value;
  const VersionRule* rule;
};
/// `tied_embeddings`: the model's (torchtitan's root-unit rows are not modelled with a tied head).
std::vector<AppliedDefault> framework_defaults(const FrameworkVersion& v, const Plan& p, GpuArch arch,
                                               bool tied_embeddings, bool with_launcher,
                                               const std::set<std::string>& explicit_keys);
/// The rows a plan search cannot pin for every candidate (conditions on the searched layout: "root-unit").
bool searched_condition(const VersionRule& r);

/// The table as JSON ("shardplan.frameworks/1"): what `shardplan list frameworks --json` prints and
/// tools/framework_defaults.json holds.
Json version_rules_json();

}  // namespace shardplan
