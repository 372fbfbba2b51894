// Model graphs of the newer families: sliding and chunked attention windows, DeepSeek-V3 (MLA, MTP, experts),
// the MoE presets' active parameters, their graph JSON round trip, bad family inputs and grouped experts.
// Split from test_models.cpp.
#include <algorithm>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "sim_helpers.hpp"
#include "simulator/memory/layer_memory.hpp"

using namespace shardplan;

TEST_CASE("sliding and chunked windows: which layers are local, and the positions attended",
          "[simulator][model]") {
  const std::string hf = std::string(SHARDPLAN_TEST_DATA) + "/hf/";
  // Gemma 2 alternates: layer 0 sliding (4096), layer 1 global. Gemma 3 1B: every 6th layer (5, 11, ...)
  // global, the others a 512 window.
  const ModelGraph g2 = load_model(hf + "gemma-2-9b.json"), g3 = load_model(hf + "gemma-3-1b.json");
  std::vector<std::int64_t> w2, w3;
  for (const Layer* l : g2.order())
    if (l->attn_heads > 0) w2.push_back(l->attn_window);
  for (const Layer* l : g3.order())
    if (l->attn_heads > 0) w3.push_back(l->attn_window);
  REQUIRE(w2.size() == 42);
  CHECK(w2[0] == 4096);
  CHECK(w2[1] == 0);
  CHECK(w2[41] == 0);
  REQUIRE(w3.size() == 26);
  CHECK(std::count(w3.begin(), w3.end(), 0) == 4);  // layers 5, 11, 17, 23
  CHECK(w3[5] == 0);
  CHECK(w3[4] == 512);
  CHECK(w3[25] == 512);
  // Llama 4 Scout: chunks of 8192 on the RoPE layers, every 4th layer (NoPE) global.
  const ModelGraph scout = load_model("llama4-scout");
  for (const Layer* l : scout.order())
    if (l->attn_heads > 0) {
      INFO(l->name);
      CHECK(l->attn_window == ((l->block + 1) % 4 == 0 ? 0 : 8192));
      CHECK(l->attn_chunked == (l->attn_window > 0));
    }
  Layer l;
  l.attn_heads = 1;
  l.attn_head_dim = 128;
  // Causal: (s + 1) / 2 = 4096.5 at s = 8192.
  CHECK(l.attended_positions(8192) == 4096.5);
  // Sliding window 4096 at s = 8192: (Σ_{j=1}^{4096} j + 4096·4096) / 8192 = (8,390,656 + 16,777,216) / 8192
  //   = 3072.25; a window at least s long is causal.
  l.attn_window = 4096;
  CHECK(l.attended_positions(8192) == 3072.25);
  CHECK(l.attended_positions(4096) == 2048.5);
  // Chunks of 8192 at s = 12288: one full chunk (8192·8193/2) and 4096 positions (4096·4097/2):
  //   (33,558,528 + 8,390,656) / 12288 = 41,949,184 / 12288 = 3413.8333...
  l.attn_window = 8192;
  l.attn_chunked = true;
  CHECK(l.attended_positions(12288) == Approx(41'949'184.0 / 12288).epsilon(1e-15));
  CHECK(l.attended_positions(16384) == 4096.5);
  // The model-FLOPs attention term. Llama-3-8B keeps torchtitan's 12·L·a·d·s: 12·32·4096·4096 =
  // 6,442,450,944.
  CHECK(load_model("llama3-8b").attention_model_flops_per_token(4096) == 6'442'450'944.0);
  // Gemma 2 9B at s = 8192: 21 global layers 6·16·(256 + 256)·8192 = 402,653,184 each, 21 local ones over
  // 4096 positions 201,326,592 each: 21·603,979,776 = 12,683,575,296.
  CHECK(g2.attention_model_flops_per_token(8192) == 12'683'575'296.0);
}

TEST_CASE("DeepSeek-V3: MLA projections, dense first blocks, shared and routed experts, MTP",
          "[simulator][model]") {
  const ModelGraph m = load_model("deepseek-v3");
  const Layer* attn = nullptr;
  const Layer *dense = nullptr, *moe = nullptr;
  for (const Layer* l : m.order()) {
    if (l->name == "blocks.0.attention") attn = l;
    if (l->name == "blocks.2.mlp") dense = l;
    if (l->name == "blocks.3.moe") moe = l;
  }
  REQUIRE(attn);
  REQUIRE(dense);
  REQUIRE(moe);
  CHECK(attn->parameters() == 187'107'328);  // derived above the preset table
  CHECK(attn->attn_head_dim == 192);         // qk_nope 128 + qk_rope 64
  CHECK(attn->attn_v_head_dim == 128);
  // GEMMs per token: q_a [1536 x 7168], q_b [128·192 x 1536], kv_a [576 x 7168], kv_b [128·256 x 512],
  // o [7168 x 128·128].
  REQUIRE(attn->gemms.size() == 5);
  CHECK((attn->gemms[0].n == 1536 && attn->gemms[0].k == 7168));
  CHECK((attn->gemms[1].n == 24576 && attn->gemms[1].k == 1536));
  CHECK((attn->gemms[2].n == 576 && attn->gemms[2].k == 7168));
  CHECK((attn->gemms[3].n == 32768 && attn->gemms[3].k == 512));
  CHECK((attn->gemms[4].n == 7168 && attn->gemms[4].k == 16384));
  // Saved per token, TP-split: Q and K 2·a·192 each, kv_b's output 2·a·(128 + 128) (SDPA's V is a split view
  // of it, which keeps the whole output alive), O 2·a·128, LSE 4a: 4·24576 + 2·32768 + 2·16384 + 512 =
  // 197,120 (V alone would be 164,352: a·dn·2 = 32,768 less). Replicated: x 2h, q latent 2·1536 + rstd 4,
  // normed 2·1536, kv_a output 2·576, rstd 4, normed latent 2·512: 14,336 + 3,076 + 3,072 + 1,152 + 4 + 1,024
  // = 22,664.
  CHECK(test::act_eager_saved_bytes(*attn, ActSplit::kTp) == 197120.0);
  const auto saved = [&](const char* name) {
    for (const ActTensor& a : attn->activations)
      if (a.name == name) return a.eager;
    FAIL("no tensor " << name);
    return false;
  };
  CHECK(saved("wkv_b.out"));
  CHECK_FALSE(saved("v"));
  CHECK(test::act_eager_saved_bytes(*attn, ActSplit::kSequence) == 22664.0);
  CHECK(dense->kind == LayerKind::kMlp);
  CHECK(dense->parameters() == 3LL * 7168 * 18432);
  CHECK(moe->kind == LayerKind::kMoe);
  // GEMMs of the MoE block: router [256 x h], shared gate+up (count 2) and down (1), routed gate+up (2·8) and
  // down (8).
  REQUIRE(moe->gemms.size() == 5);
  CHECK((moe->gemms[0].n == 256 && moe->gemms[0].count == 1));
  CHECK((moe->gemms[1].n == 2048 && moe->gemms[1].count == 2));
  CHECK((moe->gemms[2].k == 2048 && moe->gemms[2].count == 1));
  CHECK((moe->gemms[3].n == 2048 && moe->gemms[3].count == 16));
  CHECK((moe->gemms[4].k == 2048 && moe->gemms[4].count == 8));
  // Saved SwiGLU activations: 8 bytes per token per unit of width a token passes through, 8·2048 + 2048:
  // 8·18,432 = 147,456.
  CHECK(test::act_eager_saved_bytes(*moe, ActSplit::kTp) == 147456.0);
  // Active: routed experts count 8/256: per MoE block the routed part 11,274,289,152 becomes 352,321,536, so
  // active = 671,026,419,200 − 58·(11,274,289,152 − 352,321,536) = 671,026,419,200
  //   − 633,474,121,728 = 37,552,297,472 (the report's "37B activated").
  CHECK(m.active_parameters() == 37'552'297'472.0);
  // The multi-token-prediction module (num_nextn_predict_layers = 1): enorm and hnorm 2·7168, eh_proj
  // 7168·14336 = 102,760,448, one MoE block 11,507,286,272, its final norm 7168, embedding and head shared
  // with the main model:
  //   11,610,068,224 more, 682,636,487,424 in all (the checkpoint stores copies of the embedding and head in
  //   layer 61:
  //   + 1,853,358,080 = 684,489,845,504, HF's "685B" with the fp8 scales).
  ModelSpec s = m.spec();
  s.mtp_layers = 1;
  const ModelGraph mtp = ModelGraph::from_spec(s);
  CHECK(mtp.parameters() == 682'636'487'424);
  CHECK(mtp.blocks() == 62);
  CHECK(mtp.order().back()->kind == LayerKind::kLoss);
  CHECK(ModelGraph::from_graph_json(mtp.to_graph_json(), "mtp").parameters() == mtp.parameters());
}

TEST_CASE("active parameters of the MoE presets are within the names' rounding", "[simulator][model]") {
  // qwen3-30b-a3b: per block the routed 603,979,776 becomes 603,979,776·8/128 = 37,748,736:
  //   30,532,122,624 − 48·566,231,040 = 3,353,032,704 ("A3B"; the model card's 3.3B activated).
  CHECK(load_model("qwen3-30b-a3b").active_parameters() == 3'353'032'704.0);
  // qwen3-235b-a22b: 2,415,919,104 → 150,994,944 per block: 235,093,634,560 − 94·2,264,924,160 =
  // 22,190,763,520.
  CHECK(load_model("qwen3-235b-a22b").active_parameters() == 22'190'763'520.0);
  // llama4-scout: 2,013,265,920 → 125,829,120 per block (top-1 of 16): 107,769,861,120 − 48·1,887,436,800
  //   = 17,172,894,720 ("17B").
  CHECK(load_model("llama4-scout").active_parameters() == 17'172'894'720.0);
}

TEST_CASE("new-family graph JSON round trip keeps windows, V head dims and experts",
          "[simulator][model][graph]") {
  for (const char* name : {"deepseek-v3", "llama4-scout", "qwen3-30b-a3b"}) {
    INFO(name);
    const ModelGraph a = load_model(name);
    const ModelGraph b = ModelGraph::from_graph_json(a.to_graph_json(), "roundtrip");
    CHECK(b.parameters() == a.parameters());
    CHECK(b.active_parameters() == a.active_parameters());
    CHECK(b.attention_model_flops_per_token(8192) == a.attention_model_flops_per_token(8192));
    REQUIRE(b.order().size() == a.order().size());
    for (std::size_t i = 0; i < a.order().size(); ++i) {
      CHECK(b.order()[i]->attn_window == a.order()[i]->attn_window);
      CHECK(b.order()[i]->attn_chunked == a.order()[i]->attn_chunked);
      CHECK(b.order()[i]->attn_v_head_dim == a.order()[i]->attn_v_head_dim);
    }
    // And the spec itself survives model_spec_to_json → parse_model_spec.
    CHECK(
        ModelGraph::from_spec(parse_model_spec(JsonObj(model_spec_to_json(a.spec()), "spec"))).parameters() ==
        a.parameters());
  }
}

TEST_CASE("bad family inputs: one clear error", "[simulator][model][hf]") {
  // Qwen3 sliding windows from max_window_layers on are not modelled.
  Json q = load_json_file(std::string(SHARDPLAN_TEST_DATA) + "/hf/qwen3-8b.json");
  q["use_sliding_window"] = true;
  CHECK_THROWS_WITH(parse_hf_config(q, "q.json"), Catch::Contains("/use_sliding_window"));
  // A layer_types list that is not periodic.
  Json g = load_json_file(std::string(SHARDPLAN_TEST_DATA) + "/hf/gemma-3-1b.json");
  g["layer_types"] = Json::array();
  for (int b = 0; b < 26; ++b) g["layer_types"].push_back(b == 3 ? "full_attention" : "sliding_attention");
  CHECK_THROWS_WITH(parse_hf_config(g, "g.json"), Catch::Contains("/layer_types/7"));
  // MoE settings that leave no MoE block.
  ModelSpec s = load_model("deepseek-v3").spec();
  s.moe.first_dense = 61;
  CHECK_THROWS_WITH(ModelGraph::from_spec(s), Catch::Contains("no block is a mixture of experts"));
  // MLA needs every dimension.
  Json d = load_json_file(std::string(SHARDPLAN_TEST_DATA) + "/hf/deepseek-v3.json");
  d.erase("v_head_dim");
  CHECK_THROWS_WITH(parse_hf_config(d, "d.json"), Catch::Contains("/v_head_dim"));
}

TEST_CASE("grouped experts: one 3-D parameter per expert weight, FSDP2's shard of it as torchtitan places it",
          "[simulator][model]") {
  // Qwen3-30B-A3B: each MoE layer has a router [128 x 2048] and, as torchtitan 0.3.0's GroupedExperts holds
  // them, w1 (gate) and w3 (up) [128 x 768 x 2048] and w2 (down) [128 x 2048 x 768]: four tensors in two
  // groups (the router; gate and up, one shape).
  const ModelGraph m = load_model("qwen3-30b-a3b");
  const Layer* moe = nullptr;
  for (const Layer* l : m.order())
    if (l->moe_experts > 0 && !moe) moe = l;
  REQUIRE(moe);
  REQUIRE(moe->tensors.size() == 4);
  CHECK(moe->tensors[1].stack == 128);
  CHECK(moe->tensors[1].numel() == 128 * 768 * 2048);
  std::vector<std::int64_t> counts;
  moe->for_each_tensor_group([&](const Tensor&, std::int64_t n) { counts.push_back(n); });
  CHECK(counts == std::vector<std::int64_t>{1, 2, 1});
  // FSDP2 (torchtitan distributed/fsdp.py): Shard(0) over the experts while the ranks (x EP) do not exceed
  // them: 64 ranks -> ceil(128 / 64) = 2 experts of 768 x 2048 each; 256 ranks -> Shard(1), every expert's
  // dim 0 split: 128 x ceil(768 / 256) x 2048 = 128 x 3 x 2048; 96 ranks: ceil(128 / 96) = 2 experts, padded
  // (96 x 2 = 192 slots for 128).
  const Tensor& w1 = moe->tensors[1];
  CHECK(tensor_shard_elems(w1, 1, 64, Padding::kPerTensorDim0) == 2 * 768 * 2048);
  CHECK(tensor_shard_elems(w1, 1, 256, Padding::kPerTensorDim0) == 128 * 3 * 2048);
  CHECK(tensor_shard_elems(w1, 1, 96, Padding::kPerTensorDim0) == 2 * 768 * 2048);
  // Expert parallelism 8: the rank holds 16 experts, sharded over its expert-FSDP ranks: 8 -> 2 experts; 32
  // (8 x 32 = 256 > 128) -> Shard(1): 16 x ceil(768 / 32) x 2048. DeepSpeed pads the flat numel.
  CHECK(rank_shard_elems(w1, 1, 1, 8, Padding::kPerTensorDim0, 8) == 2 * 768 * 2048);
  CHECK(rank_shard_elems(w1, 1, 1, 32, Padding::kPerTensorDim0, 8) == 16 * 24 * 2048);
  CHECK(rank_shard_elems(w1, 1, 1, 5, Padding::kPerTensor, 8) == (16LL * 768 * 2048 + 4) / 5);
  CHECK(rank_local_elems(w1, 2, 1, 8) == 2 * 16 * 768 * 2048);
  // The grouped tensors carry the same parameters: 48 blocks x (router + 3 x 128 x 768 x 2048) as before.
  CHECK(m.parameters() == 30'532'122'624);
  // Every layer: the grouped walk sums the same elements and tensors as the tensor-by-tensor one (a copy
  // without groups walks each tensor once).
  for (const Layer* l : m.order()) {
    Layer plain = *l;
    plain.tensor_groups.clear();
    std::int64_t grouped = 0, single = 0, n_grouped = 0, n_single = 0;
    l->for_each_tensor_group(
        [&](const Tensor& t, std::int64_t n) { grouped += t.numel() * n, n_grouped += n; });
    plain.for_each_tensor_group(
        [&](const Tensor& t, std::int64_t n) { single += t.numel() * n, n_single += n; });
    CHECK(grouped == single);
    CHECK(n_grouped == n_single);
    CHECK(grouped == l->parameters());
  }
}
