// The evidence behind a prediction: the OOM probability (kernel-smoothed reserved-memory error, the plan's
// regime weighted in), `plan --risk`, the warnings where a prediction leaves the measured rows, and the
// committed planner/evidence.json against the records.
#include <catch2/catch.hpp>
#include <cmath>

#include "core/json_reader.hpp"
#include "plan_helpers.hpp"
#include "planner/report/evidence.hpp"
#include "planner/report/margin.hpp"
#include "planner/validate.hpp"

using namespace shardplan;
namespace fs = std::filesystem;
using ptest::quote;

namespace {

// Hand-made evidence: `errors` for fsdp2 / no TP / eager / default segments, `other` for fsdp1.
Evidence synthetic(const std::vector<double>& errors, const std::vector<double>& other = {}) {
  Evidence e;
  int i = 0;
  for (double x : errors)
    e.reserved.push_back({"r" + std::to_string(i++), x, "fsdp2", false, false, "default"});
  for (double x : other)
    e.reserved.push_back({"o" + std::to_string(i++), x, "fsdp1", false, false, "default"});
  return e;
}

std::string warnings_of(const std::vector<std::string>& w) {
  std::string s;
  for (const auto& x : w) s += x + "\n";
  return s;
}

}  // namespace

TEST_CASE("OOM probability: the CDF of the error at predicted / room - 1", "[evidence][oom]") {
  // Symmetric errors around 0: a plan predicted exactly at the room runs out iff the error is negative: 1/2.
  const Evidence e = synthetic({-0.02, -0.01, 0.0, 0.01, 0.02});
  const OomModel m = oom_model(e, Plan{});
  REQUIRE(m.runs == 5);
  REQUIRE(m.regime_runs == 5);
  CHECK(oom_probability(m, 100, 100) == Approx(0.5).margin(1e-9));
  // More headroom, less risk; monotone in the predicted use.
  double last = 1;
  for (double used = 100; used >= 80; used -= 2) {
    const double p = oom_probability(m, used, 100);
    CHECK(p <= last);
    last = p;
  }
  // 10 % under the room with errors within +-2 %: the kernel's tail only.
  CHECK(oom_probability(m, 90, 100) < 1e-6);
  // Over the room by 10 %: certain.
  CHECK(oom_probability(m, 110, 100) > 1 - 1e-6);
  // The quantile inverts the CDF.
  for (double p : {0.05, 0.25, 0.5, 0.9})
    CHECK(oom_probability(m, 1 + oom_error_quantile(m, p), 1) == Approx(p).margin(1e-6));
}

TEST_CASE("OOM probability: the regime's runs weigh k / (k + 5), the pooled runs 5 / (k + 5)",
          "[evidence][oom]") {
  // 5 fsdp2 runs at 0, 2 fsdp1 runs at -10 %. An fsdp1 plan predicted 5 % under the room runs out with the
  // fsdp1 runs' share: their weight 1/(2+5) each plus the pooled 5/7 x 2/7 -> 2/7 + 10/49 = 24/49.
  const Evidence e = synthetic({0, 0, 0, 0, 0}, {-0.10, -0.10});
  Plan fsdp1;
  fsdp1.runtime = Runtime::kFsdp1;
  const OomModel m1 = oom_model(e, fsdp1);
  CHECK(m1.regime_runs == 2);
  const double p1 = oom_probability(m1, 95, 100);
  CHECK(p1 == Approx(24.0 / 49).margin(0.02));
  // The fsdp2 plan: its 5 runs weigh 1/2, pooled 1/2 x 5/7: the two fsdp1 runs carry 1/2 x 2/7 = 1/7.
  const OomModel m2 = oom_model(e, Plan{});
  CHECK(oom_probability(m2, 95, 100) == Approx(1.0 / 7).margin(0.02));
  // A regime without runs is the pooled distribution (2 of 7 runs at -10 %).
  Plan ds;
  ds.runtime = Runtime::kDeepSpeed;
  CHECK(oom_model(e, ds).regime_runs == 0);
  CHECK(oom_probability(oom_model(e, ds), 95, 100) == Approx(2.0 / 7).margin(0.02));
  // Leave one out drops that run.
  CHECK(oom_model(e, fsdp1, "o5").runs == 6);
}

TEST_CASE("risk_headroom: at that headroom every regime's OOM probability is at most P", "[evidence][oom]") {
  const Evidence e = synthetic({-0.03, -0.01, 0.0, 0.01, 0.05}, {-0.06, -0.02});
  for (double p : {0.01, 0.05, 0.2}) {
    const double h = risk_headroom(p, e);
    CHECK(h > 0);
    // A plan using exactly (1 - h) of the room, in the worst regime (fsdp1 here), is at probability <= p.
    Plan fsdp1;
    fsdp1.runtime = Runtime::kFsdp1;
    CHECK(oom_probability(oom_model(e, fsdp1), 1 - h, 1) <= p + 1e-9);
    CHECK(oom_probability(oom_model(e, fsdp1), 1 - h, 1) == Approx(p).margin(1e-6));
  }
}

