// The plan knob table (simulator/plan/knobs.hpp): every knob round-trips through the CLI flags (plan_to_flags
// -> the generated options -> plan_from_flags), the run-record JSON and `plan --fix`; offload combinations a
// runtime does not have are refused and the emitters write each runtime's offload settings.
#include <CLI/CLI.hpp>
#include <catch2/catch.hpp>
#include <sstream>

#include "plan_helpers.hpp"
#include "planner/cli/common.hpp"
#include "planner/emit.hpp"
#include "planner/search.hpp"
#include "simulator/plan/knobs.hpp"

using namespace shardplan;
using Catch::Matchers::Contains;
using shardplan::ptest::Setup;

namespace {

// Parses a plan_to_flags string with the generated `memory`/`simulate` options.
Plan parse_flags(const std::string& flags) {
  CLI::App app;
  cli::PlanFlags f;
  cli::add_plan_options(&app, f);
  app.parse(flags, false);
  return cli::plan_from_flags(f);
}

// A plan with every knob away from its default (unresolved: reshard_after_forward and reduce_dtype set
// explicitly).
Plan all_changed() {
  Plan x;
  x.runtime = Runtime::kDeepSpeed;
  x.zero = 2;
  x.shard_group = 4;
  x.tp = 2;
  x.seq = 2048;
  x.mbs = 2;
  x.grad_accum = 3;
  x.ac = AcMode::kFull;
  x.wrap = 2;
  x.prefetch = 2;
  x.reshard_after_forward = false;
  x.precision = Precision::kBf16;
  x.reduce_dtype = Dtype::kBf16;
  x.offload = Offload::kParams;
  x.optimizer = Optimizer::kLion;
  x.lora_rank = 16;
  x.lora_targets = "q_proj,v_proj";
  x.lora_base = LoraBase::kNf4;
  x.activation_offload = 4;
  x.async_tp = true;
  x.fused_optimizer = false;
  x.compile = true;
  x.hold_logits = true;
  x.fp32_norm = true;
  x.rs_input_rs_stream = true;
  x.zero_grad_in_place = true;
  x.loss_dtype = Dtype::kBf16;
  x.fp8 = Fp8::kRowwise;
  x.fp8_all_gather = true;
  x.pp = 2;
  x.pp_schedule = PpSchedule::kInterleaved1F1B;
  x.virtual_stages = 3;
  x.pp_layers = {1, 2, 3};
  x.cp = 2;
  x.ep = 4;
  x.moe_imbalance = 1.25;
  x.moe_capacity_factor = 1.5;
  x.moe_pad_to_capacity = true;
  x.ep_backend = EpBackend::kAllGather;
  x.allocator = AllocatorMode::kExpandable;
  x.allocator_gc_threshold = 0.8;
  x.loss_impl = LossImpl::kEager;  // with compile on, the default would be compiled
  x.loss_chunks = 4;               // (a round trip only: resolve_plan takes it with --loss-impl chunked)
  x.attention = AttentionCore::kEager;
  x.attention_dropout = true;
  x.moe_impl = MoeImpl::kLoop;
  x.sdpa_backend = SdpaBackend::kEfficient;
  x.sac_sdpa_ops = SacSdpaOps::kFlashEfficient;
  x.root_params = RootParams::kEmbeddingHead;
  x.keep_last_block = true;
  x.hpz_partition = 8;
  x.quantized_weights = true;
  x.quantized_gradients = true;
  return x;
}

Plan from_json(const Plan& p) {
  return plan_from_json(JsonObj(plan_to_json(p), "roundtrip"));
}

}  // namespace

