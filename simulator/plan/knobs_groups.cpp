// The knob table's groups (knob_builders.hpp), in the table's order: each knob once, with its CLI flag, help,
// default, range and how it reads and writes a Plan.
#include <algorithm>
#include <tuple>

#include "core/error.hpp"
#include "simulator/plan/knob_builders.hpp"

namespace shardplan::knob_detail {

/// The runtime, its sharding and batch, precision, offload and optimizer.
void add_sharding_knobs(std::vector<Knob>& t) {
  t.push_back(
      enum_knob("runtime", "--runtime", "runtime whose sharding semantics are modelled", &Plan::runtime));
  t.push_back(
      int_knob("zero", "--zero", "ZeRO stage 0..3 (0 = plain data parallel)", "3", 0, 3, &Plan::zero));
  t.push_back(int_knob("shard_group", "--shard-group",
                       "ranks that shard the state (0 = all data-parallel ranks; smaller = HSDP)", "0", 0,
                       1 << 24, &Plan::shard_group));
  t.push_back(
      int_knob("tp", "--tp", "tensor-parallel degree, inside one NVLink domain", "1", 1, 4096, &Plan::tp));
  {
    Knob k = int_knob("seq", "--seq", "sequence length in tokens", "the model's", 1, std::int64_t{1} << 22,
                      &Plan::seq);
    // 0 is the unresolved "model default": no value to print before resolve_plan.
    k.get = [](const Plan& p) { return p.seq == 0 ? std::string() : std::to_string(p.seq); };
    t.push_back(k);
  }
  t.push_back(
      int_knob("mbs", "--mbs", "micro-batch: sequences per GPU per micro-step", "1", 1, 65536, &Plan::mbs));
  t.push_back(int_knob("grad_accum", "--grad-accum", "micro-batches per optimizer step", "1", 1, 1 << 20,
                       &Plan::grad_accum));
  t.push_back(enum_knob("ac", "--ac", "activation checkpointing", &Plan::ac));
  t.push_back(int_knob("wrap", "--wrap", "transformer blocks per FSDP unit", "1", 1, 1 << 20, &Plan::wrap));
  t.push_back(int_knob("prefetch", "--prefetch", "units all-gathered ahead of the one computing", "1", 0, 16,
                       &Plan::prefetch));
  {
    Knob k = make("reshard_after_forward", "--reshard-after-forward", KnobKind::kBool,
                  "free gathered parameters after forward (ZeRO-3); false with --zero 3 is SHARD_GRAD_OP",
                  "true for ZeRO-3, false otherwise", {"true", "false"});
    k.get = [](const Plan& p) { return std::string(p.reshard() ? "true" : "false"); };
    k.set = [](Plan& p, const std::string& s) {
      bool b = false;
      std::string why = parse_bool(s, b);
      if (why.empty()) p.reshard_after_forward = b;
      return why;
    };
    t.push_back(k);
  }
  t.push_back(enum_knob("precision", "--precision", "parameter / compute precision", &Plan::precision));
  {
    Knob k = make("reduce_dtype", "--reduce-dtype", KnobKind::kEnum, "dtype of the gradient reduction",
                  "fp32 for bf16-mixed and fp32, bf16 otherwise", names<Dtype>());
    k.get = [](const Plan& p) { return std::string(to_string(p.reduce())); };
    k.set = [](Plan& p, const std::string& s) {
      Dtype d = Dtype::kFp32;
      std::string why = parse_enum_text(s, d);
      if (why.empty()) p.reduce_dtype = d;
      return why;
    };
    t.push_back(k);
  }
  t.push_back(enum_knob(
      "offload", "--offload",
      "CPU offload: optimizer = DeepSpeed ZeRO-Offload (fp32 master, Adam state and gradient "
      "partitions on the host, CPU Adam); params = parameters, gradients and optimizer state on the "
      "host (DeepSpeed ZeRO-3 offload_param, FSDP1 CPUOffload, FSDP2 CPUOffloadPolicy)",
      &Plan::offload));
  // Printed only when not adamw: repro lines and run records of AdamW plans are unchanged.
  t.push_back(quiet_enum_knob(
      "optimizer", "--optimizer",
      "optimizer: adamw / adam / sgd (momentum) / adafactor (torch.optim), adamw8bit (torchao under fsdp2, "
      "bitsandbytes otherwise: 2 bytes per parameter + fp32 scales per 256), lion (one moment), muon "
      "(momentum on the blocks' matrices, gathered and orthogonalised by Newton-Schulz; AdamW for the rest)",
      &Plan::optimizer));
}

/// Kernels and the training loop's habits (async TP, foreach optimizer, compile, the loss, SDPA, SAC) and
/// torchtitan's wrappings of 2024 to 2025-07-28.
void add_kernel_knobs(std::vector<Knob>& t) {
  t.push_back(switch_knob("async_tp", "--async-tp", "overlap TP collectives with GEMMs", &Plan::async_tp));
  t.push_back(switch_knob("fused_optimizer", "--foreach-optimizer",
                          "unfused (foreach) AdamW instead of fused (run-record key fused_optimizer)",
                          &Plan::fused_optimizer, false));
  t.push_back(switch_knob("compile", "--compile", "torch.compile: elementwise ops fused", &Plan::compile));
  t.push_back(switch_knob("hold_logits", "--hold-logits",
                          "the training loop keeps the fp32 logits alive through backward (no `del pred`, "
                          "torchtitan < mid-2024)",
                          &Plan::hold_logits));
  t.push_back(switch_knob("fp32_norm", "--fp32-norm",
                          "eager RMSNorm computed in fp32 by a Python module (torchtitan before 2025-03-19): "
                          "an fp32 copy of each norm's input is saved for backward",
                          &Plan::fp32_norm));
  t.push_back(switch_knob("rs_input_rs_stream", "--rs-input-rs-stream",
                          "FSDP2 before pytorch PR 129721 (nightlies before July 2024): the reduce-scatter "
                          "input is allocated on the reduce-scatter stream and the sharded gradients are "
                          "views of its output",
                          &Plan::rs_input_rs_stream));
  t.push_back(
      switch_knob("zero_grad_in_place", "--zero-grad-in-place",
                  "gradients zeroed in place (zero_grad(set_to_none=False), torch < 2.0): DDP's .grad "
                  "lives across steps",
                  &Plan::zero_grad_in_place));
  t.push_back(
      enum_knob("loss_dtype", "--loss-dtype",
                "dtype of the cross-entropy (bf16 = the 16-bit compute dtype, no upcast of the logits)",
                &Plan::loss_dtype));
  {
    // Printed only when set: repro lines and run records of plans that leave it to --compile are unchanged.
    Knob k =
        make("loss_impl", "--loss-impl", KnobKind::kEnum,
             "cross-entropy: eager (aten log_softmax + nll_loss), compiled (torch.compile'd loss, "
             "torchtitan since 2025-04-02; the torchtitan version decides, its config cannot) or chunked "
             "(torchtitan 0.3.0 ChunkedLossWrapper: output projection + loss per sequence chunk)",
             "compiled with --compile, eager otherwise", names<LossImpl>());
    k.get = [](const Plan& p) { return p.loss_impl ? std::string(to_string(*p.loss_impl)) : std::string(); };
    k.set = [](Plan& p, const std::string& s) {
      LossImpl l = LossImpl::kEager;
      std::string why = parse_enum_text(s, l);
      if (why.empty()) p.loss_impl = l;
      return why;
    };
    t.push_back(k);
  }
  {
    // Printed only when set (0 = torchtitan's default), like loss_impl.
    Knob k = int_knob("loss_chunks", "--loss-chunks",
                      "--loss-impl chunked: sequence chunks (torchtitan ChunkedLossWrapper num_chunks; the "
                      "sequence must divide by it)",
                      "8 (torchtitan 0.3.0's default)", 1, 65536, &Plan::loss_chunks);
    k.get = [](const Plan& p) { return p.loss_chunks == 0 ? std::string() : std::to_string(p.loss_chunks); };
    t.push_back(k);
  }
  {
    // Printed only when set: repro lines and run records of plans that leave it to the GPU are unchanged.
    Knob k =
        make("sdpa_backend", "--sdpa-backend", KnobKind::kEnum,
             "scaled-dot-product-attention kernel (torch SDPBackend): flash (FlashAttention-2; AOTriton on "
             "ROCm), cudnn or efficient (memory-efficient)",
             "torch's choice on the GPU: cudnn on Hopper and Blackwell, flash on Ampere and other (AMD), "
             "efficient on Volta or with fp32",
             names<SdpaBackend>());
    k.get = [](const Plan& p) {
      return p.sdpa_backend ? std::string(to_string(*p.sdpa_backend)) : std::string();
    };
    k.set = [](Plan& p, const std::string& s) {
      SdpaBackend b = SdpaBackend::kFlash;
      std::string why = parse_enum_text(s, b);
      if (why.empty()) p.sdpa_backend = b;
      return why;
    };
    t.push_back(k);
  }
  t.push_back(quiet_enum_knob("sac_sdpa_ops", "--sac-sdpa-ops",
                              "SDPA ops torchtitan's selective-AC policy saves: all (torchtitan >= 0.2.1) or "
                              "flash-efficient (earlier: cuDNN attention is recomputed in backward)",
                              &Plan::sac_sdpa_ops));
  t.push_back(
      quiet_enum_knob("root_params", "--root-params",
                      "FSDP2 root unit (fully_shard(model)) parameters: none (torchtitan >= 2025-07-28: "
                      "tok_embeddings and [norm, output] are units of their own) or embedding-head "
                      "(earlier torchtitan: the root keeps them, gathered from forward to the end of "
                      "backward)",
                      &Plan::root_params));
  {
    Knob k = switch_knob("keep_last_block", "--keep-last-block",
                         "FSDP2: the last block is not resharded after forward (torchtitan's default policy "
                         "before 2025-07-28)",
                         &Plan::keep_last_block);
    k.get = [](const Plan& p) { return std::string(p.keep_last_block ? "true" : ""); };
    t.push_back(k);
  }
}

/// float8, the attention core and dropout, the MoE implementation.
void add_precision_and_layer_knobs(std::vector<Knob>& t) {
  t.push_back(
      enum_knob("fp8", "--fp8", "float8 GEMMs in the blocks' linear layers (torchao recipes)", &Plan::fp8));
  t.push_back(switch_knob("fp8_all_gather", "--fp8-all-gather",
                          "FSDP2 all-gathers the blocks' linear weights in float8 (needs --fp8 tensorwise)",
                          &Plan::fp8_all_gather));
  {
    // Printed only when not flash: repro lines and run records of flash-attention plans are unchanged.
    Knob k = make("attention", "--attention", KnobKind::kEnum,
                  "attention core: flash (flash-attention kernel), fused-softmax (Megatron: s x s scores, "
                  "batched GEMMs, fused scale-mask-softmax), eager (Hugging Face eager attention, op by op)",
                  "flash", names<AttentionCore>());
    k.get = [](const Plan& p) {
      return p.attention == AttentionCore::kFlash ? std::string() : std::string(to_string(p.attention));
    };
    k.set = [](Plan& p, const std::string& s) { return parse_enum_text(s, p.attention); };
    t.push_back(k);
  }
  {
    Knob k = switch_knob("attention_dropout", "--attention-dropout",
                         "dropout on the attention probabilities (p > 0): with a materialised core its mask "
                         "and the dropped probabilities are saved and passed over",
                         &Plan::attention_dropout);
    k.get = [](const Plan& p) { return std::string(p.attention_dropout ? "true" : ""); };
    t.push_back(k);
  }
  {
    // Printed only when not grouped: repro lines and run records of other plans are unchanged.
    Knob k =
        make("moe_impl", "--moe-impl", KnobKind::kEnum,
             "how MoE layers run their routed experts: grouped (torchtitan: all routed rows reordered, "
             "grouped GEMMs, one combine), loop (transformers 4: a loop over per-expert Linear layers, "
             "index_add_), hf-grouped-mm (transformers 5.23's default: sort, grouped GEMMs over 3-D expert "
             "weights, un-permute), hf-eager (transformers 5.23 experts_implementation=\"eager\": a loop "
             "indexing the 3-D weights), deepspeed (DeepSpeed-MoE's MOELayer, --runtime deepspeed: every "
             "expert padded to its capacity, --moe-capacity-factor or 1.0, at least 4 rows)",
             "grouped", names<MoeImpl>());
    k.get = [](const Plan& p) {
      return p.moe_impl == MoeImpl::kGrouped ? std::string() : std::string(to_string(p.moe_impl));
    };
    k.set = [](Plan& p, const std::string& s) { return parse_enum_text(s, p.moe_impl); };
    t.push_back(k);
  }
}

/// The caching allocator's mode and garbage-collection threshold.
void add_allocator_knobs(std::vector<Knob>& t) {
  t.push_back(enum_knob("allocator", "--allocator",
                        "CUDA caching allocator: default segments, or expandable = "
                        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (reserved memory is replayed "
                        "through it)",
                        &Plan::allocator));
  {
    // c10/cuda/CUDACachingAllocator.cpp garbage_collect_cached_blocks; the option parser
    // (c10/core/AllocatorConfig.cpp, 065861fb) takes values in (0, 1) only.
    Knob k =
        make("allocator_gc_threshold", "--allocator-gc-threshold", KnobKind::kDouble,
             "PYTORCH_CUDA_ALLOC_CONF=garbage_collection_threshold: before a new cudaMalloc with reserved "
             "memory above this fraction of what the allocator may take, cached whole segments at least "
             "as old as the average are freed (PyTorch runs it only with a per-process memory fraction "
             "set); 0 = off",
             "0");
    k.dlo = 0.0;
    k.dhi = 1.0;
    k.get = [](const Plan& p) {  // off prints nothing: repro lines of plans without it are unchanged
      return p.allocator_gc_threshold == 0.0 ? std::string() : format_double(p.allocator_gc_threshold);
    };
    k.set = [](Plan& p, const std::string& text) {
      double v = 0;
      std::string why = parse_double(text, 0.0, 1.0, v);
      if (why.empty() && v >= 1.0) why = "must be below 1 (0 = off), got " + text;
      if (why.empty()) p.allocator_gc_threshold = v;
      return why;
    };
    t.push_back(k);
  }
}

// ---- pipeline parallelism (simulator/simulate/pipeline_step.hpp) ----
void add_pipeline_knobs(std::vector<Knob>& t) {
  t.push_back(int_knob("pp", "--pp", "pipeline-parallel degree (stages' ranks; outermost in the mesh)", "1",
                       1, 4096, &Plan::pp));
  t.push_back(
      enum_knob("pp_schedule", "--pp-schedule",
                "pipeline schedule (torch.distributed.pipelining; interleaved-1f1b, zbv and dualpipev "
                "run several stages per rank)",
                &Plan::pp_schedule));
  {
    Knob k = int_knob("virtual_stages", "--virtual-stages", "pipeline stages per rank",
                      "1 for gpipe and 1f1b, 2 otherwise", 1, 64, &Plan::virtual_stages);
    // 0 is the unresolved "schedule's default".
    k.get = [](const Plan& p) {
      return p.virtual_stages == 0 ? std::string() : std::to_string(p.virtual_stages);
    };
    t.push_back(k);
  }
  {
    Knob k = make("pp_layers", "--pp-layers", KnobKind::kText,
                  "transformer blocks per pipeline stage, comma-separated in stage order (\"3,4,4,3\")",
                  "torchtitan's split");
    k.get = [](const Plan& p) {
      std::string out;
      for (int n : p.pp_layers) out += (out.empty() ? "" : ",") + std::to_string(n);
      return out;
    };
    k.set = [](Plan& p, const std::string& text) {
      std::vector<int> v;
      std::size_t pos = 0;
      while (pos <= text.size()) {
        const std::size_t comma = std::min(text.find(',', pos), text.size());
        std::int64_t n = 0;
        std::string why = parse_int(text.substr(pos, comma - pos), 0, 1 << 20, n);
        if (!why.empty()) return "expected comma-separated block counts (\"3,4,4,3\"): " + why;
        v.push_back(static_cast<int>(n));
        pos = comma + 1;
      }
      p.pp_layers = std::move(v);
      return std::string();
    };
    t.push_back(k);
  }
}

// Context and expert parallelism (docs/model.md "Context parallelism", "Expert parallelism").
void add_cp_ep_knobs(std::vector<Knob>& t) {
  t.push_back(int_knob("cp", "--cp",
                       "context-parallel degree: each sequence split over cp ranks (ring attention, "
                       "load-balanced sharding)",
                       "1", 1, 1 << 16, &Plan::cp));
  t.push_back(int_knob("ep", "--ep",
                       "expert-parallel degree: routed experts split over ep of the dp_shard x cp ranks (MoE "
                       "models)",
                       "1", 1, 1 << 16, &Plan::ep));
  Knob k = make("moe_imbalance", "--moe-imbalance", KnobKind::kDouble,
                "routed tokens of the busiest expert-parallel rank over the mean (1 = balanced router)", "1");
  k.dlo = 1.0;
  k.dhi = 64.0;
  k.get = [](const Plan& p) { return format_double(p.moe_imbalance); };
  k.set = [](Plan& p, const std::string& text) { return parse_double(text, 1.0, 64.0, p.moe_imbalance); };
  t.push_back(k);
  // Megatron-core 0.8.0 megatron/training/arguments.py --moe-expert-capacity-factor (default None: dropless)
  // and --moe-pad-expert-input-to-capacity; each prints nothing at its default.
  Knob c =
      make("moe_capacity_factor", "--moe-capacity-factor", KnobKind::kDouble,
           "expert capacity factor F: each expert keeps at most ceil(T x top_k / experts x F) of a rank's "
           "routed rows, the rest are dropped (Megatron-core --moe-expert-capacity-factor; 0 = dropless); "
           "under --moe-impl deepspeed DeepSpeed-MoE's capacity_factor (0 = its default 1.0)",
           "0");
  c.dlo = 0.0;
  c.dhi = 64.0;
  c.get = [](const Plan& p) {
    return p.moe_capacity_factor == 0.0 ? std::string() : format_double(p.moe_capacity_factor);
  };
  c.set = [](Plan& p, const std::string& text) {
    return parse_double(text, 0.0, 64.0, p.moe_capacity_factor);
  };
  t.push_back(c);
  Knob pad = switch_knob("moe_pad_to_capacity", "--moe-pad-to-capacity",
                         "pad every expert's input to its capacity (Megatron-core "
                         "--moe-pad-expert-input-to-capacity; needs --moe-capacity-factor)",
                         &Plan::moe_pad_to_capacity);
  pad.get = [](const Plan& p) { return std::string(p.moe_pad_to_capacity ? "true" : ""); };
  t.push_back(pad);
  // Printed when set (resolve_plan sets the runtime's default when ep > 1): repro lines and run records of
  // dense plans are unchanged.
  Knob b = make(
      "ep_backend", "--ep-backend", KnobKind::kEnum,
      "MoE token dispatch and combine under expert parallelism: alltoall (all-to-all of the routed rows: "
      "torchtitan standard, DeepSpeed, Megatron alltoall), allgather (Megatron-core's all-gather "
      "dispatcher: tokens all-gathered over TP x EP, combine reduce-scattered), deepep (DeepEP "
      "kernels over preallocated NVLink/RDMA buffers: torchtitan moe_comm_backend deepep)",
      "the runtime's: allgather for megatron, alltoall otherwise", names<EpBackend>());
  b.get = [](const Plan& p) { return p.ep_backend ? std::string(to_string(*p.ep_backend)) : std::string(); };
  b.set = [](Plan& p, const std::string& s) {
    EpBackend e = EpBackend::kAllToAll;
    std::string why = parse_enum_text(s, e);
    if (why.empty()) p.ep_backend = e;
    return why;
  };
  t.push_back(b);
}

// LoRA (docs/model.md "LoRA and QLoRA"); each prints nothing at its default: repro lines and run records of
// full fine-tuning plans are unchanged.
void add_lora_knobs(std::vector<Knob>& t) {
  Knob r =
      int_knob("lora_rank", "--lora-rank",
               "LoRA adapter rank r (0 = full fine-tuning): every base parameter frozen, trainable "
               "adapters A [r, in] and B [out, r] beside each targeted linear weight (PEFT, torchtitan's "
               "LoRAConverter)",
               "0", 0, 1 << 16, &Plan::lora_rank);
  r.get = [](const Plan& p) { return p.lora_rank == 0 ? std::string() : std::to_string(p.lora_rank); };
  t.push_back(r);
  Knob k = make("lora_targets", "--lora-targets", KnobKind::kText,
                "modules the LoRA adapters wrap, comma-separated: Hugging Face names (q_proj,v_proj,...), "
                "torchtitan's (wq,wv,...) or all-linear",
                "PEFT's default for the model type (q_proj,v_proj for Llama, Mistral, Qwen)");
  k.get = [](const Plan& p) { return p.lora_targets; };
  k.set = [](Plan& p, const std::string& text) {
    if (text.empty() || text.front() == ',' || text.back() == ',' || text.find(",,") != std::string::npos)
      return std::string("expected comma-separated module names (\"q_proj,v_proj\"), got \"" + text + "\"");
    p.lora_targets = text;
    return std::string();
  };
  t.push_back(k);
  t.push_back(quiet_enum_knob("lora_base", "--lora-base",
                              "storage of LoRA's frozen base weights: bf16, int8 (LLM.int8, bitsandbytes "
                              "Linear8bitLt) or nf4 (QLoRA: bitsandbytes Linear4bit, double quantisation)",
                              &Plan::lora_base));
}

// Activation offload (docs/model.md "Activation offload"): none | all | N blocks; prints nothing when off,
// so repro lines and run records of plans without it are unchanged.
Knob activation_offload_knob() {
  Knob k = make("activation_offload", "--activation-offload", KnobKind::kText,
                "activation offload to pinned host memory: all (torch save_on_cpu around the model's forward "
                "under fsdp2/fsdp1; DeepSpeed cpu_checkpointing: the checkpoint inputs, with --ac full) or N "
                "(Megatron-core cpu_offloading_num_layers: the first N blocks' saved tensors; N < blocks)",
                "none");
  k.get = [](const Plan& p) {
    if (p.activation_offload == 0) return std::string();
    return p.activation_offload == kActivationOffloadAll ? std::string("all")
                                                         : std::to_string(p.activation_offload);
  };
  k.set = [](Plan& p, const std::string& text) {
    if (text == "none") return p.activation_offload = 0, std::string();
    if (text == "all") return p.activation_offload = kActivationOffloadAll, std::string();
    std::int64_t n = 0;
    std::string why = parse_int(text, 1, 1 << 20, n);
    if (!why.empty()) return "expected none, all or a number of blocks: " + why;
    p.activation_offload = static_cast<int>(n);
    return std::string();
  };
  return k;
}

// DeepSpeed ZeRO++ (docs/model.md "ZeRO++"); each prints nothing at its default: repro lines and run records
// of other plans are unchanged.
void add_zeropp_knobs(std::vector<Knob>& t) {
  Knob h = int_knob("hpz_partition", "--hpz-partition",
                    "DeepSpeed ZeRO++ hpZ (zero_hpz_partition_size): a secondary 16-bit copy of the ZeRO-3 "
                    "parameters partitioned over this many consecutive ranks, gathered within them after "
                    "the step's first forward (1 = off)",
                    "1", 1, 1 << 16, &Plan::hpz_partition);
  h.get = [](const Plan& p) {
    return p.hpz_partition == 1 ? std::string() : std::to_string(p.hpz_partition);
  };
  t.push_back(h);
  for (auto [key, flag, help, field] :
       {std::tuple{"quantized_weights", "--quantized-weights",
                   "DeepSpeed ZeRO++ qwZ (zero_quantized_weights): ZeRO-3 parameter all-gathers in int8 "
                   "blocks with fp32 scales",
                   &Plan::quantized_weights},
        std::tuple{"quantized_gradients", "--quantized-gradients",
                   "DeepSpeed ZeRO++ qgZ (zero_quantized_gradients): ZeRO-3 gradient reduce-scatter as int4 "
                   "all-to-alls inside each node, then across nodes",
                   &Plan::quantized_gradients}}) {
    Knob k = switch_knob(key, flag, help, field);
    bool Plan::*member = field;  // clang 14 cannot capture a structured binding (P1091R3 came in clang 16)
    k.get = [member](const Plan& p) { return std::string(p.*member ? "true" : ""); };
    t.push_back(k);
  }
}

}  // namespace shardplan::knob_detail
