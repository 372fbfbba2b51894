// Pipeline parallelism (simulator/simulate/pipeline_step.hpp): schedule orders, the bubble, activations in
// flight, the stage split, point-to-point bytes, bad input, and pp = 1 leaving results unchanged.
#include <array>
#include <catch2/catch.hpp>
#include <numeric>
#include <string>

#include "sim_helpers.hpp"
#include "simulator/plan/knobs.hpp"
#include "simulator/simulate/pipeline_step.hpp"

using namespace shardplan;
using Catch::Matchers::Contains;
using shardplan::test::equal_stages;
using shardplan::test::Setup;

namespace {

int count_ops(const std::vector<PipeAction>& o, PipeOp op) {
  int n = 0;
  for (const PipeAction& a : o) n += a.op == op;
  return n;
}

}  // namespace

TEST_CASE("1F1B bubble is (p-1)/(m+p-1) for equal stages and free communication", "[simulator][pipeline]") {
  // Every rank computes m x (f + b); the last micro-batch's backward reaches stage 0 after the pipeline fills
  // and drains, (p - 1) x (f + b) later than a bubble-free run: makespan (m + p - 1)(f + b), so
  // bubble = 1 - p m (f + b) / (p (m + p - 1)(f + b)) = (p - 1) / (m + p - 1).
  for (int p : {2, 4, 8})
    for (int m : {p, 2 * p, 3 * p + 1}) {
      const PipelineRun r = run_pipeline(equal_stages(PpSchedule::k1F1B, p, 1, m, 1.0, 2.0));
      CHECK(r.makespan_s == Approx((m + p - 1) * 3.0));
      CHECK(r.bubble_fraction == Approx(static_cast<double>(p - 1) / (m + p - 1)));
    }
  // GPipe has the same bubble with equal stages (all forwards fill, all backwards drain).
  const PipelineRun g = run_pipeline(equal_stages(PpSchedule::kGpipe, 4, 1, 8, 1.0, 2.0));
  CHECK(g.bubble_fraction == Approx(3.0 / 11.0));
}

TEST_CASE("activations in flight: GPipe holds every micro-batch, 1F1B stage s holds min(p - s, m)",
          "[simulator][pipeline]") {
  const int p = 4;
  for (int m : {4, 6, 12}) {
    const PipelineRun g = run_pipeline(equal_stages(PpSchedule::kGpipe, p, 1, m, 1.0, 2.0));
    const PipelineRun o = run_pipeline(equal_stages(PpSchedule::k1F1B, p, 1, m, 1.0, 2.0));
    for (int s = 0; s < p; ++s) {
      // GPipe: every forward runs before the first backward.
      CHECK(g.stage_max_in_flight[static_cast<std::size_t>(s)] == m);
      // 1F1B: stage s warms up with min(m, p - s) forwards (Schedule1F1B), then one backward frees one per
      // forward.
      CHECK(o.stage_max_in_flight[static_cast<std::size_t>(s)] == std::min(p - s, m));
      // One stage per rank at 1000 bytes per micro-batch.
      CHECK(o.rank_peak_activation_bytes[static_cast<std::size_t>(s)] == 1000 * std::min(p - s, m));
    }
  }
}

