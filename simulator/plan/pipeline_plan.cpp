// Pipeline parallelism's plan checks and torchtitan's stage split (docs/model.md "Pipeline parallelism").
#include "simulator/plan/pipeline_plan.hpp"

#include <algorithm>
#include <numeric>
#include <string>
#include <type_traits>

#include "core/error.hpp"

namespace shardplan {

namespace {

// The message is built only when the check fails: `why` is a string, or a callable returning one
// (resolve_plan runs on every candidate of a search; its messages name layers and degrees).
template <class Why>
void need(bool ok, const char* knob, Why&& why) {
  if (ok) return;
  if constexpr (std::is_invocable_v<Why>)
    throw InputError::flag(knob, why());
  else
    throw InputError::flag(knob, std::string(why));
}
std::string str(std::int64_t v) {
  return std::to_string(v);
}
bool v_style(PpSchedule s) {
  return s == PpSchedule::kZbv || s == PpSchedule::kDualPipeV;
}

}  // namespace

// ---- plan checks ----

void check_pipeline_mesh(const Plan& p, int gpus) {
  need(p.pp >= 1, "--pp", "must be >= 1");
  // The mesh is [pp, dp, tp] (torchtitan ParallelDims: pp, dp_replicate, dp_shard, cp, tp; tp innermost).
  need(gpus % (p.tp * p.pp) == 0, "--pp", [&] {
    return "tp x pp = " + str(p.tp) + " x " + str(p.pp) + " does not divide " + str(gpus) + " GPUs";
  });
  // Which runtimes pipeline, with which ZeRO stages and schedules: the capability table (capabilities.hpp).
}

void resolve_pipeline(Plan& p, const ModelGraph& model) {
  if (p.virtual_stages == 0)
    p.virtual_stages = p.pp_schedule == PpSchedule::kGpipe || p.pp_schedule == PpSchedule::k1F1B ? 1 : 2;
  const std::string sched = to_string(p.pp_schedule);
  // torchtitan 0.3.0 pipeline_parallel.py _get_pipeline_metadata: single-stage schedules (GPipe, 1F1B) need
  // exactly one stage per rank, multi-stage ones at least two; zbv / dualpipev raise "ZBV requires exactly 2
  // stages per rank" (torch schedules.py).
  if (p.pp_schedule == PpSchedule::kGpipe || p.pp_schedule == PpSchedule::k1F1B)
    need(p.virtual_stages == 1, "--virtual-stages",
         [&] { return sched + " runs one stage per rank; use --virtual-stages 1"; });
  else if (v_style(p.pp_schedule))
    need(p.virtual_stages == 2, "--virtual-stages",
         [&] { return sched + " needs exactly 2 stages per rank"; });
  else
    need(p.virtual_stages >= 2, "--virtual-stages",
         [&] { return sched + " needs at least 2 stages per rank"; });
  if (p.pp == 1) {
    need(p.pp_layers.empty(), "--pp-layers", "layers per stage need --pp > 1");
    return;
  }
  (void)stage_blocks(p, model.blocks());  // the split must exist
  const int m = p.grad_accum, S = p.stages();
  // Micro-batch counts each schedule accepts (torch 2.15 schedules.py): Schedule1F1B raises when
  // n_microbatches < num_stages; ScheduleDualPipeV when n_microbatches < num_stages (= 2 pp);
  // ScheduleInterleaved1F1B when n_microbatches is not a multiple of its rounds max(1, m // pp); GPipe and
  // ZBV (which pads to 2 pp - 1 and drops the padding) accept any count.
  if (p.pp_schedule == PpSchedule::k1F1B)
    need(m >= p.pp, "--grad-accum", [&] {
      return "1f1b needs at least as many micro-batches (" + str(m) + ") as stages (" + str(p.pp) + ")";
    });
  if (p.pp_schedule == PpSchedule::kDualPipeV)
    need(m >= S, "--grad-accum", [&] {
      return "dualpipev needs at least as many micro-batches (" + str(m) + ") as stages (" + str(S) + ")";
    });
  if (p.pp_schedule == PpSchedule::kInterleaved1F1B) {
    const int rounds = std::max(1, m / p.pp);
    need(m % rounds == 0, "--grad-accum", [&] {
      return "interleaved-1f1b needs the micro-batches (" + str(m) +
             ") to be a multiple of its rounds max(1, m / pp) = " + str(rounds);
    });
  }
}

// ---- stages ----

std::vector<int> stage_blocks(const Plan& p, int blocks) {
  const int S = p.stages();
  if (!p.pp_layers.empty()) {
    need(static_cast<int>(p.pp_layers.size()) == S, "--pp-layers", [&] {
      return "expected " + str(S) + " entries (pp x virtual stages), got " + str(p.pp_layers.size());
    });
    const int sum = std::accumulate(p.pp_layers.begin(), p.pp_layers.end(), 0);
    need(sum == blocks, "--pp-layers",
         [&] { return "the entries sum to " + str(sum) + ", the model has " + str(blocks) + " blocks"; });
    for (int s = 1; s + 1 < S; ++s)
      need(p.pp_layers[static_cast<std::size_t>(s)] >= 1, "--pp-layers", [&] {
        return "stage " + str(s) +
               " would be empty (only the first stage, with the embedding, and the last, with the "
               "head, may hold no block)";
      });
    return p.pp_layers;
  }
  if (S == 1) return {blocks};
  // torchtitan 0.3.0 _generate_llm_fqn_per_model_part(num_stages, num_layers, input_weight=1,
  // output_weight=1): effective layers = blocks + 2; each stage gets effective // S, the first
  // effective % S one more; the first stage's share includes the embedding, the last's the norm + head.
  const int effective = blocks + 2;
  need(S <= effective, "--pp", [&] {
    return "pp x virtual stages = " + str(S) + " exceeds the model's " + str(blocks) +
           " blocks + embedding + head (torchtitan's split leaves a stage empty)";
  });
  const int per = effective / S, extra = effective % S;
  std::vector<int> out(static_cast<std::size_t>(S));
  int left = blocks;
  for (int s = 0; s < S; ++s) {
    int n = per + (s < extra ? 1 : 0);
    if (s == 0 || s == S - 1) n -= 1;
    n = std::min(std::max(n, 0), left);
    out[static_cast<std::size_t>(s)] = n;
    left -= n;
  }
  // torchtitan's loop stops adding blocks when they run out; blocks left over cannot happen (effective
  // layers count every block once).
  return out;
}

std::vector<int> rank_stages(const Plan& p, int rank) {
  const int V = std::max(p.virtual_stages, 1);
  if (v_style(p.pp_schedule)) return {rank, 2 * p.pp - 1 - rank};
  std::vector<int> out;
  for (int v = 0; v < V; ++v) out.push_back(rank + v * p.pp);
  return out;
}

int stage_rank(const Plan& p, int stage) {
  if (v_style(p.pp_schedule)) return stage < p.pp ? stage : 2 * p.pp - 1 - stage;
  return stage % p.pp;
}

std::vector<std::size_t> stage_layer_starts(const Plan& p, const ModelGraph& model) {
  const int S = p.stages();
  const std::vector<int> per_stage = stage_blocks(p, model.blocks());
  const auto& order = model.order();
  std::vector<int> stage_of_block;
  for (int s = 0; s < S; ++s)
    for (int b = 0; b < per_stage[static_cast<std::size_t>(s)]; ++b) stage_of_block.push_back(s);
  std::vector<std::size_t> first(static_cast<std::size_t>(S) + 1, order.size());
  int block_seen = -1, block_count = -1, cur = 0;
  first[0] = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const Layer* l = order[i];
    int st = cur;
    if (l->block >= 0) {
      if (l->block != block_seen) block_seen = l->block, ++block_count;
      st = stage_of_block[static_cast<std::size_t>(block_count)];
    } else if (block_count >= 0) {
      st = S - 1;
    }
    while (cur < st) first[static_cast<std::size_t>(++cur)] = i;
  }
  while (cur < S - 1) first[static_cast<std::size_t>(++cur)] = order.size();
  return first;
}

}  // namespace shardplan
