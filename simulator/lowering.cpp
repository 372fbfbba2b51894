// Lowering of a plan into tasks with memory effects. The order of tasks is the CPU issue order of the runtime:
// forward unit by unit (all-gathers issued ahead by the prefetch depth), backward in reverse (the next unit's
// all-gather before this unit's reduce-scatter, §3.2), then the optimizer step. Which buffers exist, where
// they live and what waits on what come from RuntimeTraits; nothing here branches on the runtime's name.
#include "simulator/lowering.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "simulator/constants.hpp"
#include "simulator/memory.hpp"

namespace shardplan {

namespace {

Bytes B(double x) { return static_cast<Bytes>(std::llround(x)); }

class Lowering {
 public:
  Lowering(const LoweringInputs& in, LoweringOutput& out)
      : in_(in),
        out_(out),
        p_(in.plan),
        rt_(in.traits),
        units_(in.units),
        K_(in.costs.constants()),
        U_(static_cast<int>(in.units.size())),
        bc_(p_.precision == Precision::kFp32 ? 4.0 : 2.0),
        br_(p_.reduce() == Dtype::kFp32 ? 4.0 : 2.0),
        mixed_cast_(p_.precision == Precision::kBf16Mixed || p_.precision == Precision::kFp32),
        shard_g_(in.cluster.group(p_.shard_group, p_.tp)),
        rep_g_(in.cluster.group(p_.replicas, p_.tp * p_.shard_group)),
        dp_g_(in.cluster.group(p_.dp, p_.tp)),
        ag_task_(static_cast<std::size_t>(U_), -1),
        copyout_task_(static_cast<std::size_t>(U_), -1),
        fwd_task_(static_cast<std::size_t>(U_), -1),
        gathered_(static_cast<std::size_t>(U_), 0),
        ag_out_held_(static_cast<std::size_t>(U_), 0),
        offload_(offload_split(p_)),
        pcie_Bps_(in.cluster.spec().node.pcie_Bps * K_.pcie_efficiency),
        // FSDP offloads the sharded fp32 (bf16-mixed) parameters; ZeRO-Infinity the 16-bit partitions.
        host_param_bytes_(bytes_per_param(p_.runtime, p_.precision).params),
        host_grad_bytes_(p_.runtime == Runtime::kDeepSpeed ? 4.0 : bytes_per_param(p_.runtime, p_.precision).grads) {}

  void run() {
    Program& prog = out_.program;
    prog.clear();
    prog.labels.clear();
    prog.labels.push_back("task");
    for (int mb = 0; mb < p_.grad_accum; ++mb) {
      forward(mb);
      backward(mb, mb + 1 == p_.grad_accum);
    }
    optimizer_step();
  }

 private:
  template <class F>
  std::uint32_t label(F&& make) {
    if (!in_.labels) return 0;
    out_.program.labels.push_back(make());
    return static_cast<std::uint32_t>(out_.program.labels.size() - 1);
  }
  void effect(MemCategory c, std::uint8_t pool, Bytes delta) { out_.program.add_effect({c, pool, delta}); }
  const SimUnit& unit(int u) const { return units_[static_cast<std::size_t>(u)]; }
  double ag_bytes(int u) const {
    const SimUnit& un = unit(u);
    return static_cast<double>(un.gathered_elems - un.fp8_gathered_elems) * bc_ +
           static_cast<double>(un.fp8_gathered_elems);
  }
  static std::string mb_suffix(int mb) { return " mb" + std::to_string(mb); }

  /// One collective on `lane` over group `g`, after `dep`; `sent_per_rank` is what the report counts as sent.
  template <class F>
  std::int32_t add_collective(CollectiveKind kind, CommKind report, std::uint8_t lane, double buffer_bytes,
                              const GroupView& g, std::int32_t dep, double sent_per_rank, F&& name, int u, int mb) {
    Task t;
    t.type = TaskType::kCollective;
    t.lane = lane;
    t.duration_s = in_.costs.collective_s(kind, buffer_bytes, g);
    t.cpu_s = K_.collective_launch_s;
    t.deps[0] = dep;
    t.comm_kind = static_cast<std::uint8_t>(report);
    t.label = label(name);
    t.unit = u;
    t.micro_batch = mb;
    out_.comm[static_cast<int>(report)].bytes_per_rank += sent_per_rank;
    return out_.program.add(t);
  }

