// The plan ranking within the model's error: the tie tolerance recomputed from the committed validation
// records, the tie-break order on hand-made results, families and the Pareto front, and the acceptance cases
// (Llama-3-8B on 8 H100s, Llama-3-70B on 64 H100s) with the real simulator.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <regex>
#include <set>
#include <vector>

#include "plan_helpers.hpp"
#include "planner/report/margin.hpp"
#include "planner/search.hpp"
#include "planner/validate.hpp"

using namespace shardplan;
using shardplan::ptest::Setup;

namespace {

// A fitting result on an 80 GiB GPU: `peak_gib` reserved, no runtime overhead.
Result fake(Runtime rt, int tp, double tps, double peak_gib = 40) {
  Result r;
  r.plan.runtime = rt;
  r.plan.tp = tp;
  r.plan.dp = 8 / tp;
  r.tokens_per_s_per_gpu = tps;
  r.capacity_bytes = 80 * kGiB;
  r.peak_reserved_bytes = static_cast<Bytes>(peak_gib * static_cast<double>(kGiB));
  r.fits = true;
  return r;
}

std::pair<std::size_t, std::string> choose(const std::vector<Result>& v) {
  std::vector<const Result*> p;
  for (const auto& r : v) p.push_back(&r);
  return choose_plan(p, kThroughputTieTolerance);
}

}  // namespace

TEST_CASE("the throughput tie tolerance is the median tokens/s error on the committed records",
          "[ranking][validate]") {
  // Rule (planner/report/margin.hpp, docs/model.md): the median |relative error| of tokens/s per GPU over the
  // in-scope records of tests/data/runs/published_dev.json. kThroughputError is generated data
  // (planner/report/margin_stats.json); "planner/report/margin_stats.json is what validate gives on the
  // committed records" (test_validate.cpp) recomputes it with the real simulator.
  CHECK(kThroughputError.term == std::string("tokens_per_s_per_gpu"));
  CHECK(kThroughputTieTolerance == kThroughputError.median_abs);
}

TEST_CASE("choose_plan: within the error the tie rules decide, beyond it the faster plan wins", "[ranking]") {
  // Tolerance 6.8 %: 970 vs 1000 is 3 % (a tie), 920 vs 1000 is 8 % (not). (At the earlier 6 % the second
  // case was 930, 7 %: that is now inside the band, so it moved to 920 to stay beyond it.)
  SECTION("runtime: FSDP2 3 % slower than FSDP1 is a tie and wins by the runtime rule") {
    auto [i, rule] = choose({fake(Runtime::kFsdp1, 1, 1000), fake(Runtime::kFsdp2, 1, 970)});
    CHECK(i == 1);
    CHECK(rule == tie_rule_names()[2]);
  }
  SECTION("runtime: FSDP2 8 % slower loses") {
    REQUIRE(0.08 > kThroughputTieTolerance);
    auto [i, rule] = choose({fake(Runtime::kFsdp1, 1, 1000), fake(Runtime::kFsdp2, 1, 920)});
    CHECK(i == 0);
    CHECK(rule.empty());
  }
  SECTION(
      "parallel dimensions come before the runtime: FSDP1 without TP beats FSDP2 with TP 2 within the "
      "error") {
    auto [i, rule] = choose(
        {fake(Runtime::kFsdp2, 2, 1000), fake(Runtime::kFsdp1, 1, 990), fake(Runtime::kFsdp2, 1, 900)});
    CHECK(i == 1);
    CHECK(rule == tie_rule_names()[1]);
  }
  SECTION("memory risk comes first") {
    // 79.5 GiB: 79.5 x 1.0405 (median error) = 82.7 > 80 -> high risk; 40 GiB: 40 x 1.1372 (worst) = 45.5 <=
    // 80 -> low.
    Result tight = fake(Runtime::kFsdp2, 1, 1000, 79.5);
    Result roomy = fake(Runtime::kFsdp1, 2, 960, 40);
    CHECK(memory_risk_level(tight) == 2);
    CHECK(memory_risk_level(roomy) == 0);
    auto [i, rule] = choose({tight, roomy});
    CHECK(i == 1);
    CHECK(rule == tie_rule_names()[0]);
  }
  SECTION("non-default knobs last; equal keys keep the faster") {
    Result a = fake(Runtime::kFsdp2, 1, 1000);
    a.plan.reduce_dtype = Dtype::kBf16;  // one non-default knob
    Result b = fake(Runtime::kFsdp2, 1, 990);
    Result c = fake(Runtime::kFsdp2, 1, 995);
    CHECK(tie_keys(a).non_default_knobs == 1);
    CHECK(tie_keys(b).non_default_knobs == 0);
    auto [i, rule] = choose({a, b, c});
    CHECK(i == 2);  // b and c tie on every key; c is faster
    CHECK(rule == tie_rule_names()[3]);
  }
}

