// The search enumerates what each runtime's capability table allows and searches the plans that win: every
// listed plan accepted by its runtime, no DeepSpeed async TP, Llama-3.1-405B on 16,384 H100s recommended at
// least as fast as the Llama 3 recipe, pinned virtual stages honoured, every --fix key honoured or refused
// with a sentence, the no-plan message saying what would work, and --emit's capabilities constraining the
// search.
#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <map>
#include <set>

#include "plan_helpers.hpp"
#include "planner/emit_target.hpp"
#include "planner/search.hpp"
#include "simulator/plan/plan.hpp"
#include "tests/simulator/sim_helpers.hpp"

using namespace shardplan;
using shardplan::ptest::Setup;

namespace {

/// The CLI's default space: three runtimes (megatron added where asked), compile and async TP searched.
SearchSpace cli_like(std::int64_t global_batch, std::int64_t seq, bool megatron = false) {
  SearchSpace sp;
  sp.runtimes = {Runtime::kFsdp2, Runtime::kFsdp1, Runtime::kDeepSpeed};
  if (megatron) sp.runtimes.push_back(Runtime::kMegatron);
  sp.compile = {false, true};
  sp.async_tp = {false, true};
  sp.global_batch = global_batch;
  sp.seq = seq;
  return sp;
}

SearchOptions options(int top = 100) {
  SearchOptions o;
  o.threads = 2;
  o.top = top;
  return o;
}

/// Every plan the outcome names: listed, Pareto front, fastest.
std::vector<const Plan*> named_plans(const SearchOutcome& o) {
  std::vector<const Plan*> v;
  for (const Result& r : o.plans) v.push_back(&r.plan);
  for (const Result& r : o.pareto) v.push_back(&r.plan);
  if (o.fastest) v.push_back(&o.fastest->plan);
  return v;
}

/// The Llama 3 recipe for 405B on 16,384 H100s (Llama 3 paper, table 4; torchtitan's llama3_405b config):
/// FSDP (ZeRO-2 under PP), TP 8, PP 16 interleaved with 8 stages per rank, selective AC, compile, async TP.
Plan llama3_recipe() {
  Plan p;
  p.runtime = Runtime::kFsdp2;
  p.zero = 2;
  p.tp = 8;
  p.pp = 16;
  p.pp_schedule = PpSchedule::kInterleaved1F1B;
  p.virtual_stages = 8;
  p.ac = AcMode::kSelective;
  p.compile = true;
  p.async_tp = true;
  p.seq = 8192;
  return p;
}

}  // namespace

TEST_CASE("per runtime, every plan the search names is accepted by its capability table",
          "[capabilities][search][real]") {
  // Llama-3-8B on 16 H100s, 32 x 2,048 tokens, all four runtimes, compile and async TP searched.
  Setup s("llama3-8b", "dgx-h100", 16);
  const SearchOutcome o = search_plans(s.model, *s.cluster, *s.costs, cli_like(32, 2048, true), options());
  REQUIRE_FALSE(o.plans.empty());
  std::set<Runtime> runtimes;
  for (const Plan* p : named_plans(o)) {
    INFO(plan_to_flags(*p));
    CHECK_FALSE(capability_refusal(*p, p->dp).has_value());
    CHECK_FALSE((p->runtime == Runtime::kDeepSpeed && p->async_tp));
    CHECK_FALSE((p->async_tp && !p->compile && p->runtime != Runtime::kMegatron));
    runtimes.insert(p->runtime);
  }
  CHECK(runtimes.size() == 4);  // each runtime has a family in the listing
  // What the table excluded is counted by feature.
  CHECK(o.stats.rejections.capability.count(Feature::kZero1) == 1);
}

TEST_CASE("no DeepSpeed async-TP plan: Llama-3-70B on 64 H100s", "[capabilities][search][real]") {
  // The case: the tie-break named DeepSpeed with async TP, which AutoTP does not have.
  Setup s("llama3-70b", "dgx-h100", 64);
  const SearchOutcome o = search_plans(s.model, *s.cluster, *s.costs, cli_like(256, 8192), options());
  REQUIRE_FALSE(o.plans.empty());
  for (const Plan* p : named_plans(o)) {
    INFO(plan_to_flags(*p));
    CHECK_FALSE((p->runtime == Runtime::kDeepSpeed && p->async_tp));
    CHECK_FALSE(capability_refusal(*p, p->dp).has_value());
  }
}

