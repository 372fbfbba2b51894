// --from on real framework configs (tests/data/from, SOURCES.md: torchtitan TOMLs of 2024-2026 and its Python
// configs at 0.3.0 and after, DeepSpeed configs of DeepSpeedExamples and accelerate, accelerate YAMLs of
// accelerate and alignment-handbook): every setting that changes memory or time is read or named on stderr;
// "auto" values are resolved as transformers does or the assumption is said. --framework and the version
// defaults table (planner/frameworks.cpp) that tools/convert_published.py shares.
#include <catch2/catch.hpp>

#include "core/json_reader.hpp"
#include "plan_helpers.hpp"
#include "planner/frameworks.hpp"

using namespace shardplan;
namespace fs = std::filesystem;
using ptest::quote;

namespace {

const fs::path kFrom = fs::path(SHARDPLAN_TEST_DATA) / "from";

struct Run {
  int rc = -1;
  Json plan;
  std::string err;
};

Run memory_from(const std::string& file, const std::string& model = "llama3-8b", int gpus = 16,
                const std::string& extra = "") {
  auto dir = ptest::temp_dir("from-real");
  Run r;
  r.rc = ptest::run_cli("memory --model " + model + " --cluster dgx-h100 --gpus " + std::to_string(gpus) +
                            " --from " + quote((kFrom / file).string()) + extra + " --json -",
                        dir / "out.json", dir / "err.txt");
  r.err = ptest::read_text(dir / "err.txt");
  if (r.rc <= 1) r.plan = load_json_file((dir / "out.json").string())["plan"];
  return r;
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("tools/framework_defaults.json is the table the binary has (the converter's copy is generated)",
          "[frameworks]") {
  auto dir = ptest::temp_dir("frameworks");
  REQUIRE(ptest::run_cli("list frameworks --json", dir / "t.json") == 0);
  CHECK(ptest::read_text(dir / "t.json") ==
        ptest::read_text(fs::path(SHARDPLAN_SOURCE_DIR) / "tools" / "framework_defaults.json"));
  // Every row names a knob of the knob table and cites what changed it.
  for (const VersionRule& r : version_rules()) {
    INFO(r.id);
    CHECK(find_knob(r.knob) != nullptr);
    CHECK(std::string(r.source).size() > 10);
  }
}

TEST_CASE("framework: --framework sets a version's defaults for the knobs not given", "[frameworks][cli]") {
  auto dir = ptest::temp_dir("framework");
  auto plan_of = [&](const std::string& flags) {
    REQUIRE(
        ptest::run_cli("memory --model llama3-8b --gpus 8 --seq 8192 --ac selective " + flags + " --json -",
                       dir / "o.json", dir / "e.txt") <= 1);
    return load_json_file((dir / "o.json").string())["plan"];
  };
  // torchtitan of December 2024: foreach AdamW, the Python fp32 RMSNorm, the eager loss, its launch script's
  // expandable segments, the embedding and head in FSDP2's root unit, the flash/efficient SAC save list.
  const Json dec = plan_of("--framework torchtitan@2024-12-15");
  CHECK(dec["fused_optimizer"] == false);
  CHECK(dec["fp32_norm"] == true);
  CHECK(dec["loss_impl"] == "eager");
  CHECK(dec["allocator"] == "expandable");
  CHECK(dec["root_params"] == "embedding-head");
  CHECK(dec["keep_last_block"] == true);
  CHECK(dec["sac_sdpa_ops"] == "flash-efficient");
  CHECK(dec["hold_logits"] == false);
  CHECK(has(ptest::read_text(dir / "e.txt"), "shardplan: torchtitan@2024-12-15: "));
  // Explicit flags win; the root-unit rows hold for FSDP2 without TP only.
  const Json tp = plan_of("--framework torchtitan@2024-12-15 --tp 2 --fp32-norm --allocator default");
  CHECK(tp["allocator"] == "default");
  CHECK(tp.value("root_params", std::string("none")) == "none");
  // A release is its date; torch versions have their own rows.
  CHECK(plan_of("--framework torchtitan@0.2.1").value("sac_sdpa_ops", std::string("all")) == "all");
  CHECK(plan_of("--framework torchtitan@0.2.0")["sac_sdpa_ops"] == "flash-efficient");
  CHECK(plan_of("--framework torch@2.4.1")["rs_input_rs_stream"] == true);
  CHECK(plan_of("--framework torch@2.5.0")["rs_input_rs_stream"] == false);
  // Bad specs are bad input with the forms (and a did-you-mean).
  CHECK(ptest::run_cli("memory --model llama3-8b --framework tortitan@2024-12-15", dir / "o", dir / "e") ==
        2);
  CHECK(has(ptest::read_text(dir / "e"), "did you mean torchtitan?"));
  CHECK(ptest::run_cli("memory --model llama3-8b --framework torchtitan@0.9", dir / "o", dir / "e") == 2);
  // plan pins the rows it can for every candidate and names the rest.
  REQUIRE(ptest::run_cli("plan --model llama3-8b --gpus 8 --global-batch 16 --seq 4096 --top 2 --threads 2 "
                         "--framework torchtitan@2024-12-15 --json " +
                             quote((dir / "p.json").string()),
                         dir / "o", dir / "e") == 0);
  const std::string perr = ptest::read_text(dir / "e");
  CHECK(has(perr, "not pinned in the search"));
  CHECK(has(perr, "root_params=embedding-head"));
  CHECK(load_json_file((dir / "p.json").string())["recommended"]["plan"]["fp32_norm"] == true);
}

TEST_CASE("from: real torchtitan TOMLs of 2024-2026: every layout read, dated and said", "[from][real]") {
  // December 2024's llama3_405b.toml: TP 8 under [training], async TP under [experimental], float8 by
  // enable_float8_linear (before 2025-04 the [parallelism] section did not exist).
  Run dec = memory_from("torchtitan-2024-10-22-llama3_405b.toml", "llama3.1-405b", 128);
  INFO(dec.err);
  REQUIRE(dec.rc <= 1);
  CHECK(dec.plan["tp"] == 8);
  CHECK(dec.plan["async_tp"] == true);
  CHECK(dec.plan["compile"] == true);
  CHECK(dec.plan["fp8"] == "tensorwise");
  CHECK(dec.plan["fp8_all_gather"] == true);
  CHECK(dec.plan["ac"] == "full");
  CHECK(dec.plan["mbs"] == 2);
  CHECK(dec.plan["seq"] == 8192);
  CHECK(has(dec.err, "torchtitan@2025-02-14"));
  CHECK(has(dec.err, "dates it to torchtitan of 2024-06-12 .. 2025-02-15"));
  CHECK(dec.plan["fp32_norm"] == true);  // norm_type rmsnorm: that date's Python fp32 RMSNorm
  CHECK_FALSE(has(dec.err, "not read"));
  // 2025-09: float8 under [quantize.linear.float8] (its all-gather was lost before).
  Run q = memory_from("torchtitan-2025-09-30-llama3_405b.toml", "llama3.1-405b", 128);
  INFO(q.err);
  REQUIRE(q.rc <= 1);
  CHECK(q.plan["fp8"] == "tensorwise");
  CHECK(q.plan["fp8_all_gather"] == true);
  CHECK(q.plan["tp"] == 8);
  CHECK_FALSE(has(q.err, "not read"));
  for (const char* f : {"torchtitan-2024-07-10-llama3_8b.toml", "torchtitan-2025-04-18-llama3_405b.toml",
                        "torchtitan-2025-08-31-llama3_405b.toml", "torchtitan-2026-02-23-llama3_8b.toml"}) {
    Run r = memory_from(f, "llama3-8b", 128);
    INFO(f << "\n" << r.err);
    CHECK(r.rc <= 1);
    CHECK_FALSE(has(r.err, "not read"));
    CHECK(has(r.err, "shardplan: torchtitan@"));
  }
  // The last TOML (2026-02) has float8 settings but no float8 converter: no float8.
  CHECK(memory_from("torchtitan-2026-02-23-llama3_8b.toml").plan["fp8"] == "none");
  // A key the reader does not know is named, not dropped.
  auto dir = ptest::temp_dir("from-unknown");
  ptest::write_text(dir / "x.toml",
                    "[training]\nlocal_batch_size = 2\nseq_len = 4096\nnew_memory_knob = 3\n"
                    "[parallelism]\ntensor_parallel_degree = 2\n[job]\ndump_folder = \"x\"\n");
  REQUIRE(ptest::run_cli("memory --model llama3-8b --gpus 8 --from " + quote((dir / "x.toml").string()),
                         dir / "o", dir / "e") <= 1);
  const std::string e = ptest::read_text(dir / "e");
  CHECK(has(e, "not read"));
  CHECK(has(e, "training.new_memory_knob = 3"));
  CHECK_FALSE(has(e, "dump_folder"));
}

TEST_CASE("from: torchtitan Python configs: 0.3.0 and the token-sized micro-batches after it",
          "[from][real]") {
  // After 0.3.0 (73aed7f6c) a micro-batch is num_tokens_per_microbatch_per_dp_rank tokens of
  // max_context_length sequences: llama3_8b's 1 x 8192, not 0.3.0's defaults (seq 2048, mbs 8).
  Run now = memory_from("torchtitan-2026-08-20-config_registry.py:llama3_8b");
  INFO(now.err);
  REQUIRE(now.rc <= 1);
  CHECK(now.plan["seq"] == 8192);
  CHECK(now.plan["mbs"] == 1);
  CHECK(has(now.err, "torchtitan@2026-08-20"));
  CHECK(now.plan["loss_impl"] == "chunked");  // ChunkedLossWrapper.Config, num_chunks 8 (the default)
  CHECK(!now.plan.contains("loss_chunks"));
  Run seventy = memory_from("torchtitan-2026-08-20-config_registry.py:llama3_70b");
  CHECK(seventy.plan["mbs"] == 8);
  CHECK(seventy.plan["tp"] == 8);
  CHECK(seventy.plan["ac"] == "full");
  CHECK(has(seventy.err, "ChunkedLossWrapper"));  // with TP 8: not modelled, named
  Run old = memory_from("torchtitan-0.3.0-config_registry.py:llama3_8b");
  INFO(old.err);
  REQUIRE(old.rc <= 1);
  CHECK(old.plan["seq"] == 8192);
  CHECK(old.plan["mbs"] == 1);
  CHECK(has(old.err, "torchtitan@0.3.0"));
  CHECK(old.plan["loss_impl"] == "chunked");
}

TEST_CASE("from: real DeepSpeed configs: auto values resolved as transformers does, or said",
          "[from][real]") {
  // accelerate's ZeRO-3 test config: bf16/fp16 "auto" (transformers fills them from --bf16 / --fp16), the
  // micro-batch "auto" (per_device_train_batch_size, default 8), buckets "auto" (hidden-size formulas).
  Run z3 = memory_from("accelerate-ds_config_zero3.json");
  INFO(z3.err);
  REQUIRE(z3.rc <= 1);
  CHECK(z3.plan["precision"] == "bf16-mixed");  // not fp32
  CHECK(z3.plan["zero"] == 3);
  CHECK(z3.plan["offload"] == "params");
  CHECK(z3.plan["mbs"] == 8);
  CHECK(has(z3.err, "bf16.enabled \"auto\""));
  CHECK(has(z3.err, "reduce_bucket_size \"auto\""));
  Run z2 = memory_from("accelerate-zero_stage2_config.json");
  CHECK(z2.plan["zero"] == 2);
  // fp16.enabled true with loss_scale 0: DeepSpeed's dynamic loss scaling, fp16-mixed (no longer "simulated
  // as bf16-mixed").
  CHECK(z2.plan["precision"] == "fp16-mixed");
  CHECK_FALSE(has(z2.err, "fp16.enabled"));
  Run onebit = memory_from("dse-bing_bert-onebitadam.json");
  CHECK(has(onebit.err, "optimizer.type OneBitAdam"));
  Run pipe = memory_from("dse-pipeline_parallelism-ds_config.json", "llama3-8b", 32);
  CHECK(pipe.plan["mbs"] == 8);
  CHECK(pipe.plan["grad_accum"] == 1);  // 256 = 8 x 32 data-parallel ranks x 1
  Run auto_mbs = memory_from("dse-autotuning-ds_config_z3.json");
  CHECK(auto_mbs.plan["precision"] == "fp32");  // neither bf16 nor fp16: DeepSpeed trains in fp32
  CHECK(has(auto_mbs.err, "train_micro_batch_size_per_gpu \"auto\""));
  // plan --from reads the file once: each of its stderr lines is said once (the space and the framework
  // defaults share the reading).
  auto dir = ptest::temp_dir("from-plan-once");
  REQUIRE(ptest::run_cli("plan --model llama3-8b --cluster dgx-h100 --gpus 16 --threads 2 --top 1 --from " +
                             quote((kFrom / "accelerate-ds_config_zero3.json").string()) +
                             " --global-batch 64",
                         "/dev/null", dir / "err.txt") == 0);
  const std::string err = ptest::read_text(dir / "err.txt");
  for (const char* what : {": not modelled (changes memory or time):", ": assumed:"}) {
    const auto first = err.find(what);
    CHECK(first != std::string::npos);
    CHECK(err.find(what, first + 1) == std::string::npos);
  }
}

TEST_CASE("from: DeepSpeed ZeRO++ and cpu_checkpointing become the plan's knobs", "[from][real]") {
  // DeepSpeed's ZeRO++ tutorial config (docs/_tutorials/zeropp.md): stage 3 with hpZ 16, qwZ and qgZ.
  Run zpp = memory_from("ds-tutorial-zeropp.json", "llama3-8b", 32);
  INFO(zpp.err);
  REQUIRE(zpp.rc <= 1);
  CHECK(zpp.plan["zero"] == 3);
  CHECK(zpp.plan["hpz_partition"] == 16);
  CHECK(zpp.plan["quantized_weights"] == true);
  CHECK(zpp.plan["quantized_gradients"] == true);
  CHECK_FALSE(has(zpp.err, "hpZ"));
  CHECK(has(zpp.err, "zero_optimization.reduce_bucket_size"));  // 1e7, not DeepSpeed's 5e8: named
  auto dir = ptest::temp_dir("from-zeropp");
  // Below stage 3 DeepSpeed ignores the three (engine.py hands them to the stage-3 optimizer only): said,
  // not set. cpu_checkpointing: the checkpoint inputs on the host under full AC.
  ptest::write_text(dir / "z2.json",
                    R"({"zero_optimization": {"stage": 2, "zero_hpz_partition_size": 8,
                        "zero_quantized_gradients": true},
                        "activation_checkpointing": {"cpu_checkpointing": true}})");
  Run z2 = memory_from((dir / "z2.json").string());
  INFO(z2.err);
  REQUIRE(z2.rc <= 1);
  CHECK(z2.plan["zero"] == 2);
  CHECK(z2.plan.value("hpz_partition", 1) == 1);
  CHECK(z2.plan.value("quantized_gradients", false) == false);
  CHECK(has(z2.err, "zero_optimization.zero_hpz_partition_size is ignored by DeepSpeed below stage 3"));
  CHECK(z2.plan["activation_offload"] == "all");
  CHECK(z2.plan["ac"] == "full");
  CHECK(has(z2.err, "cpu_checkpointing"));
  // MiCS is gone from DeepSpeed 0.19.8 (its config refuses mics_shard_size): refused in one line, not
  // modelled.
  ptest::write_text(dir / "mics.json", R"({"zero_optimization": {"stage": 3, "mics_shard_size": 8}})");
  Run mics = memory_from((dir / "mics.json").string());
  CHECK(mics.rc == 2);
  CHECK(has(mics.err, "zero_optimization.mics_shard_size"));
  CHECK(has(mics.err, "MiCS ZeRO-3 sharding was removed"));
  ptest::write_text(dir / "bad.json", R"({"zero_optimization": {"stage": 3, "zero_hpz_partition_size": 0}})");
  Run bad = memory_from((dir / "bad.json").string());
  CHECK(bad.rc == 2);
  CHECK(has(bad.err, "zero_optimization.zero_hpz_partition_size"));
}