TEST_CASE("plan_family and tie_keys read HSDP from the shard group", "[ranking]") {
  Plan p;
  p.dp = 16;
  p.zero = 3;
  p.shard_group = 8;  // 2 replicas of 8-way sharding: HSDP
  p.ac = AcMode::kSelective;
  CHECK(plan_family(p) == "fsdp2 tp1 ac=selective hsdp");
  p.shard_group = 16;
  CHECK(plan_family(p) == "fsdp2 tp1 ac=selective fsdp");
  p.shard_group = 0;
  CHECK(plan_family(p) == "fsdp2 tp1 ac=selective fsdp");
  Result r = fake(Runtime::kFsdp2, 2, 1000);
  r.plan.dp = 4;
  r.plan.shard_group = 2;
  CHECK(tie_keys(r).parallel_dims == 2);  // TP and HSDP
}

namespace {
// The space `shardplan plan` searches (planner/cli/cmd_plan.cpp): three runtimes, TP within a node, compile
// and async TP.
SearchSpace cli_space(std::int64_t global_batch) {
  SearchSpace sp;
  sp.runtimes = {Runtime::kFsdp2, Runtime::kFsdp1, Runtime::kDeepSpeed};
  sp.compile = {false, true};
  sp.async_tp = {false, true};
  sp.global_batch = global_batch;
  sp.seq = 8192;
  return sp;
}

}  // namespace

TEST_CASE("acceptance: Llama-3-8B on 8 H100s, global batch 64 x 8192", "[ranking][real][acceptance]") {
  // Expected: FSDP2, TP 1 without AC, compile on (so the compiled loss), full sharding. Why: torchtitan
  // compiles the cross-entropy with the model (components/loss.py since 2025-04-02), which keeps the bf16
  // logits and writes one bf16 gradient: 4 T V bytes at the backward head instead of the eager loss's 12 T V
  // (T = 8,192, V = 128,256: 4.2 GB instead of 12.6 GB), so the 8,192-token activations of an 8B model fit in
  // 80 GiB without AC and without TP. Within the error of the fastest plan the rules pick FSDP2 and no TP.
  // With the eager loss pinned (an older torchtitan) they fit too: the compiled blocks save SwiGLU's gate, up
  // and product and recompute SiLU(gate) (tools/reference/saved_per_block.py), 2 f T = 2 x 14,336 x 8,192 B =
  // 235 MB per block fewer than eager, 7.5 GB over 32 blocks, which pays for the eager loss's extra 8 T V
  // (8.4 GB) less the margin: TP 1 without AC, compiled, again.
  Setup s("llama3-8b", "dgx-h100", 8);
  SearchOptions opts;
  opts.top = 100;  // every family
  opts.threads = 2;
  opts.headroom = kDefaultHeadroom;
  {
    SearchOutcome o = search_plans(s.model, *s.cluster, *s.costs, cli_space(64), opts);
    REQUIRE_FALSE(o.plans.empty());
    INFO(o.explanation);
    const Result& rec = o.plans[0];
    CHECK(rec.plan.runtime == Runtime::kFsdp2);
    for (const Result& r : o.plans)
      CHECK(r.tokens_per_s_per_gpu < rec.tokens_per_s_per_gpu * (1 + kThroughputTieTolerance));
    CHECK(rec.plan.tp == 1);
    CHECK(rec.plan.ac == AcMode::kNone);
    CHECK(rec.plan.compile);
    CHECK(rec.plan.loss() == LossImpl::kCompiled);
  }
  SearchSpace eager = cli_space(64);
  eager.base.loss_impl = LossImpl::kEager;
  SearchOutcome o = search_plans(s.model, *s.cluster, *s.costs, eager, opts);
  REQUIRE_FALSE(o.plans.empty());
  INFO(o.explanation);
  const Result& rec = o.plans[0];
  CHECK(rec.plan.runtime == Runtime::kFsdp2);
  // No runtime is faster than the recommendation by more than the error.
  for (const Result& r : o.plans)
    CHECK(r.tokens_per_s_per_gpu < rec.tokens_per_s_per_gpu * (1 + kThroughputTieTolerance));
  CHECK(rec.plan.tp == 1);
  CHECK(rec.plan.ac == AcMode::kNone);
  CHECK(rec.plan.compile);
  CHECK(rec.plan.loss() == LossImpl::kEager);
}

