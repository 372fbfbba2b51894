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
