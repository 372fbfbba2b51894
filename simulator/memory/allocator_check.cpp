// The caching-allocator replay's introspection: the state snapshot the replay's memoisation compares
// (describe_state), the cached bytes and the invariants the tests and the fuzzer check after every step
// (check_invariants). The replay itself is in allocator.cpp.
#include <algorithm>
#include <string>

#include "simulator/memory/allocator.hpp"

namespace shardplan {

void CachingAllocator::describe_state(std::vector<std::int64_t>& out) const {
  scratch_order_.clear();
  for (std::size_t i = 0; i < blocks_.size(); ++i)
    if (blocks_[i].live) scratch_order_.push_back(static_cast<BlockId>(i));
  std::sort(scratch_order_.begin(), scratch_order_.end(), [this](BlockId a, BlockId b) {
    return blocks_[static_cast<std::size_t>(a)].ptr < blocks_[static_cast<std::size_t>(b)].ptr;
  });
  out.clear();
  out.push_back(next_address_);
  for (BlockId id : scratch_order_) {
    const Block& b = blocks_[static_cast<std::size_t>(id)];
    out.push_back(b.ptr);
    out.push_back(b.size);
    out.push_back(b.stream);
    out.push_back((b.allocated ? 1 : 0) | (b.mapped ? 2 : 0) | (b.small ? 4 : 0) | (b.is_split() ? 8 : 0));
    out.push_back(b.segment);
  }
}

Bytes CachingAllocator::cached_bytes() const {
  Bytes total = 0;
  for (const Pool* pool : {&small_, &large_})
    for (const SizeKey& k : pool->blocks) total += k.size;
  return total;
}

std::string CachingAllocator::check_invariants() const {
  auto at = [this](BlockId id) -> const Block& { return blocks_[static_cast<std::size_t>(id)]; };
  Bytes allocated = 0, reserved = 0, inactive_split = 0;
  std::int64_t live_allocations = 0, segments = 0, expandable = 0, free_mapped = 0, unmapped = 0,
               inactive_blocks = 0, whole_free = 0;
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    const Block& b = blocks_[i];
    if (!b.live || b.prev != kNoBlock) continue;
    const BlockId head = static_cast<BlockId>(i);
    Bytes total = 0;
    for (BlockId id = head; id != kNoBlock; id = at(id).next) {
      const Block& x = at(id);
      if (!x.live) return "dead block " + std::to_string(id) + " linked in a segment";
      if (x.next != kNoBlock) {
        const Block& n = at(x.next);
        if (n.prev != id) return "broken prev link after block " + std::to_string(id);
        if (n.ptr != x.ptr + x.size) return "blocks " + std::to_string(id) + " and next are not contiguous";
        if (n.stream != x.stream || n.small != x.small || n.segment != x.segment)
          return "segment of block " + std::to_string(id) + " mixes streams, pools or segments";
        if (!x.allocated && !n.allocated && x.mapped == n.mapped)
          return "free neighbours " + std::to_string(id) + " and next were not merged";
      }
      if (x.allocated) {
        if (!x.mapped) return "allocated block " + std::to_string(id) + " is unmapped";
        allocated += x.size;
        ++live_allocations;
      } else if (x.mapped) {
        ++free_mapped;
        const bool whole = x.segment < 0 && !x.is_split();
        const auto& list = pool_of_const(x.small).whole;
        if (whole != (x.whole_index >= 0 && static_cast<std::size_t>(x.whole_index) < list.size() &&
                      list[static_cast<std::size_t>(x.whole_index)] == id))
          return "free block " + std::to_string(id) + " is misfiled in the whole-segment index";
        whole_free += whole ? 1 : 0;
        if (!pool_of_const(x.small).blocks.count(SizeKey{x.stream, x.size, x.ptr, id}))
          return "free block " + std::to_string(id) + " missing from its pool";
        if (x.segment < 0 && x.is_split()) {
          inactive_split += x.size;
          ++inactive_blocks;
        }
      } else {
        ++unmapped;
        if (!pool_of_const(x.small).unmapped.count(AddrKey{x.stream, x.ptr, id}))
          return "unmapped block " + std::to_string(id) + " missing from its pool";
      }
      if (x.mapped) total += x.size;
    }
    reserved += total;
    if (b.segment < 0) {
      ++segments;
      if (total % kRoundLarge !=
          0)  // kSmallBuffer, kLargeBuffer and kRoundLarge multiples are all 2 MiB multiples
        return "segment at " + std::to_string(b.ptr) + " has an impossible size " + std::to_string(total);
    } else {
      ++expandable;
    }
  }
  const auto set_sizes = static_cast<std::int64_t>(small_.blocks.size() + large_.blocks.size());
  const auto unmapped_sizes = static_cast<std::int64_t>(small_.unmapped.size() + large_.unmapped.size());
  if (set_sizes != free_mapped)
    return "free sets hold " + std::to_string(set_sizes) + " blocks, segments " + std::to_string(free_mapped);
  if (unmapped_sizes != unmapped) return "unmapped sets disagree with the segments";
  if (static_cast<std::int64_t>(small_.whole.size() + large_.whole.size()) != whole_free)
    return "the whole-segment index holds blocks that are not free whole segments";
  if (allocated != stats_.allocated_bytes) return "allocated_bytes disagrees with the live blocks";
  if (live_allocations != stats_.allocations) return "allocation count disagrees with the live blocks";
  if (reserved != stats_.reserved_bytes) return "reserved_bytes disagrees with the segments";
  if (segments != stats_.segments || expandable != stats_.expandable_segments)
    return "segment counts disagree";
  if (inactive_split != stats_.inactive_split_bytes || inactive_blocks != stats_.inactive_split_blocks)
    return "inactive_split disagrees with the split free blocks";
  if (stats_.reserved_bytes != stats_.allocated_bytes + cached_bytes())
    return "reserved != allocated + cached";
  if (config_.capacity_bytes > 0 && stats_.reserved_peak_bytes > config_.capacity_bytes)
    return "reserved above capacity";
  return {};
}

}  // namespace shardplan
