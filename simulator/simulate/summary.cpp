// Step time, exposed communication, throughput and MFU from the engine's timeline (docs/model.md "Summary").
#include "simulator/simulate/summary.hpp"

#include <algorithm>

namespace shardplan {

const char* to_string(CommKind k) {
  static const char* n[] = {"all_gather",    "reduce_scatter",    "all_reduce",
                            "tp_all_gather", "tp_reduce_scatter", "offload_copy",
                            "cp_ring",       "ep_all_to_all",     "optimizer_all_gather"};
  return n[static_cast<int>(k)];
}

std::string peak_phase(const Program& prog, const Timeline& tl, const std::vector<SimUnit>& units) {
  return task_phase(prog, tl.peak_task, units);
}

std::string task_phase(const Program& prog, std::int32_t task, const std::vector<SimUnit>& units,
                       int micro_batch_shift) {
  if (task < 0) return "before the step";
  static const char* kTypes[] = {"compute", "copy", "collective", "optimizer step", "marker"};
  const Task& t = prog.tasks[static_cast<std::size_t>(task)];
  const char* type = kTypes[static_cast<int>(t.type)];
  if (t.unit < 0) return type;
  return std::string(t.backward ? "backward " : "forward ") + units[static_cast<std::size_t>(t.unit)].name +
         ", micro-batch " + std::to_string(t.micro_batch + micro_batch_shift) + " (" + type + ")";
}

double model_flops_per_token(const ModelGraph& model, std::int64_t seq) {
  return 6.0 * (model.active_parameters() - static_cast<double>(model.embedding_parameters())) +
         model.attention_model_flops_per_token(seq);
}

ExposedComm exposed_comm(const Program& prog, const Timeline& tl, std::int32_t lo, std::int32_t hi,
                         std::vector<std::pair<double, double>>* intervals) {
  // Exposed communication: time in which the compute stream idles because it waits, directly or through a
  // chain of waits, on a transfer. Each idle gap before a compute-stream task (and the tail after the last
  // one) is walked back along what set each start (TaskTiming::blocked_by: a dependency or the lane's
  // previous task; a CPU block on a transfer through cpu_waited_for) and each stretch is charged to the
  // transfer running in it, so the per-kind exposed times add up to the total. Gaps whose chain ends at the
  // CPU (launch overhead, the FSDP1 limiter waiting on compute) are not communication. Transfers are the
  // tasks with a communication kind (collectives, offload copies); the host CPU running an offloaded
  // optimizer is not one.
  ExposedComm out;
  const auto n = static_cast<std::int32_t>(prog.tasks.size());
  auto charge = [&](std::int32_t x, double a, double b) {
    // [a, b) is idle compute time that ends when task x (or what x waited for) lets the compute stream go on.
    while (b > a && x >= 0) {
      out.earliest_task = std::min(out.earliest_task, x);
      const Task& t = prog.tasks[static_cast<std::size_t>(x)];
      const TaskTiming& tm = tl.timing[static_cast<std::size_t>(x)];
      if (t.type == TaskType::kMarker && t.deps[0] >= 0) {  // a stream's wait on an event: what it waited for
        x = tm.blocked_by >= 0 ? tm.blocked_by : tm.cpu_waited_for;
        continue;
      }
      if (t.comm_kind == 0xff) return;  // waits on compute or the host CPU: not communication
      const double s = std::max(a, std::min(tm.start_s, b));
      if (b > s) {
        out.by_kind[static_cast<std::size_t>(t.comm_kind)] += b - s;
        out.total_s += b - s;
        if (intervals) intervals->push_back({s, b});
      }
      b = s;
      x = tm.blocked_by >= 0 ? tm.blocked_by : tm.cpu_waited_for;
    }
  };
  // The compute stream runs FIFO, so the end of the last compute task before `lo` that took time is when the
  // stream became free before the first gap in range.
  double prev_end = 0;
  for (std::int32_t i = lo - 1; i >= 0; --i) {
    const TaskTiming& tm = tl.timing[static_cast<std::size_t>(i)];
    if (prog.tasks[static_cast<std::size_t>(i)].lane == kLaneCompute && tm.end_s > tm.start_s) {
      prev_end = tm.end_s;
      break;
    }
  }
  for (std::int32_t i = lo; i < hi; ++i) {
    const TaskTiming& tm = tl.timing[static_cast<std::size_t>(i)];
    if (prog.tasks[static_cast<std::size_t>(i)].lane != kLaneCompute || !(tm.end_s > tm.start_s)) continue;
    if (tm.start_s > prev_end) {
      const std::int32_t cause = tm.blocked_by >= 0 ? tm.blocked_by : tm.cpu_waited_for;
      charge(cause, prev_end, tm.start_s);
    }
    prev_end = std::max(prev_end, tm.end_s);
  }
  if (hi == n) {  // the step's tail: after the last compute, until the task that ends last
    std::int32_t last_end_task = -1;
    for (std::int32_t i = 0; i < n; ++i)
      if (last_end_task < 0 || tl.timing[static_cast<std::size_t>(i)].end_s >
                                   tl.timing[static_cast<std::size_t>(last_end_task)].end_s)
        last_end_task = i;
    if (last_end_task >= 0 && tl.end_s > prev_end) charge(last_end_task, prev_end, tl.end_s);
  }
  return out;
}

void summarise_time(const SummaryInputs& in, Result& r) {
  const Timeline& tl = in.timeline;
  const Program& prog = in.program;
  r.step_s = tl.end_s;
  r.compute_s = tl.lane_busy_s[kLaneCompute];
  for (const Task& t : prog.tasks) {
    if (t.comm_kind == 0xff) continue;
    r.comm[static_cast<std::size_t>(t.comm_kind)].time_s += t.duration_s;
    r.comm[static_cast<std::size_t>(t.comm_kind)].count += t.collectives;
  }
  const ExposedComm e =
      exposed_comm(prog, tl, 0, static_cast<std::int32_t>(prog.tasks.size()), r.exposed_intervals.get());
  for (int k = 0; k < kCommKinds; ++k)
    r.comm[static_cast<std::size_t>(k)].exposed_s += e.by_kind[static_cast<std::size_t>(k)];
  if (r.exposed_intervals) std::sort(r.exposed_intervals->begin(), r.exposed_intervals->end());
  r.exposed_comm_s = e.total_s;
  set_throughput(in, r);
}

void set_throughput(const SummaryInputs& in, Result& r) {
  const Plan& p = in.plan;
  const auto& gpu = in.cluster.spec().gpu;
  // A sequence is shared by the tp x cp ranks of its TP and CP groups.
  const double tokens_per_gpu =
      static_cast<double>(p.mbs) * static_cast<double>(p.seq) * p.grad_accum / p.tp / p.cp;
  r.tokens_per_s_per_gpu = r.step_s > 0 ? tokens_per_gpu / r.step_s : 0;
  r.model_flops_per_token = model_flops_per_token(in.model, p.seq);
  const double peak = p.precision == Precision::kFp32 ? gpu.peak_tf32_flops : gpu.peak_bf16_flops;
  r.mfu = r.tokens_per_s_per_gpu * r.model_flops_per_token / peak;
}

}  // namespace shardplan
