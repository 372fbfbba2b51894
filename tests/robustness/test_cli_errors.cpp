// Bad input through the real `shardplan` binary: each error class exits 2 with exactly one stderr line naming
// the file, field and reason, and leaves no output file (nor a temporary one) behind.
#include <catch2/catch.hpp>

#include "tests/robustness/helpers.hpp"

using namespace shardplan::test;

namespace {

const char* kTinyModel =
    R"({"schema": "shardplan.model/1", "name": "tiny", "layers": 2, "hidden": 256, "heads": 4,
  "ffn_hidden": 512, "vocab": 1024, "seq": 256})";

/// The dgx-h100 preset with one field replaced (a JSON pointer into the preset's JSON).
std::string cluster_with(const fs::path& dir, const std::string& pointer, const std::string& value_json) {
  auto shown = run_cli({"show", "cluster", "dgx-h100"}, dir);
  REQUIRE(shown.code == 0);
  auto j = nlohmann::json::parse(shown.out);
  // Splice the raw value text in (1e400 and friends cannot go through a json value).
  const std::string marker = "\"__VALUE__\"";
  j[nlohmann::json::json_pointer(pointer)] = "__VALUE__";
  std::string text = j.dump(1);
  text.replace(text.find(marker), marker.size(), value_json);
  return text;
}

}  // namespace

TEST_CASE("malformed JSON names the file and line:col", "[robustness][cli]") {
  auto dir = scratch_dir();
  write_text(dir / "bad.json", "{\n  \"layers\": 2,\n  \"hidden\": ,\n}\n");
  auto r = run_cli({"memory", "--model", "bad.json", "--cluster", "dgx-h100"}, dir);
  expect_bad_input(r, {"bad.json", "line 3:", "malformed JSON"});

  write_text(dir / "empty.json", "");
  expect_bad_input(run_cli({"memory", "--model", "empty.json"}, dir), {"empty.json", "malformed JSON"});

  write_text(dir / "nan.json", "{\"layers\": NaN}");
  expect_bad_input(run_cli({"memory", "--model", "nan.json"}, dir), {"nan.json", "line 1:"});

  write_text(dir / "garbage.json", std::string("\x00\xff\xfe{[\x01", 6));
  expect_bad_input(run_cli({"memory", "--model", "garbage.json"}, dir), {"garbage.json"});
}

TEST_CASE("numbers beyond double range (1e400) are bad input with line:col", "[robustness][cli]") {
  auto dir = scratch_dir();
  write_text(dir / "m.json",
             std::string(kTinyModel).replace(std::string(kTinyModel).find("256"), 3, "1e400"));
  expect_bad_input(run_cli({"memory", "--model", "m.json"}, dir), {"m.json", "line 1:", "out of range"});

  write_text(dir / "c.json", cluster_with(dir, "/gpu/hbm_Bps", "-1e999"));
  expect_bad_input(run_cli({"memory", "--model", "llama3-8b", "--cluster", "c.json"}, dir),
                   {"c.json", "out of range"});
}

TEST_CASE("unknown key suggests the closest valid one", "[robustness][cli]") {
  auto dir = scratch_dir();
  std::string m = kTinyModel;
  m.replace(m.find("\"hidden\""), 8, "\"hiden\"");
  write_text(dir / "m.json", m);
  expect_bad_input(run_cli({"memory", "--model", "m.json"}, dir),
                   {"m.json", "/hidden", "found \"hiden\"", "did you mean \"hidden\""});

  write_text(dir / "c.json", cluster_with(dir, "/node/nvlink_bps", "1e11"));
  expect_bad_input(run_cli({"memory", "--model", "llama3-8b", "--cluster", "c.json"}, dir),
                   {"c.json", "/node/nvlink_bps", "did you mean \"nvlink_Bps\""});
}

TEST_CASE("unknown preset lists the valid names", "[robustness][cli]") {
  auto dir = scratch_dir();
  expect_bad_input(run_cli({"memory", "--model", "llama3-8", "--cluster", "dgx-h100"}, dir),
                   {"--model", "llama3-8", "did you mean \"llama3-8b\"", "llama2-7b", "mixtral-8x7b"});
  expect_bad_input(run_cli({"memory", "--model", "llama3-8b", "--cluster", "dgx-h1000"}, dir),
                   {"--cluster", "dgx-h100", "gb200-nvl72"});
  expect_bad_input(run_cli({"show", "model", "nope"}, dir), {"nope", "llama3.1-405b"});
}

