// Lowering, tensor identity: what each memory effect is made of, tensor by tensor, for the caching-allocator
// replay (simulator/memory/replay.cpp; docs/model.md "Reserved memory"). The sizes come from units.cpp and
// the runtime's traits; here they are only split into the tensors the frameworks allocate (per parameter, per
// saved activation of a size class, flat buffers), so the aggregate walk is unchanged.
#include "simulator/cost/cost.hpp"
#include "simulator/lowering/lowering_state.hpp"

namespace shardplan::detail {

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
  layer_spans_.clear();
  ut_.assign(static_cast<std::size_t>(U_), UnitTensors{});
  const auto& s = in_.model.spec();
  // A parameter as this rank holds it: TP-local, and sharded as the runtime pads it; a grouped expert weight
  // under expert parallelism with the rank's experts only, sharded over the expert-FSDP ranks.
  auto local_elems = [&](const Tensor& ten) { return rank_local_elems(ten, 1, p_.tp, p_.ep); };
  auto shard_elems = [&](const Tensor& ten) {
    const int group = ten.expert && p_.ep > 1 ? std::max(1, p_.shard_group / p_.ep) : p_.shard_group;
    return rank_shard_elems(ten, 1, p_.tp, group, rt_.padding, p_.ep);
  };
  const double T = static_cast<double>(p_.mbs) * static_cast<double>(p_.seq);
  const double rep_div = p_.tp > 1 ? p_.tp : 1;
  // The two size classes of a block's saved tensors (docs/mechanics.md §2.2): tokens x hidden (norm inputs,
  // q / attention output, residual-stream tensors; divided by TP under sequence parallelism) and tokens x
  // the TP-local FFN width (gate / up projections, the activation, its product).
  const double hidden_b = T * static_cast<double>(s.hidden) * bc_ / rep_div;
  const double ffn_b = T * static_cast<double>(s.ffn_hidden) / p_.tp * bc_;
  // A layer's saved bytes as tensors of its size class: whole tensors of the class, and what is left (a
  // narrower tensor: k / v under GQA, fp32 statistics) as one more.
  auto saved_as_tensors = [&](Span& span, const Layer& l, double bytes) {
    if (bytes <= 0) return;
    const double cls = l.kind == LayerKind::kMlp || l.kind == LayerKind::kMoe ? ffn_b : hidden_b;
    const double n = cls > 0 ? std::floor(bytes / cls) : 0;
    if (n < 1) {
      add_run(span, bytes);
      return;
    }
    add_run(span, cls, static_cast<int>(std::min(n, 1e6)));
    const double rest = bytes - n * cls;
    if (rest >= 1) add_run(span, rest);
  };
  // A layer's saved tensors; a materialised attention core's score tensors (attention_core.cpp: the softmax
  // output, the dropout mask, the dropped probabilities) are tensors of their own.
  const ScorePasses score = score_passes(p_, false);
  auto layer_saved = [&](Span& span, const Layer& l, bool selective) {
    double bytes = layer_saved_bytes(l, p_, T, selective);
    const double e = selective ? 0.0 : score_elems(l, p_, T);
    for (double b : score.saved)
      if (e > 0 && b > 0) {
        add_run(span, e * b);
        bytes -= e * b;
      }
    saved_as_tensors(span, l, bytes);
  };
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
    const bool full = p_.ac == AcMode::kFull && un.blocks > 0;
    const bool sel = p_.ac == AcMode::kSelective && un.blocks > 0;
    if (full) {
      add_run(t.saved, block_input_bytes(s, p_, T), un.blocks);  // each block's input
      const int first_block = un.layers.front()->block;
      for (const Layer* l : un.layers)
        if (l->block == first_block) layer_saved(t.recompute, *l, false);
      // By layer (forward_activations): a block's first layer saves the block's input, and every layer's
      // no-AC saved set lives only while it runs (the checkpointed forward saves nothing else).
      t.first_layer_span = static_cast<std::uint32_t>(layer_spans_.size());
      for (std::size_t i = 0; i < un.layers.size(); ++i) {
        const Layer* l = un.layers[i];
        Span saved{}, dropped{};
        if (l->block < 0) {
          layer_saved(saved, *l, false);
        } else {
          if (i == 0 || un.layers[i - 1]->block != l->block) add_run(saved, 1.0);
          layer_saved(dropped, *l, false);
        }
        layer_spans_.push_back(saved);
        layer_spans_.push_back(dropped);
      }
    } else {
      for (const Layer* l : un.layers) layer_saved(t.saved, *l, sel && l->block >= 0);
      // The same tensors split by layer, for the eager forward's interleaving (forward_activations): per
      // layer its saved tensors, and what the no-AC forward would save but selective AC drops (alive while
      // the layer runs).
      t.first_layer_span = static_cast<std::uint32_t>(layer_spans_.size());
      for (const Layer* l : un.layers) {
        const bool sel_l = sel && l->block >= 0;
        Span saved{}, dropped{};
        layer_saved(saved, *l, sel_l);
        if (sel_l) saved_as_tensors(dropped, *l, dropped_bytes(*l, T));
        layer_spans_.push_back(saved);
        layer_spans_.push_back(dropped);
      }
    }
    // The backward's transients, split as tensors of their sizes: two hidden-sized, and in blocks two
    // FFN-sized (a block unit's workspace_bytes is its op-level peak over the saved tensors, units.cpp);
    // float8 adds the fp8 copies of one input and one output gradient.
    const double h_b = T * bc_ * static_cast<double>(s.hidden);
    add_run(t.workspace, h_b, 2);
    if (un.blocks > 0) {
      add_run(t.workspace, T * bc_ * static_cast<double>(s.ffn_hidden) / p_.tp, 2);
      // A materialised core's score gradients beyond its saved score tensors.
      double scores = 0;
      for (const Layer* l : un.layers) scores = std::max(scores, score_elems(*l, p_, T));
      if (scores > 0) add_run(t.workspace, scores * (score.bwd_peak_bytes - score.saved_bytes()));
      if (p_.fp8 != Fp8::kNone)
        add_run(t.workspace, T * (static_cast<double>(s.hidden) + static_cast<double>(s.ffn_hidden) / p_.tp));
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
  if (p_.runtime == Runtime::kDeepSpeed || p_.runtime == Runtime::kMegatron)
    add_run(optimizer_params_, 1.0);
  else
    optimizer_params_ = p_.zero >= 1 ? all_shard_ : all_local_;
}

double Lowering::dropped_bytes(const Layer& l, double tokens) const {
  if (l.block < 0) return 0.0;
  if (p_.ac == AcMode::kFull) return layer_saved_bytes(l, p_, tokens, false);
  if (p_.ac == AcMode::kSelective)
    return std::max(0.0, layer_saved_bytes(l, p_, tokens, false) - layer_saved_bytes(l, p_, tokens, true));
  return 0.0;
}

bool Lowering::eager_transients(const SimUnit& un) const {
  if (p_.compile || p_.runtime == Runtime::kMegatron) return false;
  for (const Layer* l : un.layers)
    if (l->act_eager_transient_split_bytes_per_token > 0 || l->act_eager_output_bytes_per_token > 0)
      return true;
  return false;
}

std::int32_t Lowering::forward_activations(int u) {
  const SimUnit& un = unit(u);
  const UnitTensors& ut = ut_[static_cast<std::size_t>(u)];
  constexpr MemCategory A = MemCategory::kActivations;
  if (!eager_transients(un)) return alloc_tensors(A, kPoolDefault, un.act_bytes, ut.saved);
  // Eager forward, layer by layer (docs/model.md "Eager forward transients"). Layer i: its temporaries, its
  // saved tensors (units.cpp's bytes; under full AC the block's input at the block's first layer; the last
  // layer takes the rounding remainder, so the group ends with exactly un.act_bytes), what selective AC drops
  // of the no-AC saved set or, under full AC, that whole set (alive while the layer runs; a norm's until the
  // next layer has run, which consumes its output); then the temporaries die, the previous layer's output
  // (before the residual add) and dropped tensors die once this layer has saved the sum, and its own output
  // is made.
  const double T = static_cast<double>(p_.mbs) * static_cast<double>(p_.seq) / p_.cp;
  const double scale = T * bc_ / 2.0;  // the per-token figures are at 16-bit compute
  const bool sel = p_.ac == AcMode::kSelective, full = p_.ac == AcMode::kFull;
  const std::size_t n = un.layers.size();
  struct Step {
    Bytes temps, saved, dropped, out;
    bool dropped_held;  ///< dropped tensors live until the next layer has run (a norm's output)
  };
  Bytes used = 0;
  auto step_of = [&](std::size_t i) {
    const Layer& l = *un.layers[i];
    const bool sel_l = sel && l.block >= 0, full_l = full && l.block >= 0;
    Step st{};
    const Bytes rest = std::max<Bytes>(0, un.act_bytes - used);
    // Full AC: a block's first layer saves the block's input (the checkpoint's), the others nothing.
    const double saved = !full_l ? layer_saved_bytes(l, p_, T, sel_l)
                         : i == 0 || un.layers[i - 1]->block != l.block
                             ? block_input_bytes(in_.model.spec(), p_, T)
                             : 0.0;
    st.saved = i + 1 == n ? rest : std::min(rest, static_cast<Bytes>(saved));
    used += st.saved;
    st.temps = static_cast<Bytes>(scale * l.act_eager_transient_split_bytes_per_token / p_.tp);
    st.dropped = static_cast<Bytes>(dropped_bytes(l, T));
    // Under selective AC a saved row-parallel output (w2's) is not a temporary.
    const double out =
        l.act_eager_output_bytes_per_token - (sel_l ? l.act_selective_row_output_bytes_per_token : 0);
    st.out = static_cast<Bytes>(scale * std::max(0.0, out));
    st.dropped_held = l.kind == LayerKind::kNorm;
    return st;
  };
  std::int32_t group = out_.program.new_tensor();
  if (in_.tensors) {
    std::int32_t out_id = -1, held_id = -1;
    Bytes out_b = 0, held_b = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const Step st = step_of(i);
      const Span* spans = &layer_spans_[ut.first_layer_span + 2 * i];
      // The temporaries as one tensor: allocated back to back and freed together, they leave one hole.
      const std::int32_t temps_id = alloc_one(A, kPoolDefault, st.temps);
      alloc_tensors(A, kPoolDefault, st.saved, spans[0], group);
      const std::int32_t dropped_id = alloc_tensors(A, kPoolDefault, st.dropped, spans[1]);
      free_group(A, kPoolDefault, temps_id, st.temps);
      free_group(A, kPoolDefault, out_id, out_b);
      free_group(A, kPoolDefault, held_id, held_b);
      held_id = -1;
      held_b = 0;
      if (st.dropped_held) {
        held_id = dropped_id;
        held_b = st.dropped;
      } else {
        free_group(A, kPoolDefault, dropped_id, st.dropped);
      }
      out_b = st.out;
      out_id = alloc_one(A, kPoolDefault, out_b);
    }
    free_group(A, kPoolDefault, out_id, out_b);
    free_group(A, kPoolDefault, held_id, held_b);
    return group;
  }
  // Without tensor lists (the planner's walk): one effect per buffer, and all of a task's effects apply at
  // once, so only the unit's peak matters: the saved group, then the excess of the same layer-by-layer peak
  // over it as one transient.
  // The same for every micro-batch: computed once per lowering.
  Bytes& extra = fwd_extra_[static_cast<std::size_t>(u)];
  if (extra < 0) {
    Bytes peak = 0, out_b = 0, held_b = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const Step st = step_of(i);
      peak = std::max(peak, used + st.temps + st.dropped + out_b + held_b);
      held_b = st.dropped_held ? st.dropped : 0;
      out_b = st.out;
      peak = std::max(peak, used + held_b + out_b);
    }
    extra = std::max<Bytes>(0, peak - un.act_bytes);
  }
  alloc_one(A, kPoolDefault, un.act_bytes, group);
  const std::int32_t tr = alloc_one(A, kPoolDefault, extra);
  free_group(A, kPoolDefault, tr, extra);
  return group;
}

