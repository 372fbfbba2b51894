// Pipeline mechanisms from the frameworks' code (docs/model.md "Pipeline parallelism"): torch's multi-stage
// schedules and FSDP residency against torch's own output (tests/data/pp_orders.json, written by
// tools/reference/pp_orders.py from torch 2.15), receive posting, the wait on each stage's gradient
// reduction, re-gathers under the residency window, per-boundary send links, and two properties: a pipelined
// step is never faster than its critical path, and faster sends never make it slower. Also the Megatron
// runtime's Transformer Engine fp8 casts and torchtitan's gathered column-parallel inputs.
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "sim_helpers.hpp"
#include "simulator/memory/layer_memory.hpp"
#include "simulator/simulate/pipeline_step.hpp"

using namespace shardplan;
using shardplan::test::Setup;

namespace {

// Identical stages without activation bytes: these tests look at time only.
PipelineInputs stages(PpSchedule s, int pp, int V, int m, double f, double b, double p2p = 0) {
  return test::equal_stages(s, pp, V, m, f, b, p2p, 0);
}

PpSchedule schedule_named(const std::string& n) {
  if (n == "interleaved-1f1b") return PpSchedule::kInterleaved1F1B;
  if (n == "zbv") return PpSchedule::kZbv;
  return PpSchedule::kDualPipeV;
}

PipeOp op_named(const std::string& n) {
  if (n == "F") return PipeOp::kForward;
  if (n == "B") return PipeOp::kBackward;
  if (n == "I") return PipeOp::kBackwardInput;
  return PipeOp::kBackwardWeight;
}

double makespan(const PipelineInputs& in) {
  return run_pipeline(in).makespan_s;
}

}  // namespace

TEST_CASE("multi-stage schedules and their FSDP residency are torch's own (torch 2.15 schedules.py)",
          "[simulator][pipeline][torch]") {
  std::ifstream f(std::string(SHARDPLAN_TEST_DATA) + "/pp_orders.json");
  REQUIRE(f.good());
  const auto doc = nlohmann::json::parse(f);
  int compared = 0;
  for (const auto& c : doc.at("cases")) {
    const std::string name = c.at("schedule");
    const int pp = c.at("pp"), V = c.at("virtual_stages"), m = c.at("micro_batches");
    INFO(name << " pp " << pp << " V " << V << " m " << m);
    const auto orders = pipeline_order(schedule_named(name), pp, V, m);
    for (int r = 0; r < pp; ++r) {
      INFO("rank " << r);
      const auto& want = c.at("ranks")[static_cast<std::size_t>(r)];
      const auto& got = orders[static_cast<std::size_t>(r)];
      REQUIRE(got.size() == want.at("actions").size());
      for (std::size_t i = 0; i < got.size(); ++i) {
        const auto& a = want.at("actions")[i];
        INFO("action " << i);
        CHECK(got[i].op == op_named(a[0]));
        CHECK(got[i].stage == a[1].get<int>());
        CHECK(got[i].micro_batch == a[2].get<int>());
      }
      // _add_unshard_reshard(max_active_stages = 3): the same UNSHARD / RESHARD before every action.
      const Residency res = fsdp_residency(got, 3);
      for (std::size_t i = 0; i < got.size(); ++i) {
        CHECK(res.unshard[i] == want.at("unshard")[i].get<std::vector<int>>());
        CHECK(res.reshard[i] == want.at("reshard")[i].get<std::vector<int>>());
      }
      ++compared;
    }
  }
  CHECK(compared == 49);  // the ranks of 7 interleaved, 3 zbv and 3 dualpipev cases
}

