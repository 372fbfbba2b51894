// The CLI's subcommand set and an in-memory runner over it: the `shardplan` executable and the Python module
// parse the same command lines with the same CLI11 app, so they accept the same arguments and fail alike.
#include "planner/cli/api.hpp"

#include <algorithm>
#include <iostream>
#include <mutex>
#include <sstream>

#include "core/checked.hpp"
#include "core/error.hpp"

namespace shardplan::cli {

std::vector<Command> add_commands(CLI::App& app) {
  app.description("shardplan: memory, step time and sharding plans for sharded LLM training");
  app.require_subcommand(1);
  app.set_version_flag("--version", "shardplan 0.1.0");
  return {add_list_command(app),     add_show_command(app),     add_collective_command(app),
          add_memory_command(app),   add_simulate_command(app), add_plan_command(app),
          add_validate_command(app), add_compare_command(app),  add_calibrate_command(app)};
}

std::string parse_error_message(const CLI::App& app, const std::vector<std::string>& args,
                                const std::string& what) {
  // The subcommand: the first argument that names one.
  const CLI::App* sub = nullptr;
  for (const auto& a : args) {
    for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; }))
      if (s->get_name() == a) sub = s;
    if (sub) break;
  }
  std::vector<std::string> names;
  const CLI::App* scope = sub ? sub : &app;
  for (const CLI::Option* o : scope->get_options())
    for (const auto& l : o->get_lnames()) names.push_back("--" + l);
  if (!sub)
    for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; }))
      names.push_back(s->get_name());
  std::string hints;
  for (const auto& a : args) {
    if (a == "--") break;
    const bool flag = a.rfind("--", 0) == 0 && a.size() > 2;
    if (!flag && (sub || a.empty() || a[0] == '-')) continue;
    const std::string word = a.substr(0, a.find('='));
    if (std::find(names.begin(), names.end(), word) != names.end()) continue;
    if (!flag && sub == nullptr) {  // an unknown subcommand
      const std::string m = did_you_mean_list(word, names);
      if (!m.empty()) hints += "; " + word + ": did you mean " + m + "?";
      break;
    }
    const std::string m = did_you_mean_list(word, names);
    if (!m.empty()) hints += "; " + word + ": did you mean " + m + "?";
  }
  return what + hints;
}

namespace {
/// Points std::cout at a string stream for its lifetime.
class CaptureStdout {
 public:
  explicit CaptureStdout(std::ostream& to) : saved_(std::cout.rdbuf(to.rdbuf())) {}
  ~CaptureStdout() { std::cout.rdbuf(saved_); }
  CaptureStdout(const CaptureStdout&) = delete;
  CaptureStdout& operator=(const CaptureStdout&) = delete;

 private:
  std::streambuf* saved_;
};
}  // namespace

CommandOutput run_command(const std::vector<std::string>& args) {
  // std::cout is one per process: one command at a time (the planner's own worker threads do not print).
  static std::mutex running;
  std::lock_guard<std::mutex> lock(running);
  CLI::App app;
  std::vector<Command> commands = add_commands(app);
  try {
    app.parse(std::vector<std::string>(args.rbegin(), args.rend()));  // CLI11 takes the arguments reversed
  } catch (const CLI::CallForHelp&) {
    throw CommandError("--help is for the command line; run `shardplan --help`", 2);
  } catch (const CLI::CallForAllHelp&) {
    throw CommandError("--help-all is for the command line; run `shardplan --help-all`", 2);
  } catch (const CLI::CallForVersion&) {
    throw CommandError("--version is for the command line; run `shardplan --version`", 2);
  } catch (const CLI::ParseError& e) {
    throw CommandError(parse_error_message(app, args, e.what()), 2);
  }
  std::ostringstream out;
  CaptureStdout capture(out);
  try {
    for (auto& c : commands)
      if (c.sub && c.sub->parsed()) {
        const int code = c.run();
        std::cout.flush();
        return {code, out.str()};
      }
  } catch (const InputError& e) {
    throw CommandError(e.what(), 2);
  } catch (const OverflowError& e) {
    throw CommandError(e.what(), 2);
  } catch (const std::exception& e) {
    throw CommandError(std::string("internal error: ") + e.what(), 3);
  }
  throw CommandError("no subcommand given", 2);
}

std::vector<OptionInfo> command_options(const std::string& command) {
  CLI::App app;
  std::vector<Command> commands = add_commands(app);
  for (const auto& c : commands) {
    if (!c.sub || c.sub->get_name() != command) continue;
    std::vector<OptionInfo> options;
    for (const CLI::Option* o : c.sub->get_options()) {
      if (o == c.sub->get_help_ptr() || o == c.sub->get_help_all_ptr()) continue;
      OptionInfo info;
      info.positional = !o->nonpositional();
      if (info.positional)
        info.name = o->get_name(true);
      else
        info.name = o->get_lnames().empty() ? "-" + o->get_snames().front() : "--" + o->get_lnames().front();
      info.takes_value = o->get_items_expected_max() > 0;  // 0 for a flag
      info.repeatable = o->get_items_expected_max() > 1;   // a vector option
      options.push_back(std::move(info));
    }
    return options;
  }
  throw CommandError("unknown command \"" + command + "\"", 2);
}

}  // namespace shardplan::cli
