// Plan search when nothing fits (the closest plan, the binding constraint, the no-fit advice), the
// fitting-plan count, pipelined and context/expert-parallel candidates. Split from test_search.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>
#include <set>

#include "plan_helpers.hpp"
#include "planner/search.hpp"
#include "search_helpers.hpp"

using namespace shardplan;
using shardplan::ptest::Setup;
using shardplan::ptest::small_space;
using shardplan::ptest::used_bytes;

// ---------------------------------------------------------------------------------------------------------------
// 3. Nothing fits.

TEST_CASE("search_plans: llama3.1-405b on 8 H100s fits nowhere / closest plan and binding hint",
          "[search][real][nofit]") {
  Setup s("llama3.1-405b", "dgx-h100", 8);
  SearchSpace sp;
  sp.global_batch = 8;
  SearchOptions opts;
  opts.threads = 2;
  SearchOutcome o = search_plans(s.model, *s.cluster, *s.costs, sp, opts);
  CHECK(o.plans.empty());
  CHECK(o.stats.fitting == 0);
  REQUIRE(o.closest.has_value());
  CHECK(o.closest_over_bytes > 0);
  const Bytes limit =
      static_cast<Bytes>(static_cast<double>(s.cluster->spec().gpu.memory_bytes) * (1 - kDefaultHeadroom));
  // closest_over_bytes is the closest plan's used memory minus the limit.
  CHECK(o.closest_over_bytes == used_bytes(*o.closest) - limit);
  CHECK(binding_constraint(*o.closest) == "memory");
  // 405e9 parameters: bf16 weights alone are ~101 GB per GPU even fully sharded over 8 -> persistent state
  // binds.
  CHECK_FALSE(o.binding_hint.empty());
  const bool suggests = o.binding_hint.find("more GPUs") != std::string::npos ||
                        o.binding_hint.find("offload") != std::string::npos;
  CHECK(suggests);
  CHECK(o.explanation.find("no plan fits") != std::string::npos);
  CHECK(o.explanation.find(o.binding_hint) != std::string::npos);
}

TEST_CASE("binding_constraint classifies memory / exposed communication / overhead and compute",
          "[search][binding]") {
  Result r;
  r.capacity_bytes = 100 * kGiB;
  r.fits = true;
  r.peak_reserved_bytes = 50 * kGiB;
  r.step_s = 1.0;
  r.compute_s = 0.9;
  r.exposed_comm_s = 0.05;
  CHECK(binding_constraint(r) == "compute");
  r.exposed_comm_s = 0.2;  // > 15 % of the step
  CHECK(binding_constraint(r) == "exposed communication");
  r.exposed_comm_s = 0.05;
  r.compute_s = 0.7;  // < 75 % of the step with little exposed comm
  CHECK(binding_constraint(r) == "CPU / launch overhead");
  r.peak_reserved_bytes = 91 * kGiB;  // > 90 % used
  CHECK(binding_constraint(r) == "memory");
  r.peak_reserved_bytes = 50 * kGiB;
  r.fits = false;
  CHECK(binding_constraint(r) == "memory");
}

