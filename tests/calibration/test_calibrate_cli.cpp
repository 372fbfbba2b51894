// `shardplan calibrate import-nccl-tests` and `calibrate show` through CLI11, as the shardplan binary runs
// them.
#include <catch2/catch.hpp>

#include "calibration/profile.hpp"
#include "helpers.hpp"
#include "planner/cli/commands.hpp"

using namespace shardplan;

namespace {
int run_cli(std::vector<std::string> args) {
  CLI::App app("shardplan");
  auto cmd = cli::add_calibrate_command(app);
  std::vector<const char*> argv{"shardplan"};
  for (auto& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), argv.data());
  return cmd.run();
}
}  // namespace

TEST_CASE("calibrate import-nccl-tests writes a loadable profile", "[cli]") {
  const auto out = test::temp_path("cli_profile.json");
  std::remove(out.c_str());
  CHECK(run_cli({"calibrate", "import-nccl-tests", test::nccl_log("h100_2node_16rank_all_reduce.txt"),
                 test::nccl_log("gb10_2node_all_gather.txt"), "-o", out}) == 0);
  const auto p = CalibrationProfile::load(out);
  CHECK(p.collectives().size() == 4);  // {AR 16/2, AG 2/2} x {out_of_place, in_place}
  CHECK(run_cli({"calibrate", "show", out}) == 0);
}

TEST_CASE("calibrate exits 2 on bad input and writes nothing", "[cli]") {
  const auto out = test::temp_path("cli_bad.json");
  std::remove(out.c_str());
  CHECK(run_cli({"calibrate", "import-nccl-tests", "/nonexistent.log", "-o", out}) == 2);
  CHECK(run_cli({"calibrate", "import-nccl-tests", test::nccl_log("h100_2node_16rank_all_reduce.txt"), "-o",
                 out, "--ranks", "8"}) == 2);
  CHECK(run_cli({"calibrate", "import-nccl-tests", test::nccl_log("h100_2node_16rank_all_reduce.txt"), "-o",
                 out, "--nodes", "2", "--gpus-per-node", "8"}) == 2);
  CHECK_FALSE(std::ifstream(out).good());
  CHECK(run_cli({"calibrate", "show", "/nonexistent.json"}) == 2);
}