TEST_CASE("acceptance: Llama-3.1-405B on 16,384 H100s, 2,048 x 8,192: at least as fast as the Llama 3 recipe",
          "[capabilities][search][real][acceptance]") {
  Setup s("llama3.1-405b", "dgx-h100", 16384);
  const Result recipe = s.run(s.resolve(llama3_recipe(), 2048));
  REQUIRE(recipe.fits);
  const SearchOutcome o = search_plans(s.model, *s.cluster, *s.costs, cli_like(2048, 8192), options(10));
  REQUIRE_FALSE(o.plans.empty());
  INFO(o.explanation);
  INFO("recipe " << recipe.tokens_per_s_per_gpu << " tokens/s/GPU");
  const Result& rec = o.plans[0];
  CHECK(rec.tokens_per_s_per_gpu >= recipe.tokens_per_s_per_gpu);
  CHECK_FALSE(capability_refusal(rec.plan, rec.plan.dp).has_value());
  // Pinning the recipe by --fix finds exactly it.
  SearchSpace pinned = cli_like(2048, 8192);
  for (const char* f : {"runtime=fsdp2", "zero=2", "tp=8", "pp=16", "pp_schedule=interleaved-1f1b",
                        "virtual_stages=8", "ac=selective", "compile=true", "async_tp=true", "mbs=1"})
    pinned.fix(f);
  const SearchOutcome p = search_plans(s.model, *s.cluster, *s.costs, pinned, options(3));
  REQUIRE_FALSE(p.plans.empty());
  CHECK(p.plans[0].plan.virtual_stages == 8);
  CHECK(p.plans[0].plan.pp == 16);
  CHECK(p.plans[0].tokens_per_s_per_gpu == Approx(recipe.tokens_per_s_per_gpu).epsilon(1e-9));
}

TEST_CASE("pinned virtual stages: --fix virtual_stages=8 gives plans with 8 virtual stages",
          "[capabilities][search][real]") {
  Setup s("llama3.1-405b", "dgx-h100", 16384);
  SearchSpace sp = cli_like(2048, 8192);
  sp.fix("virtual_stages=8");
  const SearchOutcome o = search_plans(s.model, *s.cluster, *s.costs, sp, options(20));
  REQUIRE_FALSE(o.plans.empty());
  for (const Plan* p : named_plans(o)) {
    INFO(plan_to_flags(*p));
    CHECK(p->virtual_stages == 8);
    CHECK(p->pp > 1);
    CHECK(p->pp_schedule == PpSchedule::kInterleaved1F1B);  // the only schedule with 8 stages per rank
  }
}

TEST_CASE("global batch 1,024 on 16,384 H100s: the PP x CP plans that divide it are searched",
          "[capabilities][search][real]") {
  // Without CP: no plan without PP (dp >= 16,384 / 8 = 2,048 > 1,024 sequences), and at TP 8 and PP p,
  // dp = 2,048 / p leaves 1,024 / dp = p / 2 micro-batches, fewer than the pp ranks. CP 2 at TP 8 and PP 16
  // gives dp 64 and 16 micro-batches.
  Setup s("llama3.1-405b", "dgx-h100", 16384);
  const SearchOutcome o = search_plans(s.model, *s.cluster, *s.costs, cli_like(1024, 8192), options(5));
  REQUIRE_FALSE(o.plans.empty());
  INFO(o.explanation);
  for (const Result& r : o.plans) CHECK(r.plan.global_batch() == 1024);
  bool cp = false;
  for (const Result& r : o.plans) cp = cp || r.plan.cp > 1;
  CHECK(cp);
}

TEST_CASE("no plan from the batch arithmetic: the error says what would work, --fix only when given",
          "[capabilities][search][cli]") {
  const auto dir = ptest::temp_dir("batch");
  // 3 sequences on 16,384 GPUs: dp >= 16,384 / (8 x 32 x 16) = 4 never divides 3.
  const std::string base =
      "plan --model llama3-8b --cluster dgx-h100 --gpus 16384 --global-batch 3 --seq 2048";
  CHECK(ptest::run_cli(base, dir / "out", dir / "err") == 2);
  std::string err = ptest::read_text(dir / "err");
  CHECK(err.find("--global-batch") != std::string::npos);
  CHECK(err.find("global batch 3 leaves no plan on 16384 GPUs") != std::string::npos);
  CHECK(err.find("what would work") != std::string::npos);
  CHECK(err.find("--fix") == std::string::npos);
  CHECK(err.find('\n') == err.size() - 1);  // one line
  CHECK(ptest::run_cli(base + " --fix ac=full", dir / "out", dir / "err") == 2);
  err = ptest::read_text(dir / "err");
  CHECK(err.find("with the pinned --fix ac") != std::string::npos);
}

