// The caching-allocator replay (simulator/memory/allocator.hpp) against hand-derived PyTorch behaviour:
// rounding and segment sizes, per-stream pools, splitting and merging, max_split_size, the OOM retry path,
// expandable segments, determinism, and invariants over random sequences. Constants:
// c10/cuda/CUDACachingAllocator.cpp (commit 001074d2).
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "simulator/memory/allocator.hpp"

using namespace shardplan;

namespace {
constexpr Bytes MiB = kMiB;
using CA = CachingAllocator;

AllocatorConfig expandable() {
  AllocatorConfig c;
  c.expandable_segments = true;
  return c;
}

// Reserved bytes after a single malloc of `size` on a fresh allocator.
Bytes reserved_after_one(Bytes size, const AllocatorConfig& cfg = {}) {
  CachingAllocator a(cfg);
  REQUIRE(a.malloc(size, 0) != kNoBlock);
  return a.stats().reserved_bytes;
}
}  // namespace

TEST_CASE("allocator: 512-byte rounding and the segment each size class gets", "[simulator][allocator]") {
  // round_size: below 512 B -> 512 B; else the next multiple of 512 B.
  CHECK(CA::round_size(1) == 512);
  CHECK(CA::round_size(511) == 512);
  CHECK(CA::round_size(1 * MiB) == 1 * MiB);              // 2^20 = 2048 · 512
  CHECK(CA::round_size(1 * MiB + 1) == 1 * MiB + 512);    // 1,049,088
  CHECK(CA::round_size(10 * MiB - 1) == 10 * MiB);        // 10,485,760 = 20,480 · 512
  CHECK(CA::round_size(10 * MiB + 1) == 10 * MiB + 512);  // 10,486,272
  // get_allocation_size on the rounded sizes: <= 1 MiB -> 2 MiB small segment; (1 MiB, 10 MiB) -> 20 MiB;
  // >= 10 MiB -> rounded up to 2 MiB. 10 MiB - 1 rounds to exactly 10 MiB = kMinLargeAlloc, so it gets its
  // own 10 MiB segment, not a 20 MiB one; 10 MiB + 512 rounds up to 12 MiB.
  CHECK(reserved_after_one(1) == 2 * MiB);
  CHECK(reserved_after_one(511) == 2 * MiB);
  CHECK(reserved_after_one(1 * MiB) == 2 * MiB);
  CHECK(reserved_after_one(1 * MiB + 1) == 20 * MiB);
  CHECK(reserved_after_one(10 * MiB - 1) == 10 * MiB);
  CHECK(reserved_after_one(10 * MiB + 1) == 12 * MiB);
  // allocated counts the rounded block: 1 B -> 512 B, 1 MiB + 1 -> 1 MiB + 512 (the split keeps the rest
  // free).
  CachingAllocator a;
  a.malloc(1, 0);
  a.malloc(1 * MiB + 1, 0);
  CHECK(a.stats().allocated_bytes == 512 + 1 * MiB + 512);
  CHECK(a.stats().requested_bytes == 1 + 1 * MiB + 1);
}

TEST_CASE("allocator: small requests share one 2 MiB segment", "[simulator][allocator]") {
  CachingAllocator a;
  // Four 1000-byte requests round to 1024 B each and are split off the same 2 MiB small segment
  // (small pool: split whenever the remainder is >= 512 B).
  for (int i = 0; i < 4; ++i) REQUIRE(a.malloc(1000, 0) != kNoBlock);
  CHECK(a.stats().reserved_bytes == 2 * MiB);
  CHECK(a.stats().segments == 1);
  CHECK(a.stats().allocated_bytes == 4 * 1024);
  CHECK(a.stats().num_device_alloc == 1);
  // Two 1 MiB requests fill that segment exactly: 4 KiB + 1 MiB leaves 1 MiB - 4 KiB, too small for the
  // second 1 MiB, which opens a second 2 MiB segment.
  a.malloc(1 * MiB, 0);
  a.malloc(1 * MiB, 0);
  CHECK(a.stats().reserved_bytes == 4 * MiB);
  CHECK(a.stats().segments == 2);
  CHECK(a.check_invariants().empty());
}

