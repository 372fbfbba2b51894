// Lowering, tensor identity: what each memory effect is made of, tensor by tensor, for the caching-allocator
// replay (simulator/memory/replay.cpp; docs/model.md "Reserved memory"). The sizes come from units.cpp and
// the runtime's traits; here they are split into the tensors the frameworks allocate (per parameter, flat
// buffers; the activations as the layers' lists give them, lowering_activations.cpp), so the aggregate walk
// is unchanged.
#include <optional>
#include <utility>
#include <vector>

#include "simulator/cost/cost.hpp"
#include "simulator/lowering/lowering_state.hpp"
#include "simulator/lowering/units_stages.hpp"

namespace shardplan::detail {

namespace {

/// The tensors of a grouped MoE layer's worst backward op, in the order autograd creates them, bytes each
/// (units_moe_backward.cpp grouped_backward_excess): the combine's (three fp32 N x h, the scores' N x 4) or
/// the grouped GEMMs' (torch._grouped_mm allocates each output as one tensor: aten GroupedMMUtils.h
/// create_grouped_gemm_output_tensor, at::empty_strided of the whole [groups, m, n] or [rows, n], pytorch at
/// 06c0cf0 native/cuda/GroupMM.cu bf16bf16_grouped_gemm_impl_sm90_sm100; its CUTLASS argument buffer and
/// workspace are two allocations of a few KiB beside it): down's weight gradient and input gradient (R x f),
/// up's weight gradient and input gradient (R x h), gate's likewise, each weight gradient [local experts,
/// out, in] for all the rank's experts at once; whichever op writes more. R: the busiest rank's rows
/// (moe_expert_rows), f: the expert's TP-local width.
void grouped_moe_op_tensors(const UnitContext& c, const Layer& l, double grad_b, std::vector<double>& out) {
  out.clear();
  if (c.p.moe_impl != MoeImpl::kGrouped || l.kind != LayerKind::kMoe || l.moe_experts <= 0) return;
  const double h = static_cast<double>(c.s.hidden), R = moe_expert_rows(c, l);
  double f = 0;
  for (const Gemm& g : l.gemms)
    if (g.expert && g.tp == TpSplit::kColumn) f = static_cast<double>(g.n) / c.t;
  std::vector<double> dw;  // the routed experts' weights in the list's order: gate (or gate_up), up, down
  for (const Tensor& t : l.tensors)
    if (t.expert && t.stack > 1 && t.dim1 > 1)  // the weights; the biases are written by a sum
      dw.push_back(static_cast<double>(rank_local_elems(t, 1, c.p.tp, c.p.ep)) * grad_b);
  const double N = combine_fp32_bytes(c.p, c.s, l, c.T);
  const double combine = 3 * N + N / h;
  std::vector<double> experts;
  if (!dw.empty()) experts.push_back(dw.back());  // down's weight gradient, then its input gradient
  experts.push_back(R * f * c.bc);
  for (std::size_t i = dw.size() > 1 ? dw.size() - 1 : 0; i-- > 0;) {  // up, then gate
    experts.push_back(dw[i]);
    experts.push_back(R * h * c.bc);
  }
  double sum = 0;
  for (double b : experts) sum += b;
  if (sum >= combine) {
    out = experts;
  } else if (N > 0) {
    out = {N, N, N, N / h};
  }
}

}  // namespace

void Lowering::add_run(Span& s, double weight, int count) {
  if (weight <= 0 || count <= 0) return;
  if (s.n == 0) s.first = static_cast<std::uint32_t>(runs_.size());
  // Consecutive tensors of one size are one run (fewer effects); a run's count fits 16 bits.
  if (s.n > 0 && runs_.back().weight == weight && runs_.back().count + count <= 65535) {
    runs_.back().count = static_cast<std::uint16_t>(runs_.back().count + count);
    return;
  }
  while (count > 65535) {
    runs_.push_back({weight, 65535});
    ++s.n;
    count -= 65535;
  }
  runs_.push_back({weight, static_cast<std::uint16_t>(count)});
  ++s.n;
}

void Lowering::build_tensor_lists() {
  runs_.clear();
  ut_.assign(static_cast<std::size_t>(U_), UnitTensors{});
  const auto& s = in_.model.spec();
  // A parameter as this rank holds it: TP-local, and sharded as the runtime pads it; a grouped expert weight
  // under expert parallelism with the rank's experts only, sharded over the expert-FSDP ranks.
  auto local_elems = [&](const Tensor& ten) { return rank_local_elems(ten, 1, p_.tp, p_.ep); };
  auto shard_elems = [&](const Tensor& ten) {
    const int group = ten.expert && p_.ep > 1 ? std::max(1, p_.shard_group / p_.ep) : p_.shard_group;
    return rank_shard_elems(ten, 1, p_.tp, group, rt_.padding, p_.ep);
  };
  const double T = act_tokens();
  const ScorePasses score = score_passes(p_, false);
  // A grouped MoE's op tensors need its rows (moe_expert_rows) and widths: the units' context, once.
  bool grouped_moe = false;
  for (const Layer* l : in_.model.order()) grouped_moe = grouped_moe || l->kind == LayerKind::kMoe;
  grouped_moe = grouped_moe && p_.moe_impl == MoeImpl::kGrouped;
  const std::optional<UnitContext> uc =
      grouped_moe ? std::optional<UnitContext>(std::in_place, in_.model, in_.cluster, in_.costs, p_, rt_)
                  : std::nullopt;
  const double grad_b = rt_.grads_persistent           ? 0.0
                        : rt_.grad_kept_until_boundary ? bytes_per_param(rt_, p_.precision).grads
                                                       : bc_;
  std::vector<double> op_tensors;
  for (int u = 0; u < U_; ++u) {
    const SimUnit& un = unit(u);
    UnitTensors& t = ut_[static_cast<std::size_t>(u)];
    // A tied-embedding unit (FSDP2) gathers the whole group; its unsharded gradients are its own parameters'
    // (the tied weight's first gradient is a tensor of its own: Lowering::backward).
    // A merged root (FSDP2 --root-params embedding-head) gathers and reduces the head's parameters too.
    const SimUnit* peer = un.tied_peer >= 0     ? &unit(un.tied_peer)
                          : un.owns_merged_root ? &unit(U_ - 1)
                                                : nullptr;
    for (const Layer* l : un.layers)
      for (const auto& ten : l->tensors) add_run(t.params_local, static_cast<double>(local_elems(ten)));
    if (rt_.padding == Padding::kFlatUnit) {
      add_run(t.params_shard, static_cast<double>(un.shard_elems));
      t.reduced_shard = t.params_shard;
    } else {
      for (const SimUnit* v : {&un, peer})
        if (v)
          for (const Layer* l : v->layers)
            for (const auto& ten : l->tensors) add_run(t.params_shard, static_cast<double>(shard_elems(ten)));
      if (peer && !un.owns_merged_root) {
        for (const Layer* l : un.layers)
          for (const auto& ten : l->tensors) add_run(t.reduced_shard, static_cast<double>(shard_elems(ten)));
      } else {
        t.reduced_shard = t.params_shard;
      }
    }
    activation_spans(u);
    // The backward's transients, split as tensors of their sizes: two hidden-sized, and in blocks two
    // FFN-sized (a block unit's workspace_bytes is its op-level peak over the saved tensors, units.cpp);
    // a grouped MoE's three fp32 combine tensors; float8 adds the fp8 copies of one input and one output
    // gradient.
    const double h_b = T * bc_ * static_cast<double>(s.hidden);
    add_run(t.workspace, h_b, 2);
    if (un.blocks > 0) {
      add_run(t.workspace, T * bc_ * static_cast<double>(s.ffn_hidden) / p_.tp, 2);
      // A materialised core's score gradients beyond its saved score tensors.
      double scores = 0;
      for (const Layer* l : un.layers) scores = std::max(scores, score_elems(*l, p_, T));
      if (scores > 0) add_run(t.workspace, scores * (score.bwd_peak_bytes - score.saved_bytes()));
      // torchtitan's MoE combine backward: three fp32 N x h tensors (units_moe_backward.cpp).
      double combine = 0;
      for (const Layer* l : un.layers) combine = std::max(combine, detail::combine_fp32_bytes(p_, s, *l, T));
      add_run(t.workspace, combine, 3);
      // A grouped MoE's worst backward op, its tensors at their own sizes (the largest MoE layer's).
      if (uc) {
        double best = 0;
        std::vector<double> tensors;
        for (const Layer* l : un.layers) {
          grouped_moe_op_tensors(*uc, *l, grad_b, tensors);
          double sum = 0;
          for (double b : tensors) sum += b;
          if (sum > best) best = sum, op_tensors = tensors;
        }
        if (best > 0)
          for (double b : op_tensors) add_run(t.workspace_exact, b);
      }
      if (p_.fp8 != Fp8::kNone)
        add_run(t.workspace, T * (static_cast<double>(s.hidden) + static_cast<double>(s.ffn_hidden) / p_.tp) *
                                 detail::fp8_workspace_bytes_per_elem(p_.fp8));
    }
  }
  // The model's parameters once each (a tied weight is in two units' lists above), in unit order.
  // (A span's runs are contiguous: one list at a time.)
  for (int u = 0; u < U_; ++u)
    for (const Layer* l : unit(u).layers)
      for (const auto& ten : l->tensors) add_run(all_local_, static_cast<double>(local_elems(ten)));
  for (int u = 0; u < U_; ++u) {
    if (rt_.padding == Padding::kFlatUnit) {
      add_run(all_shard_, static_cast<double>(unit(u).shard_elems));
      continue;
    }
    for (const Layer* l : unit(u).layers)
      for (const auto& ten : l->tensors) add_run(all_shard_, static_cast<double>(shard_elems(ten)));
  }
  // The optimizer's tensors: torch.optim keeps state per parameter (FSDP: this rank's shard of each; DDP:
  // each whole parameter); DeepSpeed steps flat fp32 partitions (one per parameter group).
  if (rt_.optimizer_flat_partitions)
    add_run(optimizer_params_, 1.0);
  else
    optimizer_params_ = p_.zero >= 1 ? all_shard_ : all_local_;
}

std::int32_t Lowering::alloc_workspace(const SimUnit& un, const UnitTensors& ut) {
  // The exact tensors in creation order while they fit (a tensor allocated whole or not at all); the rest of
  // the workspace over the generic tensors in proportion. Without exact tensors: all in proportion.
  const Bytes total = un.workspace_bytes;
  Bytes exact = 0;
  std::uint32_t n = 0;
  for (; n < ut.workspace_exact.n; ++n) {
    const Run r = runs_[ut.workspace_exact.first + n];
    const Bytes b = static_cast<Bytes>(r.weight) * r.count;
    if (exact + b > total) break;
    exact += b;
  }
  std::int32_t group = -1;
  if (exact > 0)
    group = alloc_tensors(MemCategory::kOther, kPoolDefault, exact, Span{ut.workspace_exact.first, n});
  return alloc_tensors(MemCategory::kOther, kPoolDefault, total - exact, ut.workspace, group);
}

std::int32_t Lowering::alloc_one(MemCategory c, std::uint8_t pool, Bytes bytes, std::int32_t group) {
  if (bytes <= 0) return group;
  if (group < 0) group = out_.program.new_tensor();
  out_.program.add_effect({c, pool, 1, group, bytes});
  groups_.allocated(group, bytes, pool, out_.program.tensors);
  return group;
}

std::int32_t Lowering::alloc_tensors(MemCategory c, std::uint8_t pool, Bytes total, Span s,
                                     std::int32_t group) {
  if (total <= 0) return group;
  if (group < 0) group = out_.program.new_tensor();
  double w = 0;
  for (std::uint32_t i = 0; i < s.n; ++i) w += runs_[s.first + i].weight * runs_[s.first + i].count;
  if (s.n == 0 || w <= 0) return alloc_one(c, pool, total, group);
  Bytes used = 0;
  for (std::uint32_t i = 0; i < s.n; ++i) {
    const Run r = runs_[s.first + i];
    const Bytes each = static_cast<Bytes>(std::floor(static_cast<double>(total) * (r.weight / w)));
    const bool last = i + 1 == s.n;
    const int n = last ? r.count - 1 : r.count;
    if (each > 0 && n > 0) {
      out_.program.add_effect({c, pool, static_cast<std::uint16_t>(n), group, each * n});
      used += each * n;
    }
    if (last && total - used > 0) out_.program.add_effect({c, pool, 1, group, total - used});
  }
  groups_.allocated(group, total, pool,
                    out_.program.tensors);  // the runs' floors and the remainder add up to it
  return group;
}

void Lowering::free_group(MemCategory c, std::int32_t group) {
  const TensorGroups::Released r = groups_.release(group, out_.program.tensors);
  if (r.bytes > 0) out_.program.add_effect({c, r.pool, 1, group, -r.bytes});
}

void Lowering::initial_tensors() {
  if (!in_.initial) return;
  auto& prog = out_.program;
  const auto& init = *in_.initial;
  auto total = [&](MemCategory c) { return init[static_cast<std::size_t>(c)]; };
  // Appends tensors to Program::initial (not to a task) by emitting them on a scratch task's effect list.
  auto emit = [&](MemCategory c, Bytes bytes, Span s) {
    if (bytes <= 0) return std::int32_t{-1};
    const std::size_t before = prog.effects.size();
    prog.tasks.emplace_back();  // scratch: add_effect appends to the last task
    const std::int32_t g = alloc_tensors(c, kPoolDefault, bytes, s);
    prog.tasks.pop_back();
    prog.initial.insert(prog.initial.end(), prog.effects.begin() + static_cast<std::ptrdiff_t>(before),
                        prog.effects.end());
    prog.effects.resize(before);
    return g;
  };
  const Span none{};
  // Parameters: FSDP2 one sharded tensor per parameter, FSDP1 one flat parameter per unit, DeepSpeed ZeRO-3 a
  // partition per parameter; unsharded runtimes (DDP, DeepSpeed ZeRO-1/2) every parameter whole.
  // Megatron: one contiguous param buffer and one grad buffer (param_and_grad_buffer.py), each one tensor.
  const bool buffers = rt_.contiguous_param_grad_buffers;
  emit(MemCategory::kParams, total(MemCategory::kParams),
       buffers              ? none
       : rt_.gathers_params ? all_shard_
                            : all_local_);
  // Gradients that live across steps: DDP's .grad per parameter; DeepSpeed ZeRO-2/3 flat partitions (the
  // optimizer's flat partitions, one tensor each).
  emit(MemCategory::kGrads, total(MemCategory::kGrads),
       buffers || (rt_.optimizer_flat_partitions) ? none : (p_.zero >= 1 ? all_shard_ : all_local_));
  // Communication buffers: DeepSpeed ZeRO-3's IPG bucket is one tensor; DDP's Reducer buckets are
  // DistributedDataParallel(bucket_cap_mb=25) each, the first capped at dist._DEFAULT_FIRST_BUCKET_BYTES
  // (1 MiB; torch/nn/parallel/distributed.py).
  {
    const Bytes comm = total(MemCategory::kCommBuffers);
    if (rt_.ddp_reducer_buckets && comm > 0) {
      Span buckets{};
      const Bytes first = std::min<Bytes>(comm, kMiB), cap = 25 * kMiB;
      add_run(buckets, static_cast<double>(first));
      const Bytes rest = comm - first;
      if (rest / cap > 0) add_run(buckets, static_cast<double>(cap), static_cast<int>(rest / cap));
      if (rest % cap > 0) add_run(buckets, static_cast<double>(rest % cap));
      emit(MemCategory::kCommBuffers, comm, buckets);
    } else {
      emit(MemCategory::kCommBuffers, comm, none);
    }
  }
  held_logits_id_ = emit(MemCategory::kActivations, total(MemCategory::kActivations), none);
  emit(MemCategory::kGathered, total(MemCategory::kGathered), none);
  emit(MemCategory::kOther, total(MemCategory::kOther), none);
  // Optimizer state last: AdamW creates exp_avg and exp_avg_sq per parameter at its first step (the replay
  // allocates these entries then); DeepSpeed allocates its flat fp32 partitions at initialisation.
  // torch/optim/adamw.py _init_group: per parameter in order, exp_avg then exp_avg_sq (zeros_like).
  // Other optimizers: their state tensors per parameter as optimizer_state_tensors lists them.
  Span state{};
  if (rt_.optimizer_flat_partitions) {
    state = optimizer_params_;
  } else if (p_.optimizer == Optimizer::kAdamW || p_.optimizer == Optimizer::kAdam) {
    for (std::uint32_t i = 0; i < optimizer_params_.n; ++i) {
      const Run r = runs_[optimizer_params_.first + i];
      add_run(state, r.weight, 2 * r.count);
    }
  } else {
    for_each_optimizer_tensor(in_.model, p_, [&](const OptimizerTensor& t, std::int64_t count) {
      const StateTensors st = optimizer_state_tensors(rt_, p_, t);
      for (int i = 0; i < st.n; ++i)
        add_run(state, static_cast<double>(st.bytes[static_cast<std::size_t>(i)]),
                static_cast<int>(std::min<std::int64_t>(count, 1 << 20)));
    });
  }
  emit(MemCategory::kOptimizer, total(MemCategory::kOptimizer), state);
}

}  // namespace shardplan::detail
