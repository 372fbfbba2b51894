// External tools that some tests drive (chromium, python3 with tomllib, mpirun): where one is missing, the
// check is skipped with a warning on a developer's machine, and FAILS in CI (CI=true, which .ci/run exports
// and CI services set) or with SHARDPLAN_REQUIRE_TOOLS=1, so that a CI image without the tool cannot pass a
// test that tested nothing. tools/setup.sh test installs them.
#pragma once
#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

namespace shardplan::fixture {

/// True in CI (CI=true) or with SHARDPLAN_REQUIRE_TOOLS=1: a missing tool is then a failure.
inline bool tools_required() {
  const char* ci = std::getenv("CI");
  const char* req = std::getenv("SHARDPLAN_REQUIRE_TOOLS");
  return (ci && std::string(ci) == "true") || (req && std::string(req) == "1");
}

}  // namespace shardplan::fixture

/// Inside a TEST_CASE (or a SECTION), where `what` (a stream expression naming the missing tool) is missing:
/// FAIL where tools are required (fixture::tools_required()), else WARN and return from the test case.
#define SHARDPLAN_MISSING_TOOL(what)                                                                         \
  do {                                                                                                       \
    if (::shardplan::fixture::tools_required())                                                              \
      FAIL(                                                                                                  \
          what << " -- required in CI (CI=true or SHARDPLAN_REQUIRE_TOOLS=1); tools/setup.sh test installs " \
                  "it");                                                                                     \
    WARN("skipped: " << what << " (with CI=true this fails)");                                               \
    return;                                                                                                  \
  } while (0)
