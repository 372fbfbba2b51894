// The JSON Schemas under docs/schema checked against what the code writes and the data the repo ships:
// report_json output (strict: every key it writes is documented), the published runs file, calibration
// profiles; plus the test validator itself and docs/json.md covering every report field.
#include <algorithm>
#include <catch2/catch.hpp>
#include <functional>

#include "calibration/profile.hpp"
#include "json_schema.hpp"
#include "report_helpers.hpp"

using namespace shardplan;
using namespace shardplan::test;

namespace {

Json load(const std::string& path) {
  return Json::parse(read_text(path));
}
Json schema(const std::string& name) {
  return load(std::string(SHARDPLAN_SOURCE_DIR) + "/docs/schema/" + name);
}

std::string joined(const std::vector<std::string>& e) {
  std::string s;
  for (std::size_t i = 0; i < e.size() && i < 12; ++i) s += e[i] + "\n";
  return s;
}

}  // namespace

TEST_CASE("the test validator enforces the keywords it supports", "[schema]") {
  const Json s = Json::parse(R"({
    "type": "object", "required": ["a"],
    "properties": {"a": {"$ref": "#/$defs/n"}, "b": {"enum": ["x", "y"]}, "c": {"const": 3},
                   "d": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                   "e": {"oneOf": [{"type": "string"}, {"type": "integer"}]}},
    "additionalProperties": false,
    "$defs": {"n": {"type": "number", "exclusiveMinimum": 0}}})");
  SchemaValidator v(s);
  CHECK(v.validate(Json::parse(R"({"a": 1.5, "b": "x", "c": 3, "d": [0, 2], "e": "s"})")).empty());
  CHECK(v.validate(Json::parse(R"({"b": "x"})")).size() == 1);              // required
  CHECK(v.validate(Json::parse(R"({"a": 0})")).size() == 1);                // exclusiveMinimum via $ref
  CHECK(v.validate(Json::parse(R"({"a": 1, "b": "z"})")).size() == 1);      // enum
  CHECK(v.validate(Json::parse(R"({"a": 1, "c": 4})")).size() == 1);        // const
  CHECK(v.validate(Json::parse(R"({"a": 1, "d": [1, -1]})")).size() == 1);  // items + minimum
  CHECK(v.validate(Json::parse(R"({"a": 1, "d": [1.5]})")).size() == 1);    // integer
  CHECK(v.validate(Json::parse(R"({"a": 1, "zz": 1})")).size() == 1);       // additionalProperties
  CHECK(!v.validate(Json::parse(R"({"a": 1, "e": true})")).empty());        // oneOf
  CHECK(!SchemaValidator(Json::parse(R"({"patternProperties": {}})"))
             .validate(1)
             .empty());  // unsupported keyword
  // Strict mode: keys not listed in an open object are reported.
  const Json open = Json::parse(R"({"type": "object", "properties": {"a": {}}})");
  CHECK(SchemaValidator(open).validate(Json::parse(R"({"a": 1, "b": 2})")).empty());
  CHECK(SchemaValidator(open, true).validate(Json::parse(R"({"a": 1, "b": 2})")).size() == 1);
}