TEST_CASE("receives posted just before the consumer expose every send, posted ahead, one action hides it",
          "[simulator][pipeline]") {
  // 1F1B, pp 2, m 2, F = 1, B = 2, send d (derivation in the comments).
  const double d = 0.25;
  PipelineInputs in = stages(PpSchedule::k1F1B, 2, 1, 2, 1, 2, d);
  // Rank 0: F0 [0,1] F1 [1,2]. Rank 1: F0 arrives 1 + d, [1+d, 2+d]; B0 [2+d, 4+d].
  // Posted at the consumer: rank 1's F1 receive starts after B0 (4+d): F1 [4+2d, 5+2d], B1 [5+2d, 7+2d];
  // rank 0's B0 receive starts after F1 (2): max(4+d, 2) + d = 4+2d, B0 [4+2d, 6+2d]; B1's after B0:
  // max(7+2d, 6+2d) + d, B1 [7+3d, 9+3d].
  in.recv_posting = RecvPosting::kAtConsumer;
  CHECK(makespan(in) == Approx(9 + 3 * d));
  // Posted one action ahead: rank 1's F1 receive overlaps B0 (F1 [4+d, 5+d], B1 [5+d, 7+d]); rank 0's B0
  // arrives max(4+d, 1) + d = 4+2d, its B1 max(7+d, 2) + d = 7+2d: [7+2d, 9+2d].
  in.recv_posting = RecvPosting::kAhead;
  CHECK(makespan(in) == Approx(9 + 2 * d));
  // As soon as produced (torch's runtime): rank 1's F1 data (ready at 2) waits for F0 in progress [1+d, 2+d],
  // arrives at 2+2d, before rank 1 is free; rank 0's B1 data (7+d) finds rank 0 idle since B0 (6+2d): the
  // same 9 + 2d.
  in.recv_posting = RecvPosting::kAsap;
  CHECK(makespan(in) == Approx(9 + 2 * d));
  // A sender that finishes while the receiver computes a long action: the transfer waits for that action.
  PipelineInputs g = stages(PpSchedule::kGpipe, 2, 1, 2, 1, 2, d);
  g.stages[1].fwd_s = 3;  // rank 1: F0 [1+d, 4+d]; rank 0's F1 ends at 2, inside it
  g.recv_posting = RecvPosting::kAsap;
  const PipelineRun run = run_pipeline(g);
  // F1 on rank 1 starts at max(4+d (free), max(2, 4+d) + d) = 4+2d and ends 7+2d; its backwards follow.
  CHECK(run.rank_end_s[1] == Approx(7 + 2 * d + 2 + 2));
}

TEST_CASE("torch FSDP stages: the compute waits on each stage's gradient reduction",
          "[simulator][pipeline]") {
  // 1F1B pp 2, m 2, F = 1, B = 2, free sends: rank 1 ends at 1 + 1 + 2 + 1 + 2 = 7, rank 0 at 9; a reduction
  // of r after the last backward: without the wait it runs beside nothing (the rank's compute is done), with
  // it the rank's compute ends r later; the data-parallel stream ends at 9 + r either way.
  const double r = 0.5;
  PipelineInputs in = stages(PpSchedule::k1F1B, 2, 1, 2, 1, 2);
  for (auto& c : in.stages) c.reduce_s = r;
  PipelineRun free_run = run_pipeline(in);
  CHECK(free_run.rank_end_s[0] == Approx(9));
  CHECK(free_run.rank_dp_end_s[0] == Approx(9 + r));
  in.reduce_waits = true;
  PipelineRun wait_run = run_pipeline(in);
  CHECK(wait_run.rank_end_s[0] == Approx(9 + r));
  CHECK(wait_run.rank_reduce_wait_s[0] == Approx(r));
  // Interleaved, 2 stages per rank: the first-finished stage's reduction now delays the rank's later
  // backwards, so the waits make the step longer than the last reduction alone.
  PipelineInputs iv = stages(PpSchedule::kInterleaved1F1B, 2, 2, 4, 1, 2);
  for (auto& c : iv.stages) c.reduce_s = r;
  const PipelineRun a = run_pipeline(iv);
  iv.reduce_waits = true;
  const PipelineRun b = run_pipeline(iv);
  CHECK(b.rank_reduce_wait_s[0] == Approx(2 * r));
  CHECK(b.makespan_s > a.makespan_s);
  CHECK(std::max(b.rank_end_s[0], b.rank_dp_end_s[0]) > std::max(a.rank_end_s[0], a.rank_dp_end_s[0]));
}

TEST_CASE("the residency window re-gathers evicted stages: torch's count of UNSHARDs, and less memory",
          "[simulator][pipeline]") {
  // Interleaved pp 4, V 4, m 8: torch's _add_unshard_reshard unshards rank 0's stages 3 + 7 times (the golden
  // file's first UNSHARDs plus re-gathers: 0 at actions 8, 37, 52; 4 at 12, 48; 8 at 21, 42).
  PipelineInputs in = stages(PpSchedule::kInterleaved1F1B, 4, 4, 8, 1, 2);
  const double g = 0.125;
  for (auto& c : in.stages) c.gather_s = g, c.gathered_bytes = 100;
  const Residency res = fsdp_residency(pipeline_order(in.schedule, 4, 4, 8)[0], 3);
  int unshards = 0;
  for (const auto& u : res.unshard) unshards += static_cast<int>(u.size());
  CHECK(unshards == 4 + 7);  // every stage's first UNSHARD, then 7 re-gathers
  in.max_active_stages = 3;
  const PipelineRun w = run_pipeline(in);
  CHECK(w.rank_regather_s[0] == Approx((unshards - 3) * g));  // the initial three run ahead
  // At most three stages' parameters unsharded at the peak, against all four without the window.
  CHECK(w.rank_peak[0].gathered_bytes <= 300);
  in.max_active_stages = 0;
  CHECK(run_pipeline(in).rank_peak[0].gathered_bytes == 400);
}

