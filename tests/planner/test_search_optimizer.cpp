// `plan --fix optimizer=...`: one value pins the optimizer of every candidate; a list searches each layout
// with every listed optimizer (combinations a runtime cannot run are rejected by the capability table),
// and a non-AdamW optimizer names its plan family.
#include <catch2/catch.hpp>

#include "plan_helpers.hpp"
#include "planner/search.hpp"

using namespace shardplan;
using shardplan::ptest::Setup;

namespace {
SearchSpace space() {
  SearchSpace sp;
  sp.fix("runtime=fsdp2,fsdp1");
  sp.fix("zero=3");
  sp.fix("tp=1");
  sp.fix("mbs=1");
  sp.fix("ac=full");
  sp.fix("wrap=1");
  sp.fix("prefetch=1");
  sp.fix("reduce_dtype=fp32");
  sp.global_batch = 8;
  sp.seq = 2048;
  return sp;
}
}  // namespace

TEST_CASE("search: the optimizer is searched only when --fix lists it", "[search][optimizer]") {
  Setup s("llama3-8b", "dgx-h100", 8);
  SearchStats base_stats;
  const auto base = enumerate_candidates(s.model, *s.cluster, space(), base_stats);
  REQUIRE(!base.empty());
  for (const Plan& p : base) CHECK(p.optimizer == Optimizer::kAdamW);

  SearchSpace one = space();
  one.fix("optimizer=lion");
  SearchStats one_stats;
  const auto pinned = enumerate_candidates(s.model, *s.cluster, one, one_stats);
  CHECK(pinned.size() == base.size());
  for (const Plan& p : pinned) CHECK(p.optimizer == Optimizer::kLion);

  // adamw and muon: every layout twice, except that FSDP1 cannot run Muon (flat 1-D shards).
  SearchSpace two = space();
  two.fix("optimizer=adamw,muon");
  SearchStats two_stats;
  const auto both = enumerate_candidates(s.model, *s.cluster, two, two_stats);
  std::size_t fsdp1 = 0, muon = 0;
  for (const Plan& p : base) fsdp1 += p.runtime == Runtime::kFsdp1;
  for (const Plan& p : both) muon += p.optimizer == Optimizer::kMuon;
  CHECK(muon == base.size() - fsdp1);
  CHECK(both.size() == 2 * base.size() - fsdp1);
  // Refused by the capability table (simulator/plan/capabilities.cpp: fsdp1 has no Muon), once per layout.
  CHECK(two_stats.rejections.capability[Feature::kOptimizerMuon] == static_cast<std::int64_t>(fsdp1));
  CHECK(two_stats.rejections.count[Rejection::kCapability] -
            base_stats.rejections.count[Rejection::kCapability] ==
        static_cast<std::int64_t>(fsdp1));
  for (const Plan& p : both)
    if (p.optimizer == Optimizer::kMuon) CHECK(plan_family(p).find(" muon") != std::string::npos);
}

TEST_CASE("search: search_plans with two optimizers lists each as a family", "[search][optimizer]") {
  Setup s("llama3-8b", "dgx-h100", 8);
  SearchSpace sp = space();
  sp.fix("runtime=fsdp2");
  sp.fix("optimizer=adamw,adamw8bit");
  SearchOptions o;
  o.threads = 2;
  const SearchOutcome out = search_plans(s.model, *s.cluster, *s.costs, sp, o);
  REQUIRE(!out.plans.empty());
  bool adamw = false, eight = false;
  for (const Result& r : out.plans) {
    adamw = adamw || r.plan.optimizer == Optimizer::kAdamW;
    eight = eight || r.plan.optimizer == Optimizer::kAdamW8bit;
  }
  CHECK(adamw);
  CHECK(eight);
}
