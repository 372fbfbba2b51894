// Validation: run records compared and skipped, the summary statistics, the CLI's --max-error exit status,
// torchtitan logs as measurements, and the docs/accuracy.md reproduction.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <set>

#include "core/json_reader.hpp"
#include "plan_helpers.hpp"
#include "planner/report/margin.hpp"
#include "planner/validate.hpp"

using namespace shardplan;
namespace fs = std::filesystem;
using ptest::quote;

namespace {

const std::string kDev = std::string(SHARDPLAN_TEST_DATA) + "/runs/published_dev.json";

Json dev_record(const std::string& id) {
  Json j = load_json_file(kDev);
  for (const auto& r : j["records"])
    if (r["id"] == id) return r;
  FAIL("record " << id << " not in published_dev.json");
  return {};
}

// Three records from the development set:
//  - a memory record (BELLE issue 402, bloom-560m ZeRO-1 on 2 TITAN RTX): measured peak_device_bytes only;
//  - a throughput record (MosaicML mpt-1b on 8 H100s): measured mfu, step_s, tokens_per_s_per_gpu;
//  - gpt2-xl (25 attention heads) with tp 2 patched in: tp does not divide the heads -> not expressible.
fs::path write_three_records(const fs::path& dir) {
  Json mem = dev_record("belle-issue402-bloom560m-zero1-s512-g2");
  Json thr = dev_record("mosaic-h100-bf16-mpt1b-s2048-g8-mbs14-ga1-amp_bf16-ac0");
  Json bad = dev_record("cai-lightning-gpt2xl-g4-ddp");
  bad["id"] = "gpt2xl-tp2-inexpressible";
  bad["plan"]["tp"] = 2;
  Json runs = {{"schema", "shardplan.runs/1"}, {"records", Json::array({mem, thr, bad})}};
  const fs::path f = dir / "runs.json";
  ptest::write_text(f, runs.dump(1));
  return f;
}

}  // namespace

TEST_CASE("validate_files: 3 records -> 2 compared / 1 skipped with a reason", "[validate]") {
  auto dir = ptest::temp_dir("validate3");
  const fs::path f = write_three_records(dir);
  ValidationReport v = validate_files({f.string()});
  std::set<std::string> ids;
  for (const auto& r : v.rows) ids.insert(r.id);
  CHECK(ids == std::set<std::string>{"belle-issue402-bloom560m-zero1-s512-g2",
                                     "mosaic-h100-bf16-mpt1b-s2048-g8-mbs14-ga1-amp_bf16-ac0"});
  // Rows: 1 memory term + 3 throughput terms.
  CHECK(v.rows.size() == 4);
  REQUIRE(v.skipped.size() == 1);
  CHECK(v.skipped[0].id == "gpt2xl-tp2-inexpressible");
  CHECK(v.skipped[0].reason.find("not expressible") != std::string::npos);
  CHECK(v.skipped[0].reason.find("attention heads") != std::string::npos);
  for (const auto& r : v.rows) {
    INFO(r.id << " " << r.term);
    CHECK(r.predicted > 0);
    CHECK(r.measured > 0);
    if (r.id.rfind("belle", 0) == 0) {
      CHECK(r.term == "peak_device_bytes");
      CHECK(r.measured == 13529146982.0);
    }
  }
}