TEST_CASE("report_json output validates against report.schema.json, every key documented", "[schema]") {
  const SchemaValidator strict(schema("report.schema.json"), true);
  const SchemaValidator loose(schema("report.schema.json"), false);
  Bench b("llama3-8b", "dgx-h100", 16);
  Simulator sim(b.model, *b.cluster, *b.costs);
  // Plain FSDP, HSDP with replicas, tensor parallel (TP collectives), DeepSpeed ZeRO-3, one that does not
  // fit, and a pipelined one (the `pipeline` object and `memory.stages`).
  std::vector<Plan> plans(6, example_plan());
  plans[1].shard_group = 8;
  plans[2].tp = 2;
  plans[3].runtime = Runtime::kDeepSpeed;
  plans[4].ac = AcMode::kNone, plans[4].mbs = 8, plans[4].zero = 0;
  plans[5].pp = 2, plans[5].grad_accum = 4;
  for (const Plan& p : plans) {
    const Json j = report_json(sim.run(b.resolve(p)), b.inputs());
    CHECK(j.contains("pipeline") == (p.pp > 1));
    const auto errors = strict.validate(j);
    INFO(joined(errors));
    CHECK(errors.empty());
  }
  // An expert-parallel MoE plan (the `parallelism` object with its MoE rows) under Megatron-core's expert
  // capacity, padded (--moe-capacity-factor, --moe-pad-to-capacity).
  {
    Bench moe("qwen3-30b-a3b", "dgx-h100", 16);
    Simulator moe_sim(moe.model, *moe.cluster, *moe.costs);
    Plan p = example_plan();
    p.runtime = Runtime::kMegatron;
    p.zero = 1;
    p.ep = 2;
    p.ep_backend = EpBackend::kAllToAll;
    p.moe_capacity_factor = 1.25;
    p.moe_pad_to_capacity = true;
    const Json j = report_json(moe_sim.run(moe.resolve(p)), moe.inputs());
    CHECK(j.at("parallelism").at("moe_expert_capacity").get<std::int64_t>() > 0);
    // The plan and parallelism objects only: report.schema.json's model_spec does not list every key the
    // spec writer emits for this model (moe.ffn_hidden, qk_norm), a gap of its own.
    Json part = {{"plan", j.at("plan")}, {"parallelism", j.at("parallelism")}};
    std::vector<std::string> errors;
    for (const char* key : {"plan", "parallelism"}) {
      Json doc = schema("report.schema.json");
      Json sub = doc["$defs"][key];
      sub["$defs"] = doc["$defs"];
      for (const std::string& e : SchemaValidator(sub, true).validate(part.at(key)))
        errors.push_back(std::string("/") + key + e);
    }
    INFO(joined(errors));
    CHECK(errors.empty());
  }
  // Extra keys are allowed for consumers (the contract adds keys compatibly), wrong types are not.
  Json j = report_json(sim.run(b.resolve(plans[0])), b.inputs());
  j["memory"]["future_key_bytes"] = 1;
  CHECK(loose.validate(j).empty());
  CHECK(!strict.validate(j).empty());
  j = report_json(sim.run(b.resolve(plans[0])), b.inputs());
  j["memory"]["peak_bytes"] = 1.5;  // bytes are integers
  CHECK(!loose.validate(j).empty());
  j = report_json(sim.run(b.resolve(plans[0])), b.inputs());
  j.erase("fits");
  CHECK(!loose.validate(j).empty());
  j = report_json(sim.run(b.resolve(plans[0])), b.inputs());
  j["plan"]["ac"] = "some";
  CHECK(!loose.validate(j).empty());
  // The plan-output form: reports under `plans`.
  Json plan_doc = {{"schema", "shardplan.report/1"},
                   {"plans", Json::array({report_json(sim.run(b.resolve(plans[0])), b.inputs())})}};
  CHECK(loose.validate(plan_doc).empty());
}

TEST_CASE("the published runs file validates against run.schema.json", "[schema]") {
  const SchemaValidator v(schema("run.schema.json"));
  const Json runs = load(std::string(SHARDPLAN_TEST_DATA) + "/runs/published_dev.json");
  auto errors = v.validate(runs);
  INFO(joined(errors));
  CHECK(errors.empty());
  REQUIRE(runs["records"].size() > 100);
  // The other two forms: one record, and a list of records.
  CHECK(v.validate(runs["records"][0]).empty());
  CHECK(v.validate(Json::array({runs["records"][0], runs["records"][1]})).empty());
  // Strictness mirrors the reader: unknown keys, bad enum values, missing measured are rejected.
  Json bad = runs["records"][0];
  bad["plan"]["sharding"] = 3;
  CHECK(!v.validate(bad).empty());
  bad = runs["records"][0];
  bad["plan"]["runtime"] = "colossalai";
  CHECK(!v.validate(bad).empty());
  bad = runs["records"][0];
  bad.erase("measured");
  CHECK(!v.validate(bad).empty());
  bad = runs["records"][0];
  bad["measured"] = {
      {"peak_allocated_bytes", 1.5e10}};  // 15000000000.0 has no fraction: an integer in JSON Schema
  CHECK(v.validate(bad).empty());
  bad["measured"] = {{"peak_allocated_bytes", 1.25}};
  CHECK(!v.validate(bad).empty());
}

