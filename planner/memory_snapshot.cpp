// A PyTorch memory snapshot summed per device. The structure read is the one torch writes:
// torch/csrc/cuda/memory_snapshot.cpp, _memory_snapshot_pickled (pytorch/pytorch at commit
// 00067369c9339bed950762afec327514d6fa2566), from c10/cuda/CUDACachingAllocator.h's SnapshotInfo /
// SegmentInfo / BlockInfo / TraceEntry; torch.cuda.memory._snapshot() returns the same dict and
// _dump_snapshot pickles it:
//   {"segments": [{"device", "address", "total_size", "allocated_size", "active_size", "requested_size",
//                  "stream", "segment_type": "large"|"small", "segment_pool_id": (a, b), "is_expandable",
//                  "frames", "blocks": [{"address", "size", "requested_size",
//                                        "state": "active_allocated"|"active_pending_free"|"inactive",
//                                        "frames"}]}],
//    "device_traces": [[{"action": "alloc"|"free_requested"|"free_completed"|"segment_alloc"|"segment_free"|
//                                  "segment_map"|"segment_unmap"|"snapshot"|"oom",
//                        "addr" (or "device_free" for oom), "size", "stream", "time_us", "frames"}], ...],
//    "allocator_settings": {...}}
// device_traces is indexed by device. In CUDACachingAllocator.cpp, alloc and free_requested entries carry the
// requested size, segment entries the segment's size, and an oom entry the rounded request and the device's
// free memory.
#include "planner/memory_snapshot.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.hpp"
#include "planner/pickle_reader.hpp"

namespace shardplan {

namespace {

Bytes int_field(const Json& o, const char* key, const std::string& file, const std::string& where) {
  if (!o.is_object() || !o.contains(key) || !o[key].is_number_integer())
    throw InputError(file, where + "." + key, "missing or not an integer (not a torch memory snapshot?)");
  return o[key].get<Bytes>();
}

/// Undoes the trace from the snapshot's state backwards: the state before each entry, and the peaks.
void replay_trace(const Json& trace, SnapshotDevice& d, const std::string& file, const std::string& where) {
  if (!trace.is_array()) throw InputError(file, where, "not a list of trace entries");
  Bytes reserved = d.reserved, allocated = d.allocated, active = d.active;
  d.peak_reserved = reserved, d.peak_allocated = allocated, d.peak_active = active;
  bool oom_seen = false;
  for (std::size_t i = trace.size(); i-- > 0;) {
    const std::string at = fmt::format("{}[{}]", where, i);
    const Json& e = trace[i];
    if (!e.is_object() || !e.contains("action") || !e["action"].is_string())
      throw InputError(file, at + ".action", "missing or not a string");
    const std::string action = e["action"];
    const Bytes size = int_field(e, "size", file, at);
    // State before entry i, from the state after it.
    if (action == "alloc") {
      allocated -= size, active -= size;
    } else if (action == "free_requested") {
      allocated += size;
    } else if (action == "free_completed") {
      active += size;
    } else if (action == "segment_alloc" || action == "segment_map") {
      reserved -= size;
    } else if (action == "segment_free" || action == "segment_unmap") {
      reserved += size;
    } else if (action == "oom") {
      ++d.ooms;
      if (!oom_seen) {  // the last one (walking backwards, the first met)
        d.oom_requested = size;
        d.oom_device_free = int_field(e, "device_free", file, at);
        d.reserved_at_oom = reserved;
        oom_seen = true;
      }
    }
    d.peak_reserved = std::max(d.peak_reserved, reserved);
    d.peak_allocated = std::max(d.peak_allocated, allocated);
    d.peak_active = std::max(d.peak_active, active);
  }
  d.trace_entries = static_cast<int>(trace.size());
}

}  // namespace

MemorySnapshot summarize_snapshot(const Json& s, const std::string& file) {
  if (!s.is_object() || !s.contains("segments") || !s["segments"].is_array())
    throw InputError(file, "segments", "missing or not a list: not a torch memory snapshot");
  std::map<int, SnapshotDevice> by;
  const Json& segs = s["segments"];
  for (std::size_t i = 0; i < segs.size(); ++i) {
    const std::string at = fmt::format("segments[{}]", i);
    const Json& g = segs[i];
    const Bytes dev = int_field(g, "device", file, at);
    if (dev < 0 || dev > 4096) throw InputError(file, at + ".device", fmt::format("{} is not a device", dev));
    SnapshotDevice& d = by[static_cast<int>(dev)];
    d.device = static_cast<int>(dev);
    ++d.segments;
    d.reserved += int_field(g, "total_size", file, at);
    d.allocated += int_field(g, "allocated_size", file, at);
    d.active += int_field(g, "active_size", file, at);
    if (g.contains("requested_size")) d.requested += int_field(g, "requested_size", file, at);
    if (g.contains("blocks") && g["blocks"].is_array()) d.blocks += static_cast<int>(g["blocks"].size());
  }
  if (s.contains("device_traces") && !s["device_traces"].is_null()) {
    const Json& traces = s["device_traces"];
    if (!traces.is_array()) throw InputError(file, "device_traces", "not a list (one trace per device)");
    for (std::size_t dev = 0; dev < traces.size(); ++dev) {
      if (traces[dev].is_array() && traces[dev].empty() && !by.count(static_cast<int>(dev))) continue;
      SnapshotDevice& d = by[static_cast<int>(dev)];
      d.device = static_cast<int>(dev);
      replay_trace(traces[dev], d, file, fmt::format("device_traces[{}]", dev));
    }
  }
  MemorySnapshot out;
  for (auto& [dev, d] : by) {
    if (d.trace_entries == 0)
      d.peak_reserved = d.reserved, d.peak_allocated = d.allocated, d.peak_active = d.active;
    out.devices.push_back(d);
  }
  if (out.devices.empty())
    throw InputError(file, "segments", "no segment and no trace entry: the snapshot holds no CUDA memory");
  out.allocator_settings = s.contains("allocator_settings") ? s["allocator_settings"] : Json();
  return out;
}

MemorySnapshot read_memory_snapshot(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "", "cannot open the memory snapshot");
  std::stringstream ss;
  ss << in.rdbuf();
  return summarize_snapshot(read_pickle(ss.str(), path), path);
}

}  // namespace shardplan
