// Lowering, activations: each unit's activation tensors as its layers' lists give them (simulator/model/
// activations.hpp; docs/model.md "Eager forward transients"). The saved tensors, real sizes in forward order,
// make the unit's saved group (SimUnit::act_bytes, freed by its backward); an eager forward also makes the
// tensors its regime drops and frees each when Python drops it (at once, after its consumer, when the layer
// or the block returns, after the residual add), and a layer's input is made by the layer before it — the
// next unit's first input at the end of this unit's forward, before this unit's last output dies.
#include "simulator/lowering/lowering_state.hpp"

namespace shardplan::detail {

namespace {

/// What one activation tensor comes to in a layer under plan p's regime: the bytes saved for backward (into
/// the unit's group) and those made and dropped (eager; not for a tensor lowered only where saved).
struct ActUse {
  double saved = 0, dropped = 0;
};

ActUse act_use(const ActTensor& a, const Plan& p, double tokens, bool selective, bool full) {
  ActUse r;
  if (!act_exists(a, p)) return r;
  const double b = tokens * act_bytes_per_token(a, p, tokens);
  // Full AC: the checkpointed block keeps its input alone; the recomputation makes the rest again in
  // backward.
  const double share = full ? (a.role == ActRole::kBlockInput ? 1.0 : 0.0) : act_saved_share(a, p, selective);
  r.saved = share * b;
  if (a.life != ActLife::kUntracked) r.dropped = (1 - share) * b;
  return r;
}

/// A materialised attention core's score tensors (attention_core.cpp: the softmax output, the dropout mask,
/// the dropped probabilities): saved without recomputation, made and dropped by the layer under AC.
template <class F>
void for_each_score_tensor(const Layer& l, const Plan& p, double tokens, F&& f) {
  const double e = score_elems(l, p, tokens);
  if (e <= 0) return;
  for (double b : score_passes(p, false).saved)
    if (b > 0) f(e * b);
}

}  // namespace

void Lowering::activation_spans(int u) {
  const SimUnit& un = unit(u);
  UnitTensors& t = ut_[static_cast<std::size_t>(u)];
  const double T = act_tokens();
  const bool full = p_.ac == AcMode::kFull, sel = p_.ac == AcMode::kSelective;
  for (const Layer* l : un.layers) {
    const bool sel_l = sel && l->block >= 0, full_l = full && l->block >= 0;
    for (const ActTensor& a : l->activations) add_run(t.saved, act_use(a, p_, T, sel_l, full_l).saved);
    if (!sel_l && !full_l) for_each_score_tensor(*l, p_, T, [&](double b) { add_run(t.saved, b); });
  }
  if (!full || un.blocks == 0) return;
  // Full AC: one block's recomputed forward saves its no-AC set again, but for the block's input (the
  // checkpoint's own tensor).
  const int first_block = un.layers.front()->block;
  for (const Layer* l : un.layers) {
    if (l->block != first_block) continue;
    for (const ActTensor& a : l->activations)
      if (a.role != ActRole::kBlockInput) add_run(t.recompute, act_use(a, p_, T, false, false).saved);
    for_each_score_tensor(*l, p_, T, [&](double b) { add_run(t.recompute, b); });
  }
}

const std::vector<Lowering::ActEvent>& Lowering::forward_events(int u) {
  const auto su = static_cast<std::size_t>(u);
  std::vector<ActEvent>& ev = fwd_events_[su];
  if (fwd_events_done_[su]) return ev;
  fwd_events_done_[su] = 1;
  const SimUnit& un = unit(u);
  const double T = act_tokens();
  const bool sel = p_.ac == AcMode::kSelective, full = p_.ac == AcMode::kFull;
  using K = ActEvent::Kind;
  std::int32_t slots = 0;
  struct Live {
    std::int32_t slot;
    Bytes bytes;
    int consumer;
  };
  auto drop = [&](std::vector<Live>& v) {
    for (const Live& x : v) ev.push_back({K::kFree, x.bytes, x.slot});
    v.clear();
  };
  std::vector<Live> outputs, block_live;  // the last layer's outputs; the block's residual stream
  for (std::size_t i = 0; i < un.layers.size(); ++i) {
    const Layer& l = *un.layers[i];
    const bool sel_l = sel && l.block >= 0, full_l = full && l.block >= 0;
    std::vector<Live> local, pending, made_outputs;
    for (std::size_t k = 0; k < l.activations.size(); ++k) {
      const ActTensor& a = l.activations[k];
      const ActUse use = act_use(a, p_, T, sel_l, full_l);
      // The unit's first input was made by the previous unit (its last residual add).
      const bool made_before = i == 0 && k == 0 && a.input && fwd_pre_[su] > 0;
      if (use.saved > 0 && !made_before) ev.push_back({K::kSaved, B(use.saved), -1});
      if (use.dropped > 0 && !made_before) {
        const Live x{slots++, B(use.dropped), a.consumer};
        ev.push_back({K::kAlloc, x.bytes, x.slot});
        switch (a.life) {
          case ActLife::kAtOnce:
            ev.push_back({K::kFree, x.bytes, x.slot});
            break;
          case ActLife::kTransient:
            pending.push_back(x);
            break;
          case ActLife::kBlock:
            block_live.push_back(x);
            break;
          case ActLife::kOutput:
            made_outputs.push_back(x);
            break;
          default:
            local.push_back(x);
        }
      }
      // Tensor k made: the temporaries it consumed die, and once the layer's input (the residual sum) exists
      // the previous layer's output before the residual add does.
      for (std::size_t j = 0; j < pending.size();)
        if (pending[j].consumer == static_cast<int>(k)) {
          ev.push_back({K::kFree, pending[j].bytes, pending[j].slot});
          pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(j));
        } else {
          ++j;
        }
      if (k == 0 && a.input) drop(outputs);
    }
    if (!sel_l && !full_l)
      for_each_score_tensor(l, p_, T, [&](double b) { ev.push_back({K::kSaved, B(b), -1}); });
    else
      for_each_score_tensor(l, p_, T, [&](double b) {
        local.push_back({slots, B(b), -1});
        ev.push_back({K::kAlloc, B(b), slots++});
      });
    drop(pending);  // the layer returns
    drop(local);
    if (!made_outputs.empty()) {
      drop(outputs);
      outputs = std::move(made_outputs);
    }
    // The block returns: its residual stream dies once the block's output (the next layer's input) exists.
    if (i + 1 == un.layers.size() || un.layers[i + 1]->block != l.block) {
      outputs.insert(outputs.end(), block_live.begin(), block_live.end());
      block_live.clear();
    }
  }
  // The next unit's first input is this unit's last residual add (the embedding's output, a block's output):
  // made here, before this unit's last output dies, and kept in the next unit's saved group.
  if (u + 1 < U_ && !unit(u + 1).layers.empty()) {
    const Layer& next = *unit(u + 1).layers.front();
    if (!next.activations.empty() && next.activations.front().input) {
      const bool sel_n = sel && next.block >= 0, full_n = full && next.block >= 0;
      const ActUse use = act_use(next.activations.front(), p_, T, sel_n, full_n);
      if (use.saved > 0 && use.dropped <= 0) {
        fwd_pre_[su + 1] = B(use.saved);
        ev.push_back({K::kNextSaved, fwd_pre_[su + 1], -1});
      }
    }
  }
  drop(outputs);
  // The saved tensors add up to the unit's act_bytes (units.cpp's sum; per-tensor rounding aside): the
  // largest takes the difference.
  Bytes saved = 0;
  ActEvent* largest = nullptr;
  for (ActEvent& e : ev)
    if (e.kind == K::kSaved) {
      saved += e.bytes;
      if (!largest || e.bytes > largest->bytes) largest = &e;
    }
  const Bytes target = un.act_bytes - fwd_pre_[su];
  if (largest && largest->bytes + (target - saved) >= 0)
    largest->bytes += target - saved;
  else if (target - saved > 0)
    ev.push_back({K::kSaved, target - saved, -1});
  return ev;
}

