#include "planner/cli/commands.hpp"
namespace shardplan::cli {
Command add_validate_command(CLI::App& app) { return {app.add_subcommand("validate", "x"), [] { return 2; }}; }
}
