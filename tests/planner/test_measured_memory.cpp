// validate --oom-message / --memory-snapshot: torch's OOM message parsed exactly (both wordings and the NVML
// variants), the restricted pickle reader on generated snapshots (exact byte sums and trace peaks), its
// refusal of anything that imports or calls, and the CLI's exit codes.
#include <catch2/catch.hpp>
#include <filesystem>

#include "core/error.hpp"
#include "plan_helpers.hpp"
#include "planner/memory_snapshot.hpp"
#include "planner/oom_message.hpp"
#include "planner/pickle_reader.hpp"

using namespace shardplan;
namespace fs = std::filesystem;
using ptest::quote;

namespace {
const std::string kSnap = std::string(SHARDPLAN_TEST_DATA) + "/snapshots/";
constexpr Bytes G = kGiB, M = kMiB;

// The example of issue 31 (torch 2.1+ wording, NVML listing this process).
const char* kNew =
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "79.10 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.03 GiB memory in "
    "use. Of the allocated memory 74.12 GiB is allocated by PyTorch, and 2.41 GiB is reserved by PyTorch but "
    "unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
    "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n";
}  // namespace

TEST_CASE("parse_torch_size: format_size's units read exactly, rounded to the byte", "[oom]") {
  CHECK(parse_torch_size("2.00 GiB", "f", "x") == 2 * G);
  CHECK(parse_torch_size("1.06 GiB", "f", "x") == G + 64424509);      // 0.06 x 2^30 = 64424509.44
  CHECK(parse_torch_size("10.27 MiB", "f", "x") == 10 * M + 283116);  // 0.27 x 2^20 = 283115.52
  CHECK(parse_torch_size("1.50 KiB", "f", "x") == 1536);
  CHECK(parse_torch_size("512 bytes", "f", "x") == 512);
  CHECK_THROWS_AS(parse_torch_size("2,00 GiB", "f", "x"), InputError);
  CHECK_THROWS_AS(parse_torch_size("2.00 GB", "f", "x"), InputError);
}

TEST_CASE("parse_oom_message: torch 2.1+ wording, this process listed", "[oom]") {
  const OomMessage o = parse_oom_message(kNew, "oom.txt");
  CHECK(o.wording == "torch>=2.1");
  CHECK(o.device == 0);
  CHECK(o.requested == 2147483648);
  CHECK(o.total_capacity == 84932978278);
  CHECK(o.free == 1138166333);
  REQUIRE(o.process_in_use);
  CHECK(*o.process_in_use == 83784074527);
  CHECK(o.allocated == 79585743995);
  CHECK(o.reserved_unallocated == 2587717796);
  CHECK(o.reserved() == 79585743995 + 2587717796);
  REQUIRE(o.non_pytorch());
  CHECK(*o.non_pytorch() == 83784074527 - 79585743995 - 2587717796);
  CHECK(o.other_processes.empty());
  CHECK(!o.allowed);
  CHECK(o.messages == 1);
}

