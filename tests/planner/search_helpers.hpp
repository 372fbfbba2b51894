// Helpers of the search tests (test_search*.cpp).
#pragma once
#include "planner/search.hpp"

namespace shardplan::ptest {

/// Peak reserved memory plus the runtime overhead: what the search compares with its limit.
inline Bytes used_bytes(const Result& r) {
  return r.peak_reserved_bytes + r.overhead.total();
}

/// FSDP2 plans of 32 sequences of 4,096 tokens: a space small enough for a real search in a test.
inline SearchSpace small_space() {
  SearchSpace sp;
  sp.fix("runtime=fsdp2");
  sp.global_batch = 32;
  sp.seq = 4096;
  return sp;
}

}  // namespace shardplan::ptest