TEST_CASE("the built-in evidence: 33 reserved-memory runs, the coverage and the reference lane",
          "[evidence]") {
  const Evidence& e = builtin_evidence();
  CHECK(static_cast<int>(e.reserved.size()) == kReservedMemoryError.runs);
  CHECK(e.reference_records > 100);
  REQUIRE(e.arch("ampere"));
  CHECK(e.arch("ampere")->best_mfu > 0.5);
  CHECK(e.arch("ampere")->best_mfu < 0.65);
}

TEST_CASE("warnings: none where the evidence is, one per way a prediction leaves it",
          "[evidence][warnings]") {
  fixture::Setup h100("llama3-8b", "dgx-h100", 8);
  Plan p;
  p.mbs = 1;
  p.seq = 8192;
  p.ac = AcMode::kSelective;
  const Result r = h100.run(p);
  // Llama 3 8B, FSDP2 ZeRO-3, selective AC, bf16-mixed on H100: measured rows on every count.
  CHECK(evidence_warnings(r, h100.model.spec(), h100.cluster->spec()).empty());

  // A100 with torch.compile: no measured A100 compile row, and the predicted MFU above the best A100 run.
  fixture::Setup a100("llama3-8b", "dgx-a100-80g", 8);
  Plan c = p;
  c.compile = true;
  c.ac = AcMode::kNone;
  c.grad_accum = 8;
  const Result rc = a100.run(c);
  const std::string wc = warnings_of(evidence_warnings(rc, a100.model.spec(), a100.cluster->spec()));
  INFO(wc);
  CHECK(wc.find("no measured run on ampere GPUs with torch.compile") != std::string::npos);
  if (rc.mfu > builtin_evidence().arch("ampere")->best_mfu)
    CHECK(wc.find("above the best measured on ampere") != std::string::npos);

  // B200: every measured throughput row is out of scope (power-limited GPUs), which the warning quotes.
  fixture::Setup b200("llama3-8b", "dgx-b200", 8);
  const Result rb = b200.run(p);
  const std::string wb = warnings_of(evidence_warnings(rb, b200.model.spec(), b200.cluster->spec()));
  INFO(wb);
  CHECK(wb.find("no measured run on blackwell GPUs") != std::string::npos);
  CHECK(wb.find("power limited") != std::string::npos);

  // V100 (DGX-1, hybrid cube-mesh, no NVSwitch), fp16-mixed: no Volta run; a TP group of 4 of the node's 8
  // GPUs is modelled at the full NVLink bandwidth (optimistic); TP 1 over 16 GPUs (data-parallel groups of 8
  // per node) has no such group.
  fixture::Setup v100("llama3-8b", "dgx-v100-32g", 16);
  Plan v = p;
  v.precision = Precision::kFp16Mixed;
  v.seq = 2048;
  v.ac = AcMode::kFull;
  const std::string wv = warnings_of(evidence_warnings(v100.run(v), v100.model.spec(), v100.cluster->spec()));
  INFO(wv);
  CHECK(wv.find("no measured run on volta GPUs (V100-SXM2-32GB)") != std::string::npos);
  CHECK(wv.find("links without a switch") == std::string::npos);
  v.tp = 4;
  const std::string wt = warnings_of(evidence_warnings(v100.run(v), v100.model.spec(), v100.cluster->spec()));
  INFO(wt);
  CHECK(wt.find("the tensor-parallel group takes 4 of a node's 8 GPUs, which dgx-v100-32g links without a "
                "switch (NVLink mesh)") != std::string::npos);

  // Qwen3's qk-norm: no reference-lane model has it.
  fixture::Setup q("qwen3-8b", "dgx-h100", 8);
  Plan qp = p;
  qp.seq = 4096;
  const Result rq = q.run(qp);
  const std::string wq = warnings_of(evidence_warnings(rq, q.model.spec(), q.cluster->spec()));
  CHECK(wq.find("never run a model with qk-norm") != std::string::npos);
}

