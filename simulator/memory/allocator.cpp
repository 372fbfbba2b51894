// The caching-allocator replay: a line-by-line model of DeviceCachingAllocator's placement decisions
// (malloc, get_free_block, alloc_block, alloc_found_block, free_block and the release paths),
// pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp at commit 001074d2. Function names follow PyTorch's. The
// expandable-segment mapping is in allocator_expandable.cpp, the invariants and snapshot in
// allocator_check.cpp, the node arena of its free-block sets in allocator_arena.cpp.
#include "simulator/memory/allocator.hpp"

#include <algorithm>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>

#include "core/checked.hpp"

namespace shardplan {

namespace {
constexpr Bytes kUnlimited = std::numeric_limits<Bytes>::max();
// Virtual range an expandable segment reserves when no capacity is given: PyTorch reserves 1 1/8 of the
// device's memory (ExpandableSegment constructor, find_expandable_block); 16 TiB stands in for "more than any
// device".
constexpr Bytes kDefaultExpandableSpan = Bytes{1} << 44;
}  // namespace

CachingAllocator::CachingAllocator(const AllocatorConfig& config) : small_(&node_pool_), large_(&node_pool_) {
  reset(config);
}

void CachingAllocator::reset(const AllocatorConfig& config) {
  if (config.max_split_size_bytes < 0 || config.capacity_bytes < 0 ||
      config.max_split_size_bytes > kMaxRequestBytes || config.capacity_bytes > kMaxRequestBytes)
    throw std::invalid_argument(
        "AllocatorConfig: max_split_size_bytes and capacity_bytes must be in [0, 2^50]");
  if (!(config.garbage_collection_threshold >= 0.0 && config.garbage_collection_threshold < 1.0))
    throw std::invalid_argument("AllocatorConfig: garbage_collection_threshold must be in [0, 1)");
  config_ = config;
  max_split_size_ = config.max_split_size_bytes > 0 ? config.max_split_size_bytes : kUnlimited;
  page_span_bytes_ =
      config.capacity_bytes > 0 ? config.capacity_bytes + config.capacity_bytes / 8 : kDefaultExpandableSpan;
  stats_ = AllocatorStats{};
  for (Pool* pool : {&small_, &large_}) {
    pool->blocks.clear();
    pool->unmapped.clear();
    pool->whole.clear();
    pool->get_free_blocks_call_count = 0;
  }
  blocks_.clear();
  recycled_.clear();
  scratch_.clear();
  segment_base_.clear();
  next_address_ = 0;
  malloc_index_ = -1;
}

Bytes CachingAllocator::round_size(Bytes size_bytes) {
  // round_size(): sizes below kMinBlockSize become kMinBlockSize, others round up to a multiple of it
  // (roundup_power2_divisions is not modelled: its default, 0 divisions, takes this branch).
  return std::max(kMinBlockSize, allocation_bytes(size_bytes));
}

Bytes CachingAllocator::allocation_size(Bytes rounded_bytes) {
  // get_allocation_size()
  if (rounded_bytes <= kSmallSize) return kSmallBuffer;
  if (rounded_bytes < kMinLargeAlloc) return kLargeBuffer;
  return kRoundLarge * ceil_div(rounded_bytes, kRoundLarge);
}

BlockId CachingAllocator::new_block() {
  BlockId id;
  if (!recycled_.empty()) {
    id = recycled_.back();
    recycled_.pop_back();
    blocks_[static_cast<std::size_t>(id)] = Block{};
  } else {
    id = static_cast<BlockId>(blocks_.size());
    blocks_.emplace_back();
  }
  blocks_[static_cast<std::size_t>(id)].live = true;
  return id;
}

void CachingAllocator::delete_block(BlockId id) {
  blocks_[static_cast<std::size_t>(id)].live = false;
  recycled_.push_back(id);
}

void CachingAllocator::insert_free(BlockId id) {  // BlockPool::insert_into_blocks
  Block& b = blocks_[static_cast<std::size_t>(id)];
  Pool& pool = pool_of(b.small);
  b.gc_count_base = pool.get_free_blocks_call_count;
  pool.blocks.insert(SizeKey{b.stream, b.size, b.ptr, id});
  if (b.segment < 0 && !b.is_split()) {
    b.whole_index = static_cast<std::int32_t>(pool.whole.size());
    pool.whole.push_back(id);
  }
}
void CachingAllocator::unlist_whole(BlockId id) {
  Block& b = blocks_[static_cast<std::size_t>(id)];
  if (b.whole_index < 0) return;
  auto& whole = pool_of(b.small).whole;
  const BlockId last = whole.back();
  whole[static_cast<std::size_t>(b.whole_index)] = last;
  blocks_[static_cast<std::size_t>(last)].whole_index = b.whole_index;
  whole.pop_back();
  b.whole_index = -1;
}
void CachingAllocator::erase_free(BlockId id) {
  unlist_whole(id);
  const Block& b = blocks_[static_cast<std::size_t>(id)];
  pool_of(b.small).blocks.erase(SizeKey{b.stream, b.size, b.ptr, id});
}
void CachingAllocator::insert_unmapped(BlockId id) {
  const Block& b = blocks_[static_cast<std::size_t>(id)];
  pool_of(b.small).unmapped.insert(AddrKey{b.stream, b.ptr, id});
}
void CachingAllocator::erase_unmapped(BlockId id) {
  const Block& b = blocks_[static_cast<std::size_t>(id)];
  pool_of(b.small).unmapped.erase(AddrKey{b.stream, b.ptr, id});
}

void CachingAllocator::splice(BlockId id, BlockId before, BlockId after) {
  Block& b = blocks_[static_cast<std::size_t>(id)];
  if (before != kNoBlock) blocks_[static_cast<std::size_t>(before)].next = id;
  b.prev = before;
  if (after != kNoBlock) blocks_[static_cast<std::size_t>(after)].prev = id;
  b.next = after;
}

bool CachingAllocator::fits_capacity(Bytes extra_bytes) const {
  return config_.capacity_bytes == 0 || stats_.reserved_bytes + extra_bytes <= config_.capacity_bytes;
}

void CachingAllocator::add_reserved(Bytes bytes) {
  stats_.reserved_bytes += bytes;
  if (stats_.reserved_bytes > stats_.reserved_peak_bytes) {
    stats_.reserved_peak_bytes = stats_.reserved_bytes;
    stats_.reserved_peak_malloc_index = malloc_index_;
  }
}

static void add_with_peak(Bytes& current, Bytes& peak, Bytes delta) {
  current += delta;
  peak = std::max(peak, current);
}

BlockId CachingAllocator::malloc(Bytes size_bytes, int stream) {
  if (size_bytes < 1 || size_bytes > kMaxRequestBytes)
    throw std::invalid_argument("CachingAllocator::malloc: size must be in [1 B, 2^50 B], got " +
                                std::to_string(size_bytes));
  malloc_index_ = stats_.malloc_calls++;
  const Bytes size = round_size(size_bytes);
  Params p{size, stream, size <= kSmallSize, allocation_size(size)};
  // DeviceCachingAllocator::malloc: search the pool, else cudaMalloc, else free oversize cached blocks and
  // retry, else free every unsplit cached block and retry (free-memory callbacks and garbage collection: not
  // modelled).
  bool found = get_free_block(p);
  if (!found) {
    if (gc_enabled()) garbage_collect_cached_blocks();
    found = alloc_block(p, false) || (release_available_cached_blocks(p) && alloc_block(p, false)) ||
            (release_cached_blocks(), alloc_block(p, true));
  }
  if (!found) {
    if (stats_.num_ooms++ == 0) {
      stats_.first_oom_malloc_index = malloc_index_;
      stats_.first_oom_request_bytes = size_bytes;
    }
    return kNoBlock;
  }
  return alloc_found_block(p, size_bytes);
}

void CachingAllocator::free(BlockId id) {
  if (id < 0 || static_cast<std::size_t>(id) >= blocks_.size() ||
      !blocks_[static_cast<std::size_t>(id)].live || !blocks_[static_cast<std::size_t>(id)].allocated)
    throw std::invalid_argument("CachingAllocator::free: block " + std::to_string(id) + " is not live");
  ++stats_.free_calls;
  Block& b = blocks_[static_cast<std::size_t>(id)];
  b.allocated = false;
  --stats_.allocations;
  stats_.allocated_bytes -= b.size;
  free_block(id);
}

Bytes CachingAllocator::block_size(BlockId id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= blocks_.size() ||
      !blocks_[static_cast<std::size_t>(id)].allocated)
    throw std::invalid_argument("CachingAllocator::block_size: block " + std::to_string(id) + " is not live");
  return blocks_[static_cast<std::size_t>(id)].size;
}

