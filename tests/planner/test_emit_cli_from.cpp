// The CLI's --from (framework configs read back into plans) and the emitted configs read back: what `simulate
// --from` and `plan --from ... --emit` make of DeepSpeed, torchtitan and accelerate files; a pinned float8
// plan reproduced by its printed command; --emit's KIND:FILE. Split from test_emit_cli.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <catch2/catch.hpp>

#include "core/json_reader.hpp"
#include "plan_helpers.hpp"
#include "planner/emit.hpp"
#include "planner/report/margin.hpp"
#include "tests/common/tools.hpp"

using namespace shardplan;
namespace fs = std::filesystem;
using ptest::quote;

namespace {
// `shardplan simulate ... --from FILE --json -`'s plan, or a failed REQUIRE with stderr.
Json simulate_from(const fs::path& dir, const std::string& file, const std::string& extra = "") {
  const int rc = ptest::run_cli(
      "simulate --model llama3-8b --cluster dgx-h100 --gpus 16 --from " + quote(file) + extra + " --json -",
      dir / "sim.json", dir / "sim_err.txt");
  INFO(ptest::read_text(dir / "sim_err.txt"));
  REQUIRE(rc == 0);
  return load_json_file((dir / "sim.json").string())["plan"];
}

// `shardplan plan` with pins emitting KIND to FILE; returns the recommended plan.
Json plan_emitting(const fs::path& dir, const std::string& pins, const std::string& kind,
                   const fs::path& file) {
  const int rc = ptest::run_cli(
      "plan --model llama3-8b --cluster dgx-h100 --gpus 16 --global-batch 32 --threads 2 --top 1 " + pins +
          " --emit " + quote(kind + ":" + file.string()) + " --json " + quote((dir / "plan.json").string()),
      dir / "out.txt", dir / "err.txt");
  INFO(ptest::read_text(dir / "err.txt"));
  REQUIRE(rc == 0);
  return load_json_file((dir / "plan.json").string())["recommended"]["plan"];
}
}  // namespace

TEST_CASE("CLI --from: an emitted ds_config read back gives the same plan", "[cli][emit][from]") {
  auto dir = ptest::temp_dir("from-ds");
  // torch.compile is not a ds_config key (the emitter says so in a note): pinned off so the file carries the
  // plan.
  const Json rec = plan_emitting(
      dir, "--fix runtime=deepspeed --fix zero=3 --fix tp=2 --fix offload=optimizer --fix compile=false",
      "deepspeed", dir / "ds.json");
  // Every knob the ds_config carries (stage, autotp_size, offload, micro batch, accumulation, bf16,
  // communication dtype) plus --seq, which a ds_config has no key for, gives back the recommended plan
  // exactly.
  const Json back =
      simulate_from(dir, (dir / "ds.json").string(), " --seq " + std::to_string(rec["seq"].get<int>()));
  CHECK(back == rec);
  // On 8 GPUs the same file is inconsistent: train_batch_size 32 != mbs x accum x (8 / tp) ranks.
  CHECK(ptest::run_cli("simulate --model llama3-8b --cluster dgx-h100 --gpus 8 --from " +
                           quote((dir / "ds.json").string()),
                       dir / "o8.txt", dir / "e8.txt") == 2);
  CHECK(ptest::read_text(dir / "e8.txt").find("ds.json: train_batch_size: 32 is not micro batch") !=
        std::string::npos);
  // plan --from keeps the file's runtime and unsearched choices (precision) and takes its global batch (32).
  REQUIRE(ptest::run_cli("plan --model llama3-8b --cluster dgx-h100 --gpus 16 --threads 2 --top 1 --from " +
                             quote((dir / "ds.json").string()) + " --json " +
                             quote((dir / "p2.json").string()),
                         dir / "o2.txt", dir / "e2.txt") == 0);
  const Json p2 = load_json_file((dir / "p2.json").string());
  CHECK(p2["inputs"]["global_batch"] == 32);
  CHECK(p2["recommended"]["plan"]["runtime"] == "deepspeed");
  CHECK(p2["recommended"]["plan"]["precision"] == "bf16-mixed");
}

