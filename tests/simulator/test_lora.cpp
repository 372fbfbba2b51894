// LoRA and QLoRA (--lora-rank, --lora-targets, --lora-base): the adapters' parameter count, the persistent
// state of a frozen base (no gradients, optimizer state for the adapters only), QLoRA's packed 4-bit base and
// its quantisation constants, the refusals of the capability table, and the knobs' round trip. Every expected
// value is derived in its comment from the model's dimensions.
#include <catch2/catch.hpp>
#include <cstdint>

#include "core/error.hpp"
#include "sim_helpers.hpp"
#include "simulator/memory/memory.hpp"
#include "simulator/plan/plan.hpp"

using namespace shardplan;
using shardplan::test::Setup;

namespace {

Bytes round512(Bytes b) {
  return (b + 511) / 512 * 512;
}

std::int64_t cdiv(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

Plan lora_plan(int rank, LoraBase base = LoraBase::kBf16, int zero = 3, Runtime rt = Runtime::kFsdp2) {
  Plan p;
  p.lora_rank = rank;
  p.lora_base = base;
  p.zero = zero;
  p.runtime = rt;
  p.seq = 1024;
  return p;
}

/// A setup whose model carries the plan's LoRA (what the CLI runs: lora_model after resolve_plan).
Setup lora_setup(const std::string& model, const std::string& cluster, int gpus, const Plan& p) {
  Setup base(model, cluster, gpus);
  return Setup(lora_model(base.model, base.resolve(p)), load_cluster_spec(cluster), gpus);
}

}  // namespace

TEST_CASE("LoRA-16 on Llama-3-8B: PEFT's default targets, adapters only in gradients and optimizer state",
          "[lora][memory]") {
  const Plan want = lora_plan(16);
  Setup s = lora_setup("llama3-8b", "dgx-h100", 8, want);
  const Setup full("llama3-8b", "dgx-h100", 8);
  // q_proj [4096, 4096] and v_proj [1024, 4096] per block: A [16, 4096] and B [out, 16] each, 32 blocks:
  // 32 x 16 x ((4096 + 4096) + (4096 + 1024)) = 6,815,744 trainable parameters.
  CHECK(trainable_parameters(s.model) == 6815744);
  CHECK(s.model.parameters() == full.model.parameters() + 6815744);
  CHECK(has_frozen_parameters(s.model));
  CHECK_FALSE(has_frozen_parameters(full.model));

  const Plan p = s.resolve(want);
  const auto ps = persistent_state(s.model, p);
  // FSDP2 ZeRO-3 over 8 ranks, per-tensor Shard(0) padded to ceil(rows / 8) rows; AdamW (fused) creates
  // exp_avg and exp_avg_sq in fp32 like each adapter's shard, one allocation each (rounded to 512 B), and a
  // 4-byte `step` per adapter (512 B allocation). Per block: A_q, A_v [16, 4096] -> 2 x 4096 = 8,192
  // elements; B_q [4096, 16] -> 512 x 16 = 8,192; B_v [1024, 16] -> 128 x 16 = 2,048.
  Bytes opt = 0, grads_elems = 0;
  for (std::int64_t n : {8192, 8192, 8192, 2048}) {
    opt += 2 * round512(4 * n) + 512;
    grads_elems += n;
  }
  CHECK(ps[2] == 32 * opt);  // 32 x 212,992 + 128 x 512 = 6,881,280 B
  CHECK(ps[2] == 6881280);
  // Gradients: fp32 shards of the adapters only (the frozen base gets none): 32 x 26,624 x 4 B.
  CHECK(ps[1] == 32 * grads_elems * 4);
  // Parameters: the frozen base stored in bf16 (2 B), the adapters in the plan's fp32 master dtype (4 B),
  // each shard one allocation.
  Bytes params = 0;
  for (const Layer* l : s.model.order())
    for (const Tensor& t : l->tensors) params += round512(cdiv(t.dim0, 8) * t.dim1 * (t.frozen ? 2 : 4));
  CHECK(ps[0] == params);
  const auto full_ps = persistent_state(full.model, full.resolve(lora_plan(0)));
  // The bf16 base is half the fp32 master; the adapters add their fp32 shards (6,815,744 / 8 x 4 B).
  CHECK(ps[0] <= full_ps[0] / 2 + 6815744 / 8 * 4 + 128 * 512);
  CHECK(ps[1] * 100 < full_ps[1]);
  CHECK(ps[2] * 100 < full_ps[2]);
}

TEST_CASE("LoRA: the simulated step reduces only the adapters' gradients and skips the base's weight GEMMs",
          "[lora][simulate]") {
  const Plan want = lora_plan(16);
  Setup s = lora_setup("llama3-8b", "dgx-h100", 8, want);
  const Setup full("llama3-8b", "dgx-h100", 8);
  const Result lora = s.run(want), base = full.run(lora_plan(0));
  const auto rs = static_cast<std::size_t>(CommKind::kReduceScatter);
  // The adapters are 6.8 M of 8.04 G parameters: the reduce-scatters carry under 1 % of the full run's bytes.
  CHECK(lora.comm[rs].bytes_per_rank * 100 < base.comm[rs].bytes_per_rank);
  // Backward runs one GEMM (the input gradient) per frozen linear instead of two: the compute falls by about
  // a third of the GEMM time (the adapters' small GEMMs and attention add back a little).
  CHECK(lora.compute_s < 0.85 * base.compute_s);
  CHECK(lora.compute_s > 0.55 * base.compute_s);
  CHECK(lora.peak_bytes < base.peak_bytes);
}

TEST_CASE("QLoRA: the NF4 base packed two values a byte with bitsandbytes' double-quantised constants",
          "[lora][memory]") {
  const Plan want = lora_plan(16, LoraBase::kNf4, 0);
  Setup s = lora_setup("llama3-8b", "dgx-h100", 1, want);
  const Plan p = s.resolve(want);
  // One GPU, DDP-style (ZeRO-0): every tensor whole. A block linear weight of n values: ceil(n / 2) bytes of
  // codes as bf16 storage elements; quant_state (whole on every rank, one allocation each): uint8 absmax per
  // block of 64, fp32 absmax per 256 of those, a 256-entry fp32 code, the fp32 offset, the 16-entry NF4 code.
  // Embedding, head and norms stay bf16; the adapters fp32.
  Bytes expected = 0;
  const Setup base("llama3-8b", "dgx-h100", 1);
  for (const Layer* l : base.model.order())
    for (const Tensor& t : l->tensors) {
      const std::int64_t n = t.numel();
      if (l->block >= 0 && t.dim1 > 1) {
        const std::int64_t blocks = cdiv(n, 64);
        expected += round512(cdiv(n, 2)) + round512(blocks) + round512(4 * cdiv(blocks, 256)) +
                    round512(1024) + round512(4) + round512(64);
      } else {
        expected += round512(2 * n);
      }
    }
  for (const Layer* l : s.model.order())
    for (const Tensor& t : l->tensors)
      if (!t.frozen) expected += round512(4 * t.numel());
  CHECK(persistent_state(s.model, p)[0] == expected);
  // The parameter count is the model's, not its packed storage's.
  CHECK(s.model.parameters() == base.model.parameters() + 6815744);
  // Dequantising costs time: slower than the bf16 base at the same plan.
  const Plan bf16 = lora_plan(16, LoraBase::kBf16, 0);
  Setup sb = lora_setup("llama3-8b", "dgx-h100", 1, bf16);
  CHECK(s.run(want).compute_s > sb.run(bf16).compute_s);
}

TEST_CASE("QLoRA 70B: one 80 GB GPU and 8 x 24 GB GPUs", "[lora][plan]") {
  // 70.6 G parameters, 0.5 B each for the blocks' linear weights plus constants: ~37 GiB of base on one GPU;
  // with full AC at 2,048 tokens the step fits an H100's 80 GB.
  Plan one = lora_plan(16, LoraBase::kNf4, 0);
  one.seq = 2048;
  one.ac = AcMode::kFull;
  Setup h100 = lora_setup("llama3-70b", "dgx-h100", 1, one);
  const Result r1 = h100.run(one);
  CHECK(r1.fits);
  CHECK(r1.persistent_bytes > 36 * kGiB);
  CHECK(r1.persistent_bytes < 40 * kGiB);
  // 8 x 24 GB: DeepSpeed ZeRO-3 partitions the packed base (bf16 quant storage): 1/8 of it per rank, the
  // quantisation constants whole.
  Plan eight = one;
  eight.runtime = Runtime::kDeepSpeed;
  eight.zero = 3;
  Setup small = lora_setup("llama3-70b", SHARDPLAN_TEST_DATA "/clusters/pcie-8x24g.json", 8, eight);
  const Result r8 = small.run(eight);
  CHECK(r8.fits);
  CHECK(r8.persistent_bytes < r1.persistent_bytes / 4);
}

TEST_CASE("LoRA: the capability table refuses what the runtimes cannot run", "[lora][capabilities]") {
  const Setup s("llama3-8b", "dgx-h100", 8);
  auto refusal = [&](Plan p) {
    try {
      s.resolve(p);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  // torchtitan has no bitsandbytes base: FSDP2 with a 4-bit base under ZeRO-3.
  CHECK_THAT(refusal(lora_plan(16, LoraBase::kNf4, 3)), Catch::Contains("4-bit LoRA base"));
  CHECK(refusal(lora_plan(16, LoraBase::kNf4, 3, Runtime::kFsdp1)).empty());
  CHECK(refusal(lora_plan(16, LoraBase::kNf4, 3, Runtime::kDeepSpeed)).empty());
  CHECK_THAT(refusal(lora_plan(16, LoraBase::kInt8, 3, Runtime::kFsdp1)), Catch::Contains("uniform dtype"));
  Plan mega = lora_plan(16, LoraBase::kBf16, 1, Runtime::kMegatron);
  CHECK_THAT(refusal(mega), Catch::Contains("LoRA"));
  Plan tp = lora_plan(16, LoraBase::kNf4, 0);
  tp.tp = 2;
  CHECK_THAT(refusal(tp), Catch::Contains("quantised LoRA base with TP"));
  tp.lora_base = LoraBase::kBf16;
  tp.zero = 3;
  CHECK(refusal(tp).empty());  // torchtitan splits the adapters as their base linear
}

TEST_CASE("LoRA: targets, TP split of the adapters, knobs' round trip", "[lora][knobs]") {
  const Setup s("llama3-8b", "dgx-h100", 8);
  CHECK(lora_target_tensors(s.model, "") == std::vector<std::string>{"wq", "wv"});
  CHECK(lora_target_tensors(s.model, "q_proj,down_proj,w3") ==
        std::vector<std::string>{"wq", "w_down", "w_up"});
  CHECK_THROWS_AS(lora_target_tensors(s.model, "qq_proj"), InputError);
  // all-linear at rank 8: per block q, k, v, o, gate, up, down: 8 x (in + out) each.
  LoraSpec all{8, {"all-linear"}, WeightStore::kBf16};
  const std::int64_t h = 4096, kv = 1024, f = 14336;
  const std::int64_t per_block = 8 * ((h + h) + (h + kv) + (h + kv) + (h + h) + 2 * (h + f) + (f + h));
  CHECK(trainable_parameters(apply_lora(s.model, all)) == 32 * per_block);
  // TP: a column-parallel base's B splits on its rows, a row-parallel base's A on its columns.
  LoraSpec qo{4, {"wq", "wo"}, WeightStore::kBf16};
  const ModelGraph m = apply_lora(s.model, qo);
  int seen = 0;
  for (const Layer* l : m.order())
    for (const Tensor& t : l->tensors) {
      const bool a_q = t.name == "wq.lora_a", b_q = t.name == "wq.lora_b";
      const bool a_o = t.name == "wo.lora_a", b_o = t.name == "wo.lora_b";
      if (a_q || b_o) CHECK(t.tp == TpSplit::kReplicated);
      if (b_q) CHECK(t.tp == TpSplit::kColumn);
      if (a_o) CHECK(t.tp == TpSplit::kRow);
      seen += a_q || b_q || a_o || b_o;
    }
  CHECK(seen == 4 * 32);
  // The knob table: flags, repro line and run-record JSON.
  Plan p = lora_plan(16, LoraBase::kNf4, 0);
  p.lora_targets = "q_proj,v_proj";
  const std::string flags = plan_to_flags(p);
  CHECK_THAT(flags, Catch::Contains("--lora-rank 16 --lora-targets q_proj,v_proj --lora-base nf4"));
  CHECK_THAT(plan_to_flags(lora_plan(0)), !Catch::Contains("lora"));
  const Plan back = plan_from_json(JsonObj(plan_to_json(p), "plan"));
  CHECK(back.lora_rank == 16);
  CHECK(back.lora_targets == "q_proj,v_proj");
  CHECK(back.lora_base == LoraBase::kNf4);
}

TEST_CASE("LoRA on MoE: PEFT reaches the fused experts by their v4 names, which is refused, not left out",
          "[lora][moe]") {
  // Qwen3-30B-A3B: all-linear or an MLP name would train the routed experts (PEFT 0.21.2 ParamWrapper).
  const Setup q("qwen3-30b-a3b", "dgx-h100", 8);
  CHECK_THROWS_WITH(lora_target_tensors(q.model, "all-linear"),
                    Catch::Contains("--lora-targets") && Catch::Contains("routed experts"));
  CHECK_THROWS_WITH(lora_target_tensors(q.model, "q_proj,down_proj"), Catch::Contains("routed experts"));
  // Attention targets: 48 blocks x 16 x ((2048 + 4096) + 2 (2048 + 512) + (4096 + 2048)) adapter parameters.
  LoraSpec attn{16, lora_target_tensors(q.model, "q_proj,k_proj,v_proj,o_proj"), WeightStore::kBf16};
  CHECK(trainable_parameters(apply_lora(q.model, attn)) == 48 * 16 * (6144 + 2 * 2560 + 6144));
  // gpt-oss's experts have always been fused parameters: all-linear skips them (attention and router only).
  const Setup g("gpt-oss-20b", "dgx-h100", 8);
  CHECK_FALSE(g.model.spec().moe.peft_expert_targets);
  CHECK_NOTHROW(lora_target_tensors(g.model, "all-linear"));
  // Nor does it adapt GptOssTopKRouter (an nn.Parameter, not an nn.Linear): only q, k, v, o of the 24 blocks,
  // h = 2880, q = 64 x 64 = 4096, kv = 8 x 64 = 512: 16 x ((2880 + 4096) + 2 (2880 + 512) + (4096 + 2880)).
  CHECK_FALSE(g.model.spec().moe.router_linear);
  LoraSpec all{16, lora_target_tensors(g.model, "all-linear"), WeightStore::kBf16};
  CHECK(trainable_parameters(apply_lora(g.model, all)) == 24 * 16 * (6976 + 2 * 3392 + 6976));
}

TEST_CASE("LoRA: monotone in the rank, never above full fine-tuning, lower bound below the peak",
          "[lora][properties]") {
  const Setup full("llama3-8b", "dgx-h100", 8);
  Bytes prev_opt = 0;
  for (int r : {4, 16, 64}) {
    for (AcMode ac : {AcMode::kNone, AcMode::kFull}) {
      Plan want = lora_plan(r);
      want.ac = ac;
      Setup s = lora_setup("llama3-8b", "dgx-h100", 8, want);
      const Plan p = s.resolve(want);
      const auto ps = persistent_state(s.model, p);
      if (ac == AcMode::kNone) {
        CHECK(ps[2] > prev_opt);
        prev_opt = ps[2];
      }
      Plan fp = want;
      fp.lora_rank = 0;
      const auto fps = persistent_state(full.model, full.resolve(fp));
      CHECK(ps[0] + ps[1] + ps[2] < fps[0] + fps[1] + fps[2]);
      const Result res = s.run(want);
      CHECK(memory_lower_bound(s.model, p) <= res.peak_reserved_bytes + res.overhead.total());
      CHECK(res.peak_bytes <= res.peak_reserved_bytes);
    }
  }
}

TEST_CASE("LoRA: the graph JSON keeps frozen tensors, their storage, buffers and frozen GEMMs",
          "[lora][graph]") {
  // QLoRA on Llama-3-8B: the base packed NF4 with its quant_state buffers, adapters beside q and v.
  const Plan p = lora_plan(16, LoraBase::kNf4, 0);
  const Setup a = lora_setup("llama3-8b", "dgx-h100", 1, p);
  const ModelGraph b = ModelGraph::from_graph_json(a.model.to_graph_json(), "roundtrip");
  CHECK(b.parameters() == a.model.parameters());
  CHECK(b.has_frozen());
  CHECK(trainable_parameters(b) == trainable_parameters(a.model));
  REQUIRE(b.order().size() == a.model.order().size());
  for (std::size_t i = 0; i < b.order().size(); ++i) {
    INFO(a.model.order()[i]->name);
    CHECK(b.order()[i]->same_content(*a.model.order()[i]));
  }
  // The same simulated step from the graph as from the transformed model.
  const Setup c(b, load_cluster_spec("dgx-h100"), 1);
  const Result ra = a.run(p), rc = c.run(p);
  CHECK(rc.peak_bytes == ra.peak_bytes);
  CHECK(rc.peak_reserved_bytes == ra.peak_reserved_bytes);
  CHECK(rc.step_s == ra.step_s);
  // A storage the format does not know: one line naming it.
  Json j = a.model.to_graph_json();
  for (Json& l : j["layers"])
    for (Json& t : l["tensors"])
      if (t.contains("store")) t["store"] = "fp4";
  CHECK_THROWS_WITH(ModelGraph::from_graph_json(j, "g.json"),
                    Catch::Contains("store") && Catch::Contains("fp4"));
}

TEST_CASE("LoRA: renamed layers simulate the same step, more bandwidth is never slower",
          "[lora][properties]") {
  for (const LoraBase base : {LoraBase::kBf16, LoraBase::kNf4}) {
    for (const Runtime rt : {Runtime::kFsdp2, Runtime::kFsdp1, Runtime::kDeepSpeed}) {
      // QLoRA under FSDP2 ZeRO-3 is refused (capability table): its base runs ZeRO-0 there.
      const int zero = base == LoraBase::kNf4 && rt == Runtime::kFsdp2 ? 0 : 3;
      const Plan p = lora_plan(16, base, zero, rt);
      INFO(to_string(rt) << " zero " << zero << " base " << to_string(base));
      const Setup s = lora_setup("llama3-8b", "dgx-h100", 16, p);
      Json j = s.model.to_graph_json();
      for (std::size_t i = 0; i < j["layers"].size(); ++i) j["layers"][i]["name"] = "L" + std::to_string(i);
      const Setup r(ModelGraph::from_graph_json(j, "renamed"), load_cluster_spec("dgx-h100"), 16);
      const Result a = s.run(p), b = r.run(p);
      CHECK(b.step_s == a.step_s);
      CHECK(b.peak_bytes == a.peak_bytes);
      CHECK(b.peak_reserved_bytes == a.peak_reserved_bytes);
      ClusterSpec fast = load_cluster_spec("dgx-h100");
      fast.node.nvlink_Bps *= 2, fast.node.nic_Bps *= 2, fast.node.pcie_Bps *= 2;
      const Setup f(s.model, fast, 16);
      CHECK(f.run(p).step_s <= a.step_s);
      CHECK(a.compute_s + a.exposed_comm_s <= a.step_s * (1 + 1e-12));
      CHECK(a.mfu <= 1.0);
    }
  }
}