bool CachingAllocator::get_free_block(Params& p) {
  Pool& pool = pool_of(p.small);
  if (gc_enabled()) ++pool.get_free_blocks_call_count;  // tracked only when garbage collection is on
  auto it = pool.blocks.lower_bound(SizeKey{p.stream, p.size, -1, kNoBlock});
  if (it == pool.blocks.end() || it->stream != p.stream) return false;
  if (config_.expandable_segments) {
    // For best fit, a block followed by unmapped address space counts with the size it can expand to.
    auto expandable_size = [this](BlockId id) {
      const Block& b = blocks_[static_cast<std::size_t>(id)];
      return b.size + (b.next != kNoBlock && !blocks_[static_cast<std::size_t>(b.next)].mapped
                           ? blocks_[static_cast<std::size_t>(b.next)].size
                           : 0);
    };
    auto next = std::next(it);
    while (next != pool.blocks.end() && next->stream == p.stream &&
           expandable_size(next->id) < expandable_size(it->id))
      it = next++;
  }
  // Do not return an oversized block for a large request.
  if (p.size < max_split_size_ && it->size >= max_split_size_) return false;
  // Allow an oversized block to be rounded up, but only within kLargeBuffer.
  if (p.size >= max_split_size_ && it->size >= p.size + kLargeBuffer) return false;
  p.block = it->id;
  unlist_whole(p.block);
  pool.blocks.erase(it);
  return true;
}