TEST_CASE("Volta refuses bf16 precisions with one line, exit 2", "[robustness][cli][fp16]") {
  // dgx-v100-32g: V100s have no bf16; the default precision (bf16-mixed) is refused naming the flag, the GPU
  // and what to use instead; fp16-mixed runs.
  auto dir = scratch_dir();
  expect_bad_input(
      run_cli({"memory", "--model", "llama3-8b", "--cluster", "dgx-v100-32g", "--gpus", "8"}, dir),
      {"--precision", "bf16-mixed", "V100-SXM2-32GB", "fp16-mixed"});
  expect_bad_input(run_cli({"memory", "--model", "llama3-8b", "--cluster", "dgx-v100-32g", "--gpus", "8",
                            "--precision", "bf16-true"},
                           dir),
                   {"--precision", "bf16-true", "Volta"});
  const auto ok = run_cli({"memory", "--model", "llama3-8b", "--cluster", "dgx-v100-32g", "--gpus", "8",
                           "--zero", "3", "--precision", "fp16-mixed", "--seq", "2048", "--ac", "full"},
                          dir);
  CHECK(ok.code == 0);
}

TEST_CASE("negative and zero sizes are bad input", "[robustness][cli]") {
  auto dir = scratch_dir();
  std::string m = kTinyModel;
  m.replace(m.find("256"), 3, "-256");
  write_text(dir / "m.json", m);
  expect_bad_input(run_cli({"memory", "--model", "m.json"}, dir), {"m.json", "/hidden", "out of range"});

  write_text(dir / "c.json", cluster_with(dir, "/gpu/memory_bytes", "-1"));
  expect_bad_input(run_cli({"memory", "--model", "llama3-8b", "--cluster", "c.json"}, dir),
                   {"c.json", "/gpu/memory_bytes"});
  write_text(dir / "c0.json", cluster_with(dir, "/node/gpus", "0"));
  expect_bad_input(run_cli({"memory", "--model", "llama3-8b", "--cluster", "c0.json"}, dir),
                   {"c0.json", "/node/gpus"});

  expect_bad_input(run_cli({"memory", "--model", "llama3-8b", "--gpus", "-8"}, dir), {"--gpus"});
  expect_bad_input(run_cli({"memory", "--model", "llama3-8b", "--mbs", "-1"}, dir), {"--mbs"});
  expect_bad_input(run_cli({"memory", "--model", "llama3-8b", "--seq", "-5", "--gpus", "8"}, dir), {"--seq"});
  expect_bad_input(run_cli({"collective", "--kind", "all_gather", "--bytes", "-5", "--ranks", "8"}, dir),
                   {"bytes"});
}

TEST_CASE("zero GPUs is bad input", "[robustness][cli]") {
  // DESIGN.md: --gpus N is the total; 0 GPUs cannot train (leaving --gpus out means one node).
  auto dir = scratch_dir();
  expect_bad_input(run_cli({"memory", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "0"}, dir),
                   {"--gpus"});
}

TEST_CASE("GPU counts the cluster cannot hold are bad input", "[robustness][cli]") {
  auto dir = scratch_dir();
  // 12 is neither a multiple of the 8-GPU node nor within one node.
  expect_bad_input(run_cli({"memory", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "12"}, dir),
                   {"--gpus", "12"});
  // Near INT_MAX (a multiple of 4, 8 and 72 would overflow node arithmetic): refused, not wrapped.
  expect_bad_input(
      run_cli({"memory", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "2147483640"}, dir),
      {"--gpus"});
  expect_bad_input(run_cli({"memory", "--model", "llama3-8b", "--gpus", "99999999999"}, dir), {"--gpus"});
}

