// nccl-tests importer on real logs (tests/data/nccl-tests/SOURCE.md) and on corrupt or truncated copies of
// them.
#include <catch2/catch.hpp>

#include "calibration/nccl_tests_import.hpp"
#include "core/error.hpp"
#include "helpers.hpp"

using namespace shardplan;
using namespace shardplan::calibration;

namespace {
/// Lines [1, n] of a text, each with its newline.
std::string first_lines(const std::string& text, int n) {
  std::size_t pos = 0;
  for (int i = 0; i < n && pos != std::string::npos; ++i) {
    pos = text.find('\n', pos);
    if (pos != std::string::npos) ++pos;
  }
  return text.substr(0, pos);
}
}  // namespace

TEST_CASE("H100 2-node all_reduce log: ranks and nodes from the Rank lines", "[import][real]") {
  const auto r = parse_nccl_tests_file(test::nccl_log("h100_2node_16rank_all_reduce.txt"));
  REQUIRE(r.runs.size() == 1);
  const auto& run = r.runs[0];
  CHECK(run.kind == CollectiveKind::kAllReduce);  // "all_reduce_perf" in the mpirun line
  CHECK(run.ranks == 16);                         // Rank 0..15
  CHECK(run.nodes == 2);                          // ztan-mig-235z, ztan-mig-gq73
  CHECK(run.iterations == 20);                    // "iters: 20"
  CHECK(run.line == 30);                          // the "size count type" header
  REQUIRE(run.rows.size() == 31);                 // 8 B = 2^3 .. 8 GiB = 2^33
  CHECK(run.rows.front().bytes == 8);
  CHECK(run.rows.back().bytes == 8589934592);
  CHECK(run.rows.back().oop_time_us == 47535);
  CHECK(*run.rows.back().ip_time_us == 47743);
  CHECK(run.rows.back().dtype == "float");
  CHECK(run.gpu_names.size() == 16);
  CHECK(run.gpu_names[0] == "NVIDIA H100 80GB HBM3");
  CHECK(run.gpus_per_thread == 1);  // "# nThread 1 nGpus 1": one process per GPU
}

TEST_CASE("GPUs per launching thread from the nGpus header (-g)", "[import][real]") {
  // together's H100 logs run `-g 8` from one thread: "# nThread 1 nGpus 8 ..." and 8 ranks without Rank lines
  // of other processes.
  const auto r = parse_nccl_tests_file(test::nccl_log("dev/all_gather_8ranks_h100_together.log"));
  REQUIRE(r.runs.size() == 1);
  CHECK(r.runs[0].gpus_per_thread == 8);
  CHECK(r.runs[0].ranks == 8);
}

TEST_CASE("RTX 2080 Ti log: two tables in one file, collective from each command line", "[import][real]") {
  const auto r = parse_nccl_tests_file(test::nccl_log("rtx2080ti_1node_2gpu_all_reduce_all_gather.txt"));
  REQUIRE(r.runs.size() == 2);
  CHECK(r.runs[0].kind == CollectiveKind::kAllReduce);
  CHECK(r.runs[1].kind == CollectiveKind::kAllGather);
  for (const auto& run : r.runs) {
    CHECK(run.ranks == 2);
    CHECK(run.nodes == 1);
    CHECK(run.rows.size() == 28);  // all_reduce 2^3..2^30; all_gather 0, 0, 2^5..2^30
  }
  // The profile skips the two zero-byte all_gather rows: 26 samples remain.
  const auto p = import_nccl_tests({test::nccl_log("rtx2080ti_1node_2gpu_all_reduce_all_gather.txt")}, {});
  REQUIRE(p.collectives().size() == 4);  // {AR, AG} x {out_of_place, in_place}
  for (const auto& s : p.collectives())
    CHECK(s.samples.size() == (s.kind == CollectiveKind::kAllGather ? 26u : 28u));
  CHECK(p.hardware().gpu_count == 2);
  REQUIRE(p.hardware().gpus.size() == 1);
  CHECK(p.hardware().gpus[0].count == 2);
}

TEST_CASE("GB10 log in the nccl-tests 2.19 format: program and NCCL version from the header",
          "[import][real]") {
  const auto r = parse_nccl_tests_file(test::nccl_log("gb10_2node_all_gather.txt"));
  REQUIRE(r.runs.size() == 1);
  CHECK(r.runs[0].kind == CollectiveKind::kAllGather);  // "# Collective test starting: all_gather_perf"
  CHECK(r.runs[0].nccl_version == "2.28.9");            // nccl-library=22809
  CHECK(r.runs[0].ranks == 2);
  CHECK(r.runs[0].nodes == 2);  // spark-101, spark-102
  CHECK(r.runs[0].rows.size() == 6);
}

TEST_CASE("nccl-tests JSON output (JSON_FILE_VERSION 2)", "[import]") {
  const auto r = parse_nccl_tests_file(test::nccl_log("synthetic_v2_all_gather.json"));
  REQUIRE(r.runs.size() == 1);
  const auto& run = r.runs[0];
  CHECK(run.kind == CollectiveKind::kAllGather);
  CHECK(run.ranks == 8);
  CHECK(run.nodes == 1);
  CHECK(run.nccl_version == "2.28.9");
  CHECK(run.env.at("NCCL_ALGO") == "Ring");
  CHECK(run.env.count("PATH") == 0);  // only NCCL_* variables are kept
  REQUIRE(run.rows.size() == 3);
  CHECK(run.rows[2].oop_time_us == 50.0);
  CHECK(*run.rows[2].ip_time_us == 47.0);
}