TEST_CASE("per-rank memory peak over the action sequence: closed forms per schedule",
          "[simulator][pipeline]") {
  // Stages hold 100 bytes through the step, 10 of unsharded gradients from their first backward to their
  // last, 1000 of activations per micro-batch in flight; a forward's working set ends holding its own 1000, a
  // backward's starts with them.
  auto with_state = [](PipelineInputs in) {
    for (StageCost& c : in.stages) c.held_bytes = 100, c.accum_grad_bytes = 10;
    return in;
  };
  const int p = 4;
  for (int m : {4, 6, 12}) {
    const PipelineRun o = run_pipeline(with_state(equal_stages(PpSchedule::k1F1B, p, 1, m, 1.0, 2.0)));
    const PipelineRun g = run_pipeline(with_state(equal_stages(PpSchedule::kGpipe, p, 1, m, 1.0, 2.0)));
    for (int s = 0; s < p; ++s) {
      const auto S = static_cast<std::size_t>(s);
      // 1F1B: the warm-up's w = min(p - s, m) forwards hold w micro-batches; the first backward holds the
      // same w (its own among them) plus the gradients it allocates: 100 + 10 + 1000 w, at that backward.
      const int w = std::min(p - s, m);
      CHECK(o.rank_peak[S].peak_bytes == 110 + 1000 * w);
      CHECK(o.rank_peak[S].op == PipeOp::kBackward);
      CHECK(o.rank_peak[S].micro_batch == 0);
      // GPipe: all m forwards, then the first backward with all m: 110 + 1000 m.
      CHECK(g.rank_peak[S].peak_bytes == 110 + 1000 * m);
    }
  }
  // Interleaved 1F1B (torch _get_1f1b_rank_ops): rank r warms up with W_r = min((V - 1) per_round +
  // 2 (p - 1 - r), m V) forwards, then each steady step runs one forward before one backward, so the first
  // steady forward holds W_r + 1 micro-batches (capped at m V). p 4, V 2, m 8: per_round 4; W = 10, 8, 6, 4.
  const PipelineRun il =
      run_pipeline(with_state(equal_stages(PpSchedule::kInterleaved1F1B, p, 2, 8, 0.5, 1.0)));
  for (int r = 0; r < p; ++r) {
    const int W = std::min(4 + 2 * (p - 1 - r), 16);
    // Two stages per rank hold 2 x 100. Every steady forward-backward pair holds W + 1 micro-batches (the
    // backward's own among them); per_round = 4 steady backwards after the first (on the rank's last stage)
    // the backward reaches its first stage, and from then on both stages' gradients (2 x 10) are held too,
    // while the pairs still hold W + 1 (the cool-down starts after m V - W >= 6 pairs):
    // 200 + 20 + 1000 (W + 1).
    CHECK(il.rank_peak[static_cast<std::size_t>(r)].peak_bytes == 220 + 1000 * std::min(W + 1, 16));
  }
  // The busiest rank is the first: it holds the most micro-batches in every schedule above.
  CHECK(il.rank_peak[0].peak_bytes > il.rank_peak[1].peak_bytes);
  // m = p = 4, V = 4 (the 405B recipe's shape per pp): W_0 = 3 x 4 + 6 = 18 >= m V = 16, so rank 0 runs
  // every forward first, GPipe-like: 16 micro-batches of 4 stages.
  const PipelineRun all = run_pipeline(equal_stages(PpSchedule::kInterleaved1F1B, 4, 4, 4, 0.5, 1.0));
  CHECK(all.rank_peak[0].peak_bytes == 16 * 1000);
}

TEST_CASE("zero-bubble schedules keep a micro-batch's activations from its I to its W",
          "[simulator][pipeline]") {
  // ZB-V, p 2, m 4: with an input-gradient action the activations stay (the W needs them) and the W adds no
  // working set; so each rank's peak counts a micro-batch whose I ran and whose W has not.
  PipelineInputs in = equal_stages(PpSchedule::kZbv, 2, 2, 4, 1.0, 2.0);
  for (StageCost& c : in.stages) c.bwd_work.act_bytes = 1500;  // I: its own 1000 + 500 of gradients
  const PipelineRun z = run_pipeline(in);
  const auto order = pipeline_order(PpSchedule::kZbv, 2, 2, 4);
  for (std::size_t r = 0; r < 2; ++r) {
    // Replay the order by hand: held activations count forwards minus Ws; an I's own 1000 are in its 1500.
    Bytes held = 0, peak = 0;
    for (const PipeAction& a : order[r]) {
      if (a.op == PipeOp::kForward) peak = std::max(peak, held + 1000), held += 1000;
      if (a.op == PipeOp::kBackwardInput) peak = std::max(peak, held - 1000 + 1500);
      if (a.op == PipeOp::kBackwardWeight) peak = std::max(peak, held), held -= 1000;
      if (a.op == PipeOp::kBackward) peak = std::max(peak, held - 1000 + 1500), held -= 1000;
    }
    CHECK(z.rank_peak[r].peak_bytes == peak);
    CHECK(peak >= 2500);  // at least one forward held when the first I runs
  }
}

