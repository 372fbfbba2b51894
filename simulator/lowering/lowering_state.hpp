// The lowering's working state (internal to simulator/lowering*.cpp): one Lowering per plan walks the step in
// CPU issue order and appends tasks and memory effects to the Program. lowering.cpp holds the step's order
// (forward, optimizer, the loss's tensors); lowering_backward.cpp the backward; lowering_comm.cpp the
// parameter gathers, gradient reductions, tensor- parallel collectives and offload copies;
// lowering_tensors.cpp what each allocation is made of.
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "simulator/cost/cost.hpp"
#include "simulator/lowering/lowering.hpp"
#include "simulator/lowering/tensor_groups.hpp"
#include "simulator/memory/memory.hpp"

namespace shardplan::detail {

inline Bytes B(double x) {
  return static_cast<Bytes>(std::llround(x));
}

class Lowering {
 public:
  Lowering(const LoweringInputs& in, LoweringOutput& out, TensorGroups& groups)
      : in_(in),
        out_(out),
        groups_(groups),
        p_(in.plan),
        rt_(in.traits),
        units_(in.units),
        K_(in.costs.constants()),
        U_(static_cast<int>(in.units.size())),
        bc_(p_.compute_bytes()),
        br_(p_.reduce() == Dtype::kFp32 ? 4.0 : 2.0),
        mixed_cast_(p_.mixed() || p_.precision == Precision::kFp32),
        // Mesh [dp_replicate, dp_shard, cp, tp], tp innermost: FSDP shards over dp_shard x cp (stride tp),
        // replicas are tp x dp_shard x cp apart; the expert FSDP group (efsdp) is the ranks ep x tp apart.
        shard_g_(in.cluster.group(p_.fsdp_ranks(), p_.tp)),
        rep_g_(in.cluster.group(p_.replicas, p_.tp * p_.fsdp_ranks())),
        dp_g_(in.cluster.group(p_.dp_cp(), p_.tp)),
        efsdp_g_(in.cluster.group(p_.efsdp_ranks(), p_.tp * p_.ep)),
        // ZeRO++ hpZ: consecutive ranks of the world (deepspeed utils/groups.py); qgZ: a node's GPUs, and
        // the same local rank of every node (coalesced_collectives.py all_to_all_quant_reduce).
        hpz_g_(in.cluster.group(p_.hpz_partition, p_.tp)),
        local_g_(in.cluster.group(std::min(in.cluster.gpus(), in.cluster.spec().node.gpus), 1)),
        nodes_g_(in.cluster.group(in.cluster.nodes(), in.cluster.spec().node.gpus)),
        ag_task_(static_cast<std::size_t>(U_), -1),
        copyout_task_(static_cast<std::size_t>(U_), -1),
        fwd_task_(static_cast<std::size_t>(U_), -1),
        gathered_(static_cast<std::size_t>(U_), 0),
        ag_out_held_(static_cast<std::size_t>(U_), 0),
        ag_id_(static_cast<std::size_t>(U_), -1),
        unsharded_id_(static_cast<std::size_t>(U_), -1),
        act_id_(static_cast<std::size_t>(U_), -1),
        ugrad_id_(static_cast<std::size_t>(U_), -1),
        autocast_id_(static_cast<std::size_t>(U_), -1),
        ag_buf_(static_cast<std::size_t>(U_), 0.0),
        offload_(offload_split(p_)),
        pcie_Bps_(in.cluster.spec().node.pcie_Bps * K_.pcie_efficiency),
        // FSDP offloads the sharded fp32 (bf16-mixed) parameters; ZeRO-Infinity the 16-bit partitions.
        host_param_bytes_(bytes_per_param(in.traits, p_.precision).params),
        host_grad_bytes_(in.traits.native_cpu_adam ? 4.0 : bytes_per_param(in.traits, p_.precision).grads) {}

  void run();