  // ---- parameters: all-gather, copy-out, reshard ----
  /// A host<->device copy of CPU offload on the PCIe lane, after `dep`.
  std::int32_t pcie_copy(double bytes, std::int32_t dep, int u, int mb, bool backward, const char* what) {
    Task t;
    t.type = TaskType::kCopy;
    t.lane = kLanePcie;
    t.duration_s = bytes / pcie_Bps_;
    t.cpu_s = K_.kernel_launch_s;
    t.deps[0] = dep;
    t.backward = backward;
    t.comm_kind = static_cast<std::uint8_t>(CommKind::kOffloadCopy);
    t.unit = u;
    t.micro_batch = mb;
    t.label = label([&] { return std::string(what) + (u >= 0 ? " " + unit(u).name : std::string()) + mb_suffix(mb); });
    out_.comm[static_cast<int>(CommKind::kOffloadCopy)].bytes_per_rank += bytes;
    const std::int32_t id = out_.program.add(t);
    last_pcie_ = id;
    return id;
  }

  void issue_ag(int u, int mb, bool backward, std::int32_t after) {
    const SimUnit& un = unit(u);
    if (un.gathered_elems == 0) return;
    if (offload_.params) {
      // Offloaded parameters: the shard is copied host -> device before its all-gather (FSDP2 all_gather_inputs,
      // FSDP1 pre_unshard, DeepSpeed ZeRO-Infinity fetch), into a shard-sized staging tensor.
      const double shard_bytes = static_cast<double>(un.shard_elems) * host_param_bytes_;
      after = pcie_copy(shard_bytes, after, u, mb, backward, "h2d params");
    }
    Task t;
    t.type = TaskType::kCollective;
    t.lane = kLaneShard;
    const double bytes = ag_bytes(u);
    t.backward = backward;
    // Mixed precision: the fp32 shard is cast to the compute dtype before the gather (read 4, write bc).
    t.duration_s = in_.costs.collective_s(CollectiveKind::kAllGather, bytes, shard_g_) +
                   (mixed_cast_ ? in_.costs.memory_s(static_cast<double>(un.shard_elems) * (4 + bc_)) : 0);
    t.cpu_s = K_.collective_launch_s;
    t.deps[0] = after;
    // The gather limiters: the CPU blocks on the entry two back in the limiter's queue (§3.3, §3.4).
    if (rt_.gather_limiter != GatherLimiter::kNone && limiter_queue_.size() >= 2)
      t.cpu_wait_for = limiter_queue_[limiter_queue_.size() - 2];
    t.comm_kind = static_cast<std::uint8_t>(CommKind::kAllGather);
    t.label = label([&] { return std::string(backward ? "bwd " : "fwd ") + "all_gather " + un.name + mb_suffix(mb); });
    t.unit = u;
    t.micro_batch = mb;
    const std::int32_t id = out_.program.add(t);
    const Bytes cast_buffer = B(static_cast<double>(un.shard_elems) * bc_);
    if (rt_.cast_buffer_on_ag_stream) effect(MemCategory::kCommBuffers, kPoolAllGather, cast_buffer);
    effect(MemCategory::kGathered, kPoolAllGather, B(bytes));
    if (rt_.cast_buffer_on_ag_stream) effect(MemCategory::kCommBuffers, kPoolAllGather, -cast_buffer);
    ag_task_[static_cast<std::size_t>(u)] = id;
    gathered_[static_cast<std::size_t>(u)] = 1;
    ag_out_held_[static_cast<std::size_t>(u)] = 1;
    last_shard_comm_ = id;
    // DeepSpeed's queue holds the fetches themselves; FSDP1's the computes (pushed by forward/backward).
    if (rt_.gather_limiter == GatherLimiter::kFetchTwoBack) limiter_queue_.push_back(id);
    out_.comm[static_cast<int>(CommKind::kAllGather)].bytes_per_rank +=
        busbw_factor(CollectiveKind::kAllGather, p_.shard_group) * bytes;
  }

  void release_held_ag_output(int u) {
    if (u < 0 || !ag_out_held_[static_cast<std::size_t>(u)]) return;
    effect(MemCategory::kGathered, kPoolAllGather, -B(ag_bytes(u)));
    ag_out_held_[static_cast<std::size_t>(u)] = 0;
  }