TEST_CASE("parameter all-gathers run ahead on the data-parallel stream: only the first rank waits",
          "[simulator][pipeline]") {
  // 1F1B p 4, m 8, f 1, b 2; each stage's gathers take 1.5 and expose all of it when started with the forward
  // (first_fwd_extra 1.5). They start at t = 0 on every rank: rank 0's first forward ends at 0 + 1 + 1.5
  // = 2.5; rank r > 0 receives its first input at 2.5 + (r - 1) > 1.5, its gathers long done. The makespan is
  // the 1F1B one (m + p - 1)(f + b) = 33 plus rank 0's 1.5 once, not 1.5 per stage on the fill's critical
  // path.
  PipelineInputs in = equal_stages(PpSchedule::k1F1B, 4, 1, 8, 1.0, 2.0);
  for (StageCost& c : in.stages) c.gather_s = 1.5, c.first_fwd_extra_s = 1.5;
  const PipelineRun r = run_pipeline(in);
  CHECK(r.rank_gather_wait_s[0] == Approx(1.5));
  for (std::size_t k = 1; k < 4; ++k) CHECK(r.rank_gather_wait_s[k] == 0.0);
  CHECK(r.makespan_s == Approx(33.0 + 1.5));
  // Interleaved, V 2: a rank's second stage's gathers queue behind its first's (1.5 + 1.5 = 3 on rank 0) and
  // are done long before its first forward of stage 4 (after the fill of stages 0..3: t >= 2.5 + 3 x 0.5).
  PipelineInputs il = equal_stages(PpSchedule::kInterleaved1F1B, 4, 2, 8, 0.5, 1.0);
  for (StageCost& c : il.stages) c.gather_s = 1.5, c.first_fwd_extra_s = 1.5;
  const PipelineRun ri = run_pipeline(il);
  CHECK(ri.rank_gather_wait_s[0] == Approx(1.5));
}

TEST_CASE("interleaved 1F1B bubble is (p-1)/(V m + p-1) for equal stages, m a multiple of p",
          "[simulator][pipeline]") {
  // Megatron's interleaved analysis: the fill and drain take (p - 1)(f + b) of a virtual stage's f + b, the
  // work m V (f + b): bubble (p - 1) / (V m + p - 1). torch's order reaches it with the backward twice the
  // forward, the 405B recipe's shape (p 16, m 16) included.
  for (auto [p, V, m] : {std::array<int, 3>{4, 2, 8}, {4, 4, 8}, {16, 2, 16}, {16, 4, 16}, {8, 2, 16}}) {
    const PipelineRun r = run_pipeline(equal_stages(PpSchedule::kInterleaved1F1B, p, V, m, 1.0, 2.0));
    CHECK(r.bubble_fraction == Approx(static_cast<double>(p - 1) / (V * m + p - 1)).epsilon(1e-9));
  }
}

TEST_CASE("interleaved 1F1B follows torch's warmup: (V-1) x per_round + 2 (p-1-r) forwards first",
          "[simulator][pipeline]") {
  // p 4, V 2, m 8: rounds = 2, 4 micro-batches per round; rank 0 warms up with 4 + 2 x 3 = 10 forwards
  // (stage 0 mb 0-3, stage 4 mb 0-3, stage 0 mb 4-5), the last rank with 4; the steady phase then issues
  // F before B (_get_1f1b_rank_ops), so the first backward follows warmup + 1 forwards.
  const auto order = pipeline_order(PpSchedule::kInterleaved1F1B, 4, 2, 8);
  int warm0 = 0;
  while (order[0][static_cast<std::size_t>(warm0)].op == PipeOp::kForward) ++warm0;
  CHECK(warm0 == 11);
  CHECK(order[0][4].stage == 4);
  CHECK(order[0][8].stage == 0);
  CHECK(order[0][8].micro_batch == 4);
  int warm3 = 0;
  while (order[3][static_cast<std::size_t>(warm3)].op == PipeOp::kForward) ++warm3;
  CHECK(warm3 == 5);
  // Each rank runs every (stage, micro-batch) once forward and once backward: 2 stages x 8.
  for (const auto& o : order) {
    CHECK(count_ops(o, PipeOp::kForward) == 16);
    CHECK(count_ops(o, PipeOp::kBackward) == 16);
  }
  // It runs to completion, and its bubble is below plain 1F1B's (p-1)/(m+p-1) = 3/11 with the same work
  // split into twice as many half-size stages.
  const PipelineRun r = run_pipeline(equal_stages(PpSchedule::kInterleaved1F1B, 4, 2, 8, 0.5, 1.0));
  CHECK(r.bubble_fraction < 3.0 / 11.0);
}

