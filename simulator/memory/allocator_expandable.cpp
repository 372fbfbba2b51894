// The caching-allocator replay's expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True):
// find_expandable_block, map_block, unmap_block and the release of an unmapped segment, as
// c10/cuda/CUDACachingAllocator.cpp at commit 001074d2 (ExpandableSegment, DeviceCachingAllocator). The rest
// of the replay is in allocator.cpp.
#include <algorithm>

#include "core/checked.hpp"
#include "simulator/memory/allocator.hpp"

namespace shardplan {

void CachingAllocator::release_expandable_segment(BlockId id) {
  erase_unmapped(id);
  delete_block(id);
  --stats_.expandable_segments;
}

BlockId CachingAllocator::find_expandable_block(const Params& p) {
  Pool& pool = pool_of(p.small);
  auto allocatable = [this](BlockId id) {
    return id != kNoBlock && !blocks_[static_cast<std::size_t>(id)].allocated;
  };
  auto has_available_address_space = [&](BlockId id) {
    Bytes bytes = 0;
    while (bytes < p.size && allocatable(id)) {
      bytes += blocks_[static_cast<std::size_t>(id)].size;
      id = blocks_[static_cast<std::size_t>(id)].next;
    }
    return bytes >= p.size;
  };
  // The lowest-address unmapped range of this stream (with the free block just before it) that has room.
  for (auto it = pool.unmapped.lower_bound(AddrKey{p.stream, -1, kNoBlock});
       it != pool.unmapped.end() && it->stream == p.stream; ++it) {
    BlockId c = it->id;
    const BlockId prev = blocks_[static_cast<std::size_t>(c)].prev;
    if (allocatable(prev)) c = prev;
    if (has_available_address_space(c)) return c;
  }
  // A new segment: 2 MiB pages for the small pool, 20 MiB pages for the large pool.
  const Bytes page = p.small ? kSmallBuffer : kLargeBuffer;
  const Bytes span = page * ceil_div(page_span_bytes_, page);
  const BlockId id = new_block();
  Block& b = blocks_[static_cast<std::size_t>(id)];
  b.ptr = next_address_;
  b.size = span;
  b.stream = p.stream;
  b.small = p.small;
  b.mapped = false;
  b.segment = static_cast<std::int32_t>(segment_base_.size());
  segment_base_.push_back(next_address_);
  next_address_ += span;
  insert_unmapped(id);
  ++stats_.expandable_segments;
  return id;
}

bool CachingAllocator::map_block(BlockId id, Bytes size) {
  const Block& b0 = blocks_[static_cast<std::size_t>(id)];
  const Bytes page = b0.small ? kSmallBuffer : kLargeBuffer;
  const Bytes base = segment_base_[static_cast<std::size_t>(b0.segment)];
  // ExpandableSegment::map maps whole pages [segmentLeft(ptr), segmentRight(ptr + size)); an unmapped block
  // always starts on a page boundary.
  const Bytes begin = (b0.ptr - base) / page;
  const Bytes end = ceil_div(b0.ptr + size - base, page);
  const Bytes mapped = (end - begin) * page;
  if (mapped == 0 || !fits_capacity(mapped)) return false;  // cuMemCreate out of memory: nothing mapped
  Pool& pool = pool_of(b0.small);
  erase_unmapped(id);
  blocks_[static_cast<std::size_t>(id)].mapped = true;
  if (mapped < blocks_[static_cast<std::size_t>(id)].size) {
    const BlockId rem = new_block();
    Block& b = blocks_[static_cast<std::size_t>(id)];
    Block& r = blocks_[static_cast<std::size_t>(rem)];
    r.ptr = b.ptr + mapped;
    r.size = b.size - mapped;
    r.stream = b.stream;
    r.small = b.small;
    r.segment = b.segment;
    r.mapped = false;
    splice(rem, id, b.next);
    insert_unmapped(rem);
    blocks_[static_cast<std::size_t>(id)].size = mapped;
  }
  try_merge_blocks(id, blocks_[static_cast<std::size_t>(id)].prev, pool);
  try_merge_blocks(id, blocks_[static_cast<std::size_t>(id)].next, pool);
  insert_free(id);
  ++stats_.num_device_alloc;
  add_reserved(mapped);
  return true;
}

BlockId CachingAllocator::try_allocate_expandable_block(const Params& p) {
  BlockId c = find_expandable_block(p);
  if (!blocks_[static_cast<std::size_t>(c)].mapped &&
      !map_block(c, std::min(blocks_[static_cast<std::size_t>(c)].size, p.size)))
    return kNoBlock;
  while (blocks_[static_cast<std::size_t>(c)].size < p.size) {
    // invariant: free -> unmapped -> ...; map_block maps part of the unmapped range and merges the free block
    // in
    const Bytes remaining = p.size - blocks_[static_cast<std::size_t>(c)].size;
    const BlockId nc = blocks_[static_cast<std::size_t>(c)].next;
    if (!map_block(nc, std::min(remaining, blocks_[static_cast<std::size_t>(nc)].size))) return kNoBlock;
    c = nc;
  }
  erase_free(c);
  return c;
}

void CachingAllocator::unmap_block(BlockId id) {
  const Block b0 = blocks_[static_cast<std::size_t>(id)];
  const Bytes page = b0.small ? kSmallBuffer : kLargeBuffer;
  const Bytes base = segment_base_[static_cast<std::size_t>(b0.segment)];
  // ExpandableSegment::unmap releases only the pages that lie entirely inside the free block.
  const Bytes begin = ceil_div(b0.ptr - base, page);
  const Bytes end = (b0.ptr + b0.size - base) / page;
  if (begin >= end) return;
  const Bytes unmapped_ptr = base + begin * page;
  const Bytes unmapped_size = (end - begin) * page;
  Pool& pool = pool_of(b0.small);
  erase_free(id);
  const Bytes before = unmapped_ptr - b0.ptr;
  if (before > 0) {
    const BlockId bf = new_block();
    Block& f = blocks_[static_cast<std::size_t>(bf)];
    f.ptr = b0.ptr;
    f.size = before;
    f.stream = b0.stream;
    f.small = b0.small;
    f.segment = b0.segment;
    splice(bf, blocks_[static_cast<std::size_t>(id)].prev, id);
    insert_free(bf);
  }
  const Bytes after = b0.size - before - unmapped_size;
  if (after > 0) {
    const BlockId af = new_block();
    Block& f = blocks_[static_cast<std::size_t>(af)];
    f.ptr = unmapped_ptr + unmapped_size;
    f.size = after;
    f.stream = b0.stream;
    f.small = b0.small;
    f.segment = b0.segment;
    splice(af, id, blocks_[static_cast<std::size_t>(id)].next);
    insert_free(af);
  }
  Block& b = blocks_[static_cast<std::size_t>(id)];
  b.ptr = unmapped_ptr;
  b.size = unmapped_size;
  b.mapped = false;
  try_merge_blocks(id, blocks_[static_cast<std::size_t>(id)].prev, pool);
  try_merge_blocks(id, blocks_[static_cast<std::size_t>(id)].next, pool);
  insert_unmapped(id);
  stats_.reserved_bytes -= unmapped_size;
  ++stats_.num_device_free;
}

}  // namespace shardplan
