// Every plan knob reaches every emitter: set to a value other than a base plan's, a knob that moves the
// prediction either changes what `--emit KIND` writes (the config, or a note of what the prediction
// assumed) or the emitter refuses the plan with an --emit error naming it. Walks the knob table
// (simulator/plan/knobs.hpp), so a knob added later cannot be dropped silently by an emitter.
#include <fmt/format.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <set>

#include "core/error.hpp"
#include "plan_helpers.hpp"
#include "planner/emit.hpp"
#include "simulator/plan/knobs.hpp"

using namespace shardplan;

namespace {

const char* const kKinds[] = {"fsdp2", "deepspeed", "torchtitan", "torchtitan-toml"};

/// What an emitter says about a plan, less the printed repro line (plan_to_flags, which names every knob
/// anyway): the output and its notes (the DeepSpeed JSON has no comments; the CLI prints its notes on
/// stderr).
std::string emitted(const std::string& kind, const Plan& p, const ModelGraph& model) {
  std::string out = emit(kind, p, model, 16, 8);
  const std::string flags = plan_to_flags(p);
  for (std::size_t at = out.find(flags); at != std::string::npos; at = out.find(flags, at))
    out.erase(at, flags.size());
  for (const std::string& n : emit_notes(kind, p)) out += "\n" + n;
  return out;
}

/// Values of `k` to try, other than `current`. kText knobs take examples from `text_examples`: a kText knob
/// without examples fails the test (add some).
std::vector<std::string> candidates(const Knob& k, const std::string& current) {
  static const std::map<std::string, std::vector<std::string>> text_examples = {
      {"pp_layers", {"15,17", "17,15"}},
      {"lora_targets", {"q_proj,v_proj", "all-linear"}},
      {"activation_offload", {"all", "2"}}};
  std::vector<std::string> out;
  switch (k.kind) {
    case KnobKind::kEnum:
    case KnobKind::kBool:
    case KnobKind::kSwitch:
      out = k.values;
      break;
    case KnobKind::kInt:
      for (std::int64_t v : {std::int64_t{0}, std::int64_t{1}, std::int64_t{2}, std::int64_t{4}, k.lo})
        if (v >= k.lo && v <= k.hi) out.push_back(std::to_string(v));
      break;
    case KnobKind::kDouble:
      for (double v : {k.dlo + 0.5, 2.0, (k.dlo + k.dhi) / 2})
        if (v >= k.dlo && v < k.dhi) out.push_back(fmt::format("{}", v));
      break;
    case KnobKind::kText: {
      const auto it = text_examples.find(k.key);
      if (it == text_examples.end()) FAIL("no example values for the text knob " << k.key);
      out = it->second;
      break;
    }
  }
  std::vector<std::string> distinct;
  for (const auto& v : out)
    if (v != current && std::find(distinct.begin(), distinct.end(), v) == distinct.end())
      distinct.push_back(v);
  return distinct;
}

struct Base {
  std::string name;
  const ptest::Setup* setup;
  Plan plan;
};

bool same_prediction(const Result& a, const Result& b) {
  return a.step_s == b.step_s && a.peak_bytes == b.peak_bytes &&
         a.peak_reserved_bytes == b.peak_reserved_bytes;
}

}  // namespace