  /// Copy-out (FSDP2: split_with_sizes_copy into per-parameter tensors; DeepSpeed: cat of coalesced pieces).
  std::int32_t copy_out(int u, int mb, bool backward) {
    const SimUnit& un = unit(u);
    if (un.gathered_elems == 0 || !rt_.copy_out) return ag_task_[static_cast<std::size_t>(u)];
    const double bytes = ag_bytes(u);
    Task t;
    t.type = TaskType::kCopy;
    t.lane = kLaneCompute;
    t.duration_s = in_.costs.memory_s(2 * bytes);
    t.cpu_s = K_.unit_hook_cpu_s;
    t.deps[0] = ag_task_[static_cast<std::size_t>(u)];
    t.label = label([&] { return std::string(backward ? "bwd " : "fwd ") + "copy_out " + un.name + mb_suffix(mb); });
    t.unit = u;
    t.micro_batch = mb;
    const std::int32_t id = out_.program.add(t);
    const bool hold = rt_.hold_forward_ag_output && !backward;
    if (hold) release_held_ag_output(prev_fwd_ag_out_);  // the previous unit's output, kept until now
    effect(MemCategory::kGathered, kPoolDefault, B(bytes));
    if (hold) {
      prev_fwd_ag_out_ = u;
    } else {  // backward (and DeepSpeed): the flat output is dropped right after copy-out
      effect(MemCategory::kGathered, kPoolAllGather, -B(bytes));
      ag_out_held_[static_cast<std::size_t>(u)] = 0;
    }
    copyout_task_[static_cast<std::size_t>(u)] = id;
    return id;
  }

  void free_unsharded(int u) {
    if (!gathered_[static_cast<std::size_t>(u)] || unit(u).gathered_elems == 0) return;
    effect(MemCategory::kGathered, rt_.unsharded_pool, -B(ag_bytes(u)));
    gathered_[static_cast<std::size_t>(u)] = 0;
  }

  // ---- logits and loss (docs/mechanics.md §2.3) ----
  double logits_elems() const {
    return static_cast<double>(p_.mbs) * static_cast<double>(p_.seq) * static_cast<double>(in_.model.spec().vocab) /
           p_.tp;
  }
  void loss_forward_effects() {
    // Logits in the compute dtype; with an fp32 loss an fp32 copy and the fp32 log-softmax output (saved), with a
    // 16-bit loss the log-softmax output only; the logits (and the copy) die after the loss.
    const double TV = logits_elems();
    const bool f32_loss = p_.loss_dtype == Dtype::kFp32;
    const double lb = f32_loss ? 4.0 : bc_;  // bytes per element of the loss input and its log-softmax
    const Bytes logits = B(TV * bc_), loss_in = B(lb * TV);
    if (f32_loss) effect(MemCategory::kActivations, kPoolDefault, logits);
    effect(MemCategory::kActivations, kPoolDefault, loss_in);
    if (p_.hold_logits) {
      // The loop's `pred = model(...)` drops the previous micro-step's logits only now; this one's stays
      // referenced through backward (the step starts with one held: initial_allocation).
      if (f32_loss) effect(MemCategory::kActivations, kPoolDefault, -logits);
      effect(MemCategory::kActivations, kPoolDefault, -loss_in);
      effect(MemCategory::kActivations, kPoolDefault, loss_in);
    } else {
      effect(MemCategory::kActivations, kPoolDefault, loss_in);
      if (f32_loss) effect(MemCategory::kActivations, kPoolDefault, -logits);
      effect(MemCategory::kActivations, kPoolDefault, -loss_in);
    }
  }
  void loss_backward_effects() {
    // Eager cross-entropy backward: nll_loss backward writes a gradient of the log-softmax output, log_softmax
    // backward writes the gradient of the logits while both and the saved output are alive; with an fp32 loss
    // the gradient is then cast to the compute dtype for the head's backward.
    const double TV = logits_elems();
    const bool f32_loss = p_.loss_dtype == Dtype::kFp32;
    const Bytes g = B((f32_loss ? 4.0 : bc_) * TV), cast = B(TV * bc_);
    effect(MemCategory::kActivations, kPoolDefault, g);   // grad of log-softmax out
    effect(MemCategory::kActivations, kPoolDefault, g);   // grad of the loss input
    effect(MemCategory::kActivations, kPoolDefault, -g);  // grad of log-softmax out
    effect(MemCategory::kActivations, kPoolDefault, -g);  // saved log-softmax out
    if (f32_loss) effect(MemCategory::kActivations, kPoolDefault, cast);
    effect(MemCategory::kActivations, kPoolDefault, -g);
    if (f32_loss) effect(MemCategory::kActivations, kPoolDefault, -cast);
  }

