// A replay model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp,
// DeviceCachingAllocator, pytorch/pytorch commit 001074d2): it takes malloc/free events with their stream and
// reports what torch.cuda.memory_stats() would say (allocated, reserved, inactive-split fragmentation, peaks,
// OOM).
//
// Contract:
//  - Sizes are bytes (`Bytes`, std::int64_t); a request must be >= 1 byte. Streams are arbitrary ints; a
//  cached
//    block is only reused by a request on the stream it was allocated on (PyTorch's per-stream pools).
//  - malloc() returns a BlockId that stays valid until it is passed to free(); ids are recycled afterwards.
//    A cross-stream free is the caller's business: free() always returns the block to the pool of the stream
//    it was allocated on (as PyTorch does once the recorded streams' events completed); to model
//    record_stream the caller issues the free() later, at the point the events would complete.
//  - On a device allocation that would exceed `capacity_bytes`, cached blocks are released and the allocation
//    retried in PyTorch's order (release_available_cached_blocks, then release_cached_blocks); if it still
//    does not fit, malloc() returns kNoBlock and counts an OOM in the stats. Nothing is thrown for OOM.
//  - Misuse (size < 1 or > kMaxRequestBytes, freeing an id that is not live, a capacity above
//  kMaxRequestBytes)
//    throws std::invalid_argument.
//  - reset() empties the allocator and keeps the capacity of its containers, so a warm allocator replays a
//  new
//    sequence without heap allocation.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <memory_resource>
#include <set>
#include <string>
#include <vector>

#include "core/units.hpp"
#include "simulator/engine/engine.hpp"

namespace shardplan {

/// The PYTORCH_CUDA_ALLOC_CONF knobs that change the native allocator's placement decisions.
struct AllocatorConfig {
  bool expandable_segments = false;  ///< expandable_segments:True
  Bytes max_split_size_bytes = 0;  ///< max_split_size_mb · 2^20; 0 = unlimited (PyTorch's default SIZE_MAX)
  Bytes capacity_bytes = 0;        ///< memory the device lets the allocator reserve; 0 = unlimited
  /// garbage_collection_threshold, in (0, 1); 0 = off. PyTorch runs it only under
  /// torch.cuda.set_per_process_memory_fraction, against the allowed maximum (fraction x device memory): here
  /// it needs capacity_bytes > 0 and takes capacity_bytes as that maximum. Leave it 0 to model a run without
  /// a memory fraction.
  double garbage_collection_threshold = 0.0;
};

using BlockId = std::int32_t;
inline constexpr BlockId kNoBlock = -1;

/// Aggregate (small + large pool) counters, named after torch.cuda.memory_stats() keys.
struct AllocatorStats {
  Bytes allocated_bytes = 0;       ///< allocated_bytes.all.current: rounded sizes of live blocks
  Bytes allocated_peak_bytes = 0;  ///< allocated_bytes.all.peak
  Bytes requested_bytes = 0;       ///< requested_bytes.all.current: unrounded sizes of live blocks
  Bytes requested_peak_bytes = 0;
  Bytes active_bytes =
      0;  ///< active_bytes.all.current; equals allocated_bytes (no pending stream events modelled)
  Bytes active_peak_bytes = 0;
  Bytes reserved_bytes = 0;  ///< reserved_bytes.all.current: cudaMalloc'd segments + mapped expandable pages
  Bytes reserved_peak_bytes = 0;  ///< reserved_bytes.all.peak
  Bytes inactive_split_bytes =
      0;  ///< free blocks that are part of a split segment (not for expandable segments)
  Bytes inactive_split_peak_bytes = 0;
  std::int64_t inactive_split_blocks = 0;  ///< inactive_split.all.current
  std::int64_t segments = 0;  ///< segment.all.current: live cudaMalloc segments (expandable not counted)
  std::int64_t segments_peak = 0;
  std::int64_t expandable_segments =
      0;                               ///< live expandable segments (virtual ranges), one per (stream, pool)
  std::int64_t allocations = 0;        ///< allocation.all.current: live blocks
  std::int64_t num_device_alloc = 0;   ///< cudaMalloc calls + expandable page-range maps
  std::int64_t num_device_free = 0;    ///< cudaFree calls + expandable page-range unmaps
  std::int64_t num_alloc_retries = 0;  ///< allocations retried after release_cached_blocks
  std::int64_t num_ooms = 0;
  std::int64_t malloc_calls = 0;  ///< malloc() calls so far, OOMs included (the next malloc's index)
  std::int64_t free_calls = 0;
  /// Index (0-based, among malloc() calls) of the malloc that last raised reserved_peak_bytes /
  /// allocated_peak_bytes; -1 before any. The caller maps it to the phase it issued that malloc in.
  std::int64_t reserved_peak_malloc_index = -1;
  std::int64_t allocated_peak_malloc_index = -1;
  std::int64_t first_oom_malloc_index = -1;  ///< index of the first malloc that failed; -1 if none
  Bytes first_oom_request_bytes = 0;         ///< its requested (unrounded) size