bool CachingAllocator::alloc_block(Params& p, bool is_retry) {
  if (is_retry) ++stats_.num_alloc_retries;
  if (config_.expandable_segments) {
    p.block = try_allocate_expandable_block(p);
    return p.block != kNoBlock;
  }
  if (!fits_capacity(p.alloc_size)) return false;  // cudaMalloc fails with cudaErrorMemoryAllocation
  const BlockId id = new_block();
  Block& b = blocks_[static_cast<std::size_t>(id)];
  b.ptr = next_address_;
  b.size = p.alloc_size;
  b.stream = p.stream;
  b.small = p.small;
  next_address_ += p.alloc_size;
  ++stats_.segments;
  stats_.segments_peak = std::max(stats_.segments_peak, stats_.segments);
  ++stats_.num_device_alloc;
  add_reserved(p.alloc_size);
  p.block = id;
  return true;
}

bool CachingAllocator::should_split(const Block& b, Bytes size) const {
  const Bytes remaining = b.size - size;
  if (b.small || config_.expandable_segments) return remaining >= kMinBlockSize;
  return size < max_split_size_ && remaining > kSmallSize;
}

BlockId CachingAllocator::alloc_found_block(const Params& p, Bytes orig_size) {
  BlockId id = p.block;
  const bool split = should_split(blocks_[static_cast<std::size_t>(id)], p.size);
  const bool already_split = blocks_[static_cast<std::size_t>(id)].is_split();
  const bool expandable = blocks_[static_cast<std::size_t>(id)].segment >= 0;
  if (split) {
    const BlockId remaining = id;
    id = new_block();  // may move blocks_: index only from here on
    Block& rem = blocks_[static_cast<std::size_t>(remaining)];
    Block& b = blocks_[static_cast<std::size_t>(id)];
    b.ptr = rem.ptr;
    b.size = p.size;
    b.stream = p.stream;
    b.small = p.small;
    b.segment = rem.segment;
    b.prev = rem.prev;
    if (b.prev != kNoBlock) blocks_[static_cast<std::size_t>(b.prev)].next = id;
    b.next = remaining;
    rem.prev = id;
    rem.ptr += p.size;
    rem.size -= p.size;
    insert_free(remaining);
    if (already_split && !expandable) {
      stats_.inactive_split_bytes -= p.size;  // an already-split inactive block shrinks by size bytes
    } else if (!expandable) {
      add_with_peak(stats_.inactive_split_bytes, stats_.inactive_split_peak_bytes, rem.size);
      ++stats_.inactive_split_blocks;
    }
  } else if (already_split && !expandable) {
    stats_.inactive_split_bytes -= blocks_[static_cast<std::size_t>(id)].size;
    --stats_.inactive_split_blocks;
  }
  Block& b = blocks_[static_cast<std::size_t>(id)];
  b.allocated = true;
  b.requested = orig_size;
  ++stats_.allocations;
  stats_.allocated_bytes += b.size;
  if (stats_.allocated_bytes > stats_.allocated_peak_bytes) {
    stats_.allocated_peak_bytes = stats_.allocated_bytes;
    stats_.allocated_peak_malloc_index = malloc_index_;
  }
  add_with_peak(stats_.active_bytes, stats_.active_peak_bytes, b.size);
  add_with_peak(stats_.requested_bytes, stats_.requested_peak_bytes, orig_size);
  return id;
}