TEST_CASE("CLI --from: an emitted torchtitan TOML read back gives the same plan", "[cli][emit][from]") {
  auto dir = ptest::temp_dir("from-titan");
  // Pins torchtitan can express (prefetch 1, fp32 reduction); HSDP 2 x 8 with selective AC.
  const Json rec =
      plan_emitting(dir,
                    "--fix runtime=fsdp2 --fix shard_group=8 --fix ac=selective --fix prefetch=1 "
                    "--fix reduce_dtype=fp32 --fix wrap=1",
                    "torchtitan-toml", dir / "t.toml");
  CHECK(simulate_from(dir, (dir / "t.toml").string()) == rec);
  // A pp 4 interleaved 1F1B plan: [parallelism] pipeline_parallel_* read back as the same plan.
  const Json pipe = plan_emitting(
      dir,
      "--fix runtime=fsdp2 --fix pp=4 --fix pp_schedule=interleaved-1f1b --fix virtual_stages=2 "
      "--fix tp=1 --fix ac=full --fix fp8=none --fix prefetch=1 --fix wrap=1",
      "torchtitan-toml", dir / "pp.toml");
  REQUIRE(pipe["pp"] == 4);
  const std::string toml = ptest::read_text(dir / "pp.toml");
  INFO(toml);
  CHECK(toml.find("pipeline_parallel_degree = 4\npipeline_parallel_schedule = \"Interleaved1F1B\"\n") !=
        std::string::npos);
  // torchtitan's local batch is split into micro-batches of the plan's size: mbs x micro-batches per step.
  CHECK(toml.find(fmt::format("local_batch_size = {}\n",
                              pipe["mbs"].get<int>() * pipe["grad_accum"].get<int>())) != std::string::npos);
  CHECK(simulate_from(dir, (dir / "pp.toml").string()) == pipe);
}

TEST_CASE("CLI --from: emitted torchtitan 0.3.0 configs read back give the same plan", "[cli][emit][from]") {
  auto dir = ptest::temp_dir("from-titan-py");
  // Five plans covering every field the file carries: HSDP 2 x 8 with selective AC and float8 rowwise;
  // ZeRO-2 (reshard never) with TP 2, full AC and compile; ZeRO-3 with parameter offload, no AC, foreach
  // Adam; bf16-true (training.dtype bfloat16) with the fp32 reduction torchtitan always does; context
  // parallelism 2. Each pins the
  // knobs torchtitan cannot express to what it does (prefetch 1, wrap 1, no float8 all-gather).
  const char* pins[] = {
      "--fix runtime=fsdp2 --fix shard_group=8 --fix ac=selective --fix fp8=rowwise --fix compile=true",
      "--fix runtime=fsdp2 --fix zero=2 --fix tp=2 --fix ac=full --fix compile=true --fix fp8=none",
      "--fix runtime=fsdp2 --fix zero=3 --fix offload=params --fix ac=none --fix fused_optimizer=false "
      "--fix fp8=none",
      "--fix runtime=fsdp2 --fix precision=bf16-true --fix reduce_dtype=fp32 --fix tp=1 --fix fp8=none",
      // Context parallelism (ParallelismConfig.context_parallel_degree).
      "--fix runtime=fsdp2 --fix cp=2 --fix tp=1 --fix ac=full --fix fp8=none",
      // Pipeline parallelism: pp 4, interleaved 1F1B with torchtitan's 2 stages per rank and split
      // (pipeline_parallel_degree / _schedule / _microbatch_size, local_batch_size = micro-batch x
      // micro-batches), and the same with the plan's own split of the 32 blocks over the 8 stages
      // (module_fqns_per_model_part).
      "--fix runtime=fsdp2 --fix pp=4 --fix pp_schedule=interleaved-1f1b --fix virtual_stages=2 --fix tp=1 "
      "--fix ac=full --fix fp8=none",
      "--fix runtime=fsdp2 --fix pp=4 --fix pp_schedule=interleaved-1f1b --fix pp_layers=3,4,4,4,4,4,4,5 "
      "--fix tp=1 --fix ac=full --fix fp8=none",
  };
  int i = 0;
  for (const char* pin : pins) {
    INFO(pin);
    const fs::path file = dir / ("cfg" + std::to_string(i++) + ".py");
    const Json rec =
        plan_emitting(dir, std::string(pin) + " --fix prefetch=1 --fix wrap=1 --fix fp8_all_gather=false",
                      "torchtitan", file);
    INFO(ptest::read_text(file));
    CHECK(simulate_from(dir, file.string()) == rec);
  }
}

