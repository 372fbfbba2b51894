// The communicator interface the NCCL sweep drives: asynchronous start, poll, abort. The NCCL implementation
// (and every NCCL version difference) lives in cuda/nccl_comm.cpp; CPU tests use a double that fails, hangs
// or errors.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "core/collectives.hpp"

namespace shardplan::calibration {

enum class CommDType { kBf16, kFp32 };
/// nccl-tests type names, as stored in profiles: "bfloat16", "float".
std::string_view comm_dtype_name(CommDType d);
std::int64_t comm_dtype_bytes(CommDType d);

/// One request to a communicator group. check = run the collective once on known inputs for verify()
/// (untimed); otherwise run `iterations` collectives back to back between two timing events.
struct CommOp {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  std::int64_t buffer_bytes = 0;  ///< whole buffer S (nccl-tests size column)
  CommDType dtype = CommDType::kBf16;
  std::int64_t iterations = 1;
  bool check = false;
};

struct CommPoll {
  enum class State { kPending, kDone, kError } state = State::kPending;
  double elapsed_s = 0;  ///< kDone of a timed op: seconds for all iterations (slowest rank)
  std::string error;     ///< kError: what the library said (ncclCommGetAsyncError, CUDA error)
};

/// A group of ranks that run collectives together (ncclCommInitAll over local GPUs, or one rank per MPI
/// process). Contract: start() returns without waiting for the GPU; poll() never blocks; after abort() the
/// object only accepts destruction. Errors in start() are thrown as std::runtime_error.
class CollectiveComm {
 public:
  virtual ~CollectiveComm() = default;
  virtual int ranks() const = 0;
  virtual int nodes() const = 0;
  /// Largest whole buffer S that fits for `kind` on every rank (input + output buffers), a multiple of
  /// ranks*elem.
  virtual std::int64_t max_buffer_bytes(CollectiveKind kind, CommDType dtype) const = 0;
  virtual void start(const CommOp& op) = 0;
  virtual CommPoll poll() = 0;
  /// After a completed check op: "" when every rank holds the expected result, else a description of the
  /// mismatch.
  virtual std::string verify() = 0;
  /// Abandons in-flight work (ncclCommAbort). Called after an error or a missed deadline.
  virtual void abort() = 0;
};

/// Creates a group of `ranks` ranks; throws std::runtime_error when that is impossible.
using CommFactory = std::function<std::unique_ptr<CollectiveComm>(int ranks)>;

/// Time source for deadlines and polling, replaceable in tests.
class SweepClock {
 public:
  virtual ~SweepClock() = default;
  virtual double now_s() = 0;
  virtual void sleep_s(double s) = 0;
};

/// std::chrono::steady_clock and std::this_thread::sleep_for.
class SteadyClock final : public SweepClock {
 public:
  double now_s() override;
  void sleep_s(double s) override;
};

}  // namespace shardplan::calibration