TEST_CASE("every --fix key of the knob table is honoured or refused with a sentence", "[capabilities][fix]") {
  // A 4-block Llama-2-7B shape on 8 H100s, 8 x 2,048 tokens, FSDP2 / FSDP1 / DeepSpeed: each knob pinned to a
  // value other than its default must reach every listed plan, or the search must refuse with a sentence
  // naming it (nothing pinned is silently dropped).
  Setup s(ModelGraph::from_spec(shardplan::test::small_llama(4)), load_cluster_spec("dgx-h100"), 8);
  // Values where the generic choice (the second enum value, default + 1) is no plan of this model.
  const std::map<std::string, std::string> value = {{"seq", "1024"},
                                                    {"shard_group", "4"},
                                                    {"tp", "2"},
                                                    {"grad_accum", "2"},
                                                    {"wrap", "2"},
                                                    {"pp", "2"},
                                                    {"virtual_stages", "2"},
                                                    {"pp_layers", "1,1,1,1"},
                                                    {"cp", "2"},
                                                    {"ep", "2"},
                                                    {"moe_imbalance", "1.5"},
                                                    {"allocator_gc_threshold", "0.5"},
                                                    {"zero", "2"},
                                                    {"mbs", "2"},
                                                    {"prefetch", "2"},
                                                    {"fp8_all_gather", "true"},
                                                    {"root_params", "embedding-head"},
                                                    {"attention", "eager"},
                                                    {"sdpa_backend", "flash"}};
  for (const Knob& k : plan_knobs()) {
    std::string v;
    if (auto it = value.find(k.key); it != value.end())
      v = it->second;
    else if (!k.values.empty())
      v = k.values.size() > 1 && k.values[0] == k.default_text ? k.values[1] : k.values[0];
    else
      v = std::to_string(k.lo + 1);
    if (k.kind == KnobKind::kSwitch) v = std::string(k.switch_sets) == "true" ? "true" : "false";
    INFO(k.key << "=" << v);
    SearchSpace sp;
    sp.runtimes = {Runtime::kFsdp2, Runtime::kFsdp1, Runtime::kDeepSpeed};
    sp.mbs = {1, 2};
    sp.tp = {1, 2};
    sp.ac = {AcMode::kNone, AcMode::kFull};
    sp.wrap = {1};
    sp.prefetch = {1};
    sp.global_batch = 8;
    sp.seq = 2048;
    try {
      sp.fix(std::string(k.key) + "=" + v);
    } catch (const InputError& e) {
      SUCCEED("refused by --fix: " << e.what());
      continue;
    }
    SearchOptions o = options(5);
    const SearchOutcome out = search_plans(s.model, *s.cluster, *s.costs, sp, o);
    if (out.plans.empty()) {
      // Refused: one sentence that names the pinned knob and why (the dominant rejection's reason).
      CHECK((out.explanation.find(k.key) != std::string::npos ||
             out.explanation.find(k.flag) != std::string::npos));
      CHECK(out.explanation.find('\n') == std::string::npos);
      continue;
    }
    for (const Result& r : out.plans) {
      INFO(plan_to_flags(r.plan));
      // The plan's value of the knob is the pinned one (resolved forms: seq, grad_accum, reduce_dtype).
      Plan want = r.plan;
      set_knob(k, want, v, "test");
      CHECK(k.get(r.plan) == k.get(want));
    }
  }
}

TEST_CASE(
    "emit targets: their capabilities constrain the search, as_emitted is the identity on what it returns",
    "[capabilities][emit][search]") {
  Setup s("llama3-8b", "dgx-h100", 16);
  for (EmitTarget t : kEmitTargets) {
    INFO(to_string(t));
    SearchSpace sp = cli_like(32, 2048, true);
    constrain_to_target(t, sp);
    const SearchOutcome o = search_plans(s.model, *s.cluster, *s.costs, sp, options(20));
    REQUIRE_FALSE(o.plans.empty());
    for (const Result& r : o.plans) {
      INFO(plan_to_flags(r.plan));
      CHECK(r.plan.runtime == target_runtime(t));
      CHECK(as_emitted(t, r.plan) == r.plan);  // nothing the output cannot express
    }
  }
  // A pinned knob the target cannot express is kept, and the emitted plan is what the output runs.
  SearchSpace sp = cli_like(32, 2048);
  sp.fix("prefetch=2");
  constrain_to_target(EmitTarget::kTorchtitan, sp);
  CHECK(sp.prefetch == std::vector<int>{2});
  Plan p;
  p.prefetch = 2;
  p.reduce_dtype = Dtype::kBf16;
  const Plan e = as_emitted(EmitTarget::kTorchtitan, p);
  CHECK(e.prefetch == 1);
  CHECK(e.reduce() == Dtype::kFp32);
}
