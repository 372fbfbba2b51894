// shardplan: the thin CLI. Parse, load, call one library entry point, map errors to exit codes
// (0 success, 1 does not fit / threshold failed, 2 bad input).
#include <fmt/format.h>

#include <iostream>

#include "planner/cli/commands.hpp"
#include "core/checked.hpp"
#include "core/error.hpp"

int main(int argc, char** argv) {
  using namespace shardplan;
  CLI::App app{"shardplan: memory, step time and sharding plans for sharded LLM training"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "shardplan 0.1.0");
  std::vector<cli::Command> commands = {
      cli::add_list_command(app),     cli::add_show_command(app),     cli::add_collective_command(app),
      cli::add_memory_command(app),   cli::add_simulate_command(app), cli::add_plan_command(app),
      cli::add_validate_command(app), cli::add_calibrate_command(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "shardplan: " << e.what() << "\n";
    return 2;
  }
  try {
    for (auto& c : commands)
      if (c.sub && c.sub->parsed()) return c.run();
  } catch (const InputError& e) {
    std::cerr << "shardplan: error: " << e.what() << "\n";
    return 2;
  } catch (const OverflowError& e) {
    std::cerr << "shardplan: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "shardplan: internal error: " << e.what() << "\n";
    return 3;
  }
  return 2;
}