TEST_CASE("emitters: every knob of the table changes the emitted text or is refused", "[emit][knobs]") {
  const ptest::Setup dense("llama3-8b", "dgx-h100", 16), moe("qwen3-30b-a3b", "dgx-h100", 16);
  // Blackwell, where --fp8 mxfp8 / nvfp4 resolve (block-scaled tensor cores, simulator/plan/plan.cpp).
  const ptest::Setup blackwell("llama3-8b", "dgx-b200", 16);
  // Base plans that together make every knob valid somewhere: a dense ZeRO-3 selective-AC plan, DDP
  // (ZeRO-0), a 2048-token sequence (--attention fused-softmax), pipelines (single-stage 1F1B at ZeRO-2 for
  // FSDP2 and ZeRO-1 for DeepSpeed; interleaved), float8 tensorwise (float8 all-gather), a B200 plan (--fp8
  // mxfp8 / nvfp4), and an MoE model with and without expert parallelism.
  std::vector<Base> bases;
  auto add = [&](const std::string& name, const ptest::Setup& s, auto edit) {
    Plan p;
    p.zero = 3;
    p.ac = AcMode::kSelective;
    p.seq = 4096;
    p.grad_accum = 2;
    edit(p);
    bases.push_back({name, &s, p});
  };
  add("zero3 selective", dense, [](Plan&) {});
  add("zero0", dense, [](Plan& p) { p.zero = 0; });
  add("seq 2048", dense, [](Plan& p) { p.seq = 2048; });  // Megatron's fused softmax takes seq <= 2048
  add("pp2 1f1b zero2", dense,
      [](Plan& p) { p.pp = 2, p.zero = 2, p.grad_accum = 4, p.pp_schedule = PpSchedule::k1F1B; });
  add("pp2 1f1b zero1", dense,
      [](Plan& p) { p.pp = 2, p.zero = 1, p.grad_accum = 4, p.pp_schedule = PpSchedule::k1F1B; });
  add("pp2 interleaved", dense,
      [](Plan& p) { p.pp = 2, p.zero = 2, p.grad_accum = 4, p.pp_schedule = PpSchedule::kInterleaved1F1B; });
  add("fp8 tensorwise", dense, [](Plan& p) { p.fp8 = Fp8::kTensorwise; });
  add("blackwell", blackwell, [](Plan&) {});
  add("moe ep2", moe, [](Plan& p) { p.ep = 2; });
  add("moe ep1", moe, [](Plan&) {});
  // Activation offload: torch's save_on_cpu without AC (fsdp2), DeepSpeed's cpu_checkpointing under full AC.
  add("ac none", dense, [](Plan& p) { p.ac = AcMode::kNone; });
  add("ac full", dense, [](Plan& p) { p.ac = AcMode::kFull; });
  // torchtitan's ChunkedLossWrapper (--loss-chunks resolves only with it).
  add("chunked loss", dense, [](Plan& p) { p.loss_impl = LossImpl::kChunked; });

  std::map<std::string, int> valid;      // knob -> (base, kind, value) cases that resolved
  std::map<std::string, int> expressed;  // ... whose text changed
  std::map<std::string, int> refused;    // ... that the emitter refused
  std::map<std::string, int> no_effect;  // ... with unchanged text and prediction
  for (const std::string kind : kKinds) {
    const Runtime target = emit_target_runtime(kind);
    for (const Base& b : bases) {
      const ptest::Setup& s = *b.setup;
      Plan base = b.plan;
      base.runtime = target;
      Plan rb;
      std::string base_text;
      try {
        rb = s.resolve(base);
        base_text = emitted(kind, rb, s.model);
      } catch (const InputError&) {
        continue;  // this base is not a plan of this output (a pipeline for fsdp2, HSDP for deepspeed)
      }
      for (const Knob& k : plan_knobs()) {
        for (const std::string& v : candidates(k, k.get(rb))) {
          Plan p = base;
          if (!k.set(p, v).empty()) continue;
          Plan rp;
          try {
            rp = s.resolve(p);
          } catch (const InputError&) {
            continue;  // not a valid value on this base
          }
          if (k.get(rp) == k.get(rb)) continue;  // resolve_plan undid it (e.g. the base's value spelled out)
          INFO(kind << ", base \"" << b.name << "\": " << k.flag << " " << v);
          ++valid[k.key];
          std::string text;
          try {
            text = emitted(kind, rp, s.model);
          } catch (const InputError& e) {
            // One line, about --emit, naming the knob (by flag or, for the parallel degrees, key).
            const std::string what = e.what();
            CHECK(what.find("--emit") != std::string::npos);
            CHECK(what.find('\n') == std::string::npos);
            CHECK((what.find(k.flag) != std::string::npos ||
                   what.find(std::string(k.key) + " ") != std::string::npos ||
                   k.key == std::string("runtime")));
            ++refused[k.key];
            continue;
          }
          if (text != base_text) {
            ++expressed[k.key];
            continue;
          }
          // Unchanged and not refused: allowed only when the knob does not move the prediction on this plan
          // (zero_grad_in_place under FSDP, sac_sdpa_ops without cuDNN attention, ...).
          Simulator sim(s.model, *s.cluster, *s.costs);
          const Result with = sim.run(rp);
          Simulator sim0(s.model, *s.cluster, *s.costs);
          const Result without = sim0.run(rb);
          INFO("step " << without.step_s << " -> " << with.step_s << " s, peak " << without.peak_bytes
                       << " -> " << with.peak_bytes << " B, reserved " << without.peak_reserved_bytes
                       << " -> " << with.peak_reserved_bytes << " B");
          CHECK(same_prediction(with, without));
          ++no_effect[k.key];
        }
      }
    }
  }
  // Every knob was exercised on some base and output: a knob no base can take fails here (add a base).
  // The expert capacity is Megatron-core's only (--runtime megatron, which has no emitter: emit.cpp refuses
  // it): every emitter's runtime refuses it at resolve_plan (capabilities_moe_capacity.cpp), which this
  // checks, so a runtime that gains it must gain its emitter setting too.
  const std::set<std::string> megatron_only = {"moe_capacity_factor", "moe_pad_to_capacity"};
  for (const Knob& k : plan_knobs()) {
    INFO(k.key << ": " << valid[k.key] << " valid cases, " << expressed[k.key] << " expressed, "
               << refused[k.key] << " refused, " << no_effect[k.key] << " without effect");
    if (megatron_only.count(k.key)) {
      CHECK(valid[k.key] == 0);
      continue;
    }
    CHECK(valid[k.key] > 0);
    CHECK(expressed[k.key] + refused[k.key] > 0);
  }
}

