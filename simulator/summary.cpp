// Step time, exposed communication, throughput and MFU from the engine's timeline (docs/model.md "Summary").
#include "simulator/summary.hpp"

#include <algorithm>

namespace shardplan {

const char* to_string(CommKind k) {
  static const char* n[] = {"all_gather", "reduce_scatter", "all_reduce", "tp_all_gather", "tp_reduce_scatter",
                            "offload_copy"};
  return n[static_cast<int>(k)];
}

std::string peak_phase(const Program& prog, const Timeline& tl, const std::vector<SimUnit>& units) {
  if (tl.peak_task < 0) return "before the step";
  static const char* kTypes[] = {"compute", "copy", "collective", "optimizer step", "marker"};
  const Task& t = prog.tasks[static_cast<std::size_t>(tl.peak_task)];
  const char* type = kTypes[static_cast<int>(t.type)];
  if (t.unit < 0) return type;
  return std::string(t.backward ? "backward " : "forward ") + units[static_cast<std::size_t>(t.unit)].name +
         ", micro-batch " + std::to_string(t.micro_batch) + " (" + type + ")";
}

double model_flops_per_token(const ModelGraph& model, std::int64_t seq) {
  const auto& s = model.spec();
  return 6.0 * static_cast<double>(model.parameters() - model.embedding_parameters()) +
         12.0 * s.layers * static_cast<double>(s.heads * s.head_dim) * static_cast<double>(seq);
}

void summarise_time(const SummaryInputs& in, Result& r) {
  const Plan& p = in.plan;
  const Timeline& tl = in.timeline;
  const Program& prog = in.program;
  r.step_s = tl.end_s;
  r.compute_s = tl.lane_busy_s[kLaneCompute];
  // Exposed communication: time in which some collective runs and the compute lane is idle.
  struct Iv {
    double a, b;
    int kind;
  };
  std::vector<Iv> comm_iv;
  std::vector<std::pair<double, double>> busy;
  for (std::size_t i = 0; i < prog.tasks.size(); ++i) {
    const Task& t = prog.tasks[i];
    const auto& tm = tl.timing[i];
    if (t.lane == kLaneCompute) {
      if (t.duration_s > 0) busy.push_back({tm.start_s, tm.end_s});
      continue;
    }
    const int kind = t.comm_kind == 0xff ? static_cast<int>(CommKind::kAllGather) : t.comm_kind;
    comm_iv.push_back({tm.start_s, tm.end_s, kind});
    r.comm[static_cast<std::size_t>(kind)].time_s += t.duration_s;
    r.comm[static_cast<std::size_t>(kind)].count++;
  }
  // Compute-lane busy intervals are disjoint and sorted (FIFO lane).
  auto idle_overlap = [&](double a, double b) {
    double covered = 0;
    auto it = std::lower_bound(busy.begin(), busy.end(), std::pair<double, double>{a, -1e300},
                               [](const auto& x, const auto& y) { return x.second < y.first; });
    for (; it != busy.end() && it->first < b; ++it) covered += std::max(0.0, std::min(b, it->second) - std::max(a, it->first));
    return (b - a) - covered;
  };
  for (const auto& iv : comm_iv) r.comm[static_cast<std::size_t>(iv.kind)].exposed_s += idle_overlap(iv.a, iv.b);
  // Union of collective intervals, minus compute.
  std::sort(comm_iv.begin(), comm_iv.end(), [](const Iv& x, const Iv& y) { return x.a < y.a; });
  double exposed = 0, ca = -1, cb = -1;
  for (const auto& iv : comm_iv) {
    if (iv.a > cb) {
      if (cb > ca) exposed += idle_overlap(ca, cb);
      ca = iv.a, cb = iv.b;
    } else {
      cb = std::max(cb, iv.b);
    }
  }
  if (cb > ca) exposed += idle_overlap(ca, cb);
  // TP collectives are folded into compute (not overlapped unless async): all exposed.
  for (CommKind k : {CommKind::kTpAllGather, CommKind::kTpReduceScatter}) {
    auto& c = r.comm[static_cast<int>(k)];
    c.exposed_s = p.async_tp ? in.costs.constants().async_tp_exposed * c.time_s : c.time_s;
    exposed += c.exposed_s;
  }
  r.exposed_comm_s = exposed;
  const auto& gpu = in.cluster.spec().gpu;
  const double tokens_per_gpu = static_cast<double>(p.mbs) * static_cast<double>(p.seq) * p.grad_accum / p.tp;
  r.tokens_per_s_per_gpu = r.step_s > 0 ? tokens_per_gpu / r.step_s : 0;
  r.model_flops_per_token = model_flops_per_token(in.model, p.seq);
  const double peak = p.precision == Precision::kFp32 ? gpu.peak_tf32_flops : gpu.peak_bf16_flops;
  r.mfu = r.tokens_per_s_per_gpu * r.model_flops_per_token / peak;
}

}  // namespace shardplan
