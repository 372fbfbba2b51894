// Replays reference-lane allocation traces (tools/reference/run.py --trace, schema
// shardplan.reference_trace/1) through the caching-allocator model (simulator/memory/allocator.hpp): the same
// trace in, the allocator's behaviour out. Prints, per trace, the lane's recorded peak, the replay's peak
// allocated (which must equal it: the lane rounds to 512 B as the allocator does), and the replay's peak
// reserved and fragmentation with default and with expandable segments. With the lane's record after a trace
// (tools/reference/run.py -o RECORD.json), it also simulates the record's plan and replays shardplan's own
// allocation sequence twice: with every tensor on the default stream, as the lane's CPU run issues them (the
// like-for-like comparison of the tensors and their order), and on the runtime's streams (what `shardplan
// simulate` reports). Usage: shardplan-replay-trace TRACE.json [RECORD.json] [TRACE.json [RECORD.json]]...
#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/json_reader.hpp"
#include "simulator/memory/memory.hpp"
#include "simulator/model/model.hpp"
#include "simulator/simulate/simulate.hpp"
#include "topologies/presets.hpp"

using namespace shardplan;

namespace {

struct Outcome {
  AllocatorStats stats;
  std::int64_t events = 0;
};

Outcome replay(const nlohmann::json& events, bool expandable) {
  AllocatorConfig cfg;
  cfg.expandable_segments = expandable;
  CachingAllocator a(cfg);
  std::unordered_map<std::int64_t, BlockId> live;  // storage id -> block
  Outcome o;
  for (const auto& e : events) {
    const std::string op = e.at("op").get<std::string>();
    const std::int64_t sid = e.at("storage").get<std::int64_t>();
    const Bytes bytes = e.at("bytes").get<Bytes>();
    // The lane runs on the CPU: every allocation is on the default stream (its "stream" field).
    if (op == "alloc") {
      if (bytes <= 0) continue;
      if (auto it = live.find(sid); it != live.end()) a.free(it->second);  // re-sized storage
      live[sid] = a.malloc(bytes, 0);
      ++o.events;
    } else if (op == "free") {
      if (auto it = live.find(sid); it != live.end()) {
        a.free(it->second);
        live.erase(it);
        ++o.events;
      }
    }
  }
  o.stats = a.stats();
  return o;
}

struct Simulated {
  Bytes allocated_one_stream = 0, reserved_one_stream = 0, reserved_streams = 0;
};

/// The record's plan simulated, its allocation sequence replayed on one stream and on the runtime's streams.
Simulated simulate_record(const nlohmann::json& rec, const std::string& file) {
  const Json& mj = rec.at("model");
  ModelGraph model = mj.is_string() ? load_model(mj.get<std::string>()) : load_model_json(mj, file, "/model");
  const Json& cj = rec.at("cluster");
  ClusterSpec cspec =
      cj.is_string() ? load_cluster_spec(cj.get<std::string>()) : load_cluster_json(cj, file, "/cluster");
  Cluster cluster(std::move(cspec), rec.at("gpus").get<int>());
  const Plan plan = resolve_plan(plan_from_json(JsonObj(rec.at("plan"), file, "/plan")), model, cluster);
  CostModel costs(cluster, std::nullopt, CalibrationHooks{});
  Simulator sim(model, cluster, costs);
  const Result& r = sim.run(plan);
  Program one = sim.program();
  for (MemEffect& e : one.effects) e.pool = kPoolDefault;
  for (MemEffect& e : one.initial) e.pool = kPoolDefault;
  AllocatorReplay replay;  // default segments and no capacity, as the trace's own replay (its "reserved")
  const ReplayOutcome& o = replay.run(one, AllocatorConfig{});
  return {o.stats.allocated_peak_bytes, o.stats.reserved_peak_bytes, r.peak_reserved_bytes};
}

bool is_record(const nlohmann::json& j) {
  return j.contains("plan") && j.contains("model");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: shardplan-replay-trace TRACE.json [RECORD.json]...\n";
    return 2;
  }
  auto gib = [](Bytes b) { return static_cast<double>(b) / static_cast<double>(kGiB); };
  auto frag = [](Bytes reserved, Bytes allocated) {
    return 100.0 * static_cast<double>(reserved - allocated) / static_cast<double>(reserved);
  };
  auto read = [](const char* path, nlohmann::json& j) {
    std::ifstream f(path);
    try {
      f >> j;
    } catch (const std::exception& e) {
      std::cerr << path << ": not JSON: " << e.what() << "\n";
      return false;
    }
    return true;
  };
  fmt::print("{:<58} {:>7} {:>10} {:>10} {:>10} {:>9} {:>10} {:>9}   {:>10} {:>10} {:>9} {:>10}\n", "trace",
             "events", "lane peak", "allocated", "reserved", "frag", "expandable", "frag", "sp 1-str. alloc",
             "reserved", "frag", "sp streams");
  for (int i = 1; i < argc; ++i) {
    nlohmann::json t;
    if (!read(argv[i], t)) return 2;
    if (!t.contains("events")) {
      std::cerr << argv[i] << ": not a trace (no events)\n";
      return 2;
    }
    const Outcome d = replay(t.at("events"), false), x = replay(t.at("events"), true);
    const Bytes lane = t.at("peak_allocated_bytes").get<Bytes>();
    const std::string name = t.value("record_id", std::string(argv[i]));
    std::string sp;
    if (i + 1 < argc) {
      nlohmann::json rec;
      if (!read(argv[i + 1], rec)) return 2;
      if (rec.contains("records") && rec["records"].size() == 1) rec = rec["records"][0];
      if (is_record(rec)) {
        ++i;
        try {
          const Simulated s = simulate_record(rec, argv[i]);
          sp = fmt::format("   {:>10.3f} {:>10.3f} {:>8.1f}% {:>10.3f}", gib(s.allocated_one_stream),
                           gib(s.reserved_one_stream), frag(s.reserved_one_stream, s.allocated_one_stream),
                           gib(s.reserved_streams));
        } catch (const std::exception& e) {
          std::cerr << argv[i] << ": " << e.what() << "\n";
          return 2;
        }
      }
    }
    fmt::print("{:<58} {:>7} {:>10.3f} {:>10.3f} {:>10.3f} {:>8.1f}% {:>10.3f} {:>8.1f}%{}\n", name, d.events,
               gib(lane), gib(d.stats.allocated_peak_bytes), gib(d.stats.reserved_peak_bytes),
               frag(d.stats.reserved_peak_bytes, d.stats.allocated_peak_bytes),
               gib(x.stats.reserved_peak_bytes),
               frag(x.stats.reserved_peak_bytes, x.stats.allocated_peak_bytes), sp);
  }
  return 0;
}