TEST_CASE("tp above one node and shard groups that do not divide are bad input", "[robustness][cli]") {
  auto dir = scratch_dir();
  expect_bad_input(
      run_cli({"memory", "--model", "llama3-70b", "--cluster", "dgx-h100", "--gpus", "16", "--tp", "16"},
              dir),
      {"--tp", "16"});
  expect_bad_input(
      run_cli({"memory", "--model", "llama3-70b", "--cluster", "dgx-h100", "--gpus", "16", "--tp", "3"}, dir),
      {"--tp"});
  expect_bad_input(run_cli({"memory", "--model", "llama3-70b", "--cluster", "dgx-h100", "--gpus", "16",
                            "--shard-group", "3"},
                           dir),
                   {"--shard-group", "3", "16"});
  expect_bad_input(run_cli({"memory", "--model", "llama3-70b", "--cluster", "dgx-h100", "--gpus", "16",
                            "--tp", "2", "--shard-group", "16"},
                           dir),
                   {"--shard-group", "8 data-parallel"});
}

TEST_CASE("GPU memory above 2^50 bytes is bad input, exactly 2^50 is accepted", "[robustness][cli]") {
  auto dir = scratch_dir();
  write_text(dir / "big.json", cluster_with(dir, "/gpu/memory_bytes", "1125899906842625"));
  expect_bad_input(run_cli({"memory", "--model", "llama3-8b", "--cluster", "big.json"}, dir),
                   {"big.json", "/gpu/memory_bytes", "1125899906842625"});
  write_text(dir / "max.json", cluster_with(dir, "/gpu/memory_bytes", "1125899906842624"));
  auto ok = run_cli({"memory", "--model", "llama3-8b", "--cluster", "max.json"}, dir);
  INFO(ok.err);
  CHECK(ok.code == 0);
  write_text(dir / "huge.json", cluster_with(dir, "/gpu/memory_bytes", "18446744073709551616"));
  expect_bad_input(run_cli({"memory", "--model", "llama3-8b", "--cluster", "huge.json"}, dir),
                   {"huge.json", "/gpu/memory_bytes"});
}

TEST_CASE("bad input leaves no output file and no temporary file", "[robustness][cli]") {
  auto dir = scratch_dir();
  std::string m = kTinyModel;
  m.replace(m.find("\"vocab\""), 7, "\"vocabulary\"");
  write_text(dir / "m.json", m);
  write_text(dir / "c.json", cluster_with(dir, "/node/gpus", "-8"));
  const std::vector<std::string> inputs = {"c.json", "m.json"};

  expect_bad_input(run_cli({"memory", "--model", "m.json", "--json", "out.json"}, dir), {"m.json"});
  expect_bad_input(
      run_cli({"simulate", "--model", "m.json", "--json", "out.json", "--trace", "trace.json"}, dir),
      {"m.json"});
  expect_bad_input(run_cli({"simulate", "--model", "llama3-8b", "--cluster", "c.json", "--json", "out.json",
                            "--trace", "trace.json"},
                           dir),
                   {"c.json"});
  expect_bad_input(run_cli({"simulate", "--model", "llama3-8b", "--gpus", "8", "--tp", "3", "--json",
                            "out.json", "--trace", "trace.json"},
                           dir),
                   {"--tp"});
  expect_bad_input(run_cli({"plan", "--model", "m.json", "--global-batch", "64", "--json", "out.json"}, dir),
                   {"m.json"});
  expect_bad_input(run_cli({"collective", "--kind", "all_gatherr", "--bytes", "1024", "--ranks", "8",
                            "--json", "out.json"},
                           dir),
                   {});
  expect_bad_input(run_cli({"calibrate", "import-nccl-tests", "m.json", "-o", "out.json"}, dir), {"m.json"});
  CHECK(files_in(dir) == inputs);  // no out.json, no trace.json, no out.json.tmp.<pid>
}

TEST_CASE("an unwritable output path is bad input, not a crash", "[robustness][cli]") {
  auto dir = scratch_dir();
  expect_bad_input(run_cli({"memory", "--model", "llama3-8b", "--json", "no/such/dir/out.json"}, dir),
                   {"no/such/dir/out.json", "cannot write"});
  CHECK(files_in(dir).empty());
}