TEST_CASE("zero-bubble V schedules split backward into I and W and complete", "[simulator][pipeline]") {
  for (PpSchedule s : {PpSchedule::kZbv, PpSchedule::kDualPipeV}) {
    const int p = 4, m = 8;
    const auto order = pipeline_order(s, p, 2, m);
    for (std::size_t r = 0; r < order.size(); ++r) {
      const auto& o = order[r];
      // Two stages per rank, V-shaped: r and 2p - 1 - r; every micro-batch forwarded once on each.
      CHECK(count_ops(o, PipeOp::kForward) == 2 * m);
      // Every micro-batch's gradient: a full backward, or an I with its W.
      CHECK(count_ops(o, PipeOp::kBackward) + count_ops(o, PipeOp::kBackwardInput) == 2 * m);
      CHECK(count_ops(o, PipeOp::kBackwardInput) == count_ops(o, PipeOp::kBackwardWeight));
      for (const PipeAction& a : o)
        CHECK((a.stage == static_cast<int>(r) || a.stage == 2 * p - 1 - static_cast<int>(r)));
    }
    const PipelineRun run = run_pipeline(equal_stages(s, p, 2, m, 1.0, 2.0));
    CHECK(run.bubble_fraction >= 0);
    CHECK(run.bubble_fraction < 3.0 / 11.0);
  }
  // ZB-V with F = I = W (the paper's zero-bubble condition) and m >= 2p - 1: ZBV's own claim of no bubble in
  // the steady state leaves only the fill and drain, below 1F1B's (p - 1)/(m + p - 1).
  const PipelineRun z = run_pipeline(equal_stages(PpSchedule::kZbv, 4, 2, 16, 1.0, 2.0));
  CHECK(z.bubble_fraction < 3.0 / 19.0);
}

TEST_CASE("more micro-batches never increase the bubble fraction", "[simulator][pipeline]") {
  for (PpSchedule s :
       {PpSchedule::kGpipe, PpSchedule::k1F1B, PpSchedule::kInterleaved1F1B, PpSchedule::kZbv}) {
    const int V = s == PpSchedule::kGpipe || s == PpSchedule::k1F1B ? 1 : 2;
    double prev = 1.0;
    for (int m = 4; m <= 32; m += 4) {
      const PipelineRun r = run_pipeline(equal_stages(s, 4, V, m, 1.0, 2.0, 0.05));
      CHECK(r.bubble_fraction <= prev + 1e-12);
      prev = r.bubble_fraction;
    }
  }
}

TEST_CASE("torchtitan's stage split: embedding and head count as one layer each", "[simulator][pipeline]") {
  Plan p;
  p.pp = 4;
  p.virtual_stages = 1;
  // 32 blocks + 2 = 34 effective layers over 4 stages: 9, 9, 8, 8; the first loses one to the embedding,
  // the last one to norm + head (torchtitan _generate_llm_fqn_per_model_part): 8, 9, 8, 7.
  CHECK(stage_blocks(p, 32) == std::vector<int>{8, 9, 8, 7});
  // 126 blocks (405B), 16 stages: 128 / 16 = 8 each: 7, 8 x 14, 7.
  p.pp = 16;
  const auto b = stage_blocks(p, 126);
  CHECK(b.front() == 7);
  CHECK(b.back() == 7);
  CHECK(std::accumulate(b.begin(), b.end(), 0) == 126);
  p.pp_layers = {3, 4, 4, 3};
  p.pp = 4;
  CHECK(stage_blocks(p, 14) == std::vector<int>{3, 4, 4, 3});
}

