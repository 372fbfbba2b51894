// Model graphs: exact parameter counts of the presets, the same counts from the public Hugging Face
// config.json files (tests/data/hf), and the graph JSON round trip.
#include <algorithm>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "sim_helpers.hpp"
#include "simulator/memory/layer_memory.hpp"

using namespace shardplan;

namespace {
struct Expected {
  const char* name;
  std::int64_t params;
};
// Llama-style count (no biases, untied head, RMSNorm weights only), d = h / a, q = a·d, kv = kv_heads·d:
//   per block  = attention h·q + 2·h·kv + q·h  +  MLP 3·h·f (× experts, + router experts·h)  +  2 norms 2·h
//   total      = L·block + embedding V·h + head V·h + final norm h
// llama2-7b   L=32 h=4096 q=kv=4096 f=11008 V=32000:
//   block = 4·4096² + 3·4096·11008 + 8192 = 67,108,864 + 135,266,304 + 8,192 = 202,383,360
//   32·202,383,360 + 2·32000·4096 + 4096 = 6,476,267,520 + 262,144,000 + 4,096 = 6,738,415,616
// llama2-13b  L=40 h=5120 f=13824 V=32000: block = 4·5120² + 3·5120·13824 + 10240 = 104,857,600 + 212,336,640
//   + 10,240 = 317,204,480; 40·block + 2·32000·5120 + 5120 = 12,688,179,200 + 327,680,000 + 5,120 =
//   13,015,864,320
// llama2-70b  L=80 h=8192 kv=1024 f=28672 V=32000: block = 2·8192² + 2·8192·1024 + 3·8192·28672 + 16384
//   = 134,217,728 + 16,777,216 + 704,643,072 + 16,384 = 855,654,400; 80·block + 2·32000·8192 + 8192
//   = 68,452,352,000 + 524,288,000 + 8,192 = 68,976,648,192
// llama3-8b   L=32 h=4096 kv=1024 f=14336 V=128256: block = 2·4096² + 2·4096·1024 + 3·4096·14336 + 8192
//   = 33,554,432 + 8,388,608 + 176,160,768 + 8,192 = 218,112,000; 32·block + 2·128256·4096 + 4096
//   = 6,979,584,000 + 1,050,673,152 + 4,096 = 8,030,261,248
// llama3-70b  as llama2-70b with V=128256: 68,452,352,000 + 2·128256·8192 + 8192 = 68,452,352,000
//   + 2,101,346,304 + 8,192 = 70,553,706,496
// llama3.1-405b L=126 h=16384 kv=1024 f=53248 V=128256: block = 2·16384² + 2·16384·1024 + 3·16384·53248 +
// 32768
//   = 536,870,912 + 33,554,432 + 2,617,245,696 + 32,768 = 3,187,703,808; 126·block + 2·128256·16384 + 16384
//   = 401,650,679,808 + 4,202,692,608 + 16,384 = 405,853,388,800
// mixtral-8x7b L=32 h=4096 kv=1024 f=14336 V=32000, 8 experts + router: block = 2·4096² + 2·4096·1024
//   + 8·3·4096·14336 + 8·4096 + 8192 = 33,554,432 + 8,388,608 + 1,409,286,144 + 32,768 + 8,192 =
//   1,451,270,144; 32·block + 2·32000·4096 + 4096 = 46,440,644,608 + 262,144,000 + 4,096 = 46,702,792,704
//
// Qwen3 (head_dim d = 128 given, not h / a; q_norm and k_norm of d each: +2·128 per block; no qkv bias;
// untied). The counts equal the safetensors index "total_size" / 2 bytes (bf16) of the Hugging Face
// checkpoints. qwen3-8b    L=36 h=4096 a=32 kv=8 f=12288 V=151936: q = 4096, kv = 1024; block = 2·4096·4096 +
// 2·4096·1024
//   + 3·4096·12288 + 2·4096 + 256 = 33,554,432 + 8,388,608 + 150,994,944 + 8,448 = 192,946,432;
//   36·block + 2·151936·4096 + 4096 = 6,946,071,552 + 1,244,659,712 + 4,096 = 8,190,735,360 (total_size
//   16,381,470,720 bytes)
// qwen3-32b   L=64 h=5120 a=64 kv=8 f=25600: q = 8192, kv = 1024; block = 2·5120·8192 + 2·5120·1024
//   + 3·5120·25600 + 2·5120 + 256 = 83,886,080 + 10,485,760 + 393,216,000 + 10,496 = 487,598,336;
//   64·block + 2·151936·5120 + 5120 = 31,206,293,504 + 1,555,824,640 + 5,120 = 32,762,123,264
// qwen3-30b-a3b L=48 h=2048 a=32 kv=4, 128 experts of 768 + router: q = 4096, kv = 512; block = 2·2048·4096
//   + 2·2048·512 + 128·3·2048·768 + 128·2048 + 2·2048 + 256 = 16,777,216 + 2,097,152 + 603,979,776 + 262,144
//   + 4,352 = 623,120,640; 48·block + 2·151936·2048 + 2048 = 29,909,790,720 + 622,329,856 + 2,048 =
//   30,532,122,624
// qwen3-235b-a22b L=94 h=4096 a=64 kv=4, 128 experts of 1536: q = 8192, kv = 512; block = 2·4096·8192
//   + 2·4096·512 + 128·3·4096·1536 + 128·4096 + 2·4096 + 256 = 67,108,864 + 4,194,304 + 2,415,919,104 +
//   524,288
//   + 8,448 = 2,487,755,008; 94·block + 2·151936·4096 + 4096 = 233,848,970,752 + 1,244,659,712 + 4,096
//   = 235,093,634,560
// deepseek-v3 L=61 h=7168 a=128, MLA rq=1536 rkv=512 dn=128 dr=64 dv=128; 3 dense blocks (f=18432) then 58
// MoE
//   blocks (256 routed experts of 2048, 1 shared of 2048, router 256·h + e_score_correction_bias 256),
//   V=129280: attention = q_a 1536·7168 + q_a_norm 1536 + q_b 128·192·1536 + kv_a 576·7168 + kv_a_norm 512
//     + kv_b 128·256·512 + o 7168·128·128 = 11,010,048 + 1,536 + 37,748,736 + 4,128,768 + 512 + 16,777,216
//     + 117,440,512 = 187,107,328
//   dense block = 187,107,328 + 3·7168·18432 + 2·7168 = 187,107,328 + 396,361,728 + 14,336 = 583,483,392
//   MoE block = 187,107,328 + 256·44,040,192 + 44,040,192 + 1,835,008 + 256 + 14,336 = 11,507,286,272
//     (3·7168·2048 = 44,040,192)
//   3·583,483,392 + 58·11,507,286,272 + 2·129280·7168 + 7168 = 1,750,450,176 + 667,422,603,776 +
//   1,853,358,080
//     + 7,168 = 671,026,419,200 — the "671B" of the report; the checkpoint's 685B adds the MTP module
//     (below).
// llama4-scout (language model) L=48 h=5120 a=40 kv=8 d=128, every block MoE: 16 experts of 8192, a shared
//   expert of 8192, router 16·h; V=202048: block = 2·5120·5120 + 2·5120·1024 + 16·3·5120·8192 + 3·5120·8192
//   + 16·5120 + 2·5120 = 52,428,800 + 10,485,760 + 2,013,265,920 + 125,829,120 + 81,920 + 10,240
//   = 2,202,101,760; 48·block + 2·202048·5120 + 5120 = 105,700,884,480 + 2,068,971,520 + 5,120
//   = 107,769,861,120. Meta's "109B" includes the vision encoder and projector, which are not modelled.
// gpt-oss-20b L=24 h=2880 a=64 kv=8 d=64 (q = 4096, kv = 512), every block MoE: 32 experts of f=2880 with
//   biases (transformers GptOssExperts: gate_up_proj [E, h, 2f] + bias [E, 2f], down_proj [E, f, h] + bias
//   [E, h]), router weight [E, h] + bias [E], q/k/v/o biases, sinks [a], two RMSNorms; V=201088 untied:
//   attention = 2·2880·4096 + 2·2880·512 + 4096 + 2·512 + 2880 + 64 = 26,542,080 + 8,064 = 26,550,144;
//   experts = 32·(2880·5760 + 5760 + 2880·2880 + 2880) = 32·24,891,840 = 796,538,880; router = 32·2880 + 32
//   = 92,192; block = 26,550,144 + 796,538,880 + 92,192 + 5,760 = 823,186,976;
//   24·block + 2·201088·2880 + 2880 = 19,756,487,424 + 1,158,266,880 + 2,880 = 20,914,757,184 ("20.9B")
// gpt-oss-120b L=36, 128 experts: experts = 128·24,891,840 = 3,186,155,520; router = 128·2880 + 128 =
//   368,768; block = 26,550,144 + 3,186,155,520 + 368,768 + 5,760 = 3,213,080,192; 36·block + 1,158,266,880
//   + 2,880 = 115,670,886,912 + 1,158,269,760 = 116,829,156,672 ("116.8B")
const std::vector<Expected> kModels = {
    {"llama2-7b", 6'738'415'616},         {"llama2-13b", 13'015'864'320},
    {"llama2-70b", 68'976'648'192},       {"llama3-8b", 8'030'261'248},
    {"llama3-70b", 70'553'706'496},       {"llama3.1-405b", 405'853'388'800},
    {"mixtral-8x7b", 46'702'792'704},     {"qwen3-8b", 8'190'735'360},
    {"qwen3-32b", 32'762'123'264},        {"qwen3-30b-a3b", 30'532'122'624},
    {"qwen3-235b-a22b", 235'093'634'560}, {"deepseek-v3", 671'026'419'200},
    {"llama4-scout", 107'769'861'120},    {"gpt-oss-20b", 20'914'757'184},
    {"gpt-oss-120b", 116'829'156'672},
};
}  // namespace

TEST_CASE("preset parameter counts are exact", "[simulator][model]") {
  for (const auto& e : kModels) {
    INFO(e.name);
    CHECK(load_model(e.name).parameters() == e.params);
  }
}

TEST_CASE("Hugging Face config.json import gives the preset's parameter count", "[simulator][model][hf]") {
  for (const auto& e : kModels) {
    const std::string path = std::string(SHARDPLAN_TEST_DATA) + "/hf/" + e.name + ".json";
    INFO(path);
    ModelGraph hf = load_model(path);
    CHECK(hf.parameters() == e.params);
    // The architecture, not just the count, must match the preset (a transposed f/h would keep 3·h·f).
    ModelGraph preset = load_model(e.name);
    CHECK(hf.spec().layers == preset.spec().layers);
    CHECK(hf.spec().hidden == preset.spec().hidden);
    CHECK(hf.spec().heads == preset.spec().heads);
    CHECK(hf.spec().kv_heads == preset.spec().kv_heads);
    CHECK(hf.spec().ffn_hidden == preset.spec().ffn_hidden);
    CHECK(hf.spec().vocab == preset.spec().vocab);
    CHECK(hf.spec().moe.experts == preset.spec().moe.experts);
    CHECK(hf.spec().moe.top_k == preset.spec().moe.top_k);
    CHECK(hf.spec().head_dim == preset.spec().head_dim);
    CHECK(hf.spec().moe.ffn_hidden == preset.spec().moe.ffn_hidden);
    CHECK(hf.spec().moe.shared_experts == preset.spec().moe.shared_experts);
    CHECK(hf.spec().moe.first_dense == preset.spec().moe.first_dense);
    CHECK(hf.spec().qk_norm == preset.spec().qk_norm);
    CHECK(hf.spec().mla.kv_lora_rank == preset.spec().mla.kv_lora_rank);
    CHECK(hf.spec().window == preset.spec().window);
    CHECK(hf.spec().global_every == preset.spec().global_every);
    CHECK(hf.active_parameters() == preset.active_parameters());
  }
}

TEST_CASE("Mixtral HF config reads the expert fields", "[simulator][model][hf]") {
  // num_local_experts = 8, num_experts_per_tok = 2 in mistralai/Mixtral-8x7B-v0.1.
  ModelGraph m = load_model(std::string(SHARDPLAN_TEST_DATA) + "/hf/mixtral-8x7b.json");
  CHECK(m.spec().moe.experts == 8);
  CHECK(m.spec().moe.top_k == 2);
  // transformers 5 saves Qwen3-MoE's expert count as num_local_experts (Qwen3MoeConfig.attribute_map).
  const Json q = Json::parse(R"({"model_type": "qwen3_moe", "vocab_size": 512, "hidden_size": 256,
      "intermediate_size": 512, "moe_intermediate_size": 128, "num_hidden_layers": 2,
      "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "num_local_experts": 4,
      "num_experts_per_tok": 2, "tie_word_embeddings": false})");
  const ModelSpec qs = parse_hf_config(q, "config.json");
  CHECK(qs.moe.experts == 4);
  CHECK(qs.moe.ffn_hidden == 128);
  CHECK(qs.moe.peft_expert_targets);
}