TEST_CASE("ValidationReport::summary: median / MAPE / worst per term (hand-made rows)",
          "[validate][summary]") {
  ValidationReport v;
  // step_s: errors +0.1, -0.2, +0.5, 0 -> |e| sorted 0, 0.1, 0.2, 0.5: even count, median = (0.1 + 0.2) / 2 =
  // 0.15, MAPE = 0.8 / 4 = 0.2, worst 0.5.
  v.rows.push_back({"a", "s1", "step_s", 1.1, 1.0, ""});
  v.rows.push_back({"b", "s1", "step_s", 0.8, 1.0, ""});
  v.rows.push_back({"c", "s2", "step_s", 3.0, 2.0, ""});
  v.rows.push_back({"d", "s2", "step_s", 2.0, 2.0, ""});
  // mfu: errors -0.3, +0.1, -0.2 -> sorted 0.1, 0.2, 0.3: odd count, median 0.2, MAPE 0.6 / 3 = 0.2, worst
  // 0.3.
  v.rows.push_back({"a", "s1", "mfu", 0.28, 0.4, ""});
  v.rows.push_back({"b", "s1", "mfu", 0.44, 0.4, ""});
  v.rows.push_back({"c", "s2", "mfu", 0.4, 0.5, ""});
  // peak_reserved_bytes: one row, error (90 - 100) / 100 = -0.1.
  v.rows.push_back({"a", "s1", "peak_reserved_bytes", 90.0 * kGiB, 100.0 * kGiB, ""});
  auto s = v.summary();
  // Terms in the fixed order peak_allocated, peak_active, peak_reserved, peak_device, step_s, tokens_per_s,
  // mfu; terms without rows are left out.
  REQUIRE(s.size() == 3);
  CHECK(s[0].term == "peak_reserved_bytes");
  CHECK(s[0].n == 1);
  CHECK(s[0].median_abs == Approx(0.1));
  CHECK(s[0].mape == Approx(0.1));
  CHECK(s[0].worst_abs == Approx(0.1));
  CHECK(s[1].term == "step_s");
  CHECK(s[1].n == 4);
  CHECK(s[1].median_abs == Approx(0.15));
  CHECK(s[1].mape == Approx(0.2));
  CHECK(s[1].worst_abs == Approx(0.5));
  CHECK(s[2].term == "mfu");
  CHECK(s[2].n == 3);
  CHECK(s[2].median_abs == Approx(0.2));
  CHECK(s[2].mape == Approx(0.2));
  CHECK(s[2].worst_abs == Approx(0.3));

  // Per source for step_s: s1 {0.1, 0.2} -> median 0.15, MAPE 0.15, worst 0.2; s2 {0.5, 0} -> 0.25, 0.25,
  // 0.5.
  auto by = v.summary_by_source("step_s");
  REQUIRE(by.size() == 2);
  CHECK(by[0].term == "s1");
  CHECK(by[0].n == 2);
  CHECK(by[0].median_abs == Approx(0.15));
  CHECK(by[0].mape == Approx(0.15));
  CHECK(by[0].worst_abs == Approx(0.2));
  CHECK(by[1].term == "s2");
  CHECK(by[1].median_abs == Approx(0.25));
  CHECK(by[1].worst_abs == Approx(0.5));

  // rel_error with a zero measurement is defined as 0 (no division by zero).
  ValidationRow z{"z", "", "step_s", 1.0, 0.0, ""};
  CHECK(z.rel_error() == 0);

  // An out-of-scope row (error +3.0) leaves the headline summary and the per-source table unchanged and
  // enters only the all-records summary: step_s over {0, 0.1, 0.2, 0.5, 3.0} -> median 0.2, MAPE 3.8 / 5,
  // worst 3.0.
  v.rows.push_back({"e", "s3", "step_s", 4.0, 1.0, "unknown clocks"});
  auto s2 = v.summary();
  CHECK(s2[1].n == 4);
  CHECK(s2[1].mape == Approx(0.2));
  CHECK(v.summary_by_source("step_s").size() == 2);
  auto all = v.summary_all();
  REQUIRE(all.size() == 3);
  CHECK(all[1].n == 5);
  CHECK(all[1].median_abs == Approx(0.2));
  CHECK(all[1].mape == Approx(3.8 / 5));
  CHECK(all[1].worst_abs == Approx(3.0));
}

