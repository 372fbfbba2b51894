// PyTorch's CUDA out-of-memory message, read back into bytes: what `validate --oom-message` compares with the
// prediction for the stated plan.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/units.hpp"

namespace shardplan {

/// The figures of one "CUDA out of memory. Tried to allocate ..." message. Each is what torch's format_size
/// printed (2 decimals of B / KiB / MiB / GiB), so a figure is exact to half a unit of its last digit.
struct OomMessage {
  /// "torch>=2.1" ("GPU 0 has a total capacity of ... Of the allocated memory ...") or "torch<2.1" ("(GPU 0;
  /// ... total capacity; ... already allocated; ... free; ... reserved in total by PyTorch)").
  std::string wording;
  int device = -1;           ///< -1 when the message printed no index
  Bytes requested = 0;       ///< "Tried to allocate": the allocator's rounded allocation size
  Bytes total_capacity = 0;  ///< cudaMemGetInfo's total
  Bytes free = 0;            ///< cudaMemGetInfo's free at the failure
  Bytes allocated = 0;       ///< allocated by PyTorch (with private pools)
  Bytes reserved_unallocated = 0;
  std::optional<Bytes> allowed;         ///< set_per_process_memory_fraction's cap, when set
  std::optional<Bytes> private_pools;   ///< "with X allocated in private pools (e.g., CUDA Graphs)"
  std::optional<Bytes> process_in_use;  ///< "Including non-PyTorch memory, this process has X memory in use"
  std::vector<std::pair<long long, Bytes>> other_processes;  ///< "Process PID has X memory in use"
  int messages = 1;                                          ///< OOM messages in the file (the first is read)

  Bytes reserved() const { return allocated + reserved_unallocated; }
  /// This process's memory outside PyTorch's allocator (CUDA context, NCCL, cuBLAS workspaces ...): in use
  /// less reserved. Unknown when NVML did not list this process.
  std::optional<Bytes> non_pytorch() const {
    if (!process_in_use) return std::nullopt;
    return *process_in_use - reserved();
  }
};

/// One figure as torch's format_size prints it ("74.12 GiB", "512 bytes"): the decimal read exactly and
/// rounded to the nearest byte. InputError naming `file` and `what` for anything else.
Bytes parse_torch_size(const std::string& text, const std::string& file, const std::string& what);

/// The first CUDA OOM message in `text` (a log or traceback; line breaks and repeated spaces inside the
/// message are read as one space). InputError naming `file` when there is none or a figure is malformed.
OomMessage parse_oom_message(const std::string& text, const std::string& file);
/// Reads FILE and parses it (InputError when it cannot be read).
OomMessage read_oom_message(const std::string& path);

}  // namespace shardplan