  // ---- tensor parallelism (sequence parallel): the unit's TP collectives on the TP communicator ----
  /// Adds the TP collectives of one pass of unit `u` before its compute task and returns the task the compute
  /// must wait for (-1 if none). The GEMMs need the all-gathered input, so the blocking share runs while the
  /// compute stream waits (exposed); async TP hides the rest behind the GEMMs (a task that runs alongside the
  /// compute). `ag_s` / `rs_s` are one pass's all-gather and reduce-scatter time; `n_ag` / `n_rs` how many
  /// collectives they are; `ag_bytes` / `rs_bytes` their buffer bytes.
  std::int32_t tp_collectives(int u, int mb, bool backward, double ag_s, double rs_s, int n_ag, int n_rs,
                              double ag_bytes, double rs_bytes) {
    if (ag_s + rs_s <= 0) return -1;
    const double exposed_share = p_.async_tp ? K_.async_tp_exposed : 1.0;
    auto& ag = out_.comm[static_cast<int>(CommKind::kTpAllGather)];
    auto& rs = out_.comm[static_cast<int>(CommKind::kTpReduceScatter)];
    ag.bytes_per_rank += busbw_factor(CollectiveKind::kAllGather, p_.tp) * ag_bytes;
    rs.bytes_per_rank += busbw_factor(CollectiveKind::kReduceScatter, p_.tp) * rs_bytes;
    const SimUnit& un = unit(u);
    std::int32_t last = -1;
    auto add = [&](CommKind kind, double s, int n, std::int32_t dep, const char* what) {
      if (s <= 0) return;
      Task t;
      t.type = TaskType::kCollective;
      t.lane = kLaneTp;
      t.duration_s = s;
      t.deps[0] = dep;
      t.backward = backward;
      t.comm_kind = static_cast<std::uint8_t>(kind);
      t.collectives = static_cast<std::uint16_t>(std::min(n, 65535));
      t.unit = u;
      t.micro_batch = mb;
      t.label = label([&] { return std::string(backward ? "bwd " : "fwd ") + what + " " + un.name + mb_suffix(mb); });
      last = out_.program.add(t);
    };
    // Blocking share: after the previous compute-stream task, before this unit's compute.
    add(CommKind::kTpAllGather, exposed_share * ag_s, n_ag, last_compute_, "tp all_gather");
    add(CommKind::kTpReduceScatter, exposed_share * rs_s, n_rs, last < 0 ? last_compute_ : -1, "tp reduce_scatter");
    const std::int32_t gate = last;
    // Async TP: the hidden share runs on the TP communicator alongside the compute (count 0: same collectives).
    if (p_.async_tp) {
      add(CommKind::kTpAllGather, (1 - exposed_share) * ag_s, 0, gate, "tp all_gather (overlapped)");
      add(CommKind::kTpReduceScatter, (1 - exposed_share) * rs_s, 0, gate, "tp reduce_scatter (overlapped)");
    }
    return gate;
  }