TEST_CASE("CLI: validate --max-error sets the exit status", "[validate][cli]") {
  auto dir = ptest::temp_dir("validate-cli");
  const fs::path f = write_three_records(dir);
  {
    const int rc = ptest::run_cli("validate " + quote(f.string()) + " --max-error 0.0001", dir / "o1.txt",
                                  dir / "e1.txt");
    INFO(ptest::read_text(dir / "o1.txt") << ptest::read_text(dir / "e1.txt"));
    CHECK(rc == 1);
  }
  {
    const int rc = ptest::run_cli(
        "validate " + quote(f.string()) + " --max-error 100 --json " + quote((dir / "v.json").string()),
        dir / "o2.txt", dir / "e2.txt");
    INFO(ptest::read_text(dir / "o2.txt") << ptest::read_text(dir / "e2.txt"));
    CHECK(rc == 0);
    Json j = load_json_file((dir / "v.json").string());
    CHECK(j["rows"].size() == 4);
    CHECK(j["skipped"].size() == 1);
    CHECK(j["failed"] == false);
  }
}

TEST_CASE("validate: a torchtitan log as the measurement (warmup excluded / median tps / max memory)",
          "[validate][torchtitan]") {
  auto dir = ptest::temp_dir("titanlog");
  // Steps 1..3 are warm-up (slow, less memory); steps 4..12 are measured.
  const std::vector<std::string> tps = {"1,000", "3,000", "5,000",  // 1..3 warm-up
                                        "5,802", "5,790", "5,811", "5,805", "5,799",
                                        "5,820", "5,801", "5,795", "5,808"};  // 4..12
  const std::vector<std::string> mem = {"30.50", "36.00", "37.00", "37.10", "37.12", "37.12",
                                        "37.12", "37.12", "37.12", "37.12", "37.11", "37.12"};
  const std::vector<std::string> mfu = {"5.90",  "17.70", "29.40", "34.17", "34.10", "34.25",
                                        "34.20", "34.15", "34.30", "34.16", "34.12", "34.22"};
  std::string log = "[rank0]:2024-06-01 12:00:00,000 - root - INFO - Training starts at step 1\n";
  for (int step = 1; step <= 12; ++step)
    log += "[rank0]:2024-06-01 12:00:0" + std::to_string(step % 10) +
           ",000 - root - INFO - step: " + std::to_string(step) + "  loss:  7.9" + std::to_string(step % 10) +
           "  memory: " + mem[step - 1] + "GiB(39.08%)  tps: " + tps[step - 1] +
           "  tflops: 338.0  mfu: " + mfu[step - 1] + "%\n";
  ptest::write_text(dir / "log.txt", log);

  Json rec = dev_record("torchao-e2e-h100-llama3-8b-g8-none_bfloat16");
  rec["id"] = "synthetic-torchtitan-log";
  rec["measured"] = {{"torchtitan_log", "log.txt"}, {"warmup_steps", 3}};
  const fs::path f = dir / "record.json";
  ptest::write_text(f, rec.dump(1));

  ValidationReport v = validate_files({f.string()});
  INFO((v.skipped.empty() ? std::string() : v.skipped[0].reason));
  REQUIRE(v.skipped.empty());
  std::map<std::string, double> measured;
  for (const auto& r : v.rows) {
    CHECK(r.id == "synthetic-torchtitan-log");
    measured[r.term] = r.measured;
  }
  REQUIRE(measured.count("peak_reserved_bytes"));
  REQUIRE(measured.count("tokens_per_s_per_gpu"));
  // torchtitan's memory column is max_memory_reserved in GiB: the max over the log, 37.12 GiB.
  CHECK(measured["peak_reserved_bytes"] == 37.12 * static_cast<double>(kGiB));
  // Steps 4..12 sorted: 5790 5795 5799 5801 5802 5805 5808 5811 5820 -> median (5th of 9) = 5802. Counting
  // the warm-up steps would give a different middle (5801 or 5800.5).
  CHECK(measured["tokens_per_s_per_gpu"] == 5802.0);
  // mfu, steps 4..12 sorted: 34.10 34.12 34.15 34.16 34.17 34.20 34.22 34.25 34.30 -> 34.17 %.
  REQUIRE(measured.count("mfu"));
  CHECK(measured["mfu"] == Approx(0.3417));
}