  bool oom() const { return num_ooms > 0; }
};

class CachingAllocator {
 public:
  explicit CachingAllocator(const AllocatorConfig& config = {});

  /// Allocates `size_bytes` on `stream`; kNoBlock on OOM (see the contract above).
  BlockId malloc(Bytes size_bytes, int stream);
  /// Returns a live block to its stream's pool, merging it with free neighbours of its segment.
  void free(BlockId id);
  /// torch.cuda.empty_cache(): releases every cached segment that holds no live block (and, with expandable
  /// segments, unmaps every free page).
  void empty_cache();

  const AllocatorStats& stats() const { return stats_; }
  const AllocatorConfig& config() const { return config_; }
  /// Rounded size of a live block.
  Bytes block_size(BlockId id) const;
  /// Bytes held in free (cached, mapped) blocks; reserved = allocated + cached always holds.
  Bytes cached_bytes() const;
  /// Walks every block and checks the allocator's invariants (segments tile exactly, free neighbours merged,
  /// free sets consistent, stats match the blocks). O(blocks); for tests. Returns an empty string when all
  /// hold, else a description of the first violation.
  std::string check_invariants() const;

  /// Empties the allocator, sets a new config, zeroes the stats; keeps container capacity.
  void reset(const AllocatorConfig& config);

  /// Writes the allocator's placement state to `out` (replacing its contents): every block (address, size,
  /// stream, pool, allocated, mapped, segment) in address order and the next segment's address. Two states
  /// with equal descriptions place every later request sequence alike, up to block ids. O(blocks log blocks).
  void describe_state(std::vector<std::int64_t>& out) const;
  /// Model address of a live block.
  Bytes block_address(BlockId id) const { return blocks_[static_cast<std::size_t>(id)].ptr; }
  /// Counts `mallocs` and `frees` calls that a caller skipped because they would repeat, exactly, calls just
  /// made from the same state (AllocatorReplay's steady micro-batches): the call counters and the next
  /// malloc's index stay those of the full sequence.
  void count_repeated_calls(std::int64_t mallocs, std::int64_t frees) {
    stats_.malloc_calls += mallocs;
    stats_.free_calls += frees;
  }

  // PyTorch's constants (c10/cuda/CUDACachingAllocator.cpp, commit 001074d2, file scope).
  static constexpr Bytes kMinBlockSize =
      kAllocationQuantumBytes;                     ///< all sizes are rounded to at least 512 bytes
  static constexpr Bytes kSmallSize = 1048576;     ///< largest "small" allocation is 1 MiB
  static constexpr Bytes kSmallBuffer = 2097152;   ///< "small" allocations are packed in 2 MiB blocks
  static constexpr Bytes kLargeBuffer = 20971520;  ///< "large" allocations may be packed in 20 MiB blocks
  static constexpr Bytes kMinLargeAlloc =
      10485760;                                  ///< allocations between 1 and 10 MiB may use kLargeBuffer
  static constexpr Bytes kRoundLarge = 2097152;  ///< round up large allocations to 2 MiB

  /// Largest request and capacity accepted (1 PiB): keeps every size sum far from int64 overflow.
  static constexpr Bytes kMaxRequestBytes = Bytes{1} << 50;

  /// round_size() without roundup_power2_divisions: max(512, ceil(size/512)·512).
  static Bytes round_size(Bytes size_bytes);
  /// get_allocation_size(): the cudaMalloc size for a rounded request that finds no cached block.
  static Bytes allocation_size(Bytes rounded_bytes);