TEST_CASE("CLI --from: hand-written torchtitan 0.3.0 config forms and bad files", "[cli][from]") {
  auto dir = ptest::temp_dir("from-titan-hand");
  // The registry style of torchtitan's own config_registry.py files: one function builds a config, another
  // starts from it and assigns fields; the file holds several functions, so FILE.py:FUNCTION names one.
  ptest::write_text(dir / "reg.py",
                    "from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig\n"
                    "from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC\n"
                    "from torchtitan.models.llama3 import model_registry\n"
                    "from torchtitan.trainer import Trainer\n\n"
                    "def base() -> Trainer.Config:\n"
                    "    \"\"\"Docstring.\"\"\"\n"
                    "    model_spec = model_registry(\"8B\")\n"
                    "    return Trainer.Config(\n"
                    "        model_spec=model_spec,\n"
                    "        training=TrainingConfig(local_batch_size=2, seq_len=8 * 1024),  # folded\n"
                    "        parallelism=ParallelismConfig(data_parallel_shard_degree=-1),\n"
                    "    )\n\n"
                    "def tuned() -> Trainer.Config:\n"
                    "    config = base()\n"
                    "    config.activation_checkpoint = FullAC.Config()\n"
                    "    config.compile = CompileConfig(enable=True, components=[\"model\"])\n"
                    "    config.training.global_batch_size = 64\n"
                    "    config.parallelism.tensor_parallel_degree = 2\n"
                    "    return config\n");
  Json p = simulate_from(dir, (dir / "reg.py").string() + ":tuned");
  // mbs 2, seq 8192 from base(); global 64 = 2 x accum 4 x 8 data-parallel ranks (16 GPUs / tp 2); full AC
  // and compile from tuned(); ZeRO-3 over all 8 data-parallel ranks (shard degree -1).
  CHECK(p["mbs"] == 2);
  CHECK(p["seq"] == 8192);
  CHECK(p["tp"] == 2);
  CHECK(p["grad_accum"] == 4);
  CHECK(p["ac"] == "full");
  CHECK(p["compile"] == true);
  CHECK(p["zero"] == 3);
  CHECK(p["shard_group"] == 8);
  // The file's flavor (llama3 8B) is --model's architecture: no model line on stderr.
  CHECK(ptest::read_text(dir / "sim_err.txt").find("the file's model") == std::string::npos);
  // base() alone: Trainer.Config's default activation checkpointing is SelectiveAC (torchtitan trainer.py).
  CHECK(simulate_from(dir, (dir / "reg.py").string() + ":base")["ac"] == "selective");
  // Simulated as qwen3-8b, the llama3 8B file says so on stderr (the flags' model is simulated; exit 0 or 1,
  // fits or not).
  REQUIRE(ptest::run_cli("simulate --model qwen3-8b --cluster dgx-h100 --gpus 16 --from " +
                             quote((dir / "reg.py").string() + ":base"),
                         dir / "o.txt", dir / "e.txt") <= 1);
  CHECK(ptest::read_text(dir / "e.txt")
            .find("the file's model is torchtitan llama3 8B; simulating --model "
                  "qwen3-8b (torchtitan qwen3 8B)") != std::string::npos);
  // Several functions and none named: one clear error listing them.
  CHECK(ptest::run_cli("simulate --model llama3-8b --gpus 16 --from " + quote((dir / "reg.py").string()),
                       dir / "o.txt", dir / "e.txt") == 2);
  CHECK(ptest::read_text(dir / "e.txt")
            .find("reg.py: several functions (base, tuned): name the config as "
                  "FILE.py:FUNCTION") != std::string::npos);
  // A field the plan needs that is not a literal names the field; a statement outside the subset names the
  // line.
  ptest::write_text(dir / "var.py",
                    "def c():\n    return Trainer.Config(training=TrainingConfig(seq_len=n))\n");
  CHECK(ptest::run_cli("simulate --model llama3-8b --gpus 16 --from " + quote((dir / "var.py").string()),
                       dir / "o.txt", dir / "e.txt") == 2);
  CHECK(ptest::read_text(dir / "e.txt").find("var.py: training.seq_len: expected an integer, got \"`n`\"") !=
        std::string::npos);
  ptest::write_text(dir / "if.py", "def c():\n    config = base()\n    if x:\n        config.a = 1\n");
  CHECK(ptest::run_cli("simulate --model llama3-8b --gpus 16 --from " + quote((dir / "if.py").string()),
                       dir / "o.txt", dir / "e.txt") == 2);
  CHECK(ptest::read_text(dir / "e.txt").find("if.py: line 3: 'if' in c() is outside the subset") !=
        std::string::npos);
  // Hostile inputs are one input error each, never a crash: deep nesting, integers past 64 bits (kept as
  // text, so the field says what it found), an unterminated string.
  ptest::write_text(dir / "deep.py", "def c():\n    x = " + std::string(100000, '(') + "\n");
  ptest::write_text(dir / "neg.py", "def c():\n    x = " + std::string(100000, '-') + "1\n");
  ptest::write_text(dir / "big.py",
                    "def c():\n    return Trainer.Config(training=TrainingConfig(seq_len=2**70))\n");
  ptest::write_text(dir / "str.py", "def c():\n    x = \"abc\n");
  for (const char* f : {"deep.py", "neg.py", "big.py", "str.py"}) {
    INFO(f);
    CHECK(ptest::run_cli("simulate --model llama3-8b --gpus 16 --from " + quote((dir / f).string()),
                         dir / "o.txt", dir / "e.txt") == 2);
    CHECK(ptest::read_text(dir / "e.txt").find(std::string(f) + ": ") != std::string::npos);
  }
  CHECK(ptest::read_text(dir / "e.txt").find("line 2: unterminated string") != std::string::npos);
  // Python's integer arithmetic as far as configs use it: 8 * 1024 - 7 // 2 = 8192 - 4 (floor division),
  // -7 % 4 = 1 (the divisor's sign).
  ptest::write_text(
      dir / "arith.py",
      "def c():\n    return Trainer.Config(training=TrainingConfig(seq_len=8 * 1024 - (-7) // 2 "
      "- 4, local_batch_size=-7 % 4))\n");
  const Json a = simulate_from(dir, (dir / "arith.py").string());
  CHECK(a["seq"] == 8192);
  CHECK(a["mbs"] == 1);
  ptest::write_text(dir / "open.py", "def c():\n    return Trainer.Config(\n");
  CHECK(ptest::run_cli("simulate --model llama3-8b --gpus 16 --from " + quote((dir / "open.py").string()),
                       dir / "o.txt", dir / "e.txt") == 2);
  CHECK(ptest::read_text(dir / "e.txt").find("open.py: line") != std::string::npos);
}