TEST_CASE("pathological files and names are bad input", "[robustness][cli]") {
  auto dir = scratch_dir();
  // A million '[': nothing may recurse that deep (parsing, destroying or printing the value in a message).
  write_text(dir / "deep.json",
             "{\"layers\": " + std::string(1000000, '[') + std::string(1000000, ']') + "}");
  expect_bad_input(run_cli({"memory", "--model", "deep.json"}, dir), {"deep.json", "/layers"});
  write_text(dir / "deep_open.json", std::string(1000000, '['));
  expect_bad_input(run_cli({"memory", "--model", "deep_open.json"}, dir),
                   {"deep_open.json", "malformed JSON"});
  // A name longer than NAME_MAX: looked up as a preset, not a filesystem error.
  expect_bad_input(run_cli({"memory", "--model", std::string(5000, 'a')}, dir), {"--model", "unknown model"});
  expect_bad_input(run_cli({"memory", "--model", "missing.json"}, dir), {"missing.json", "cannot open"});
  expect_bad_input(run_cli({"memory", "--model", "."}, dir), {});
  // A JSON document of the wrong kind.
  expect_bad_input(run_cli({"memory", "--model", "llama3-8b", "--cluster", "deep_open.json"}, dir),
                   {"deep_open.json"});
  write_text(dir / "list.json", "[1, 2, 3]");
  expect_bad_input(run_cli({"memory", "--model", "list.json"}, dir), {"list.json"});
  expect_bad_input(run_cli({"memory", "--model", "llama3-8b", "--cluster", "list.json"}, dir), {"list.json"});
}

TEST_CASE("a Hugging Face config with absurd sizes is refused quickly", "[robustness][cli]") {
  auto dir = scratch_dir();
  write_text(
      dir / "config.json",
      R"({"model_type": "llama", "num_hidden_layers": 1073741824, "hidden_size": 64, "num_attention_heads": 8,
                 "intermediate_size": 128, "vocab_size": 1000})");
  expect_bad_input(run_cli({"memory", "--model", "config.json"}, dir), {"config.json", "/layers"});
  write_text(
      dir / "moe.json",
      R"({"model_type": "mixtral", "num_hidden_layers": 64, "hidden_size": 64, "num_attention_heads": 8,
                 "intermediate_size": 128, "vocab_size": 1000, "num_local_experts": 100000, "num_experts_per_tok": 2})");
  expect_bad_input(run_cli({"memory", "--model", "moe.json"}, dir), {"moe.json", "/moe/experts"});
  write_text(dir / "bloom.json",
             R"({"model_type": "bloom", "n_layer": 2, "hidden_size": 64, "vocab_size": 1000})");
  expect_bad_input(run_cli({"memory", "--model", "bloom.json"}, dir), {"bloom.json", "num_attention_heads"});
}

TEST_CASE("nccl-tests logs with huge lines, huge numbers or non-UTF-8 bytes are handled",
          "[robustness][cli]") {
  auto dir = scratch_dir();
  const std::string header =
      "# nThread 1 nGpus 2 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20\n";
  // A megabyte-long rank line and environment value: std::regex would recurse once per character.
  write_text(dir / "all_gather_long.txt", header + "#  Rank  0 Group  0 Pid  1 on h device  0 [0x1] " +
                                              std::string(1 << 20, 'G') +
                                              "\nNCCL_X=" + std::string(1 << 20, 'x') + "\n");
  expect_bad_input(run_cli({"calibrate", "import-nccl-tests", "all_gather_long.txt", "-o", "p.json"}, dir),
                   {"all_gather_long.txt"});
  write_text(dir / "all_gather_digits.txt",
             "# nThread 1 nGpus 2 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: "
             "99999999999999999999999\n");
  expect_bad_input(run_cli({"calibrate", "import-nccl-tests", "all_gather_digits.txt", "-o", "p.json"}, dir),
                   {"all_gather_digits.txt", "line 1", "iters"});
  CHECK(files_in(dir) == std::vector<std::string>{"all_gather_digits.txt", "all_gather_long.txt"});
  // A Latin-1 host name: imported, and the profile written is valid JSON.
  std::string log = read_text(std::string(SHARDPLAN_FUZZ_DIR) + "/seeds/nccl_tests_log/short_all_reduce.txt");
  log.replace(log.find("host1"), 5, "h\xb7st");
  write_text(dir / "latin1.txt", log);
  auto r = run_cli({"calibrate", "import-nccl-tests", "latin1.txt", "-o", "p.json"}, dir);
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK_NOTHROW(nlohmann::json::parse(read_text(dir / "p.json")));
}

