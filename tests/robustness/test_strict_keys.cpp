// Unknown keys are rejected everywhere with the JSON pointer and the closest valid key: model spec, cluster
// (and its nested gpu / peak_flops / node / fabric), plan, run records, calibration profile. A misspelt
// required key is reported as missing with the same suggestion.
#include <catch2/catch.hpp>

#include "tests/fuzz/fuzz_targets.hpp"
#include "tests/robustness/helpers.hpp"

using namespace shardplan;

namespace {

/// Moves the value at `pointer` to a sibling key `to` (a typo of the last path component).
Json renamed(Json j, const std::string& pointer, const std::string& to) {
  const Json::json_pointer p(pointer);
  Json value = j.at(p);
  j.at(p.parent_pointer()).erase(p.back());
  j.at(p.parent_pointer())[to] = value;
  return j;
}

/// `parse` must throw InputError naming `where` and suggesting `suggestion`.
template <class F>
void expect_unknown(F&& parse, const std::string& where, const std::string& suggestion) {
  try {
    parse();
    FAIL("accepted; expected an error at " << where);
  } catch (const InputError& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find(where) != std::string::npos);
    CHECK(msg.find("did you mean \"" + suggestion + "\"") != std::string::npos);
  }
}

const Json kModel = Json::parse(R"({"schema": "shardplan.model/1", "name": "m", "layers": 2, "hidden": 64,
  "heads": 4, "kv_heads": 2, "ffn_hidden": 128, "vocab": 1000, "tied_embeddings": false,
  "moe": {"experts": 4, "top_k": 2}})");

const Json kRecord = Json::parse(R"({"schema": "shardplan.run/1", "id": "r", "model": "llama3-8b",
  "cluster": "dgx-h100", "gpus": 8, "plan": {"zero": 3, "mbs": 1, "seq": 1024, "ac": "full"},
  "measured": {"step_s": 1.5, "peak_allocated_bytes": 1000}})");

}  // namespace

TEST_CASE("model spec: unknown keys, top level and moe", "[robustness][keys]") {
  auto parse = [](const Json& j) { return [j] { return parse_model_spec(JsonObj(j, "m.json")); }; };
  REQUIRE_NOTHROW(parse(kModel)());
  expect_unknown(parse(renamed(kModel, "/tied_embeddings", "tie_embeddings")), "m.json: /tie_embeddings",
                 "tied_embeddings");
  expect_unknown(parse(renamed(kModel, "/moe/top_k", "topk")), "/moe/top_k",
                 "top_k");  // required: missing + hint
  Json experts_typo = kModel;
  experts_typo["moe"]["expert"] = 2;
  expect_unknown(parse(experts_typo), "/moe/expert", "experts");
  expect_unknown(parse(renamed(kModel, "/hidden", "hiden")), "/hidden",
                 "hidden");  // required: missing + hint
}

TEST_CASE("cluster: unknown keys at every level", "[robustness][keys]") {
  const Json c = cluster_spec_to_json(load_cluster_spec("dgx-h100"));
  auto parse = [](const Json& j) { return [j] { return parse_cluster_spec(JsonObj(j, "c.json")); }; };
  REQUIRE_NOTHROW(parse(c)());
  expect_unknown(parse(renamed(c, "/description", "descripton")), "/descripton", "description");
  expect_unknown(parse(renamed(c, "/gpu/arch", "archh")), "/gpu/archh", "arch");
  expect_unknown(parse(renamed(c, "/gpu/peak_flops/fp8", "fp_8")), "/gpu/peak_flops/fp_8", "fp8");
  expect_unknown(parse(renamed(c, "/node/nvlink_Bps", "nvlink_bps")), "/node/nvlink_bps", "nvlink_Bps");
  expect_unknown(parse(renamed(c, "/fabric/latency_s", "latency")), "/fabric/latency", "latency_s");
  expect_unknown(parse(renamed(c, "/gpu/memory_bytes", "memroy_bytes")), "/gpu/memory_bytes", "memory_bytes");
}

TEST_CASE("plan: unknown keys", "[robustness][keys]") {
  const Json p = kRecord.at("plan");
  auto parse = [](const Json& j) { return [j] { return plan_from_json(JsonObj(j, "r.json", "/plan")); }; };
  REQUIRE_NOTHROW(parse(p)());
  expect_unknown(parse(renamed(p, "/mbs", "mbz")), "/plan/mbz", "mbs");
  expect_unknown(parse(renamed(p, "/zero", "zer0")), "/plan/zer0", "zero");
  Json q = p;
  q["shard_grup"] = 4;
  expect_unknown(parse(q), "/plan/shard_grup", "shard_group");
}

TEST_CASE("run records: unknown keys in the record and its measurements", "[robustness][keys]") {
  auto parse = [](const Json& j) { return [j] { fuzz::run_records(j.dump()); }; };
  REQUIRE_NOTHROW(parse(kRecord)());
  expect_unknown(parse(renamed(kRecord, "/measured/step_s", "steps_s")), "/measured/steps_s", "step_s");
  expect_unknown(parse(renamed(kRecord, "/gpus", "gpu")), "/gpus", "gpus");
  expect_unknown(parse(renamed(kRecord, "/plan/ac", "acc")), "/plan/acc", "ac");
  Json list = {{"schema", "shardplan.runs/1"}, {"records", {kRecord, renamed(kRecord, "/id", "idd")}}};
  expect_unknown(parse(list), "/records/1/idd", "id");
}

TEST_CASE("calibration profile: unknown keys at every level", "[robustness][keys]") {
  const Json prof = Json::parse(
      shardplan::test::read_text(std::string(SHARDPLAN_FUZZ_DIR) + "/seeds/calibration_profile/small.json"));
  auto parse = [](const Json& j) { return [j] { return CalibrationProfile::from_json(j, "p.json"); }; };
  REQUIRE_NOTHROW(parse(prof)());
  expect_unknown(parse(renamed(prof, "/completed", "complete")), "/complete", "completed");
  expect_unknown(parse(renamed(prof, "/tool/version", "versoin")), "/tool/version", "version");
  expect_unknown(parse(renamed(prof, "/hardware/gpu_count", "gpu_cnt")), "/hardware/gpu_cnt", "gpu_count");
  expect_unknown(parse(renamed(prof, "/collectives/0/placement", "placment")), "/collectives/0/placment",
                 "placement");
  expect_unknown(parse(renamed(prof, "/collectives/0/samples/1/min_s", "mins")),
                 "/collectives/0/samples/1/mins", "min_s");
  expect_unknown(parse(renamed(prof, "/gemm/peak_source", "peak_sourse")), "/gemm/peak_sourse",
                 "peak_source");
  expect_unknown(parse(renamed(prof, "/hbm/samples/0/bytes", "byte")), "/hbm/samples/0/bytes", "bytes");
  expect_unknown(parse(renamed(prof, "/failures/0/benchmark", "benchmrk")), "/failures/0/benchmark",
                 "benchmark");
}
