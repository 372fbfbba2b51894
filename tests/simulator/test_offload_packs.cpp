// torch's save_on_cpu packs a tensor once per op that saves it (ActTensor::packs) and packs the saved tensors
// that are no activation on the device (ActTensor::pack_only: the rotary table, the token ids, the MoE
// combine's expanded index): host and PCIe bytes move, the device's do not (docs/model.md "Activation
// offload").
#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "sim_helpers.hpp"
#include "simulator/memory/layer_memory.hpp"
#include "simulator/plan/knobs.hpp"
#include "simulator/plan/plan.hpp"

using namespace shardplan;
using shardplan::test::Setup;
using shardplan::test::units_of;

namespace {

/// A small dense Llama: h 256, 4 heads of 64 (GQA: 2 KV heads), SwiGLU f 512, 2 blocks.
ModelSpec small_dense() {
  ModelSpec s = test::small_llama(2, 1024);
  s.hidden = 256;
  s.heads = 4;
  s.kv_heads = 2;
  s.head_dim = 64;
  s.ffn_hidden = 512;
  s.seq = 512;
  return s;
}

Plan offload_plan(int mbs, int tp) {
  Plan p;
  p.runtime = Runtime::kFsdp2;
  p.ac = AcMode::kNone;
  p.mbs = mbs;
  p.seq = 512;
  p.tp = tp;
  p.activation_offload = kActivationOffloadAll;
  return p;
}

Bytes block_repacked(const Setup& s, const Plan& p) {
  for (const SimUnit& u : units_of(s, s.resolve(p)))
    if (u.blocks > 0) return u.repacked_act_bytes;
  return -1;
}

/// The same graph with every tensor packed once and no pack-only tensor: what shardplan modelled before.
ModelGraph packed_once(const ModelGraph& m) {
  Json j = m.to_graph_json();
  for (Json& l : j["layers"]) {
    if (!l.contains("activations")) continue;
    Json kept = Json::array();
    for (Json a : l["activations"]) {
      if (a.value("pack_only", false)) continue;
      a.erase("packs");
      kept.push_back(a);
    }
    l["activations"] = kept;
  }
  return ModelGraph::from_graph_json(j, "packed once");
}

const Layer& first_of(const ModelGraph& m, LayerKind kind) {
  for (const Layer* l : m.order())
    if (l->kind == kind) return *l;
  FAIL("no such layer");
  return *m.order().front();
}

}  // namespace

TEST_CASE("save_on_cpu packs: a block's repacked bytes in closed form", "[activation_offload][memory]") {
  // One block, T = mbs x seq tokens, h = 256, q = heads x head_dim = 256, 2-byte activations. Beyond one
  // copy per saved storage, save_on_cpu packs: the attention norm's output twice more (saved by wq, wk and
  // wv: 2 x T x h x 2), SDPA's output once more (saved by SDPA and by wo: T x q x 2), the MLP norm's output
  // once more (w1 and w3: T x h x 2), and the rotary table twice (xq_ * freqs_cis and xk_ * freqs_cis save
  // the complex64 [seq, head_dim / 2] slice, one per sequence position whatever mbs: 2 x seq x 32 x 8).
  // mbs 2, seq 512: T = 1,024; 4Th + 2Tq + 2Th = 1,024 x (1,024 + 512 + 512) = 2,097,152; the table
  // 2 x 512 x 256 = 262,144; in all 2,359,296 B per block.
  Setup s(ModelGraph::from_spec(small_dense()), load_cluster_spec("dgx-h100"), 8);
  CHECK(block_repacked(s, offload_plan(2, 1)) == 2359296);
  // mbs 1: the tokens halve, the table does not (it is per position): 1,048,576 + 262,144.
  CHECK(block_repacked(s, offload_plan(1, 1)) == 1310720);
  // TP 2 (torchtitan's plan: the column linears save the all-gathered input, whole sequence, packed 3 and 2
  // times; SDPA's output is head-split, T x q x 2 / 2; the table is whole on every TP rank): mbs 2,
  // 4Th + Tq + 2Th + 262,144 = 1,024 x 1,792 + 262,144 = 2,097,152.
  CHECK(block_repacked(s, offload_plan(2, 2)) == 2097152);
  // A materialised attention core (eager softmax): its PV bmm saves its inputs, not its output, so only wo
  // saves the attention's output: T x q x 2 = 524,288 fewer.
  Plan eager = offload_plan(2, 1);
  eager.attention = AttentionCore::kEager;
  CHECK(block_repacked(s, eager) == 2359296 - 524288);
  // Without offload nothing is summed.
  Plan none = offload_plan(2, 1);
  none.activation_offload = 0;
  CHECK(block_repacked(s, none) == 0);
}

TEST_CASE("save_on_cpu packs: a fused qkv packs its input once", "[activation_offload][memory]") {
  // Phi-3's qkv_proj: one mm saves the attention's input, so only SDPA's output (T x q x 2), the MLP's
  // input (T x h x 2, gate and up unfused) and the rotary table repeat: 1,024 x 1,024 + 262,144.
  ModelSpec spec = small_dense();
  spec.fused_qkv = true;
  Setup s(ModelGraph::from_spec(spec), load_cluster_spec("dgx-h100"), 8);
  CHECK(block_repacked(s, offload_plan(2, 1)) == 1310720);
}

