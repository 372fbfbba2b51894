// Model graphs: exact parameter counts of the presets, the same counts from the public Hugging Face config.json
// files (tests/data/hf), and the graph JSON round trip.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "sim_helpers.hpp"

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
//   + 10,240 = 317,204,480; 40·block + 2·32000·5120 + 5120 = 12,688,179,200 + 327,680,000 + 5,120 = 13,015,864,320
// llama2-70b  L=80 h=8192 kv=1024 f=28672 V=32000: block = 2·8192² + 2·8192·1024 + 3·8192·28672 + 16384
//   = 134,217,728 + 16,777,216 + 704,643,072 + 16,384 = 855,654,400; 80·block + 2·32000·8192 + 8192
//   = 68,452,352,000 + 524,288,000 + 8,192 = 68,976,648,192
// llama3-8b   L=32 h=4096 kv=1024 f=14336 V=128256: block = 2·4096² + 2·4096·1024 + 3·4096·14336 + 8192
//   = 33,554,432 + 8,388,608 + 176,160,768 + 8,192 = 218,112,000; 32·block + 2·128256·4096 + 4096
//   = 6,979,584,000 + 1,050,673,152 + 4,096 = 8,030,261,248
// llama3-70b  as llama2-70b with V=128256: 68,452,352,000 + 2·128256·8192 + 8192 = 68,452,352,000
//   + 2,101,346,304 + 8,192 = 70,553,706,496
// llama3.1-405b L=126 h=16384 kv=1024 f=53248 V=128256: block = 2·16384² + 2·16384·1024 + 3·16384·53248 + 32768
//   = 536,870,912 + 33,554,432 + 2,617,245,696 + 32,768 = 3,187,703,808; 126·block + 2·128256·16384 + 16384
//   = 401,650,679,808 + 4,202,692,608 + 16,384 = 405,853,388,800
// mixtral-8x7b L=32 h=4096 kv=1024 f=14336 V=32000, 8 experts + router: block = 2·4096² + 2·4096·1024
//   + 8·3·4096·14336 + 8·4096 + 8192 = 33,554,432 + 8,388,608 + 1,409,286,144 + 32,768 + 8,192 = 1,451,270,144;
//   32·block + 2·32000·4096 + 4096 = 46,440,644,608 + 262,144,000 + 4,096 = 46,702,792,704
const std::vector<Expected> kModels = {
    {"llama2-7b", 6'738'415'616},     {"llama2-13b", 13'015'864'320},    {"llama2-70b", 68'976'648'192},
    {"llama3-8b", 8'030'261'248},     {"llama3-70b", 70'553'706'496},    {"llama3.1-405b", 405'853'388'800},
    {"mixtral-8x7b", 46'702'792'704},
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
  }
}

TEST_CASE("Mixtral HF config reads the expert fields", "[simulator][model][hf]") {
  // num_local_experts = 8, num_experts_per_tok = 2 in mistralai/Mixtral-8x7B-v0.1.
  ModelGraph m = load_model(std::string(SHARDPLAN_TEST_DATA) + "/hf/mixtral-8x7b.json");
  CHECK(m.spec().moe.experts == 8);
  CHECK(m.spec().moe.top_k == 2);
}

TEST_CASE("graph JSON round trip keeps the parameter count and the layer order", "[simulator][model][graph]") {
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

TEST_CASE("active parameters: top-k of the routed experts (MoE), all of a dense model", "[simulator][model]") {
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