TEST_CASE("accuracy doc is up to date", "[validate][docs]") {
  const fs::path src = SHARDPLAN_SOURCE_DIR;
  const fs::path doc = src / "docs" / "accuracy.md";
  if (!fs::exists(doc)) {
    WARN("docs/accuracy.md does not exist yet: skipping the reproduction check");
    return;
  }
  auto dir = ptest::temp_dir("accuracy");
  const fs::path md = dir / "accuracy.md", evidence = dir / "evidence.json";
  // tools/accuracy.sh itself (the published runs with the coverage and OOM-probability sections, the
  // reference lane's section and its per-category table, the Llama 3 405B recipe), with this build's binary,
  // writing to temporary files; the evidence it writes is planner/evidence.json, embedded in the binary.
  const int rc =
      ptest::run_shell("cd " + quote(src.string()) + " && SHARDPLAN_BIN=" + quote(SHARDPLAN_BIN) +
                       " bash tools/accuracy.sh " + quote(md.string()) + " " + quote(evidence.string()) +
                       " >/dev/null 2>" + quote((dir / "err.txt").string()));
  INFO(ptest::read_text(dir / "err.txt"));
  REQUIRE(rc == 0);
  CHECK(ptest::read_text(src / "planner" / "evidence.json") == ptest::read_text(evidence));
  const std::string want = ptest::read_text(doc), got = ptest::read_text(md);
  if (want != got) {
    // Point at the first differing line.
    std::istringstream a(want), b(got);
    std::string la, lb;
    int line = 0;
    while (true) {
      ++line;
      const bool ga = static_cast<bool>(std::getline(a, la)), gb = static_cast<bool>(std::getline(b, lb));
      if (!ga && !gb) break;
      if (!ga || !gb || la != lb) {
        FAIL("docs/accuracy.md differs from a fresh `tools/accuracy.sh` at line "
             << line << "\n  doc:   " << la << "\n  fresh: " << lb);
        break;
      }
    }
  }
  CHECK(want == got);
}

TEST_CASE("planner/report/margin_stats.json is what validate gives on the committed records",
          "[validate][margin][headroom]") {
  // planner/report/margin.hpp's statistics (the OOM-risk margin, the default headroom, the tie tolerance) are
  // generated data: tools/margin_stats.sh runs `shardplan validate` on tests/data/runs/published_dev.json and
  // writes planner/report/margin_stats.json, which the build embeds (cmake/EmbedMarginStats.cmake).
  // Recomputed here with the real simulator: a change to the model or the records that moves any of them
  // beyond floating-point noise (relative 1e-9) makes the file stale.
  ValidationReport v = validate_files({std::string(SHARDPLAN_TEST_DATA) + "/runs/published_dev.json"});
  std::map<std::string, ValidationReport::Summary> fresh;
  for (const auto& s : v.summary()) fresh[s.term] = s;
  REQUIRE(fresh.count(kReservedMemoryError.term) == 1);
  REQUIRE(fresh.count(kThroughputError.term) == 1);
  const auto& mem = fresh.at(kReservedMemoryError.term);
  const auto& tput = fresh.at(kThroughputError.term);
  // The default headroom's rule (margin.hpp): the largest under-prediction of reserved memory over the
  // in-scope records, (measured - predicted) / measured, rounded up to a whole percent.
  double worst = 0;
  std::string worst_id;
  int rows = 0;
  for (const auto& r : v.rows)
    if (r.term == "peak_reserved_bytes" && r.out_of_scope.empty()) {
      ++rows;
      if ((r.measured - r.predicted) / r.measured > worst) {
        worst = (r.measured - r.predicted) / r.measured;
        worst_id = r.id;
      }
    }
  INFO(
      "planner/report/margin_stats.json is stale: regenerate it with `bash tools/margin_stats.sh` and commit "
      "it");
  INFO("fresh: reserved memory n " << mem.n << ", median " << mem.median_abs << ", worst " << mem.worst_abs
                                   << "; tokens/s n " << tput.n << ", median " << tput.median_abs << ", MAPE "
                                   << tput.mape << "; largest under-prediction " << worst << " (" << worst_id
                                   << ")");
  CHECK(mem.n == kReservedMemoryError.runs);
  CHECK(rows == kReservedMemoryError.runs);
  CHECK(mem.median_abs == Approx(kReservedMemoryError.median_abs).epsilon(1e-9));
  CHECK(mem.worst_abs == Approx(kReservedMemoryError.worst_abs).epsilon(1e-9));
  CHECK(tput.n == kThroughputError.runs);
  CHECK(tput.median_abs == Approx(kThroughputError.median_abs).epsilon(1e-9));
  CHECK(tput.mape == Approx(kThroughputError.mape).epsilon(1e-9));
  CHECK(worst == Approx(margin_stats::kLargestUnderPrediction).epsilon(1e-9));
  CHECK(worst_id == std::string(margin_stats::kLargestUnderPredictionRecord));
  CHECK(default_headroom(v) == Approx(std::ceil(100 * worst - 1e-9) / 100));
  CHECK(default_headroom(v) == kDefaultHeadroom);
}

