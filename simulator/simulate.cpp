// Lowering of a Plan into tasks with memory effects, per runtime (mechanics.md §1.4-§1.6, §3.2-§3.5), and the
// summary of one engine run into a Result.
//
// Lanes: 0 compute (default stream), 1 shard-group communicator (all-gather AND reduce-scatter: one NCCL
// communicator serialises both, mechanics §3.1), 2 replicate communicator (HSDP / DDP all-reduce).
// Pools (caching-allocator pools per stream): 0 default, 1 all-gather stream, 2 reduce-scatter stream (the HSDP
// all-reduce works in place on the reduce-scatter output and allocates nothing).
#include "simulator/simulate.hpp"

#include <algorithm>
#include <cmath>

#include "core/checked.hpp"

namespace shardplan {

const char* to_string(CommKind k) {
  static const char* n[] = {"all_gather", "reduce_scatter", "all_reduce", "tp_all_gather", "tp_reduce_scatter"};
  return n[static_cast<int>(k)];
}

namespace {
constexpr std::uint8_t kCompute = 0, kShardLane = 1, kReplicaLane = 2;
constexpr int kLanes = 3;
constexpr std::uint8_t kPoolDefault = 0, kPoolAg = 1, kPoolRs = 2;
constexpr int kPools = 3;

struct Bpp {  // bytes per parameter of the persistent state
  int params, grads, optimizer;
};
Bpp bytes_per_param(Runtime rt, Precision p) {
  switch (p) {
    case Precision::kBf16Mixed: return rt == Runtime::kDeepSpeed ? Bpp{2, 2, 12} : Bpp{4, 4, 8};
    case Precision::kBf16: return {2, 2, 8};
    case Precision::kBf16True: return {2, 2, 4};
    case Precision::kFp32: return {4, 4, 8};
  }
  return {4, 4, 8};
}
// Optimizer HBM traffic per local parameter (mechanics §5), plus 4 B to read gradients for the norm/clip.
double optimizer_bytes_per_param(Runtime rt, Precision p, bool fused) {
  double b = 28;
  switch (p) {
    case Precision::kBf16Mixed: b = rt == Runtime::kDeepSpeed ? 40 : 28; break;
    case Precision::kBf16: b = 22; break;
    case Precision::kBf16True: b = 14; break;
    case Precision::kFp32: b = 28; break;
  }
  if (!fused) b *= 2.8;  // foreach: ~8 kernels over the data instead of one pass
  return b + 4;
}
std::int64_t tp_local_rows(const Tensor& t, int tp) { return t.tp == TpSplit::kColumn ? t.dim0 / tp : t.dim0; }
std::int64_t tp_local_cols(const Tensor& t, int tp) { return t.tp == TpSplit::kRow ? t.dim1 / tp : t.dim1; }
}  // namespace



Simulator::Simulator(const ModelGraph& model, const Cluster& cluster, const CostModel& costs)
    : model_(&model), cluster_(&cluster), costs_(&costs) {
  prog_.lane_names = {"compute", "nccl:shard", "nccl:replicate"};
  n_lanes_ = kLanes;
}

std::array<Bytes, 3> Simulator::persistent_state(const ModelGraph& model, const Plan& p) {
  const int F = p.shard_group, t = p.tp;
  std::int64_t local = 0, shard = 0;
  std::int64_t fsdp1_group = 0;
  for (const Layer* l : model.order()) {
    for (const auto& ten : l->tensors) {
      const std::int64_t rows = tp_local_rows(ten, t), cols = tp_local_cols(ten, t), n = rows * cols;
      local = add_checked(local, n);
      if (p.runtime == Runtime::kFsdp2) shard = add_checked(shard, mul_checked(ceil_div(rows, F), cols));
      else if (p.runtime == Runtime::kDeepSpeed) shard = add_checked(shard, ceil_div(n, F));
      else fsdp1_group = add_checked(fsdp1_group, n);
    }
  }
  if (p.runtime == Runtime::kFsdp1) shard = ceil_div(fsdp1_group, F);  // one padded flat parameter, approximately
  const Bpp b = bytes_per_param(p.runtime, p.precision);
  const std::int64_t part = p.runtime == Runtime::kDeepSpeed && p.zero < 3 ? ceil_div(local, 2 * F) * 2 : shard;
  const bool ds = p.runtime == Runtime::kDeepSpeed;
  std::int64_t pe = local, ge = local, oe = local;
  if (p.zero >= 1) oe = part;
  if (p.zero >= 2) ge = part;
  if (p.zero >= 3 || (!ds && p.zero == 2)) pe = shard;
  if (!ds && p.zero >= 2) ge = oe = shard;
  if (p.offload == Offload::kOptimizer) oe = 0;
  return {mul_checked(pe, b.params, "parameter bytes"), mul_checked(ge, b.grads, "gradient bytes"),
          mul_checked(oe, b.optimizer, "optimizer bytes")};
}

void Simulator::build_units(const Plan& p) {
  units_.clear();
  const auto& s = model_->spec();
  const int t = p.tp, F = p.shard_group;
  const bool fp32 = p.precision == Precision::kFp32;
  const double bc = fp32 ? 4.0 : 2.0;  // compute dtype bytes
  const double T = static_cast<double>(p.mbs) * static_cast<double>(p.seq);
  const bool sp = t > 1;                // sequence parallel with TP, as torchtitan and Megatron run it
  const double fp8_ratio = p.fp8 == Fp8::kRowwise ? costs_->constants().fp8_rowwise_ratio
                                                  : costs_->constants().fp8_tensorwise_ratio;
  const GroupView tpg = cluster_->group(t, 1);
  const double f_local = static_cast<double>(s.ffn_hidden) / t;

  // Partition layers into units.
  units_.reserve(model_->order().size() + 2);  // `cur` below must stay valid
  auto new_unit = [&](const std::string& name) {
    units_.emplace_back();
    units_.back().name = name;
    return &units_.back();
  };
  Unit* cur = new_unit("embedding");
  int blocks_in_unit = 0;
  for (const Layer* l : model_->order()) {
    if (l->block >= 0) {
      const bool new_block = cur->layers.empty() || cur->layers.back()->block != l->block;
      if (new_block) {
        // A new FSDP unit starts at the first block, and after every `wrap` blocks.
        if (cur->blocks == 0 && cur->name == "embedding") cur = new_unit("blocks." + std::to_string(l->block)), blocks_in_unit = 0;
        else if (blocks_in_unit == p.wrap) cur = new_unit("blocks." + std::to_string(l->block)), blocks_in_unit = 0;
        ++blocks_in_unit;
        cur->blocks++;
        if (cur->blocks > 1) cur->name = cur->name.substr(0, cur->name.find('-')) + "-" + std::to_string(l->block);
      }
    } else if (l->kind == LayerKind::kFinalNorm) {
      cur = new_unit("head");
    }
    cur->layers.push_back(l);
    if (l->kind == LayerKind::kLoss) cur->has_loss = true;
  }

  const bool ds = p.runtime == Runtime::kDeepSpeed;
  const bool gather = p.zero == 3 || (!ds && p.zero == 2);
  for (std::size_t ui = 0; ui < units_.size(); ++ui) {
    Unit& u = units_[ui];
    std::int64_t fsdp1_flat = 0, fp8_shard = 0;
    double gemm = 0, attn = 0, elem = 0, act_none = 0, act_sel = 0, act_full = 0, workspace = 0;
    double cast_fwd_bytes = 0, cast_bwd_bytes = 0;  // float8 scaling and casting of the linears' operands
    for (const Layer* l : u.layers) {
      // torchao converts the blocks' dense linear layers; embedding, LM head, attention core and MoE experts
      // stay.
      const bool fp8_layer = p.fp8 != Fp8::kNone && l->block >= 0 &&
                             (l->kind == LayerKind::kAttention || l->kind == LayerKind::kMlp);
      for (const auto& ten : l->tensors) {
        const std::int64_t rows = tp_local_rows(ten, t), cols = tp_local_cols(ten, t), n = rows * cols;
        u.elems += n;
        if (p.runtime == Runtime::kFsdp2) u.shard_elems += ceil_div(rows, F) * cols;
        else if (ds) u.shard_elems += ceil_div(n, F);
        else fsdp1_flat += n;
        if (fp8_layer && p.fp8_all_gather && ten.dim1 > 1)
          fp8_shard += ceil_div(rows, F) * cols;  // weights, not biases
      }
      // The column-parallel projections of a layer share one input (q/k/v, gate/up).
      bool column_input_cast = false;
      for (const auto& g : l->gemms) {
        const double n = g.tp == TpSplit::kColumn ? static_cast<double>(g.n) / t : static_cast<double>(g.n);
        const double k = g.tp == TpSplit::kRow ? static_cast<double>(g.k) / t : static_cast<double>(g.k);
        if (fp8_layer) {
          gemm += g.count * costs_->gemm_fp8_s(T, n, k, fp8_ratio);
          // Bytes per element moved by the casts (docs/model.md "Float8"): tensorwise = amax pass (read 2) +
          // cast (read 2, write 1) per operand, transposes of fp8 copies (read 1, write 1) where backward
          // needs the other layout; rowwise = row scales fused into the cast (3), column scales need their
          // own pass (5). An input shared by several projections is cast once (torchtitan's
          // PrepareFloat8ModuleInput with TP; one traced cast under torch.compile); with TP, tensorwise casts
          // the sequence shard before the all-gather.
          const bool shared = g.tp == TpSplit::kColumn;
          const double X = shared ? (column_input_cast ? 0.0 : T * k) : T * k * g.count;
          if (shared) column_input_cast = true;
          const double Y = T * n * g.count, W = n * k * g.count;
          if (p.fp8 == Fp8::kTensorwise) {
            const double x_fwd = shared && t > 1 ? X / t : X;
            cast_fwd_bytes += 5 * x_fwd + (p.fp8_all_gather ? 0 : 5 * W);
            cast_bwd_bytes += 5 * X + (p.fp8_all_gather ? 2 * W : 5 * W) + 7 * Y;
          } else {
            cast_fwd_bytes += 3 * X + 3 * W;
            cast_bwd_bytes += 5 * X + 5 * W + 8 * Y;
          }
        } else {
          gemm += g.count * costs_->gemm_s(T, n, k, fp32);
        }
        u.flops_fwd += 2.0 * T * n * k * g.count;
      }
      if (l->attn_heads > 0) {
        const double heads = static_cast<double>(l->attn_heads) / t;
        // Causal flash attention: QK^T and AV over (s + 1) / 2 positions on average, 2 FLOPs per MAC.
        const double flops = 4.0 * T * ((static_cast<double>(p.seq) + 1) / 2) * heads * static_cast<double>(l->attn_head_dim);
        attn += costs_->attention_fwd_s(flops, fp32);
        u.flops_fwd += flops;
      }
      const double rep_div = sp ? t : 1;
      double el = p.compile ? l->elementwise_bytes_per_token : l->eager_elementwise_bytes_per_token;
      if (l->kind == LayerKind::kLoss) el = el / t;  // vocab-parallel loss
      else if (l->block >= 0) el = el / rep_div;
      elem += costs_->memory_s(T * el * bc / 2);
      const double a_none = T * (l->act_split_bytes_per_token / t + l->act_replicated_bytes_per_token / rep_div) * bc / 2;
      const double a_sel =
          T * (l->act_selective_split_bytes_per_token / t + l->act_selective_replicated_bytes_per_token / rep_div) * bc / 2;
      act_none += a_none;
      act_sel += a_sel;
      if (l->block >= 0 && l->kind == LayerKind::kNorm && l->name.find("attention_norm") != std::string::npos)
        act_full += T * 2.0 * static_cast<double>(s.hidden) / rep_div * bc / 2;  // block input kept by checkpoint
      else if (l->block < 0)
        act_full += a_none;
    }
    if (p.runtime == Runtime::kFsdp1) u.shard_elems = ceil_div(fsdp1_flat, F);
    if (u.blocks > 0) workspace = T * bc * (2.0 * static_cast<double>(s.hidden) + 2.0 * f_local);
    else workspace = T * bc * 2.0 * static_cast<double>(s.hidden);
    // Float8: the fp8 copies of one linear's input and output gradient live beside the 16-bit ones.
    if (u.blocks > 0 && p.fp8 != Fp8::kNone) workspace += T * (static_cast<double>(s.hidden) + f_local);
    u.workspace_bytes = static_cast<Bytes>(workspace);
    switch (p.ac) {
      case AcMode::kNone: u.act_bytes = static_cast<Bytes>(act_none); break;
      case AcMode::kSelective: u.act_bytes = static_cast<Bytes>(u.blocks > 0 ? act_sel : act_none); break;
      case AcMode::kFull:
        u.act_bytes = static_cast<Bytes>(u.blocks > 0 ? act_full : act_none);
        u.recompute_bytes = u.blocks > 0 ? static_cast<Bytes>(act_none / u.blocks) : 0;  // one block at a time
        break;
    }
    // Tensor-parallel collectives (sequence parallel): per block AG before and RS after attention and MLP.
    if (t > 1) {
      const double buf = T * static_cast<double>(s.hidden) * bc;
      int ag = 0, rs = 0;
      if (u.blocks > 0) ag = rs = 2 * u.blocks;
      else if (u.has_loss) ag = 1;
      else rs = 1;
      // torchtitan's float8 tensorwise TP plan (Float8ColwiseParallel) casts the block inputs to fp8 before
      // the sequence-parallel all-gather: 1 byte per element. Rowwise keeps the 16-bit TP plan.
      const double ag_buf = u.blocks > 0 && p.fp8 == Fp8::kTensorwise ? buf / bc : buf;
      u.tp_ag_bytes = ag * ag_buf;
      u.tp_ag_mirror_bytes = ag * buf;
      u.tp_rs_bytes = rs * buf;
      const double rs_s = rs * costs_->collective_s(CollectiveKind::kReduceScatter, buf, tpg);
      u.tp_fwd_s = ag * costs_->collective_s(CollectiveKind::kAllGather, ag_buf, tpg) + rs_s;
      // Backward: the mirror of each forward all-gather is a 16-bit reduce-scatter of the input gradient, and
      // of each reduce-scatter a 16-bit all-gather of the output gradient.
      u.tp_bwd_s = ag * costs_->collective_s(CollectiveKind::kReduceScatter, buf, tpg) +
                   rs * costs_->collective_s(CollectiveKind::kAllGather, buf, tpg);
    }
    const double overlap =
        p.async_tp ? costs_->constants().async_tp_exposed : 1.0;  // async TP hides part of it
    const double cast_fwd = costs_->memory_s(cast_fwd_bytes), cast_bwd = costs_->memory_s(cast_bwd_bytes);
    u.fwd_s = gemm + attn + elem + cast_fwd + overlap * u.tp_fwd_s;
    u.bwd_s = 2 * gemm + costs_->constants().attention_bwd_ratio * attn + 2 * elem + cast_bwd +
              overlap * u.tp_bwd_s;
    if (p.ac == AcMode::kFull && u.blocks > 0) u.recompute_s = u.fwd_s;
    else if (p.ac == AcMode::kSelective && u.blocks > 0)
      u.recompute_s = 0.5 * (gemm + cast_fwd) + elem;  // half the matmuls
    // Which units gather, and whether they reshard after forward.
    u.gathered_elems = gather ? u.shard_elems * F : 0;
    u.fp8_gathered_elems = gather ? fp8_shard * F : 0;
    u.reshard = p.reshard();
    if (p.runtime == Runtime::kFsdp2 && ui + 1 == units_.size() && gather) u.reshard = false;  // torchtitan [norm, output]
  }
  if (p.runtime == Runtime::kFsdp1 && gather && units_.size() >= 2) {
    // FSDP1 root: embedding and head are one FlatParameter, gathered at the start of forward and kept until
    // the end of backward (mechanics §1.9).
    Unit& emb = units_.front();
    Unit& head = units_.back();
    emb.shard_elems = ceil_div(emb.elems + head.elems, F);
    emb.gathered_elems = emb.shard_elems * F;
    head.shard_elems = 0;
    head.gathered_elems = 0;
    head.gather_owner = 0;
    emb.reshard = head.reshard = false;
  }
}

void Simulator::lower(const Plan& p) {
  prog_.clear();
  prog_.labels.clear();
  prog_.labels.push_back("task");
  const int U = static_cast<int>(units_.size());
  const bool fsdp2 = p.runtime == Runtime::kFsdp2, fsdp1 = p.runtime == Runtime::kFsdp1,
             ds = p.runtime == Runtime::kDeepSpeed;
  const bool gather = p.zero == 3 || (!ds && p.zero == 2);
  const bool fp32 = p.precision == Precision::kFp32;
  const double bc = fp32 ? 4.0 : 2.0;
  const double br = p.reduce() == Dtype::kFp32 ? 4.0 : 2.0;
  const Bpp bpp = bytes_per_param(p.runtime, p.precision);
  const GroupView shard_g = cluster_->group(p.shard_group, p.tp);
  const GroupView rep_g = cluster_->group(p.replicas, p.tp * p.shard_group);
  const GroupView dp_g = cluster_->group(p.dp, p.tp);
  const auto& K = costs_->constants();
  const bool mixed_cast = p.precision == Precision::kBf16Mixed || p.precision == Precision::kFp32;
  // Gradients live across micro-batches in persistent buffers (DDP: .grad beside the Reducer's buckets; DeepSpeed
  // partitions) or are created by the first backward and dropped by zero_grad(set_to_none=True) after the step.
  const bool grads_persistent = p.zero == 0 || (ds && p.zero >= 2);

  if (prog_.labels.empty()) prog_.labels.push_back("task");
  auto label = [&](auto&& make) -> std::uint32_t {
    if (!detail_) return 0;
    prog_.labels.push_back(make());
    return static_cast<std::uint32_t>(prog_.labels.size() - 1);
  };
  auto B = [](double x) { return static_cast<Bytes>(std::llround(x)); };
  // One collective on `lane` over group `g`, after `dep`; `sent_per_rank` is what the report counts as sent.
  auto add_collective = [&](CollectiveKind kind, CommKind report, std::uint8_t lane, double buffer_bytes, const GroupView& g,
                            std::int32_t dep, double sent_per_rank, auto&& name, int unit, int mb) {
    Task t;
    t.type = TaskType::kCollective;
    t.lane = lane;
    t.duration_s = costs_->collective_s(kind, buffer_bytes, g);
    t.cpu_s = K.collective_launch_s;
    t.deps[0] = dep;
    t.comm_kind = static_cast<std::uint8_t>(report);
    t.label = label(name);
    t.unit = unit;
    t.micro_batch = mb;
    res_.comm[static_cast<int>(report)].bytes_per_rank += sent_per_rank;
    return prog_.add(t);
  };

  std::vector<std::int32_t> ag_task(static_cast<std::size_t>(U), -1), copyout_task(static_cast<std::size_t>(U), -1),
      fwd_task(static_cast<std::size_t>(U), -1), bwd_task(static_cast<std::size_t>(U), -1);
  std::vector<char> gathered(static_cast<std::size_t>(U), 0), ag_out_held(static_cast<std::size_t>(U), 0);
  std::int32_t last_shard_comm = -1, last_rep_comm = -1, prev_rs = -1, prev_prev_rs = -1;
  Bytes held_rs_input = 0;
  int prev_fwd_unit_ag_out = -1;  // FSDP2 forward: AG output kept until the next unit's wait
  std::vector<std::int32_t> ag_issue_order;  // for the DeepSpeed fetch limiter

  auto ag_bytes = [&](int u) {
    const Unit& un = units_[static_cast<std::size_t>(u)];
    return static_cast<double>(un.gathered_elems - un.fp8_gathered_elems) * bc +
           static_cast<double>(un.fp8_gathered_elems);
  };
  auto issue_ag = [&](int u, int mb, bool backward, std::int32_t after) {
    Unit& un = units_[static_cast<std::size_t>(u)];
    if (un.gathered_elems == 0) return;
    Task t;
    t.type = TaskType::kCollective;
    t.lane = kShardLane;
    const double bytes = ag_bytes(u);
    t.backward = backward;
    t.duration_s = costs_->collective_s(CollectiveKind::kAllGather, bytes, shard_g) +
                   (mixed_cast ? costs_->memory_s(static_cast<double>(un.shard_elems) * (4 + bc)) : 0);
    t.cpu_s = K.collective_launch_s;
    t.deps[0] = after;
    if (fsdp1 && !ag_issue_order.empty()) {
      // limit_all_gathers: the CPU blocks until the unit freed two all-gathers ago has finished computing.
      std::size_t k = ag_issue_order.size();
      if (k >= 2) t.cpu_wait_for = ag_issue_order[k - 2] >= 0 ? ag_issue_order[k - 2] : -1;
    }
    if (ds && ag_issue_order.size() >= 2) t.cpu_wait_for = ag_issue_order[ag_issue_order.size() - 2];
    t.comm_kind = static_cast<std::uint8_t>(CommKind::kAllGather);
    t.label = label([&] { return std::string(std::string(backward ? "bwd " : "fwd ") + "all_gather " + un.name + " mb" + std::to_string(mb)); });
    t.unit = u;
    t.micro_batch = mb;
    std::int32_t id = prog_.add(t);
    if (mixed_cast && !fsdp1) {  // copy-in cast buffer (FSDP2) / coalesced input (DeepSpeed), momentary
      prog_.add_effect({MemCategory::kCommBuffers, kPoolAg, B(static_cast<double>(un.shard_elems) * bc)});
    }
    prog_.add_effect({MemCategory::kGathered, kPoolAg, B(bytes)});
    if (mixed_cast && !fsdp1)
      prog_.add_effect({MemCategory::kCommBuffers, kPoolAg, -B(static_cast<double>(un.shard_elems) * bc)});
    ag_task[static_cast<std::size_t>(u)] = id;
    gathered[static_cast<std::size_t>(u)] = 1;
    ag_out_held[static_cast<std::size_t>(u)] = 1;
    last_shard_comm = id;
    // The limiter queue holds what frees memory: FSDP1 the compute of the unit, DeepSpeed the fetch itself.
    if (ds) ag_issue_order.push_back(id);
    res_.comm[static_cast<int>(CommKind::kAllGather)].bytes_per_rank += busbw_factor(CollectiveKind::kAllGather, p.shard_group) * bytes;
  };
  // Copy-out (FSDP2: split_with_sizes_copy into per-parameter tensors; DeepSpeed: cat of coalesced pieces).
  auto copy_out = [&](int u, int mb, bool backward) {
    Unit& un = units_[static_cast<std::size_t>(u)];
    if (un.gathered_elems == 0 || fsdp1) return ag_task[static_cast<std::size_t>(u)];
    const double bytes = ag_bytes(u);
    Task t;
    t.type = TaskType::kCopy;
    t.lane = kCompute;
    t.duration_s = costs_->memory_s(2 * bytes);
    t.cpu_s = K.unit_hook_cpu_s;
    t.deps[0] = ag_task[static_cast<std::size_t>(u)];
    t.label = label([&] { return std::string(std::string(backward ? "bwd " : "fwd ") + "copy_out " + un.name + " mb" + std::to_string(mb)); });
    t.unit = u;
    t.micro_batch = mb;
    std::int32_t id = prog_.add(t);
    if (fsdp2 && !backward && prev_fwd_unit_ag_out >= 0 && ag_out_held[static_cast<std::size_t>(prev_fwd_unit_ag_out)]) {
      prog_.add_effect({MemCategory::kGathered, kPoolAg, -B(ag_bytes(prev_fwd_unit_ag_out))});
      ag_out_held[static_cast<std::size_t>(prev_fwd_unit_ag_out)] = 0;
    }
    prog_.add_effect({MemCategory::kGathered, kPoolDefault, B(bytes)});
    if (!(fsdp2 && !backward)) {  // backward (and DeepSpeed): the flat output is dropped right after copy-out
      prog_.add_effect({MemCategory::kGathered, kPoolAg, -B(bytes)});
      ag_out_held[static_cast<std::size_t>(u)] = 0;
    } else {
      prev_fwd_unit_ag_out = u;
    }
    copyout_task[static_cast<std::size_t>(u)] = id;
    return id;
  };
  auto free_unsharded = [&](int u) {
    Unit& un = units_[static_cast<std::size_t>(u)];
    if (!gathered[static_cast<std::size_t>(u)] || un.gathered_elems == 0) return;
    const std::uint8_t pool = fsdp1 ? kPoolAg : kPoolDefault;
    prog_.add_effect({MemCategory::kGathered, pool, -B(ag_bytes(u))});
    gathered[static_cast<std::size_t>(u)] = 0;
  };

  Bytes grads_allocated = 0;
  const Bytes grad_bytes_per_elem = bpp.grads;
  for (int mb = 0; mb < p.grad_accum; ++mb) {
    const bool last_mb = mb + 1 == p.grad_accum;
    ag_issue_order.clear();
    prev_fwd_unit_ag_out = -1;
    // ---- forward ----
    for (int u = 0; u < U; ++u) {
      Unit& un = units_[static_cast<std::size_t>(u)];
      const int ahead = std::max(p.prefetch, 1);
      if (gather) {
        for (int j = u; j < std::min(U, u + ahead); ++j) {
          if (gathered[static_cast<std::size_t>(j)] || units_[static_cast<std::size_t>(j)].gathered_elems == 0) continue;
          // Without prefetch the gather of unit j waits for the previous unit's compute.
          std::int32_t after = p.prefetch == 0 && j > 0 ? fwd_task[static_cast<std::size_t>(j - 1)]
                                : (fsdp2 && j > 0 ? copyout_task[static_cast<std::size_t>(j - 1)] : -1);
          issue_ag(j, mb, false, after);
        }
      }
      std::int32_t ready = gather ? copy_out(u, mb, false) : -1;
      if (un.gather_owner >= 0) ready = copyout_task[static_cast<std::size_t>(un.gather_owner)] >= 0
                                            ? copyout_task[static_cast<std::size_t>(un.gather_owner)]
                                            : ag_task[static_cast<std::size_t>(un.gather_owner)];
      Task t;
      t.type = TaskType::kCompute;
      t.lane = kCompute;
      t.duration_s = un.fwd_s;
      t.cpu_s = K.unit_hook_cpu_s + K.kernel_launch_s * 12.0 * static_cast<double>(un.layers.size());
      t.deps[0] = ready;
      t.label = label([&] { return std::string("fwd " + un.name + " mb" + std::to_string(mb)); });
      t.unit = u;
      t.micro_batch = mb;
      std::int32_t id = prog_.add(t);
      if (!gather && p.zero < 3 && !ds && mixed_cast && !fp32 && un.elems > 0) {
        // DDP with fp32 parameters under autocast: bf16 weight copies live until the unit's backward.
        prog_.add_effect({MemCategory::kGathered, kPoolDefault, B(static_cast<double>(un.elems) * 2)});
      }
      prog_.add_effect({MemCategory::kActivations, kPoolDefault, un.act_bytes});
      if (un.has_loss) {
        // Logits in the compute dtype; with an fp32 loss an fp32 copy and the fp32 log-softmax output (saved), with a
        // 16-bit loss the log-softmax output only; the logits (and the copy) die after the loss (§2.3).
        const double TV = static_cast<double>(p.mbs) * static_cast<double>(p.seq) *
                          static_cast<double>(model_->spec().vocab) / p.tp;
        const bool f32_loss = p.loss_dtype == Dtype::kFp32;
        const double lb = f32_loss ? 4.0 : bc;  // bytes per element of the loss input and its log-softmax
        if (f32_loss) prog_.add_effect({MemCategory::kActivations, kPoolDefault, B(2 * TV * bc / 2)});
        prog_.add_effect({MemCategory::kActivations, kPoolDefault, B(lb * TV)});
        if (p.hold_logits) {
          // The loop's `pred = model(...)` drops the previous micro-step's logits only now; this one's stays
          // referenced through backward (the step starts with one held: Simulator::run's initial state).
          if (f32_loss) prog_.add_effect({MemCategory::kActivations, kPoolDefault, -B(2 * TV * bc / 2)});
          prog_.add_effect({MemCategory::kActivations, kPoolDefault, -B(lb * TV)});
          prog_.add_effect({MemCategory::kActivations, kPoolDefault, B(lb * TV)});
        } else {
          prog_.add_effect({MemCategory::kActivations, kPoolDefault, B(lb * TV)});
          if (f32_loss) prog_.add_effect({MemCategory::kActivations, kPoolDefault, -B(2 * TV * bc / 2)});
          prog_.add_effect({MemCategory::kActivations, kPoolDefault, -B(lb * TV)});
        }
      }
      fwd_task[static_cast<std::size_t>(u)] = id;
      if (fsdp1 && gather) ag_issue_order.push_back(id);
      if (gather && un.reshard) free_unsharded(u);
      res_.comm[static_cast<int>(CommKind::kTpAllGather)].bytes_per_rank += busbw_factor(CollectiveKind::kAllGather, p.tp) * un.tp_ag_bytes;
      res_.comm[static_cast<int>(CommKind::kTpReduceScatter)].bytes_per_rank += busbw_factor(CollectiveKind::kReduceScatter, p.tp) * un.tp_rs_bytes;
      res_.comm[static_cast<int>(CommKind::kTpAllGather)].time_s += un.tp_fwd_s * (un.tp_ag_bytes / std::max(1.0, un.tp_ag_bytes + un.tp_rs_bytes));
      res_.comm[static_cast<int>(CommKind::kTpReduceScatter)].time_s += un.tp_fwd_s * (un.tp_rs_bytes / std::max(1.0, un.tp_ag_bytes + un.tp_rs_bytes));
    }
    if (fsdp2 && prev_fwd_unit_ag_out >= 0 && ag_out_held[static_cast<std::size_t>(prev_fwd_unit_ag_out)]) {
      // Root post-forward frees the last all-gather output.
      prog_.add_effect({MemCategory::kGathered, kPoolAg, -B(ag_bytes(prev_fwd_unit_ag_out))});
      ag_out_held[static_cast<std::size_t>(prev_fwd_unit_ag_out)] = 0;
    }
    // ---- backward ----
    ag_issue_order.clear();
    const bool sync = !(ds && p.zero == 1) || last_mb;  // DeepSpeed ZeRO-1 reduces only at the boundary
    if (ds && p.zero <= 2 && p.zero >= 1) {
      // IPG bucket(s) allocated at the start of every backward (contiguous_gradients; ZeRO-1/2).
      const double bucket = std::min(5e8, static_cast<double>(model_->parameters()) / p.tp) * 2;
      prog_.add_effect({MemCategory::kCommBuffers, kPoolDefault, B(bucket)});
    }
    for (int u = U - 1; u >= 0; --u) {
      Unit& un = units_[static_cast<std::size_t>(u)];
      std::int32_t ready = -1;
      if (gather) {
        if (!gathered[static_cast<std::size_t>(u)] && un.gathered_elems > 0) issue_ag(u, mb, true, -1);
        if (un.gathered_elems > 0 && (ag_out_held[static_cast<std::size_t>(u)] || fsdp1)) ready = copy_out(u, mb, true);
        else ready = copyout_task[static_cast<std::size_t>(u)];
        if (un.gather_owner >= 0) ready = -1;
        for (int j = u - 1; j >= std::max(0, u - p.prefetch); --j)
          if (!gathered[static_cast<std::size_t>(j)] && units_[static_cast<std::size_t>(j)].gathered_elems > 0)
            issue_ag(j, mb, true, ready);
      }
      Task t;
      t.type = TaskType::kCompute;
      t.lane = kCompute;
      t.duration_s = un.bwd_s + un.recompute_s;
      t.backward = true;
      t.cpu_s = K.unit_hook_cpu_s + K.kernel_launch_s * 24.0 * static_cast<double>(un.layers.size());
      t.deps[0] = ready;
      t.label = label([&] { return std::string("bwd " + un.name + " mb" + std::to_string(mb)); });
      t.unit = u;
      t.micro_batch = mb;
      std::int32_t id = prog_.add(t);
      const Bytes ugrad = B(static_cast<double>(un.elems) * bc);  // autograd's unsharded gradients
      prog_.add_effect({MemCategory::kActivations, kPoolDefault, un.recompute_bytes});
      prog_.add_effect({MemCategory::kOther, kPoolDefault, un.workspace_bytes});
      if (un.has_loss) {
        const double TV = static_cast<double>(p.mbs) * static_cast<double>(p.seq) *
                          static_cast<double>(model_->spec().vocab) / p.tp;
        // Eager cross-entropy backward: nll_loss backward writes a gradient of the log-softmax output, log_softmax
        // backward writes the gradient of the logits while both and the saved output are alive; with an fp32 loss
        // the gradient is then cast to the compute dtype for the head's backward.
        const bool f32_loss = p.loss_dtype == Dtype::kFp32;
        const double lb = f32_loss ? 4.0 : bc;
        prog_.add_effect({MemCategory::kActivations, kPoolDefault, B(lb * TV)});   // grad of log-softmax out
        prog_.add_effect({MemCategory::kActivations, kPoolDefault, B(lb * TV)});   // grad of the loss input
        prog_.add_effect({MemCategory::kActivations, kPoolDefault, -B(lb * TV)});  // grad of log-softmax out
        prog_.add_effect({MemCategory::kActivations, kPoolDefault, -B(lb * TV)});  // saved log-softmax out
        if (f32_loss) prog_.add_effect({MemCategory::kActivations, kPoolDefault, B(2 * TV * bc / 2)});  // cast
        prog_.add_effect({MemCategory::kActivations, kPoolDefault, -B(lb * TV)});
        if (f32_loss) prog_.add_effect({MemCategory::kActivations, kPoolDefault, -B(2 * TV * bc / 2)});
      }
      if (!grads_persistent) {
        if (p.zero >= 2 || !ds) prog_.add_effect({MemCategory::kGrads, kPoolDefault, ugrad});
        else if (mb == 0) {  // DeepSpeed ZeRO-1: full .grad created once, kept until the boundary
          prog_.add_effect({MemCategory::kGrads, kPoolDefault, ugrad});
          grads_allocated += ugrad;
        }
      }
      prog_.add_effect({MemCategory::kActivations, kPoolDefault, -(un.act_bytes + un.recompute_bytes)});
      prog_.add_effect({MemCategory::kOther, kPoolDefault, -un.workspace_bytes});
      if (!gather && p.zero < 3 && !ds && mixed_cast && !fp32 && un.elems > 0)
        prog_.add_effect({MemCategory::kGathered, kPoolDefault, -B(static_cast<double>(un.elems) * 2)});
      bwd_task[static_cast<std::size_t>(u)] = id;
      if (fsdp1 && gather) ag_issue_order.push_back(id);
      // Backward mirrors forward: the all-gathers' gradients are reduce-scattered and vice versa, in 16 bits.
      const double bwd_rs = un.tp_ag_mirror_bytes, bwd_ag = un.tp_rs_bytes;
      res_.comm[static_cast<int>(CommKind::kTpAllGather)].time_s +=
          un.tp_bwd_s * (bwd_ag / std::max(1.0, bwd_ag + bwd_rs));
      res_.comm[static_cast<int>(CommKind::kTpReduceScatter)].time_s +=
          un.tp_bwd_s * (bwd_rs / std::max(1.0, bwd_ag + bwd_rs));
      res_.comm[static_cast<int>(CommKind::kTpAllGather)].bytes_per_rank +=
          busbw_factor(CollectiveKind::kAllGather, p.tp) * bwd_ag;
      res_.comm[static_cast<int>(CommKind::kTpReduceScatter)].bytes_per_rank +=
          busbw_factor(CollectiveKind::kReduceScatter, p.tp) * bwd_rs;

      // Post-backward: reshard, then reduce gradients.
      if (gather && un.gather_owner < 0) free_unsharded(u);  // reshard after backward, resharded or not in forward
      if (un.elems == 0 && un.gather_owner < 0) continue;
      if (p.zero >= 2 || (ds && p.zero == 3)) {
        if (un.gather_owner >= 0) {
          // FSDP1 root head part: its gradients join the root's reduce-scatter at the end of backward.
          continue;
        }
        const double rs_elems = static_cast<double>(un.gather_owner < 0 && fsdp1 && u == 0 && units_.back().gather_owner == 0
                                                        ? un.gathered_elems
                                                        : std::max(un.gathered_elems, un.shard_elems * p.shard_group));
        const double rs_bytes = rs_elems * br;
        // RS input copy (FSDP2: default stream; waits the previous RS before dropping its input).
        Task c;
        c.type = TaskType::kCopy;
        c.lane = kCompute;
        c.duration_s = costs_->memory_s(rs_elems * (bc + br));
        c.backward = true;
        c.cpu_s = K.unit_hook_cpu_s;
        c.deps[0] = fsdp2 ? prev_rs : -1;
        c.cpu_wait_for = ds ? prev_prev_rs : -1;  // DeepSpeed: at most two reduce events pending
        c.label = label([&] { return std::string("bwd rs_copy_in " + un.name + " mb" + std::to_string(mb)); });
        c.unit = u;
        c.micro_batch = mb;
        std::int32_t cid = prog_.add(c);
        const std::uint8_t in_pool = fsdp2 ? kPoolDefault : kPoolRs;
        if (held_rs_input > 0) prog_.add_effect({MemCategory::kCommBuffers, kPoolDefault, -held_rs_input}), held_rs_input = 0;
        prog_.add_effect({MemCategory::kCommBuffers, in_pool, B(rs_bytes)});
        if (!grads_persistent) prog_.add_effect({MemCategory::kGrads, kPoolDefault, -ugrad});
        if (fsdp1 && u == 0 && units_.back().gather_owner == 0) {
          // The root's head part gradients, reduced together.
          prog_.add_effect({MemCategory::kGrads, kPoolDefault, -B(static_cast<double>(units_.back().elems) * bc)});
        }
        const std::int32_t rid = add_collective(
            CollectiveKind::kReduceScatter, CommKind::kReduceScatter, kShardLane, rs_bytes, shard_g, cid,
            busbw_factor(CollectiveKind::kReduceScatter, p.shard_group) * rs_bytes,
            [&] { return "reduce_scatter " + un.name + " mb" + std::to_string(mb); }, u, mb);
        const Bytes out_r = B(rs_elems / p.shard_group * br);
        const Bytes grad_shard = B(rs_elems / p.shard_group * grad_bytes_per_elem);
        prog_.add_effect({MemCategory::kCommBuffers, kPoolRs, out_r});
        if (fsdp2) {
          held_rs_input = B(rs_bytes);  // kept until the next unit's post-backward
        } else {
          prog_.add_effect({MemCategory::kCommBuffers, in_pool, -B(rs_bytes)});
        }
        if (!grads_persistent && mb == 0) prog_.add_effect({MemCategory::kGrads, kPoolRs, grad_shard}), grads_allocated += grad_shard;
        prog_.add_effect({MemCategory::kCommBuffers, kPoolRs, -out_r});
        prev_prev_rs = prev_rs;
        prev_rs = rid;
        last_shard_comm = rid;
        if (p.replicas > 1) {
          last_rep_comm = add_collective(
              CollectiveKind::kAllReduce, CommKind::kAllReduce, kReplicaLane, rs_elems / p.shard_group * br, rep_g, rid,
              busbw_factor(CollectiveKind::kAllReduce, p.replicas) * rs_elems / p.shard_group * br,
              [&] { return "hsdp all_reduce " + un.name + " mb" + std::to_string(mb); }, u, mb);
        }
      } else if (sync) {
        // All-reduce of the unit's gradients (DDP buckets; DeepSpeed ZeRO-1/2 bucket all-reduce).
        last_shard_comm = add_collective(
            CollectiveKind::kAllReduce, CommKind::kAllReduce, kShardLane, static_cast<double>(un.elems) * (ds ? bc : br), dp_g,
            id, busbw_factor(CollectiveKind::kAllReduce, p.dp) * static_cast<double>(un.elems) * (ds ? bc : br),
            [&] { return "all_reduce " + un.name + " mb" + std::to_string(mb); }, u, mb);
        if (!grads_persistent && p.zero >= 2) prog_.add_effect({MemCategory::kGrads, kPoolDefault, -ugrad});
      } else if (!grads_persistent && !ds) {
        prog_.add_effect({MemCategory::kGrads, kPoolDefault, -ugrad});
      }
    }
    if (held_rs_input > 0) {
      prog_.add_effect({MemCategory::kCommBuffers, kPoolDefault, -held_rs_input});
      held_rs_input = 0;
    }
    if (ds && p.zero <= 2 && p.zero >= 1) {
      const double bucket = std::min(5e8, static_cast<double>(model_->parameters()) / p.tp) * 2;
      prog_.add_effect({MemCategory::kCommBuffers, kPoolDefault, -B(bucket)});
    }
    // Parameters not resharded (FSDP2 head group, FSDP1 root, FSDP zero-2) were freed in post-backward above.
  }
  // ---- optimizer step ----
  std::array<Bytes, 3> ps = persistent_state(*model_, p);
  const double local_params = static_cast<double>(ps[2]) / std::max(1, bytes_per_param(p.runtime, p.precision).optimizer);
  Task o;
  o.type = TaskType::kOptimizer;
  o.lane = kCompute;
  o.duration_s = p.offload == Offload::kOptimizer
                     ? 0.0
                     : costs_->optimizer_s(local_params * optimizer_bytes_per_param(p.runtime, p.precision, p.fused_optimizer));
  o.cpu_s = K.kernel_launch_s * 20;
  o.deps = {last_shard_comm, last_rep_comm, -1};
  o.label = label([&] { return std::string("optimizer step"); });
  std::int32_t oid = prog_.add(o);
  res_.optimizer_s = o.duration_s;
  if (!p.fused_optimizer) {  // foreach AdamW: a parameter-sized sqrt temporary in the state dtype
    const Bytes tmp = B(local_params * 4);
    prog_.add_effect({MemCategory::kOptimizer, kPoolDefault, tmp});
    prog_.add_effect({MemCategory::kOptimizer, kPoolDefault, -tmp});
  }
  if (ds && p.zero < 3) {
    // DeepSpeed ZeRO-1/2: all-gather the updated 16-bit parameters after the step.
    const double bytes = static_cast<double>(model_->parameters()) / p.tp * 2;
    add_collective(CollectiveKind::kAllGather, CommKind::kAllGather, kShardLane, bytes, dp_g, oid,
                   busbw_factor(CollectiveKind::kAllGather, p.dp) * bytes,
                   [] { return std::string("param all_gather after step"); }, -1, -1);
  }
  if (grads_allocated > 0) {
    Task z;
    z.type = TaskType::kMarker;
    z.lane = kCompute;
    z.label = label([&] { return std::string("zero_grad"); });
    prog_.add(z);
    prog_.add_effect({MemCategory::kGrads, kPoolDefault, -grads_allocated});
  }
}

// "blocks.3, micro-batch 0 (compute)".
static std::string fmt_phase(const char* type, const Task& t, const std::string& unit) {
  return std::string(t.backward ? "backward " : "forward ") + unit + ", micro-batch " + std::to_string(t.micro_batch) +
         " (" + type + ")";
}

void Simulator::summarise(const Plan& p) {
  Result& r = res_;
  const auto& gpu = cluster_->spec().gpu;
  r.plan = p;
  r.peak_bytes = tl_.peak_bytes;
  r.first_step_peak_bytes =
      std::max(tl_.peak_before_optimizer_bytes - persistent_optimizer_bytes_, tl_.peak_from_optimizer_bytes);
  r.breakdown = tl_.at_peak;
  r.peak_time_s = tl_.peak_time_s;
  if (tl_.peak_task < 0) {
    r.peak_phase = "before the step";
  } else {
    const Task& t = prog_.tasks[static_cast<std::size_t>(tl_.peak_task)];
    static const char* kTypes[] = {"compute", "copy", "collective", "optimizer step", "marker"};
    r.peak_phase = t.unit >= 0 ? fmt_phase(kTypes[static_cast<int>(t.type)], t, units_[static_cast<std::size_t>(t.unit)].name)
                               : std::string(kTypes[static_cast<int>(t.type)]);
  }
  // Reserved: each stream's pool keeps its own peak (blocks are not shared across streams); the default stream's
  // pool also holds fragments of split blocks (ComputeConstants::fragmentation_*).
  Bytes reserved = 0;
  const auto& kc = costs_->constants();
  const double frag = p.compile ? kc.fragmentation_compiled : kc.fragmentation_eager;
  for (std::size_t i = 0; i < tl_.pool_peak_bytes.size(); ++i) {
    const Bytes b = tl_.pool_peak_bytes[i];
    reserved += i == kPoolDefault ? allocator_round(static_cast<Bytes>(static_cast<double>(b) * (1.0 + frag))) : b;
  }
  r.peak_reserved_bytes = std::max(reserved, r.peak_bytes);
  // Runtime overhead outside PyTorch's counters (mechanics §6): CUDA context, NCCL buffers per communicator.
  r.overhead.cuda_context_bytes = 512 * kMiB;
  int comms = (p.shard_group > 1 || p.dp > 1 ? 1 : 0) + (p.replicas > 1 ? 1 : 0) + (p.tp > 1 ? 1 : 0);
  r.overhead.nccl_bytes = comms * 384 * kMiB;
  r.capacity_bytes = gpu.memory_bytes;
  r.fits = r.peak_reserved_bytes + r.overhead.total() <= r.capacity_bytes;

  // Time.
  r.step_s = tl_.end_s;
  r.compute_s = tl_.lane_busy_s[kCompute];
  // Exposed communication: time in which some collective runs and the compute lane is idle.
  struct Iv { double a, b; int kind; };
  std::vector<Iv> comm_iv;
  std::vector<std::pair<double, double>> busy;
  for (std::size_t i = 0; i < prog_.tasks.size(); ++i) {
    const Task& t = prog_.tasks[i];
    const auto& tm = tl_.timing[i];
    if (t.lane == kCompute) {
      if (t.duration_s > 0) busy.push_back({tm.start_s, tm.end_s});
      continue;
    }
    const int kind = t.comm_kind == 0xff ? static_cast<int>(CommKind::kAllGather) : t.comm_kind;
    comm_iv.push_back({tm.start_s, tm.end_s, kind});
    r.comm[static_cast<std::size_t>(kind)].time_s += t.duration_s;
    r.comm[static_cast<std::size_t>(kind)].count++;
  }
  // Compute-lane busy intervals are disjoint and sorted (FIFO lane).
  auto idle_overlap = [&](double a, double b) {
    double covered = 0;
    auto it = std::lower_bound(busy.begin(), busy.end(), std::pair<double, double>{a, -1e300},
                               [](const auto& x, const auto& y) { return x.second < y.first; });
    for (; it != busy.end() && it->first < b; ++it) covered += std::max(0.0, std::min(b, it->second) - std::max(a, it->first));
    return (b - a) - covered;
  };
  for (const auto& iv : comm_iv) r.comm[static_cast<std::size_t>(iv.kind)].exposed_s += idle_overlap(iv.a, iv.b);
  // Union of collective intervals, minus compute.
  std::sort(comm_iv.begin(), comm_iv.end(), [](const Iv& x, const Iv& y) { return x.a < y.a; });
  double exposed = 0, ca = -1, cb = -1;
  for (const auto& iv : comm_iv) {
    if (iv.a > cb) {
      if (cb > ca) exposed += idle_overlap(ca, cb);
      ca = iv.a, cb = iv.b;
    } else {
      cb = std::max(cb, iv.b);
    }
  }
  if (cb > ca) exposed += idle_overlap(ca, cb);
  // TP collectives are folded into compute (not overlapped unless async): all exposed.
  for (CommKind k : {CommKind::kTpAllGather, CommKind::kTpReduceScatter}) {
    auto& c = r.comm[static_cast<int>(k)];
    c.exposed_s = p.async_tp ? costs_->constants().async_tp_exposed * c.time_s : c.time_s;
    exposed += c.exposed_s;
  }
  r.exposed_comm_s = exposed;
  const auto& s = model_->spec();
  const double tokens_per_gpu = static_cast<double>(p.mbs) * static_cast<double>(p.seq) * p.grad_accum / p.tp;
  r.tokens_per_s_per_gpu = r.step_s > 0 ? tokens_per_gpu / r.step_s : 0;
  // Model FLOPs per token as torchtitan counts them: 6 (N - N_embedding) + 12 L h s.
  r.model_flops_per_token = 6.0 * static_cast<double>(model_->parameters() - model_->embedding_parameters()) +
                            12.0 * s.layers * static_cast<double>(s.heads * s.head_dim) * static_cast<double>(p.seq);
  const double peak = p.precision == Precision::kFp32 ? gpu.peak_tf32_flops : gpu.peak_bf16_flops;
  r.mfu = r.tokens_per_s_per_gpu * r.model_flops_per_token / peak;
}

const Result& Simulator::run(const Plan& p, bool detail) {
  res_ = Result{};
  detail_ = detail;
  build_units(p);
  lower(p);
  auto ps = persistent_state(*model_, p);
  res_.persistent_split = ps;
  res_.persistent_bytes = ps[0] + ps[1] + ps[2];
  std::array<Bytes, kMemCategories> initial{};
  initial[static_cast<int>(MemCategory::kParams)] = ps[0];
  initial[static_cast<int>(MemCategory::kOptimizer)] = ps[2];
  persistent_optimizer_bytes_ = ps[2];
  const bool ds = p.runtime == Runtime::kDeepSpeed;
  if (p.zero == 0 || (ds && p.zero >= 2)) initial[static_cast<int>(MemCategory::kGrads)] = ps[1];
  if (ds && p.zero == 3) initial[static_cast<int>(MemCategory::kCommBuffers)] =
      static_cast<Bytes>(std::min(5e8, static_cast<double>(model_->parameters()) / p.tp)) * 2;  // IPG bucket at init
  // Plain data parallel (ZeRO-0 on the fsdp2 runtime = DDP / composable replicate): the Reducer's flat bucket
  // buffers hold a second copy of every gradient for the life of the model (gradient_as_bucket_view=False, the
  // default; the DDP docs: the view "saves memory equal to the total gradients size").
  if (p.runtime == Runtime::kFsdp2 && p.zero == 0) initial[static_cast<int>(MemCategory::kCommBuffers)] = ps[1];
  if (p.hold_logits)  // the previous micro-step's logits (the loss input), still referenced by the training loop
    initial[static_cast<int>(MemCategory::kActivations)] = static_cast<Bytes>(std::llround(
        (p.loss_dtype == Dtype::kFp32 ? 4.0 : (p.precision == Precision::kFp32 ? 4.0 : 2.0)) * static_cast<double>(p.mbs) * static_cast<double>(p.seq) * static_cast<double>(model_->spec().vocab) / p.tp));
  tl_.clear();
  tl_.record_samples = detail;
  run_engine(prog_, n_lanes_, kPools, initial, tl_);
  verify_timeline(prog_, tl_, initial, {});
  summarise(p);
  return res_;
}

Bytes Simulator::activation_bytes(const ModelGraph& model, const Plan& p) {
  const double T = static_cast<double>(p.mbs) * static_cast<double>(p.seq);
  const double bc = p.precision == Precision::kFp32 ? 4.0 : 2.0;
  const int t = p.tp;
  const double rep_div = t > 1 ? t : 1;
  double total = 0;
  for (const Layer* l : model.order()) {
    if (p.ac == AcMode::kFull && l->block >= 0) {
      if (l->kind == LayerKind::kNorm && l->name.find("attention_norm") != std::string::npos)
        total += T * 2.0 * static_cast<double>(model.spec().hidden) / rep_div * bc / 2;
      continue;
    }
    const bool sel = p.ac == AcMode::kSelective && l->block >= 0;
    const double split = sel ? l->act_selective_split_bytes_per_token : l->act_split_bytes_per_token;
    const double rep = sel ? l->act_selective_replicated_bytes_per_token : l->act_replicated_bytes_per_token;
    total += T * (split / t + rep / rep_div) * bc / 2;
  }
  // The saved log-softmax output of the loss (in the loss dtype, vocab-parallel under TP).
  total += T * (p.loss_dtype == Dtype::kFp32 ? 4.0 : bc) * static_cast<double>(model.spec().vocab) / t;
  return static_cast<Bytes>(total);
}

Result simulate(const ModelGraph& model, const Cluster& cluster, const CostModel& costs, const Plan& plan) {
  Simulator sim(model, cluster, costs);
  return sim.run(plan);
}

}  // namespace shardplan
