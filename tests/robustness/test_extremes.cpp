// Exact integer arithmetic at the extremes of scale: Llama-3.1-405B sharded over 2^20 GPUs, and a 1.7·10^13
// parameter model whose count is checked against a closed form evaluated in 128-bit integers.
#include <catch2/catch.hpp>

#include "core/checked.hpp"
#include "simulator/model/presets.hpp"
#include "tests/robustness/helpers.hpp"

using namespace shardplan;
using namespace shardplan::test;
using i128 = __int128;

namespace {

/// Elements one rank holds under per-parameter (FSDP2) sharding over `world` ranks: every tensor's dim0 is
/// split into ceil(dim0 / world) rows per rank, padding included.
std::int64_t padded_shard_elements(const ModelGraph& g, std::int64_t world) {
  std::int64_t n = 0;
  for (const Layer* l : g.order())
    for (const auto& t : l->tensors) n += (t.dim0 + world - 1) / world * t.dim1;
  return n;
}

/// What the caching allocator adds to that per rank: FSDP2's shard and AdamW's two moments of each tensor are
/// one allocation each, rounded up to 512 B (< 512 B more each), and fused AdamW's `step` is one 512 B
/// allocation per tensor (docs/model.md "Persistent state to the byte").
std::int64_t allocation_slack_bytes(const ModelGraph& g) {
  std::int64_t n = 0;
  for (const Layer* l : g.order()) n += static_cast<std::int64_t>(l->tensors.size());
  return n * (3 * 511 + 512);
}

std::int64_t to_i64(i128 v) {
  REQUIRE(v <= static_cast<i128>(INT64_MAX));
  return static_cast<std::int64_t>(v);
}

}  // namespace

TEST_CASE("Llama-3.1-405B on 2^20 GPUs: exact parameters, persistent state 16 bytes/param within padding",
          "[robustness][extremes]") {
  constexpr std::int64_t W = std::int64_t{1} << 20;
  const ModelGraph g = load_model("llama3.1-405b");
  // Closed form, llama3.1-405b.json: L=126, h=16384, a=128, kv=8, d=128, f=53248, V=128256, SwiGLU, RMSNorm,
  // untied.
  const i128 L = 126, h = 16384, kv = 8 * 128, f = 53248, V = 128256;
  const i128 psi = L * (2 * h * h + 2 * h * kv + 3 * h * f + 2 * h) + 2 * V * h + h;
  REQUIRE(g.parameters() == to_i64(psi));  // 405,853,388,800

  auto dir = scratch_dir();
  auto r = run_cli(
      {"memory", "--model", "llama3.1-405b", "--cluster", "dgx-h100", "--gpus", "1048576", "--json", "-"},
      dir);
  INFO(r.err);
  REQUIRE((r.code == 0 || r.code == 1));
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j.at("inputs").at("model").at("parameters").get<std::int64_t>() == g.parameters());
  CHECK(j.at("inputs").at("gpus").get<std::int64_t>() == W);
  const auto persistent = j.at("memory").at("persistent_bytes").get<std::int64_t>();
  // bf16-mixed ZeRO-3: fp32 params + fp32 grads + Adam m, v = 16 bytes per parameter, sharded over 2^20
  // ranks. Lower bound: a perfect split, 16·Ψ/2^20 = 6,192,892 bytes. Upper bound: FSDP2's padding to
  // ceil(dim0/2^20) rows per tensor; no tensor has 2^20 rows here, so every rank holds one (padded) row of
  // each tensor; plus the allocator's 512 B rounding and AdamW's step tensors.
  const std::int64_t lower = 16 * g.parameters() / W;
  const std::int64_t upper = 16 * padded_shard_elements(g, W) + allocation_slack_bytes(g);
  INFO("persistent " << persistent << " bounds [" << lower << ", " << upper << "]");
  CHECK(persistent >= lower);
  CHECK(persistent <= upper);
  CHECK(j.at("memory").at("peak_bytes").get<std::int64_t>() >= persistent);
}