TEST_CASE("knob pairs: records of one group that differ in one knob, predicted vs measured change",
          "[validate]") {
  // torchtitan PR 165's FSDP2 runs of Llama-3-8B on 8 H100s: full AC eager (2) and selective AC eager (3)
  // differ only in `ac`; full AC compiled (4) differs from (2) only in `compile` and from (3) in both (no
  // pair). A fourth record, (2) with the source changed, is in another group (no pair with anything).
  Json a = dev_record("torchtitan-pr165-fsdp2-full-bs8-eager-2");
  Json b = dev_record("torchtitan-pr165-fsdp2-selective-bs8-eager-3");
  Json c = dev_record("torchtitan-pr165-fsdp2-full-bs8-compile-4");
  Json d = a;
  d["id"] = "other-source";
  d["source"] = "elsewhere";
  auto dir = ptest::temp_dir("validate_pairs");
  const fs::path f = dir / "runs.json";
  ptest::write_text(f, Json{{"schema", "shardplan.runs/1"}, {"records", Json::array({a, b, c, d})}}.dump(1));
  ValidationReport v = validate_files({f.string()});
  REQUIRE(v.records.size() == 4);
  const auto pairs = v.knob_pairs();
  std::set<std::string> knobs;
  for (const auto& q : pairs) {
    knobs.insert(q.knob + " " + q.from + "->" + q.to);
    CHECK(q.id_a != "other-source");
    CHECK(q.id_b != "other-source");
    // The change is the ratio of the two rows' values, predicted and measured.
    const ValidationRow *ra = nullptr, *rb = nullptr;
    for (const auto& r : v.rows) {
      if (r.id == q.id_a && r.term == q.term) ra = &r;
      if (r.id == q.id_b && r.term == q.term) rb = &r;
    }
    REQUIRE(ra);
    REQUIRE(rb);
    CHECK(q.predicted_change == Approx(rb->predicted / ra->predicted - 1));
    CHECK(q.measured_change == Approx(rb->measured / ra->measured - 1));
  }
  CHECK(knobs == std::set<std::string>{"ac full->selective", "compile false->true"});
  // Selective AC keeps more activations: memory up and throughput up, measured and predicted (the
  // paired table in docs/accuracy.md: +8.1 % tokens/s, +91.5 % reserved measured).
  for (const auto& q : pairs)
    if (q.knob == "ac") CHECK(q.direction_right());
  KnobPair flat{"x", "a", "b", "1", "2", "step_s", 0.004, -0.006};
  CHECK(flat.direction_right());  // both under 1 %: flat
  KnobPair wrong{"x", "a", "b", "1", "2", "step_s", -0.02, 0.006};
  CHECK(!wrong.direction_right());
}

