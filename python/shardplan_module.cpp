// The C++ side of the `shardplan` Python module: runs a `shardplan` command line in memory (the CLI's parser
// and commands, planner/cli/api.hpp) and lists a subcommand's options; python/shardplan/__init__.py builds on
// it.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <tuple>

#include "planner/cli/api.hpp"

namespace nb = nanobind;
using namespace nb::literals;

NB_MODULE(_shardplan, m) {
  m.doc() = "shardplan's CLI, run in memory; use the `shardplan` package, not this module";
  m.def(
      "run",
      [](const std::vector<std::string>& args) -> std::tuple<bool, int, std::string> {
        // (true, exit code 0 or 1, standard output) or (false, exit code 2 or 3, the CLI's error message).
        nb::gil_scoped_release release;  // plans can take seconds; other Python threads keep running
        try {
          shardplan::cli::CommandOutput out = shardplan::cli::run_command(args);
          return {true, out.exit_code, std::move(out.stdout_text)};
        } catch (const shardplan::cli::CommandError& e) {
          return {false, e.exit_code, e.what()};
        }
      },
      "args"_a, "Runs `shardplan ARGS...` and returns (ok, exit_code, stdout or error message).");
  m.def(
      "options",
      [](const std::string& command) {
        // [(name, positional, takes_value, repeatable)]; an unknown command gives [].
        std::vector<std::tuple<std::string, bool, bool, bool>> out;
        try {
          for (const auto& o : shardplan::cli::command_options(command))
            out.emplace_back(o.name, o.positional, o.takes_value, o.repeatable);
        } catch (const shardplan::cli::CommandError&) {
        }
        return out;
      },
      "command"_a, "The options of a subcommand: [(name, positional, takes_value, repeatable)].");
}
