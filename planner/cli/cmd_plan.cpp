#include "planner/cli/commands.hpp"
namespace shardplan::cli {
Command add_plan_command(CLI::App& app) { return {app.add_subcommand("plan", "recommend a sharding plan"), [] { return 2; }}; }
}