Bytes CachingAllocator::try_merge_blocks(BlockId dst, BlockId src, Pool& pool) {
  if (src == kNoBlock) return 0;
  Block& s = blocks_[static_cast<std::size_t>(src)];
  Block& d = blocks_[static_cast<std::size_t>(dst)];
  if (s.allocated || d.mapped != s.mapped) return 0;
  if (d.prev == src) {  // [src dst]
    d.ptr = s.ptr;
    d.prev = s.prev;
    if (d.prev != kNoBlock) blocks_[static_cast<std::size_t>(d.prev)].next = dst;
  } else {  // [dst src]
    d.next = s.next;
    if (d.next != kNoBlock) blocks_[static_cast<std::size_t>(d.next)].prev = dst;
  }
  const Bytes subsumed = s.size;
  d.size += subsumed;
  unlist_whole(src);
  if (s.mapped)
    pool.blocks.erase(SizeKey{s.stream, s.size, s.ptr, src});
  else
    pool.unmapped.erase(AddrKey{s.stream, s.ptr, src});
  delete_block(src);
  return subsumed;
}

void CachingAllocator::free_block(BlockId id) {
  Pool& pool = pool_of(blocks_[static_cast<std::size_t>(id)].small);
  const Bytes original_size = blocks_[static_cast<std::size_t>(id)].size;
  const Bytes requested = blocks_[static_cast<std::size_t>(id)].requested;
  const BlockId candidates[2] = {blocks_[static_cast<std::size_t>(id)].prev,
                                 blocks_[static_cast<std::size_t>(id)].next};
  std::int64_t net_blocks = 0;
  Bytes net_bytes = 0;
  for (BlockId c : candidates) {
    const Bytes subsumed = try_merge_blocks(id, c, pool);
    if (subsumed > 0) {
      net_blocks -= 1;
      net_bytes -= subsumed;
    }
  }
  insert_free(id);
  const Block& b = blocks_[static_cast<std::size_t>(id)];
  if (b.is_split()) {
    net_blocks += 1;
    net_bytes += b.size;
  }
  if (b.segment < 0) {  // inactive_split excludes expandable segments
    stats_.inactive_split_blocks += net_blocks;
    add_with_peak(stats_.inactive_split_bytes, stats_.inactive_split_peak_bytes, net_bytes);
  }
  stats_.active_bytes -= original_size;
  stats_.requested_bytes -= requested;
}

bool CachingAllocator::release_available_cached_blocks(const Params& p) {
  // Only with max_split_size set; with expandable segments PyTorch would reach release_block on an expandable
  // block (an internal assert), so the model skips straight to release_cached_blocks there.
  if (max_split_size_ == kUnlimited || config_.expandable_segments) return false;
  Pool& pool = pool_of(p.small);
  const Bytes key_size = std::max(p.size, max_split_size_);
  auto it = pool.blocks.lower_bound(SizeKey{p.stream, key_size, -1, kNoBlock});
  if (it == pool.blocks.end() || it->stream != p.stream) {
    // No single block is large enough; free oversize blocks of this stream, largest first.
    if (it == pool.blocks.begin()) return false;
    Bytes released = 0;
    --it;
    while (released < key_size && it->size >= max_split_size_ && it->stream == p.stream) {
      const BlockId cur = it->id;
      released += it->size;
      if (it != pool.blocks.begin()) {
        --it;
        release_block(cur);
      } else {
        release_block(cur);
        break;
      }
    }
    if (released < key_size) return false;
  } else {
    release_block(it->id);
  }
  return true;
}