TEST_CASE("parse_oom_message: other processes, a char-printed device, wrapped lines", "[oom]") {
  // A real log (public benchmark notes): another process listed before this one.
  const OomMessage a = parse_oom_message(
      "OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of "
      "31.36 "
      "GiB of which 2.62 MiB is free. Process 81034 has 30.57 GiB memory in use. Including non-PyTorch "
      "memory, "
      "this process has 784.00 MiB memory in use. Of the allocated memory 179.69 MiB is allocated by "
      "PyTorch, "
      "and 12.31 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large",
      "a");
  CHECK(a.requested == 20971520);
  CHECK(a.total_capacity == 33672543601);
  CHECK(a.free == 2747269);
  REQUIRE(a.other_processes.size() == 1);
  CHECK(a.other_processes[0] == std::pair<long long, Bytes>{81034, 32824287560});
  CHECK(*a.process_in_use == 822083584);
  CHECK(a.allocated == 188418621);
  CHECK(a.reserved_unallocated == 12907971);
  // A real text-generation-inference log: the device index printed as a char ("GPU  has"), and this process
  // listed as "Process PID" (another PID namespace): in-use of this process unknown.
  const OomMessage b = parse_oom_message(
      "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 224.00 MiB. GPU  has a total "
      "capacity of 44.34 GiB of which 160.81 MiB is free. Process 47694 has 44.17 GiB memory in use. Of the "
      "allocated memory 43.36 GiB is allocated by PyTorch, and 396.27 MiB is reserved by PyTorch but "
      "unallocated.",
      "b");
  CHECK(b.device == -1);
  CHECK(b.requested == 234881024);
  CHECK(b.total_capacity == 47609712476);
  CHECK(b.free == 168621507);
  CHECK(!b.process_in_use);
  CHECK(!b.non_pytorch());
  CHECK(b.allocated == 46557445489);
  CHECK(b.reserved_unallocated == 415519212);
  // The message wrapped over lines, as a report quotes it, twice in the file.
  std::string wrapped = kNew;
  for (auto& c : wrapped)
    if (c == ' ' && (&c - wrapped.data()) % 37 == 0) c = '\n';
  const OomMessage w = parse_oom_message(wrapped + wrapped, "w");
  CHECK(w.allocated == 79585743995);
  CHECK(w.messages == 2);
}

TEST_CASE("parse_oom_message: torch 2.0 and before", "[oom]") {
  const OomMessage o = parse_oom_message(
      "RuntimeError: CUDA out of memory. Tried to allocate 36.00 MiB (GPU 0; 7.93 GiB total capacity; 130.35 "
      "MiB already allocated; 47.06 MiB free; 188.00 MiB reserved in total by PyTorch) If reserved memory is "
      ">> "
      "allocated memory try setting max_split_size_mb to avoid fragmentation.",
      "old");
  CHECK(o.wording == "torch<2.1");
  CHECK(o.requested == 37748736);
  CHECK(o.total_capacity == 8514772664);
  CHECK(o.allocated == 136681882);
  CHECK(o.free == 49345987);
  CHECK(o.reserved() == 197132288);
  CHECK(!o.process_in_use);
}

TEST_CASE("parse_oom_message: no message or another wording is an InputError", "[oom]") {
  CHECK_THROWS_AS(parse_oom_message("step 10 loss 2.3\n", "log"), InputError);
  CHECK_THROWS_AS(parse_oom_message("Tried to allocate lots of memory and failed", "log"), InputError);
}

TEST_CASE("memory snapshot: exact per-device sums and trace peaks", "[snapshot]") {
  for (const char* f : {"snapshot_proto4.pickle", "snapshot_oom_proto2.pickle"}) {
    INFO(f);
    const MemorySnapshot s = read_memory_snapshot(kSnap + f);
    REQUIRE(s.devices.size() == 2);
    const SnapshotDevice& d = s.devices[0];
    CHECK(d.segments == 2);
    CHECK(d.blocks == 5);
    CHECK(d.reserved == 20 * M + 2 * M);
    CHECK(d.allocated == 8 * M + 512);
    CHECK(d.active == 8 * M + 2 * M + 512);
    CHECK(d.requested == 8 * M + 100);
    CHECK(d.peak_reserved == 22 * M);
    CHECK(d.peak_allocated == 14 * M + 512);  // 8 + 4 + 2 MiB + 512 before the 4 MiB free
    CHECK(d.peak_active == 14 * M + 512);
    const SnapshotDevice& e = s.devices[1];
    CHECK(e.device == 1);
    CHECK(e.trace_entries == 0);
    CHECK(e.reserved == 20 * M);
    CHECK(e.allocated == 6 * M);
    CHECK(e.peak_reserved == 20 * M);
    CHECK(s.allocator_settings["expandable_segments"] == false);
  }
  const SnapshotDevice o = read_memory_snapshot(kSnap + "snapshot_oom_proto2.pickle").devices[0];
  CHECK(o.trace_entries == 10);
  CHECK(o.ooms == 1);
  CHECK(o.oom_requested == 20 * M);
  CHECK(o.oom_device_free == M);
  CHECK(o.reserved_at_oom == 22 * M);
}