TEST_CASE("knobs: a plan with every knob changed survives plan_to_flags and the run-record JSON exactly",
          "[knobs][roundtrip]") {
  const Plan x = all_changed();
  // Every field differs from the default, so a knob missing from the table would come back as its default.
  const Plan d;
  for (const Knob& k : plan_knobs()) {
    INFO(k.key);
    CHECK(k.get(x) != k.get(d));
  }
  const std::string flags = plan_to_flags(x);
  INFO(flags);
  CHECK(flags ==
        "--runtime deepspeed --zero 2 --shard-group 4 --tp 2 --seq 2048 --mbs 2 --grad-accum 3 --ac full "
        "--wrap 2 "
        "--prefetch 2 --reshard-after-forward false --precision bf16 --reduce-dtype bf16 --offload params "
        "--optimizer lion --lora-rank 16 --lora-targets q_proj,v_proj --lora-base nf4 --activation-offload 4 "
        "--async-tp "
        "--foreach-optimizer --compile --hold-logits --fp32-norm --rs-input-rs-stream --zero-grad-in-place "
        "--loss-dtype bf16 "
        "--loss-impl eager --loss-chunks 4 "
        "--sdpa-backend efficient --sac-sdpa-ops flash-efficient --root-params embedding-head "
        "--keep-last-block --fp8 rowwise "
        "--fp8-all-gather "
        "--attention eager --attention-dropout --moe-impl loop "
        "--allocator expandable --allocator-gc-threshold 0.8 --pp 2 --pp-schedule interleaved-1f1b "
        "--virtual-stages 3 --pp-layers 1,2,3 "
        "--cp 2 --ep 4 --moe-imbalance 1.25 --moe-capacity-factor 1.5 --moe-pad-to-capacity --ep-backend "
        "allgather "
        "--hpz-partition 8 --quantized-weights "
        "--quantized-gradients");
  CHECK(parse_flags(flags) == x);
  CHECK(from_json(x) == x);
  // Derived keys are written next to the knobs and accepted back.
  const Json j = plan_to_json(x);
  CHECK(j.size() == plan_knobs().size() + 3);
  CHECK(j.at("global_batch") == 1 * 2 * 3);  // dp (1, unresolved) x mbs x grad_accum
}

TEST_CASE(
    "knobs: transformers 5.23's experts implementations round-trip and grouped, the default, prints nothing",
    "[knobs][roundtrip]") {
  CHECK(plan_to_flags(Plan{}).find("--moe-impl") == std::string::npos);
  for (const MoeImpl m : {MoeImpl::kHfGroupedMm, MoeImpl::kHfEager, MoeImpl::kDeepSpeed}) {
    Plan x = all_changed();
    x.moe_impl = m;
    const std::string flags = plan_to_flags(x);
    INFO(flags);
    CHECK(flags.find(std::string("--moe-impl ") + to_string(m)) != std::string::npos);
    CHECK(parse_flags(flags) == x);
    CHECK(from_json(x) == x);
    SearchSpace sp;
    sp.fix(std::string("moe_impl=") + to_string(m));
    CHECK(sp.base.moe_impl == m);
  }
  CHECK(std::string(to_string(MoeImpl::kHfGroupedMm)) == "hf-grouped-mm");
  CHECK(std::string(to_string(MoeImpl::kHfEager)) == "hf-eager");
  CHECK(std::string(to_string(MoeImpl::kDeepSpeed)) == "deepspeed");
}

TEST_CASE("knobs: resolved plans over a sweep round-trip through flags and JSON", "[knobs][roundtrip]") {
  Setup s("llama3-8b", "dgx-h100", 16);
  int checked = 0;
  for (Runtime rt : EnumValues<Runtime>::v)
    for (int zero : {0, 1, 2, 3})
      for (int tp : {1, 2, 8})
        for (AcMode ac : EnumValues<AcMode>::v)
          for (Offload off : EnumValues<Offload>::v)
            for (Precision pr : {Precision::kBf16Mixed, Precision::kFp32})
              for (int group : {0, 2}) {
                Plan p;
                p.runtime = rt;
                p.zero = zero;
                p.tp = tp;
                p.ac = ac;
                p.offload = off;
                p.precision = pr;
                p.shard_group = group;
                p.compile = tp >= 2;  // async TP is compiled (torchtitan's CompileConfig)
                p.async_tp = tp == 8;
                Plan r;
                try {
                  r = resolve_plan(p, s.model, *s.cluster, 64);
                } catch (const InputError&) {
                  continue;
                }
                const std::string flags = plan_to_flags(r);
                INFO(flags);
                Plan back = parse_flags(flags);
                CHECK(resolve_plan(back, s.model, *s.cluster) == r);
                back.dp = r.dp, back.replicas = r.replicas;  // derived, not knobs
                back.sdpa_auto = r.sdpa_auto;
                CHECK(back == r);
                CHECK(resolve_plan(from_json(r), s.model, *s.cluster) == r);
                ++checked;
              }
  // Many combinations are refused (ZeRO-1 on FSDP, offload modes a runtime lacks, HSDP on deepspeed, ...);
  // the sweep must still cover a good share.
  CHECK(checked > 300);
}