  // ---- forward ----
  void forward(int mb) {
    limiter_queue_.clear();
    prev_fwd_ag_out_ = -1;
    for (int u = 0; u < U_; ++u) {
      const SimUnit& un = unit(u);
      if (rt_.gathers_params) {
        const int ahead = std::max(p_.prefetch, 1);
        for (int j = u; j < std::min(U_, u + ahead); ++j) {
          if (gathered_[static_cast<std::size_t>(j)] || unit(j).gathered_elems == 0) continue;
          // Without prefetch the gather of unit j waits for the previous unit's compute.
          const std::int32_t after = p_.prefetch == 0 && j > 0 ? fwd_task_[static_cast<std::size_t>(j - 1)]
                                     : rt_.ag_after_prev_copy_out && j > 0
                                         ? copyout_task_[static_cast<std::size_t>(j - 1)]
                                         : -1;
          issue_ag(j, mb, false, after);
        }
      }
      std::int32_t ready = rt_.gathers_params ? copy_out(u, mb, false) : -1;
      if (un.gather_owner >= 0) {
        const auto o = static_cast<std::size_t>(un.gather_owner);
        ready = copyout_task_[o] >= 0 ? copyout_task_[o] : ag_task_[o];
      }
      // Per forward: the all-gathers before attention and MLP, the reduce-scatters after them.
      const int n_ag = un.tp_ag_bytes > 0 ? (un.blocks > 0 ? 2 * un.blocks : 1) : 0;
      const int n_rs = un.tp_rs_bytes > 0 ? (un.blocks > 0 ? 2 * un.blocks : 1) : 0;
      const std::int32_t tp = tp_collectives(u, mb, false, un.tp_fwd_ag_s, un.tp_fwd_s - un.tp_fwd_ag_s, n_ag, n_rs,
                                             un.tp_ag_bytes, un.tp_rs_bytes);
      Task t;
      t.type = TaskType::kCompute;
      t.lane = kLaneCompute;
      t.duration_s = un.fwd_s;
      t.cpu_s = K_.unit_hook_cpu_s + K_.kernel_launch_s * fw::kForwardLaunchesPerLayer * static_cast<double>(un.layers.size());
      t.deps = {ready, tp, -1};
      t.label = label([&] { return "fwd " + un.name + mb_suffix(mb); });
      t.unit = u;
      t.micro_batch = mb;
      const std::int32_t id = out_.program.add(t);
      last_compute_ = id;
      // DDP with fp32 parameters under autocast: bf16 weight copies live until the unit's backward.
      if (rt_.autocast_weight_copies && un.elems > 0)
        effect(MemCategory::kGathered, kPoolDefault, B(static_cast<double>(un.elems) * 2));
      effect(MemCategory::kActivations, kPoolDefault, un.act_bytes);
      if (un.has_loss) loss_forward_effects();
      fwd_task_[static_cast<std::size_t>(u)] = id;
      if (rt_.gather_limiter == GatherLimiter::kComputeTwoBack && rt_.gathers_params) limiter_queue_.push_back(id);
      if (rt_.gathers_params && un.reshard) free_unsharded(u);
    }
    if (rt_.hold_forward_ag_output) release_held_ag_output(prev_fwd_ag_out_);  // root post-forward
  }

