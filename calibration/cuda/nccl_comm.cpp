// NCCL adapter (see nccl_comm.hpp). Every #if on NCCL_VERSION_CODE in shardplan lives in this file.
#include "calibration/cuda/nccl_comm.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

#ifdef SHARDPLAN_WITH_MPI
#include "calibration/cuda/mpi_bootstrap.hpp"
#endif

#include "calibration/adamw_math.hpp"
#include "calibration/cuda/cuda_check.hpp"

#if !defined(NCCL_VERSION_CODE) || NCCL_VERSION_CODE < NCCL_VERSION(2, 4, 0)
#error "shardplan-calibrate needs NCCL >= 2.4 (ncclCommGetAsyncError, ncclCommAbort)"
#endif

namespace shardplan::calibration::cuda {

namespace {

std::string nccl_error_text(ncclResult_t r, ncclComm_t comm) {
  std::string s = ncclGetErrorString(r);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
  const char* last = ncclGetLastError(comm);
  if (last && *last) s += std::string(" (") + last + ")";
#else
  (void)comm;
#endif
  return s;
}

void check_nccl(ncclResult_t r, const char* what, ncclComm_t comm = nullptr) {
  if (r == ncclSuccess) return;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
  if (r == ncclInProgress) return;
#endif
  throw std::runtime_error(std::string(what) + ": " + nccl_error_text(r, comm));
}

bool async_in_progress(ncclResult_t r) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
  return r == ncclInProgress;
#else
  (void)r;
  return false;
#endif
}

ncclDataType_t nccl_type(CommDType d) {
  if (d == CommDType::kFp32) return ncclFloat32;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0)
  return ncclBfloat16;
#else
  throw std::runtime_error("bf16 collectives need NCCL >= 2.10");
#endif
}

/// Element value written by rank r in checks: small integers are exact in bf16 and fp32, and sums over <= 64
/// ranks ((r+1) summed) stay exact too.
float check_value(int rank) {
  return static_cast<float>(rank + 1);
}

/// One GPU of the group owned by this process.
struct Local {
  int device = 0;
  int rank = 0;  ///< global rank
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  void* send = nullptr;
  void* recv = nullptr;
  std::int64_t capacity_bytes = 0;  ///< of each of send and recv
};

class NcclComm final : public CollectiveComm {
 public:
  NcclComm(std::vector<Local> locals, int ranks, int nodes)
      : locals_(std::move(locals)), ranks_(ranks), nodes_(nodes) {
    for (auto& l : locals_) {
      SP_CUDA(cudaSetDevice(l.device));
      SP_CUDA(cudaStreamCreateWithFlags(&l.stream, cudaStreamNonBlocking));
      SP_CUDA(cudaEventCreate(&l.start));
      SP_CUDA(cudaEventCreate(&l.stop));
    }
  }
  ~NcclComm() override {
    for (auto& l : locals_) {
      cudaSetDevice(l.device);
      if (!aborted_ && l.comm) {
        cudaStreamSynchronize(l.stream);
        ncclCommDestroy(l.comm);
      }
      cudaFree(l.send), cudaFree(l.recv);
      if (l.start) cudaEventDestroy(l.start);
      if (l.stop) cudaEventDestroy(l.stop);
      if (l.stream) cudaStreamDestroy(l.stream);
    }
  }

  int ranks() const override { return ranks_; }
  int nodes() const override { return nodes_; }

  std::int64_t max_buffer_bytes(CollectiveKind kind, CommDType dtype) const override {
    std::int64_t free_min = INT64_MAX;
    for (const auto& l : locals_) {
      size_t free_b = 0, total_b = 0;
      SP_CUDA(cudaSetDevice(l.device));
      SP_CUDA(cudaMemGetInfo(&free_b, &total_b));
      free_min = std::min<std::int64_t>(free_min, static_cast<std::int64_t>(free_b) + 2 * l.capacity_bytes);
    }
    // Out-of-place buffers: AG send S/n + recv S; RS send S + recv S/n; AR send S + recv S. Keep 20 %
    // headroom for NCCL's own buffers; allocate both buffers at the larger size for simplicity (2 S).
    (void)kind;
    const std::int64_t unit = static_cast<std::int64_t>(ranks_) * comm_dtype_bytes(dtype);
    const std::int64_t s = static_cast<std::int64_t>(0.8 * static_cast<double>(free_min) / 2.0);
    return s / unit * unit;
  }

