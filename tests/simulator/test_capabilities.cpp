// The capability table (simulator/plan/capabilities.hpp): complete, every entry sourced, docs/capabilities.md
// generated from it, resolve_plan refusing what a runtime lacks in one sentence naming the runtime and its
// source, and DeepSpeed AutoTP lowered without sequence parallelism, its TP collectives as all-reduces.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

#include "sim_helpers.hpp"
#include "simulator/memory/memory.hpp"
#include "simulator/plan/plan.hpp"

using namespace shardplan;
using Catch::Contains;
using shardplan::fixture::Setup;

TEST_CASE("capability table: every runtime states every feature, each entry with a source at its version",
          "[capabilities]") {
  for (Runtime r : EnumValues<Runtime>::v)
    for (int f = 0; f < kFeatures; ++f) {
      const Capability& c = capability(r, static_cast<Feature>(f));
      INFO(to_string(r) << " " << to_string(static_cast<Feature>(f)));
      const std::string src = c.source;
      // A file at a version: "torch 2.15 ...", "torchtitan 0.3.0 ...", "deepspeed 0.19.8 ...", ...
      const bool versioned = src.find("torch 2.15") != std::string::npos ||
                             src.find("torchtitan 0.3.0") != std::string::npos ||
                             src.find("torchtitan before 83e694105") != std::string::npos ||
                             src.find("torchao 0.18.0") != std::string::npos ||
                             src.find("bitsandbytes 0.50.2") != std::string::npos ||
                             src.find("deepspeed 0.19.8") != std::string::npos ||
                             src.find("megatron-core 0.8.0") != std::string::npos ||
                             src.find("transformers 5.23.0") != std::string::npos;
      CHECK(versioned);
      CHECK(std::string(c.note).size() > 5);
      CHECK(std::string(feature_flag(static_cast<Feature>(f))).rfind("--", 0) == 0);
    }
  // The entries the planner's problems came from.
  CHECK_FALSE(has(Runtime::kDeepSpeed, Feature::kAsyncTp));
  CHECK_FALSE(has(Runtime::kDeepSpeed, Feature::kSequenceParallel));
  CHECK_FALSE(has(Runtime::kFsdp2, Feature::kAsyncTpEager));  // torchtitan: async TP needs compile
  CHECK(has(Runtime::kMegatron, Feature::kAsyncTpEager));     // Transformer Engine's overlap needs none
  CHECK(has(Runtime::kFsdp2, Feature::kPipelineSharded));
  CHECK_FALSE(has(Runtime::kDeepSpeed, Feature::kPipelineSharded));
  CHECK_FALSE(has(Runtime::kDeepSpeed, Feature::kHsdp));  // ZeRO++ hpZ is not HSDP's split
  CHECK(has(Runtime::kFsdp1, Feature::kTpWithHsdp));
  CHECK_FALSE(has(Runtime::kFsdp1, Feature::kContextParallel));
  CHECK(has(Runtime::kDeepSpeed, Feature::kExpertParallel));
  CHECK(tp_sequence_parallel(Runtime::kFsdp2));
  CHECK_FALSE(tp_sequence_parallel(Runtime::kDeepSpeed));
}

TEST_CASE("docs/capabilities.md is the capability table", "[capabilities][docs]") {
  const std::string path = std::string(SHARDPLAN_SOURCE_DIR) + "/docs/capabilities.md";
  const std::string want = capability_table_markdown();
  // SHARDPLAN_WRITE_DOCS=1 regenerates the file (then commit it).
  if (std::getenv("SHARDPLAN_WRITE_DOCS")) fixture::write_text(path, want);
  INFO("regenerate: SHARDPLAN_WRITE_DOCS=1 build/tests/simulator/test_simulator '[capabilities][docs]'");
  CHECK(fixture::read_text(path) == want);
}