TEST_CASE("a sequence length of 0 (--seq 0) is bad input, not the model's default", "[robustness][cli]") {
  auto dir = scratch_dir();
  expect_bad_input(run_cli({"memory", "--model", "llama3-8b", "--seq", "0"}, dir),
                   {"--seq", "[1, 4194304]", "got 0"});
  expect_bad_input(run_cli({"plan", "--model", "llama3-8b", "--global-batch", "8", "--seq", "0"}, dir),
                   {"--seq", "got 0"});
}

TEST_CASE("a missing --model is an error for memory, simulate and plan", "[robustness][cli]") {
  auto dir = scratch_dir();
  expect_bad_input(run_cli({"memory", "--cluster", "dgx-h100"}, dir), {"--model", "required"});
  expect_bad_input(run_cli({"simulate", "--gpus", "8"}, dir), {"--model", "required"});
  expect_bad_input(run_cli({"plan", "--global-batch", "8"}, dir), {"--model", "required"});
}

TEST_CASE("plan --fix with a value no plan can have exits 2 with one sentence", "[robustness][cli]") {
  auto dir = scratch_dir();
  expect_bad_input(
      run_cli({"plan", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "8", "--fix", "mbs=0"}, dir),
      {"--fix mbs", "[1, 65536]", "got 0"});
  // dgx-h100 nodes have 8 GPUs in an NVLink domain.
  auto r = run_cli({"plan", "--model", "llama3-8b", "--gpus", "16", "--global-batch", "16", "--fix", "tp=16"},
                   dir);
  expect_bad_input(r, {"--fix tp", "tp 16 exceeds the 8 GPUs"});
  CHECK(r.out.find("sequences of 0 tokens") == std::string::npos);
  // Every knob pinned to a combination no runtime has: still bad input naming the reason.
  expect_bad_input(run_cli({"plan", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "8", "--fix",
                            "runtime=fsdp2", "--fix", "offload=optimizer"},
                           dir),
                   {"no plan satisfies the pinned knobs (runtime, offload)", "no optimizer-only offload"});
}

TEST_CASE("an unknown measured key lists every valid measured key", "[robustness][cli]") {
  auto dir = scratch_dir();
  write_text(dir / "r.json", R"({"schema": "shardplan.runs/1", "records": [
    {"id": "x", "model": "llama3-8b", "cluster": "dgx-h100", "gpus": 8, "plan": {"mbs": 1},
     "measured": {"peak_reserved_bytez": 1e10}}]})");
  expect_bad_input(run_cli({"validate", "r.json"}, dir),
                   {"r.json", "/measured/peak_reserved_bytez", "did you mean \"peak_reserved_bytes\"",
                    "peak_allocated_bytes", "peak_active_bytes", "peak_device_bytes", "step_s",
                    "tokens_per_s_per_gpu", "mfu", "torchtitan_log", "warmup_steps"});
}

TEST_CASE("a misspelled flag or subcommand gets a did-you-mean", "[robustness][cli]") {
  auto dir = scratch_dir();
  expect_bad_input(run_cli({"plan", "--model", "llama3-8b", "--gpu", "8", "--global-batch", "8"}, dir),
                   {"--gpu: did you mean --gpus?"});
  expect_bad_input(run_cli({"memory", "--model", "llama3-8b", "--mbz", "2"}, dir),
                   {"--mbz: did you mean --mbs?"});
  expect_bad_input(run_cli({"simualte", "--model", "llama3-8b"}, dir), {"simualte: did you mean simulate?"});
  // A value that happens to look like nothing is not given a suggestion.
  const auto r = run_cli({"memory", "--model", "llama3-8b", "--zzzzzzzzzz", "1"}, dir);
  CHECK(r.code == 2);
  CHECK(r.err.find("did you mean") == std::string::npos);
}