void CachingAllocator::garbage_collect_cached_blocks() {
  // garbage_collect_cached_blocks (CUDACachingAllocator.cpp; the rule below as in the DeviceCachingAllocator
  // template of the newest stored version, which also guards release_block against expandable blocks): with
  // reserved above gc_threshold = threshold x allowed maximum, target = reserved - gc_threshold. The mean age
  // (get_free_block calls on the large pool since the block was cached) is taken over every unsplit free
  // large-pool block of every stream; a pass frees each unsplit, non-expandable one at least that old (all of
  // them, not stopping at the target), and passes repeat with the mean of those left until target bytes are
  // reclaimed or a pass frees nothing.
  const auto gc_threshold =
      static_cast<Bytes>(config_.garbage_collection_threshold * static_cast<double>(config_.capacity_bytes));
  if (stats_.reserved_bytes <= gc_threshold) return;
  const Bytes target = stats_.reserved_bytes - gc_threshold;
  auto counted = [](const Block& b) { return !b.is_split(); };
  auto freeable = [](const Block& b) { return !b.is_split() && b.segment < 0; };
  auto age = [this](const Block& b) { return large_.get_free_blocks_call_count - b.gc_count_base; };
  std::int64_t total_age = 0, freeable_count = 0;
  for (const SizeKey& k : large_.blocks) {
    const Block& b = blocks_[static_cast<std::size_t>(k.id)];
    if (counted(b)) {
      total_age += age(b);
      ++freeable_count;
    }
  }
  Bytes reclaimed = 0;
  bool block_freed = true;
  while (reclaimed < target && block_freed && freeable_count > 0) {
    const double age_threshold = static_cast<double>(total_age) / static_cast<double>(freeable_count);
    block_freed = false;
    for (auto it = large_.blocks.begin(); it != large_.blocks.end();) {
      const BlockId id = it->id;
      ++it;
      const Block& b = blocks_[static_cast<std::size_t>(id)];
      if (freeable(b) && static_cast<double>(age(b)) >= age_threshold) {
        block_freed = true;
        reclaimed += b.size;
        total_age -= age(b);
        --freeable_count;
        release_block(id);
      }
    }
  }
}

void CachingAllocator::release_block(BlockId id) {
  // cudaFree of a whole segment. Blocks >= max_split_size are never split (should_split), so the free blocks
  // release_available_cached_blocks picks are whole segments; a split one is left alone rather than freed
  // twice.
  const Block& b = blocks_[static_cast<std::size_t>(id)];
  if (b.is_split()) return;
  ++stats_.num_device_free;
  --stats_.segments;
  stats_.reserved_bytes -= b.size;
  erase_free(id);
  delete_block(id);
}

void CachingAllocator::release_cached_blocks() {
  // release_cached_blocks: large pool first, then small; every stream.
  release_blocks(large_);
  release_blocks(small_);
}

void CachingAllocator::empty_cache() {
  release_cached_blocks();
}

void CachingAllocator::release_blocks(Pool& pool) {
  scratch_.clear();
  if (!config_.expandable_segments) {
    // Every free block is a cudaMalloc block: free the whole segments among them (release_blocks frees each
    // block with neither prev nor next). Taken from the index, not by walking the size-ordered set: the same
    // blocks, and the order does not matter (each release only subtracts its segment).
    scratch_.assign(pool.whole.begin(), pool.whole.end());
    for (BlockId id : scratch_) release_block(id);
    return;
  }
  for (auto it = pool.blocks.begin(); it != pool.blocks.end();) {
    const BlockId id = it->id;
    ++it;
    const Block& b = blocks_[static_cast<std::size_t>(id)];
    if (b.segment >= 0)
      scratch_.push_back(id);
    else if (!b.is_split())
      release_block(id);
  }
  for (std::size_t i = 0; i < scratch_.size(); ++i) {
    const BlockId id = scratch_[i];
    unmap_block(id);
    const Block& b = blocks_[static_cast<std::size_t>(id)];
    if (b.live && !b.mapped && !b.is_split()) release_expandable_segment(id);
  }
}

}  // namespace shardplan