TEST_CASE("CLI --from: accelerate FSDP YAML, explicit flags override, unmodelled keys named, bad files",
          "[cli][from]") {
  auto dir = ptest::temp_dir("from-acc");
  ptest::write_text(dir / "acc.yaml",
                    "compute_environment: LOCAL_MACHINE\n"
                    "distributed_type: FSDP\n"
                    "fsdp_config:\n"
                    "  fsdp_activation_checkpointing: true\n"
                    "  fsdp_offload_params: false\n"
                    "  fsdp_sharding_strategy: HYBRID_SHARD\n"
                    "  fsdp_backward_prefetch: BACKWARD_POST\n"
                    "  fsdp_version: 1\n"
                    "mixed_precision: bf16\n"
                    "num_machines: 2\n"
                    "num_processes: 16\n");
  Json p = simulate_from(dir, (dir / "acc.yaml").string());
  // HYBRID_SHARD: shard within a node (16 / 2 machines = 8), replicate across the 2 nodes; ZeRO-3.
  CHECK(p["runtime"] == "fsdp1");
  CHECK(p["zero"] == 3);
  CHECK(p["shard_group"] == 8);
  CHECK(p["replicas"] == 2);
  CHECK(p["ac"] == "full");
  CHECK(p["precision"] == "bf16-mixed");
  CHECK(ptest::read_text(dir / "sim_err.txt")
            .find("not modelled (changes memory or time): fsdp_config.fsdp_backward_prefetch "
                  "BACKWARD_POST") != std::string::npos);
  // An explicit flag wins over the file.
  CHECK(simulate_from(dir, (dir / "acc.yaml").string(), " --ac selective")["ac"] == "selective");

  ptest::write_text(dir / "bad.json", "{\"zero_optimization\": {\"stage\": 4}}");
  CHECK(ptest::run_cli("simulate --model llama3-8b --gpus 16 --from " + quote((dir / "bad.json").string()),
                       dir / "o.txt", dir / "e.txt") == 2);
  CHECK(ptest::read_text(dir / "e.txt").find("bad.json: zero_optimization.stage: must be 0..3") !=
        std::string::npos);
  ptest::write_text(
      dir / "bad.toml",
      "[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_schedule = \"LoopedBFS\"\n");
  CHECK(ptest::run_cli("simulate --model llama3-8b --gpus 16 --from " + quote((dir / "bad.toml").string()),
                       dir / "o.txt", dir / "e.txt") == 2);
  CHECK(
      ptest::read_text(dir / "e.txt")
          .find("bad.toml: parallelism.pipeline_parallel_schedule: \"LoopedBFS\" is not a schedule shardplan "
                "models") != std::string::npos);
  // A degree the --model cannot take names the file's field, not a flag nobody gave (llama3-8b has no
  // experts).
  ptest::write_text(dir / "ep.toml", "[parallelism]\nexpert_parallel_degree = 8\n");
  CHECK(ptest::run_cli("simulate --model llama3-8b --gpus 16 --from " + quote((dir / "ep.toml").string()),
                       dir / "o.txt", dir / "e.txt") == 2);
  INFO(ptest::read_text(dir / "e.txt"));
  CHECK(ptest::read_text(dir / "e.txt").find("ep.toml: parallelism.expert_parallel_degree = 8: ") !=
        std::string::npos);
  CHECK(ptest::read_text(dir / "e.txt").find("--ep") == std::string::npos);
}