 private:
  /// A run of `count` tensors of one relative size (weight: elements or bytes) in a unit's tensor list.
  struct Run {
    double weight;
    std::uint16_t count;
  };
  /// A slice of runs_: one tensor list of a unit (its parameters, its saved activations, ...).
  struct Span {
    std::uint32_t first = 0, n = 0;
  };
  /// The unit's tensor lists (docs/model.md "Reserved memory": what each allocation is made of).
  struct UnitTensors {
    Span params_local;  ///< per parameter, TP-local elements (unsharded gradients, autocast copies)
    Span params_shard;  ///< per parameter (FSDP2, DeepSpeed ZeRO-3) or one flat parameter: shard elements
    Span saved;         ///< activations saved by one forward, per tensor as autograd saves them
    Span recompute;     ///< one block's saved tensors, rematerialised during its backward (full AC)
    Span workspace;     ///< the backward's transient input / output gradients
    /// Of the workspace, the tensors of a grouped MoE's worst backward op at their own sizes, in the order
    /// autograd creates them (grouped_moe_op_tensors, lowering_tensors.cpp); placed first, as far as the
    /// workspace holds them, the rest over `workspace` in proportion.
    Span workspace_exact;
    /// The shards of the parameters whose gradients the unit's post-backward reduces: params_shard, but of
    /// an FSDP2 tied group (SimUnit::tied_peer) only the unit's own parameters.
    Span reduced_shard;
  };
  void build_tensor_lists();
  void add_run(Span& s, double weight, int count = 1);
  /// Allocates `total` bytes as the tensors of `s` (sizes in proportion to the weights; the last tensor takes
  /// the rounding remainder) in group `group` (a new one when -1); returns the group. Nothing when total <=
  /// 0.
  std::int32_t alloc_tensors(MemCategory c, std::uint8_t pool, Bytes total, Span s, std::int32_t group = -1);
  /// A unit's backward workspace (SimUnit::workspace_bytes) as its tensors: those of workspace_exact at their
  /// own sizes while the running sum fits, the rest over `workspace` in proportion; returns the group.
  std::int32_t alloc_workspace(const SimUnit& un, const UnitTensors& ut);
  /// One tensor of `bytes`.
  std::int32_t alloc_one(MemCategory c, std::uint8_t pool, Bytes bytes, std::int32_t group = -1);
  /// Frees every tensor of group `group`: one effect of minus the group's live bytes, in the pool they were
  /// allocated from (groups_: what its allocations added up to, and where). -1 (no allocation was made)
  /// frees nothing; an unknown or already freed group is a logic error (std::logic_error,
  /// TensorGroups::release).
  void free_group(MemCategory c, std::int32_t group);
  /// The tensors allocated before the step (Program::initial): persistent state per parameter, buffers.
  void initial_tensors();
  template <class F>
  std::uint32_t label(F&& make) {
    if (!in_.labels) return 0;
    out_.program.labels.push_back(make());
    return static_cast<std::uint32_t>(out_.program.labels.size() - 1);
  }
  const SimUnit& unit(int u) const { return units_[static_cast<std::size_t>(u)]; }
  /// The gathered parameters of unit `u` in bytes: the dense part (fsdp ranks) and the routed experts of this
  /// EP rank (efsdp ranks, expert parallelism).
  double ag_expert_bytes(int u) const { return static_cast<double>(unit(u).expert_gathered_elems) * bc_; }
  double ag_bytes(int u) const {
    const SimUnit& un = unit(u);
    const std::int64_t fp8 = un.fp8_gathered_elems + un.group_extra_fp8_elems;
    return static_cast<double>(un.gathered_elems + un.group_extra_gathered_elems - fp8) * bc_ +
           static_cast<double>(fp8);
  }
  /// The all-gather input of unit `u`: its shard, and with an FSDP2 group of several blocks the group's.
  double ag_shard_elems(int u) const {
    return static_cast<double>(unit(u).shard_elems + unit(u).group_extra_shard_elems);
  }
  /// ZeRO++ hpZ: every gather after the step's first forward reads the secondary partitions, within the
  /// hpZ group (partition_parameters.py all_gather_coalesced: use_secondary_tensor).
  bool hpz_gather(bool backward, int mb) const { return p_.hpz_partition > 1 && (backward || mb > 0); }
  /// The all-gather output of unit `u` (the gathered parameters; qwZ: int8 codes and fp32 scales) and the
  /// ranks it is gathered over (lowering_zeropp.cpp).
  double ag_out_bytes(int u, bool backward, int mb) const;
  int ag_world(bool backward, int mb) const {
    return hpz_gather(backward, mb) ? p_.hpz_partition : p_.fsdp_ranks();
  }
  /// qgZ: the gradient reduction of `rs_elems` elements as int4 all-to-alls (after `dep`); its last task.
  std::int32_t qgz_reduce(int u, int mb, double rs_elems, std::int32_t dep);
  /// qgZ runs only across nodes (stage3.py __avg_scatter_grads: num_nodes > 1).
  bool qgz() const { return p_.quantized_gradients && nodes_g_.ranks > 1; }
  static std::string mb_suffix(int mb) { return " mb" + std::to_string(mb); }
  /// Megatron grad-buffer bucket of each unit (grad_buffer_bucket_index over the units in backward order).
  std::vector<int> grad_buffer_bucket_of_unit() const;