TEST_CASE("graph JSON round trip keeps the parameter count and the layer order",
          "[simulator][model][graph]") {
  for (const char* name : {"llama3-8b", "mixtral-8x7b", "gpt2-xl"}) {
    INFO(name);
    ModelGraph a = load_model(name);
    ModelGraph b = ModelGraph::from_graph_json(a.to_graph_json(), "roundtrip");
    CHECK(b.parameters() == a.parameters());
    CHECK(b.embedding_parameters() == a.embedding_parameters());
    CHECK(b.blocks() == a.blocks());
    CHECK(b.largest_tensor() == a.largest_tensor());
    REQUIRE(b.order().size() == a.order().size());
    for (std::size_t i = 0; i < a.order().size(); ++i) {
      INFO("layer " << i);
      CHECK(b.order()[i]->name == a.order()[i]->name);
      CHECK(b.order()[i]->kind == a.order()[i]->kind);
      CHECK(b.order()[i]->parameters() == a.order()[i]->parameters());
    }
    // Through text too (the path --model takes for a graph file): dump, parse, load.
    ModelGraph c = load_model_json(parse_json_text(a.to_graph_json().dump(), "text"), "text", "");
    CHECK(c.parameters() == a.parameters());
  }
}

TEST_CASE("execution order: embedding first, blocks in order, loss last", "[simulator][model][graph]") {
  // Llama: tok_embeddings, then per block attention_norm, attention, ffn_norm, mlp; then norm, output, loss
  // ⇒ 1 + 4·L + 3 layers.
  ModelGraph m = load_model("llama2-7b");
  const auto& o = m.order();
  REQUIRE(o.size() == 1 + 4 * 32 + 3);
  CHECK(o.front()->kind == LayerKind::kEmbedding);
  CHECK(o.back()->kind == LayerKind::kLoss);
  int last_block = -1;
  for (const Layer* l : o)
    if (l->block >= 0) {
      CHECK(l->block >= last_block);
      last_block = l->block;
    }
  CHECK(last_block == 31);
}