TEST_CASE("allocator: a 5 MiB request opens a 20 MiB segment, the next 5 MiB reuses its remainder",
          "[simulator][allocator]") {
  CachingAllocator a;
  a.malloc(5 * MiB, 0);
  // 5 MiB is in (1 MiB, 10 MiB): kLargeBuffer = 20 MiB segment; remainder 15 MiB > kSmallSize -> split.
  CHECK(a.stats().reserved_bytes == 20 * MiB);
  CHECK(a.stats().allocated_bytes == 5 * MiB);
  CHECK(a.stats().inactive_split_bytes == 15 * MiB);
  a.malloc(5 * MiB, 0);
  // Best fit finds the 15 MiB remainder; it splits again (10 MiB left). No new cudaMalloc.
  CHECK(a.stats().reserved_bytes == 20 * MiB);
  CHECK(a.stats().num_device_alloc == 1);
  CHECK(a.stats().allocated_bytes == 10 * MiB);
  CHECK(a.stats().inactive_split_bytes == 10 * MiB);
  CHECK(a.stats().inactive_split_blocks == 1);
  CHECK(a.check_invariants().empty());
}

TEST_CASE("allocator: pools are per stream", "[simulator][allocator]") {
  SECTION("a block freed on stream 0 is not reused by stream 1") {
    CachingAllocator a;
    a.free(a.malloc(5 * MiB, 0));  // 20 MiB segment, now one free unsplit block of stream 0
    a.malloc(6 * MiB, 1);
    // get_free_block rejects the stream-0 block; stream 1 gets its own 20 MiB segment: 40 MiB reserved.
    CHECK(a.stats().reserved_bytes == 40 * MiB);
    CHECK(a.stats().segments == 2);
  }
  SECTION("the same request on stream 0 reuses it") {
    CachingAllocator a;
    a.free(a.malloc(5 * MiB, 0));
    a.malloc(6 * MiB, 0);
    CHECK(a.stats().reserved_bytes == 20 * MiB);
  }
  SECTION("a block freed later (cross-stream use) goes back to its allocation stream's pool") {
    CachingAllocator a;
    BlockId x = a.malloc(4 * MiB, 1);  // allocated on stream 1, used on stream 0, freed last
    a.malloc(4 * MiB, 0);
    a.free(x);
    a.malloc(4 * MiB, 1);  // stream 1 finds x's memory (remainder + x merged) in its own pool
    CHECK(a.stats().reserved_bytes == 40 * MiB);
    CHECK(a.stats().segments == 2);
  }
}

TEST_CASE("allocator: splitting, fragmentation and merging inside one segment", "[simulator][allocator]") {
  CachingAllocator a;
  // One 20 MiB segment: A, B, C of 4 MiB each at offsets 0, 4, 8 MiB; the 8 MiB tail stays free and split.
  BlockId A = a.malloc(4 * MiB, 0);
  BlockId B = a.malloc(4 * MiB, 0);
  BlockId C = a.malloc(4 * MiB, 0);
  REQUIRE(a.stats().reserved_bytes == 20 * MiB);
  CHECK(a.stats().inactive_split_bytes == 8 * MiB);
  a.free(B);
  // B's hole (4 MiB) and the tail (8 MiB) are both free split blocks: 12 MiB inactive split, 2 blocks.
  CHECK(a.stats().inactive_split_bytes == 12 * MiB);
  CHECK(a.stats().inactive_split_blocks == 2);
  a.malloc(6 * MiB, 0);
  // Best fit: 6 MiB does not fit the 4 MiB hole; it takes the 8 MiB tail, whose 2 MiB rest (> 1 MiB) splits
  // off.
  CHECK(a.stats().reserved_bytes == 20 * MiB);
  CHECK(a.stats().inactive_split_bytes == 4 * MiB + 2 * MiB);
  a.malloc(5 * MiB, 0);
  // 6 MiB is free in the segment but in two pieces (4 + 2): the 5 MiB request needs a second 20 MiB segment,
  // whose 15 MiB rest is inactive split too.
  CHECK(a.stats().reserved_bytes == 40 * MiB);
  CHECK(a.stats().inactive_split_bytes == 6 * MiB + 15 * MiB);
  CHECK(a.stats().inactive_split_blocks == 3);
  a.free(A);
  a.free(C);
  // A merges with B's hole, C with [A B]: one 12 MiB free block at offset 0 (plus the 2 MiB and 15 MiB
  // rests).
  CHECK(a.stats().inactive_split_bytes == 12 * MiB + 2 * MiB + 15 * MiB);
  CHECK(a.stats().inactive_split_blocks == 3);
  a.malloc(12 * MiB, 0);
  // Best fit picks the merged 12 MiB block exactly (not the 15 MiB rest): no split, reserved unchanged.
  CHECK(a.stats().reserved_bytes == 40 * MiB);
  CHECK(a.stats().inactive_split_bytes == 2 * MiB + 15 * MiB);
  CHECK(a.check_invariants().empty());
}

