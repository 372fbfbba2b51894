// Plan defaults, validation against the model and the cluster, and the run-record JSON form.
#include "simulator/plan.hpp"

#include "simulator/model_graph.hpp"
#include "topologies/cluster.hpp"

namespace shardplan {

const char* to_string(Runtime r) {
  return r == Runtime::kFsdp2 ? "fsdp2" : r == Runtime::kFsdp1 ? "fsdp1" : "deepspeed";
}
const char* to_string(Precision p) {
  switch (p) {
    case Precision::kBf16Mixed: return "bf16-mixed";
    case Precision::kBf16: return "bf16";
    case Precision::kBf16True: return "bf16-true";
    case Precision::kFp32: return "fp32";
  }
  return "?";
}
const char* to_string(AcMode a) { return a == AcMode::kNone ? "none" : a == AcMode::kSelective ? "selective" : "full"; }
const char* to_string(Dtype d) { return d == Dtype::kFp32 ? "fp32" : "bf16"; }
const char* to_string(Offload o) { return o == Offload::kNone ? "none" : "optimizer"; }
const char* to_string(Fp8 f) {
  return f == Fp8::kNone ? "none" : f == Fp8::kTensorwise ? "tensorwise" : "rowwise";
}

std::optional<Runtime> parse_runtime(const std::string& s) {
  return parse_enum<Runtime>(s);
}
std::optional<Precision> parse_precision(const std::string& s) {
  return parse_enum<Precision>(s);
}
std::optional<AcMode> parse_ac(const std::string& s) {
  return parse_enum<AcMode>(s);
}
std::optional<Dtype> parse_dtype(const std::string& s) {
  return parse_enum<Dtype>(s);
}
std::optional<Offload> parse_offload(const std::string& s) {
  return parse_enum<Offload>(s);
}

static void need(bool ok, const char* knob, const std::string& why) {
  if (!ok) throw InputError::flag(knob, why);
}

Plan resolve_plan(Plan p, const ModelGraph& model, const Cluster& cluster, std::int64_t global_batch) {
  const auto& s = model.spec();
  const int gpus = cluster.gpus();
  need(p.zero >= 0 && p.zero <= 3, "--zero", "must be 0, 1, 2 or 3, got " + std::to_string(p.zero));
  need(p.tp >= 1, "--tp", "must be >= 1");
  need(p.tp <= cluster.spec().node.nvlink_domain_gpus, "--tp",
       "tp " + std::to_string(p.tp) + " exceeds the " + std::to_string(cluster.spec().node.nvlink_domain_gpus) +
           " GPUs of one NVLink domain");
  need(gpus % p.tp == 0, "--tp", "tp " + std::to_string(p.tp) + " does not divide " + std::to_string(gpus) + " GPUs");
  if (p.tp > 1) {
    need(s.heads % p.tp == 0, "--tp", "tp " + std::to_string(p.tp) + " does not divide the " +
                                           std::to_string(s.heads) + " attention heads");
    need(s.kv_heads % p.tp == 0 || p.tp % s.kv_heads == 0, "--tp",
         "tp " + std::to_string(p.tp) + " and the " + std::to_string(s.kv_heads) + " KV heads do not divide");
    need(s.ffn_hidden % p.tp == 0, "--tp", "tp " + std::to_string(p.tp) + " does not divide the FFN width " +
                                                std::to_string(s.ffn_hidden));
    need(s.vocab % p.tp == 0, "--tp", "tp " + std::to_string(p.tp) + " does not divide the vocabulary " +
                                           std::to_string(s.vocab) + " (pad the vocabulary)");
  }
  p.dp = gpus / p.tp;
  if (p.shard_group == 0) p.shard_group = p.dp;
  need(p.shard_group >= 1 && p.dp % p.shard_group == 0, "--shard-group",
       "shard group " + std::to_string(p.shard_group) + " does not divide the " + std::to_string(p.dp) +
           " data-parallel ranks");
  p.replicas = p.dp / p.shard_group;
  if (p.zero == 0) {
    need(p.shard_group == p.dp, "--shard-group", "ZeRO-0 shards nothing; a shard group makes no sense");
  }
  if (p.runtime != Runtime::kDeepSpeed) {
    need(p.zero != 1, "--zero",
         std::string(to_string(p.runtime)) + " has no ZeRO-1 mode; use --zero 2 (SHARD_GRAD_OP) or --runtime deepspeed");
  } else {
    need(p.replicas == 1, "--shard-group", "deepspeed runtime: hybrid sharding (HSDP) is modelled for fsdp1/fsdp2 only");
    need(!p.reshard_after_forward.has_value() || *p.reshard_after_forward == (p.zero == 3), "--reshard-after-forward",
         "deepspeed reshards after forward exactly in ZeRO-3");
  }
  if (p.reshard_after_forward.has_value() && *p.reshard_after_forward && p.zero < 3)
    throw InputError::flag("--reshard-after-forward", "resharding after forward needs --zero 3 (parameters sharded)");
  if (p.reshard_after_forward.has_value() && !*p.reshard_after_forward && p.zero == 3 && p.runtime != Runtime::kDeepSpeed) {
    // FSDP with reshard_after_forward=false is SHARD_GRAD_OP: that is ZeRO-2 semantics.
    p.zero = 2;
  }
  if (p.zero == 2 && p.runtime != Runtime::kDeepSpeed) p.reshard_after_forward = false;
  if (p.zero == 3) p.reshard_after_forward = p.reshard_after_forward.value_or(true);
  if (p.zero < 2) p.reshard_after_forward = false;
  if (p.seq == 0) p.seq = s.seq;
  need(p.seq >= 1 && p.seq <= (std::int64_t{1} << 22), "--seq", "must be in [1, 4194304]");
  if (s.positions == PositionKind::kLearned)
    need(p.seq <= s.max_positions, "--seq",
         "sequence " + std::to_string(p.seq) + " exceeds the model's " + std::to_string(s.max_positions) +
             " learned positions");
  need(p.mbs >= 1 && p.mbs <= 65536, "--mbs", "must be in [1, 65536]");
  need(p.wrap >= 1, "--wrap", "must be >= 1");
  need(p.wrap <= std::max(1, model.blocks()), "--wrap",
       "wrap " + std::to_string(p.wrap) + " exceeds the model's " + std::to_string(model.blocks()) + " blocks");
  need(p.prefetch >= 0 && p.prefetch <= 16, "--prefetch", "must be in [0, 16]");
  if (global_batch > 0) {
    const std::int64_t per_step = static_cast<std::int64_t>(p.dp) * p.mbs;
    need(global_batch % per_step == 0, "--global-batch",
         "global batch " + std::to_string(global_batch) + " is not a multiple of dp x mbs = " + std::to_string(p.dp) +
             " x " + std::to_string(p.mbs));
    p.grad_accum = static_cast<int>(global_batch / per_step);
  }
  need(p.grad_accum >= 1 && p.grad_accum <= 1 << 20, "--grad-accum", "must be in [1, 1048576]");
  if (!p.reduce_dtype)
    p.reduce_dtype = (p.precision == Precision::kBf16Mixed || p.precision == Precision::kFp32) ? Dtype::kFp32 : Dtype::kBf16;
  if (p.precision == Precision::kFp32) p.reduce_dtype = Dtype::kFp32;
  need(p.fp8 == Fp8::kNone || p.precision != Precision::kFp32, "--fp8",
       "float8 linears need a 16-bit compute dtype (--precision bf16-mixed, bf16 or bf16-true), not fp32");
  if (p.fp8_all_gather) {
    need(p.fp8 == Fp8::kTensorwise, "--fp8-all-gather", "float8 all-gather needs --fp8 tensorwise (torchao)");
    need(p.runtime == Runtime::kFsdp2 && p.zero >= 2, "--fp8-all-gather",
         "float8 all-gather is an FSDP2 feature: needs --runtime fsdp2 with --zero 2 or 3 (parameters "
         "gathered)");
  }
  return p;
}

Json plan_to_json(const Plan& p) {
  return {{"runtime", to_string(p.runtime)},
          {"zero", p.zero},
          {"shard_group", p.shard_group},
          {"tp", p.tp},
          {"dp", p.dp},
          {"replicas", p.replicas},
          {"seq", p.seq},
          {"mbs", p.mbs},
          {"grad_accum", p.grad_accum},
          {"global_batch", p.global_batch()},
          {"ac", to_string(p.ac)},
          {"wrap", p.wrap},
          {"prefetch", p.prefetch},
          {"reshard_after_forward", p.reshard()},
          {"precision", to_string(p.precision)},
          {"reduce_dtype", to_string(p.reduce())},
          {"offload", to_string(p.offload)},
          {"async_tp", p.async_tp},
          {"fused_optimizer", p.fused_optimizer},
          {"compile", p.compile},
          {"hold_logits", p.hold_logits},
          {"loss_dtype", to_string(p.loss_dtype)},
          {"fp8", to_string(p.fp8)},
          {"fp8_all_gather", p.fp8_all_gather}};
}

template <class T>
static T enum_field(JsonObj& o, const char* key, T def) {
  if (!o.has(key)) {
    o.raw_optional(key);
    return def;
  }
  std::string v = o.str(key);
  auto r = parse_enum<T>(v);
  if (!r) o.fail(key, "unknown value \"" + v + "\"; expected one of: " + enum_names<T>());
  return *r;
}

Plan plan_from_json(JsonObj o) {
  Plan p;
  o.allow({"dp", "replicas", "global_batch", "notes"});
  p.runtime = enum_field(o, "runtime", Runtime::kFsdp2);
  p.zero = static_cast<int>(o.integer("zero", 3, 0, 3));
  p.shard_group = static_cast<int>(o.integer("shard_group", 0, 0, 1 << 24));
  p.tp = static_cast<int>(o.integer("tp", 1, 1, 4096));
  p.seq = o.integer("seq", 0, 0, std::int64_t{1} << 22);
  p.mbs = static_cast<int>(o.integer("mbs", 1, 1, 65536));
  p.grad_accum = static_cast<int>(o.integer("grad_accum", 1, 1, 1 << 20));
  p.ac = enum_field(o, "ac", AcMode::kNone);
  p.wrap = static_cast<int>(o.integer("wrap", 1, 1, 1 << 20));
  p.prefetch = static_cast<int>(o.integer("prefetch", 1, 0, 16));
  if (o.has("reshard_after_forward")) p.reshard_after_forward = o.boolean("reshard_after_forward");
  else o.raw_optional("reshard_after_forward");
  p.precision = enum_field(o, "precision", Precision::kBf16Mixed);
  if (o.has("reduce_dtype"))
    p.reduce_dtype = enum_field(o, "reduce_dtype", Dtype::kFp32);
  else o.raw_optional("reduce_dtype");
  p.offload = enum_field(o, "offload", Offload::kNone);
  p.async_tp = o.boolean("async_tp", false);
  p.fused_optimizer = o.boolean("fused_optimizer", true);
  p.compile = o.boolean("compile", false);
  p.hold_logits = o.boolean("hold_logits", false);
  p.loss_dtype = enum_field(o, "loss_dtype", Dtype::kFp32);
  p.fp8 = enum_field(o, "fp8", Fp8::kNone);
  p.fp8_all_gather = o.boolean("fp8_all_gather", false);
  o.finish();
  return p;
}

}  // namespace shardplan