  void start(const CommOp& op) override {
    if (aborted_) throw std::runtime_error("communicator was aborted");
    op_ = op;
    ensure_capacity(op.buffer_bytes);
    if (op.check) fill_inputs();
    for (auto& l : locals_) {
      SP_CUDA(cudaSetDevice(l.device));
      SP_CUDA(cudaEventRecord(l.start, l.stream));
    }
    for (std::int64_t it = 0; it < (op.check ? 1 : op.iterations); ++it) {
      check_nccl(ncclGroupStart(), "ncclGroupStart");
      for (auto& l : locals_) enqueue(l);
      check_nccl(ncclGroupEnd(), "ncclGroupEnd");
    }
    for (auto& l : locals_) {
      SP_CUDA(cudaSetDevice(l.device));
      SP_CUDA(cudaEventRecord(l.stop, l.stream));
    }
  }

  CommPoll poll() override {
    double slowest_ms = 0;
    for (auto& l : locals_) {
      cudaSetDevice(l.device);
      const cudaError_t q = cudaEventQuery(l.stop);
      if (q == cudaErrorNotReady) {
        ncclResult_t async = ncclSuccess;
        const ncclResult_t r = ncclCommGetAsyncError(l.comm, &async);
        if (r != ncclSuccess)
          return {CommPoll::State::kError, 0, "ncclCommGetAsyncError: " + nccl_error_text(r, l.comm)};
        if (async != ncclSuccess && !async_in_progress(async))
          return {
              CommPoll::State::kError, 0,
              "NCCL async error on rank " + std::to_string(l.rank) + ": " + nccl_error_text(async, l.comm)};
        return {CommPoll::State::kPending, 0, ""};
      }
      if (q != cudaSuccess)
        return {CommPoll::State::kError, 0, std::string("CUDA: ") + cudaGetErrorString(q)};
      float ms = 0;
      if (cudaEventElapsedTime(&ms, l.start, l.stop) == cudaSuccess)
        slowest_ms = std::max<double>(slowest_ms, ms);
    }
    return {CommPoll::State::kDone, slowest_ms * 1e-3, ""};
  }

  std::string verify() override {
    const std::int64_t elem = comm_dtype_bytes(op_.dtype);
    const std::int64_t count = op_.buffer_bytes / elem;  // elements of the whole buffer
    const std::int64_t per_rank = count / ranks_;
    const float sum = static_cast<float>(ranks_) * (ranks_ + 1) / 2.0f;
    for (auto& l : locals_) {
      SP_CUDA(cudaSetDevice(l.device));
      const std::int64_t out_count = op_.kind == CollectiveKind::kReduceScatter ? per_rank : count;
      // Check the whole output up to 4 Mi elements, else a window at each end (first and last rank's data).
      const std::int64_t window = std::min<std::int64_t>(out_count, std::int64_t{1} << 22);
      for (const std::int64_t first : {std::int64_t{0}, out_count - window}) {
        std::vector<unsigned char> host(static_cast<std::size_t>(window * elem));
        SP_CUDA(cudaMemcpy(host.data(), static_cast<unsigned char*>(l.recv) + first * elem, host.size(),
                           cudaMemcpyDeviceToHost));
        for (std::int64_t j = 0; j < window; ++j) {
          const std::int64_t i = first + j;
          float got = 0;
          if (op_.dtype == CommDType::kFp32) {
            std::memcpy(&got, &host[static_cast<std::size_t>(j * 4)], 4);
          } else {
            std::uint16_t b;
            std::memcpy(&b, &host[static_cast<std::size_t>(j * 2)], 2);
            got = bf16_bits_to_float(b);
          }
          float want = sum;  // reduce-scatter, all-reduce
          if (op_.kind == CollectiveKind::kAllGather) want = check_value(static_cast<int>(i / per_rank));
          if (got != want)
            return "rank " + std::to_string(l.rank) + " element " + std::to_string(i) + ": expected " +
                   std::to_string(want) + ", got " + std::to_string(got);
        }
      }
    }
    return "";
  }

  void abort() override {
    if (aborted_) return;
    aborted_ = true;
    for (auto& l : locals_)
      if (l.comm) ncclCommAbort(l.comm);
  }

 private:
  void ensure_capacity(std::int64_t bytes) {
    for (auto& l : locals_) {
      if (l.capacity_bytes >= bytes) continue;
      SP_CUDA(cudaSetDevice(l.device));
      SP_CUDA(cudaStreamSynchronize(l.stream));
      cudaFree(l.send), cudaFree(l.recv);
      l.send = l.recv = nullptr;
      l.capacity_bytes = 0;
      SP_CUDA(cudaMalloc(&l.send, static_cast<size_t>(bytes)));
      SP_CUDA(cudaMalloc(&l.recv, static_cast<size_t>(bytes)));
      l.capacity_bytes = bytes;
    }
  }