  // ---- backward ----
  void backward(int mb, bool last_mb) {
    limiter_queue_.clear();
    const bool sync = !rt_.reduce_only_at_boundary || last_mb;
    const Bytes ipg_bucket = B(std::min(fw::kDeepSpeedReduceBucketElems,
                                        static_cast<double>(in_.model.parameters()) / p_.tp) * 2);
    // IPG bucket allocated at the start of every backward (contiguous_gradients; DeepSpeed ZeRO-1/2).
    if (rt_.ipg_bucket_per_backward) effect(MemCategory::kCommBuffers, kPoolDefault, ipg_bucket);
    const double grad_bytes_per_elem = bytes_per_param(p_.runtime, p_.precision).grads;
    for (int u = U_ - 1; u >= 0; --u) {
      const SimUnit& un = unit(u);
      std::int32_t ready = -1;
      if (rt_.gathers_params) {
        if (!gathered_[static_cast<std::size_t>(u)] && un.gathered_elems > 0) issue_ag(u, mb, true, -1);
        if (un.gathered_elems > 0 && (ag_out_held_[static_cast<std::size_t>(u)] || !rt_.copy_out))
          ready = copy_out(u, mb, true);
        else
          ready = copyout_task_[static_cast<std::size_t>(u)];
        if (un.gather_owner >= 0) ready = -1;
        for (int j = u - 1; j >= std::max(0, u - p_.prefetch); --j)
          if (!gathered_[static_cast<std::size_t>(j)] && unit(j).gathered_elems > 0) issue_ag(j, mb, true, ready);
      }
      // Backward mirrors forward (each all-gather's gradient is reduce-scattered and vice versa, in 16 bits);
      // full AC re-runs the forward's collectives when it recomputes a block.
      const bool recompute_tp = p_.ac == AcMode::kFull && un.blocks > 0;
      const int n_fwd_ag = un.tp_ag_bytes > 0 ? (un.blocks > 0 ? 2 * un.blocks : 1) : 0;
      const int n_fwd_rs = un.tp_rs_bytes > 0 ? (un.blocks > 0 ? 2 * un.blocks : 1) : 0;
      const std::int32_t tp = tp_collectives(
          u, mb, true, un.tp_bwd_ag_s + (recompute_tp ? un.tp_fwd_ag_s : 0.0),
          (un.tp_bwd_s - un.tp_bwd_ag_s) + (recompute_tp ? un.tp_fwd_s - un.tp_fwd_ag_s : 0.0),
          n_fwd_rs + (recompute_tp ? n_fwd_ag : 0), n_fwd_ag + (recompute_tp ? n_fwd_rs : 0),
          un.tp_rs_bytes + (recompute_tp ? un.tp_ag_bytes : 0.0),
          un.tp_ag_mirror_bytes + (recompute_tp ? un.tp_rs_bytes : 0.0));
      Task t;
      t.type = TaskType::kCompute;
      t.lane = kLaneCompute;
      t.duration_s = un.bwd_s + un.recompute_s;
      t.backward = true;
      t.cpu_s = K_.unit_hook_cpu_s + K_.kernel_launch_s * fw::kBackwardLaunchesPerLayer * static_cast<double>(un.layers.size());
      t.deps = {ready, tp, -1};
      t.label = label([&] { return "bwd " + un.name + mb_suffix(mb); });
      t.unit = u;
      t.micro_batch = mb;
      const std::int32_t id = out_.program.add(t);
      last_compute_ = id;
      const Bytes ugrad = B(static_cast<double>(un.elems) * bc_);  // autograd's unsharded gradients
      effect(MemCategory::kActivations, kPoolDefault, un.recompute_bytes);
      effect(MemCategory::kOther, kPoolDefault, un.workspace_bytes);
      if (un.has_loss) loss_backward_effects();
      if (!rt_.grads_persistent) {
        if (!rt_.grad_kept_until_boundary) {
          effect(MemCategory::kGrads, kPoolDefault, ugrad);
        } else if (mb == 0) {  // DeepSpeed ZeRO-1: full .grad created once, kept until the boundary
          effect(MemCategory::kGrads, kPoolDefault, ugrad);
          grads_allocated_ += ugrad;
        }
      }
      effect(MemCategory::kActivations, kPoolDefault, -(un.act_bytes + un.recompute_bytes));
      effect(MemCategory::kOther, kPoolDefault, -un.workspace_bytes);
      if (rt_.autocast_weight_copies && un.elems > 0)
        effect(MemCategory::kGathered, kPoolDefault, -B(static_cast<double>(un.elems) * 2));
      if (rt_.gather_limiter == GatherLimiter::kComputeTwoBack && rt_.gathers_params) limiter_queue_.push_back(id);

      // Post-backward: reshard (whether or not resharded in forward), then reduce gradients.
      if (rt_.gathers_params && un.gather_owner < 0) free_unsharded(u);
      if (un.elems == 0 && un.gather_owner < 0) continue;
      if (rt_.reduce_scatter) {
        if (un.gather_owner >= 0) continue;  // FSDP1 root head part: reduced with the root at the end
        reduce_scatter(u, mb, ugrad, grad_bytes_per_elem);
      } else if (sync) {
        // All-reduce of the unit's gradients (DDP buckets; DeepSpeed ZeRO-1/2 bucket all-reduce).
        const double bytes = static_cast<double>(un.elems) * (rt_.allreduce_in_compute_dtype ? bc_ : br_);
        last_shard_comm_ = add_collective(
            CollectiveKind::kAllReduce, CommKind::kAllReduce, kLaneShard, bytes, dp_g_, id,
            busbw_factor(CollectiveKind::kAllReduce, p_.dp) * bytes,
            [&] { return "all_reduce " + un.name + mb_suffix(mb); }, u, mb);
        // DeepSpeed ZeRO-1 offload: this rank's partition of the reduced bucket goes to the host.
        if (offload_.grads)
          pcie_copy(static_cast<double>(un.elems) / p_.dp * host_grad_bytes_, last_shard_comm_, u, mb, true, "d2h grads");
      }
    }
    if (held_rs_input_ > 0) {
      effect(MemCategory::kCommBuffers, kPoolDefault, -held_rs_input_);
      held_rs_input_ = 0;
    }
    if (rt_.ipg_bucket_per_backward) effect(MemCategory::kCommBuffers, kPoolDefault, -ipg_bucket);
  }

