// shardplan: the thin CLI. Parse, load, call one library entry point, map errors to exit codes
// (0 success, 1 does not fit / threshold failed, 2 bad input).
#include <fmt/format.h>

#include <iostream>

#include "core/checked.hpp"
#include "core/error.hpp"
#include "planner/cli/api.hpp"

int main(int argc, char** argv) {
  using namespace shardplan;
  CLI::App app;
  std::vector<cli::Command> commands = cli::add_commands(app);  // shared with the Python module (cli/api.hpp)
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "shardplan: "
              << cli::parse_error_message(app, std::vector<std::string>(argv + 1, argv + argc), e.what())
              << "\n";
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
