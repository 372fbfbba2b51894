// The parser entry points the libFuzzer harnesses drive, shared with the Catch2 replay of saved crash inputs
// (tests/robustness). Contract of every target: for any bytes it returns or throws InputError/OverflowError;
// anything else (another exception, a crash, a sanitizer report, a hang) is a bug.
#pragma once
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "calibration/nccl_tests_import.hpp"
#include "calibration/profile.hpp"
#include "core/checked.hpp"
#include "core/error.hpp"
#include "core/json_reader.hpp"
#include "planner/importers.hpp"
#include "simulator/model/model_graph.hpp"
#include "simulator/model/model_spec.hpp"
#include "simulator/model/presets.hpp"
#include "simulator/plan/knobs.hpp"
#include "simulator/plan/plan_types.hpp"
#include "topologies/cluster.hpp"

namespace shardplan::fuzz {

/// A document we wrote ourselves did not read back: a bug, not bad input, so it must not look like
/// InputError.
struct RoundTripError : std::logic_error {
  using std::logic_error::logic_error;
};

template <class F>
auto must_read_back(const char* what, F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    throw RoundTripError(std::string(what) + " written by shardplan does not read back: " + e.what());
  }
}

/// shardplan.model/1 spec -> graph; `show model` output must be accepted back.
inline void model_spec(std::string_view text) {
  const Json j = parse_json_text(std::string(text), "fuzz-model.json");
  const ModelSpec s = parse_model_spec(JsonObj(j, "fuzz-model.json"));
  const ModelGraph g = ModelGraph::from_spec(s);
  (void)g.parameters();
  must_read_back("model spec", [&] { return parse_model_spec(JsonObj(model_spec_to_json(s), "roundtrip")); });
}

/// Hugging Face config.json -> spec -> graph.
inline void hf_config(std::string_view text) {
  const Json j = parse_json_text(std::string(text), "fuzz-config.json");
  const ModelSpec s = parse_hf_config(j, "fuzz-config.json");
  const ModelGraph g = ModelGraph::from_spec(s);
  (void)g.parameters();
  must_read_back("model spec (from HF)",
                 [&] { return parse_model_spec(JsonObj(model_spec_to_json(s), "roundtrip")); });
}

/// shardplan.graph/1 -> graph; the graph JSON we export must be accepted back.
inline void graph_json(std::string_view text) {
  const Json j = parse_json_text(std::string(text), "fuzz-graph.json");
  const ModelGraph g = ModelGraph::from_graph_json(j, "fuzz-graph.json");
  (void)g.parameters();
  must_read_back("graph JSON", [&] { return ModelGraph::from_graph_json(g.to_graph_json(), "roundtrip"); });
}

/// GPU counts worth trying on a cluster: one GPU, a node, a domain, two domains, two leaves, the largest int.
inline std::vector<int> interesting_gpu_counts(const ClusterSpec& s) {
  const std::int64_t node = s.node.gpus, domain = s.node.nvlink_domain_gpus;
  std::vector<std::int64_t> c = {
      1,      node, domain, 2 * domain, domain * (s.fabric.nodes_per_leaf + 1), INT_MAX / domain * domain,
      INT_MAX};
  std::vector<int> out;
  for (auto v : c)
    if (v >= 1 && v <= INT_MAX) out.push_back(static_cast<int>(v));
  return out;
}

/// shardplan.cluster/1 -> Cluster at several sizes -> group views; `show cluster` output must read back.
inline void cluster(std::string_view text) {
  const Json j = parse_json_text(std::string(text), "fuzz-cluster.json");
  const ClusterSpec s = parse_cluster_spec(JsonObj(j, "fuzz-cluster.json"));
  must_read_back("cluster spec",
                 [&] { return parse_cluster_spec(JsonObj(cluster_spec_to_json(s), "roundtrip")); });
  for (int gpus : interesting_gpu_counts(s)) {
    try {
      Cluster c(s, gpus);
      (void)c.nodes();
      for (int size : {1, 2, c.gpus()})
        for (int stride : {1, 8, s.node.nvlink_domain_gpus}) (void)c.group(size, stride);
    } catch (const InputError&) {
      // this size does not fit the cluster: fine, try the next
    }
  }
}

/// One run record ("shardplan.run/1"): inline or preset model and cluster, gpus, plan resolved against both.
/// Model or cluster given as a string is looked up as a preset only (a fuzzer must not open files).
inline void run_record(const Json& j, const std::string& file, const std::string& ptr) {
  JsonObj r(j, file, ptr);
  r.allow({"schema", "id", "source", "notes"});
  const Json& mj = r.raw("model");
  const ModelGraph model =
      mj.is_string()
          ? load_model_json(parse_json_text(model_preset_text(mj.get<std::string>()), "preset"), "preset", "")
          : load_model_json(mj, file, r.pointer("model"));
  const Json& cj = r.raw("cluster");
  const ClusterSpec cs =
      cj.is_string()
          ? load_cluster_json(parse_json_text(cluster_preset_text(cj.get<std::string>()), "preset"), "preset",
                              "")
          : load_cluster_json(cj, file, r.pointer("cluster"));
  const int gpus = static_cast<int>(r.integer("gpus", 1, 1 << 24));
  const Cluster cluster(cs, gpus);
  const Plan plan = resolve_plan(plan_from_json(r.object("plan")), model, cluster);
  must_read_back("plan", [&] { return plan_from_json(JsonObj(plan_to_json(plan), "roundtrip")); });
  if (auto m = r.optional_object("measured")) {
    m->allow({"source", "notes"});
    for (const char* k :
         {"peak_allocated_bytes", "peak_active_bytes", "peak_reserved_bytes", "peak_device_bytes"})
      (void)m->integer(k, 0, 0, std::int64_t{1} << 50);
    for (const char* k : {"step_s", "tokens_per_s_per_gpu", "mfu"}) (void)m->number(k, 0.0, 0.0, 1e12);
    m->finish();
  }
  r.finish();
}