TEST_CASE("allocator: large-pool blocks split only above a 1 MiB remainder", "[simulator][allocator]") {
  CachingAllocator a;
  a.free(a.malloc(12 * MiB, 0));  // one free unsplit 12 MiB segment
  a.malloc(11 * MiB, 0);
  // remainder 1 MiB is not > kSmallSize: the whole 12 MiB block is handed out (allocated counts 12 MiB).
  CHECK(a.stats().allocated_bytes == 12 * MiB);
  CHECK(a.stats().inactive_split_bytes == 0);
  a.free(a.malloc(12 * MiB, 1));
  a.malloc(11 * MiB - 512, 1);
  // remainder 1 MiB + 512 B > 1 MiB: split, allocated grows by 11 MiB - 512 only.
  CHECK(a.stats().allocated_bytes == 12 * MiB + 11 * MiB - 512);
  CHECK(a.stats().inactive_split_bytes == 1 * MiB + 512);
}

TEST_CASE("allocator: max_split_size_mb", "[simulator][allocator]") {
  AllocatorConfig split20;
  split20.max_split_size_bytes = 20 * MiB;  // the smallest value PyTorch accepts (kLargeBuffer / 1 MiB)
  SECTION("blocks of oversize requests are not split") {
    CachingAllocator a(split20);
    a.free(a.malloc(30 * MiB, 0));
    a.malloc(25 * MiB, 0);
    // 25 MiB >= max_split: allowed on the 30 MiB block (30 < 25 + 20), and never split: allocated 30 MiB.
    CHECK(a.stats().allocated_bytes == 30 * MiB);
    CHECK(a.stats().reserved_bytes == 30 * MiB);
    CachingAllocator b;  // unlimited: the 5 MiB rest (> 1 MiB) splits off
    b.free(b.malloc(30 * MiB, 0));
    b.malloc(25 * MiB, 0);
    CHECK(b.stats().allocated_bytes == 25 * MiB);
  }
  SECTION("an oversize cached block is not handed to a request below max_split") {
    CachingAllocator a(split20);
    a.free(a.malloc(30 * MiB, 0));
    a.malloc(5 * MiB, 0);
    // 5 MiB < max_split and the only free block is >= max_split: a new 20 MiB segment, 50 MiB reserved.
    CHECK(a.stats().reserved_bytes == 50 * MiB);
    CachingAllocator b;
    b.free(b.malloc(30 * MiB, 0));
    b.malloc(5 * MiB, 0);
    CHECK(b.stats().reserved_bytes == 30 * MiB);
  }
  SECTION("an oversize request takes a cached block only if it is less than kLargeBuffer larger") {
    CachingAllocator a(split20);
    a.free(a.malloc(50 * MiB, 0));
    a.malloc(25 * MiB, 0);
    // 50 >= 25 + 20: rejected; 25 MiB gets its own segment rounded to 2 MiB = 26 MiB.
    CHECK(a.stats().reserved_bytes == 50 * MiB + 26 * MiB);
  }
}