  /// One collective on `lane` over group `g`, after `dep`; `sent_per_rank` is what the report counts as sent.
  /// A collective of unit `u` (>= 0) is a reduction of its gradients, in backward (the post-backward's
  /// reduce-scatter or all-reduce, HSDP's all-reduce, qgZ's all-to-alls); the forward's gathers are issued by
  /// issue_ag, and bucketed or after-step collectives name no unit (-1).
  template <class F>
  std::int32_t add_collective(CollectiveKind kind, CommKind report, std::uint8_t lane, double buffer_bytes,
                              const GroupView& g, std::int32_t dep, double sent_per_rank, F&& name, int u,
                              int mb) {
    Task t;
    t.type = TaskType::kCollective;
    t.lane = lane;
    t.duration_s = coll_(kind, buffer_bytes, g);
    t.cpu_s = K_.collective_launch_s;
    t.deps[0] = dep;
    t.comm_kind = static_cast<std::uint8_t>(report);
    t.label = label(name);
    t.unit = u;
    t.micro_batch = mb;
    t.backward = u >= 0;
    out_.comm[static_cast<int>(report)].bytes_per_rank += sent_per_rank;
    return out_.program.add(t);
  }

  // ---- parameters: all-gather, copy-out, reshard ----
  /// A host<->device copy of CPU offload on the PCIe lane, after `dep`.
  std::int32_t pcie_copy(double bytes, std::int32_t dep, int u, int mb, bool backward, const char* what);

  void issue_ag(int u, int mb, bool backward, std::int32_t after);

  void release_held_ag_output(int u);

  /// Copy-out (FSDP2: split_with_sizes_copy into per-parameter tensors; DeepSpeed: cat of coalesced pieces).
  std::int32_t copy_out(int u, int mb, bool backward);

  void free_unsharded(int u);

  /// Autocast's bf16 weight copies of a unit made again in backward: a block under full AC saved only its
  /// input, so the copies its forward made died with the autocast cache at the region's exit.
  bool autocast_copies_recomputed(const SimUnit& un) const { return p_.ac == AcMode::kFull && un.blocks > 0; }

  // ---- logits and loss (docs/mechanics.md §2.3) ----
  double logits_elems() const {
    return static_cast<double>(p_.mbs) * static_cast<double>(p_.seq) *
           static_cast<double>(in_.model.spec().vocab) / p_.tp / p_.cp;  // CP: this rank's seq / cp
  }
  double loss_tokens() const {
    return static_cast<double>(p_.mbs) * static_cast<double>(p_.seq) / p_.cp;  // this rank's tokens
  }
  void loss_forward_effects(int mb);
  std::int32_t loss_backward_effects();
  /// Op `op` of the loss kernel: allocates the tensors made at it, then frees those freed after it.
  void loss_op(int op);
  Bytes loss_bytes(const LossTensor& t) const;
  // ---- the chunked loss (lowering_chunked_loss.cpp, docs/model.md "Chunked loss") ----
  /// The chunked loss's tensors made at `op` that outlive its list: the reduce-scatter output kept as the
  /// output projection's sharded gradient to zero_grad (kLossToGrads; the step's first micro-batch, a later
  /// one's is freed), the reduce-scatter input held to the next post-backward (kLossHeldRs).
  void loss_handoffs(int op);
  /// After the loss call of micro-batch `mb` in head unit `u`: the reduce-scatter of lm_head's gradient at
  /// the last chunk, and ChunkedLossWrapper's reshard of lm_head's group (loss.py:770-772), so the head
  /// unit's backward gathers it again.
  void chunked_loss_after_call(int u, int mb);
  int loss_mb_ = 0;  ///< the micro-batch whose loss is being lowered

