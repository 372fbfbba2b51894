// NCCL implementation of CollectiveComm: the ONE adapter over NCCL versions (bf16 type, async error query,
// last error text, in-progress state). Single process: ncclCommInitAll over local GPUs 0..n-1. With
// SHARDPLAN_WITH_MPI: one GPU per MPI process, the unique id broadcast over MPI (bootstrap only).
#pragma once
#include <memory>
#include <string>

#include "calibration/comm.hpp"

namespace shardplan::calibration::cuda {

/// ncclGetVersion as "2.28.9".
std::string nccl_runtime_version();

/// Communicator over local GPUs 0..ranks-1 (ncclCommInitAll). Throws std::runtime_error on failure.
std::unique_ptr<CollectiveComm> make_local_nccl_comm(int ranks);

#ifdef SHARDPLAN_WITH_MPI
/// Communicator over all MPI processes, one GPU each (local rank). MPI must be initialised.
std::unique_ptr<CollectiveComm> make_mpi_nccl_comm();
#endif

}  // namespace shardplan::calibration::cuda
