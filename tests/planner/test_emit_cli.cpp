// The `shardplan plan` CLI: nothing-fits exit status, framework configs (--emit) checked by their own
// parsers, the JSON result's shape, and the recommended plan fed back into `shardplan simulate`.
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

TEST_CASE("CLI: plan exits 1 when nothing fits (llama3.1-405b on 8 H100s)", "[cli][nofit]") {
  auto dir = ptest::temp_dir("nofit");
  const int rc = ptest::run_cli(
      "plan --model llama3.1-405b --cluster dgx-h100 --gpus 8 --global-batch 8 --threads 2 --json " +
          quote((dir / "j.json").string()),
      dir / "out.txt", dir / "err.txt");
  INFO(ptest::read_text(dir / "out.txt") << ptest::read_text(dir / "err.txt"));
  CHECK(rc == 1);
  const std::string out = ptest::read_text(dir / "out.txt");
  CHECK(out.find("no plan fits") != std::string::npos);
  // The JSON is still written, with the closest plan.
  Json j = load_json_file((dir / "j.json").string());
  CHECK(j["plans"].empty());
  CHECK(j["recommended"].is_null());
  CHECK(j.contains("closest"));
  CHECK(j["closest_over_bytes"].get<double>() > 0);
  CHECK_FALSE(j["binding_hint"].get<std::string>().empty());
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

namespace {

// Runs the plan once for all emitter checks (the search is the slow part).
struct PlanRun {
  fs::path dir;
  int rc = -1;
  Json j;
  PlanRun() {
    dir = ptest::temp_dir("emit");
    rc = ptest::run_cli(
        "plan --model llama3-8b --cluster dgx-h100 --gpus 16 --global-batch 32 --seq 4096 --threads 4"
        " --emit " +
            quote("deepspeed:" + (dir / "ds.json").string()) + " --emit " +
            quote("fsdp2:" + (dir / "fsdp2_plan.py").string()) + " --emit " +
            quote("torchtitan-toml:" + (dir / "titan.toml").string()) + " --emit " +
            quote("torchtitan:" + (dir / "titan_cfg.py").string()) + " --json " +
            quote((dir / "plan.json").string()),
        dir / "out.txt", dir / "err.txt");
    if (rc == 0) j = load_json_file((dir / "plan.json").string());
  }
};
const PlanRun& plan_run() {
  static PlanRun r;
  return r;
}

}  // namespace

TEST_CASE("CLI: plan --json has plans / recommended / search stats and rejections", "[cli][emit]") {
  const auto& r = plan_run();
  INFO(ptest::read_text(r.dir / "err.txt"));
  REQUIRE(r.rc == 0);
  const Json& j = r.j;
  for (const char* k : {"plans", "recommended", "search", "rejections"}) {
    INFO(k);
    CHECK(j.contains(k));
  }
  REQUIRE(j["plans"].is_array());
  REQUIRE_FALSE(j["plans"].empty());
  CHECK(j["recommended"] == j["plans"][0]);
  for (const char* k : {"considered", "evaluated", "rejected", "seconds"}) {
    INFO(k);
    CHECK(j["search"].contains(k));
  }
  CHECK(j["search"]["considered"].get<std::int64_t>() >= j["search"]["evaluated"].get<std::int64_t>());
  CHECK(j["search"]["rejected"].is_object());
  REQUIRE(j["rejections"].is_array());
  std::int64_t rej = 0;
  for (const auto& e : j["rejections"]) {
    CHECK(e.contains("reason"));
    CHECK(e.contains("example"));
    rej += e["count"].get<std::int64_t>();
    CHECK(j["search"]["rejected"][e["reason"].get<std::string>()] == e["count"]);
  }
  // Every considered plan is either rejected for a reason or fits.
  CHECK(rej + j["search"]["fitting"].get<std::int64_t>() == j["search"]["considered"].get<std::int64_t>());
  // Plans are listed best first: tokens/s non-increasing, except that plans within the tie tolerance of each
  // other (planner/report/margin.hpp kThroughputTieTolerance) are ordered by the tie-break rules instead.
  for (std::size_t i = 1; i < j["plans"].size(); ++i)
    CHECK(j["plans"][0]["time"]["tokens_per_s_per_gpu"].get<double>() >
          j["plans"][i]["time"]["tokens_per_s_per_gpu"].get<double>() * (1 - kThroughputTieTolerance));
  for (std::size_t i = 2; i < j["plans"].size(); ++i)
    CHECK(j["plans"][i - 1]["time"]["tokens_per_s_per_gpu"].get<double>() >=
          j["plans"][i]["time"]["tokens_per_s_per_gpu"].get<double>() * (1 - kThroughputTieTolerance));
}

TEST_CASE("CLI: --emit deepspeed writes a ds_config matching the recommended plan", "[cli][emit]") {
  const auto& r = plan_run();
  INFO(ptest::read_text(r.dir / "err.txt"));
  REQUIRE(r.rc == 0);
  REQUIRE(fs::exists(r.dir / "ds.json"));
  Json ds = Json::parse(ptest::read_text(r.dir / "ds.json"));  // throws (fails the test) if not JSON
  const Json& plan = r.j["recommended"]["plan"];
  CHECK(ds["zero_optimization"]["stage"] == plan["zero"]);
  CHECK(ds["train_micro_batch_size_per_gpu"] == plan["mbs"]);
  CHECK(ds["gradient_accumulation_steps"] == plan["grad_accum"]);
  CHECK(ds["train_batch_size"].get<int>() == 32);
}

TEST_CASE("CLI: --emit fsdp2 writes Python that compiles", "[cli][emit][python]") {
  const auto& r = plan_run();
  INFO(ptest::read_text(r.dir / "err.txt"));
  REQUIRE(r.rc == 0);
  REQUIRE(fs::exists(r.dir / "fsdp2_plan.py"));
  if (!ptest::have_python3()) SHARDPLAN_MISSING_TOOL("python3 not found: the py_compile check cannot run");
  const fs::path log = r.dir / "pycompile.txt";
  const int rc = ptest::run_shell("python3 -m py_compile " + quote((r.dir / "fsdp2_plan.py").string()) +
                                  " >" + quote(log.string()) + " 2>&1");
  INFO(ptest::read_text(log));
  INFO(ptest::read_text(r.dir / "fsdp2_plan.py"));
  CHECK(rc == 0);
  const std::string py = ptest::read_text(r.dir / "fsdp2_plan.py");
  const Json& plan = r.j["recommended"]["plan"];
  // The script's PLAN dict carries the recommended plan (the body applying it is fixed; tests/emit runs it).
  CHECK(py.find(fmt::format(", mbs={}, grad_accum={}, seq=4096,", plan["mbs"].get<int>(),
                            plan["grad_accum"].get<int>())) != std::string::npos);
}

TEST_CASE("CLI: --emit torchtitan-toml writes TOML that parses", "[cli][emit][python]") {
  const auto& r = plan_run();
  INFO(ptest::read_text(r.dir / "err.txt"));
  REQUIRE(r.rc == 0);
  REQUIRE(fs::exists(r.dir / "titan.toml"));
  if (!ptest::have_python3() || !ptest::have_tomllib())
    SHARDPLAN_MISSING_TOOL("python3 with tomllib (>= 3.11) not found: the TOML parse check cannot run");
  const fs::path log = r.dir / "toml.txt";
  const fs::path dump = r.dir / "toml.json";
  const int rc = ptest::run_shell(
      "python3 -c \"import tomllib,sys,json; json.dump(tomllib.load(open(sys.argv[1],'rb')), "
      "open(sys.argv[2],'w'))\" " +
      quote((r.dir / "titan.toml").string()) + " " + quote(dump.string()) + " >" + quote(log.string()) +
      " 2>&1");
  INFO(ptest::read_text(log));
  INFO(ptest::read_text(r.dir / "titan.toml"));
  REQUIRE(rc == 0);
  Json t = load_json_file(dump.string());
  const Json& plan = r.j["recommended"]["plan"];
  CHECK(t["training"]["local_batch_size"] == plan["mbs"]);
  CHECK(t["training"]["seq_len"].get<int>() == 4096);
  CHECK(t["training"]["global_batch_size"].get<int>() == 32);
  CHECK(t["parallelism"]["tensor_parallel_degree"] == plan["tp"]);
  CHECK(t["parallelism"]["data_parallel_shard_degree"] == plan["shard_group"]);
  CHECK(t["parallelism"]["data_parallel_replicate_degree"] == plan["replicas"]);
}

TEST_CASE("CLI: --emit torchtitan writes torchtitan 0.3.0's Python config function with the plan's fields",
          "[cli][emit][python]") {
  const auto& r = plan_run();
  INFO(ptest::read_text(r.dir / "err.txt"));
  REQUIRE(r.rc == 0);
  const std::string py = ptest::read_text(r.dir / "titan_cfg.py");
  INFO(py);
  const Json& plan = r.j["recommended"]["plan"];
  // llama3-8b has the dimensions of torchtitan's llama3 flavor "8B" (4096 hidden, 32 layers, 32 / 8 heads,
  // vocab 128256); the batch fields are the plan's, global 32 as asked.
  CHECK(py.find("from torchtitan.models.llama3 import model_registry\n") != std::string::npos);
  CHECK(py.find("model_registry(\"8B\"") != std::string::npos);
  CHECK(py.find("def shardplan_config() -> Trainer.Config:\n") != std::string::npos);
  CHECK(py.find(fmt::format("local_batch_size={},\n", plan["mbs"].get<int>())) != std::string::npos);
  CHECK(py.find("global_batch_size=32,\n") != std::string::npos);
  CHECK(py.find("seq_len=4096,\n") != std::string::npos);
  CHECK(py.find(fmt::format("tensor_parallel_degree={},\n", plan["tp"].get<int>())) != std::string::npos);
  // Read back with --from it is the recommended plan (the round trip; tests/emit loads it with torchtitan).
  const int rc = ptest::run_cli("simulate --model llama3-8b --cluster dgx-h100 --gpus 16 --from " +
                                    quote((r.dir / "titan_cfg.py").string()) + " --json -",
                                r.dir / "titan_back.json", r.dir / "titan_back_err.txt");
  INFO(ptest::read_text(r.dir / "titan_back_err.txt"));
  REQUIRE(rc == 0);
  // What torchtitan 0.3.0 cannot express comes back as what it does, and each was named on stderr: fp32
  // gradient reduction (mixed_precision_reduce is Literal["float32"]), one block per FSDP unit, one block
  // prefetched, no float8 all-gather.
  Json expect = plan;
  const std::string err = ptest::read_text(r.dir / "err.txt");
  if (plan["reduce_dtype"] == "bf16")
    CHECK(err.find("emit torchtitan: --reduce-dtype bf16: TrainingConfig.mixed_precision_reduce") !=
          std::string::npos);
  if (plan["prefetch"] != 1) CHECK(err.find("emit torchtitan: --prefetch") != std::string::npos);
  if (plan["wrap"] != 1) CHECK(err.find("emit torchtitan: --wrap") != std::string::npos);
  expect["reduce_dtype"] = "fp32";
  expect["prefetch"] = 1;
  expect["wrap"] = 1;
  expect["fp8_all_gather"] = false;
  CHECK(load_json_file((r.dir / "titan_back.json").string())["plan"] == expect);
}

TEST_CASE("CLI: the recommended plan fed back to simulate reproduces step_s exactly", "[cli][emit]") {
  const auto& r = plan_run();
  INFO(ptest::read_text(r.dir / "err.txt"));
  REQUIRE(r.rc == 0);
  const Json& rec = r.j["recommended"];
  const Json& p = rec["plan"];
  auto s = [&](const char* k) { return p[k].is_string() ? p[k].get<std::string>() : p[k].dump(); };
  const std::string args =
      "simulate --model llama3-8b --cluster dgx-h100 --gpus 16 --runtime " + s("runtime") + " --zero " +
      s("zero") + " --shard-group " + s("shard_group") + " --tp " + s("tp") + " --seq " + s("seq") +
      " --mbs " + s("mbs") + " --grad-accum " + s("grad_accum") + " --ac " + s("ac") + " --wrap " +
      s("wrap") + " --prefetch " + s("prefetch") + " --precision " + s("precision") + " --reduce-dtype " +
      s("reduce_dtype") + (p["compile"] == true ? " --compile" : "") +
      (p["async_tp"] == true ? " --async-tp" : "") + " --json -";
  INFO(args);
  const int rc = ptest::run_cli(args, r.dir / "sim.json", r.dir / "sim_err.txt");
  INFO(ptest::read_text(r.dir / "sim_err.txt"));
  REQUIRE(rc == 0);
  Json sim = load_json_file((r.dir / "sim.json").string());
  CHECK(sim["time"]["step_s"].get<double>() == rec["time"]["step_s"].get<double>());  // bitwise
  CHECK(sim["time"]["tokens_per_s_per_gpu"].get<double>() ==
        rec["time"]["tokens_per_s_per_gpu"].get<double>());
}

// ---------------------------------------------------------------------------------------------------------------
// Emitters over a grid of plans (library level): every output parses in its own language.

namespace {
struct EmitSetup {
  ptest::Setup s{"llama3-8b", "dgx-h100", 16};
  Plan resolve(Plan p, std::int64_t global_batch = 32) const {
    return resolve_plan(p, s.model, *s.cluster, global_batch);
  }
};

std::vector<Plan> emit_grid(const EmitSetup& e) {
  std::vector<Plan> out;
  for (int zero : {0, 2, 3})
    for (int tp : {1, 2})
      for (AcMode ac : {AcMode::kNone, AcMode::kSelective, AcMode::kFull})
        for (Precision pr : {Precision::kBf16Mixed, Precision::kBf16, Precision::kFp32}) {
          Plan p;
          p.runtime = Runtime::kFsdp2;
          p.zero = zero;
          p.tp = tp;
          p.ac = ac;
          p.precision = pr;
          p.prefetch = ac == AcMode::kNone ? 2 : 1;
          p.wrap = ac == AcMode::kFull ? 2 : 1;
          p.seq = 4096;
          if (zero == 3 && tp == 1 && ac == AcMode::kSelective) p.shard_group = 8;  // HSDP: 2 replicas of 8
          out.push_back(e.resolve(p));
        }
  return out;
}
}  // namespace

TEST_CASE("emitters: fsdp2 / torchtitan / deepspeed output parses for a grid of plans", "[emit][python]") {
  EmitSetup e;
  auto dir = ptest::temp_dir("emit-grid");
  const auto plans = emit_grid(e);
  REQUIRE(plans.size() == 54);
  std::string py_files, toml_files, titan_files;
  for (std::size_t i = 0; i < plans.size(); ++i) {
    const Plan& p = plans[i];
    INFO("plan " << i << ": zero " << p.zero << " tp " << p.tp << " sg " << p.shard_group);
    const fs::path py = dir / ("p" + std::to_string(i) + ".py"),
                   toml = dir / ("t" + std::to_string(i) + ".toml"),
                   titan = dir / ("c" + std::to_string(i) + ".py");
    ptest::write_text(py, emit("fsdp2", p, e.s.model, 16, 8));
    ptest::write_text(toml, emit("torchtitan-toml", p, e.s.model, 16, 8));
    ptest::write_text(titan, emit("torchtitan", p, e.s.model, 16, 8));
    py_files += " " + quote(py.string()) + " " + quote(titan.string());
    toml_files += " " + quote(toml.string());
    if (p.replicas == 1) {
      Json ds = Json::parse(emit("deepspeed", p, e.s.model, 16, 8));
      CHECK(ds["zero_optimization"]["stage"].get<int>() == p.zero);
      CHECK(ds["train_batch_size"].get<int>() == 32);
      CHECK(ds["train_micro_batch_size_per_gpu"].get<int>() == p.mbs);
      CHECK(ds["gradient_accumulation_steps"].get<int>() == p.grad_accum);
      CHECK(ds.contains("bf16") == (p.precision != Precision::kFp32));
      // 32 = mbs x accum x (16 / tp): the data-parallel world excludes TP, which AutoTP carries.
      CHECK(p.mbs * p.grad_accum * (16 / p.tp) == 32);
      CHECK(ds.contains("tensor_parallel") == (p.tp > 1));
      if (p.tp > 1) CHECK(ds["tensor_parallel"]["autotp_size"].get<int>() == p.tp);
    } else {
      // An HSDP plan of the FSDP runtimes has no DeepSpeed equivalent.
      CHECK_THROWS_AS(emit("deepspeed", p, e.s.model, 16, 8), InputError);
    }
  }
  if (!ptest::have_python3())
    SHARDPLAN_MISSING_TOOL("python3 not found: the Python/TOML checks of the grid cannot run");
  const fs::path log = dir / "py.txt";
  int rc = ptest::run_shell("python3 -m py_compile" + py_files + " >" + quote(log.string()) + " 2>&1");
  INFO(ptest::read_text(log));
  CHECK(rc == 0);
  if (!ptest::have_tomllib())
    SHARDPLAN_MISSING_TOOL("tomllib (python >= 3.11) not found: the TOML checks of the grid cannot run");
  rc = ptest::run_shell(
      "python3 -c \"import tomllib,sys\nfor f in sys.argv[1:]: tomllib.load(open(f,'rb'))\"" + toml_files +
      " >" + quote(log.string()) + " 2>&1");
  INFO(ptest::read_text(log));
  CHECK(rc == 0);
}

TEST_CASE("emitters: a ZeRO-0 (plain data parallel) plan is emitted as DDP / replicate / not as FSDP",
          "[emit]") {
  // ZeRO-0 shards nothing: every one of the 16 ranks holds full parameters, gradients and optimizer state. In
  // torchtitan that is data_parallel_replicate_degree = 16 with data_parallel_shard_degree = 1; in FSDP2 it
  // is replicate() (or fully_shard over a mesh of size 1). Emitting shard degree 16 with reshard "never"
  // describes FSDP SHARD_GRAD_OP (ZeRO-2) instead, whose memory the simulator did not predict for this plan.
  EmitSetup e;
  Plan p;
  p.zero = 0;
  p.seq = 4096;
  p = e.resolve(p);
  REQUIRE(p.dp == 16);
  const std::string toml = emit_torchtitan_toml(p, e.s.model, 16);
  INFO(toml);
  CHECK(toml.find("data_parallel_replicate_degree = 16") != std::string::npos);
  CHECK(toml.find("data_parallel_shard_degree = 1\n") != std::string::npos);
  const std::string titan = emit_torchtitan(p, e.s.model, 16);
  INFO(titan);
  CHECK(titan.find("data_parallel_replicate_degree=16,\n") != std::string::npos);
  CHECK(titan.find("data_parallel_shard_degree=1,\n") != std::string::npos);
  const std::string py = emit_fsdp2(p, e.s.model, 8);
  INFO(py);
  // ZeRO-0: the script runs fully_shard over a (replicate 16, shard 1) mesh (PLAN zero 0), as torchtitan
  // does.
  CHECK(py.find("PLAN = dict(zero=0, reshard=False, replicas=1, shard_group=16, tp=1,") != std::string::npos);
}

TEST_CASE("emitters: an fsdp2 snippet for a tp > 1 plan applies tensor parallelism", "[emit]") {
  // The snippet builds a ('dp_shard', 'tp') mesh but only ever passes mesh['dp_shard'] to fully_shard;
  // nothing shards the linear layers over mesh['tp'] (parallelize_module / ColwiseParallel /
  // RowwiseParallel), so a user would train tp-way replicated blocks instead of the simulated plan.
  EmitSetup e;
  Plan p;
  p.tp = 2;
  p.seq = 4096;
  p = e.resolve(p);
  const std::string py = emit_fsdp2(p, e.s.model, 8);
  INFO(py);
  // 16 GPUs / tp 2 = 8 data-parallel ranks sharding; the script's apply_tp runs for PLAN tp > 1.
  CHECK(py.find("replicas=1, shard_group=8, tp=2,") != std::string::npos);
}

TEST_CASE("emitters: the fsdp2 script carries the simulated units", "[emit]") {
  // SIM_UNITS: build_units' partition (the embedding, one unit per block at --wrap 1, the head) with each
  // unit's TP-local parameter elements split by TP dim; tests/emit compares the units the script builds with
  // them.
  EmitSetup e;
  Plan p;
  p.tp = 2;
  p.wrap = 1;
  p.seq = 4096;
  p = e.resolve(p);
  const std::vector<EmitUnit> units = simulated_units(p, e.s.model, *e.s.cluster, *e.s.costs);
  REQUIRE(units.size() == 32 + 2);
  CHECK(units.front().name == "embedding");
  CHECK(units[1].name == "blocks.0");
  CHECK(units.back().name == "head");
  std::int64_t global = 0;
  for (const EmitUnit& u : units) {
    CHECK(u.elems == u.tp_dim0 + u.tp_dim1 + u.tp_replicated);
    global += (u.tp_dim0 + u.tp_dim1) * p.tp + u.tp_replicated;
  }
  CHECK(global == e.s.model.parameters());
  const std::string py = emit_fsdp2(p, e.s.model, 8, {}, units);
  INFO(py);
  CHECK(py.find("SIM_UNITS = [\n    dict(name=\"embedding\", blocks=0, elems=") != std::string::npos);
  CHECK(py.find("TITAN_FLAVOR = (\"llama3\", \"8B\")\n") != std::string::npos);
  // A library call without the units writes None (the CLI always passes them).
  CHECK(emit_fsdp2(p, e.s.model, 8).find("SIM_UNITS = None\n") != std::string::npos);
}

TEST_CASE("CLI: the printed 'recommended: shardplan simulate ...' line reproduces an offload plan", "[cli]") {
  // With --fix offload=optimizer every candidate offloads the optimizer; the printed command must carry
  // --offload optimizer or it simulates a different plan (different memory and step time).
  auto dir = ptest::temp_dir("offload");
  const int rc = ptest::run_cli(
      "plan --model llama3-8b --cluster dgx-h100 --gpus 16 --global-batch 32 --seq 4096 --top 2 --threads 2"
      " --fix offload=optimizer --json " +
          quote((dir / "plan.json").string()),
      dir / "out.txt", dir / "err.txt");
  INFO(ptest::read_text(dir / "err.txt"));
  REQUIRE(rc == 0);
  Json j = load_json_file((dir / "plan.json").string());
  REQUIRE(j["recommended"]["plan"]["offload"] == "optimizer");
  std::istringstream out(ptest::read_text(dir / "out.txt"));
  std::string line, cmd;
  const std::string prefix = "recommended: shardplan ";
  while (std::getline(out, line))
    if (line.rfind(prefix, 0) == 0) cmd = line.substr(prefix.size());
  REQUIRE_FALSE(cmd.empty());
  INFO(cmd);
  CHECK(cmd.find("--offload optimizer") != std::string::npos);
  REQUIRE(ptest::run_cli(cmd + " --json -", dir / "sim.json", dir / "sim_err.txt") == 0);
  Json sim = load_json_file((dir / "sim.json").string());
  CHECK(sim["plan"]["offload"] == "optimizer");
  CHECK(sim["time"]["step_s"].get<double>() == j["recommended"]["time"]["step_s"].get<double>());
}

TEST_CASE("emitters: float8 plans convert the blocks' linears (torchao) and say so in the torchtitan config",
          "[emit][fp8][python]") {
  EmitSetup e;
  auto dir = ptest::temp_dir("emit-fp8");
  Plan tw;
  tw.tp = 2;
  tw.seq = 4096;
  tw.fp8 = Fp8::kTensorwise;
  tw.fp8_all_gather = true;
  tw = e.resolve(tw);
  const std::string py = emit_fsdp2(tw, e.s.model, 8);
  INFO(py);
  // tensorwise with float8 all-gather: the script converts the blocks' linears and uses the Float8 TP styles.
  CHECK(py.find("fp8=\"tensorwise\", fp8_all_gather=True,") != std::string::npos);
  const std::string toml = emit_torchtitan_toml(tw, e.s.model, 16);
  INFO(toml);
  CHECK(toml.find("converters = [\"float8\"]") != std::string::npos);
  CHECK(toml.find("enable_fsdp_float8_all_gather = true") != std::string::npos);
  CHECK(toml.find("recipe_name") == std::string::npos);

  Plan rw = tw;
  rw.fp8 = Fp8::kRowwise;
  rw.fp8_all_gather = false;
  rw = e.resolve(rw);
  const std::string py_rw = emit_fsdp2(rw, e.s.model, 8);
  CHECK(py_rw.find("fp8=\"rowwise\", fp8_all_gather=False,") != std::string::npos);  // 16-bit TP plan
  CHECK(emit_torchtitan_toml(rw, e.s.model, 16).find("recipe_name = \"rowwise\"") != std::string::npos);
  // torchtitan 0.3.0: a Float8LinearConverter on the model with the recipe; its lm_head stays 16-bit (the
  // simulator converts the blocks' linears). It has no float8 all-gather field: the note says so.
  const std::string titan_tw = emit_torchtitan(tw, e.s.model, 16),
                    titan_rw = emit_torchtitan(rw, e.s.model, 16);
  CHECK(titan_tw.find("recipe_name=\"tensorwise\",\n                filter_fqns=[\"lm_head\"],") !=
        std::string::npos);
  CHECK(titan_rw.find("recipe_name=\"rowwise\",") != std::string::npos);
  const auto notes = emit_notes("torchtitan", tw);
  CHECK(std::count_if(notes.begin(), notes.end(), [](const std::string& n) {
          return n.rfind("--fp8-all-gather: torchtitan 0.3.0 has no float8 all-gather field", 0) == 0;
        }) == 1);
  CHECK(emit_notes("torchtitan", rw).size() == notes.size() - 2);  // neither all-gather nor tensorwise
  if (!ptest::have_python3())
    SHARDPLAN_MISSING_TOOL("python3 not found: the float8 scripts' py_compile check cannot run");
  ptest::write_text(dir / "tw.py", py);
  ptest::write_text(dir / "rw.py", py_rw);
  CHECK(ptest::run_shell("python3 -m py_compile " + quote((dir / "tw.py").string()) + " " +
                         quote((dir / "rw.py").string())) == 0);
  if (!ptest::have_tomllib())
    SHARDPLAN_MISSING_TOOL("tomllib (python >= 3.11) not found: the float8 TOML check cannot run");
  ptest::write_text(dir / "tw.toml", toml);
  CHECK(ptest::run_shell("python3 -c \"import tomllib,sys; d=tomllib.load(open(sys.argv[1],'rb')); "
                         "assert d['float8']['enable_fsdp_float8_all_gather'] is True\" " +
                         quote((dir / "tw.toml").string())) == 0);
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

TEST_CASE("emitters: pipeline-parallel plans in torchtitan, DeepSpeed and the FSDP2 script", "[emit]") {
  EmitSetup e;
  Plan p;
  p.runtime = Runtime::kFsdp2;
  p.pp = 4;
  p.pp_schedule = PpSchedule::kInterleaved1F1B;
  p.pp_layers = {3, 4, 4, 4, 4, 4, 4, 5};
  p.ac = AcMode::kFull;
  p = e.resolve(p);
  // 16 GPUs / pp 4 = 4 data-parallel ranks; global batch 32 at mbs 1 = 8 micro-batches per step.
  REQUIRE(p.grad_accum * p.mbs == 8);
  const std::string py = emit("torchtitan", p, e.s.model, 16, 8);
  CHECK(py.find("pipeline_parallel_degree=4,\n") != std::string::npos);
  CHECK(py.find("pipeline_parallel_schedule=\"Interleaved1F1B\",\n") != std::string::npos);
  CHECK(py.find(fmt::format("pipeline_parallel_microbatch_size={},\n", p.mbs)) != std::string::npos);
  CHECK(py.find("local_batch_size=8,\n") != std::string::npos);
  // 8 model parts: the first holds the embedding and 3 blocks, the last 5 blocks and the head.
  CHECK(py.find("module_fqns_per_model_part=[[\"tok_embeddings\", \"layers.0\", \"layers.1\", \"layers.2\"], "
                "[\"layers.3\",") != std::string::npos);
  CHECK(py.find("\"layers.31\", \"norm\", \"lm_head\"]],\n") != std::string::npos);
  // The FSDP2 script has no pipeline schedule: one clear refusal.
  try {
    emit("fsdp2", p, e.s.model, 16, 8);
    FAIL("fsdp2 emitted a pipeline-parallel plan");
  } catch (const InputError& err) {
    CHECK(std::string(err.what()).find("fsdp2 cannot express pipeline parallelism (pp 4)") !=
          std::string::npos);
  }
  // DeepSpeed's pipeline degree lives in the model code (PipelineModule num_stages): a note.
  bool noted = false;
  for (const std::string& n : emit_notes("deepspeed", p))
    noted = noted || n.find("deepspeed.pipe.PipelineModule(layers=..., num_stages=4)") != std::string::npos;
  CHECK(noted);
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

TEST_CASE("CLI: plan --fix runtime=megatron searches megatron plans; --emit refuses them in one line",
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