TEST_CASE(
    "plan --fix values no plan can take and --global-batch 0 are bad input, not a plan that does not fit",
    "[robustness][cli]") {
  auto dir = scratch_dir();
  // Mixtral has 8 experts: ep 3 divides nothing. Before, the search fell back to pipelined plans with ep 1
  // and answered "no plan fits" (exit 1).
  expect_bad_input(
      run_cli({"plan", "--model", "mixtral-8x7b", "--gpus", "8", "--global-batch", "8", "--fix", "ep=3"},
              dir),
      {"--fix ep", "ep = 3", "does not divide the 8 experts"});
  // One bad value of a list is named too.
  expect_bad_input(
      run_cli({"plan", "--model", "mixtral-8x7b", "--gpus", "8", "--global-batch", "8", "--fix", "ep=2,3"},
              dir),
      {"--fix ep", "ep = 3"});
  expect_bad_input(run_cli({"plan", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "0"}, dir),
                   {"--global-batch", "must be >= 1, got 0"});
  expect_bad_input(run_cli({"simulate", "--model", "llama3-8b", "--global-batch", "0"}, dir),
                   {"--global-batch", "must be >= 1, got 0"});
  CHECK(files_in(dir).empty());
}

TEST_CASE("a refused --emit target does not discard the table, the JSON or the other targets",
          "[robustness][cli][emit]") {
  auto dir = scratch_dir();
  // A pipelined recommendation: the FSDP2 script cannot express pp, torchtitan's config can.
  const auto r = run_cli({"plan", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "32", "--seq",
                          "4096", "--fix", "pp=2", "--threads", "2", "--json", "plan.json", "--emit",
                          "fsdp2:train.py", "--emit", "torchtitan:titan.py"},
                         dir);
  INFO(r.err);
  CHECK(r.code == 2);
  CHECK(r.out.find("recommended: shardplan simulate") != std::string::npos);
  CHECK(r.err.find("--emit fsdp2:train.py") != std::string::npos);
  CHECK(r.err.find("pipeline parallelism") != std::string::npos);
  CHECK(fs::exists(dir / "plan.json"));
  CHECK(fs::exists(dir / "titan.py"));
  CHECK_FALSE(fs::exists(dir / "train.py"));
}

TEST_CASE("a run record's relative model and cluster paths are the record file's neighbours",
          "[robustness][cli][validate]") {
  auto dir = scratch_dir();
  fs::create_directories(dir / "runs");
  // The cluster file sits beside the record, not in the directory validate runs from.
  write_text(dir / "runs" / "my-cluster.json",
             nlohmann::json::parse(
                 read_text(fs::path(SHARDPLAN_SOURCE_DIR) / "topologies" / "presets" / "dgx-h100.json"))
                 .dump());
  write_text(dir / "runs" / "r.json", R"({"schema": "shardplan.runs/1", "records": [
    {"id": "x", "model": "llama3-8b", "cluster": "my-cluster.json", "gpus": 8, "plan": {"mbs": 1, "seq": 8192},
     "measured": {"peak_reserved_bytes": 4e10}}]})");
  const auto r = run_cli({"validate", "runs/r.json", "--quiet"}, dir);
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(r.out.find("peak_reserved_bytes") != std::string::npos);
}

TEST_CASE("plan prints a progress line on stderr when the search takes longer than the delay",
          "[robustness][cli][progress]") {
  auto dir = scratch_dir();
  // The delay is 2 s; SHARDPLAN_PROGRESS_AFTER_S=0 makes every search long enough to show it.
  ::setenv("SHARDPLAN_PROGRESS_AFTER_S", "0", 1);
  const auto r =
      run_cli({"plan", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "16", "--top", "2"}, dir);
  ::unsetenv("SHARDPLAN_PROGRESS_AFTER_S");
  CHECK(r.code == 0);
  CHECK(r.err.find("shardplan: searching: ") != std::string::npos);
  CHECK(r.err.find("shardplan: search done: ") != std::string::npos);
  CHECK(r.out.find("shardplan: search") == std::string::npos);  // stdout keeps the report only
  // A quick search (well under 2 s here: one pinned plan) prints nothing.
  const auto q = run_cli({"plan",
                          "--model",
                          "llama3-8b",
                          "--gpus",
                          "8",
                          "--global-batch",
                          "8",
                          "--fix",
                          "runtime=fsdp2",
                          "--fix",
                          "zero=3",
                          "--fix",
                          "tp=1",
                          "--fix",
                          "mbs=1",
                          "--fix",
                          "ac=full",
                          "--fix",
                          "wrap=1",
                          "--fix",
                          "prefetch=1",
                          "--fix",
                          "reduce_dtype=fp32",
                          "--fix",
                          "reshard_after_forward=true"},
                         dir);
  CHECK(q.code == 0);
  CHECK(q.err.find("shardplan: search") == std::string::npos);
}