TEST_CASE("CLI: JSON warnings and memory.margin.oom_probability, plan --risk", "[evidence][cli]") {
  auto dir = ptest::temp_dir("evidence-cli");
  REQUIRE(ptest::run_cli(
              "simulate --model llama3-8b --cluster dgx-a100-80g --gpus 8 --mbs 1 --seq 8192 --compile "
              "--json " +
              quote((dir / "a100.json").string())) == 0);
  const Json j = load_json_file((dir / "a100.json").string());
  REQUIRE(j.contains("warnings"));
  CHECK(j["warnings"].size() >= 1);
  const double p = j["memory"]["margin"]["oom_probability"].get<double>();
  CHECK(p >= 0);
  CHECK(p <= 1);
  CHECK(j["memory"]["margin"]["oom_model"]["runs"] == kReservedMemoryError.runs);

  // --risk 0.01: the recommended plan's OOM probability is at most 1 %, and the headroom is the rule's.
  REQUIRE(ptest::run_cli(
              "plan --model llama3-8b --gpus 8 --global-batch 32 --seq 8192 --top 3 --risk 0.01 --json " +
              quote((dir / "plan.json").string())) == 0);
  const Json pj = load_json_file((dir / "plan.json").string());
  CHECK(pj["recommended"]["memory"]["margin"]["oom_probability"].get<double>() <= 0.01);
  CHECK(pj["headroom"].get<double>() == Approx(risk_headroom(0.01)).margin(1e-9));
  CHECK(pj["risk"].get<double>() == 0.01);
  // --risk and --headroom together, or a probability outside (0, 1): bad input.
  CHECK(ptest::run_cli("plan --model llama3-8b --gpus 8 --global-batch 32 --risk 0.01 --headroom 0.1") == 2);
  CHECK(ptest::run_cli("plan --model llama3-8b --gpus 8 --global-batch 32 --risk 1.5") == 2);
}

TEST_CASE("the OOM probability's leave-one-out calibration on the committed records",
          "[evidence][oom][validate]") {
  // docs/accuracy.md's table: per bin of predicted probability, the share of (run, level) cases whose
  // measured reserved memory went over the memory at that probability. Calibrated within 15 points in every
  // bin (33 runs, 66 cases a bin: one run moves a bin by 1.5 points).
  ValidationReport v = validate_files({std::string(SHARDPLAN_TEST_DATA) + "/runs/published_dev.json"});
  const Evidence e = evidence_from(v, nullptr);
  const OomCalibration c = oom_calibration(v, e);
  REQUIRE(c.levels.size() == 10);
  for (const auto& b : c.levels) {
    INFO(b.lo << "-" << b.hi << ": " << b.oom << " of " << b.cases);
    REQUIRE(b.cases == 2 * kReservedMemoryError.runs);
    CHECK(std::abs(static_cast<double>(b.oom) / b.cases - b.mean_p) < 0.15);
  }
}

TEST_CASE("warnings: Ada and AMD Instinct clusters have no measured run, AMD's collectives are NCCL's model",
          "[evidence][warnings]") {
  Plan p;
  p.mbs = 1;
  p.seq = 4096;
  p.ac = AcMode::kFull;
  fixture::Setup l40s("llama3-8b", "l40s-pcie", 8);
  const std::string wl = warnings_of(evidence_warnings(l40s.run(p), l40s.model.spec(), l40s.cluster->spec()));
  INFO(wl);
  CHECK(wl.find("no measured run on ada GPUs (L40S-48GB)") != std::string::npos);
  CHECK(wl.find("RCCL") == std::string::npos);
  // No NVLink: one PCIe warning (32 GB/s: PCIe Gen4 x16 per direction, the preset's pcie_Bps), never the
  // switchless-mesh one, whatever the TP group.
  CHECK(wl.find("l40s-pcie has no NVLink: collectives run over PCIe (32 GB/s") != std::string::npos);
  Plan t = p;
  t.tp = 2;
  const std::string wlt =
      warnings_of(evidence_warnings(l40s.run(t), l40s.model.spec(), l40s.cluster->spec()));
  INFO(wlt);
  CHECK(wlt.find("links without a switch") == std::string::npos);
  fixture::Setup mi("llama3-8b", "mi300x-8", 8);
  const std::string wm = warnings_of(evidence_warnings(mi.run(p), mi.model.spec(), mi.cluster->spec()));
  INFO(wm);
  CHECK(wm.find("no measured run on cdna3 GPUs (MI300X-192GB)") != std::string::npos);
  CHECK(wm.find("MI300X-192GB GPUs communicate through RCCL") != std::string::npos);
  CHECK(wm.find("has no NVLink") == std::string::npos);
  // The fully connected Infinity Fabric mesh: a TP group of 2 uses one of a GPU's 7 links.
  const std::string wmt = warnings_of(evidence_warnings(mi.run(t), mi.model.spec(), mi.cluster->spec()));
  INFO(wmt);
  CHECK(
      wmt.find("takes 2 of a node's 8 GPUs, which mi300x-8 links without a switch (Infinity Fabric mesh)") !=
      std::string::npos);
}