TEST_CASE("bad pipeline plans: one clear InputError naming the knob", "[simulator][pipeline][plan]") {
  Setup s(ModelGraph::from_spec(test::small_llama(8)), load_cluster_spec("dgx-h100"), 16);
  Plan p;
  p.pp = 3;  // 16 GPUs: 3 does not divide
  CHECK_THROWS_WITH(s.resolve(p), Contains("--pp") && Contains("does not divide"));
  p.pp = 4;
  p.grad_accum = 2;  // 1F1B needs m >= pp
  CHECK_THROWS_WITH(s.resolve(p), Contains("--grad-accum") && Contains("1f1b"));
  p.grad_accum = 4;
  CHECK(s.resolve(p).dp == 4);  // 16 / (tp 1 x pp 4)
  p.pp_layers = {2, 2, 2};
  CHECK_THROWS_WITH(s.resolve(p), Contains("--pp-layers") && Contains("4 entries"));
  p.pp_layers = {2, 2, 2, 3};
  CHECK_THROWS_WITH(s.resolve(p), Contains("--pp-layers") && Contains("sum to 9"));
  p.pp_layers.clear();
  p.pp = 8;
  p.grad_accum = 8;
  p.pp_schedule = PpSchedule::kInterleaved1F1B;  // 16 stages > 8 blocks + 2
  CHECK_THROWS_WITH(s.resolve(p), Contains("--pp") && Contains("exceeds"));
  p.pp = 2;
  p.pp_schedule = PpSchedule::kZbv;
  p.virtual_stages = 3;
  CHECK_THROWS_WITH(s.resolve(p), Contains("--virtual-stages") && Contains("exactly 2"));
  p.virtual_stages = 0;
  p.pp_schedule = PpSchedule::kDualPipeV;
  p.grad_accum = 3;  // 4 stages
  CHECK_THROWS_WITH(s.resolve(p), Contains("--grad-accum") && Contains("dualpipev"));
  p.pp_schedule = PpSchedule::k1F1B;
  p.grad_accum = 4;
  p.runtime = Runtime::kDeepSpeed;
  p.zero = 3;
  CHECK_THROWS_WITH(s.resolve(p), Contains("--pp") && Contains("ZeRO-2 and ZeRO-3"));
  p.zero = 1;
  CHECK(s.resolve(p).pp == 2);
  Plan bad;
  CHECK_THROWS_WITH(set_knob(*find_knob("pp_layers"), bad, "3,x", "--pp-layers"), Contains("--pp-layers"));
}

