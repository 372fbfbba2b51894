// Plan search: the ranking rule, candidate enumeration (counts and rejection reasons), search_plans with the
// real simulator (ranking, memory limit, thread-count independence, reproducibility) and the nothing-fits
// path.
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

namespace {

Evaluation ev(double tps, Bytes peak) {
  return Evaluation{true, tps, peak, 80 * kGiB};
}

std::int64_t total_rejected(const SearchStats& s) {
  std::int64_t n = 0;
  for (const auto& [reason, c] : s.rejections.count) n += c;
  return n;
}

bool same_plan(const Plan& a, const Plan& b) {
  return a.runtime == b.runtime && a.zero == b.zero && a.shard_group == b.shard_group && a.tp == b.tp &&
         a.seq == b.seq && a.mbs == b.mbs && a.grad_accum == b.grad_accum && a.ac == b.ac &&
         a.wrap == b.wrap && a.prefetch == b.prefetch && a.reshard() == b.reshard() &&
         a.precision == b.precision && a.reduce() == b.reduce() && a.offload == b.offload && a.dp == b.dp &&
         a.replicas == b.replicas;
}

Evaluation eval_of(const Result& r) {
  return Evaluation{true, r.tokens_per_s_per_gpu, used_bytes(r), r.capacity_bytes};
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// 1. Ranking rule with fake evaluations.

TEST_CASE("better(): higher tokens/s per GPU wins regardless of memory", "[search][better]") {
  // 1000 vs 999 tokens/s differs by 1e-3 relative, far above the 1e-9 tie band: throughput decides even
  // though the faster plan uses twice the memory.
  CHECK(better(ev(1000, 60 * kGiB), ev(999, 30 * kGiB)));
  CHECK_FALSE(better(ev(999, 30 * kGiB), ev(1000, 60 * kGiB)));
}

TEST_CASE("better(): ties in tokens/s are broken by lower peak memory", "[search][better]") {
  CHECK(better(ev(1000, 30 * kGiB), ev(1000, 31 * kGiB)));
  CHECK_FALSE(better(ev(1000, 31 * kGiB), ev(1000, 30 * kGiB)));
  // Within the 1e-9 relative band: 1000 * (1 + 1e-12) counts as a tie, so memory decides.
  CHECK(better(ev(1000.0, 30 * kGiB), ev(1000.0 * (1 + 1e-12), 31 * kGiB)));
  CHECK_FALSE(better(ev(1000.0 * (1 + 1e-12), 31 * kGiB), ev(1000.0, 30 * kGiB)));
  // Just outside the band (1e-6 relative) throughput decides again.
  CHECK(better(ev(1000.0 * (1 + 1e-6), 31 * kGiB), ev(1000.0, 30 * kGiB)));
}

TEST_CASE(
    "better(): a strict weak order (irreflexive / exact ties are equivalent / keeping enumeration order)",
    "[search][better]") {
  CHECK_FALSE(better(ev(1000, 30 * kGiB), ev(1000, 30 * kGiB)));
  // A stable sort with better() over fake evaluations: ranking by (tps desc, memory asc), equal pairs keep
  // their input (enumeration) order.
  struct Item {
    int id;
    Evaluation e;
  };
  std::vector<Item> v = {{0, ev(500, 10 * kGiB)}, {1, ev(900, 50 * kGiB)}, {2, ev(900, 40 * kGiB)},
                         {3, ev(700, 20 * kGiB)}, {4, ev(900, 40 * kGiB)}, {5, ev(0, 1 * kGiB)}};
  std::stable_sort(v.begin(), v.end(), [](const Item& a, const Item& b) { return better(a.e, b.e); });
  std::vector<int> order;
  for (const auto& i : v) order.push_back(i.id);
  // 900 tps: ids 2 and 4 (40 GiB, in input order) before id 1 (50 GiB); then 700 (3), 500 (0), 0 (5).
  CHECK(order == std::vector<int>{2, 4, 1, 3, 0, 5});
}

// ---------------------------------------------------------------------------------------------------------------
// 1b. Enumeration on a small space.

TEST_CASE("enumerate_candidates: llama3-8b on 16 dgx-h100 GPUs / global batch 32 (fsdp2 space)",
          "[search][enumerate]") {
  Setup s("llama3-8b", "dgx-h100", 16);
  SearchSpace sp;  // runtimes {fsdp2}, zero {0..3}, tp {1,2,4,8}, mbs {1,2,4,8}, ac x3, wrap x2, prefetch x2,
                   // reduce x2
  sp.global_batch = 32;
  sp.seq = 4096;
  SearchStats st;
  std::vector<Plan> c = enumerate_candidates(s.model, *s.cluster, sp, st);

  // Derivation. dp = 16 / tp: tp 1 -> 16, 2 -> 8, 4 -> 4, 8 -> 2. Shard groups (zero > 0) are the divisors g
  // of dp with g*tp dividing or a multiple of the 8-GPU node (all powers of two here, so every divisor): tp1
  // {1,2,4,8,16} = 5, tp2 {1,2,4,8} = 4, tp4 {1,2,4} = 3, tp8 {1,2} = 2; ZeRO-0 uses one group (0 = dp). Per
  // (runtime, tp, zero, group): mbs 4 x ac 3 x wrap 2 x prefetch 2 x reduce 2 x offload 1 = 96. considered =
  // 96 * sum_tp (1 + 3 * G_tp) = 96 * (16 + 13 + 10 + 7) = 96 * 46 = 4416.
  CHECK(st.considered == 4416);
  // ZeRO-1 is not an FSDP mode (the capability table): 96 * (5 + 4 + 3 + 2) = 1344 rejected.
  // Global batch 32 must be a multiple of dp x mbs: tp1 (dp16) loses mbs 4, 8; tp2 (dp8) loses mbs 8.
  // For zero 0, 2, 3: tp1 has 1 + 5 + 5 = 11 groups -> 11 * 2 * 24 = 528; tp2 has 1 + 4 + 4 = 9 -> 9 * 24 =
  // 216. 528 + 216 = 744. Candidates = 4416 - 1344 - 744 = 2328.
  CHECK(st.rejections.count[Rejection::kCapability] == 1344);
  CHECK(st.rejections.capability[Feature::kZero1] == 1344);
  CHECK(st.rejections.count[Rejection::kBatchArithmetic] == 744);
  CHECK(st.rejections.count.size() == 2);
  CHECK(c.size() == 2328);
  // Structural rejections + candidates account for everything considered.
  CHECK(total_rejected(st) + static_cast<std::int64_t>(c.size()) == st.considered);
  // Every reason keeps an example with the plan's flags.
  for (const auto& [reason, n] : st.rejections.count) {
    INFO(to_string(reason));
    REQUIRE(st.rejections.example.count(reason) == 1);
    CHECK(st.rejections.example.at(reason).find("--runtime fsdp2") != std::string::npos);
  }
  CHECK(st.evaluated == 0);

  for (const Plan& p : c) {
    INFO("zero " << p.zero << " tp " << p.tp << " sg " << p.shard_group << " mbs " << p.mbs << " ga "
                 << p.grad_accum);
    CHECK(p.global_batch() == 32);
    CHECK(static_cast<std::int64_t>(p.dp) * p.mbs * p.grad_accum == 32);
    CHECK(p.dp * p.tp == 16);
    CHECK(p.tp <= 8);
    REQUIRE(p.shard_group >= 1);
    CHECK(p.dp % p.shard_group == 0);
    CHECK(p.replicas * p.shard_group == p.dp);
    CHECK(p.zero != 1);
    CHECK(p.seq == 4096);
    CHECK(p.runtime == Runtime::kFsdp2);
    CHECK(p.reshard() == (p.zero == 3));
    if (p.zero == 0) CHECK(p.shard_group == p.dp);
  }
  // No duplicates: each (tp, zero, group, mbs, ac, wrap, prefetch, reduce) once.
  std::set<std::tuple<int, int, int, int, int, int, int, int>> keys;
  for (const Plan& p : c)
    keys.insert({p.tp, p.zero, p.shard_group, p.mbs, static_cast<int>(p.ac), p.wrap, p.prefetch,
                 static_cast<int>(p.reduce())});
  CHECK(keys.size() == c.size());
}

TEST_CASE(
    "enumerate_candidates: prefetch > 1 and DeepSpeed HSDP are refused by the capability table, fp32 reduce "
    "rejections are counted",
    "[search][enumerate]") {
  Setup s("llama3-8b", "dgx-h100", 8);
  SearchSpace sp;
  sp.fix("runtime=fsdp1,deepspeed");
  sp.fix("zero=3");
  sp.fix("tp=1");
  sp.fix("mbs=1");
  sp.fix("ac=none");
  sp.fix("wrap=1");
  sp.fix("precision=fp32");
  sp.global_batch = 8;
  SearchStats st;
  auto c = enumerate_candidates(s.model, *s.cluster, sp, st);
  // Groups for tp 1, dp 8: {1,2,4,8} (4); prefetch {1, 2} x reduce {fp32, bf16}: 2 runtimes x 4 x 2 x 2 = 32.
  CHECK(st.considered == 32);
  // The capability table first: an explicit prefetch depth > 1 is an FSDP2 knob (fsdp1 fetches one unit
  // ahead, DeepSpeed by bytes) and DeepSpeed's hybrid sharding (ZeRO++ hpZ) is not HSDP. fsdp1: prefetch 2 x
  // 4 groups x 2 reduce = 8; deepspeed: the 3 HSDP groups x 4 = 12, the full group with prefetch 2: 2. Then
  // reduce bf16 under fp32: fsdp1 4 groups + deepspeed 1 = 5. Left: fsdp1 4 groups + deepspeed 1 = 5.
  CHECK(st.rejections.count[Rejection::kCapability] == 8 + 12 + 2);
  CHECK(st.rejections.capability[Feature::kHsdp] == 12);
  CHECK(st.rejections.capability[Feature::kPrefetchDepth] == 10);
  CHECK(st.rejections.count[Rejection::kFp32Reduce] == 5);
  CHECK(c.size() == 5);
  CHECK(total_rejected(st) + static_cast<std::int64_t>(c.size()) == st.considered);
}

TEST_CASE("SearchSpace::fix rejects unknown knobs and values", "[search][fix]") {
  SearchSpace sp;
  CHECK_THROWS_AS(sp.fix("zeroo=3"), InputError);
  CHECK_THROWS_AS(sp.fix("zero"), InputError);
  CHECK_THROWS_AS(sp.fix("zero=x"), InputError);
  CHECK_THROWS_AS(sp.fix("runtime=colossalai"), InputError);
  CHECK_THROWS_AS(sp.fix("reshard_after_forward=maybe"), InputError);
  sp.fix("tp=1,2");
  CHECK(sp.tp == std::vector<int>{1, 2});
  sp.fix("shard-group=8");
  CHECK(sp.shard_groups == std::vector<int>{8});
}

// ---------------------------------------------------------------------------------------------------------------
// 2. search_plans with the real simulator.

TEST_CASE(
    "search_plans: llama3-8b on 16 GPUs -- ranking / memory limit / thread independence / reproducibility",
    "[search][real]") {
  Setup s("llama3-8b", "dgx-h100", 16);
  const SearchSpace sp = small_space();
  SearchOptions opts;
  opts.top = 10;
  opts.threads = 1;
  SearchOutcome o1 = search_plans(s.model, *s.cluster, *s.costs, sp, opts);
  REQUIRE_FALSE(o1.plans.empty());
  CHECK(o1.plans.size() <= 10);
  CHECK(o1.stats.considered == 4416);
  CHECK(o1.stats.evaluated > 0);
  CHECK(o1.stats.fitting >= static_cast<std::int64_t>(o1.plans.size()));
  CHECK(o1.stats.evaluated >= o1.stats.fitting);
  CHECK_FALSE(o1.closest.has_value());
  CHECK(o1.headroom == kDefaultHeadroom);  // the library's default is the CLI's (margin.hpp)

  // Every candidate is either rejected structurally, pruned by the memory bound, simulated-and-over, or fits.
  {
    const auto& rc = o1.stats.rejections.count;
    auto get = [&](Rejection k) {
      auto it = rc.find(k);
      return it == rc.end() ? std::int64_t{0} : it->second;
    };
    const std::int64_t structural = 1344 + 744;  // see the enumeration test
    CHECK(o1.stats.evaluated + get(Rejection::kMemoryBound) == o1.stats.considered - structural);
    CHECK(o1.stats.fitting + get(Rejection::kSimulatedPeak) == o1.stats.evaluated);
  }

  const Bytes capacity = s.cluster->spec().gpu.memory_bytes;
  const Bytes limit = static_cast<Bytes>(static_cast<double>(capacity) * (1.0 - opts.headroom));
  for (std::size_t i = 0; i < o1.plans.size(); ++i) {
    INFO("plan " << i);
    const Result& r = o1.plans[i];
    CHECK(r.plan.global_batch() == 32);
    CHECK(r.plan.runtime == Runtime::kFsdp2);
    CHECK(used_bytes(r) <= limit);
    CHECK(r.tokens_per_s_per_gpu > 0);
    // The recommendation is the tie rule's choice: any listed plan faster than it is faster by less than the
    // tie tolerance (else it would be recommended); then the fastest plan when it is another one (it may
    // share the recommendation's family), then family bests, faster first.
    CHECK(r.tokens_per_s_per_gpu < o1.plans[0].tokens_per_s_per_gpu * (1 + opts.tie_tolerance) + 1e-9);
    if (i > 1) CHECK_FALSE(better(eval_of(r), eval_of(o1.plans[i - 1])));
    if (i > 0 && o1.alternatives[i].role != "fastest")
      CHECK(plan_family(r.plan) != plan_family(o1.plans[0].plan));
  }
  if (o1.plans.size() >= 2) CHECK(o1.explanation.find("recommended:") == 0);

  // Same outcome for 2 and 4 threads (results are stored by index and sorted stably).
  for (int threads : {2, 4}) {
    INFO("threads " << threads);
    SearchOptions o = opts;
    o.threads = threads;
    SearchOutcome ot = search_plans(s.model, *s.cluster, *s.costs, sp, o);
    CHECK(ot.stats.considered == o1.stats.considered);
    CHECK(ot.stats.evaluated == o1.stats.evaluated);
    CHECK(ot.stats.fitting == o1.stats.fitting);
    CHECK(ot.stats.rejections.count == o1.stats.rejections.count);
    CHECK(ot.stats.rejections.example == o1.stats.rejections.example);
    CHECK(ot.explanation == o1.explanation);
    REQUIRE(ot.plans.size() == o1.plans.size());
    for (std::size_t i = 0; i < ot.plans.size(); ++i) {
      INFO("plan " << i);
      CHECK(same_plan(ot.plans[i].plan, o1.plans[i].plan));
      CHECK(ot.plans[i].tokens_per_s_per_gpu == o1.plans[i].tokens_per_s_per_gpu);  // bitwise
      CHECK(ot.plans[i].step_s == o1.plans[i].step_s);
      CHECK(ot.plans[i].peak_reserved_bytes == o1.plans[i].peak_reserved_bytes);
    }
  }

  // A fresh Simulator reproduces the recommended plan's step time exactly (no state leaks between runs of the
  // per-thread Simulator that produced it).
  for (std::size_t i = 0; i < std::min<std::size_t>(3, o1.plans.size()); ++i) {
    INFO("plan " << i);
    Simulator sim(s.model, *s.cluster, *s.costs);
    const Result& r = sim.run(o1.plans[i].plan);
    CHECK(r.step_s == o1.plans[i].step_s);
    CHECK(r.tokens_per_s_per_gpu == o1.plans[i].tokens_per_s_per_gpu);
    CHECK(r.peak_reserved_bytes == o1.plans[i].peak_reserved_bytes);
    // And through the convenience entry point.
    CHECK(simulate(s.model, *s.cluster, *s.costs, o1.plans[i].plan).step_s == o1.plans[i].step_s);
  }
}

TEST_CASE("search_plans: top limits the list / the leader is unchanged", "[search][real]") {
  Setup s("llama3-8b", "dgx-h100", 16);
  SearchSpace sp = small_space();
  sp.fix("tp=1,2");
  sp.fix("wrap=1");
  SearchOptions o10;
  o10.threads = 2;
  o10.top = 10;
  SearchOptions o1 = o10;
  o1.top = 1;
  auto a = search_plans(s.model, *s.cluster, *s.costs, sp, o10);
  auto b = search_plans(s.model, *s.cluster, *s.costs, sp, o1);
  REQUIRE_FALSE(a.plans.empty());
  REQUIRE(b.plans.size() == 1);
  CHECK(same_plan(a.plans[0].plan, b.plans[0].plan));
  CHECK(a.plans[0].step_s == b.plans[0].step_s);
}