  /// One pass's collective of unit `u` on `lane` (TP, CP or EP communicator) lasting `s`, after `dep`;
  /// `n` collectives are launched (0: the hidden share of collectives already counted), each costing the CPU
  /// `cpu_launch_s`. Labelled "fwd|bwd WHAT UNIT mbN".
  std::int32_t unit_collective(std::uint8_t lane, CommKind kind, double s, int n, std::int32_t dep,
                               double cpu_launch_s, int u, int mb, bool backward, const char* what);

  // ---- tensor parallelism (sequence parallel): the unit's TP collectives on the TP communicator ----
  /// Adds the TP collectives of one pass of unit `u` before its compute task and returns the task the compute
  /// must wait for (-1 if none). The GEMMs need the all-gathered input, so the blocking share runs while the
  /// compute stream waits (exposed); async TP hides the rest behind the GEMMs (a task that runs alongside the
  /// compute). `pass`: the pass's all-gather and reduce-scatter times, counts and buffer bytes (tp_pass).
  std::int32_t tp_collectives(int u, int mb, bool backward, const TpPass& pass);

  // ---- context and expert parallelism (lowering_cp_ep.cpp) ----
  /// Adds the unit's ring-attention exchange and MoE all-to-alls of one pass after `gate` (the TP gate, or
  /// -1) and returns what the unit's compute must wait for: the exposed CP share and the all-to-alls block
  /// the compute stream; the hidden CP share runs beside it. Returns `gate` unchanged without CP or EP.
  std::int32_t cp_ep_collectives(int u, int mb, bool backward, std::int32_t gate);

  // ---- forward ----
  void forward(int mb);
  /// Allocates unit `u`'s saved activations of one forward (group act_id_) and, in eager mode, the layers'
  /// forward transients around them (docs/model.md "Eager forward transients"); returns the group.
  std::int32_t forward_activations(int u);
  /// This rank's tokens of one micro-batch (seq / cp of each sequence).
  double act_tokens() const { return static_cast<double>(p_.mbs) * static_cast<double>(p_.seq) / p_.cp; }
  /// Whether the forward is lowered tensor by tensor in the eager order (eager PyTorch module code; not
  /// torch.compile, whose order and temporaries are inductor's, nor Megatron-core's fused Transformer Engine
  /// kernels).
  bool eager_forward() const { return !p_.compile && !rt_.fused_kernels; }
  /// The unit's saved tensors as the lists give them (UnitTensors::saved) and, under full AC, one block's
  /// recomputed ones (UnitTensors::recompute).
  void activation_spans(int u);
  /// One step of the eager forward's activation walk: a saved tensor (into the unit's group, or the next
  /// unit's: the input it makes), or a dropped tensor allocated / freed (slot: its index among them).
  struct ActEvent {
    enum class Kind : std::uint8_t { kSaved, kNextSaved, kAlloc, kFree } kind;
    Bytes bytes;
    std::int32_t slot;
  };
  /// Unit u's eager forward walk (computed once per lowering; docs/model.md "Eager forward transients").
  const std::vector<ActEvent>& forward_events(int u);

