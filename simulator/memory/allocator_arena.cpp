// The caching-allocator replay's node arena (allocator.hpp CachingAllocator::NodeArena): the free-block sets'
// tree nodes come from chunks of 256 same-sized slots, recycled through a free list per size, so the replay's
// inserts and erases never reach operator new once warm.
#include <algorithm>
#include <cstddef>
#include <new>

#include "simulator/memory/allocator.hpp"

namespace shardplan {

// Node sizes rounded up to max_align_t so every slot of a chunk (from operator new[]) is suitably aligned.
static std::size_t slot_bytes(std::size_t bytes) {
  constexpr std::size_t a = alignof(std::max_align_t);
  return (std::max(bytes, sizeof(void*)) + a - 1) / a * a;
}

CachingAllocator::NodeArena::SizeClass& CachingAllocator::NodeArena::size_class(std::size_t bytes) {
  for (SizeClass& c : classes_)
    if (c.bytes == bytes) return c;
  classes_.push_back(SizeClass{bytes, nullptr});
  return classes_.back();
}

void* CachingAllocator::NodeArena::do_allocate(std::size_t bytes, std::size_t alignment) {
  if (alignment > alignof(std::max_align_t))
    return std::pmr::new_delete_resource()->allocate(bytes, alignment);
  const std::size_t slot = slot_bytes(bytes);
  SizeClass& c = size_class(slot);
  if (c.free == nullptr) {  // carve a new chunk of 256 nodes into the free list
    constexpr std::size_t kNodes = 256;
    chunks_.push_back(std::make_unique<std::byte[]>(slot * kNodes));
    std::byte* base = chunks_.back().get();
    for (std::size_t i = kNodes; i-- > 0;) c.free = new (base + i * slot) FreeNode{c.free};
  }
  FreeNode* n = c.free;
  c.free = n->next;
  return n;
}

void CachingAllocator::NodeArena::do_deallocate(void* p, std::size_t bytes, std::size_t alignment) {
  if (alignment > alignof(std::max_align_t))
    return std::pmr::new_delete_resource()->deallocate(p, bytes, alignment);
  const std::size_t slot = slot_bytes(bytes);
  SizeClass& c = size_class(slot);
  c.free = new (p) FreeNode{c.free};
}

}  // namespace shardplan