TEST_CASE("resolve_plan refuses what the runtime lacks in one sentence naming the runtime and its source",
          "[capabilities][plan]") {
  Setup s("llama3-8b", "dgx-h100", 8);
  Plan p;
  p.tp = 2;
  p.compile = true;
  p.async_tp = true;
  CHECK_NOTHROW(s.resolve(p));
  // DeepSpeed AutoTP has no async TP.
  p.runtime = Runtime::kDeepSpeed;
  CHECK_THROWS_WITH(s.resolve(p), Contains("--async-tp") && Contains("deepspeed 0.19.8") &&
                                      Contains("deepspeed/module_inject/layers.py"));
  // torchtitan's async TP is an inductor pass: refused without compile, naming torchtitan's config check.
  p.runtime = Runtime::kFsdp2;
  p.compile = false;
  CHECK_THROWS_WITH(s.resolve(p), Contains("--async-tp") && Contains("torchtitan 0.3.0") &&
                                      Contains("CompileConfig") && Contains("add --compile"));
  // Megatron's Transformer Engine overlap runs without compile.
  p.runtime = Runtime::kMegatron;
  p.zero = 1;
  CHECK_NOTHROW(s.resolve(p));
  // FSDP1: no pipeline stages, no context parallelism, no explicit prefetch depth.
  Plan q;
  q.runtime = Runtime::kFsdp1;
  q.prefetch = 2;
  CHECK_THROWS_WITH(s.resolve(q), Contains("--prefetch") && Contains("fsdp1"));
  q.prefetch = 1;
  q.cp = 2;
  q.seq = 4096;
  CHECK_THROWS_WITH(s.resolve(q), Contains("--cp") && Contains("fsdp1"));
  // One line: InputError's message is a single sentence (no newline).
  try {
    s.resolve(q);
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find('\n') == std::string::npos);
  }
}

TEST_CASE("DeepSpeed AutoTP: activations without sequence parallelism, TP collectives as all-reduces",
          "[capabilities][lowering]") {
  // Llama-3-8B on 8 H100s, TP 2, one micro-batch of 4,096 tokens, no AC: FSDP2 runs torchtitan's sequence
  // parallelism, DeepSpeed AutoTP all-reduces (deepspeed 0.19.8 module_inject/layers.py LinearAllreduce).
  Setup s("llama3-8b", "dgx-h100", 8);
  Plan f;
  f.tp = 2;
  f.seq = 4096;
  f.zero = 3;
  Plan d = f;
  d.runtime = Runtime::kDeepSpeed;
  const Plan fr = s.resolve(f), dr = s.resolve(d);
  CHECK(sequence_parallel_divisor(fr) == 2);
  CHECK(sequence_parallel_divisor(dr) == 1);
  // Full AC keeps each block's input: T x h x 2 bytes, divided by tp under sequence parallelism only.
  const double T = 4096, h = static_cast<double>(s.model.spec().hidden);
  const Layer* first = nullptr;  // the first block's first layer holds the block input
  for (const Layer* l : s.model.order())
    if (l->block == 0 && !first) first = l;
  REQUIRE(first);
  CHECK(block_input_bytes(*first, fr, T) == Approx(T * h * 2 / 2));
  CHECK(block_input_bytes(*first, dr, T) == Approx(T * h * 2));
  CHECK(Simulator::activation_bytes(s.model, dr) > Simulator::activation_bytes(s.model, fr));
  CHECK(runtime_traits(dr).tp_all_reduce);
  CHECK_FALSE(runtime_traits(fr).tp_all_reduce);
  // Bytes per rank: a ring all-reduce moves what its reduce-scatter and all-gather halves move, 2 (n-1)/n x
  // buffer. Sequence parallelism per block: forward 2 all-gathers + 2 reduce-scatters, backward the mirror;
  // the embedding a reduce-scatter and its mirror, the head an all-gather and its mirror: (8 L + 4) (n-1)/n
  // buffers. AutoTP per block: 2 all-reduces forward, 2 backward; the embedding's forward and the head's
  // backward one each: (4 L + 2) x 2 (n-1)/n buffers, the same bytes.
  const Result rf = s.run(f), rd = s.run(d);
  auto tp_bytes = [](const Result& r) {
    return r.comm[static_cast<std::size_t>(CommKind::kTpAllGather)].bytes_per_rank +
           r.comm[static_cast<std::size_t>(CommKind::kTpReduceScatter)].bytes_per_rank;
  };
  const double L = s.model.blocks(), buf = T * h * 2;
  CHECK(tp_bytes(rf) == Approx((8 * L + 4) * 0.5 * buf));
  CHECK(tp_bytes(rd) == Approx((4 * L + 2) * 2 * 0.5 * buf));
}