TEST_CASE("allocator: at the capacity, cached blocks are released and the allocation retried before an OOM",
          "[simulator][allocator]") {
  SECTION("release_cached_blocks frees unsplit segments of every stream, then the retry succeeds") {
    AllocatorConfig cfg;
    cfg.capacity_bytes = 60 * MiB;
    CachingAllocator a(cfg);
    a.free(a.malloc(30 * MiB, 0));  // 30 MiB cached on stream 0
    BlockId big = a.malloc(40 * MiB, 1);
    // 30 + 40 = 70 MiB > 60 MiB: cudaMalloc fails; max_split unlimited so release_available_cached_blocks
    // does nothing; release_cached_blocks cudaFrees the cached 30 MiB segment; the retry fits (40 MiB
    // reserved).
    REQUIRE(big != kNoBlock);
    CHECK(a.stats().reserved_bytes == 40 * MiB);
    CHECK(a.stats().reserved_peak_bytes == 40 * MiB);
    CHECK(a.stats().num_alloc_retries == 1);
    CHECK(a.stats().num_device_free == 1);
    CHECK_FALSE(a.stats().oom());
    // Now nothing is cached: 40 + 30 = 70 MiB > 60 MiB still after the retry -> OOM, reported, not thrown.
    BlockId fail = a.malloc(30 * MiB - 100, 0);
    CHECK(fail == kNoBlock);
    CHECK(a.stats().oom());
    CHECK(a.stats().num_ooms == 1);
    CHECK(a.stats().first_oom_malloc_index == 2);
    CHECK(a.stats().first_oom_request_bytes == 30 * MiB - 100);
    CHECK(a.stats().reserved_bytes == 40 * MiB);
    CHECK(a.check_invariants().empty());
    // A request that fits exactly at the capacity (40 + 20 = 60 MiB) still succeeds.
    CHECK(a.malloc(20 * MiB, 0) != kNoBlock);
    CHECK(a.stats().reserved_bytes == 60 * MiB);
  }
  SECTION("with max_split_size, oversize cached blocks are released largest first, only as many as needed") {
    AllocatorConfig cfg;
    cfg.capacity_bytes = 100 * MiB;
    cfg.max_split_size_bytes = 20 * MiB;
    CachingAllocator a(cfg);
    BlockId x = a.malloc(40 * MiB, 0), y = a.malloc(30 * MiB, 0), z = a.malloc(22 * MiB, 0);
    a.free(x);
    a.free(y);
    a.free(z);  // cached oversize blocks: 22, 30, 40 MiB (92 MiB reserved)
    a.malloc(50 * MiB, 0);
    // No cached block >= 50 MiB; 92 + 50 > 100: release_available_cached_blocks frees from the largest down
    // until 50 MiB are released: 40 MiB, then 30 MiB (70 >= 50); the 22 MiB block stays. The retry is not an
    // isRetry attempt: num_alloc_retries stays 0. Reserved = 22 + 50 = 72 MiB.
    CHECK(a.stats().reserved_bytes == 72 * MiB);
    CHECK(a.stats().num_device_free == 2);
    CHECK(a.stats().num_alloc_retries == 0);
    CHECK(a.check_invariants().empty());
  }
  SECTION("release_cached_blocks frees exactly the whole cached segments, not the split ones") {
    // Segments A 20 MiB (whole, free), B 30 MiB (split: a 12 MiB block live, 18 MiB free), C 30 MiB (live):
    // 80 MiB reserved of 100. A 25 MiB request fits no cached block (20, 18): cudaMalloc of 26 MiB fails
    // (106 > 100), release_cached_blocks frees A only, the retry succeeds: 60 + 26 = 86 MiB reserved.
    AllocatorConfig cfg;
    cfg.capacity_bytes = 100 * MiB;
    CachingAllocator a(cfg);
    const BlockId A = a.malloc(20 * MiB, 0), B = a.malloc(30 * MiB, 0);
    const BlockId C = a.malloc(30 * MiB, 0);
    a.free(B);
    REQUIRE(a.malloc(12 * MiB, 0) != kNoBlock);  // B split: 12 live, 18 free
    a.free(A);
    CHECK(a.check_invariants().empty());
    REQUIRE(a.malloc(25 * MiB, 0) != kNoBlock);
    CHECK(a.stats().num_alloc_retries == 1);
    CHECK(a.stats().num_device_free == 1);
    CHECK(a.stats().reserved_bytes == 86 * MiB);
    CHECK(a.stats().inactive_split_bytes == 18 * MiB);
    CHECK(a.check_invariants().empty());
    (void)C;
  }
}

