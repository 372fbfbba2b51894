// MPI bootstrap (see mpi_bootstrap.hpp).
#include "calibration/cuda/mpi_bootstrap.hpp"

#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace shardplan::calibration::cuda {

MpiTopology mpi_topology(MPI_Comm comm) {
  MpiTopology t;
  MPI_Comm_rank(comm, &t.rank);
  MPI_Comm_size(comm, &t.size);
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_Get_processor_name(host, &len);
  std::vector<char> all(static_cast<std::size_t>(t.size) * MPI_MAX_PROCESSOR_NAME);
  MPI_Allgather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, comm);
  std::set<std::string> hosts;
  for (int r = 0; r < t.size; ++r) {
    const std::string h(&all[static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME]);
    hosts.insert(h);
    if (r < t.rank && h == host) ++t.local_rank;
  }
  t.nodes = static_cast<int>(hosts.size());
  return t;
}

MpiTopology mpi_bootstrap(MPI_Comm comm, void* id, std::size_t id_bytes,
                          const std::function<void(void*)>& make_id) {
  const MpiTopology t = mpi_topology(comm);
  // Rank 0 says first whether it has an id (and if not, why), so that no rank waits in MPI_Bcast for one.
  std::string error;
  if (t.rank == 0) {
    try {
      make_id(id);
    } catch (const std::exception& e) {
      error = e.what();
      if (error.empty()) error = "unknown error";
    }
  }
  int error_len = static_cast<int>(error.size());
  MPI_Bcast(&error_len, 1, MPI_INT, 0, comm);
  if (error_len > 0) {
    error.resize(static_cast<std::size_t>(error_len));
    MPI_Bcast(error.data(), error_len, MPI_CHAR, 0, comm);
    throw std::runtime_error("MPI bootstrap: rank 0 could not create the unique id: " + error);
  }
  MPI_Bcast(id, static_cast<int>(id_bytes), MPI_BYTE, 0, comm);
  return t;
}

}  // namespace shardplan::calibration::cuda