  // ---- activation offload (lowering_offload.cpp; docs/model.md "Activation offload") ----
  /// Per unit: what --activation-offload does to its saved group under the runtime's ActOffloadStyle.
  struct ActOffloadUnit {
    bool copied = false;    ///< its saved tensors are copied to the host in forward (host bytes, D2H time)
    bool reloaded = false;  ///< its GPU tensors are freed in forward and copied back in backward
    /// The unit after whose forward the GPU tensors are freed (kCheckpointInputs: two blocks later; else
    /// the unit itself).
    int freed_after = -1;
  };
  /// Fills act_off_ (once per lowering).
  void plan_activation_offload();
  /// After unit u's forward task and its saved group: the D2H copy, the runtime's waits, and the frees of
  /// saved groups whose GPU tensors die here.
  void offload_forward(int u, int mb);
  /// Before unit u's backward compute: the H2D reloads issued now (u's, or the next unit's ahead) and the
  /// compute stream's wait for u's; act_id_[u] becomes the reloaded group.
  void offload_backward(int u, int mb);
  /// Issues unit v's H2D reload after `dep` (allocating its tensors again) unless already issued.
  void offload_reload(int v, int mb, std::int32_t dep);
  /// Unit u's backward ops (after the loss's backward): the weight save_on_cpu unpacks for the node running.
  void offload_unpack_weights(int u);
  /// After unit u's backward has consumed its saved tensors: frees the weights save_on_cpu unpacked for it.
  void offload_release(int u);
  /// The bytes unit u's offload copies each way: its saved activations, and under save_on_cpu the weights
  /// its ops save (SimUnit::saved_weight_bytes), which the pack hook copies like any saved tensor.
  Bytes offload_bytes(int u) const;
  /// A zero-length task on `lane` that waits for `dep`: what follows on the lane waits too (a stream
  /// waiting on an event).
  std::int32_t lane_wait(std::uint8_t lane, std::int32_t dep, std::int32_t dep2, const char* what);
  std::vector<ActOffloadUnit> act_off_;
  std::vector<std::int32_t> act_gpu_group_;      ///< per unit: its saved group still to be freed in forward
  std::vector<std::int32_t> reload_task_;        ///< per unit: its H2D reload (-1: not issued)
  std::vector<std::int32_t> weights_reload_id_;  ///< per unit: save_on_cpu's unpacked weights (-1: none)
  std::int32_t act_d2h_prev_ = -1;               ///< the previous unit's activation D2H copy
  std::array<std::int32_t, 2> act_buf_id_{-1, -1};  ///< kLayerGroups: the double buffer's two groups
  std::array<Bytes, 2> act_buf_bytes_{0, 0};
  int act_groups_ = 0;  ///< kLayerGroups: commits so far in this forward (block units)

  // ---- backward (lowering_backward.cpp) ----
  void backward(int mb, bool last_mb);
  /// What one backward carries from unit to unit.
  struct BackwardStep {
    int mb = 0;
    bool sync = true;  ///< gradients are reduced in this micro-batch (not under no-sync accumulation)
    double grad_bytes_per_elem = 0;
    double bucket_acc = 0;       ///< Megatron: elements of the grad-buffer bucket being filled
    std::vector<int> bucket_of;  ///< Megatron: each unit's grad-buffer bucket
  };
  /// One unit's backward, from stage to stage.
  struct UnitBackward {
    int u = 0;
    bool regather = false;   ///< FSDP2's grouped head: gathered again for the norm's backward
    std::int32_t task = -1;  ///< the compute task
    Bytes ugrad = 0;         ///< autograd's unsharded gradients (.grad), compute dtype
    Bytes emb_extra = 0;     ///< TP: the embedding's Partial gradient beyond its vocab shard
    std::int32_t emb_extra_id = -1, loss_grad = -1;
  };
  /// Megatron: the reduction of the grad-buffer bucket `b` once it is full, after `after`.
  void reduce_bucket(BackwardStep& st, std::int32_t after, int b);
  /// The all-gathers ahead of unit `u`'s backward (FSDP's backward prefetch), after `after`.
  void backward_prefetch(int u, int mb, std::int32_t after);
  /// Unit u's parameters gathered for its backward and the next units prefetched; returns what its compute
  /// waits for.
  std::int32_t backward_gather(UnitBackward& ub, const BackwardStep& st);
  /// The TP / CP / EP collectives and the compute task of unit u's backward (and recomputation).
  std::int32_t backward_compute(int u, int mb, std::int32_t ready);
  /// Unit u's backward memory: its recomputation, the loss's backward, the workspace, the saved tensors
  /// consumed and the unsharded gradients written.
  void backward_memory(UnitBackward& ub, BackwardStep& st, std::int32_t ready);
  /// The post-backward: reshard, then reduce the unit's gradients (reduce-scatter, grad-buffer bucket or
  /// all-reduce).
  void post_backward(UnitBackward& ub, BackwardStep& st);

  void reduce_scatter(int u, int mb, double grad_bytes_per_elem);