 private:
  struct Block {
    Bytes ptr = 0;        // virtual address (model addresses: increasing in creation order)
    Bytes size = 0;       // bytes
    Bytes requested = 0;  // unrounded request of a live block
    BlockId prev = kNoBlock;
    BlockId next = kNoBlock;
    int stream = 0;
    std::int64_t gc_count_base = 0;  // pool's get_free_block count when the block entered the free set
    std::int32_t segment = -1;       // expandable segment index, -1 for a cudaMalloc segment
    std::int32_t whole_index = -1;   // position in Pool::whole while a free, unsplit cudaMalloc segment
    bool small = false;              // pool
    bool allocated = false;
    bool mapped = true;
    bool live = false;  // slot in use (false: on the recycle list)
    bool is_split() const { return prev != kNoBlock || next != kNoBlock; }
  };
  struct SizeKey {  // BlockComparatorSize: (stream, size, ptr)
    int stream;
    Bytes size;
    Bytes ptr;
    BlockId id;
    bool operator<(const SizeKey& o) const {
      if (stream != o.stream) return stream < o.stream;
      if (size != o.size) return size < o.size;
      return ptr < o.ptr;
    }
  };
  struct AddrKey {  // BlockComparatorAddress: (stream, ptr)
    int stream;
    Bytes ptr;
    BlockId id;
    bool operator<(const AddrKey& o) const {
      if (stream != o.stream) return stream < o.stream;
      return ptr < o.ptr;
    }
  };
  struct Pool {
    explicit Pool(std::pmr::memory_resource* r) : blocks(r), unmapped(r) {}
    std::pmr::set<SizeKey> blocks;                // free, mapped blocks
    std::pmr::set<AddrKey> unmapped;              // unmapped virtual ranges of expandable segments
    std::int64_t get_free_blocks_call_count = 0;  // ages free blocks for garbage collection
    // The free blocks that are whole cudaMalloc segments (not split, not expandable): what
    // release_cached_blocks frees. PyTorch finds them by walking `blocks`; the index gives the same set
    // without the walk, so a retry at the capacity costs what it releases, not the size of the cache. A
    // cudaMalloc block's neighbours never change while it is free (free neighbours are merged at once), so
    // its split state is fixed from insert_free to its erase.
    std::vector<BlockId> whole;
  };
  // Node memory for the free-block sets: one free list per node size, O(1) allocate/deallocate, memory kept
  // for the allocator's lifetime (so a warm replay does not touch the heap).
  class NodeArena final : public std::pmr::memory_resource {
   public:
    NodeArena() = default;
    NodeArena(const NodeArena&) = delete;
    NodeArena& operator=(const NodeArena&) = delete;

   private:
    struct FreeNode {
      FreeNode* next;
    };
    struct SizeClass {
      std::size_t bytes = 0;
      FreeNode* free = nullptr;
    };
    void* do_allocate(std::size_t bytes, std::size_t alignment) override;
    void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) override;
    bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override {
      return this == &other;
    }
    SizeClass& size_class(std::size_t bytes);
    std::vector<SizeClass> classes_;
    std::vector<std::unique_ptr<std::byte[]>> chunks_;
  };
  struct Params {  // AllocParams
    Bytes size;
    int stream;
    bool small;
    Bytes alloc_size;
    BlockId block = kNoBlock;
  };

  Pool& pool_of(bool small) { return small ? small_ : large_; }
  const Pool& pool_of_const(bool small) const { return small ? small_ : large_; }
  BlockId new_block();
  void delete_block(BlockId id);
  void insert_free(BlockId id);
  void erase_free(BlockId id);
  void unlist_whole(BlockId id);  // drops a block leaving the free set from Pool::whole
  void insert_unmapped(BlockId id);
  void erase_unmapped(BlockId id);
  bool get_free_block(Params& p);
  bool alloc_block(Params& p, bool is_retry);
  bool release_available_cached_blocks(const Params& p);
  void garbage_collect_cached_blocks();
  bool gc_enabled() const { return config_.garbage_collection_threshold > 0.0 && config_.capacity_bytes > 0; }
  void release_cached_blocks();
  void release_blocks(Pool& pool);
  void release_block(BlockId id);
  BlockId alloc_found_block(const Params& p, Bytes orig_size);
  bool should_split(const Block& b, Bytes size) const;
  void free_block(BlockId id);
  Bytes try_merge_blocks(BlockId dst, BlockId src, Pool& pool);
  // expandable segments
  BlockId find_expandable_block(const Params& p);
  bool map_block(BlockId id, Bytes size);
  BlockId try_allocate_expandable_block(const Params& p);
  void unmap_block(BlockId id);
  void release_expandable_segment(BlockId id);
  void splice(BlockId id, BlockId before, BlockId after);
  bool fits_capacity(Bytes extra_bytes) const;
  void add_reserved(Bytes bytes);

  AllocatorConfig config_;
  Bytes max_split_size_ = 0;   // effective: SIZE_MAX analogue when unlimited
  Bytes page_span_bytes_ = 0;  // virtual address range reserved per expandable segment
  AllocatorStats stats_;
  std::vector<Block> blocks_;
  std::vector<BlockId> recycled_;
  std::vector<BlockId> scratch_;                // release_blocks' to-unmap list
  mutable std::vector<BlockId> scratch_order_;  // describe_state's blocks in address order
  std::vector<Bytes> segment_base_;  // base address of each expandable segment (index = Block::segment)
  std::int64_t malloc_index_ = -1;   // index of the malloc() in progress
  Bytes next_address_ = 0;
  NodeArena node_pool_;
  Pool small_;
  Pool large_;
};

}  // namespace shardplan