std::int32_t Lowering::forward_activations(int u) {
  const SimUnit& un = unit(u);
  const UnitTensors& ut = ut_[static_cast<std::size_t>(u)];
  constexpr MemCategory A = MemCategory::kActivations;
  if (!eager_forward()) return alloc_tensors(A, kPoolDefault, un.act_bytes, ut.saved);
  const std::vector<ActEvent>& ev = forward_events(u);
  using K = ActEvent::Kind;
  // The group the previous unit began with this unit's first input, or a new one.
  std::int32_t group = fwd_pre_[static_cast<std::size_t>(u)] > 0 && next_act_group_ >= 0
                           ? next_act_group_
                           : out_.program.new_tensor();
  next_act_group_ = -1;
  if (in_.tensors) {
    std::vector<std::int32_t> ids;
    for (const ActEvent& e : ev) {
      switch (e.kind) {
        case K::kSaved:
          alloc_one(A, kPoolDefault, e.bytes, group);
          break;
        case K::kNextSaved:
          next_act_group_ = alloc_one(A, kPoolDefault, e.bytes);
          break;
        case K::kAlloc:
          if (ids.size() <= static_cast<std::size_t>(e.slot))
            ids.resize(static_cast<std::size_t>(e.slot) + 1, -1);
          ids[static_cast<std::size_t>(e.slot)] = alloc_one(A, kPoolDefault, e.bytes);
          break;
        case K::kFree:
          free_group(A, ids[static_cast<std::size_t>(e.slot)]);
          break;
      }
    }
    return group;
  }
  // Without tensor lists (the planner's walk): one effect per buffer. The walk's peak over its end state is
  // one transient: the saved group, the next unit's input, then that transient, which dies.
  Bytes cur = 0, peak = 0, saved = 0, next = 0;
  for (const ActEvent& e : ev) {
    cur += e.kind == K::kFree ? -e.bytes : e.bytes;
    peak = std::max(peak, cur);
    if (e.kind == K::kSaved) saved += e.bytes;
    if (e.kind == K::kNextSaved) next += e.bytes;
  }
  alloc_one(A, kPoolDefault, saved, group);
  if (next > 0) next_act_group_ = alloc_one(A, kPoolDefault, next);
  const Bytes extra = std::max<Bytes>(0, peak - cur);
  const std::int32_t tr = alloc_one(A, kPoolDefault, extra);
  free_group(A, tr);
  return group;
}

}  // namespace shardplan::detail