TEST_CASE("allocator: expandable segments", "[simulator][allocator]") {
  SECTION(
      "a growing batch (12 MiB tensors, then 13 MiB ones) fragments default segments, not expandable ones") {
    auto replay = [](const AllocatorConfig& cfg) {
      CachingAllocator a(cfg);
      std::vector<BlockId> ids;
      for (int i = 0; i < 10; ++i) ids.push_back(a.malloc(12 * MiB, 0));
      for (BlockId id : ids) a.free(id);
      for (int i = 0; i < 10; ++i) a.malloc(13 * MiB, 0);
      REQUIRE(a.check_invariants().empty());
      return a.stats().reserved_bytes;
    };
    // default: ten 12 MiB segments, none fits 13 MiB, ten new 14 MiB segments: 120 + 140 = 260 MiB.
    CHECK(replay({}) == 260 * MiB);
    // expandable: 120 MiB mapped in 20 MiB pages (six pages), freed into one 120 MiB block; nine 13 MiB
    // tensors use 117 MiB of it, the tenth maps one more 20 MiB page after the 3 MiB rest: 140 MiB.
    CHECK(replay(expandable()) == 140 * MiB);
  }
  SECTION("trivial sequences reserve the same") {
    // one 20 MiB tensor: a 20 MiB segment, or one 20 MiB page
    CHECK(reserved_after_one(20 * MiB) == reserved_after_one(20 * MiB, expandable()));
    CHECK(reserved_after_one(20 * MiB) == 20 * MiB);
    // small tensors: one 2 MiB segment, or one 2 MiB small-pool page
    auto small4 = [](const AllocatorConfig& cfg) {
      CachingAllocator a(cfg);
      for (int i = 0; i < 4; ++i) a.malloc(512 * kKiB, 0);
      return a.stats().reserved_bytes;
    };
    CHECK(small4({}) == 2 * MiB);
    CHECK(small4(expandable()) == 2 * MiB);
  }
  SECTION("pages are 2 MiB for the small pool and 20 MiB for the large pool; neighbours merge across maps") {
    CachingAllocator a(expandable());
    a.malloc(3 * MiB, 0);  // one 20 MiB page
    CHECK(a.stats().reserved_bytes == 20 * MiB);
    a.malloc(25 * MiB, 0);
    // find_expandable_block starts at the 17 MiB free rest before the unmapped range: 8 MiB more are needed,
    // one 20 MiB page (mapping 25 MiB from the unmapped start would take two).
    CHECK(a.stats().reserved_bytes == 40 * MiB);
    CHECK(a.stats().expandable_segments == 1);
    CHECK(a.stats().segments == 0);              // PyTorch's segment.all counts cudaMalloc segments only
    CHECK(a.stats().inactive_split_bytes == 0);  // not tracked for expandable segments
    a.malloc(100 * kKiB, 0);                     // small pool: its own segment, one 2 MiB page
    CHECK(a.stats().reserved_bytes == 42 * MiB);
    CHECK(a.stats().expandable_segments == 2);
    CHECK(a.check_invariants().empty());
  }
  SECTION("best fit counts a block before unmapped space with the size it can grow to") {
    CachingAllocator a(expandable());
    BlockId y = a.malloc(6 * MiB, 0);  // one 20 MiB page: [y 6][2][7][tail 5 | unmapped]
    a.malloc(2 * MiB, 0);
    a.malloc(7 * MiB, 0);
    a.free(y);  // free: y = 6 MiB (can grow to 6), tail = 5 MiB (can grow to the whole unmapped range)
    a.malloc(4 * MiB, 0);
    // lower_bound finds the 5 MiB tail first, but get_free_block walks on to y because its expandable size (6
    // MiB) is smaller: y splits into 4 + 2. A 6 MiB request then fits no free block (2 and 5 MiB) and maps
    // one more 20 MiB page behind the tail: 40 MiB. (Plain best fit would have put 4 MiB in the tail and 6
    // MiB in y: 20 MiB.)
    a.malloc(6 * MiB, 0);
    CHECK(a.stats().reserved_bytes == 40 * MiB);
    CHECK(a.check_invariants().empty());
  }
  SECTION("at the capacity, free pages of other streams are unmapped and the map retried") {
    AllocatorConfig cfg = expandable();
    cfg.capacity_bytes = 60 * MiB;
    CachingAllocator a(cfg);
    a.free(a.malloc(40 * MiB, 0));  // two 20 MiB pages mapped on stream 0, now free
    REQUIRE(a.malloc(40 * MiB, 1) != kNoBlock);
    // 40 + 40 > 60: map fails; release_cached_blocks unmaps stream 0's free pages and drops its empty
    // segment.
    CHECK(a.stats().reserved_bytes == 40 * MiB);
    CHECK(a.stats().num_alloc_retries == 1);
    CHECK(a.stats().expandable_segments == 1);
    CHECK(a.check_invariants().empty());
  }
}