TEST_CASE("a pipelined step: per-stage memory, p2p bytes in closed form, FSDP not resharded",
          "[simulator][pipeline]") {
  // 8 blocks, 16 H100s: tp 2 x pp 4 x dp 2; 1F1B with 8 micro-batches of mbs 1 x seq 4096.
  Setup s(ModelGraph::from_spec(test::small_llama(8)), load_cluster_spec("dgx-h100"), 16);
  Plan p;
  p.tp = 2;
  p.pp = 4;
  p.grad_accum = 8;
  const Plan rp = s.resolve(p);
  CHECK(rp.dp == 2);
  // torchtitan under PP: reshard_after_forward=False, i.e. SHARD_GRAD_OP (--zero 2).
  CHECK(rp.zero == 2);
  CHECK(!rp.reshard());
  const Result r = s.run(p);
  REQUIRE(r.pipeline);
  const PipelineSummary& ps = *r.pipeline;
  CHECK(ps.stages == 4);
  REQUIRE(ps.stage_detail.size() == 4);
  // Split of 8 blocks + 2 over 4 stages: 10 / 4 = 2 rem 2 -> effective 3, 3, 2, 2 -> blocks 2, 3, 2, 1.
  CHECK(ps.stage_detail[0].blocks == 2);
  CHECK(ps.stage_detail[1].blocks == 3);
  CHECK(ps.stage_detail[3].blocks == 1);
  CHECK(ps.stage_detail[0].embedding);
  CHECK(ps.stage_detail[3].head);
  // 1F1B in flight: stage s holds min(4 - s, 8).
  for (int st = 0; st < 4; ++st)
    CHECK(ps.stage_detail[static_cast<std::size_t>(st)].activations_in_flight == 4 - st);
  // A middle rank sends each micro-batch's activations forward and its gradient backward:
  // 2 x 8 sends of mbs x seq x hidden x 2 bytes / tp = 4096 x 4096 x 2 / 2 bytes.
  CHECK(ps.p2p_bytes_per_step == Approx(2.0 * 8 * 4096.0 * 4096 * 2 / 2));
  // The reported peak is the busiest rank's, and every stage reports its rank's peak.
  Bytes max_peak = 0;
  for (const auto& d : ps.stage_detail) max_peak = std::max(max_peak, d.peak_bytes);
  CHECK(r.peak_bytes == max_peak);
  Bytes sum = 0;
  for (Bytes b : r.breakdown) sum += b;
  CHECK(sum == r.peak_bytes);
  // The step is at least the busiest rank's compute plus the bubble: every rank computes 8 micro-batches.
  CHECK(r.step_s >= 8 * (ps.stage_detail[1].fwd_s + ps.stage_detail[1].bwd_s));
  CHECK(ps.bubble_fraction > 0);
  CHECK(ps.bubble_fraction < 1);
  // Tokens per GPU: mbs x seq x m / (tp x pp).
  CHECK(r.tokens_per_s_per_gpu == Approx(4096.0 * 8 / 8 / r.step_s));
}

TEST_CASE("pp = 1 leaves the simulation unchanged", "[simulator][pipeline]") {
  Setup s("llama3-8b", "dgx-h100", 8);
  Plan p;
  p.grad_accum = 2;
  const Result a = s.run(p);
  Plan q = p;
  q.pp = 1;
  q.pp_schedule = PpSchedule::k1F1B;
  const Result b = s.run(q);
  CHECK(!a.pipeline);
  CHECK(a.peak_bytes == b.peak_bytes);
  CHECK(a.step_s == b.step_s);
  CHECK(s.resolve(p).dp == 8);
}

TEST_CASE(
    "expert parallelism under pipeline parallelism: the all-to-alls are in every micro-batch's stage cost",
    "[simulator][pipeline][ep]") {
  // Issue 30: the one-micro-batch stage simulations kept the EP all-to-alls out of the stage's forward and
  // backward, so a pipelined step dropped them (Qwen3-30B-A3B, 16 H100, EP 8, 2 stages: one micro-batch's
  // all-to-all time reported, none exposed). They block the compute stream (the experts wait for their
  // tokens): each forward carries the dispatch and combine, each backward the mirrored pair.
  Setup s("qwen3-30b-a3b", "dgx-h100", 16);
  Plan p;
  p.seq = 4096;
  p.ep = 8;
  p.pp = 2;
  const Plan rp = s.resolve(p, 256);
  const int m = rp.grad_accum;
  const Result r = s.run(rp);
  const CommStats& a2a = r.comm[static_cast<int>(CommKind::kAllToAll)];
  // 48 MoE layers, 24 per stage (the busiest stage's rank holds one stage): 4 all-to-alls per layer and
  // micro-batch.
  CHECK(a2a.count == 24 * 4 * m);
  CHECK(a2a.exposed_s == Approx(a2a.time_s).epsilon(1e-9));
  CHECK(a2a.exposed_s > 0);
  // The same all-to-all volume per micro-batch as without PP, over the stage's half of the layers.
  Plan q = p;
  q.pp = 1;
  const Plan rq = s.resolve(q, 256);
  const Result r1 = s.run(rq);
  const CommStats& a2a1 = r1.comm[static_cast<int>(CommKind::kAllToAll)];
  CHECK(a2a.time_s / m == Approx(0.5 * a2a1.time_s / rq.grad_accum).epsilon(1e-6));
}

