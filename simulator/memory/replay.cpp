// The caching-allocator replay of a simulated step (replay.hpp).
#include "simulator/memory/replay.hpp"

#include <stdexcept>

namespace shardplan {

bool AllocatorReplay::malloc_group(const MemEffect& e, std::int32_t task, int step) {
  const int n = std::max<int>(e.count, 1);
  if (e.delta_bytes % n != 0)
    throw std::logic_error("allocator replay: an allocation of " + std::to_string(e.delta_bytes) +
                           " bytes is not " + std::to_string(n) + " equal tensors");
  const Bytes size = e.delta_bytes / n;
  for (int k = 0; k < n; ++k) {
    const BlockId b = alloc_.malloc(size, e.pool);
    if (b == kNoBlock) return false;  // OutOfMemoryError: the run ends here
    const AllocatorStats& s = alloc_.stats();
    if (s.reserved_peak_malloc_index == s.malloc_calls - 1) {
      out_.reserved_peak_task = task;
      out_.reserved_peak_step = step;
    }
    std::int32_t node = free_nodes_;
    if (node >= 0) {
      free_nodes_ = nodes_[static_cast<std::size_t>(node)].next;
    } else {
      node = static_cast<std::int32_t>(nodes_.size());
      nodes_.push_back({});
    }
    auto& head = head_[static_cast<std::size_t>(e.tensor)];
    nodes_[static_cast<std::size_t>(node)] = {b, head};
    head = node;
  }
  return true;
}

void AllocatorReplay::free_group(std::int32_t group) {
  auto& head = head_[static_cast<std::size_t>(group)];
  // Frees in allocation order reversed (the list is LIFO), as Python drops a list of tensors' references.
  for (std::int32_t node = head; node >= 0;) {
    Node& nd = nodes_[static_cast<std::size_t>(node)];
    alloc_.free(nd.block);
    const std::int32_t next = nd.next;
    nd.next = free_nodes_;
    free_nodes_ = node;
    node = next;
  }
  head = -1;
}

const ReplayOutcome& AllocatorReplay::run(const Program& prog, const AllocatorConfig& config, int steps) {
  alloc_.reset(config);
  out_ = ReplayOutcome{};
  head_.assign(static_cast<std::size_t>(prog.tensors), -1);
  nodes_.clear();
  free_nodes_ = -1;
  auto valid = [&](std::int32_t g) { return g >= 0 && g < prog.tensors; };
  auto done = [&]() -> const ReplayOutcome& {
    out_.stats = alloc_.stats();
    return out_;
  };
  for (const MemEffect& e : prog.initial)
    if (valid(e.tensor) && e.delta_bytes > 0 &&
        !(prog.optimizer_state_lazy && e.category == MemCategory::kOptimizer) && !malloc_group(e, -1, 0))
      return done();
  bool state_created = !prog.optimizer_state_lazy;
  for (int step = 1; step <= steps; ++step) {
    if (step > 1)
      for (const auto& [to, from] : prog.carried)  // e.g. the held logits of the last micro-step
        if (valid(to) && valid(from) && to != from) {
          free_group(to);
          head_[static_cast<std::size_t>(to)] = head_[static_cast<std::size_t>(from)];
          head_[static_cast<std::size_t>(from)] = -1;
        }
    for (std::size_t i = 0; i < prog.tasks.size(); ++i) {
      const Task& t = prog.tasks[i];
      const auto task = static_cast<std::int32_t>(i);
      if (!state_created && t.type == TaskType::kOptimizer) {
        state_created = true;
        for (const MemEffect& e : prog.initial)
          if (valid(e.tensor) && e.delta_bytes > 0 && e.category == MemCategory::kOptimizer &&
              !malloc_group(e, task, step))
            return done();
      }
      for (std::uint32_t k = t.first_effect; k < t.first_effect + t.n_effects; ++k) {
        const MemEffect& e = prog.effects[k];
        if (!valid(e.tensor)) continue;
        if (e.delta_bytes > 0) {
          if (!malloc_group(e, task, step)) return done();
        } else if (e.delta_bytes < 0) {
          free_group(e.tensor);
        }
      }
    }
  }
  return done();
}

}  // namespace shardplan
