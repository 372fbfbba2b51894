// libFuzzer entry point, compiled once per target: FUZZ_TARGET names one function of fuzz_targets.hpp.
#include "tests/fuzz/fuzz_targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return shardplan::fuzz::run_one(FUZZ_TARGET, data, size);
}