TEST_CASE("from: real accelerate YAMLs: FSDP, DeepSpeed and DDP", "[from][real]") {
  Run fsdp = memory_from("alignment-handbook-fsdp.yaml");
  INFO(fsdp.err);
  REQUIRE(fsdp.rc <= 1);
  CHECK(fsdp.plan["runtime"] == "fsdp1");
  CHECK(fsdp.plan["zero"] == 3);
  CHECK(fsdp.plan["precision"] == "bf16-mixed");
  CHECK(has(fsdp.err, "fsdp_forward_prefetch"));
  Run zero3 = memory_from("alignment-handbook-zero3.yaml");
  CHECK(zero3.plan["runtime"] == "deepspeed");
  CHECK(zero3.plan["zero"] == 3);
  Run ddp = memory_from("alignment-handbook-ddp.yaml");
  CHECK(ddp.plan["zero"] == 0);
  CHECK(has(ddp.err, "MULTI_GPU is PyTorch DDP"));
  CHECK(memory_from("accelerate-fsdp.yaml").plan["runtime"] == "fsdp1");
  // accelerate's DeepSpeed template points to a ds_config beside its folder that is not here: bad input
  // naming the key.
  Run ds = memory_from("accelerate-deepspeed.yaml");
  CHECK(ds.rc == 2);
  CHECK(has(ds.err, "deepspeed_config.deepspeed_config_file"));
}