TEST_CASE("acceptance: Llama-3-70B on 64 H100s, global batch 256 x 8192", "[ranking][real][acceptance]") {
  // Expected: FSDP2 with TP inside the node, compile on. A 70B model at 8,192 tokens needs TP (or full AC) to
  // fit its activations. Without AC, torchtitan's TP saves the all-gathered inputs of q/k/v and gate/up over
  // the whole sequence (reference lane, Llama 3 70B TP 8; docs/model.md "Activations"), 2 x T x 2h x (1 -
  // 1/tp) more per block than their sequence shards: at TP 4 that is 16 GiB over 80 blocks, so the compiled
  // TP 4 plan without AC (67.6 GiB before) no longer fits, and selective AC (whose policy recomputes the
  // all-gather) is chosen; DeepSpeed's TP has no sequence parallelism, so it does not fit without AC either.
  // The stage-3b refinement also compiles families none of whose eager members fit. Within the error of the
  // fastest plans the runtime rule picks FSDP2, and nothing is faster by more than the error.
  Setup s("llama3-70b", "dgx-h100", 64);
  SearchOptions opts;
  opts.top = 100;
  opts.threads = 2;
  opts.headroom = kDefaultHeadroom;
  SearchOutcome o = search_plans(s.model, *s.cluster, *s.costs, cli_space(256), opts);
  REQUIRE_FALSE(o.plans.empty());
  INFO(o.explanation);
  const Result& rec = o.plans[0];
  CHECK(rec.plan.runtime == Runtime::kFsdp2);
  for (const Result& r : o.plans)
    CHECK(r.tokens_per_s_per_gpu < rec.tokens_per_s_per_gpu * (1 + kThroughputTieTolerance));
  // TP inside the node: 2 or 4. Which of the two is chosen within the error band moves with the
  // reserved-memory model and the default headroom derived from it (TP 4 under the fitted fragmentation, TP 2
  // with the first allocator replay at 12 % headroom, TP 4 again with the reference lane's fixes at 9 %);
  // both are within the tie tolerance of each other and of the fastest, which the loop above checks.
  CHECK((rec.plan.tp == 2 || rec.plan.tp == 4));
  CHECK((rec.plan.ac == AcMode::kNone || rec.plan.ac == AcMode::kSelective));
  CHECK(rec.plan.compile);
  CHECK(rec.plan.reduce() ==
        Dtype::kFp32);  // the framework default: bf16 reduction does not pay beyond the error
  // The Pareto front holds the recommendation or a plan at least as good on all three axes.
  bool covered = false;
  for (const Result& p : o.pareto)
    covered |= p.tokens_per_s_per_gpu >= rec.tokens_per_s_per_gpu &&
               p.headroom_bytes() >= rec.headroom_bytes() &&
               network_bytes_per_gpu(p) <= network_bytes_per_gpu(rec);
  CHECK(covered);
}