TEST_CASE("property: a pipelined step is never faster than its critical path, and faster sends never slow it",
          "[simulator][pipeline][property]") {
  std::mt19937 rng(28);
  std::uniform_real_distribution<double> u(0.2, 2.0);
  struct Shape {
    PpSchedule s;
    int pp, V, m;
  };
  const Shape shapes[] = {{PpSchedule::k1F1B, 4, 1, 8},
                          {PpSchedule::kGpipe, 3, 1, 5},
                          {PpSchedule::kInterleaved1F1B, 4, 2, 8},
                          {PpSchedule::kInterleaved1F1B, 2, 4, 6},
                          {PpSchedule::kZbv, 3, 2, 6},
                          {PpSchedule::kDualPipeV, 2, 2, 4}};
  for (const Shape& sh : shapes)
    for (int trial = 0; trial < 20; ++trial) {
      PipelineInputs in = stages(sh.s, sh.pp, sh.V, sh.m, 1, 2);
      for (auto& c : in.stages) {
        c.fwd_s = u(rng);
        c.bwd_s = 2 * u(rng);
        c.bwd_input_s = c.bwd_weight_s = c.bwd_s / 2;
        c.gather_s = 0.1 * u(rng);
        c.reduce_s = 0.1 * u(rng);
      }
      const int S = sh.pp * sh.V;
      for (int e = 0; e + 1 < S; ++e) in.edge_p2p_s.push_back(0.05 * u(rng));
      in.recv_posting = trial % 2 ? RecvPosting::kAhead : RecvPosting::kAtConsumer;
      in.reduce_waits = trial % 3 == 0;
      in.max_active_stages = trial % 4 == 0 ? 1 : 0;
      const PipelineRun run = run_pipeline(in);
      // Critical path of one micro-batch: every stage's forward, then every backward, and each send across
      // ranks twice (forward and backward); and no rank can be busier than the step.
      Plan shape;
      shape.pp = sh.pp;
      shape.pp_schedule = sh.s;
      shape.virtual_stages = sh.V;
      double path = 0;
      for (int s = 0; s < S; ++s)
        path += in.stages[static_cast<std::size_t>(s)].fwd_s + in.stages[static_cast<std::size_t>(s)].bwd_s;
      for (int e = 0; e + 1 < S; ++e)
        if (stage_rank(shape, e) != stage_rank(shape, e + 1))
          path += 2 * in.edge_p2p_s[static_cast<std::size_t>(e)];
      INFO(to_string(sh.s) << " trial " << trial);
      CHECK(run.makespan_s >= path - 1e-9);
      for (double busy : run.rank_busy_s) CHECK(run.makespan_s >= busy - 1e-9);
      // Halving every send (more bandwidth) never makes the step slower: start times are max-plus functions
      // of the durations over fixed orders.
      PipelineInputs faster = in;
      for (double& e : faster.edge_p2p_s) e /= 2;
      CHECK(makespan(faster) <= run.makespan_s + 1e-9);
      PipelineInputs slower = in;
      for (auto& c : slower.stages) c.gather_s *= 2, c.reduce_s *= 2;
      const PipelineRun sr = run_pipeline(slower);
      for (int r = 0; r < sh.pp; ++r)
        CHECK(std::max(sr.rank_end_s[static_cast<std::size_t>(r)],
                       sr.rank_dp_end_s[static_cast<std::size_t>(r)]) >=
              std::max(run.rank_end_s[static_cast<std::size_t>(r)],
                       run.rank_dp_end_s[static_cast<std::size_t>(r)]) -
                  1e-9);
    }
}

TEST_CASE(
    "sends between stages: NVLink inside an NVLink domain, the NIC across, more NIC bandwidth never slower",
    "[simulator][pipeline]") {
  // 16 H100s, pp 4, tp 1: pipeline ranks 4 GPUs apart, stages 0-1 and 2-3 inside a node, 1-2 across nodes;
  // the reported send time is the slowest boundary's: one NCCL send over the NIC.
  Setup s(ModelGraph::from_spec(test::small_llama(8)), load_cluster_spec("dgx-h100"), 16);
  Plan p;
  p.pp = 4;
  p.grad_accum = 8;
  const Result r = s.run(p);
  REQUIRE(r.pipeline);
  const double send = 1.0 * 4096 * 4096 * 2;  // mbs x seq x hidden x 2 bytes
  const double nic = s.costs->collective_s(CollectiveKind::kSendRecv, send, s.cluster->group(2, 8));
  const double nvl = s.costs->collective_s(CollectiveKind::kSendRecv, send, s.cluster->group(2, 4));
  CHECK(nvl < nic);
  CHECK(r.pipeline->p2p_s == Approx(nic));
  // Twice the NIC bandwidth: the step is not slower.
  ClusterSpec fast = load_cluster_spec("dgx-h100");
  fast.node.nic_Bps *= 2;
  Setup s2(ModelGraph::from_spec(test::small_llama(8)), fast, 16);
  CHECK(s2.run(p).step_s <= r.step_s);
}

