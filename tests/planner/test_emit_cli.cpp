// The `shardplan plan` CLI: nothing-fits exit status, framework configs (--emit) checked by their own parsers,
// the JSON result's shape, and the recommended plan fed back into `shardplan simulate`.
#include <catch2/catch.hpp>

#include "plan_helpers.hpp"
#include "planner/emit.hpp"
#include "simulator/core/json_reader.hpp"

using namespace shardplan;
namespace fs = std::filesystem;
using ptest::quote;

TEST_CASE("CLI: plan exits 1 when nothing fits (llama3.1-405b on 8 H100s)", "[cli][nofit]") {
  auto dir = ptest::temp_dir("nofit");
  const int rc = ptest::run_cli("plan --model llama3.1-405b --cluster dgx-h100 --gpus 8 --global-batch 8 --threads 2 --json " +
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
  CHECK(parse_emit_spec("deepspeed:/tmp/x:y.json") == std::pair<std::string, std::string>{"deepspeed", "/tmp/x:y.json"});
  CHECK(parse_emit_spec("torchtitan:t.toml").first == "torchtitan");
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
    rc = ptest::run_cli("plan --model llama3-8b --cluster dgx-h100 --gpus 16 --global-batch 32 --seq 4096 --threads 4"
                        " --emit " + quote("deepspeed:" + (dir / "ds.json").string()) +
                            " --emit " + quote("fsdp2:" + (dir / "fsdp2_plan.py").string()) +
                            " --emit " + quote("torchtitan:" + (dir / "titan.toml").string()) +
                            " --json " + quote((dir / "plan.json").string()),
                        dir / "out.txt", dir / "err.txt");
    if (rc == 0) j = load_json_file((dir / "plan.json").string());
  }
};
const PlanRun& plan_run() {
  static PlanRun r;
  return r;
}

}  // namespace

TEST_CASE("CLI: plan --json has plans; recommended; search stats and rejections", "[cli][emit]") {
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
  // Plans are listed best first: tokens/s non-increasing.
  for (std::size_t i = 1; i < j["plans"].size(); ++i)
    CHECK(j["plans"][i - 1]["time"]["tokens_per_s_per_gpu"].get<double>() >= j["plans"][i]["time"]["tokens_per_s_per_gpu"].get<double>() * (1 - 1e-9));
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
  if (!ptest::have_python3()) {
    WARN("python3 not found: skipping the py_compile check");
    return;
  }
  const fs::path log = r.dir / "pycompile.txt";
  const int rc = ptest::run_shell("python3 -m py_compile " + quote((r.dir / "fsdp2_plan.py").string()) + " >" +
                                  quote(log.string()) + " 2>&1");
  INFO(ptest::read_text(log));
  INFO(ptest::read_text(r.dir / "fsdp2_plan.py"));
  CHECK(rc == 0);
  const std::string py = ptest::read_text(r.dir / "fsdp2_plan.py");
  const Json& plan = r.j["recommended"]["plan"];
  CHECK(py.find("MICRO_BATCH = " + std::to_string(plan["mbs"].get<int>())) != std::string::npos);
  CHECK(py.find("GRAD_ACCUM = " + std::to_string(plan["grad_accum"].get<int>())) != std::string::npos);
  CHECK(py.find("SEQ_LEN = 4096") != std::string::npos);
}

TEST_CASE("CLI: --emit torchtitan writes TOML that parses", "[cli][emit][python]") {
  const auto& r = plan_run();
  INFO(ptest::read_text(r.dir / "err.txt"));
  REQUIRE(r.rc == 0);
  REQUIRE(fs::exists(r.dir / "titan.toml"));
  if (!ptest::have_python3() || !ptest::have_tomllib()) {
    WARN("python3 with tomllib (>= 3.11) not found: skipping the TOML parse check");
    return;
  }
  const fs::path log = r.dir / "toml.txt";
  const fs::path dump = r.dir / "toml.json";
  const int rc = ptest::run_shell(
      "python3 -c \"import tomllib,sys,json; json.dump(tomllib.load(open(sys.argv[1],'rb')), open(sys.argv[2],'w'))\" " +
      quote((r.dir / "titan.toml").string()) + " " + quote(dump.string()) + " >" + quote(log.string()) + " 2>&1");
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

TEST_CASE("CLI: the recommended plan fed back to simulate reproduces step_s exactly", "[cli][emit]") {
  const auto& r = plan_run();
  INFO(ptest::read_text(r.dir / "err.txt"));
  REQUIRE(r.rc == 0);
  const Json& rec = r.j["recommended"];
  const Json& p = rec["plan"];
  auto s = [&](const char* k) { return p[k].is_string() ? p[k].get<std::string>() : p[k].dump(); };
  const std::string args = "simulate --model llama3-8b --cluster dgx-h100 --gpus 16 --runtime " + s("runtime") + " --zero " + s("zero") +
                           " --shard-group " + s("shard_group") + " --tp " + s("tp") + " --seq " + s("seq") + " --mbs " + s("mbs") +
                           " --grad-accum " + s("grad_accum") + " --ac " + s("ac") + " --wrap " + s("wrap") + " --prefetch " +
                           s("prefetch") + " --precision " + s("precision") + " --reduce-dtype " + s("reduce_dtype") + " --json -";
  INFO(args);
  const int rc = ptest::run_cli(args, r.dir / "sim.json", r.dir / "sim_err.txt");
  INFO(ptest::read_text(r.dir / "sim_err.txt"));
  REQUIRE(rc == 0);
  Json sim = load_json_file((r.dir / "sim.json").string());
  CHECK(sim["time"]["step_s"].get<double>() == rec["time"]["step_s"].get<double>());  // bitwise
  CHECK(sim["time"]["tokens_per_s_per_gpu"].get<double>() == rec["time"]["tokens_per_s_per_gpu"].get<double>());
}