  void fill_inputs() {
    const std::int64_t elem = comm_dtype_bytes(op_.dtype);
    const std::int64_t count = op_.buffer_bytes / elem;
    const std::int64_t in_count = op_.kind == CollectiveKind::kAllGather ? count / ranks_ : count;
    for (auto& l : locals_) {
      std::vector<unsigned char> host(static_cast<std::size_t>(in_count * elem));
      const float v = check_value(l.rank);
      for (std::int64_t i = 0; i < in_count; ++i) {
        if (op_.dtype == CommDType::kFp32)
          std::memcpy(&host[i * 4], &v, 4);
        else {
          const std::uint16_t b = float_to_bf16_bits(v);
          std::memcpy(&host[i * 2], &b, 2);
        }
      }
      SP_CUDA(cudaSetDevice(l.device));
      SP_CUDA(cudaMemcpy(l.send, host.data(), host.size(), cudaMemcpyHostToDevice));
      SP_CUDA(cudaMemset(l.recv, 0, static_cast<size_t>(op_.buffer_bytes)));
    }
  }

  void enqueue(Local& l) {
    const std::int64_t elem = comm_dtype_bytes(op_.dtype);
    const size_t count = static_cast<size_t>(op_.buffer_bytes / elem);
    const size_t per_rank = count / static_cast<size_t>(ranks_);
    const ncclDataType_t t = nccl_type(op_.dtype);
    switch (op_.kind) {
      case CollectiveKind::kAllGather:
        check_nccl(ncclAllGather(l.send, l.recv, per_rank, t, l.comm, l.stream), "ncclAllGather", l.comm);
        break;
      case CollectiveKind::kReduceScatter:
        check_nccl(ncclReduceScatter(l.send, l.recv, per_rank, t, ncclSum, l.comm, l.stream),
                   "ncclReduceScatter", l.comm);
        break;
      case CollectiveKind::kAllReduce:
        check_nccl(ncclAllReduce(l.send, l.recv, count, t, ncclSum, l.comm, l.stream), "ncclAllReduce",
                   l.comm);
        break;
      default:
        throw std::runtime_error("shardplan-calibrate does not benchmark " +
                                 std::string(collective_name(op_.kind)));
    }
  }

  std::vector<Local> locals_;
  int ranks_ = 0, nodes_ = 1;
  CommOp op_;
  bool aborted_ = false;
};

}  // namespace

std::string nccl_runtime_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "";
  if (v >= 20000)
    return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
  return std::to_string(v / 1000) + "." + std::to_string(v / 100 % 10) + "." + std::to_string(v % 100);
}

std::unique_ptr<CollectiveComm> make_local_nccl_comm(int ranks) {
  int devices = 0;
  SP_CUDA(cudaGetDeviceCount(&devices));
  if (ranks < 1 || ranks > devices)
    throw std::runtime_error("need " + std::to_string(ranks) + " GPUs, have " + std::to_string(devices));
  std::vector<ncclComm_t> comms(static_cast<size_t>(ranks));
  std::vector<int> devs(static_cast<size_t>(ranks));
  for (int i = 0; i < ranks; ++i) devs[static_cast<size_t>(i)] = i;
  check_nccl(ncclCommInitAll(comms.data(), ranks, devs.data()), "ncclCommInitAll");
  std::vector<Local> locals(static_cast<size_t>(ranks));
  for (int i = 0; i < ranks; ++i) {
    locals[static_cast<size_t>(i)].device = i;
    locals[static_cast<size_t>(i)].rank = i;
    locals[static_cast<size_t>(i)].comm = comms[static_cast<size_t>(i)];
  }
  return std::make_unique<NcclComm>(std::move(locals), ranks, 1);
}

#ifdef SHARDPLAN_WITH_MPI
std::unique_ptr<CollectiveComm> make_mpi_nccl_comm() {
  // Rank, size, local rank (the GPU) and node count, and rank 0's unique id on every rank
  // (mpi_bootstrap.hpp).
  ncclUniqueId id;
  const MpiTopology t = mpi_bootstrap(MPI_COMM_WORLD, &id, sizeof id, [](void* p) {
    check_nccl(ncclGetUniqueId(static_cast<ncclUniqueId*>(p)), "ncclGetUniqueId");
  });
  SP_CUDA(cudaSetDevice(t.local_rank));
  std::vector<Local> locals(1);
  locals[0].device = t.local_rank;
  locals[0].rank = t.rank;
  check_nccl(ncclCommInitRank(&locals[0].comm, t.size, id, t.rank), "ncclCommInitRank");
  return std::make_unique<NcclComm>(std::move(locals), t.size, t.nodes);
}
#endif

}  // namespace shardplan::calibration::cuda
