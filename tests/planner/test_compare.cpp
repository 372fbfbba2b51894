// `shardplan compare`: plans given as knobs, CLI flags, report JSON or framework configs, simulated and set
// side by side in text, JSON and HTML; a misspelled knob is bad input with a did-you-mean.
#include <catch2/catch.hpp>

#include "core/json_reader.hpp"
#include "plan_helpers.hpp"

using namespace shardplan;
namespace fs = std::filesystem;
using ptest::quote;

TEST_CASE("CLI: compare sets plans side by side in text, JSON and HTML", "[cli][compare]") {
  auto dir = ptest::temp_dir("compare");
  // A: knobs; B: a report JSON of simulate; C: a pipelined plan given as CLI flags after `--`.
  REQUIRE(ptest::run_cli(
              "simulate --model llama3-8b --gpus 8 --tp 2 --seq 8192 --mbs 1 --global-batch 16 --json " +
              quote((dir / "b.json").string())) == 0);
  const std::string args = "compare --model llama3-8b --gpus 8 --global-batch 16 --seq 8192 --json " +
                           quote((dir / "c.json").string()) + " --html " + quote((dir / "c.html").string()) +
                           " -- 'ac=full mbs=2' " + quote((dir / "b.json").string()) +
                           " '--pp 2 --ac selective'";
  REQUIRE(ptest::run_cli(args, dir / "out.txt", dir / "err.txt") == 0);
  const std::string out = ptest::read_text(dir / "out.txt");
  INFO(out << ptest::read_text(dir / "err.txt"));
  CHECK(out.find("  A: ac=full mbs=2") != std::string::npos);
  CHECK(out.find("OOM probability") != std::string::npos);
  CHECK(out.find("tokens/s/GPU") != std::string::npos);
  const Json j = load_json_file((dir / "c.json").string());
  CHECK(j["schema"] == "shardplan.compare/1");
  REQUIRE(j["plans"].size() == 3);
  CHECK(j["plans"][0]["label"] == "A");
  CHECK(j["plans"][1]["plan"]["tp"] == 2);
  CHECK(j["plans"][2]["plan"]["pp"] == 2);
  CHECK(j["plans"][2].contains("pipeline"));
  bool tp_differs = false;
  for (const auto& d : j["differences"]) tp_differs = tp_differs || d["knob"] == "tp";
  CHECK(tp_differs);
  for (const auto& p : j["plans"]) CHECK(p.contains("warnings"));
  const std::string html = ptest::read_text(dir / "c.html");
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(html.find("class=\"chart compare\"") != std::string::npos);
  CHECK(html.find("C: timeline") != std::string::npos);
  CHECK(html.find("chart gantt pipeline") != std::string::npos);  // the pipelined plan drawn whole
}

TEST_CASE("CLI: compare refuses a misspelled knob and a single plan", "[cli][compare]") {
  auto dir = ptest::temp_dir("compare-bad");
  CHECK(ptest::run_cli("compare --model llama3-8b --gpus 8 'tp=1 acc=full' 'tp=2'", dir / "o", dir / "e") ==
        2);
  CHECK(ptest::read_text(dir / "e").find("unknown knob --acc; did you mean --ac?") != std::string::npos);
  CHECK(ptest::run_cli("compare --model llama3-8b --gpus 8 'tp=1'", dir / "o", dir / "e") == 2);
  CHECK(ptest::read_text(dir / "e").find("at least two plans") != std::string::npos);
}
