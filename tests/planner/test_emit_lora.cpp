// LoRA in the emitted configs (planner/emit_lora.cpp): the FSDP2 script carries PEFT's LoraConfig for the
// simulated adapters; every output that cannot express a LoRA plan refuses it with one --emit error naming
// the knob. tests/emit/test_fsdp2_real_models.py runs the emitted script (test_llama_lora).
#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "plan_helpers.hpp"
#include "planner/emit.hpp"
#include "simulator/plan/plan.hpp"

using namespace shardplan;
using Catch::Contains;

namespace {
Plan lora(int rank, const std::string& targets = "") {
  Plan p;
  p.zero = 3;
  p.seq = 1024;
  p.lora_rank = rank;
  p.lora_targets = targets;
  return p;
}
}  // namespace

TEST_CASE("emit: the FSDP2 script carries the simulated LoRA adapters as PEFT's LoraConfig", "[emit][lora]") {
  ptest::Setup s("llama3-8b", "dgx-h100", 8);
  const Plan p = s.resolve(lora(16));
  const ModelGraph m = lora_model(s.model, p);
  const std::string script = emit("fsdp2", p, m, 8, 8);
  // PEFT's default for llama: q_proj and v_proj; LoRA-16 over 32 blocks: 32 x 16 x ((4096 + 4096) +
  // (4096 + 1024)) = 6,815,744 trainable parameters.
  CHECK_THAT(script, Contains("LORA = dict(rank=16, targets=[\"q_proj\", \"v_proj\"], trainable=6815744)"));
  const Plan all = s.resolve(lora(8, "all-linear"));
  CHECK_THAT(emit("fsdp2", all, lora_model(s.model, all), 8, 8), Contains("targets=\"all-linear\""));
  CHECK_THAT(emit("fsdp2", s.resolve(Plan{}), s.model, 8, 8), Contains("LORA = None"));
  // torchtitan's names for the MLP (w1 gate, w2 down) become the Hugging Face modules PEFT matches.
  const Plan titan = s.resolve(lora(8, "w1,w2"));
  CHECK_THAT(emit("fsdp2", titan, lora_model(s.model, titan), 8, 8),
             Contains("targets=[\"gate_proj\", \"down_proj\"]"));
}

TEST_CASE("emit: a LoRA plan an output cannot express is refused naming the knob", "[emit][lora]") {
  ptest::Setup s("llama3-8b", "dgx-h100", 8);
  const Plan p = s.resolve(lora(16));
  const ModelGraph m = lora_model(s.model, p);
  for (const char* kind : {"deepspeed", "torchtitan", "torchtitan-toml"})
    CHECK_THROWS_WITH(emit(kind, p, m, 8, 8), Contains("--lora-rank") && Contains("--emit fsdp2"));
  Plan q = p;
  q.lora_base = LoraBase::kNf4;
  CHECK_THROWS_WITH(emit("fsdp2", q, m, 8, 8), Contains("--lora-base nf4"));
  q = p;
  q.tp = 2;
  CHECK_THROWS_WITH(emit("fsdp2", q, m, 8, 8), Contains("--tp"));
  q = p;
  q.precision = Precision::kFp32;
  CHECK_THROWS_WITH(emit("fsdp2", q, m, 8, 8), Contains("--precision fp32"));
  // LoRA knobs without a rank are refused everywhere.
  Plan t = s.resolve(Plan{});
  t.lora_targets = "q_proj";
  CHECK_THROWS_WITH(emit("fsdp2", t, s.model, 8, 8), Contains("--lora-targets"));
}
