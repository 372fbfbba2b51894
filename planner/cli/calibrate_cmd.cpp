// `shardplan calibrate`: import nccl-tests logs into a calibration profile, and show a profile. Thin: parse
// flags, call the calibration library, map InputError to exit code 2 with one line on stderr.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "calibration/nccl_tests_import.hpp"
#include "calibration/profile.hpp"
#include "core/error.hpp"
#include "planner/cli/commands.hpp"

namespace shardplan::cli {

Command add_calibrate_command(CLI::App& app) {
  struct Flags {
    std::vector<std::string> logs;
    std::string output;
    int ranks = 0, nodes = 0, gpus_per_node = 0;  // 0 = from the log
    std::string profile;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cal =
      app.add_subcommand("calibrate", "Build or inspect a calibration profile (shardplan.calibration/1)");
  cal->require_subcommand(1);
  CLI::App* imp =
      cal->add_subcommand("import-nccl-tests", "Import nccl-tests output (text tables or -J JSON)");
  imp->add_option("LOG", f->logs, "nccl-tests output files")->required();
  imp->add_option("-o,--output", f->output, "profile to write (atomically; - for stdout)")->required();
  imp->add_option("--ranks", f->ranks, "ranks of every run (default: the '# Rank' lines)");
  imp->add_option("--nodes", f->nodes, "nodes of every run (default: distinct host names)");
  imp->add_option("--gpus-per-node", f->gpus_per_node, "GPUs per node; nodes = ranks / this");
  CLI::App* show = cal->add_subcommand("show", "Summarise a calibration profile with fit residuals");
  show->add_option("PROFILE", f->profile, "calibration profile JSON")->required();

  Command cmd;
  cmd.sub = cal;
  cmd.run = [f, imp, show]() -> int {
    try {
      if (imp->parsed()) {
        calibration::NcclTestsOverrides ov;
        for (auto [value, flag, slot] :
             {std::tuple{f->ranks, "--ranks", &ov.ranks}, std::tuple{f->nodes, "--nodes", &ov.nodes},
              std::tuple{f->gpus_per_node, "--gpus-per-node", &ov.gpus_per_node}}) {
          if (value < 0)
            throw InputError::flag(flag, "must be a positive integer, got " + std::to_string(value));
          if (value > 0) *slot = value;
        }
        if (ov.nodes && ov.gpus_per_node)
          throw InputError::flag("--nodes", "give --nodes or --gpus-per-node, not both");
        std::vector<std::string> warnings;
        const CalibrationProfile p = calibration::import_nccl_tests(f->logs, ov, &warnings);
        for (const auto& w : warnings) std::cerr << "warning: " << w << "\n";
        p.save(f->output);
        if (f->output != "-")
          std::cerr << "wrote " << f->output << ": " << p.collectives().size() << " collective series\n";
        return 0;
      }
      if (show->parsed()) {
        std::cout << CalibrationProfile::load(f->profile).describe();
        return 0;
      }
      return 2;
    } catch (const InputError& e) {
      std::cerr << e.what() << "\n";
      return 2;
    }
  };
  return cmd;
}

}  // namespace shardplan::cli
