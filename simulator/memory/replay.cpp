// The caching-allocator replay of a simulated step (replay.hpp).
#include "simulator/memory/replay.hpp"

#include <stdexcept>
#include <string>

namespace shardplan {

bool AllocatorReplay::malloc_group(const MemEffect& e, std::int32_t group, std::int32_t task, int step) {
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
      out_.reserved_peak_copy = copy_;
    }
    std::int32_t node = free_nodes_;
    if (node >= 0) {
      free_nodes_ = nodes_[static_cast<std::size_t>(node)].next;
    } else {
      node = static_cast<std::int32_t>(nodes_.size());
      nodes_.push_back({});
    }
    auto& head = head_[static_cast<std::size_t>(group)];
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

bool AllocatorReplay::prepare_repeat(const Program& prog, const ReplayRepeat& r) {
  // The whole step's micro-batches 2 .. m-2 are copies of the steady one with fresh tensor ids: a tensor it
  // allocates and frees is its own in every copy; one it allocates and the next micro-batch frees (a held
  // logits buffer, a gradient passed between micro-batches) is "passed on", and the one it frees from the
  // micro-batch before is "received": in a copy, the previous copy's. The pairing of the two lowered steady
  // micro-batches' effects, position by position, names which group of the copied micro-batch plays the part
  // of which group of the one before. Anything else (a tensor reaching two micro-batches back, one never
  // freed) is refused.
  const auto G = static_cast<std::size_t>(prog.tensors);
  const std::int32_t prev = r.block_prev, lo = r.block_lo, hi = r.block_hi, len = lo - prev;
  const auto n = static_cast<std::int32_t>(prog.tasks.size());
  if (len <= 0 || hi - lo != len || hi > n || prev < 0) return false;
  first_alloc_.assign(G, -1);
  last_alloc_.assign(G, -1);
  first_free_.assign(G, -1);
  last_free_.assign(G, -1);
  auto valid = [&](std::int32_t g) { return g >= 0 && g < prog.tensors; };
  constexpr std::int32_t kBefore = -2;  // allocated before the step
  for (const MemEffect& e : prog.initial)
    if (valid(e.tensor) && e.delta_bytes > 0) first_alloc_[static_cast<std::size_t>(e.tensor)] = kBefore;
  for (std::int32_t i = 0; i < n; ++i) {
    const Task& t = prog.tasks[static_cast<std::size_t>(i)];
    for (std::uint32_t k = t.first_effect; k < t.first_effect + t.n_effects; ++k) {
      const MemEffect& e = prog.effects[k];
      if (!valid(e.tensor)) continue;
      const auto g = static_cast<std::size_t>(e.tensor);
      if (e.delta_bytes > 0) {
        if (first_alloc_[g] == -1) first_alloc_[g] = i;
        last_alloc_[g] = i;
      } else if (e.delta_bytes < 0) {
        if (first_free_[g] == -1) first_free_[g] = i;
        last_free_[g] = i;
      }
    }
  }
  auto in = [](std::int32_t x, std::int32_t a, std::int32_t b) { return x >= a && x < b; };
  role_.assign(G, Role::kOther);
  successor_.assign(G, -1);
  for (std::int32_t i = lo; i < hi; ++i) {
    const Task& a = prog.tasks[static_cast<std::size_t>(i)];
    const Task& b = prog.tasks[static_cast<std::size_t>(i - len)];
    if (a.n_effects != b.n_effects) return false;
    for (std::uint32_t k = 0; k < a.n_effects; ++k) {
      const MemEffect& ea = prog.effects[a.first_effect + k];
      const MemEffect& eb = prog.effects[b.first_effect + k];
      if (ea.delta_bytes != eb.delta_bytes || ea.pool != eb.pool || ea.count != eb.count) return false;
      if (ea.delta_bytes <= 0) continue;
      if (!valid(ea.tensor) || !valid(eb.tensor)) {
        if (valid(ea.tensor) != valid(eb.tensor)) return false;
        continue;
      }
      const auto ga = ea.tensor, gb = eb.tensor;
      if (ga == gb || !in(first_alloc_[static_cast<std::size_t>(ga)], lo, hi) ||
          !in(first_alloc_[static_cast<std::size_t>(gb)], prev, lo))
        return false;
      auto& s = successor_[static_cast<std::size_t>(gb)];
      if (s >= 0 && s != ga) return false;
      s = ga;
    }
  }
  passed_.clear();
  for (std::size_t g = 0; g < G; ++g) {
    if (in(first_alloc_[g], lo, hi)) {
      if (last_alloc_[g] >= hi || first_free_[g] == -1) return false;
      if (first_free_[g] >= hi) {  // freed by the last micro-batch: passed on
        role_[g] = Role::kPassedOn;
        passed_.push_back(static_cast<std::int32_t>(g));
      } else if (last_free_[g] >= hi || first_free_[g] < last_alloc_[g]) {
        return false;
      }
    } else if (in(first_alloc_[g], prev, lo)) {
      if (last_alloc_[g] >= lo || first_free_[g] == -1 || last_free_[g] >= hi) return false;
      if (first_free_[g] >= lo) {  // freed by the steady micro-batch: received
        const std::int32_t s = successor_[g];
        if (first_free_[g] < last_alloc_[g] || s < 0) return false;
        role_[g] = Role::kReceived;
      } else if (last_free_[g] >= lo) {
        return false;
      }
    }
  }
  // Every passed-on group takes the part of exactly one received group, and the steady micro-batch frees
  // nothing but its own and received groups.
  std::size_t received = 0;
  for (std::size_t g = 0; g < G; ++g)
    if (role_[g] == Role::kReceived) {
      ++received;
      if (role_[static_cast<std::size_t>(successor_[g])] != Role::kPassedOn) return false;
    }
  if (received != passed_.size()) return false;
  for (std::int32_t i = lo; i < hi; ++i) {
    const Task& t = prog.tasks[static_cast<std::size_t>(i)];
    for (std::uint32_t k = t.first_effect; k < t.first_effect + t.n_effects; ++k) {
      const MemEffect& e = prog.effects[k];
      if (!valid(e.tensor) || e.delta_bytes >= 0) continue;
      const auto g = static_cast<std::size_t>(e.tensor);
      if (!in(first_alloc_[g], lo, hi) && role_[g] != Role::kReceived) return false;
    }
  }
  for (const auto& [to, from] : prog.carried)
    for (std::int32_t g : {to, from})
      if (valid(g) && in(first_alloc_[static_cast<std::size_t>(g)], prev, hi)) return false;
  return true;
}

void AllocatorReplay::describe_passed(std::int32_t offset, std::vector<std::int64_t>& out) const {
  for (std::int32_t g : passed_) {
    out.push_back(-1);
    for (std::int32_t node = head_[static_cast<std::size_t>(g + offset)]; node >= 0;
         node = nodes_[static_cast<std::size_t>(node)].next)
      out.push_back(alloc_.block_address(nodes_[static_cast<std::size_t>(node)].block));
  }
}

const ReplayOutcome& AllocatorReplay::run(const Program& prog, const AllocatorConfig& config, int steps,
                                          const ReplayRepeat* repeat) {
  alloc_.reset(config);
  out_ = ReplayOutcome{};
  copy_ = 0;
  const bool rep = repeat != nullptr && repeat->copies > 0;
  if (rep && !prepare_repeat(prog, *repeat)) {
    out_.repeat_refused = true;
    return out_;
  }
  const std::int32_t G = prog.tensors;
  // With a repeat, copies alternate between two names for the groups they pass on (the receiving copy
  // frees the previous copy's while allocating its own): id and id + G. The last copy uses the id, which the
  // lowered last micro-batch frees.
  head_.assign(static_cast<std::size_t>(rep ? 2 * G : G), -1);
  nodes_.clear();
  free_nodes_ = -1;
  auto valid = [&](std::int32_t g) { return g >= 0 && g < G; };
  auto done = [&]() -> const ReplayOutcome& {
    out_.stats = alloc_.stats();
    return out_;
  };
  const int C = rep ? repeat->copies : 0;
  auto offset = [&](int j) { return (C - j) % 2 == 1 ? G : 0; };
  bool state_created = !prog.optimizer_state_lazy;
  // Task i's effects; in copy j >= 0 of the steady micro-batch with that copy's names.
  auto apply = [&](std::size_t i, int step, int j) {
    const Task& t = prog.tasks[i];
    const auto task = static_cast<std::int32_t>(i);
    if (!state_created && t.type == TaskType::kOptimizer) {
      state_created = true;
      for (const MemEffect& e : prog.initial)
        if (valid(e.tensor) && e.delta_bytes > 0 && e.category == MemCategory::kOptimizer &&
            !malloc_group(e, e.tensor, task, step))
          return false;
    }
    for (std::uint32_t k = t.first_effect; k < t.first_effect + t.n_effects; ++k) {
      const MemEffect& e = prog.effects[k];
      if (!valid(e.tensor)) continue;
      std::int32_t g = e.tensor;
      if (j >= 0) {
        const Role role = role_[static_cast<std::size_t>(g)];
        if (e.delta_bytes > 0 && role == Role::kPassedOn)
          g += offset(j);
        else if (e.delta_bytes < 0 && role == Role::kReceived && j > 0)
          g = successor_[static_cast<std::size_t>(g)] + offset(j - 1);
      }
      if (e.delta_bytes > 0) {
        if (!malloc_group(e, g, task, step)) return false;
      } else if (e.delta_bytes < 0) {
        free_group(g);
      }
    }
    return true;
  };
  for (const MemEffect& e : prog.initial)
    if (valid(e.tensor) && e.delta_bytes > 0 &&
        !(prog.optimizer_state_lazy && e.category == MemCategory::kOptimizer) &&
        !malloc_group(e, e.tensor, -1, 0))
      return done();
  const std::size_t n = prog.tasks.size();
  const auto lo = static_cast<std::size_t>(rep ? repeat->block_lo : 0);
  const auto hi = static_cast<std::size_t>(rep ? repeat->block_hi : 0);
  // Skipping repeated copies needs the allocator's whole state in its block layout; garbage collection also
  // ages the cached blocks by calls.
  const bool can_skip = config.garbage_collection_threshold <= 0.0;
  for (int step = 1; step <= steps; ++step) {
    if (step > 1)
      for (const auto& [to, from] : prog.carried)  // e.g. the held logits of the last micro-step
        if (valid(to) && valid(from) && to != from) {
          free_group(to);
          head_[static_cast<std::size_t>(to)] = head_[static_cast<std::size_t>(from)];
          head_[static_cast<std::size_t>(from)] = -1;
        }
    if (!rep) {
      for (std::size_t i = 0; i < n; ++i)
        if (!apply(i, step, -1)) return done();
      continue;
    }
    for (std::size_t i = 0; i < lo; ++i)
      if (!apply(i, step, -1)) return done();
    for (int j = 0; j <= C; ++j) {
      const AllocatorStats before = alloc_.stats();
      copy_ = j;
      for (std::size_t i = lo; i < hi; ++i)
        if (!apply(i, step, j)) return done();
      copy_ = 0;
      ++out_.copies_run;
      if (!can_skip || j == C) continue;
      const AllocatorStats& now = alloc_.stats();
      alloc_.describe_state(state_b_);
      describe_passed(offset(j), state_b_);
      const bool quiet = now.num_device_alloc == before.num_device_alloc &&
                         now.num_device_free == before.num_device_free &&
                         now.num_alloc_retries == before.num_alloc_retries;
      if (j > 0 && quiet && state_b_ == state_a_) {
        // Copy j left everything as copy j - 1 did: copies j + 1 .. C would each repeat it.
        const std::int64_t skipped = C - j;
        alloc_.count_repeated_calls(skipped * (now.malloc_calls - before.malloc_calls),
                                    skipped * (now.free_calls - before.free_calls));
        if (offset(j) != offset(C))
          for (std::int32_t g : passed_) {
            head_[static_cast<std::size_t>(g + offset(C))] = head_[static_cast<std::size_t>(g + offset(j))];
            head_[static_cast<std::size_t>(g + offset(j))] = -1;
          }
        break;
      }
      state_a_.swap(state_b_);
    }
    for (std::size_t i = hi; i < n; ++i)
      if (!apply(i, step, -1)) return done();
  }
  return done();
}

}  // namespace shardplan