TEST_CASE("save_on_cpu packs: only host and PCIe bytes move, the device's do not",
          "[activation_offload][memory]") {
  // The same model with every tensor packed once (the lists before the pack counts): the same peak and
  // allocator peak; the host holds the repacked bytes more: per block 2,359,296 (above) x 2 blocks, plus
  // the embedding's token ids (T x 8 = 8,192); both copies on the PCIe lane.
  const ModelGraph m = ModelGraph::from_spec(small_dense());
  Setup packs(m, load_cluster_spec("dgx-h100"), 8);
  Setup once(packed_once(m), load_cluster_spec("dgx-h100"), 8);
  const Plan p = offload_plan(2, 1);
  const Result a = packs.run(p), b = once.run(p);
  CHECK(a.peak_bytes == b.peak_bytes);
  CHECK(a.allocator.peak_allocated_bytes == b.allocator.peak_allocated_bytes);
  const Bytes extra = 2 * 2359296 + 1024 * 8;
  CHECK(a.activation_host_bytes - b.activation_host_bytes == extra);
  CHECK(a.host_bytes_per_node - b.host_bytes_per_node == 8 * extra);
  const CommStats &ca = a.comm[static_cast<int>(CommKind::kOffloadCopy)],
                  &cb = b.comm[static_cast<int>(CommKind::kOffloadCopy)];
  CHECK(ca.bytes_per_rank - cb.bytes_per_rank == Approx(2.0 * static_cast<double>(extra)));
  CHECK(a.step_s > b.step_s);
  // Without offload the two graphs are the same plan to the byte.
  Plan none = p;
  none.activation_offload = 0;
  const Result c = packs.run(none), d = once.run(none);
  CHECK(c.peak_bytes == d.peak_bytes);
  CHECK(c.step_s == d.step_s);
  CHECK(c.activation_host_bytes == 0);
}

TEST_CASE("save_on_cpu packs: MoE routing tensors per implementation", "[activation_offload][moe]") {
  // Qwen3-30B-A3B's MoE layer (h 2048, 128 experts, top 8, SwiGLU, no shared experts) per token beyond one
  // copy per storage. torchtitan (grouped): the router's fp32 probabilities once more (the gather saves
  // them: 4 x 128), the top-k ids once more (topk and the gather: 8 x 8), the routed input once more (w1's
  // and w3's grouped mm: 2 x 8 x 2048) and the combine's expanded scatter index (8 x 2048 int64, pack only):
  // 512 + 64 + 32,768 + 131,072 = 164,416. Hugging Face's loop: each expert's token indices once more (the
  // gather and index_add_: 8 x 8) and its gathered input (2 x 8 x 2048): 64 + 32,768 = 32,832. The layer's
  // input: the router's gate alone reads it (packs 1).
  const ModelGraph m = load_model("qwen3-30b-a3b");
  const Layer& moe = first_of(m, LayerKind::kMoe);
  Setup s("qwen3-30b-a3b", "dgx-h100", 8);
  Plan p = s.resolve(offload_plan(1, 1));
  CHECK(layer_repacked_bytes(moe, p, 1.0) == 164416.0);
  p.moe_impl = MoeImpl::kLoop;
  CHECK(layer_repacked_bytes(moe, p, 1.0) == 32832.0);
}

TEST_CASE("save_on_cpu packs: graph JSON round trip and a bad pack-only field",
          "[activation_offload][json]") {
  const ModelGraph m = ModelGraph::from_spec(small_dense());
  const ModelGraph back = ModelGraph::from_graph_json(m.to_graph_json(), "round trip");
  const Layer &a = first_of(m, LayerKind::kAttention), &b = first_of(back, LayerKind::kAttention);
  CHECK(a.activations == b.activations);
  int table = 0;
  for (const ActTensor& t : b.activations)
    if (t.name == "freqs_cis") table += t.pack_only && t.per_position && t.packs == 2;
  CHECK(table == 1);
  CHECK(b.activations.front().packs == 3);  // the input: wq, wk, wv
  // One row per position names a buffer save_on_cpu packs: refused on a device tensor.
  Json j = m.to_graph_json();
  for (Json& l : j["layers"])
    if (l.contains("activations") && l["kind"] == "attention") l["activations"][0]["per_position"] = true;
  CHECK_THROWS_AS(ModelGraph::from_graph_json(j, "bad"), InputError);
}

TEST_CASE("save_on_cpu packs: under LoRA each adapter's lora_A packs the frozen linears' input",
          "[activation_offload][lora]") {
  // Llama 3 8B, one attention layer at T = 1,024 tokens (mbs 1, seq 1,024), h = q = 4,096, head_dim 128.
  // Full fine-tuning: the input packed by wq, wk and wv (2 more x T x 2h = 16,777,216), SDPA's output once
  // more (T x 2q = 8,388,608), the rotary table twice (2 x 1,024 x 64 x 8 = 1,048,576): 26,214,400.
  // PEFT's default targets (q_proj, v_proj): the frozen base's mm saves no input, the two lora_A do: one
  // more pack (8,388,608) instead of two: 17,825,792. gate_proj alone: the attention's input is not saved
  // at all: 9,437,184.
  Setup base("llama3-8b", "dgx-h100", 8);
  auto attention_repacked = [&](int rank, const std::string& targets) {
    Plan want;
    want.lora_rank = rank;
    want.lora_targets = targets;
    want.seq = 1024;
    const Plan p = base.resolve(want);
    const ModelGraph m = rank > 0 ? lora_model(base.model, p) : base.model;
    return layer_repacked_bytes(first_of(m, LayerKind::kAttention), p, 1024.0);
  };
  CHECK(attention_repacked(0, "") == 26214400.0);
  CHECK(attention_repacked(16, "") == 17825792.0);
  CHECK(attention_repacked(16, "all-linear") == 26214400.0);
  CHECK(attention_repacked(16, "gate_proj") == 9437184.0);
}