TEST_CASE("allocator: garbage_collection_threshold frees the older cached blocks first",
          "[simulator][allocator]") {
  auto replay = [](double threshold) {
    AllocatorConfig cfg;
    cfg.capacity_bytes = 100 * MiB;  // the allowed maximum (memory fraction x device memory)
    cfg.garbage_collection_threshold = threshold;
    CachingAllocator a(cfg);
    a.free(a.malloc(30 * MiB, 0));  // get_free_block call 1 on the large pool; x cached at count 1
    a.free(a.malloc(30 * MiB, 1));  // call 2: 30 MiB reserved <= 50 MiB, no collection; y cached at count 2
    a.malloc(30 * MiB, 2);          // call 3: no stream-2 block; 60 MiB > 50 MiB: collect 10 MiB
    return a.stats();
  };
  // Ages at the third call: x = 3 - 1 = 2, y = 3 - 2 = 1; mean 1.5: x (older) is freed, which reclaims 30 MiB
  // >= 10 MiB, so y stays. Reserved: y 30 + z 30 = 60 MiB; without collection 90 MiB (fits the 100 MiB).
  const AllocatorStats gc = replay(0.5);
  CHECK(gc.reserved_bytes == 60 * MiB);
  CHECK(gc.num_device_free == 1);
  const AllocatorStats off = replay(0.0);
  CHECK(off.reserved_bytes == 90 * MiB);
  CHECK(off.num_device_free == 0);
}

TEST_CASE("allocator: garbage collection repeats with the mean age of the blocks left",
          "[simulator][allocator]") {
  // garbage_collect_cached_blocks: target = reserved - threshold x maximum; each pass frees every unsplit
  // cached large-pool block at least as old as the mean age of those left, until target bytes are reclaimed.
  auto replay = [](double threshold) {
    AllocatorConfig cfg;
    cfg.capacity_bytes = 100 * MiB;
    cfg.garbage_collection_threshold = threshold;
    CachingAllocator a(cfg);
    a.free(a.malloc(20 * MiB, 0));  // get_free_block call 1: a (20 MiB) cached at count 1
    a.free(a.malloc(40 * MiB, 1));  // call 2: reserved 20 MiB, below both thresholds; b (40 MiB) at count 2
    a.malloc(30 * MiB, 2);          // call 3: no stream-2 block; reserved 60 MiB; ages a 2, b 1
    return a.stats();
  };
  // 0.3: gc_threshold 30 MiB, target 30 MiB. Pass 1: mean 1.5 frees a (20 MiB < 30); pass 2: mean of b alone
  // is 1, b is freed (60 MiB reclaimed). Reserved: z's 30 MiB only.
  const AllocatorStats two = replay(0.3);
  CHECK(two.reserved_bytes == 30 * MiB);
  CHECK(two.num_device_free == 2);
  // 0.5: gc_threshold 50 MiB, target 10 MiB: pass 1 frees a (20 MiB >= 10) and stops; b + z = 70 MiB.
  const AllocatorStats one = replay(0.5);
  CHECK(one.reserved_bytes == 70 * MiB);
  CHECK(one.num_device_free == 1);
  // 0.6: gc_threshold 60 MiB = reserved: "no need to trigger GC yet" (reserved <= threshold); 90 MiB.
  const AllocatorStats none = replay(0.6);
  CHECK(none.reserved_bytes == 90 * MiB);
  CHECK(none.num_device_free == 0);
}

