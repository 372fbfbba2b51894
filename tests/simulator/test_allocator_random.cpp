// The caching-allocator replay (simulator/memory/allocator.hpp) over random sequences: its invariants,
// determinism and PyTorch's behaviour where no hand-derived case reaches. Split from test_allocator.cpp.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "simulator/memory/allocator.hpp"

using namespace shardplan;

namespace {
constexpr Bytes MiB = kMiB;
using CA = CachingAllocator;

struct Op {
  bool is_malloc;
  Bytes size;
  int stream;
  std::size_t victim;  // index into the live list for a free
};
// A random sequence: sizes log-uniform from 1 B to 64 MiB, 3 streams, 55 % mallocs.
std::vector<Op> random_ops(std::uint64_t seed, int n) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> log_size(0.0, 26.0);
  std::vector<Op> ops;
  for (int i = 0; i < n; ++i) {
    Op op{};
    op.is_malloc = rng() % 100 < 55;
    op.size = static_cast<Bytes>(std::exp2(log_size(rng)));
    op.stream = static_cast<int>(rng() % 3);
    op.victim = static_cast<std::size_t>(rng());
    ops.push_back(op);
  }
  return ops;
}
}  // namespace

TEST_CASE("allocator: properties over random sequences", "[simulator][allocator]") {
  AllocatorConfig cfgs[5];
  cfgs[1].expandable_segments = true;
  cfgs[2].max_split_size_bytes = 32 * MiB;
  cfgs[3].capacity_bytes = 1 * kGiB;
  cfgs[4].capacity_bytes = 1 * kGiB;
  cfgs[4].garbage_collection_threshold = 0.6;
  cfgs[4].max_split_size_bytes = 20 * MiB;
  for (int c = 0; c < 5; ++c) {
    for (std::uint64_t seed = 1; seed <= 6; ++seed) {
      CAPTURE(c, seed);
      CachingAllocator a(cfgs[c]);
      std::vector<BlockId> live;
      Bytes live_rounded = 0;
      std::vector<Bytes> live_sizes;
      int step = 0;
      for (const Op& op : random_ops(seed, 3000)) {
        ++step;
        if (op.is_malloc || live.empty()) {
          BlockId id = a.malloc(op.size, op.stream);
          if (id == kNoBlock) continue;  // OOM (capacity config): reported, state unchanged
          live.push_back(id);
          live_sizes.push_back(CA::round_size(op.size));
          live_rounded += CA::round_size(op.size);
        } else {
          const std::size_t k = op.victim % live.size();
          a.free(live[k]);
          live_rounded -= live_sizes[k];
          live[k] = live.back();
          live.pop_back();
          live_sizes[k] = live_sizes.back();
          live_sizes.pop_back();
        }
        const AllocatorStats& s = a.stats();
        REQUIRE(s.allocated_bytes <= s.reserved_bytes);
        REQUIRE(s.allocated_bytes >= live_rounded);  // a block can be larger than its rounded request
        REQUIRE(s.reserved_bytes >= live_rounded);
        REQUIRE(s.reserved_peak_bytes >= s.allocated_peak_bytes);
        if (step % 250 == 0) REQUIRE(a.check_invariants() == "");
      }
      REQUIRE(a.check_invariants() == "");
      for (BlockId id : live) a.free(id);
      // Everything freed: every byte of every segment is back in a free block; default segments merge back
      // into one block each, so nothing is inactive-split.
      CHECK(a.stats().allocated_bytes == 0);
      CHECK(a.cached_bytes() == a.stats().reserved_bytes);
      CHECK(a.stats().inactive_split_bytes == 0);
      CHECK(a.check_invariants() == "");
      a.empty_cache();
      CHECK(a.stats().reserved_bytes == 0);
      CHECK(a.stats().segments == 0);
      CHECK(a.stats().expandable_segments == 0);
      CHECK(a.check_invariants() == "");
    }
  }
}

TEST_CASE("allocator: replays are deterministic, and reset() starts afresh", "[simulator][allocator]") {
  auto replay = [](CachingAllocator& a) {
    std::vector<BlockId> live;
    for (const Op& op : random_ops(42, 5000)) {
      if (op.is_malloc || live.empty()) {
        BlockId id = a.malloc(op.size, op.stream);
        if (id != kNoBlock) live.push_back(id);
      } else {
        const std::size_t k = op.victim % live.size();
        a.free(live[k]);
        live[k] = live.back();
        live.pop_back();
      }
    }
    return a.stats();
  };
  for (bool exp : {false, true}) {
    AllocatorConfig cfg;
    cfg.expandable_segments = exp;
    CachingAllocator a(cfg), b(cfg);
    const AllocatorStats s1 = replay(a);
    const AllocatorStats s2 = replay(b);
    a.reset(cfg);
    const AllocatorStats s3 = replay(a);
    for (const AllocatorStats* s : {&s2, &s3}) {
      CHECK(s->reserved_bytes == s1.reserved_bytes);
      CHECK(s->reserved_peak_bytes == s1.reserved_peak_bytes);
      CHECK(s->reserved_peak_malloc_index == s1.reserved_peak_malloc_index);
      CHECK(s->allocated_peak_bytes == s1.allocated_peak_bytes);
      CHECK(s->inactive_split_bytes == s1.inactive_split_bytes);
      CHECK(s->num_device_alloc == s1.num_device_alloc);
    }
    CHECK(s1.reserved_peak_bytes > s1.allocated_peak_bytes);  // the sequence does fragment
  }
}

TEST_CASE("allocator: misuse is an error, not a crash", "[simulator][allocator]") {
  CachingAllocator a;
  CHECK_THROWS_AS(a.malloc(0, 0), std::invalid_argument);
  CHECK_THROWS_AS(a.malloc(CA::kMaxRequestBytes + 1, 0), std::invalid_argument);
  CHECK(a.malloc(CA::kMaxRequestBytes, 0) != kNoBlock);  // 1 PiB: a 2 MiB-rounded segment, no overflow
  BlockId x = a.malloc(100, 0);
  a.free(x);
  CHECK_THROWS_AS(a.free(x), std::invalid_argument);
  CHECK_THROWS_AS(a.free(12345), std::invalid_argument);
  AllocatorConfig bad;
  bad.capacity_bytes = -1;
  CHECK_THROWS_AS(CachingAllocator(bad), std::invalid_argument);
}
