// `shardplan list knobs`: the knob table as data (planner/knob_table.cpp) and its committed snapshot
// tools/common/knobs.json that the Python tools build their plan flags from (tools/common/knob_args.py).
// Every expectation is read from the table itself (plan_knobs(), the capability table), not from a hand list.
#include <algorithm>
#include <catch2/catch.hpp>
#include <set>

#include "core/json_reader.hpp"
#include "plan_helpers.hpp"
#include "planner/knob_table.hpp"
#include "simulator/plan/plan.hpp"

using namespace shardplan;
namespace fs = std::filesystem;

TEST_CASE(
    "tools/common/knobs.json is the knob table the binary has (regenerate: tools/common/knobs_snapshot.py)",
    "[knobs][cli]") {
  auto dir = ptest::temp_dir("knobs");
  REQUIRE(ptest::run_cli("list knobs --json " + ptest::quote((dir / "k.json").string())) == 0);
  const std::string written = ptest::read_text(dir / "k.json");
  CHECK(written == ptest::read_text(fs::path(SHARDPLAN_SOURCE_DIR) / "tools" / "common" / "knobs.json"));
  // --json alone and --json - print the same document to stdout.
  REQUIRE(ptest::run_cli("list knobs --json", dir / "bare.json") == 0);
  REQUIRE(ptest::run_cli("list knobs --json -", dir / "dash.json") == 0);
  CHECK(ptest::read_text(dir / "bare.json") == written);
  CHECK(ptest::read_text(dir / "dash.json") == written);
  // The text form: one line per knob after the heading.
  REQUIRE(ptest::run_cli("list knobs", dir / "k.txt") == 0);
  const std::string text = ptest::read_text(dir / "k.txt");
  CHECK(static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n')) == plan_knobs().size() + 1);
}

TEST_CASE("list knobs --json: one clear error for bad input, exit 2", "[knobs][cli]") {
  auto dir = ptest::temp_dir("knobs_err");
  CHECK(ptest::run_cli("list models --json", dir / "o", dir / "e1") == 2);
  CHECK(ptest::read_text(dir / "e1") ==
        "shardplan: error: --json: list models has no JSON form (frameworks and knobs have)\n");
  CHECK(ptest::run_cli("list knob", dir / "o", dir / "e2") == 2);
  CHECK(ptest::read_text(dir / "e2") ==
        "shardplan: error: list: expected \"models\", \"clusters\", \"frameworks\" or \"knobs\", got "
        "\"knob\"\n");
  CHECK(ptest::run_cli("list knobs --json " + ptest::quote((dir / "no" / "such" / "k.json").string()),
                       dir / "o", dir / "e3") == 2);
  CHECK(ptest::read_text(dir / "e3").find("cannot write output") != std::string::npos);
}

TEST_CASE("list knobs --json lists every knob of the table, in its order, as the table holds it", "[knobs]") {
  const Json doc = knob_table_json();
  CHECK(doc["schema"] == "shardplan.knobs/1");
  const Json& knobs = doc["knobs"];
  REQUIRE(knobs.size() == plan_knobs().size());
  std::size_t i = 0;
  for (const Knob& k : plan_knobs()) {
    const Json& j = knobs[i++];
    INFO(k.key);
    CHECK(j["key"] == k.key);
    CHECK(j["flag"] == k.flag);
    CHECK(j["help"] == k.help);
    CHECK(j["default"] == k.default_text);
    CHECK(find_knob(j["flag"].get<std::string>()) == &k);
    CHECK(j.value("values", std::vector<std::string>{}) == k.values);
    if (k.kind == KnobKind::kInt) CHECK(j["range"] == Json{k.lo, k.hi});
    if (k.kind == KnobKind::kDouble) CHECK(j["range"] == Json{k.dlo, k.dhi});
    CHECK(j.contains("range") == (k.kind == KnobKind::kInt || k.kind == KnobKind::kDouble));
    CHECK(j.contains("switch_sets") == (k.kind == KnobKind::kSwitch));
    // default_is_value, checked through another path than knob_table.cpp's: the repro line of a default plan
    // is unchanged by setting the default text (a phrase such as "the model's" is refused or changes it).
    if (k.kind != KnobKind::kSwitch) {
      Plan p;
      const bool same = k.set(p, k.default_text).empty() && plan_to_flags(p) == plan_to_flags(Plan{});
      CHECK(j["default_is_value"] == same);
    }
  }
}

TEST_CASE("list knobs --json: every listed value round-trips through the table, others are refused",
          "[knobs]") {
  const Json doc = knob_table_json();
  for (const Json& j : doc["knobs"]) {
    const Knob& k = *find_knob(j["key"].get<std::string>());
    INFO(k.key);
    for (const std::string& v : j.value("values", std::vector<std::string>{})) {
      INFO(v);
      Plan p;
      REQUIRE(k.set(p, v).empty());
      // Read back as written, or as nothing where the knob prints nothing at its default (quiet knobs).
      const std::string back = k.get(p);
      CHECK((back == v || (back.empty() && v == k.default_text)));
    }
    if (j.contains("values")) {
      Plan p;
      CHECK_FALSE(k.set(p, "no-such-value").empty());
    }
    if (k.kind == KnobKind::kInt) {
      const auto lo = j["range"][0].get<std::int64_t>(), hi = j["range"][1].get<std::int64_t>();
      Plan p;
      CHECK(k.set(p, std::to_string(lo)).empty());
      CHECK(k.set(p, std::to_string(hi)).empty());
      CHECK_FALSE(k.set(p, std::to_string(lo - 1)).empty());
      CHECK_FALSE(k.set(p, std::to_string(hi + 1)).empty());
    }
    if (k.kind == KnobKind::kDouble) {
      Plan p;
      CHECK(k.set(p, std::to_string(j["range"][0].get<double>())).empty());
      CHECK_FALSE(k.set(p, std::to_string(j["range"][0].get<double>() - 0.5)).empty());
      CHECK_FALSE(k.set(p, std::to_string(j["range"][1].get<double>() + 0.5)).empty());
    }
  }
}

TEST_CASE("list knobs --json: each knob's capabilities are the features whose refusal names its flag",
          "[knobs]") {
  std::set<std::string> listed;
  const Json doc = knob_table_json();
  for (const Json& j : doc["knobs"])
    for (const Json& c : j["capabilities"]) {
      INFO(j["flag"] << " " << c["feature"]);
      CHECK(listed.insert(c["feature"].get<std::string>()).second);  // once each
      for (Runtime r : EnumValues<Runtime>::v) {
        Feature f{};
        for (int i = 0; i < kFeatures; ++i)
          if (c["feature"] == to_string(static_cast<Feature>(i))) f = static_cast<Feature>(i);
        CHECK(feature_flag(f) == j["flag"].get<std::string>());
        CHECK((c["support"][to_string(r)] == "yes") == has(r, f));
      }
    }
  // Every feature whose flag is a knob's is listed under that knob.
  for (int i = 0; i < kFeatures; ++i) {
    const auto f = static_cast<Feature>(i);
    if (find_knob(feature_flag(f)) != nullptr) CHECK(listed.count(to_string(f)) == 1);
  }
}