  void reduce_scatter(int u, int mb, Bytes ugrad, double grad_bytes_per_elem) {
    const SimUnit& un = unit(u);
    const double rs_elems = static_cast<double>(
        un.owns_merged_root ? un.gathered_elems : std::max(un.gathered_elems, un.shard_elems * p_.shard_group));
    const double rs_bytes = rs_elems * br_;
    // RS input copy (FSDP2: default stream; waits the previous RS before dropping its input).
    Task c;
    c.type = TaskType::kCopy;
    c.lane = kLaneCompute;
    c.duration_s = in_.costs.memory_s(rs_elems * (bc_ + br_));
    c.backward = true;
    c.cpu_s = K_.unit_hook_cpu_s;
    c.deps[0] = rt_.rs_waits_prev_rs ? prev_rs_ : -1;
    c.cpu_wait_for = rt_.rs_cpu_limiter ? prev_prev_rs_ : -1;  // at most two reduce events pending
    c.label = label([&] { return "bwd rs_copy_in " + un.name + mb_suffix(mb); });
    c.unit = u;
    c.micro_batch = mb;
    const std::int32_t cid = out_.program.add(c);
    if (held_rs_input_ > 0) effect(MemCategory::kCommBuffers, kPoolDefault, -held_rs_input_), held_rs_input_ = 0;
    effect(MemCategory::kCommBuffers, rt_.rs_input_pool, B(rs_bytes));
    if (!rt_.grads_persistent) effect(MemCategory::kGrads, kPoolDefault, -ugrad);
    if (un.owns_merged_root)  // the root's head part gradients, reduced together
      effect(MemCategory::kGrads, kPoolDefault, -B(static_cast<double>(units_.back().elems) * bc_));
    const std::int32_t rid = add_collective(
        CollectiveKind::kReduceScatter, CommKind::kReduceScatter, kLaneShard, rs_bytes, shard_g_, cid,
        busbw_factor(CollectiveKind::kReduceScatter, p_.shard_group) * rs_bytes,
        [&] { return "reduce_scatter " + un.name + mb_suffix(mb); }, u, mb);
    const Bytes out_r = B(rs_elems / p_.shard_group * br_);
    const Bytes grad_shard = B(rs_elems / p_.shard_group * grad_bytes_per_elem);
    effect(MemCategory::kCommBuffers, kPoolReduceScatter, out_r);
    if (rt_.rs_input_held)
      held_rs_input_ = B(rs_bytes);  // kept until the next unit's post-backward
    else
      effect(MemCategory::kCommBuffers, rt_.rs_input_pool, -B(rs_bytes));
    if (!rt_.grads_persistent && mb == 0) {
      effect(MemCategory::kGrads, kPoolReduceScatter, grad_shard);
      grads_allocated_ += grad_shard;
    }
    effect(MemCategory::kCommBuffers, kPoolReduceScatter, -out_r);
    prev_prev_rs_ = prev_rs_;
    prev_rs_ = rid;
    last_shard_comm_ = rid;
    std::int32_t reduced = rid;
    if (p_.replicas > 1) {
      const double bytes = rs_elems / p_.shard_group * br_;
      last_rep_comm_ = reduced = add_collective(
          CollectiveKind::kAllReduce, CommKind::kAllReduce, kLaneReplica, bytes, rep_g_, rid,
          busbw_factor(CollectiveKind::kAllReduce, p_.replicas) * bytes,
          [&] { return "hsdp all_reduce " + un.name + mb_suffix(mb); }, u, mb);
    }
    // Offloaded gradients: the reduced shard goes device -> host (FSDP post-backward D2H, DeepSpeed
    // async copy into the fp32 CPU partition).
    if (offload_.grads) pcie_copy(rs_elems / p_.shard_group * host_grad_bytes_, reduced, u, mb, true, "d2h grads");
  }