TEST_CASE("reference lane: peak allocated within 1 % median and 3 % worst", "[validate][reference]") {
  // Issue 14's target for the lane (tools/reference/data/records.json, the real torch 2.15 step on fake
  // tensors): after the op-level block backward, the tied [tok_embeddings, norm, output] group and FSDP2's
  // per-module hooks of multi-block groups, the tied weight's gradient held for the embedding's backward and
  // the TP embedding gradient's redistribution (docs/model.md), every row is within 3 % except the ones
  // listed below, each with the mechanism the lane's trace shows and the simulator does not model yet
  // (docs/reference-lane.md "Known differences"). A row that leaves this list when its mechanism is modelled
  // must be removed from it: the test fails for a listed row that is within 3 %, so the list cannot go stale.
  // (Empty since the PP first stage's later micro-batches stopped holding weight gradients and the received
  // gradient twice: ref-llama2-7b-...-gpipe-...-pp-rank-0, +3.05 % -> -0.03 %, docs/model.md "Pipeline
  // parallelism".)
  const std::map<std::string, std::string> known = {};

  const fs::path lane = fs::path(SHARDPLAN_SOURCE_DIR) / "tools" / "reference" / "data" / "records.json";
  ValidationReport v = validate_files({lane.string()});
  std::vector<double> errs;
  for (const auto& row : v.rows) {
    if (row.term != "peak_allocated_bytes") continue;
    INFO(row.id << ": " << 100 * row.rel_error() << " %");
    errs.push_back(std::abs(row.rel_error()));
    if (known.count(row.id))
      CHECK(std::abs(row.rel_error()) > 0.03);  // modelled now: take it off the list
    else
      CHECK(std::abs(row.rel_error()) <= 0.03);
  }
  REQUIRE(errs.size() >= 100);
  std::sort(errs.begin(), errs.end());
  CHECK(errs[errs.size() / 2] <= 0.01);
}

TEST_CASE("validate: measured.pp_rank compares with that pipeline rank's peak", "[validate][reference]") {
  // Two lane records of one pipelined plan (llama3-8b, 2 blocks, pp 2 1F1B, 4 micro-batches), rank 0 and
  // rank 1: each row's prediction is its own rank's peak (pipeline.stages[].peak_bytes), so the two
  // predictions differ (rank 1 holds the head, its logits and its loss: 7.7 vs 10.1 GiB in docs/accuracy.md).
  const fs::path lane = fs::path(SHARDPLAN_SOURCE_DIR) / "tools" / "reference" / "data" / "records.json";
  const std::string base =
      "ref-llama3-8b-g8-layers-2-ac-none-mbs-1-seq-2048-pp-2-pp-schedule-1f1b-grad-accum-4";
  Json recs = Json::array();
  const Json all = load_json_file(lane.string());
  for (const auto& r : all["records"])
    if (r["id"] == base + "-pp-rank-0" || r["id"] == base + "-pp-rank-1") recs.push_back(r);
  REQUIRE(recs.size() == 2);
  auto dir = ptest::temp_dir("validate-pp-rank");
  const fs::path f = dir / "runs.json";
  ptest::write_text(f, Json{{"schema", "shardplan.runs/1"}, {"records", recs}}.dump(1));
  ValidationReport v = validate_files({f.string()});
  REQUIRE(v.rows.size() == 2);
  CHECK(v.rows[0].predicted != v.rows[1].predicted);
  for (const auto& row : v.rows) CHECK(std::abs(row.rel_error()) <= 0.03);
  // A rank the plan does not have: one InputError naming the field.
  recs[0]["measured"]["pp_rank"] = 2;
  ptest::write_text(f, Json{{"schema", "shardplan.runs/1"}, {"records", recs}}.dump(1));
  try {
    validate_files({f.string()});
    FAIL("expected an InputError");
  } catch (const InputError& e) {
    CHECK(e.where().find("measured/pp_rank") != std::string::npos);
    CHECK(std::string(e.what()).find("not a rank of pp 2") != std::string::npos);
  }
}