TEST_CASE("knobs: every knob is accepted by the CLI and by plan --fix", "[knobs][fix]") {
  const Plan x = all_changed();
  const Plan d;
  for (const Knob& k : plan_knobs()) {
    const std::string v = k.get(x);
    INFO(k.key << " = " << v);
    // CLI: the knob's flag alone.
    const Plan cli =
        parse_flags(k.kind == KnobKind::kSwitch ? std::string(k.flag) : std::string(k.flag) + " " + v);
    CHECK(k.get(cli) == v);
    // --fix: searched knobs replace their value list, the others pin the base value of every candidate.
    SearchSpace sp;
    REQUIRE_NOTHROW(sp.fix(std::string(k.key) + "=" + v));
    const auto& searched = SearchSpace::searched_keys();
    if (std::find(searched.begin(), searched.end(), k.key) == searched.end()) {
      CHECK(k.get(sp.base) == v);
      CHECK(k.get(sp.base) != k.get(d));
      // A text knob's one value may hold commas itself (--pp-layers 1,2,3).
      if (k.kind != KnobKind::kText)
        CHECK_THROWS_WITH(sp.fix(std::string(k.key) + "=" + v + "," + v), Contains("not searched"));
    }
  }
  SearchSpace sp;
  sp.fix("runtime=fsdp1,deepspeed");
  CHECK(sp.runtimes == std::vector<Runtime>{Runtime::kFsdp1, Runtime::kDeepSpeed});
  sp.fix("reshard_after_forward=false");
  CHECK(sp.reshard_after_forward == std::vector<bool>{false});
  sp.fix("reduce-dtype=bf16");
  CHECK(sp.reduce == std::vector<Dtype>{Dtype::kBf16});
  sp.fix("offload=none,params");
  CHECK(sp.offload == std::vector<Offload>{Offload::kNone, Offload::kParams});
  // The flag's own name works too, with the flag's meaning: --foreach-optimizer clears fused_optimizer.
  sp.fix("foreach_optimizer=true");
  CHECK_FALSE(sp.base.fused_optimizer);
  sp.fix("fused_optimizer=true");
  CHECK(sp.base.fused_optimizer);
  // compile, async TP and float8 are searched knobs: --fix replaces their value list.
  sp.fix("compile=true");
  sp.fix("async-tp=true");
  sp.fix("fp8=none,tensorwise");
  CHECK(sp.compile == std::vector<bool>{true});
  CHECK(sp.async_tp == std::vector<bool>{true});
  CHECK(sp.fp8 == std::vector<Fp8>{Fp8::kNone, Fp8::kTensorwise});
  CHECK_THROWS_WITH(sp.fix("mbs=0"), Contains("--fix mbs") && Contains("[1, 65536]"));
  CHECK_THROWS_WITH(sp.fix("seq=0"), Contains("--fix seq"));
  CHECK_THROWS_WITH(sp.fix("compiel=true"), Contains("did you mean \"compile\""));
}

TEST_CASE("knobs: pinned non-searched knobs reach every candidate, a pinned grad_accum filters them",
          "[knobs][fix][enumerate]") {
  Setup s("llama3-8b", "dgx-h100", 8);
  SearchSpace sp;
  sp.fix("zero=3");
  sp.fix("tp=1");
  sp.fix("compile=true");
  sp.fix("hold_logits=true");
  sp.fix("loss_dtype=bf16");
  sp.fix("seq=2048");
  sp.fix("grad_accum=2");
  sp.global_batch = 16;
  SearchStats st;
  const auto c = enumerate_candidates(s.model, *s.cluster, sp, st);
  REQUIRE_FALSE(c.empty());
  for (const Plan& p : c) {
    CHECK(p.compile);
    CHECK(p.hold_logits);
    CHECK(p.loss_dtype == Dtype::kBf16);
    CHECK(p.seq == 2048);
    // global batch 16 = dp 8 x mbs x grad_accum: only mbs 1 gives grad_accum 2.
    CHECK(p.grad_accum == 2);
    CHECK(p.mbs == 1);
  }
  CHECK(st.rejections.count[Rejection::kGradAccumPinned] > 0);
}

