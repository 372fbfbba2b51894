// Each CLI subcommand registers itself on the app and returns the function that runs it once parsed.
// Runners return the process exit code: 0 success, 1 does-not-fit / threshold failed, 2 bad input.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace shardplan::cli {

struct Command {
  CLI::App* sub = nullptr;
  std::function<int()> run;
};

Command add_list_command(CLI::App& app);
Command add_show_command(CLI::App& app);
Command add_collective_command(CLI::App& app);
Command add_memory_command(CLI::App& app);
Command add_simulate_command(CLI::App& app);
Command add_plan_command(CLI::App& app);
Command add_validate_command(CLI::App& app);
Command add_compare_command(CLI::App& app);
Command add_calibrate_command(CLI::App& app);  ///< calibration/ owns this: import-nccl-tests, show

}  // namespace shardplan::cli