std::int32_t Lowering::alloc_one(MemCategory c, std::uint8_t pool, Bytes bytes, std::int32_t group) {
  if (bytes <= 0) return group;
  if (group < 0) group = out_.program.new_tensor();
  out_.program.add_effect({c, pool, 1, group, bytes});
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
  return group;
}

void Lowering::free_group(MemCategory c, std::uint8_t pool, std::int32_t group, Bytes bytes) {
  if (group < 0 || bytes <= 0) return;
  out_.program.add_effect({c, pool, 1, group, -bytes});
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
  const bool params_sharded = rt_.gathers_params || (p_.runtime == Runtime::kDeepSpeed && p_.zero >= 3);
  // Megatron: one contiguous param buffer and one grad buffer (param_and_grad_buffer.py), each one tensor.
  const bool megatron = p_.runtime == Runtime::kMegatron;
  emit(MemCategory::kParams, total(MemCategory::kParams),
       megatron         ? none
       : params_sharded ? all_shard_
                        : all_local_);
  // Gradients that live across steps: DDP's .grad per parameter; DeepSpeed ZeRO-2/3 flat partitions.
  emit(MemCategory::kGrads, total(MemCategory::kGrads),
       p_.runtime == Runtime::kDeepSpeed || megatron ? none : (p_.zero >= 1 ? all_shard_ : all_local_));
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
  Span state{};
  if (p_.runtime == Runtime::kDeepSpeed || p_.runtime == Runtime::kMegatron) {
    state = optimizer_params_;
  } else {
    for (std::uint32_t i = 0; i < optimizer_params_.n; ++i) {
      const Run r = runs_[optimizer_params_.first + i];
      add_run(state, r.weight, 2 * r.count);
    }
  }
  emit(MemCategory::kOptimizer, total(MemCategory::kOptimizer), state);
}

}  // namespace shardplan::detail