TEST_CASE("emitters: the recent knobs, written or refused per output", "[emit][knobs]") {
  const ptest::Setup s("llama3-8b", "dgx-h100", 16);
  Plan base;
  base.zero = 3;
  base.ac = AcMode::kSelective;
  base.seq = 4096;
  auto plan = [&](const std::string& kind, auto edit) {
    Plan p = base;
    p.runtime = emit_target_runtime(kind);
    edit(p);
    return s.resolve(p);
  };
  auto refusal = [&](const std::string& kind, const Plan& p) -> std::string {
    try {
      emit(kind, p, s.model, 16, 8);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };

  SECTION("--sdpa-backend: sdpa_kernel in the script, varlen (FlashAttention) in torchtitan 0.3.0") {
    auto cudnn = [](Plan& p) { p.sdpa_backend = SdpaBackend::kCudnn; };
    auto flash = [](Plan& p) { p.sdpa_backend = SdpaBackend::kFlash; };
    CHECK_THAT(emit("fsdp2", plan("fsdp2", cudnn), s.model, 16, 8),
               Catch::Contains("sdpa_backend=\"CUDNN_ATTENTION\""));
    CHECK_THAT(emit("fsdp2", plan("fsdp2", [](Plan&) {}), s.model, 16, 8),
               Catch::Contains("sdpa_backend=None"));
    CHECK_THAT(emit("torchtitan", plan("torchtitan", flash), s.model, 16, 8),
               Catch::Contains("model_registry(\"8B\", attn_backend=\"varlen\")"));
    // torchtitan 0.3.0 has no SDPA for language models (get_attention_config raises for "sdpa").
    CHECK_THAT(refusal("torchtitan", plan("torchtitan", cudnn)), Catch::Contains("--sdpa-backend cudnn"));
    CHECK_THAT(emit("torchtitan-toml", plan("torchtitan-toml", cudnn), s.model, 16, 8),
               Catch::Contains("# NOTE: --sdpa-backend cudnn"));
  }
  SECTION("--attention and --attention-dropout") {
    auto eager = [](Plan& p) { p.attention = AttentionCore::kEager, p.attention_dropout = true; };
    const std::string script = emit("fsdp2", plan("fsdp2", eager), s.model, 16, 8);
    CHECK_THAT(script, Catch::Contains("attention=\"eager\", attention_dropout=0.1"));
    CHECK_THAT(script, Catch::Contains("attn_implementation=\"eager\""));
    CHECK_THAT(refusal("torchtitan", plan("torchtitan", eager)), Catch::Contains("--attention eager"));
    CHECK_THAT(
        refusal("torchtitan-toml", plan("torchtitan-toml", [](Plan& p) { p.attention_dropout = true; })),
        Catch::Contains("--attention-dropout"));
    CHECK_THAT(
        refusal("fsdp2",
                plan("fsdp2", [](Plan& p) { p.attention = AttentionCore::kFusedSoftmax, p.seq = 2048; })),
        Catch::Contains("--attention fused-softmax"));
    CHECK(refusal("deepspeed", plan("deepspeed", eager)).empty());  // the model code's: a note
    const auto notes = emit_notes("deepspeed", plan("deepspeed", eager));
    CHECK(std::count_if(notes.begin(), notes.end(), [](const std::string& n) {
            return n.rfind("--attention eager", 0) == 0 || n.rfind("--attention-dropout", 0) == 0;
          }) == 2);
  }
  SECTION("--allocator and its GC threshold: PYTORCH_CUDA_ALLOC_CONF before torch starts") {
    auto alloc = [](Plan& p) { p.allocator = AllocatorMode::kExpandable, p.allocator_gc_threshold = 0.8; };
    const std::string conf =
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,garbage_collection_threshold:0.8";
    const std::string script = emit("fsdp2", plan("fsdp2", alloc), s.model, 16, 8);
    // Set before the script's `import torch` (the caching allocator reads it when it starts).
    CHECK(script.find("os.environ[\"PYTORCH_CUDA_ALLOC_CONF\"] = \"expandable_segments:True,"
                      "garbage_collection_threshold:0.8\"") < script.find("import torch"));
    CHECK_THAT(emit("torchtitan", plan("torchtitan", alloc), s.model, 16, 8),
               Catch::Contains("  " + conf + " PYTHONPATH=. torchrun"));
    const auto notes = emit_notes("deepspeed", plan("deepspeed", alloc));
    CHECK(std::find(notes.begin(), notes.end(),
                    "--allocator / --allocator-gc-threshold: launch with " + conf) != notes.end());
  }
  SECTION("--sac-sdpa-ops flash-efficient: the script recomputes cuDNN attention; torchtitan 0.3.0 cannot") {
    auto old = [](Plan& p) { p.sac_sdpa_ops = SacSdpaOps::kFlashEfficient; };
    CHECK_THAT(emit("fsdp2", plan("fsdp2", old), s.model, 16, 8),
               Catch::Contains("sac_sdpa_ops=\"flash-efficient\""));
    CHECK_THAT(refusal("torchtitan", plan("torchtitan", old)),
               Catch::Contains("--sac-sdpa-ops flash-efficient"));
  }
  SECTION("the loop knobs in the script: loss dtype, compiled loss, held logits, in-place zero_grad") {
    const std::string script = emit("fsdp2",
                                    plan("fsdp2",
                                         [](Plan& p) {
                                           p.loss_dtype = Dtype::kBf16, p.hold_logits = true,
                                           p.zero_grad_in_place = true, p.compile = true;
                                         }),
                                    s.model, 16, 8);
    // --compile without --loss-impl compiles the loss as well (Plan::loss()).
    CHECK_THAT(script, Catch::Contains("loss_dtype=\"bf16\", compile_loss=True, hold_logits=True, "
                                       "zero_grad_in_place=True"));
    CHECK_THAT(refusal("torchtitan", plan("torchtitan", [](Plan& p) { p.zero_grad_in_place = true; })),
               Catch::Contains("--zero-grad-in-place"));
  }
}

TEST_CASE("emitters: --ep-backend deepep is written for torchtitan, allgather refused", "[emit][knobs]") {
  const ptest::Setup s("qwen3-30b-a3b", "dgx-h100", 16);
  Plan p;
  p.seq = 4096;
  p.ep = 2;
  p.ep_backend = EpBackend::kDeepEp;
  const Plan rp = s.resolve(p);
  // torchtitan 0.3.0: the qwen3 registry's moe_comm_backend; the TOML era's parallelism key.
  CHECK_THAT(emit("torchtitan", rp, s.model, 16, 8),
             Catch::Contains("model_registry(\"30B-A3B\", moe_comm_backend=\"deepep\")"));
  CHECK_THAT(emit("torchtitan-toml", rp, s.model, 16, 8),
             Catch::Contains("expert_parallel_comm_backend = \"deepep\""));
  // The default (all-to-all) writes neither.
  p.ep_backend = EpBackend::kAllToAll;
  CHECK(emit("torchtitan", s.resolve(p), s.model, 16, 8).find("moe_comm_backend") == std::string::npos);
  // An all-gather plan (a megatron plan re-targeted at torchtitan) is refused naming the knob.
  Plan g = rp;
  g.ep_backend = EpBackend::kAllGather;
  try {
    emit("torchtitan", g, s.model, 16, 8);
    FAIL("expected a refusal");
  } catch (const InputError& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("--ep-backend allgather"));
  }
}