  // ---- optimizer step ----
  void optimizer_step() {
    const double local_params = static_cast<double>(state_elems(in_.model, p_).optimizer);
    Task o;
    o.type = TaskType::kOptimizer;
    o.cpu_s = K_.kernel_launch_s * fw::kOptimizerLaunches;
    o.deps = {last_shard_comm_, last_rep_comm_, offload_.grads ? last_pcie_ : -1};
    if (offload_.optimizer) {
      // The optimizer runs on the host CPUs, which the GPUs of a host share (DeepSpeed CPUAdam; FSDP's optimizer
      // on CPU tensors is torch's AdamW, several times slower per byte: ComputeConstants).
      const auto& node = in_.cluster.spec().node;
      const double host_Bps = (node.host_memory_Bps > 0 ? node.host_memory_Bps : fw::kDefaultHostMemoryBps) /
                              std::max(1, node.host_gpus) * K_.host_optimizer_efficiency /
                              (p_.runtime == Runtime::kDeepSpeed ? 1.0 : K_.torch_cpu_adam_slowdown);
      o.lane = kLaneHost;
      o.duration_s = local_params * kHostAdamBytesPerParam / host_Bps;
    } else {
      o.lane = kLaneCompute;
      o.duration_s =
          in_.costs.optimizer_s(local_params * optimizer_bytes_per_param(p_.runtime, p_.precision, p_.fused_optimizer));
    }
    o.label = label([] { return std::string("optimizer step"); });
    std::int32_t oid = out_.program.add(o);
    out_.optimizer_s = o.duration_s;
    // DeepSpeed offload: the updated 16-bit parameters of this rank's partition go back host -> device (FSDP's
    // offloaded parameters stay on the host until the next all-gather copies them in).
    if (offload_.optimizer && !offload_.params && p_.runtime == Runtime::kDeepSpeed)
      oid = pcie_copy(local_params * bc_, oid, -1, -1, false, "h2d updated params");
    if (!p_.fused_optimizer) {  // foreach AdamW: a parameter-sized sqrt temporary in the state dtype
      const Bytes tmp = B(local_params * 4);
      effect(MemCategory::kOptimizer, kPoolDefault, tmp);
      effect(MemCategory::kOptimizer, kPoolDefault, -tmp);
    }
    if (rt_.param_all_gather_after_step) {
      // DeepSpeed ZeRO-1/2: all-gather the updated 16-bit parameters after the step.
      const double bytes = static_cast<double>(in_.model.parameters()) / p_.tp * 2;
      add_collective(CollectiveKind::kAllGather, CommKind::kAllGather, kLaneShard, bytes, dp_g_, oid,
                     busbw_factor(CollectiveKind::kAllGather, p_.dp) * bytes,
                     [] { return std::string("param all_gather after step"); }, -1, -1);
    }
    if (grads_allocated_ > 0) {
      Task z;
      z.type = TaskType::kMarker;
      z.lane = kLaneCompute;
      z.label = label([] { return std::string("zero_grad"); });
      out_.program.add(z);
      effect(MemCategory::kGrads, kPoolDefault, -grads_allocated_);
    }
  }

  const LoweringInputs& in_;
  LoweringOutput& out_;
  const Plan& p_;
  const RuntimeTraits& rt_;
  const std::vector<SimUnit>& units_;
  const ComputeConstants& K_;
  const int U_;
  const double bc_, br_;
  const bool mixed_cast_;
  const GroupView shard_g_, rep_g_, dp_g_;
  std::vector<std::int32_t> ag_task_, copyout_task_, fwd_task_;
  std::vector<char> gathered_, ag_out_held_;
  std::vector<std::int32_t> limiter_queue_;  ///< what the gather limiter waits on, in issue order
  std::int32_t last_shard_comm_ = -1, last_rep_comm_ = -1, prev_rs_ = -1, prev_prev_rs_ = -1;
  Bytes held_rs_input_ = 0;
  int prev_fwd_ag_out_ = -1;  ///< FSDP2 forward: AG output kept until the next unit's copy-out
  Bytes grads_allocated_ = 0;
  std::int32_t last_compute_ = -1;  ///< the last compute task (what the next TP all-gather needs)
  std::int32_t last_pcie_ = -1;     ///< the last offload copy
  const OffloadSplit offload_;
  const double pcie_Bps_;           ///< achievable host<->device bandwidth per GPU
  const double host_param_bytes_;   ///< bytes per element of an offloaded parameter shard
  const double host_grad_bytes_;    ///< bytes per element of an offloaded gradient shard
};

}  // namespace

void lower(const LoweringInputs& in, LoweringOutput& out) { Lowering(in, out).run(); }

}  // namespace shardplan