TEST_CASE("megatron fp8 is Transformer Engine's: weights cast once per step, fused input casts",
          "[simulator][megatron][fp8]") {
  Setup s(ModelGraph::from_spec(test::small_llama(2)), load_cluster_spec("dgx-h100"), 8);
  Plan p;
  p.runtime = Runtime::kMegatron;
  p.zero = 1;
  p.fp8 = Fp8::kTensorwise;
  p.grad_accum = 4;
  const Plan rp = s.resolve(p);
  const auto units = test::units_of(s, rp);
  // Once per step: TE's fp8_cast_transpose of every block linear's weight, read 2 + write 2 bytes per
  // element: 4 x (4 h^2 attention + 3 h f MLP) per block, at the memory-bound bandwidth.
  double first = 0;
  for (const SimUnit& u : units) first += u.fwd_first_mb_s;
  const double h = 4096, f = 11008;
  CHECK(first == Approx(s.costs->memory_s(2 * 4.0 * (4 * h * h + 3 * h * f))));
  // torchao's tensorwise recipe (FSDP2) casts the weights in every forward and backward instead.
  Plan q = p;
  q.runtime = Runtime::kFsdp2;
  q.zero = 3;
  double ao_first = 0;
  for (const SimUnit& u : test::units_of(s, s.resolve(q))) ao_first += u.fwd_first_mb_s;
  CHECK(ao_first == 0);
  // The step's forwards: the first micro-batch alone pays the weight casts.
  const Result r = s.run(p);
  CHECK(r.step_s > 0);
}

TEST_CASE("torchtitan TP saves the column-parallel inputs all-gathered, Megatron saves the shard",
          "[simulator][tp][memory]") {
  // Llama 3 70B widths, TP 8, 4,096 tokens, no AC: the attention and MLP layers each save their 2h input over
  // the whole sequence (reference lane: two 64 MiB all_gather_into_tensor outputs per block), the norms
  // their sequence shard.
  const ModelGraph m = load_model("llama3-70b");
  Plan p;
  p.tp = 8;
  p.seq = 4096;
  const double T = 4096, h = 8192;
  for (const Layer* l : m.order()) {
    if (l->block != 0) continue;
    if (l->kind != LayerKind::kAttention && l->kind != LayerKind::kMlp) continue;
    Plan fsdp = p, megatron = p;
    fsdp.runtime = Runtime::kFsdp2;
    megatron.runtime = Runtime::kMegatron;
    const double gathered = layer_saved_bytes(*l, fsdp, T, false),
                 sharded = layer_saved_bytes(*l, megatron, T, false);
    CHECK(gathered - sharded == Approx(T * 2 * h * (1 - 1.0 / 8)));
    // Op-level SAC recomputes the all-gather: no difference.
    CHECK(layer_saved_bytes(*l, fsdp, T, true) == Approx(layer_saved_bytes(*l, megatron, T, true)));
  }
}

TEST_CASE("megatron's column-parallel backward hides the input re-gather and the dgrad reduce-scatter",
          "[simulator][megatron][tp]") {
  // Llama-2-7B-shaped blocks, TP 8 at 4,096 tokens: each block's two column GEMMs (q/k/v, gate/up) take
  // longer than their all-gathers and reduce-scatters, so only the row-parallel linears' output-gradient
  // all-gathers (two per block, 16-bit) stay in the backward; torchtitan's DTensor backward keeps all four
  // collectives.
  Setup s(ModelGraph::from_spec(test::small_llama(2)), load_cluster_spec("dgx-h100"), 8);
  Plan p;
  p.tp = 8;
  p.runtime = Runtime::kMegatron;
  p.zero = 1;
  Plan q = p;
  q.runtime = Runtime::kFsdp2;
  q.zero = 3;
  const auto mu = test::units_of(s, s.resolve(p)), fu = test::units_of(s, s.resolve(q));
  const GroupView tpg = s.cluster->group(8, 1);
  const double buf = 4096.0 * 4096 * 2;
  const double ag = s.costs->collective_s(CollectiveKind::kAllGather, buf, tpg);
  for (std::size_t i = 0; i < mu.size(); ++i) {
    if (mu[i].blocks == 0) continue;
    CHECK(mu[i].tp_bwd_s == Approx(2.0 * mu[i].blocks * ag));
    CHECK(mu[i].tp_bwd_ag_s == Approx(mu[i].tp_bwd_s));
    CHECK(fu[i].tp_bwd_s > mu[i].tp_bwd_s);
  }
}
