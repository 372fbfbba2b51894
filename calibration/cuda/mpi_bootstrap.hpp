// The MPI bootstrap of shardplan-calibrate's multi-process NCCL communicator: rank and size, this process's
// local rank (its GPU) and the node count from host names, and the unique id rank 0 creates, broadcast as
// bytes to every rank. MPI only -- no CUDA, no NCCL -- so tests/calibration runs it under `mpirun -np 2` on a
// CPU-only machine.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <functional>

namespace shardplan::calibration::cuda {

/// Where this process sits among the processes of a communicator.
struct MpiTopology {
  int rank = 0, size = 1;
  int local_rank = 0;  ///< index among the processes on this host, in rank order (the GPU it uses)
  int nodes = 1;       ///< distinct host names (MPI_Get_processor_name)
};

/// Collective over `comm`: rank, size, local rank and node count.
MpiTopology mpi_topology(MPI_Comm comm);

/// Collective over `comm`: mpi_topology, then on rank 0 `make_id(id)` fills the `id_bytes` bytes at `id`
/// (e.g. ncclGetUniqueId) and MPI_Bcast gives every rank rank 0's bytes. When make_id throws on rank 0, every
/// rank throws std::runtime_error with its message (none waits for bytes that never come).
MpiTopology mpi_bootstrap(MPI_Comm comm, void* id, std::size_t id_bytes,
                          const std::function<void(void*)>& make_id);

}  // namespace shardplan::calibration::cuda
