// Replays every saved fuzzer crash input (tests/fuzz/regressions/<target>/) and every seed through the same
// targets the libFuzzer harnesses drive: each must parse or throw InputError/OverflowError, in every build.
#include <catch2/catch.hpp>

#include "tests/fuzz/fuzz_targets.hpp"
#include "tests/robustness/helpers.hpp"

using namespace shardplan;

TEST_CASE("fuzz regressions and seeds replay without crashes or unexpected exceptions",
          "[robustness][fuzz]") {
  const test::fs::path root = SHARDPLAN_FUZZ_DIR;
  int replayed = 0;
  for (const auto& t : fuzz::targets()) {
    for (const char* set : {"regressions", "seeds"}) {
      const auto dir = root / set / t.name;
      if (!test::fs::exists(dir)) continue;
      for (const auto& e : test::fs::directory_iterator(dir)) {
        const std::string input = test::read_text(e.path());
        INFO(t.name << ": " << e.path().string());
        try {
          t.fn(input);
        } catch (const InputError&) {
        } catch (const OverflowError&) {
        } catch (const std::exception& ex) {
          FAIL("unexpected exception: " << ex.what());
        }
        ++replayed;
      }
    }
  }
  CHECK(replayed >= 20);
}