TEST_CASE("allocator: garbage collection neither counts nor frees split blocks", "[simulator][allocator]") {
  AllocatorConfig cfg;
  cfg.capacity_bytes = 100 * MiB;
  cfg.garbage_collection_threshold = 0.3;  // gc_threshold 30 MiB
  CachingAllocator a(cfg);
  a.free(a.malloc(30 * MiB, 0));  // call 1: a 30 MiB segment, cached at count 1
  a.malloc(8 * MiB, 0);           // call 2: takes the segment and splits it: 8 MiB live, 22 MiB free (split)
  a.free(
      a.malloc(20 * MiB, 1));  // call 3: reserved 30 MiB <= 30, no collection; b (20 MiB) cached at count 3
  a.malloc(20 * MiB, 2);       // call 4: reserved 50 MiB, target 20 MiB
  // Only b is unsplit: mean age = b's own (1), so b is freed (20 MiB reclaimed); the split 22 MiB block
  // stays. Had the split block (age 2) been counted, the mean 1.5 would spare b and nothing would be freed
  // (70 MiB).
  CHECK(a.stats().reserved_bytes == 50 * MiB);
  CHECK(a.stats().num_device_free == 1);
  CHECK(a.check_invariants().empty());
}

TEST_CASE("allocator: garbage collection runs only before a new cudaMalloc", "[simulator][allocator]") {
  AllocatorConfig cfg;
  cfg.capacity_bytes = 100 * MiB;
  cfg.garbage_collection_threshold = 0.3;
  CachingAllocator a(cfg);
  a.free(a.malloc(40 * MiB, 0));  // reserved 40 MiB > 30 MiB, one cached block
  a.free(a.malloc(20 * MiB, 1));  // call 2: a new segment; GC first: target 10 MiB, the 40 MiB block (age 1,
                                  // the only one) is freed; then the 20 MiB segment. Reserved 20 MiB.
  CHECK(a.stats().reserved_bytes == 20 * MiB);
  CHECK(a.stats().num_device_free == 1);
  a.malloc(20 * MiB, 2);  // call 3: reserved 20 MiB <= 30, no collection; a new segment: 40 MiB
  a.malloc(12 * MiB, 1);  // call 4: reserved 40 MiB > 30, but the cached 20 MiB block of stream 1 serves it
                          // (split, 8 MiB > 1 MiB remain): no cudaMalloc, so no collection
  CHECK(a.stats().num_device_free == 1);
  CHECK(a.stats().reserved_bytes == 40 * MiB);
  // Expandable segments: their blocks are never collected (release_block does not take them).
  AllocatorConfig ex = cfg;
  ex.expandable_segments = true;
  CachingAllocator e(ex);
  e.free(e.malloc(40 * MiB, 0));
  e.malloc(20 * MiB, 1);
  CHECK(e.stats().reserved_bytes == 60 * MiB);
  CHECK(e.stats().num_device_free == 0);
}

TEST_CASE("allocator: the malloc that set the reserved peak", "[simulator][allocator]") {
  CachingAllocator a;
  BlockId x = a.malloc(30 * MiB, 0);  // index 0: reserved 30 MiB
  a.malloc(1000, 0);                  // index 1: 32 MiB
  a.free(x);
  a.malloc(10 * MiB, 0);  // index 2: reuses the 30 MiB block (split), reserved stays 32 MiB
  a.malloc(40 * MiB, 0);  // index 3: 72 MiB, the peak
  a.malloc(1 * MiB, 0);   // index 4: a small-pool request, fits the rest of the 2 MiB small segment
  CHECK(a.stats().reserved_peak_bytes == 72 * MiB);
  CHECK(a.stats().reserved_peak_malloc_index == 3);
  CHECK(a.stats().malloc_calls == 5);
}