TEST_CASE("emitters: the FSDP2 script loads transformers' experts implementation the plan simulated",
          "[emit][knobs]") {
  const ptest::Setup s("qwen3-30b-a3b", "dgx-h100", 16);
  Plan p;
  p.seq = 4096;
  // torchtitan's grouped experts and transformers 4's loop: transformers' default (grouped_mm) is loaded.
  CHECK_THAT(emit("fsdp2", s.resolve(p), s.model, 16, 8), Catch::Contains("HF_EXPERTS = None\n"));
  p.moe_impl = MoeImpl::kHfGroupedMm;
  CHECK_THAT(emit("fsdp2", s.resolve(p), s.model, 16, 8), Catch::Contains("HF_EXPERTS = \"grouped_mm\"\n"));
  p.moe_impl = MoeImpl::kHfEager;
  const Plan rp = s.resolve(p);
  const std::string py = emit("fsdp2", rp, s.model, 16, 8);
  CHECK_THAT(py, Catch::Contains("HF_EXPERTS = \"eager\"\n") &&
                     Catch::Contains("{\"experts_implementation\": HF_EXPERTS} if HF_EXPERTS"));
  // DeepSpeed has no setting: a note of what the prediction assumed; torchtitan runs only grouped GEMMs.
  const auto notes = emit_notes("deepspeed", rp);
  CHECK(std::any_of(notes.begin(), notes.end(),
                    [](const std::string& n) { return n.find("assumed \"eager\"") != std::string::npos; }));
  try {
    emit("torchtitan", rp, s.model, 16, 8);
    FAIL("expected a refusal");
  } catch (const InputError& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("--moe-impl hf-eager"));
  }
}

TEST_CASE("emitters: --moe-impl deepspeed leaves a note of the DeepSpeed-MoE layer the prediction assumed",
          "[emit][knobs]") {
  // DeepSpeed's config has no MoE setting (the model code builds deepspeed.moe.layer.MoE or not): a note.
  const ptest::Setup s("qwen3-30b-a3b", "dgx-h100", 16);
  Plan p;
  p.seq = 4096;
  p.runtime = Runtime::kDeepSpeed;
  p.moe_impl = MoeImpl::kDeepSpeed;
  p.moe_capacity_factor = 1.25;
  const auto notes = emit_notes("deepspeed", s.resolve(p));
  CHECK(std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
    return n.find("--moe-impl deepspeed") != std::string::npos &&
           n.find("min_capacity 4") != std::string::npos;
  }));
  p.moe_impl = MoeImpl::kGrouped;
  p.moe_capacity_factor = 0;
  const auto none = emit_notes("deepspeed", s.resolve(p));
  CHECK(std::none_of(none.begin(), none.end(), [](const std::string& n) {
    return n.find("--moe-impl deepspeed") != std::string::npos;
  }));
}