TEST_CASE("flags override and are checked against the busbw column", "[import]") {
  const auto log = test::nccl_log("h100_2node_16rank_all_reduce.txt");
  NcclTestsOverrides gpn;
  gpn.gpus_per_node = 8;
  CHECK(parse_nccl_tests_file(log, gpn).runs[0].nodes == 2);  // 16 / 8
  NcclTestsOverrides bad_gpn;
  bad_gpn.gpus_per_node = 3;
  CHECK_THROWS_WITH(parse_nccl_tests_file(log, bad_gpn), Catch::Contains("not a multiple"));
  // 8 ranks would give all-reduce busbw = algbw * 2*7/8 = 1.75 algbw, but the log prints 1.875 algbw
  // (2*15/16): the first row with algbw >= 1 GB/s is 256 KiB at line 47 (1.57 * 1.75 = 2.75 != 2.94).
  NcclTestsOverrides wrong;
  wrong.ranks = 8;
  CHECK_THROWS_WITH(parse_nccl_tests_file(log, wrong), Catch::Contains(log + ": line 47: busbw/algbw"));
}

TEST_CASE("truncated and corrupt logs raise InputError with file and line", "[import]") {
  const std::string text = test::read_text(test::nccl_log("h100_2node_16rank_all_reduce.txt"));
  SECTION("row cut in the middle") {
    // Line 54 is the 32 MiB row; keep 53 full lines and the first 40 characters of line 54.
    const std::string cut = first_lines(text, 53) + text.substr(first_lines(text, 53).size(), 40);
    const auto path = test::temp_path("cut_row.txt");
    test::write_text(path, cut);
    CHECK_THROWS_AS(parse_nccl_tests_file(path), InputError);
    CHECK_THROWS_WITH(parse_nccl_tests_file(path),
                      Catch::Contains(path + ": line 54: truncated or malformed"));
  }
  SECTION("table without footer") {
    const auto path = test::temp_path("no_footer.txt");
    test::write_text(path, first_lines(text, 60));
    CHECK_THROWS_WITH(parse_nccl_tests_file(path), Catch::Contains(path + ": line 30: truncated log"));
  }
  SECTION("garbage in a number column") {
    std::string bad = text;
    bad.replace(bad.find("1059.9"), 6, "10x9.9");
    const auto path = test::temp_path("garbage.txt");
    test::write_text(path, bad);
    CHECK_THROWS_WITH(parse_nccl_tests_file(path), Catch::Contains(path + ": line 54: column 6"));
  }
  SECTION("a time beyond what a calibration profile holds (1e15 us = 1e9 s)") {
    std::string bad = text;
    bad.replace(bad.find("1059.9"), 6, "1.9e35");
    const auto path = test::temp_path("huge_time.txt");
    test::write_text(path, bad);
    CHECK_THROWS_WITH(parse_nccl_tests_file(path),
                      Catch::Contains(path + ": line 54: column 6: \"1.9e35\" is out of range"));
  }
  SECTION("no results table") {
    const auto path = test::temp_path("empty.txt");
    test::write_text(path, "just a shell prompt\n");
    CHECK_THROWS_WITH(parse_nccl_tests_file(path), Catch::Contains("no nccl-tests results table"));
  }
  SECTION("table whose collective cannot be told") {
    const auto path = test::temp_path("anonymous.txt");
    // Drop the mpirun lines that name all_reduce_perf (lines 1-8); the file name says nothing either.
    test::write_text(path, text.substr(first_lines(text, 8).size()));
    CHECK_THROWS_WITH(parse_nccl_tests_file(path), Catch::Contains("cannot tell which collective"));
  }
  SECTION("truncated JSON") {
    const std::string json = test::read_text(test::nccl_log("synthetic_v2_all_gather.json"));
    const auto path = test::temp_path("cut.json");
    test::write_text(path, json.substr(0, json.size() / 2));
    CHECK_THROWS_WITH(parse_nccl_tests_file(path), Catch::Contains(path + ": line 1:"));
  }
  SECTION("missing file") {
    CHECK_THROWS_WITH(parse_nccl_tests_file("/nonexistent/log.txt"), Catch::Contains("cannot open file"));
  }
}

TEST_CASE("program names map to collectives", "[import]") {
  CHECK(*collective_from_program("./build/reduce_scatter_perf") == CollectiveKind::kReduceScatter);
  CHECK(*collective_from_program("all_reduce_perf_mpi") == CollectiveKind::kAllReduce);
  CHECK(*collective_from_program("alltoall_perf") == CollectiveKind::kAllToAll);
  CHECK_FALSE(collective_from_program("hypercube_perf"));
  CHECK(nccl_version_string(22809) == "2.28.9");
  CHECK(nccl_version_string(2708) == "2.7.8");
}
