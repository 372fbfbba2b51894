// Replays reference-lane allocation traces (tools/reference/run.py --trace, schema
// shardplan.reference_trace/1) through the caching-allocator model (simulator/allocator.hpp): the same trace
// in, the allocator's behaviour out. Prints, per trace, the lane's recorded peak, the replay's peak allocated
// (which must equal it: the lane rounds to 512 B as the allocator does), and the replay's peak reserved and
// fragmentation with default and with expandable segments. Usage: shardplan-replay-trace TRACE.json...
#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "simulator/allocator.hpp"

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

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: shardplan-replay-trace TRACE.json...\n";
    return 2;
  }
  auto gib = [](Bytes b) { return static_cast<double>(b) / static_cast<double>(kGiB); };
  fmt::print("{:<58} {:>7} {:>10} {:>10} {:>10} {:>9} {:>10} {:>9}\n", "trace", "events", "lane peak",
             "allocated", "reserved", "frag", "expandable", "frag");
  for (int i = 1; i < argc; ++i) {
    std::ifstream f(argv[i]);
    nlohmann::json t;
    try {
      f >> t;
    } catch (const std::exception& e) {
      std::cerr << argv[i] << ": not a trace: " << e.what() << "\n";
      return 2;
    }
    const Outcome d = replay(t.at("events"), false), x = replay(t.at("events"), true);
    const Bytes lane = t.at("peak_allocated_bytes").get<Bytes>();
    fmt::print("{:<58} {:>7} {:>10.3f} {:>10.3f} {:>10.3f} {:>8.1f}% {:>10.3f} {:>8.1f}%\n",
               t.value("record_id", std::string(argv[i])), d.events, gib(lane),
               gib(d.stats.allocated_peak_bytes), gib(d.stats.reserved_peak_bytes),
               100.0 * static_cast<double>(d.stats.reserved_peak_bytes - d.stats.allocated_peak_bytes) /
                   static_cast<double>(d.stats.reserved_peak_bytes),
               gib(x.stats.reserved_peak_bytes),
               100.0 * static_cast<double>(x.stats.reserved_peak_bytes - x.stats.allocated_peak_bytes) /
                   static_cast<double>(x.stats.reserved_peak_bytes));
  }
  return 0;
}
