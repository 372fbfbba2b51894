// The CLI as a library: the subcommands registered on a CLI11 app, and one entry point that runs a command
// line in memory (what the command writes to stdout is returned, errors are thrown), for the Python module.
#pragma once
#include <stdexcept>
#include <string>
#include <vector>

#include "planner/cli/commands.hpp"

namespace shardplan::cli {

/// Sets up `app` as the `shardplan` CLI (one subcommand required, --version) and registers every subcommand.
std::vector<Command> add_commands(CLI::App& app);

/// A command line that failed. `what()` is the message the CLI prints after "shardplan: " (parse errors) or
/// "shardplan: error: " (bad input); `exit_code` is the CLI's: 2 bad input or bad arguments, 3 internal
/// error.
class CommandError : public std::runtime_error {
 public:
  CommandError(const std::string& message, int exit_code)
      : std::runtime_error(message), exit_code(exit_code) {}
  int exit_code;
};

struct CommandOutput {
  int exit_code = 0;        ///< 0 success, 1 does not fit / threshold failed (the output is still complete)
  std::string stdout_text;  ///< everything the command wrote to standard output (the JSON with `--json -`)
};

/// Parses `args` (without the program name, e.g. {"memory", "--model", "llama3-8b", "--json", "-"}) with the
/// CLI's own parser and runs the subcommand, capturing its standard output. Help and --version are refused
/// (CommandError, exit 2): they are for a terminal. Calls are serialized: std::cout is redirected while one
/// runs.
CommandOutput run_command(const std::vector<std::string>& args);

/// The message for a command line CLI11 refused: its own, plus a did-you-mean for every `--flag` the chosen
/// subcommand does not have ("--gpu: did you mean --gpus?"). `args` without the program name.
std::string parse_error_message(const CLI::App& app, const std::vector<std::string>& args,
                                const std::string& what);

/// One option of a subcommand, for callers that build command lines (the Python module maps keyword
/// arguments).
struct OptionInfo {
  std::string name;  ///< "--mbs", or the positional's name ("records")
  bool positional = false;
  bool takes_value = true;  ///< false for a switch (--compile)
  bool repeatable = false;  ///< may be given several times (--fix, --emit, validate's records)
};
/// The options of subcommand `command`; CommandError for an unknown subcommand.
std::vector<OptionInfo> command_options(const std::string& command);

}  // namespace shardplan::cli