TEST_CASE("active parameters: top-k of the routed experts (MoE), all of a dense model",
          "[simulator][model]") {
  // mixtral-8x7b: routed experts 32 blocks x 8 x 3·4096·14336 = 45,097,156,608; everything else
  // 46,702,792,704 - 45,097,156,608 = 1,605,636,096 (the routers included). A token uses 2 of 8 experts:
  // 1,605,636,096 + 45,097,156,608 x 2/8 = 1,605,636,096 + 11,274,289,152 = 12,879,925,248.
  CHECK(load_model("mixtral-8x7b").active_parameters() == Approx(12'879'925'248.0).epsilon(1e-15));
  for (const char* dense : {"llama3-8b", "llama3-70b", "gpt3-175b"}) {
    INFO(dense);
    const ModelGraph m = load_model(dense);
    CHECK(m.active_parameters() == static_cast<double>(m.parameters()));
  }
  // The graph JSON keeps what makes a parameter routed.
  const ModelGraph moe = load_model("mixtral-8x7b");
  CHECK(ModelGraph::from_graph_json(moe.to_graph_json(), "round trip").active_parameters() ==
        moe.active_parameters());
}

TEST_CASE("MFU counts the FLOPs of the active parameters: Mixtral on 16 H100s is near a quarter, not 92 %",
          "[simulator][model][mfu]") {
  fixture::Setup s("mixtral-8x7b", "dgx-h100", 16);
  Plan p;
  p.seq = 4096;
  p.ac = AcMode::kFull;
  const Result r = s.run(p);
  // 6 x (active - embedding) + 12 L h s = 6 x (12,879,925,248 - 131,072,000) + 12 x 32 x 4096 x 4096
  //   = 76,493,119,488 + 6,442,450,944 = 82,935,570,432 FLOPs per token.
  CHECK(r.model_flops_per_token == Approx(82'935'570'432.0).epsilon(1e-12));
  CHECK(r.mfu == Approx(r.tokens_per_s_per_gpu * r.model_flops_per_token / 989.4e12).epsilon(1e-12));
  CHECK(r.mfu > 0.15);
  CHECK(r.mfu < 0.45);
}

TEST_CASE("Hugging Face configs of the newer families: exact counts", "[simulator][model][hf]") {
  struct Case {
    const char* file;
    std::int64_t params;
  };
  // gemma-2-9b  L=42 h=3584 a=16 kv=8 d=256 f=14336 V=256000, GeGLU, 4 norms per block, tied embeddings:
  //   block = 2·3584·4096 + 2·3584·2048 + 3·3584·14336 + 4·3584 = 29,360,128 + 14,680,064 + 154,140,672 +
  //   14,336 = 198,195,200; 42·block + 256000·3584 + 3584 = 8,324,198,400 + 917,504,000 + 3,584 =
  //   9,241,705,984
  // gemma-3-1b  L=26 h=1152 a=4 kv=1 d=256 f=6912 V=262144, q/k norms of 256, 4 norms, tied: block
  //   = 2·1152·1024 + 2·1152·256 + 3·1152·6912 + 4·1152 + 2·256 = 2,359,296 + 589,824 + 23,887,872 + 5,120
  //   = 26,842,112; 26·block + 262144·1152 + 1152 = 697,894,912 + 301,989,888 + 1,152 = 999,885,952
  // phi-3-mini-4k L=32 h=3072 a=kv=32 f=8192 V=32064, fused qkv_proj and gate_up_proj (same counts): block
  //   = 4·3072² + 3·3072·8192 + 2·3072 = 37,748,736 + 75,497,472 + 6,144 = 113,252,352; 32·block +
  //   2·32064·3072
  //   + 3072 = 3,624,075,264 + 197,001,216 + 3,072 = 3,821,079,552 (the model card's 3.8B)
  // olmo-2-7b   L=32 h=4096 a=kv=32 f=11008 V=100352, q_norm 4096 and k_norm 4096 over the whole projection,
  //   2 post-norms: block = 4·4096² + 3·4096·11008 + 2·4096 + 2·4096 = 67,108,864 + 135,266,304 + 16,384
  //   = 202,391,552; 32·block + 2·100352·4096 + 4096 = 6,476,529,664 + 822,083,584 + 4,096 = 7,298,617,344
  for (const Case& c : {Case{"gemma-2-9b", 9'241'705'984}, Case{"gemma-3-1b", 999'885'952},
                        Case{"phi-3-mini-4k", 3'821'079'552}, Case{"olmo-2-7b", 7'298'617'344}}) {
    INFO(c.file);
    CHECK(load_model(std::string(SHARDPLAN_TEST_DATA) + "/hf/" + c.file + ".json").parameters() == c.params);
  }
}

TEST_CASE("family structure: fused projections, q/k norms, norm placement", "[simulator][model]") {
  const std::string hf = std::string(SHARDPLAN_TEST_DATA) + "/hf/";
  auto layer = [](const ModelGraph& m, const std::string& name) -> const Layer& {
    for (const Layer* l : m.order())
      if (l->name == name) return *l;
    FAIL("no layer " << name);
    return *m.order().front();
  };
  // Phi-3: one qkv tensor of (32 + 2·32)·96 = 9216 rows and one GEMM for it; one gate_up tensor of 2·8192
  // rows.
  const ModelGraph phi = load_model(hf + "phi-3-mini-4k.json");
  const Layer& pa = layer(phi, "blocks.0.attention");
  REQUIRE(pa.tensors.size() == 2);
  CHECK(pa.tensors[0].dim0 == 9216);
  CHECK(pa.gemms.size() == 2);
  CHECK(layer(phi, "blocks.0.mlp").tensors[0].dim0 == 2 * 8192);
  CHECK(pa.attn_window == 2047);  // sliding_window on every layer
  // OLMo 2: norms after attention and MLP; q_norm over 32·128 = 4096. Order per block: attention,
  // post_attention_norm, mlp, post_ffn_norm ⇒ 1 + 4·32 + 3 layers.
  const ModelGraph olmo = load_model(hf + "olmo-2-7b.json");
  CHECK(olmo.order().size() == 1 + 4 * 32 + 3);
  CHECK(olmo.order()[1]->kind == LayerKind::kAttention);
  CHECK(olmo.order()[2]->name == "blocks.0.post_attention_norm");
  CHECK(layer(olmo, "blocks.0.attention").parameters() == 4 * 4096LL * 4096 + 2 * 4096);
  // Gemma 2: four norms per block ⇒ 1 + 6·42 + 3 layers; tied head (no tensor).
  const ModelGraph g2 = load_model(hf + "gemma-2-9b.json");
  CHECK(g2.order().size() == 1 + 6 * 42 + 3);
  CHECK(g2.spec().tied_embeddings);
  CHECK(g2.spec().mlp == MlpKind::kGeGlu);
  // Qwen3-8B attention saves, per token (TP-split part): Q 2q, K and V 2kv each, O 2q, LSE 4a, and the q/k
  // norms' inputs 2(q + kv) with an fp32 rstd per head 4(a + kv): q = 4096, kv = 1024, a = 32:
  //   8192 + 4096 + 8192 + 128 + 10,240 + 160 = 31,008 bytes.
  CHECK(test::act_eager_saved_bytes(layer(load_model("qwen3-8b"), "blocks.0.attention"), ActSplit::kTp) ==
        31008.0);
}

TEST_CASE("NeMo GPT-3 and Nemotron presets: exact parameter counts", "[simulator][model]") {
  // From NeMo-Framework-Launcher launcher_scripts/conf/training/{gpt3,nemotron}/*.yaml at 1a7171d7
  // (models/*.json). gpt3-5b L=24 h=4096 a=32 f=16384 V=50257, biases, LayerNorm with bias, tied, 2048
  // learned positions:
  //   block = 4h^2 + 4h + 2hf + f + h + 4h = 67,125,248 + 134,238,208 + 16,384 = 201,379,840;
  //   24 block + 2h + V h + 2048 h = 4,833,116,160 + 8,192 + 205,852,672 + 8,388,608 = 5,047,365,632
  // gpt3-20b L=44 h=6144 a=48 f=24576: block = 151,019,520 + 302,020,608 + 24,576 = 453,064,704;
  //   44 block + 12,288 + 50257 x 6144 + 2048 x 6144 = 19,934,846,976 + 12,288 + 308,779,008 + 12,582,912
  //   = 20,256,221,184
  // nemotron3-8b L=32 h=4096 a=32 (MHA) f=16384 V=256000, no linear biases, LayerNorm weight + bias,
  // two-matrix
  //   MLP, untied: block = 4h^2 + 2hf + 4h = 67,108,864 + 134,217,728 + 16,384 = 201,342,976;
  //   32 block + 2h + 2 V h = 6,442,975,232 + 8,192 + 2,097,152,000 = 8,540,135,424
  // nemotron3-22b L=40 h=6144 a=48 f=24576: block = 150,994,944 + 301,989,888 + 24,576 = 453,009,408;
  //   40 block + 12,288 + 2 x 256000 x 6144 = 18,120,376,320 + 12,288 + 3,145,728,000 = 21,266,116,608
  // nemotron4-340b L=96 h=18432 a=96 kv=8 (d=192) f=73728: attention 2h^2 + 2 h 1536 = 736,100,352,
  //   MLP 2hf = 2,717,908,992, norms 4h = 73,728: block 3,454,083,072; 96 block + 36,864 + 2 x 256000 x 18432
  //   = 331,591,974,912 + 36,864 + 9,437,184,000 = 341,029,195,776 (the report's 9.4B embedding + 331.6B)
  const std::vector<Expected> nemo = {{"gpt3-5b", 5'047'365'632},
                                      {"gpt3-20b", 20'256'221'184},
                                      {"nemotron3-8b", 8'540'135'424},
                                      {"nemotron3-22b", 21'266'116'608},
                                      {"nemotron4-340b", 341'029'195'776}};
  for (const auto& e : nemo) {
    INFO(e.name);
    CHECK(load_model(e.name).parameters() == e.params);
  }
}

TEST_CASE("gpt-oss: sliding and full attention alternate, sinks, biased experts, MXFP4 in the checkpoint",
          "[simulator][model][hf]") {
  const ModelGraph m = load_model(std::string(SHARDPLAN_TEST_DATA) + "/hf/gpt-oss-120b.json");
  // layer_types: sliding_attention at even layers (window 128), full_attention at odd ones.
  for (const Layer* l : m.order())
    if (l->attn_heads > 0) CHECK(l->attn_window == (l->block % 2 == 0 ? 128 : 0));
  const Layer* attn = nullptr;
  const Layer* moe = nullptr;
  for (const Layer* l : m.order()) {
    if (l->attn_heads > 0 && !attn) attn = l;
    if (l->moe_experts > 0 && !moe) moe = l;
  }
  REQUIRE(attn);
  REQUIRE(moe);
  auto find = [](const Layer* l, const std::string& name) -> const Tensor* {
    for (const Tensor& t : l->tensors)
      if (t.name == name) return &t;
    return nullptr;
  };
  REQUIRE(find(attn, "sinks"));
  CHECK(find(attn, "sinks")->numel() == 64);
  CHECK(find(attn, "bo"));
  CHECK(moe->moe_experts == 128);
  CHECK(moe->moe_top_k == 4);
  REQUIRE(find(moe, "experts.w_gate_up"));
  CHECK(find(moe, "experts.w_gate_up")->stack == 128);
  CHECK(find(moe, "experts.b_gate_up")->numel() == 128 * 5760);
  CHECK(find(moe, "experts.b_down")->numel() == 128 * 2880);
  CHECK(find(moe, "router_bias"));
  // Every token passes through 4 of the 128 experts: active = all but 124/128 of the experts' parameters.
  // Per block 3,186,155,520 expert parameters -> 99,567,360 active.
  CHECK(m.active_parameters() == 116'829'156'672.0 - 36.0 * (3'186'155'520.0 - 99'567'360.0));
  // The released checkpoint: expert weight matrices in MXFP4 (16 bytes of 4-bit values + a 1-byte scale per
  // 32 values of a row's input dimension, 2880 = 90 blocks), everything else bf16. 120b: per block
  // 128·(5760 + 2880)·90·17 = 1,692,057,600 B; 36 blocks 60,914,073,600 B; the other 116,829,156,672 −
  // 36·128·(2·2880·2880 + 2880·2880) = 2,167,371,072 parameters x 2 B = 4,334,742,144 B: 65,248,815,744 B.
  CHECK(m.checkpoint_bytes() == 65'248'815'744);
  // 20b: 24·32·8640·90·17 = 10,152,345,600 + (20,914,757,184 − 19,110,297,600)·2 = 13,761,264,768 B.
  CHECK(load_model("gpt-oss-20b").checkpoint_bytes() == 13'761'264'768);
  // A bf16 checkpoint is two bytes a parameter.
  CHECK(load_model("qwen3-30b-a3b").checkpoint_bytes() == 2 * 30'532'122'624);
}