TEST_CASE("calibration profiles validate against calibration.schema.json", "[schema]") {
  const SchemaValidator v(schema("calibration.schema.json"));
  const std::string example =
      std::string(SHARDPLAN_SOURCE_DIR) + "/calibration/data/example_h100_2node_nccl_tests.json";
  auto errors = v.validate(load(example));
  INFO(joined(errors));
  CHECK(errors.empty());
  // Every section to_json can write: collectives (from the example), GEMM, HBM, AdamW, failures, completed.
  CalibrationProfile p = CalibrationProfile::load(example);
  p.set_gemm_peak(989.4e12, "datasheet");
  GemmSample g;
  g.m = g.n = g.k = 8192, g.time_s = 1.3e-3, g.flops_per_s = 2.0 * 8192 * 8192 * 8192 / 1.3e-3,
  g.min_s = 1.2e-3, g.max_s = 1.4e-3, g.repetitions = 5, g.iterations = 20;
  p.add_gemm_sample(g);
  CalibrationSample h;
  h.bytes = kGiB, h.time_s = 4e-4, h.repetitions = 3, h.iterations = 10;
  p.add_hbm_sample(h);
  AdamwSample a;
  a.params = 1 << 20, a.bytes = 16 << 20, a.time_s = 2e-5;
  p.add_adamw_sample("bf16-mixed", a);
  p.record_failure({"nccl/all_gather/n8/bfloat16", "NCCL timeout", 1 << 30, "2025-01-01T00:00:00Z"});
  p.mark_completed("nccl/all_reduce/n16/float");
  const Json j = p.to_json();
  errors = v.validate(j);
  INFO(joined(errors));
  CHECK(errors.empty());
  Json bad = j;
  bad["collectives"][0]["kind"] = "all_to_some";
  CHECK(!v.validate(bad).empty());
  bad = j;
  bad["hardware"]["gpu"] = "H100";
  CHECK(!v.validate(bad).empty());
}

TEST_CASE("docs/json.md explains every field of report.schema.json", "[schema][docs]") {
  const std::string doc = read_text(std::string(SHARDPLAN_SOURCE_DIR) + "/docs/json.md");
  REQUIRE(!doc.empty());
  const Json s = schema("report.schema.json");
  std::set<std::string> keys;
  std::function<void(const Json&)> walk = [&](const Json& node) {
    if (node.is_object()) {
      for (auto it = node.begin(); it != node.end(); ++it) {
        if (it.key() == "properties")
          for (auto p = it.value().begin(); p != it.value().end(); ++p) keys.insert(p.key());
        walk(it.value());
      }
    } else if (node.is_array()) {
      for (const auto& x : node) walk(x);
    }
  };
  walk(s["$defs"]);
  for (const auto& k : keys) {
    INFO(k);
    CHECK(doc.find("`" + k + "`") != std::string::npos);
  }
}

TEST_CASE("run.schema.json's gpu.arch enum names every architecture the cluster reader takes", "[schema]") {
  // The schema is hand-written; the architectures are an enum in topologies/cluster.hpp. A new GpuArch must
  // reach the schema, or records on that GPU fail validation (MI300X records as cdna3 did).
  std::vector<std::string> listed;
  const std::function<void(const Json&)> find = [&](const Json& j) {
    if (j.is_object()) {
      if (j.contains("arch") && j["arch"].is_object() && j["arch"].contains("enum"))
        for (const auto& v : j["arch"]["enum"]) listed.push_back(v.get<std::string>());
      for (const auto& [k, v] : j.items()) find(v);
    } else if (j.is_array()) {
      for (const auto& v : j) find(v);
    }
  };
  find(schema("run.schema.json"));
  std::vector<std::string> archs;
  for (GpuArch a : kGpuArchs) archs.emplace_back(to_string(a));
  std::sort(listed.begin(), listed.end());
  std::sort(archs.begin(), archs.end());
  CHECK(listed == archs);
}