TEST_CASE("a 1.7e13-parameter model: exact count against a 128-bit closed form", "[robustness][extremes]") {
  // L=1000, h=32768, a=256 (d=128), kv=32, f=131072, V=131072, SwiGLU, RMSNorm, biases on everything, untied.
  const i128 L = 1000, h = 32768, d = 128, q = 256 * d, kv = 32 * d, f = 131072, V = 131072;
  const i128 attention = q * h + 2 * kv * h + h * q + (q + 2 * kv + h);  // wq wk wv wo + bq bk bv bo
  const i128 mlp = 3 * h * f + (2 * f + h);                              // gate up down + biases
  const i128 norms = 2 * h;                                              // RMSNorm: weight only
  const i128 psi = L * (attention + mlp + norms) + V * h + h + V * h;    // embedding, final norm, head
  const std::string spec = R"({"schema": "shardplan.model/1", "name": "ten-trillion", "layers": 1000,
    "hidden": 32768, "heads": 256, "kv_heads": 32, "ffn_hidden": 131072, "vocab": 131072, "mlp": "swiglu",
    "norm": "rmsnorm", "attn_bias": true, "mlp_bias": true, "seq": 8192})";

  const ModelGraph g =
      ModelGraph::from_spec(parse_model_spec(JsonObj(Json::parse(spec), "ten-trillion.json")));
  CHECK(g.parameters() == to_i64(psi));
  CHECK(psi > i128{10'000'000'000'000});

  auto dir = scratch_dir();
  write_text(dir / "ten-trillion.json", spec);
  for (const char* gpus : {"8", "1048576"}) {
    auto r = run_cli(
        {"memory", "--model", "ten-trillion.json", "--cluster", "dgx-h100", "--gpus", gpus, "--json", "-"},
        dir);
    INFO("gpus " << gpus << ": " << r.err);
    REQUIRE((r.code == 0 || r.code == 1));  // it does not fit on 8 GPUs; the report is still written
    const auto j = nlohmann::json::parse(r.out);
    CHECK(j.at("inputs").at("model").at("parameters").get<std::int64_t>() == to_i64(psi));
    const std::int64_t world = std::stoll(gpus);
    const auto persistent = j.at("memory").at("persistent_bytes").get<std::int64_t>();
    CHECK(persistent >= to_i64(16 * psi / world));
    CHECK(persistent <= 16 * padded_shard_elements(g, world) + allocation_slack_bytes(g));
  }
}

TEST_CASE("beyond int64: a model whose parameter count overflows is bad input, not garbage",
          "[robustness][extremes]") {
  // Graph JSON lets one tensor be 2^30 x 2^30 = 2^60 elements; a few of them pass 2^63.
  std::string layers;
  for (int i = 0; i < 9; ++i)
    layers += std::string(i ? "," : "") + R"({"name": "t)" + std::to_string(i) +
              R"(", "kind": "mlp", "tensors": [{"name": "w", "shape": [1073741824, 1073741824]}]})";
  const std::string graph = R"({"schema": "shardplan.graph/1", "spec": {"layers": 1, "hidden": 8, "heads": 1,
    "ffn_hidden": 8, "vocab": 8}, "layers": [)" +
                            layers + "]}";
  CHECK_THROWS_AS(ModelGraph::from_graph_json(Json::parse(graph), "g.json"), OverflowError);
  auto dir = scratch_dir();
  write_text(dir / "g.json", graph);
  expect_bad_input(run_cli({"memory", "--model", "g.json"}, dir), {"overflow"});
}

TEST_CASE("clusters at the GPU-count limits", "[robustness][extremes]") {
  const ClusterSpec dgx = load_cluster_spec("dgx-h100");
  CHECK_THROWS_AS(Cluster(dgx, 0), InputError);
  CHECK_THROWS_AS(Cluster(dgx, -8), InputError);
  CHECK_THROWS_AS(Cluster(dgx, 2147483640), InputError);  // a multiple of 8 near INT_MAX
  const Cluster big(dgx, 1 << 24);
  CHECK(big.nodes() == (1 << 24) / 8);
  const GroupView all = big.group(1 << 24, 1);
  CHECK(all.nodes == (1 << 24) / 8);
  CHECK(all.crosses_leaf);
  CHECK(all.inter_Bps > 0);
}
