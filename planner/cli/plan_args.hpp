// `shardplan plan`'s arguments and its search space (plan_space.cpp), shared by the command (cmd_plan.cpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "planner/cli/common.hpp"
#include "planner/search.hpp"

namespace shardplan::cli {

struct PlanArgs {
  Inputs in;
  std::int64_t global_batch = 0;
  std::string seq;
  std::vector<std::string> fixes, emits;
  int top = 10, threads = 0;
  double headroom = -1, risk = -1;
  std::string json, html, from, framework;
  std::string headroom_rule;  ///< where the search's headroom comes from (resolved in the command)
};

/// The search space of `plan`: the CLI's defaults (three runtimes, compile and async TP searched, TP within
/// the NVLink domain), the --from file's knobs, the --framework version's defaults and the --fix pins; a
/// pinned value no candidate can take is an InputError. Sets a.global_batch from the --from file when unset.
SearchSpace plan_space(PlanArgs& a, const Loaded& l);

}  // namespace shardplan::cli