/// A run-record file: one record, a list, or {"schema": "shardplan.runs/1", "records": [...]}.
inline void run_records(std::string_view text) {
  const std::string file = "fuzz-runs.json";
  const Json j = parse_json_text(std::string(text), file);
  if (j.is_array()) {
    for (std::size_t i = 0; i < j.size(); ++i) run_record(j[i], file, "/" + std::to_string(i));
  } else if (j.is_object() && j.contains("records")) {
    JsonObj o(j, file);
    if (o.str("schema", "shardplan.runs/1") != "shardplan.runs/1")
      o.fail("schema", "expected shardplan.runs/1");
    const Json& recs = o.raw("records");
    if (!recs.is_array()) o.fail("records", "expected an array");
    for (std::size_t i = 0; i < recs.size(); ++i) run_record(recs[i], file, "/records/" + std::to_string(i));
    o.finish();
  } else {
    run_record(j, file, "");
  }
}

/// Exercises every query of a loaded profile; a profile we save must load back.
inline void use_profile(const CalibrationProfile& p) {
  for (const auto& s : p.collectives())
    for (std::int64_t bytes : {std::int64_t{0}, std::int64_t{1} << 20, std::int64_t{1} << 40})
      for (int ranks : {s.ranks, 2 * s.ranks + 1}) (void)p.collective_time(s.kind, bytes, ranks, s.nodes);
  (void)p.gemm_efficiency(4096, 4096, 4096);
  (void)p.hbm_Bps();
  for (const char* layout : {"fp32", "bf16-mixed", "bf16"}) (void)p.adamw_Bps(layout);
  (void)p.describe();
  const std::string dumped = p.to_json().dump(2);
  must_read_back("calibration profile", [&] {
    return CalibrationProfile::from_json(parse_json_text(dumped, "roundtrip"), "roundtrip");
  });
}

/// shardplan.calibration/1 profile.
inline void calibration_profile(std::string_view text) {
  const Json j = parse_json_text(std::string(text), "fuzz-profile.json");
  use_profile(CalibrationProfile::from_json(j, "fuzz-profile.json"));
}

/// nccl-tests log, text or JSON (detected as parse_nccl_tests_file does), imported into a profile.
inline void nccl_tests_log(std::string_view text) {
  const std::string t(text);
  const auto first = t.find_first_not_of(" \t\r\n");
  const bool json = first != std::string::npos && t[first] == '{';
  auto imp = json ? calibration::parse_nccl_tests_json(t, "fuzz-all_gather.json")
                  : calibration::parse_nccl_tests_text(t, "fuzz-all_gather.txt");
  if (imp.runs.empty()) return;
  CalibrationProfile p;
  calibration::add_nccl_tests_runs(p, imp.runs);
  use_profile(p);
}

/// A user's own training config for `--from` (DeepSpeed JSON, torchtitan 0.3.0 Python or 2024-2025 TOML,
/// accelerate YAML): the first byte picks the format, the rest is the file, written to a private temporary
/// folder because the importers read files (the Python reader also follows `from . import` into the folder).
/// Every knob it yields must be accepted or refused by the knob table with an InputError, as the CLI does.
inline void user_config(std::string_view text) {
  if (text.empty()) return;
  static const char* const kExt[] = {".json", ".py", ".toml", ".yaml"};
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() /
             ("shardplan-fuzz-user-config-" + std::to_string(static_cast<long long>(::getpid())));
    std::filesystem::create_directories(d);
    return d;
  }();
  const std::string path =
      (dir / (std::string("config") + kExt[static_cast<unsigned char>(text[0]) % 4])).string();
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(text.data() + 1, static_cast<std::streamsize>(text.size() - 1));
  }
  const ImportedConfig c = import_config(path);
  Plan p;
  for (const auto& [key, value] : c.knobs) {
    const Knob* k = find_knob(key);
    if (!k) throw RoundTripError("importer produced a key the knob table does not have: " + key);
    set_knob(*k, p, value, "--from " + key);
  }
}

struct Target {
  const char* name;
  void (*fn)(std::string_view);
};
/// Every target by name; the names are the fuzzer binaries (fuzz_<name>) and the folders of regressions/.
inline const std::vector<Target>& targets() {
  static const std::vector<Target> t = {
      {"model_spec", model_spec},         {"hf_config", hf_config},
      {"graph_json", graph_json},         {"cluster", cluster},
      {"run_records", run_records},       {"calibration_profile", calibration_profile},
      {"nccl_tests_log", nccl_tests_log}, {"user_config", user_config}};
  return t;
}

/// Runs one input: returns 0 on success or an expected input error; reports and aborts on anything else.
inline int run_one(void (*fn)(std::string_view), const std::uint8_t* data, std::size_t size) {
  try {
    fn(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const InputError&) {
  } catch (const OverflowError&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: unexpected exception: %s\n", e.what());
    std::abort();
  }
  return 0;
}

}  // namespace shardplan::fuzz