TEST_CASE("pickle reader: refuses whatever imports or calls, and malformed pickles", "[snapshot]") {
  try {
    read_memory_snapshot(kSnap + "malicious_global.pickle");
    FAIL("a GLOBAL opcode was read");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("GLOBAL") != std::string::npos);
    CHECK(e.where() == "byte 2");
  }
  using namespace std::string_literals;
  CHECK_THROWS_WITH(read_pickle("\x80\x02]q\x00R."s, "p"), Catch::Contains("REDUCE"));
  CHECK_THROWS_WITH(read_pickle("\x80\x04\x8c\x02osb."s, "p"), Catch::Contains("BUILD"));
  CHECK_THROWS_WITH(read_pickle("\x80\x04\x93."s, "p"), Catch::Contains("STACK_GLOBAL"));
  CHECK_THROWS_WITH(read_pickle("\x80\x02]q\x00h\x00"
                                "a."s,
                                "p"),
                    Catch::Contains("deeper"));  // a list in itself
  CHECK_THROWS_WITH(read_pickle("\x80\x02X\xff\x00\x00\x00ab"s, "p"), Catch::Contains("ends early"));
  CHECK(read_pickle("\x80\x02}q\x00X\x01\x00\x00\x00"
                    "aK\x07s."s,
                    "p") == Json{{"a", 7}});
  CHECK(read_pickle("\x80\x02\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f."s, "p") == INT64_MAX);
  CHECK(read_pickle("\x80\x02\x8a\x01\xff."s, "p") == -1);
}

TEST_CASE("validate --oom-message / --memory-snapshot: exit 0 with a result, 2 for bad input", "[oom][cli]") {
  auto dir = ptest::temp_dir("measured");
  ptest::write_text(dir / "oom.txt", kNew);
  const std::string plan = " --model llama3-8b --gpus 8 --mbs 4 --ac none";
  REQUIRE(ptest::run_cli("validate --oom-message " + quote((dir / "oom.txt").string()) + plan + " --json " +
                             quote((dir / "o.json").string()),
                         dir / "out", dir / "err") == 0);
  const Json j = parse_json_text(ptest::read_text(dir / "o.json"), "o.json");
  CHECK(j["schema"] == "shardplan.measured-memory/1");
  const Json& c = j["comparisons"][0];
  CHECK(c["measured"]["reserved_bytes"] == 79585743995 + 2587717796);
  CHECK(c["measured_oom"] == true);
  CHECK(c["advice"].is_string());
  CHECK(ptest::read_text(dir / "out").find("plan changes:") != std::string::npos);
  REQUIRE(ptest::run_cli("validate --memory-snapshot " + quote(kSnap + "snapshot_proto4.pickle") + plan,
                         dir / "out", dir / "err") == 0);
  CHECK(ptest::read_text(dir / "out").find("peak_reserved_bytes") != std::string::npos);
  // Bad input: one line, exit 2, no partial output file.
  CHECK(ptest::run_cli("validate --memory-snapshot " + quote(kSnap + "malicious_global.pickle") + plan +
                           " --json " + quote((dir / "bad.json").string()),
                       dir / "out", dir / "err") == 2);
  CHECK(!fs::exists(dir / "bad.json"));
  CHECK(ptest::read_text(dir / "err").find("GLOBAL") != std::string::npos);
  ptest::write_text(dir / "log.txt", "step 10 loss 2.3\n");
  CHECK(ptest::run_cli("validate --oom-message " + quote((dir / "log.txt").string()) + plan, dir / "out",
                       dir / "err") == 2);
  CHECK(ptest::run_cli("validate --oom-message " + quote((dir / "oom.txt").string()), dir / "out",
                       dir / "err") == 2);                           // no --model
  CHECK(ptest::run_cli("validate", dir / "out", dir / "err") == 2);  // neither records nor a measurement
}