TEST_CASE("search_plans: the no-fit advice names only settings the closest plan does not have",
          "[search][real][nofit]") {
  // llama3-8b on 8 H100s at 320k tokens per sequence: persistent state is 8e9 x 16 B / 8 = 16 GB per GPU (far
  // under 60 % of the limit), so activations bind (about 88 GiB reserved against 79 GiB; at 256k the plan now
  // fits since a block's backward is modelled op by op). With --ac full, tp 8 and mbs 1 pinned, none of the
  // usual remedies (--ac full, a smaller --mbs, tensor parallelism) is left to suggest.
  Setup s("llama3-8b", "dgx-h100", 8);
  SearchSpace sp;
  sp.fix("ac=full");
  sp.fix("mbs=1");
  sp.fix("tp=8");
  sp.fix("seq=327680");
  sp.global_batch = 1;
  SearchOptions opts;
  opts.threads = 2;
  SearchOutcome o = search_plans(s.model, *s.cluster, *s.costs, sp, opts);
  REQUIRE(o.plans.empty());
  REQUIRE(o.closest.has_value());
  INFO(o.binding_hint);
  CHECK(o.binding_hint.find("activations and transients dominate") == 0);
  CHECK(o.binding_hint.find("--ac full") == std::string::npos);
  CHECK(o.binding_hint.find("smaller --mbs") == std::string::npos);
  CHECK(o.binding_hint.find("tensor parallelism") == std::string::npos);
  CHECK(o.binding_hint.find("more GPUs or a shorter --seq (the closest uses 327680)") != std::string::npos);
  // Without the pins the advice names what the closest plan lacks, each change simulated on it: what it needs
  // then, against the limit.
  SearchSpace free_ac;
  free_ac.fix("ac=none");
  free_ac.fix("mbs=2");
  free_ac.fix("tp=1");
  free_ac.fix("seq=262144");
  free_ac.global_batch = 16;
  SearchOutcome f = search_plans(s.model, *s.cluster, *s.costs, free_ac, opts);
  REQUIRE(f.closest.has_value());
  INFO(f.binding_hint);
  // (The closest plan runs context parallelism 8 on the 8 GPUs: more TP is not a change it can make, so the
  // advice leaves it out.)
  CHECK(f.binding_hint.find("--ac full (") != std::string::npos);
  CHECK(f.binding_hint.find("--mbs 1 (x2 accumulation) (") != std::string::npos);
  // Every change the advice says fits does fit; every other one it names is still over the limit.
  const Bytes limit =
      static_cast<Bytes>(static_cast<double>(s.cluster->spec().gpu.memory_bytes) * (1 - opts.headroom));
  Simulator sim(s.model, *s.cluster, *s.costs);
  struct Change {
    const char* text;
    void (*apply)(Plan&);
  };
  const Change changes[] = {{"--ac full (", [](Plan& q) { q.ac = AcMode::kFull; }},
                            {"--tp 2 (", [](Plan& q) { q.tp = 2, q.shard_group = 0; }}};
  const auto fits_part = f.binding_hint.find("fits with");
  for (const Change& ch : changes) {
    const auto at = f.binding_hint.find(ch.text);
    if (at == std::string::npos) continue;
    Plan q = f.closest->plan;
    ch.apply(q);
    const Result& r = sim.run(resolve_plan(q, s.model, *s.cluster));
    const bool advised_fit = fits_part != std::string::npos && at > fits_part &&
                             (f.binding_hint.find("not enough alone") == std::string::npos ||
                              at < f.binding_hint.find("not enough alone"));
    INFO(ch.text);
    CHECK(advised_fit == (used_bytes(r) <= limit));
  }
}

TEST_CASE("search_plans: no-fit advice leaves out a change that saves nothing", "[search][real][nofit]") {
  // Llama 3 70B on 8 H100s with ZeRO-3 already pinned: the advice never suggests --zero 3 (it saves nothing
  // on a plan that has it), and a change it names is simulated: each comes with its memory or how far over.
  Setup s("llama3-70b", "dgx-h100", 8);
  SearchSpace sp;
  sp.fix("zero=3");
  sp.fix("tp=1");
  sp.fix("pp=1");  // under PP the plan resolves ZeRO-3 to 2 (torchtitan's reshard_after_forward policy)
  sp.fix("ac=none");
  sp.fix("seq=8192");
  sp.global_batch = 8;
  SearchOptions opts;
  opts.threads = 2;
  SearchOutcome o = search_plans(s.model, *s.cluster, *s.costs, sp, opts);
  REQUIRE(o.plans.empty());
  REQUIRE(o.closest.has_value());
  INFO(o.binding_hint);
  CHECK(o.closest->plan.zero == 3);
  CHECK(o.binding_hint.find("--zero 3 (") == std::string::npos);
  CHECK(o.binding_hint.find("--ac full (") != std::string::npos);
  CHECK(o.binding_hint.find("GiB") != std::string::npos);
}

TEST_CASE("search_plans: --top 1 says how many plans fit instead of 'the only plan that fits'",
          "[search][real]") {
  Setup s("llama3-8b", "dgx-h100", 16);
  SearchSpace sp = small_space();
  sp.fix("zero=3");
  sp.fix("tp=1,2");
  SearchOptions opts;
  opts.top = 1;
  opts.threads = 2;
  SearchOutcome o = search_plans(s.model, *s.cluster, *s.costs, sp, opts);
  REQUIRE(o.plans.size() == 1);
  REQUIRE(o.stats.fitting > 1);
  INFO(o.explanation);
  CHECK(o.explanation.find("the only plan") == std::string::npos);
  CHECK(o.explanation.find("recommended:") == 0);  // compared with the next plan even though it is not listed
  CHECK(o.explanation.find(fmt::format("\n{} plans fit; only the recommendation is listed",
                                       o.stats.fitting)) != std::string::npos);
  // A faster plan exists within the 6 % tie tolerance (with reserved memory from the allocator replay it is a
  // TP 1 plan with a non-default knob): the recommendation is a tie-break, named in the explanation.
  CHECK(o.plans[0].plan.tp == 1);
  REQUIRE(o.fastest.has_value());
  CHECK(o.fastest->tokens_per_s_per_gpu > o.plans[0].tokens_per_s_per_gpu);
  CHECK(o.fastest->tokens_per_s_per_gpu < o.plans[0].tokens_per_s_per_gpu * (1 + kThroughputTieTolerance));
  REQUIRE_FALSE(o.tie_rule.empty());
  CHECK(o.explanation.find("chosen by the rule \"" + o.tie_rule + "\"") != std::string::npos);
}