TEST_CASE("CLI: plan --fix runtime=megatron searches megatron plans, --emit refuses them in one line",
          "[cli][emit][megatron]") {
  auto dir = ptest::temp_dir("megatron");
  const std::string base =
      "plan --model llama2-7b --cluster dgx-h100 --gpus 8 --global-batch 32 --threads 2 --fix "
      "runtime=megatron";
  int rc =
      ptest::run_cli(base + " --json " + quote((dir / "p.json").string()), dir / "out.txt", dir / "err.txt");
  INFO(ptest::read_text(dir / "out.txt") << ptest::read_text(dir / "err.txt"));
  REQUIRE(rc == 0);
  Json j = load_json_file((dir / "p.json").string());
  CHECK(j["recommended"]["plan"]["runtime"] == "megatron");
  rc = ptest::run_cli(base + " --emit " + quote("torchtitan:" + (dir / "t.py").string()), dir / "out2.txt",
                      dir / "err2.txt");
  const std::string err = ptest::read_text(dir / "err2.txt");
  CHECK(rc == 2);
  CHECK(err.find("megatron, which has no emitter") != std::string::npos);
  CHECK(std::count(err.begin(), err.end(), '\n') == 1);
  CHECK_FALSE(fs::exists(dir / "t.py"));
}

TEST_CASE("CLI: plan --fix fp8=tensorwise recommends a float8 plan and prints a command that reproduces it",
          "[cli][fp8]") {
  auto dir = ptest::temp_dir("plan-fp8");
  const int rc = ptest::run_cli(
      "plan --model llama3-8b --cluster dgx-h100 --gpus 16 --global-batch 32 --seq 4096 --top 2 "
      "--threads 2 --fix fp8=tensorwise --json " +
          quote((dir / "plan.json").string()),
      dir / "out.txt", dir / "err.txt");
  INFO(ptest::read_text(dir / "err.txt"));
  REQUIRE(rc == 0);
  Json j = load_json_file((dir / "plan.json").string());
  CHECK(j["recommended"]["plan"]["fp8"] == "tensorwise");
  CHECK(ptest::read_text(dir / "out.txt").find(" --fp8 tensorwise") != std::string::npos);
  CHECK(ptest::run_cli("plan --model llama3-8b --cluster dgx-h100 --gpus 16 --global-batch 32 --fix fp8=e4m3",
                       dir / "out2.txt", dir / "err2.txt") != 0);
  CHECK(ptest::read_text(dir / "err2.txt").find("expected one of: none, tensorwise, rowwise") !=
        std::string::npos);
}

TEST_CASE("parse_emit_spec: kinds and malformed specs", "[emit]") {
  CHECK(parse_emit_spec("fsdp2:a.py") == std::pair<std::string, std::string>{"fsdp2", "a.py"});
  CHECK(parse_emit_spec("deepspeed:/tmp/x:y.json") ==
        std::pair<std::string, std::string>{"deepspeed", "/tmp/x:y.json"});
  CHECK(parse_emit_spec("torchtitan:t.py").first == "torchtitan");
  CHECK(parse_emit_spec("torchtitan-toml:t.toml").first == "torchtitan-toml");
  CHECK_THROWS_AS(parse_emit_spec("megatron:x"), InputError);
  CHECK_THROWS_AS(parse_emit_spec("fsdp2"), InputError);
  CHECK_THROWS_AS(parse_emit_spec("fsdp2:"), InputError);
}