  // ---- optimizer step ----
  void optimizer_step();
  // lowering_optimizer.cpp: the step's device time (HBM traffic, Adafactor's synchronisations) and CPU
  // launches for the plan's optimizer, and Muon's per-matrix gathers and Newton-Schulz after `after`
  // (returns the last task).
  double optimizer_device_s() const;
  double optimizer_cpu_s() const;
  std::int32_t muon_orthogonalise(std::int32_t after);
  /// fp16-mixed: the loss scaler's pass over this rank's gradients, the all-reduce of its found-inf flag and
  /// the CPU's read of it (the step is issued after), with the tensors it creates
  /// (lowering_loss_scaler.cpp). Returns the group of the tensors that live until the optimizer
  /// step ends (-1: none).
  std::int32_t loss_scaler();

  const LoweringInputs& in_;
  LoweringOutput& out_;
  TensorGroups& groups_;  ///< every tensor group's live bytes (alloc_one / alloc_tensors record them)
  const Plan& p_;
  const RuntimeTraits& rt_;
  const std::vector<SimUnit>& units_;
  const ComputeConstants& K_;
  const int U_;
  const double bc_, br_;
  const bool mixed_cast_;
  const GroupView shard_g_, rep_g_, dp_g_, efsdp_g_, hpz_g_, local_g_, nodes_g_;
  CollectiveMemo coll_{in_.costs};  ///< the same few collectives recur for every unit and micro-batch
  std::vector<std::int32_t> ag_task_, copyout_task_, fwd_task_;
  std::vector<char> gathered_, ag_out_held_;
  /// Tensor groups: per unit the all-gather output, the unsharded (copied-out) parameters, the saved
  /// activations, the unsharded gradients and the autocast weight copies.
  std::vector<std::int32_t> ag_id_, unsharded_id_, act_id_, ugrad_id_, autocast_id_;
  std::vector<double> ag_buf_;  ///< bytes of each unit's all-gather output while allocated (ag_id_)
  std::int32_t recompute_id_ = -1, workspace_id_ = -1, held_rs_id_ = -1, held_logits_id_ = -1;
  /// The loss layer's tensors of the plan's loss kernel (Layer::loss_tensors), their groups while alive, and
  /// the gradient handed to the head's backward.
  std::vector<const LossTensor*> loss_list_;
  std::vector<std::int32_t> loss_ids_;
  std::int32_t loss_to_head_id_ = -1;
  std::vector<std::int32_t> grad_groups_;  ///< freed by zero_grad
  std::vector<Run> runs_;
  std::vector<UnitTensors> ut_;
  /// Per unit, its forward walk (forward_events, empty until computed) and the bytes of its saved group the
  /// previous unit allocated (its first layer's input, made by the previous unit's last residual add).
  std::vector<std::vector<ActEvent>> fwd_events_;
  std::vector<Bytes> fwd_pre_;
  std::vector<char> fwd_events_done_;
  /// The group of the next unit's saved tensors, begun by this unit's walk (-1: none).
  std::int32_t next_act_group_ = -1;
  Span all_local_, all_shard_;  ///< every parameter of the model: TP-local / as sharded (flat: per unit)
  Span optimizer_params_;       ///< the tensors the optimizer steps: one per parameter, or flat partitions
  std::vector<std::int32_t> limiter_queue_;  ///< what the gather limiter waits on, in issue order
  std::int32_t last_shard_comm_ = -1, last_rep_comm_ = -1, prev_rs_ = -1, prev_prev_rs_ = -1;
  /// FSDP2 tied embeddings: the head's gradient of the tied weight, waiting in autograd's input buffer for
  /// the embedding's (SimUnit::tied_grad_elems).
  std::int32_t tied_grad_id_ = -1;
  int prev_fwd_ag_out_ = -1;  ///< FSDP2 forward: AG output kept until the next unit's copy-out
  Bytes grads_allocated_ = 0;
  std::int32_t last_compute_ = -1;  ///< the last compute task (what the next TP all-gather needs)
  std::int32_t last_pcie_ = -1;     ///< the last offload copy
  const OffloadSplit offload_;
  const double pcie_Bps_;          ///< achievable host<->device bandwidth per GPU
  const double host_param_bytes_;  ///< bytes per element of an offloaded parameter shard
  const double host_grad_bytes_;   ///< bytes per element of an offloaded gradient shard
};

}  // namespace shardplan::detail