TEST_CASE("search_plans: --fix pp searches pipelined FSDP2 plans only, each with at least pp micro-batches",
          "[search][real][pipeline]") {
  // llama3-8b on 16 H100s, global batch 64: pp 2 and 4 (both divide 16 / tp for tp 1, 2, 4); 1F1B and
  // interleaved 1F1B (two stages per rank).
  Setup s("llama3-8b", "dgx-h100", 16);
  SearchSpace sp;
  sp.global_batch = 64;
  sp.seq = 2048;
  sp.fix("pp=2,4");
  SearchOptions opts;
  opts.threads = 2;
  opts.top = 3;
  const SearchOutcome o = search_plans(s.model, *s.cluster, *s.costs, sp, opts);
  REQUIRE(!o.plans.empty());
  for (const Result& r : o.plans) {
    CHECK((r.plan.pp == 2 || r.plan.pp == 4));
    CHECK(r.plan.grad_accum >= r.plan.pp);
    CHECK(r.plan.runtime == Runtime::kFsdp2);
    // torchtitan under PP: reshard_after_forward=False (SHARD_GRAD_OP).
    CHECK(r.plan.zero == 2);
    REQUIRE(r.pipeline);
    // dp x mbs x micro-batches is the global batch.
    CHECK(r.plan.global_batch() == 64);
  }
  // The family names the pipeline.
  CHECK(plan_family(o.plans[0].plan).find(" pp") != std::string::npos);
}

TEST_CASE("search_plans: PP is not searched on a small cluster where plans fit without it",
          "[search][real][pipeline]") {
  Setup s("llama3-8b", "dgx-h100", 8);
  SearchSpace sp;
  sp.global_batch = 8;
  sp.tp = {1};
  sp.ac = {AcMode::kFull};
  SearchOptions opts;
  opts.threads = 2;
  const SearchOutcome o = search_plans(s.model, *s.cluster, *s.costs, sp, opts);
  REQUIRE(!o.plans.empty());
  for (const Result& r : o.plans) CHECK(r.plan.pp == 1);
}

TEST_CASE("enumerate_candidates: context parallelism for long sequences, expert parallelism for MoE models",
          "[search][enumerate][cp][ep]") {
  auto degrees = [](const std::vector<Plan>& c, int Plan::*field) {
    std::set<int> d;
    for (const Plan& p : c) d.insert(p.*field);
    return d;
  };
  // Dense model, 4k tokens (activations fit one GPU): cp and ep stay 1, the space is unchanged.
  {
    Setup s("llama3-8b", "dgx-h100", 8);
    SearchSpace sp;
    sp.fix("zero=3");
    sp.fix("tp=1");
    sp.global_batch = 8;
    sp.seq = 4096;
    SearchStats st;
    const auto c = enumerate_candidates(s.model, *s.cluster, sp, st);
    CHECK(degrees(c, &Plan::cp) == std::set<int>{1});
    CHECK(degrees(c, &Plan::ep) == std::set<int>{1});
  }
  // 32k tokens: cp in {1, 2, 4, 8} at tp 1 on 8 GPUs (tp x cp <= 8); dp = 8 / cp.
  {
    Setup s("llama3-8b", "dgx-h100", 8);
    SearchSpace sp;
    sp.fix("zero=3");
    sp.fix("tp=1");
    sp.global_batch = 8;
    sp.seq = 32768;
    SearchStats st;
    const auto c = enumerate_candidates(s.model, *s.cluster, sp, st);
    CHECK(degrees(c, &Plan::cp) == std::set<int>{1, 2, 4, 8});
    for (const Plan& p : c) CHECK(p.dp * p.cp == 8);
  }
  // Qwen3-30B-A3B (128 experts) on 16 GPUs, full sharding (dp_shard 16): ep in the powers of two dividing 128
  // and 16 = {1, 2, 4, 8, 16}; each candidate's ep divides its dp_shard x cp.
  {
    Setup s("qwen3-30b-a3b", "dgx-h100", 16);
    SearchSpace sp;
    sp.fix("zero=3");
    sp.fix("tp=1");
    sp.fix("shard_group=16");
    sp.global_batch = 16;
    sp.seq = 4096;
    SearchStats st;
    const auto c = enumerate_candidates(s.model, *s.cluster, sp, st);
    CHECK(degrees(c, &Plan::ep) == std::set<int>{1, 2, 4, 8, 16});
    for (const Plan& p : c) CHECK(p.fsdp_ranks() % p.ep == 0);
  }
}