TEST_CASE("offload: combinations a runtime does not have are refused naming --offload", "[knobs][offload]") {
  Setup s("llama3-8b", "dgx-h100", 8);
  auto plan = [](Runtime rt, int zero, Offload off, int accum = 1) {
    Plan p;
    p.runtime = rt;
    p.zero = zero;
    p.offload = off;
    p.grad_accum = accum;
    return p;
  };
  auto refused = [&](const Plan& p, const char* why) {
    CHECK_THROWS_WITH(resolve_plan(p, s.model, *s.cluster), Contains("--offload") && Contains(why));
  };
  // FSDP has no optimizer-only offload.
  refused(plan(Runtime::kFsdp2, 3, Offload::kOptimizer), "no optimizer-only offload");
  refused(plan(Runtime::kFsdp1, 2, Offload::kOptimizer), "no optimizer-only offload");
  // DeepSpeed: offload_optimizer from stage 1, offload_param only in stage 3.
  refused(plan(Runtime::kDeepSpeed, 0, Offload::kOptimizer), "stage 1 up");
  refused(plan(Runtime::kDeepSpeed, 2, Offload::kParams), "only in ZeRO stage 3");
  // ZeRO-0 is DDP: no offload.
  refused(plan(Runtime::kFsdp2, 0, Offload::kParams), "DDP");
  // FSDP1 CPU offload and gradient accumulation outside no_sync().
  refused(plan(Runtime::kFsdp1, 3, Offload::kParams, 4), "no_sync");
  // What each runtime has.
  for (const Plan& ok :
       {plan(Runtime::kDeepSpeed, 1, Offload::kOptimizer), plan(Runtime::kDeepSpeed, 3, Offload::kOptimizer),
        plan(Runtime::kDeepSpeed, 3, Offload::kParams), plan(Runtime::kFsdp2, 3, Offload::kParams),
        plan(Runtime::kFsdp2, 2, Offload::kParams, 4), plan(Runtime::kFsdp1, 3, Offload::kParams)})
    CHECK_NOTHROW(resolve_plan(ok, s.model, *s.cluster));
}

TEST_CASE("offload: emitters write each runtime's offload settings, never a stage-0 offload",
          "[knobs][offload][emit]") {
  Setup s("llama3-8b", "dgx-h100", 8);
  auto resolved = [&](Runtime rt, int zero, Offload off) {
    Plan p;
    p.runtime = rt;
    p.zero = zero;
    p.offload = off;
    return resolve_plan(p, s.model, *s.cluster, 8);
  };
  const Json ds3 = Json::parse(emit_deepspeed(resolved(Runtime::kDeepSpeed, 3, Offload::kParams), s.model));
  CHECK(ds3["zero_optimization"]["offload_param"]["device"] == "cpu");
  CHECK(ds3["zero_optimization"]["offload_optimizer"]["device"] == "cpu");
  const Json ds1 =
      Json::parse(emit_deepspeed(resolved(Runtime::kDeepSpeed, 1, Offload::kOptimizer), s.model));
  CHECK(ds1["zero_optimization"]["stage"] == 1);
  CHECK(ds1["zero_optimization"]["offload_optimizer"]["device"] == "cpu");
  CHECK_FALSE(ds1["zero_optimization"].contains("offload_param"));
  const Json ds0 = Json::parse(emit_deepspeed(resolved(Runtime::kDeepSpeed, 0, Offload::kNone), s.model));
  CHECK_FALSE(ds0["zero_optimization"].contains("offload_optimizer"));
  const std::string py = emit_fsdp2(resolved(Runtime::kFsdp2, 3, Offload::kParams), s.model, 8);
  // The script passes offload_policy=CPUOffloadPolicy() to fully_shard when PLAN offload_params is True.
  CHECK(py.find("offload_params=True,") != std::string::npos);
  const std::string plain = emit_fsdp2(resolved(Runtime::kFsdp2, 3, Offload::kNone), s.model, 8);
  CHECK(plain.find("offload_params=False,") != std::string::npos);
  const std::string toml = emit_torchtitan_toml(resolved(Runtime::kFsdp2, 3, Offload::kParams), s.model, 8);
  CHECK(toml.find("enable_cpu_offload = true") != std::string::npos);
  CHECK(emit_torchtitan(resolved(Runtime::kFsdp2, 3, Offload::kParams), s.model, 8)
            .find("enable_cpu_offload=True,") != std::string::npos);
}

TEST_CASE("emitters: the fsdp2 and torchtitan files name the full plan flags", "[knobs][emit]") {
  Setup s("llama3-8b", "dgx-h100", 8);
  Plan p;
  p.compile = true;
  p.ac = AcMode::kSelective;
  p = resolve_plan(p, s.model, *s.cluster, 8);
  const std::string flags = plan_to_flags(p);
  CHECK(flags.find("--ac selective") != std::string::npos);
  CHECK(flags.find("--compile") != std::string::npos);
  CHECK(emit_fsdp2(p, s.model, 8).find("Plan: " + flags + "\n") != std::string::npos);
  CHECK(emit_torchtitan_toml(p, s.model, 8).find("# plan: " + flags + "\n") != std::string::npos);
  CHECK(emit_torchtitan(p, s.model, 8).find("Plan: " + flags + "\n") != std::string::npos);
}