TEST_CASE(
    "table rows mean what they say: the fastest listed, each family's fastest, ties exactly within "
    "the tolerance",
    "[ranking][real][table]") {
  // Llama-3-8B on 8 A100s, global batch 64 x 8192: the recommendation is a tie-break (FSDP2 over a faster
  // FSDP1 plan), so the fastest plan is row 2 and the tie-break line names it.
  Setup s("llama3-8b", "dgx-a100-80g", 8);
  SearchOptions opts;
  opts.top = 8;
  opts.threads = 2;
  opts.headroom = kDefaultHeadroom;
  const SearchOutcome o = search_plans(s.model, *s.cluster, *s.costs, cli_space(64), opts);
  REQUIRE(o.plans.size() >= 3);
  REQUIRE(o.alternatives.size() == o.plans.size());
  INFO(o.explanation);
  double top = 0;
  for (const Result& r : o.plans) top = std::max(top, r.tokens_per_s_per_gpu);
  for (std::size_t i = 0; i < o.plans.size(); ++i) {
    const Alternative& a = o.alternatives[i];
    const double tps = o.plans[i].tokens_per_s_per_gpu;
    CHECK(a.delta_fastest == Approx(tps / top - 1).margin(1e-12));
    // `~` exactly when the row is within the tolerance of the fastest, the same test choose_plan makes.
    CHECK(a.within_error == (top - tps < o.tie_tolerance * top));
    CHECK(a.within_error == (std::abs(a.delta_fastest) < o.tie_tolerance));
  }
  CHECK(o.alternatives[0].within_error);
  if (o.fastest) {
    CHECK(o.plans[1].plan == o.fastest->plan);
    CHECK(o.alternatives[1].role == "fastest");
    CHECK(o.explanation.find("(row 2: " + plan_family(o.fastest->plan)) != std::string::npos);
  }
  // Rows after the recommendation and the fastest: one per family, faster first, each its family's fastest.
  const std::size_t first = o.fastest ? 2 : 1;
  std::set<std::string> families;
  for (std::size_t i = first; i < o.plans.size(); ++i) {
    CHECK(families.insert(plan_family(o.plans[i].plan)).second);
    if (i > first) CHECK(o.plans[i].tokens_per_s_per_gpu <= o.plans[i - 1].tokens_per_s_per_gpu);
  }
  // Searched alone, the family of row `first` has no faster fitting plan than the row.
  const Plan& fam = o.plans[first].plan;
  SearchSpace only = cli_space(64);
  only.runtimes = {fam.runtime};
  only.tp = {fam.tp};
  only.ac = {fam.ac};
  only.pp = {1};
  if (fam.zero == 0) only.zero = {0};
  only.shard_groups = {fam.shard_group};
  const SearchOutcome alone = search_plans(s.model, *s.cluster, *s.costs, only, opts);
  REQUIRE_FALSE(alone.plans.empty());
  const double alone_top =
      alone.fastest ? alone.fastest->tokens_per_s_per_gpu : alone.plans[0].tokens_per_s_per_gpu;
  CHECK(o.plans[first].tokens_per_s_per_gpu == Approx(alone_top).epsilon(1e-9));
}

TEST_CASE("CLI: pipeline rows show pp, schedule and V, the tie-break names a listed row",
          "[ranking][cli][table]") {
  auto dir = ptest::temp_dir("table");
  REQUIRE(ptest::run_cli("plan --model llama3-8b --gpus 8 --global-batch 32 --seq 4096 --top 3 --fix pp=2 "
                         "--threads 2",
                         dir / "out.txt") == 0);
  const std::string out = ptest::read_text(dir / "out.txt");
  INFO(out);
  CHECK(out.find("pp (schedule, V)") != std::string::npos);
  // --fix pp=2: every listed row is pipelined over 2 stages, printed "2 SCHEDULE vV" with V the default
  // virtual stages of its schedule (1 for gpipe and 1f1b, 2 for interleaved-1f1b, zbv and dualpipev, as
  // --virtual-stages says); the search picks the schedule, so any of the five may lead.
  const std::regex row(R"( 2 ((gpipe|1f1b) v1|(interleaved-1f1b|zbv|dualpipev) v2) )");
  int rows = 0;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), row); it != std::sregex_iterator(); ++it)
    ++rows;
  CHECK(rows == 3);  // --top 3: the recommendation and two other families, all with pp 2
}
