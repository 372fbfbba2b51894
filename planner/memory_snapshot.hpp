// A PyTorch CUDA memory snapshot (torch.cuda.memory._snapshot() / _dump_snapshot's pickle), read without
// executing it and summed per device: what `validate --memory-snapshot` compares with the prediction.
#pragma once
#include <string>
#include <vector>

#include "core/json_reader.hpp"
#include "core/units.hpp"

namespace shardplan {

/// One device's memory in a snapshot. From "segments" (the allocator's state when the snapshot was taken):
/// reserved = sum of total_size, allocated = sum of allocated_size, active = sum of active_size, requested =
/// sum of requested_size. From "device_traces" (the recorded history, when _record_memory_history was on):
/// the peaks over the trace, found by undoing its events from the snapshot's state backwards.
struct SnapshotDevice {
  int device = 0;
  int segments = 0, blocks = 0;
  Bytes reserved = 0, allocated = 0, active = 0, requested = 0;
  int trace_entries = 0;  ///< 0: no history recorded; the peaks below are the state at the snapshot
  /// Peaks over the trace window: reserved from segment_alloc / segment_free / segment_map / segment_unmap
  /// (segment sizes, exact), allocated from alloc / free_requested and active from alloc / free_completed
  /// (these entries carry the requested size, not the rounded block, so these two are in requested bytes
  /// added to the allocated / active state).
  Bytes peak_reserved = 0, peak_allocated = 0, peak_active = 0;
  int ooms = 0;               ///< "oom" entries in the trace
  Bytes oom_requested = 0;    ///< the last oom entry's size
  Bytes oom_device_free = 0;  ///< and its device_free
  Bytes reserved_at_oom = 0;  ///< reserved when it happened (from the trace)
};

struct MemorySnapshot {
  std::vector<SnapshotDevice> devices;  ///< devices with at least one segment or trace entry, by index
  Json allocator_settings;              ///< as recorded (null when absent)
};

/// Sums a snapshot already read into JSON. InputError naming `file` and the field for a structure that is not
/// a torch memory snapshot.
MemorySnapshot summarize_snapshot(const Json& snapshot, const std::string& file);
/// Reads the pickle at `path` with the restricted reader (planner/pickle_reader.hpp) and sums it.
MemorySnapshot read_memory_snapshot(const std::string& path);

}  // namespace shardplan