TEST_CASE("property: at equal compute, expert parallelism never makes a pipelined step faster than EP 1",
          "[simulator][pipeline][ep][properties]") {
  // With moe_imbalance 1 the experts' compute is the same with and without EP (each rank runs its tokens'
  // share of the expert FLOPs either way); EP adds the blocking all-to-alls to every stage's forward and
  // backward, and the dispatcher's permutations (units_moe.cpp). With F 1.5 the busiest EP rank's experts
  // run 1.5 times the rows (GEMMs, elementwise work, all-to-all bytes): more again, never less. What EP can
  // save is data-parallel traffic: the experts are all-gathered and reduced over the efsdp ranks instead of
  // all of them, and each rank steps a different set of optimizer shards. So: every stage's forward and
  // backward are at least EP 1's, and the step is at least EP 1's less what the data-parallel collectives and
  // the optimizer got shorter.
  struct M {
    const char* what;
    ModelGraph model;
  };
  std::vector<M> models;
  models.push_back({"qwen3-30b-a3b", load_model("qwen3-30b-a3b")});
  models.push_back({"deepseek-small (MLA, 64 experts)", test::deepseek_small()});
  int checked = 0;
  for (const M& mod : models) {
    Setup s(mod.model, load_cluster_spec("dgx-h100"), 16);
    // Equal compute: a GEMM efficiency that does not depend on the shape, so that EP's larger token groups
    // per local expert (routed_experts_gemm_s, tested in test_cp_ep.cpp) do not speed the experts up.
    CalibrationHooks flat;
    flat.gemm_efficiency = [](double, double, double) { return std::optional<double>(0.6); };
    s.costs = std::make_unique<CostModel>(*s.cluster, std::nullopt, flat);
    for (int pp : {2, 4})
      for (PpSchedule sched : {PpSchedule::k1F1B, PpSchedule::kGpipe, PpSchedule::kInterleaved1F1B})
        for (AcMode ac : {AcMode::kNone, AcMode::kFull})
          for (int ep : {2, 4})
            for (double imbalance : {1.0, 1.5}) {
              INFO(mod.what << " pp " << pp << " " << to_string(sched) << " ac " << to_string(ac) << " ep "
                            << ep << " F " << imbalance);
              Plan p;
              p.seq = 4096;
              p.pp = pp;
              p.pp_schedule = sched;
              p.virtual_stages = sched == PpSchedule::kInterleaved1F1B ? 2 : 1;
              p.ac = ac;
              p.moe_imbalance = 1.0;
              Plan base, with;
              try {
                base = s.resolve(p, 64);
                p.ep = ep;
                p.moe_imbalance = imbalance;  // the busiest EP rank's extra rows only add to EP's side
                with = s.resolve(p, 64);
              } catch (const InputError&) {
                continue;  // a stage split this model cannot take
              }
              const Result a = s.run(base), b = s.run(with);
              REQUIRE(a.pipeline);
              REQUIRE(b.pipeline);
              for (std::size_t k = 0; k < a.pipeline->stage_detail.size(); ++k) {
                CHECK(b.pipeline->stage_detail[k].fwd_s >= a.pipeline->stage_detail[k].fwd_s * (1 - 1e-12));
                CHECK(b.pipeline->stage_detail[k].bwd_s >= a.pipeline->stage_detail[k].bwd_s * (1 - 1e-12));
              }
              auto dp_s = [](const Result& r) {
                double t = 0;
                for (CommKind k : {CommKind::kAllGather, CommKind::kReduceScatter, CommKind::kAllReduce})
                  t += r.comm[static_cast<int>(k)].time_s;
                return t;
              };
              const double saved =
                  std::max(0.0, dp_s(a) - dp_s(b)) + std::max(0.0, a.optimizer_s - b.optimizer_s);
              CHECK(b.step_s >= a.step_s - saved - 1e-9);
              CHECK(b.comm[static_cast<int>(CommKind::kAllToAll)].exposed_s > 0);
              ++checked;
            }
  }
  CHECK(checked >= 48);
}
