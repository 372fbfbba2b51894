// The size and pool of each tensor group the lowering allocates (MemEffect::tensor), kept in one place: where
// it is allocated. A free names only the group and frees what its allocations added up to, from the pool they
// were made in (the caching-allocator replay frees every tensor of the group; the engine's walk subtracts the
// group's total), so no call site restates a byte count or a pool (issue 29). Internal to
// simulator/lowering*.cpp and its tests.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/checked.hpp"
#include "core/units.hpp"

namespace shardplan::detail {

class TensorGroups {
 public:
  /// Forgets every group (a new lowering; keeps the capacity).
  void clear() {
    live_.clear();
    pool_.clear();
  }
  /// `bytes` more allocated in `group` from `pool`, an id Program::new_tensor handed out (of `groups` so
  /// far). The planner's cheap pass records here, without an effect, a group allocated before the step (the
  /// held logits), whose bytes are in the engine's initial totals. Allocating into a freed group, or into one
  /// group from two pools, is a logic error.
  void allocated(std::int32_t group, Bytes bytes, std::uint8_t pool, std::int32_t groups) {
    const std::size_t g = index(group, groups);
    // Its first allocation: stored, not added to the zero fill (reading a value back right after resize's
    // memset stalls on store forwarding: 2 % of a search's time).
    if (g >= live_.size()) {
      grow(groups);
      live_[g] = bytes;
      pool_[g] = pool;
      return;
    }
    Bytes& live = live_[g];
    if (live == kFreed)
      throw std::logic_error("lowering: tensor group " + std::to_string(group) + " allocated after its free");
    if (live == 0) {
      pool_[g] = pool;  // handed out earlier, first allocated now
    } else if (pool_[g] != pool) {
      throw std::logic_error("lowering: tensor group " + std::to_string(group) + " allocated from pools " +
                             std::to_string(pool_[g]) + " and " + std::to_string(pool));
    }
    live = add_checked(live, bytes, "tensor group bytes");
  }
  /// What a free of a group takes back: its live bytes and the pool they were allocated from.
  struct Released {
    Bytes bytes = 0;
    std::uint8_t pool = 0;
  };
  /// Frees `group` and returns its live bytes and pool (0 bytes: nothing was allocated in it; -1 names no
  /// group). A group outside [-1, groups) or one already freed is a logic error (std::logic_error).
  Released release(std::int32_t group, std::int32_t groups) {
    if (group == -1) return {};
    const std::size_t g = index(group, groups);
    if (g >= live_.size()) {  // handed out, nothing allocated in it
      grow(groups);
      live_[g] = kFreed;
      return {};
    }
    Bytes& live = live_[g];
    if (live == kFreed)
      throw std::logic_error("lowering: tensor group " + std::to_string(group) + " freed twice");
    const Released r{live, pool_[g]};
    live = kFreed;
    return r;
  }
  /// Bytes allocated in `group` and not yet freed (0 for a freed or unknown group).
  Bytes live(std::int32_t group) const {
    const auto g = static_cast<std::size_t>(group);
    return group >= 0 && g < live_.size() && live_[g] != kFreed ? live_[g] : 0;
  }

 private:
  static constexpr Bytes kFreed = -1;
  static std::size_t index(std::int32_t group, std::int32_t groups) {
    if (group < 0 || group >= groups)
      throw std::logic_error("lowering: unknown tensor group " + std::to_string(group) + " (" +
                             std::to_string(groups) + " handed out)");
    return static_cast<std::size_t>(group);
  }
  void grow(std::int32_t groups) {
    live_.resize(static_cast<std::size_t>(groups), 0);
    pool_.resize(static_cast<std::size_t>(groups), 0);
  }
  std::vector<Bytes> live_;         ///< per group: bytes allocated and not freed, kFreed once freed
  std::vector<std::uint8_t> pool_;  ///< per group: the pool its allocations came from
};

}  // namespace shardplan::detail
