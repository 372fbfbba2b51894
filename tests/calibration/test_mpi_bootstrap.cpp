// Run as `mpirun -np N test_mpi_bootstrap N` (ctest does, N = 2; tests/calibration/CMakeLists.txt): the MPI
// bootstrap of shardplan-calibrate's NCCL communicator (calibration/cuda/mpi_bootstrap.hpp) on the CPU -- the
// rank and size discovery, the local ranks and node count from host names, and the exchange of an
// ncclUniqueId's bytes (the real type from nccl.h; no NCCL call, no GPU) over MPI_Bcast. Rank 0's id is a
// byte pattern seeded by its own process id, so a rank that kept its own (zeroed) bytes cannot pass by
// accident. Every rank checks; the worst result is agreed over MPI; exit 0 when all checks hold on every
// rank, else 1.
#include <mpi.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "calibration/cuda/mpi_bootstrap.hpp"

namespace {

void fill_pattern(unsigned char* p, std::size_t n, unsigned seed) {
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>((seed >> (8 * (i % 4))) + 31 * i + 7);
}

int failures = 0;
void check(bool ok, int rank, const std::string& what) {
  if (ok) return;
  ++failures;
  std::fprintf(stderr, "rank %d: FAILED: %s\n", rank, what.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const int expected_size = argc > 1 ? std::atoi(argv[1]) : -1;
  int mpi_rank = -1, mpi_size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &mpi_size);

  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  static_assert(sizeof(ncclUniqueId) == NCCL_UNIQUE_ID_BYTES, "the bytes broadcast are the whole id");
  const unsigned seed = static_cast<unsigned>(::getpid());
  using shardplan::calibration::cuda::mpi_bootstrap;
  const auto t = mpi_bootstrap(MPI_COMM_WORLD, &id, sizeof id, [seed](void* p) {
    fill_pattern(static_cast<unsigned char*>(p), sizeof(ncclUniqueId), seed);
  });

  // Rank and size as MPI reports them, and the size the test was launched with.
  check(t.rank == mpi_rank, mpi_rank,
        "rank " + std::to_string(t.rank) + " != MPI_Comm_rank " + std::to_string(mpi_rank));
  check(t.size == mpi_size, mpi_rank,
        "size " + std::to_string(t.size) + " != MPI_Comm_size " + std::to_string(mpi_size));
  check(expected_size < 0 || t.size == expected_size, mpi_rank,
        "size " + std::to_string(t.size) + ", launched with -np " + std::to_string(expected_size));
  check(t.size >= 2, mpi_rank, "run under mpirun -np 2 or more: one process exchanges nothing");

  // Ranks 0..n-1 each once; on one host (mpirun here) local rank = rank and one node.
  std::vector<int> ranks(static_cast<std::size_t>(t.size)), locals(ranks.size()), nodes(ranks.size());
  MPI_Allgather(&t.rank, 1, MPI_INT, ranks.data(), 1, MPI_INT, MPI_COMM_WORLD);
  MPI_Allgather(&t.local_rank, 1, MPI_INT, locals.data(), 1, MPI_INT, MPI_COMM_WORLD);
  MPI_Allgather(&t.nodes, 1, MPI_INT, nodes.data(), 1, MPI_INT, MPI_COMM_WORLD);
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  for (int r = 0; r < t.size; ++r)
    check(sorted[static_cast<std::size_t>(r)] == r, mpi_rank, "ranks are not 0..n-1");
  check(t.nodes == 1, mpi_rank, "nodes " + std::to_string(t.nodes) + " on one host");
  check(t.local_rank == t.rank, mpi_rank, "local rank " + std::to_string(t.local_rank) + " on one host");
  check(std::all_of(nodes.begin(), nodes.end(), [&](int n) { return n == t.nodes; }), mpi_rank,
        "ranks disagree on the node count");

  // The id: every rank holds rank 0's bytes (rank 0's seed, sent separately, recreates them), and all ids
  // agree.
  unsigned root_seed = seed;
  MPI_Bcast(&root_seed, 1, MPI_UNSIGNED, 0, MPI_COMM_WORLD);
  ncclUniqueId want;
  fill_pattern(reinterpret_cast<unsigned char*>(&want), sizeof want, root_seed);
  check(std::memcmp(&id, &want, sizeof id) == 0, mpi_rank, "the ncclUniqueId bytes differ from rank 0's");
  check(t.rank == 0 || root_seed != seed, mpi_rank,
        "rank 0's seed equals this rank's: not a separate process");
  std::vector<char> all(sizeof id * static_cast<std::size_t>(t.size));
  MPI_Allgather(&id, sizeof id, MPI_BYTE, all.data(), sizeof id, MPI_BYTE, MPI_COMM_WORLD);
  for (int r = 1; r < t.size; ++r)
    check(std::memcmp(all.data(), all.data() + r * sizeof id, sizeof id) == 0, mpi_rank,
          "rank " + std::to_string(r) + "'s id differs from rank 0's");

  // A failing id maker on rank 0 becomes an exception on every rank, not a hang.
  int threw = 0;
  try {
    char buf[8];
    mpi_bootstrap(MPI_COMM_WORLD, buf, sizeof buf, [](void*) { throw std::runtime_error("no id today"); });
  } catch (const std::runtime_error& e) {
    threw = std::string(e.what()).find("no id today") != std::string::npos;
  }
  check(threw == 1, mpi_rank, "rank 0's failure to make the id did not reach this rank as an exception");

  int worst = failures;
  MPI_Allreduce(&failures, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  std::printf("rank %d of %d: local rank %d, %d node(s), ncclUniqueId (%zu bytes) %s rank 0's; %s\n", t.rank,
              t.size, t.local_rank, t.nodes, sizeof id,
              std::memcmp(&id, &want, sizeof id) == 0 ? "equal to" : "NOT equal to",
              failures ? "FAILED" : "ok");
  MPI_Finalize();
  return worst ? 1 : 0;
}
